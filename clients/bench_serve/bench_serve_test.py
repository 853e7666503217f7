"""strata-bench-serve end to end.

1. Against a scripted OpenAI-style server whose timing is known (first token after 300 ms, then
   a token every 100 ms, usage in the last chunk; every third request refused with a 400): the
   measured TTFT, TPOT and ITL bracket the script's, the concurrency cap holds, the failures are
   counted and named, goodput follows the SLO, the request bodies are what vLLM's benchmark
   sends (streaming, usage, max_tokens, ids inside the server's vocabulary).
2. Bad flags and an unreachable server: exit status 2 and a message naming the problem.
3. Against `strata serve` with the demo model: every request completes with exactly the tokens
   asked for (--ignore-eos), the input tokens are the prompts' ids, and the server's own
   Prometheus counters moved by the same amounts; a ShareGPT file through the chat endpoint.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BENCH = os.environ["STRATA_BENCH_SERVE"]
STRATA = os.environ["STRATA_BIN"]

TTFT_S, TPOT_S, VOCAB = 0.3, 0.1, 50


class Scripted(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    lock = threading.Lock()
    bodies, active, max_active, count = [], 0, 0, 0

    def log_message(self, *args):
        pass

    def reply_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self.reply_json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
        elif self.path == "/server_info":
            self.reply_json(200, {"model": {"vocab_size": 1000, "tokenizer_vocab_size": VOCAB}})
        else:
            self.reply_json(404, {"error": {"message": "no such path"}})

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        with cls.lock:
            cls.bodies.append(body)
            cls.count += 1
            refuse = cls.count % 3 == 0
            cls.active += 1
            cls.max_active = max(cls.max_active, cls.active)

        def finished():  # before the last bytes: the client cannot have seen the end yet
            with cls.lock:
                cls.active -= 1

        if refuse:
            time.sleep(0.05)
            finished()
            self.reply_json(400, {"error": {"message": "prompt too long", "type": "x"}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        n = body["max_tokens"]
        time.sleep(TTFT_S)
        for i in range(n):
            if i > 0:
                time.sleep(TPOT_S)
            event = {"choices": [{"index": 0, "text": f"t{i} "}]}
            self.chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n}
        self.chunk(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        finished()
        self.chunk(b"data: [DONE]\n\n")
        self.chunk(b"")


def scripted_server(port=0):
    """A scripted server (on a free port by default), with its own request log and counters."""
    handler = type("ScriptedRun", (Scripted,), {"lock": threading.Lock(), "bodies": [],
                                                "active": 0, "max_active": 0, "count": 0})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    server.handle_error = lambda request, address: None  # clients that timed out and left
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


def run_bench(*args, timeout=240):
    return subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=timeout)


class ScriptedServerTest(unittest.TestCase):
    def test_timing_concurrency_failures_and_request_bodies(self):
        server, handler = scripted_server()
        out = tempfile.mkdtemp()
        try:
            r = run_bench("--base-url", f"http://127.0.0.1:{server.server_port}",
                          "--num-prompts", "9", "--max-concurrency", "2",
                          "--random-input-len", "8", "--random-output-len", "6",
                          "--ignore-eos", "--temperature", "0.5",
                          "--goodput", "ttft:250", "e2el:60000",  # vLLM's form: one word each
                          "--metric-percentiles", "50,99", "--percentile-metrics",
                          "ttft,tpot,itl,e2el", "--save-result", "--result-dir", out,
                          "--result-filename", "r.json")
        finally:
            server.shutdown()
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)  # some requests failed
        self.assertIn("Serving Benchmark Result", r.stdout)
        self.assertIn("HTTP 400: prompt too long", r.stderr)
        with open(os.path.join(out, "r.json")) as f:
            j = json.load(f)
        self.assertEqual((j["completed"], j["failed"]), (6, 3))
        self.assertEqual(j["errors"].count("HTTP 400: prompt too long"), 3)
        self.assertEqual(j["total_output_tokens"], 36)  # from the usage chunks
        self.assertEqual(j["total_input_tokens"], 48)
        self.assertEqual(j["model_id"], "scripted")
        self.assertEqual(j["request_goodput"], 0.0)  # every TTFT is ≥ 300 ms > 250
        # The script's delays are lower bounds; the upper bounds leave room for a loaded machine.
        self.assertGreaterEqual(j["median_ttft_ms"], TTFT_S * 1e3)
        self.assertLess(j["median_ttft_ms"], TTFT_S * 1e3 + 500)
        self.assertGreaterEqual(j["median_tpot_ms"], TPOT_S * 1e3)
        self.assertLess(j["median_tpot_ms"], TPOT_S * 1e3 + 100)
        self.assertGreaterEqual(j["p50_itl_ms"], TPOT_S * 1e3)
        self.assertGreaterEqual(j["median_e2el_ms"], (TTFT_S + 5 * TPOT_S) * 1e3)
        self.assertIn("p99_e2el_ms", j)
        for itls in j["itls"]:
            self.assertIn(len(itls), (0, 5))  # 6 chunks: 5 gaps (none for the refused)
        # Two at a time: 6 streams of ≥ 0.8 s each ≥ 2.4 s.
        self.assertLessEqual(handler.max_active, 2)
        self.assertGreaterEqual(j["duration"], 2.4)
        self.assertAlmostEqual(j["request_throughput"], 6 / j["duration"], places=6)
        self.assertEqual(len(handler.bodies), 9)
        for body in handler.bodies:
            self.assertTrue(body["stream"])
            self.assertEqual(body["stream_options"], {"include_usage": True})
            self.assertEqual(body["max_tokens"], 6)
            self.assertTrue(body["ignore_eos"])
            self.assertEqual(body["temperature"], 0.5)
            self.assertEqual(body["model"], "scripted")
            self.assertEqual(len(body["prompt"]), 8)
            self.assertTrue(all(0 <= t < VOCAB for t in body["prompt"]))


    def test_request_timeout_fails_slow_requests_naming_the_limit(self):
        server, _ = scripted_server()
        try:
            start = time.time()
            r = run_bench("--base-url", f"http://127.0.0.1:{server.server_port}",
                          "--num-prompts", "4", "--random-input-len", "4",
                          "--random-output-len", "3", "--request-timeout", "0.15")
            elapsed = time.time() - start
        finally:
            server.shutdown()
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"Successful requests:\s+0\n")
        self.assertRegex(r.stdout, r"Failed requests:\s+4\n")
        self.assertTrue("no complete response within --request-timeout 0.15 s" in r.stderr
                        or "HTTP 400" in r.stderr, r.stderr)
        self.assertLess(elapsed, 10)


    def test_ready_check_waits_for_a_server_that_starts_late(self):
        import socket
        with socket.socket() as probe:  # a free port, listened on only later
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        bench = subprocess.Popen(
            [BENCH, "--base-url", f"http://127.0.0.1:{port}", "--num-prompts", "2",
             "--random-input-len", "4", "--random-output-len", "2", "--ready-check-timeout-sec",
             "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)
        self.assertIsNone(bench.poll(), "gave up before the server started")
        server, _ = scripted_server(port)
        try:
            out, err = bench.communicate(timeout=120)
        finally:
            server.shutdown()
        self.assertEqual(bench.returncode, 0, out + err)
        self.assertRegex(out, r"Successful requests:\s+2\n")


class BadInputTest(unittest.TestCase):
    def test_bad_flags_and_no_server_exit_2_naming_the_problem(self):
        for args, words in [
            (["--random-range-ratio", "2"], "[0, 1)"),
            (["--request-rate", "fast"], "not a positive number"),
            (["--goodput", "latency:5"], "ttft, tpot or e2el"),
            (["--num-prompts", "0"], "--num-prompts must be >= 1"),
            (["--dataset-name", "sharegpt"], "--dataset-path"),
            (["--endpoint", "/v1/chat/completions"], "/v1/completions"),
            (["--base-url", "https://x:1"], "https is not supported"),
            (["--frobnicate"], "unknown flag --frobnicate"),
            (["--backend", "tgi"], "openai, vllm or openai-chat"),
            # openai-chat means the chat endpoint, which the random (token-id) dataset cannot use
            (["--backend", "openai-chat"], "use --endpoint /v1/completions"),
            (["--base-url", "http://127.0.0.1:9"], "cannot connect"),
        ]:
            r = run_bench(*args, timeout=60)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertIn(words, r.stderr, args)


class StrataServeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc = subprocess.Popen(
            [STRATA, "serve", "--host", "127.0.0.1", "--port", "0", "--grpc-port", "0",
             "--kv-cache-memory", "128MiB", "--log-level", "warn"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 240
        for line in cls.proc.stdout:
            m = re.search(r"on http://127\.0\.0\.1:(\d+) ", line)
            if m:
                cls.url = f"http://127.0.0.1:{m.group(1)}"
                break
            if time.time() > deadline:
                break
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(cls.url + "/ready", timeout=2).status == 200:
                    break
            except Exception:
                time.sleep(0.1)
        threading.Thread(target=cls.proc.stdout.read, daemon=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        cls.proc.wait(timeout=60)

    def counters(self):
        text = urllib.request.urlopen(self.url + "/metrics", timeout=10).read().decode()
        out = {}
        for name in ("strata:generation_tokens_total", "strata:prompt_tokens_total"):
            out[name] = sum(float(l.split()[-1]) for l in text.splitlines()
                            if l.startswith(name + "{"))
        out["success"] = sum(float(l.split()[-1]) for l in text.splitlines()
                             if l.startswith("strata:request_success_total{"))
        return out

    def test_random_dataset_completes_exactly_and_matches_the_server_counters(self):
        before = self.counters()
        out = tempfile.mkdtemp()
        r = run_bench("--base-url", self.url, "--num-prompts", "8", "--request-rate", "20",
                      "--random-input-len", "32", "--random-output-len", "8", "--ignore-eos",
                      "--seed", "1", "--save-result", "--result-dir", out,
                      "--result-filename", "r.json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(out, "r.json")) as f:
            j = json.load(f)
        # The server publishes its step counters every 200 ms: poll until they settle.
        deadline = time.time() + 20
        after = self.counters()
        while time.time() < deadline:
            time.sleep(0.5)
            settled, after = after, self.counters()
            if settled == after and after["success"] - before["success"] >= 8:
                break
        self.assertEqual((j["completed"], j["failed"]), (8, 0))
        self.assertEqual(j["total_output_tokens"], 64)
        self.assertEqual(j["total_input_tokens"], 256)
        self.assertEqual(j["request_rate"], 20)
        self.assertEqual(after["strata:generation_tokens_total"]
                         - before["strata:generation_tokens_total"], 64)
        self.assertEqual(after["strata:prompt_tokens_total"]
                         - before["strata:prompt_tokens_total"], 256)
        self.assertEqual(after["success"] - before["success"], 8)
        for ttft, itls in zip(j["ttfts"], j["itls"]):
            self.assertGreater(ttft, 0)
            self.assertLessEqual(len(itls), 7)
        self.assertLessEqual(j["median_ttft_ms"], j["median_e2el_ms"])

    def test_sharegpt_file_through_the_chat_endpoint(self):
        path = os.path.join(tempfile.mkdtemp(), "sharegpt.json")
        convs = [{"conversations": [{"from": "human", "value": f"Tell me about topic {i}, please."},
                                    {"from": "gpt", "value": "It is a topic. " * (i + 1)}]}
                 for i in range(3)]
        with open(path, "w") as f:
            json.dump(convs, f)
        r = run_bench("--base-url", self.url, "--backend", "openai-chat",  # the chat endpoint
                      "--dataset-name", "sharegpt", "--dataset-path", path,
                      "--num-prompts", "3", "--sharegpt-output-len", "5", "--ignore-eos")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"Successful requests:\s+3\n")
        self.assertRegex(r.stdout, r"Total generated tokens:\s+15\n")


if __name__ == "__main__":
    unittest.main(verbosity=2)
