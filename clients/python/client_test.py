"""Interop test of the Python client (Debian's python3-grpcio) against a real `strata serve`
(the embedded demo model) on free loopback ports: streaming, cancellation, errors, and gRPC vs
HTTP (/v1/completions) and vs the C++ strata-client giving identical output.

Environment (set by ctest, clients/CMakeLists.txt): STRATA_BIN, STRATA_CLIENT_BIN, PYTHONPATH
(this directory and the generated stubs)."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc

from strata_client import Client, build_request


class Server:
    def __init__(self, *flags):
        cache = os.environ.get("STRATA_CACHE_DIR") or os.path.join(
            tempfile.gettempdir(), "strata_grpc_client_test_cache")
        self.proc = subprocess.Popen(
            [os.environ["STRATA_BIN"], "serve", "--host", "127.0.0.1", "--port", "0",
             "--grpc-port", "0", "--kv-cache-memory", "128MiB", "--log-level", "warn", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "STRATA_CACHE_DIR": cache})
        self.http_port = self.grpc_port = None
        deadline = time.time() + 120
        for line in self.proc.stdout:
            m = re.search(r"on http://127\.0\.0\.1:(\d+) ", line)
            if m:
                self.http_port = int(m.group(1))
            m = re.search(r"gRPC API \(strata\.v1\) on 127\.0\.0\.1:(\d+)", line)
            if m:
                self.grpc_port = int(m.group(1))
                break
            if time.time() > deadline:
                break
        if not self.grpc_port:
            self.proc.kill()
            raise RuntimeError(
                "strata serve did not print its gRPC port: " + self.proc.stderr.read())
        # Keep draining stdout so the server never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
        self.target = f"127.0.0.1:{self.grpc_port}"

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9


def png_bytes(width, height, seed):
    """A width × height RGB PNG (Pillow) whose pixels depend on `seed`."""
    import io
    from PIL import Image
    img = Image.new("RGB", (width, height))
    img.putdata([((x * 7 + seed * 60) % 256, (y * 5 + seed * 90) % 256,
                  ((x ^ y) * 3 + seed * 30) % 256) for y in range(height) for x in range(width)])
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def wait_empty(client, min_aborted_total=0, timeout=10.0):
    """Waits until `min_aborted_total` requests were aborted and the engine holds nothing."""
    deadline = time.time() + timeout
    loads = client.loads()
    while time.time() < deadline and not (
            loads.num_aborted_total >= min_aborted_total and loads.num_unfinished == 0 and
            loads.num_running == 0 and
            loads.num_free_blocks == loads.num_blocks and
            loads.num_free_slots == loads.num_slots):
        time.sleep(0.01)
        loads = client.loads()
    return loads


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.client = Client(cls.server.target)
        cls.max_len = cls.client.model_info().max_model_len

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        assert cls.server.stop() == 0

    def test_streams_a_generation(self):
        chunks, completes = [], []
        for response in self.client.stream(prompt_ids=[1, 2, 3], max_tokens=10, ignore_eos=True):
            (chunks if response.HasField("chunk") else completes).append(response)
        ids = [t for r in chunks for t in r.chunk.token_ids]
        self.assertEqual(len(ids), 10)
        self.assertEqual(len(completes), 1)
        self.assertEqual(completes[0].complete.finish_reason, "length")
        self.assertEqual(completes[0].complete.usage.completion_tokens, 10)
        self.assertEqual([r.chunk.usage.completion_tokens for r in chunks], list(range(1, 11)))

    def test_cancelling_a_stream_frees_its_cache(self):
        before = self.client.loads().num_aborted_total
        call = self.client.stream(prompt_ids=[4, 5, 6], max_tokens=self.max_len - 3,
                                  ignore_eos=True)
        received = 0
        with self.assertRaises(grpc.RpcError) as caught:
            for _ in call:
                received += 1
                if received == 3:
                    call.cancel()
        self.assertEqual(caught.exception.code(), grpc.StatusCode.CANCELLED)
        loads = wait_empty(self.client, before + 1)
        self.assertEqual(loads.num_unfinished, 0)
        self.assertEqual(loads.num_free_blocks, loads.num_blocks)
        self.assertEqual(loads.num_aborted_total, before + 1)

    def test_invalid_argument_names_the_field(self):
        with self.assertRaises(grpc.RpcError) as caught:
            self.client.generate(prompt_ids=[1, 2], max_tokens=4, top_p=0.0)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("top_p", caught.exception.details())

    def test_image_bytes_become_the_images_rows(self):
        pad = self.client.model_info().media_placeholder_token_id
        self.assertGreaterEqual(pad, 0)  # the demo model has a vision tower
        image = png_bytes(448, 448, seed=1)
        ids = [5, pad, 6, 7]
        kwargs = dict(prompt_ids=ids, max_tokens=8, temperature=0.0, ignore_eos=True)
        with_image = self.client.generate(images=[image], **kwargs)
        without = self.client.generate(**kwargs)  # the placeholder's own embedding
        self.assertEqual(without.complete.usage.prompt_tokens, len(ids))
        # K3's budget: 448 / 14 = 32 patches a side, merged 2 × 2: 16 × 16 = 256 rows.
        self.assertEqual(with_image.complete.usage.prompt_tokens, len(ids) - 1 + 256)
        self.assertNotEqual(with_image.token_ids, without.token_ids)
        other = self.client.generate(images=[png_bytes(448, 448, seed=2)], **kwargs)
        self.assertEqual(other.complete.usage.prompt_tokens, len(ids) - 1 + 256)
        self.assertNotEqual(other.token_ids, with_image.token_ids)
        # The placeholder's text in a text prompt; a file path works as well as bytes.
        with tempfile.NamedTemporaryFile(suffix=".png") as f:
            f.write(image)
            f.flush()
            text = self.client.generate(prompt="look: <|media_pad|> ok", images=[f.name],
                                        max_tokens=4, temperature=0.0, ignore_eos=True)
        self.assertEqual(text.complete.usage.prompt_tokens,
                         len(self.client.tokenize("look: <|media_pad|> ok")) - 1 + 256)

    def test_bad_images_are_invalid_argument_and_the_server_keeps_serving(self):
        pad = self.client.model_info().media_placeholder_token_id
        image = png_bytes(64, 48, seed=3)
        for images, expected in (([image, b"GIF89a but not really"], "images[1]: "),
                                 ([image[:len(image) // 2]], "images[0]: "),
                                 ([image, image], "2 images were given")):
            with self.assertRaises(grpc.RpcError) as caught:
                self.client.generate(prompt_ids=[5, pad, 6], images=images, max_tokens=4)
            self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(expected, caught.exception.details())
        g = self.client.generate(prompt_ids=[5, pad, 6], images=[image], max_tokens=4,
                                 ignore_eos=True)
        self.assertEqual(len(g.token_ids), 4)

    def test_json_schema_makes_the_output_fit_it(self):
        schema = {"type": "object", "properties": {"size": {"enum": ["S", "M", "L"]},
                                                   "count": {"type": "integer"}},
                  "required": ["size", "count"], "additionalProperties": False}
        g = self.client.generate(prompt="Order:", max_tokens=200, temperature=1.0, seed=7,
                                 json_schema=schema)
        self.assertEqual(g.finish_reason, "stop")
        value = json.loads(g.text)
        self.assertIn(value["size"], ["S", "M", "L"])
        self.assertIsInstance(value["count"], int)
        with self.assertRaises(grpc.RpcError) as caught:
            self.client.generate(prompt="x", max_tokens=4, json_schema={"not": {"const": 2}})
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("'not' is not supported", caught.exception.details())

    def test_regex_makes_the_whole_text_match(self):
        g = self.client.generate(prompt="Code:", max_tokens=30, temperature=1.0, seed=3,
                                 regex=r"[A-Z]{3}-\d{2,4}")
        self.assertEqual(g.finish_reason, "stop")
        self.assertRegex(g.text, r"^[A-Z]{3}-\d{2,4}$")

    def test_grammar_makes_the_text_a_root_of_it(self):
        grammar = 'root ::= ("yes" | "no") ", " [0-9]{1,2} " points"'
        g = self.client.generate(prompt="Verdict:", max_tokens=30, temperature=1.0, seed=5,
                                 grammar=grammar)
        self.assertEqual(g.finish_reason, "stop")
        self.assertRegex(g.text, r"^(yes|no), [0-9]{1,2} points$")
        with self.assertRaises(grpc.RpcError) as caught:
            self.client.generate(prompt="x", max_tokens=4, grammar="root ::= answer")
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("rule 'answer' is used but not defined", caught.exception.details())

    def test_grpc_and_http_give_identical_output_for_the_same_seed(self):
        kwargs = dict(prompt_ids=[9, 8, 7, 6], max_tokens=12, temperature=0.8, seed=42,
                      ignore_eos=True, logprobs=0)
        g = self.client.generate(**kwargs)
        body = json.dumps({"prompt": [9, 8, 7, 6], "max_tokens": 12, "temperature": 0.8,
                           "seed": 42, "ignore_eos": True, "logprobs": 0}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.server.http_port}/v1/completions",
                                     data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            http = json.loads(r.read())["choices"][0]
        self.assertEqual(g.text, http["text"])
        self.assertEqual(len(g.token_ids), len(http["logprobs"]["token_logprobs"]))
        for a, b in zip(g.logprobs, http["logprobs"]["token_logprobs"]):
            self.assertAlmostEqual(a, b, places=4)

    def test_prompt_logprobs_equal_the_echoed_prompts_logprobs_over_http(self):
        ids = [31, 41, 59, 26, 53, 58, 97]
        g = self.client.generate(prompt_ids=ids, max_tokens=2, temperature=0.0,
                                 prompt_logprobs=1)
        self.assertEqual([lp.token_id for lp in g.prompt_logprobs], ids[1:])
        body = json.dumps({"prompt": ids, "max_tokens": 0, "echo": True,
                           "logprobs": 1}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.server.http_port}/v1/completions",
                                     data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            http = json.loads(r.read())["choices"][0]
        self.assertEqual(http["finish_reason"], "length")
        echoed = http["logprobs"]["token_logprobs"]
        self.assertEqual(len(echoed), len(ids))
        self.assertIsNone(echoed[0])
        tops = http["logprobs"]["top_logprobs"]
        for i, lp in enumerate(g.prompt_logprobs, start=1):
            self.assertAlmostEqual(lp.logprob, echoed[i], places=4)
            self.assertGreaterEqual(lp.rank, 1)
            self.assertEqual(len(lp.top), 1)
            self.assertEqual(len(tops[i]), 1)
            self.assertAlmostEqual(lp.top[0].logprob, list(tops[i].values())[0], places=4)

    def test_token_filters_restrict_the_output(self):
        g = self.client.generate(prompt_ids=[1, 2, 3], max_tokens=12, temperature=1.0, seed=9,
                                 ignore_eos=True, allowed_token_ids=[300, 301, 302],
                                 bad_words=["zz"])
        self.assertEqual(len(g.token_ids), 12)
        self.assertTrue(set(g.token_ids) <= {300, 301, 302}, g.token_ids)

    def test_cpp_client_prints_the_same_ids(self):
        g = self.client.generate(prompt_ids=[3, 1, 4, 1, 5], max_tokens=9, temperature=0.7,
                                 seed=7)
        out = subprocess.run(
            [os.environ["STRATA_CLIENT_BIN"], "generate", "--target", self.server.target,
             "--prompt-ids", "3,1,4,1,5", "--max-tokens", "9", "--temperature", "0.7",
             "--seed", "7", "--stream"], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout.strip().splitlines()[-1]), g.token_ids)

    def test_cpp_client_sends_images(self):
        info = subprocess.run([os.environ["STRATA_CLIENT_BIN"], "info", "--target",
                               self.server.target], capture_output=True, text=True, timeout=60)
        self.assertEqual(info.returncode, 0, info.stderr)
        pad = json.loads(info.stdout)["media_placeholder_token_id"]
        self.assertEqual(pad, self.client.model_info().media_placeholder_token_id)
        image = png_bytes(448, 448, seed=4)
        g = self.client.generate(prompt_ids=[5, pad, 6], images=[image], max_tokens=6,
                                 temperature=0.0, ignore_eos=True)
        with tempfile.NamedTemporaryFile(suffix=".png") as f:
            f.write(image)
            f.flush()
            out = subprocess.run(
                [os.environ["STRATA_CLIENT_BIN"], "generate", "--target", self.server.target,
                 "--prompt-ids", f"5,{pad},6", "--image", f.name, "--max-tokens", "6",
                 "--temperature", "0"], capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(json.loads(out.stdout.strip().splitlines()[-1]), g.token_ids)
            self.assertIn(f"prompt_tokens={2 + 256}", out.stderr)  # the image's 256 rows
            # One image for two placeholders: the server's error, exit 1.
            two = subprocess.run(
                [os.environ["STRATA_CLIENT_BIN"], "generate", "--target", self.server.target,
                 "--prompt-ids", f"5,{pad},{pad}", "--image", f.name, "--max-tokens", "2"],
                capture_output=True, text=True, timeout=60)
            self.assertEqual(two.returncode, 1)
            self.assertIn("rpc error 3", two.stderr)  # INVALID_ARGUMENT
            self.assertIn("image", two.stderr)
        missing = subprocess.run(
            [os.environ["STRATA_CLIENT_BIN"], "generate", "--target", self.server.target,
             "--prompt-ids", f"5,{pad}", "--image", "/nonexistent/a.png"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(missing.returncode, 2)
        self.assertIn("/nonexistent/a.png", missing.stderr)

    def test_cpp_client_reports_rpc_errors(self):
        out = subprocess.run(
            [os.environ["STRATA_CLIENT_BIN"], "generate", "--target", self.server.target,
             "--prompt-ids", "1,2", "--max-tokens", "4", "--temperature", "7"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 1)
        self.assertIn("temperature", out.stderr)

    def test_python_cli_prints_ids_last(self):
        env = dict(os.environ)
        out = subprocess.run(
            ["/usr/bin/python3", "-m", "strata_client", "generate", "--target",
             self.server.target, "--prompt-ids", "2,7,1,8", "--max-tokens", "5", "--seed", "3",
             "--temperature", "0.5"], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(out.returncode, 0, out.stderr)
        ids = json.loads(out.stdout.strip().splitlines()[-1])
        g = self.client.generate(prompt_ids=[2, 7, 1, 8], max_tokens=5, seed=3, temperature=0.5)
        self.assertEqual(ids, g.token_ids)

    def test_reset_prefix_cache_forgets_a_finished_prompt(self):
        prompt = [7 + i % 50 for i in range(200)]  # 3 full 64-token blocks
        self.client.generate(prompt_ids=prompt, max_tokens=2, ignore_eos=True)
        wait_empty(self.client)
        first = self.client.reset_prefix_cache()
        self.assertEqual(first.num_ranks, 1)
        self.assertGreaterEqual(first.num_blocks_dropped, 3)
        self.assertEqual(self.client.reset_prefix_cache().num_blocks_dropped, 0)

    def test_api_key_is_sent_as_metadata(self):
        server = Server("--api-key", "sk-py")
        try:
            with Client(server.target) as anonymous:
                with self.assertRaises(grpc.RpcError) as caught:
                    anonymous.loads()
                self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
            with Client(server.target, api_key="sk-py") as client:
                self.assertGreater(client.loads().num_blocks, 0)
                result = client.generate(prompt_ids=[1, 2, 3], max_tokens=3, ignore_eos=True)
                self.assertEqual(len(result.token_ids), 3)
            cli = [os.environ["STRATA_CLIENT_BIN"], "info", "--target", server.target]
            refused = subprocess.run(cli, capture_output=True, text=True, timeout=60)
            self.assertNotEqual(refused.returncode, 0)
            self.assertIn("missing API key", refused.stderr)
            allowed = subprocess.run(cli + ["--api-key", "sk-py"], capture_output=True, text=True,
                                     timeout=60)
            self.assertEqual(allowed.returncode, 0, allowed.stderr)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_each_turn_of_a_conversation_starts_past_the_last_reply(self):
        # bench/multi_turn.py's conversations: each turn sends the one before, its reply and a
        # new message. Turn 1 computes 100 + 79 tokens (the last reply token is never fed), so
        # turn 2 finds its state at 128 (at 64, turn 1's prompt end, before replies were kept).
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
        import multi_turn
        vocab = self.client.model_info().vocab_size
        results = multi_turn.run(self.client, conversations=1, turns=3, first_len=100,
                                 user_len=10, output_len=80, vocab=vocab, seed=11)
        self.assertEqual([turn[0][1] for turn in results], [0, 128, 256])

    def test_tokenize_round_trips(self):
        ids = self.client.tokenize("hello there", add_special_tokens=False)
        self.assertTrue(ids)
        self.assertEqual(self.client.detokenize(ids), "hello there")


class DrainTest(unittest.TestCase):
    def test_sigterm_finishes_streams_in_flight_and_refuses_new_ones(self):
        server = Server("--drain-timeout", "120")
        client = Client(server.target)
        try:
            call = client.stream(prompt_ids=[1, 2, 3], max_tokens=200, ignore_eos=True)
            responses = [next(call)]  # the stream is running
            server.proc.send_signal(signal.SIGTERM)
            refused = None
            deadline = time.time() + 10
            while refused is None and time.time() < deadline:
                try:
                    client.generate(prompt_ids=[1], max_tokens=1)
                    time.sleep(0.005)
                except grpc.RpcError as e:
                    refused = e
            self.assertIsNotNone(refused)
            self.assertEqual(refused.code(), grpc.StatusCode.UNAVAILABLE)
            responses.extend(call)
            self.assertTrue(responses[-1].HasField("complete"))
            self.assertEqual(responses[-1].complete.finish_reason, "length")
            self.assertEqual(sum(len(r.chunk.token_ids) for r in responses), 200)
        finally:
            client.close()
            self.assertEqual(server.proc.wait(timeout=60), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
