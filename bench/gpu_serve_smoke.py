#!/usr/bin/env python3
"""Serving smoke test for a lent GPU machine (bench/gpu_check.sh; standard library only).

Starts `strata serve --device cuda --replicas 2 --model CKPT` on free local ports (two
whole-model replicas: on one GPU both share it; speculative decoding by prompt lookup on, which
must change no output), waits for /ready, then checks that a greedy
completion, a streamed chat completion and /metrics answer, and that two greedy completions of
the same prompt sent at once (so to both replicas) agree with the first (the CUDA path is
deterministic). Then the device sampler's other paths: greedy log-probabilities (each token's
equals the best of its top 5), a +100 logit bias (every token the biased one), and a seeded
draw with repetition / presence / frequency penalties sent to both replicas at once (identical
texts); the biased completion repeats itself, so drafts must have been accepted. Prints one `RESULT ...` line (tokens/s of the first completion as the client
saw it) and exits 0 on success.

Usage: gpu_serve_smoke.py STRATA CKPT [DEVICE]   (DEVICE: cuda, or cpu to try the script here)
"""
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, path, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data,
        headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read().decode()


def completion(port, **fields):
    body = {"model": "gpu-smoke", "prompt": "The quick brown fox", "ignore_eos": True}
    body.update(fields)
    return json.loads(request(port, "/v1/completions", body)[1])["choices"][0]


def check_logprobs(port):
    """Greedy with top-5 log-probabilities: the chosen token is the best, so its logprob is
    the largest of its top 5 (all ≤ 0)."""
    lp = completion(port, max_tokens=16, temperature=0, logprobs=5)["logprobs"]
    ok = len(lp["token_logprobs"]) == 16
    for chosen, top in zip(lp["token_logprobs"], lp["top_logprobs"]):
        best = max(top.values()) if top else None
        ok = ok and best is not None and abs(chosen - best) < 1e-4 and best <= 1e-6
    print(f"greedy logprobs: chosen = best of top 5 at every token: {ok}")
    return ok


def check_logit_bias(port):
    """A +100 bias on one token id makes it every token."""
    lp = completion(port, max_tokens=8, temperature=0, logprobs=0,
                    logit_bias={"300": 100})["logprobs"]
    ok = len(lp["tokens"]) == 8 and len(set(lp["tokens"])) == 1
    print(f"logit bias +100: every token the same: {ok} ({lp['tokens'][:3]})")
    return ok


def check_penalties(port):
    """A seeded draw with penalties, sent to both replicas at once, gives one text."""
    fields = dict(max_tokens=24, temperature=0.8, top_k=50, seed=5, repetition_penalty=1.3,
                  presence_penalty=0.5, frequency_penalty=0.5)
    texts = [None, None]

    def run(i):
        texts[i] = completion(port, **fields)["text"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = texts[0] is not None and texts[0] == texts[1]
    print(f"seeded draw with penalties (concurrent, both replicas) identical: {ok}")
    return ok


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        return 2
    strata, ckpt = sys.argv[1], sys.argv[2]
    device = sys.argv[3] if len(sys.argv) == 4 else "cuda"
    port, grpc_port = free_port(), free_port()
    cmd = [strata, "serve", "--device", device, "--model", ckpt, "--port", str(port),
           "--grpc-port", str(grpc_port), "--served-model-name", "gpu-smoke",
           "--max-model-len", "2048", "--replicas", "2",
           "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']
    print("$", " ".join(cmd), flush=True)
    server = subprocess.Popen(cmd, stdout=sys.stdout, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 100
        while True:
            if server.poll() is not None:
                print(f"FAIL: server exited with {server.returncode} before it was ready")
                return 1
            try:
                if request(port, "/ready", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                print("FAIL: /ready not ready after 100 s")
                return 1
            time.sleep(0.5)

        body = {"model": "gpu-smoke", "prompt": "The quick brown fox", "max_tokens": 48,
                "temperature": 0, "ignore_eos": True}
        start = time.time()
        status, text = request(port, "/v1/completions", body)
        seconds = time.time() - start
        first = json.loads(text)
        tokens = first["usage"]["completion_tokens"]
        print(f"completion: {status}, {tokens} tokens in {seconds:.2f} s: "
              f"{first['choices'][0]['text'][:60]!r}")
        texts = [None, None]

        def repeat(i):
            texts[i] = json.loads(request(port, "/v1/completions", body)[1])["choices"][0]["text"]

        threads = [threading.Thread(target=repeat, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        same = texts[0] == texts[1] == first["choices"][0]["text"]
        print(f"greedy repeats (concurrent, both replicas) identical: {same}")

        chat = {"model": "gpu-smoke", "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 16, "stream": True, "temperature": 0.7, "top_p": 0.9, "seed": 3}
        status, stream = request(port, "/v1/chat/completions", chat)
        chunks = [line for line in stream.splitlines() if line.startswith("data: ")]
        done = chunks and chunks[-1] == "data: [DONE]"
        print(f"streamed chat: {status}, {len(chunks)} events, done={bool(done)}")

        logprobs_ok = check_logprobs(port)
        bias_ok = check_logit_bias(port)
        penalties_ok = check_penalties(port)
        info = json.loads(request(port, "/server_info")[1])
        engine = info["engine"]
        # The CUDA engine cuts prompts at multiples of 16 tokens (its KDA prefill's chunk), so
        # where they are cut does not change results; the CPU engine anywhere.
        alignment = info["config"].get("prefill_chunk_alignment_tokens")
        align_ok = alignment == (16 if device == "cuda" else 0)
        print(f"prompt chunks end at multiples of {alignment} tokens: {align_ok}")
        accepted = engine.get("num_spec_accepted_tokens_total", 0)
        spec_ok = accepted > 0
        print(f"speculative decoding: {engine.get('num_spec_drafts_total')} drafts, {accepted} of "
              f"{engine.get('num_spec_draft_tokens_total')} draft tokens accepted: {spec_ok}")

        status, metrics = request(port, "/metrics")
        series = sum(1 for line in metrics.splitlines() if line.startswith("strata:"))
        print(f"/metrics: {status}, {series} strata: samples")

        ok = (tokens == 48 and same and done and series > 0 and logprobs_ok and bias_ok and
              penalties_ok and spec_ok and align_ok)
        print(f"RESULT {'ok' if ok else 'FAIL'}: {tokens / seconds:.1f} tokens/s single-stream "
              f"(client side, incl. HTTP), greedy repeat {'same' if same else 'DIFFERENT'}")
        return 0 if ok else 1
    except Exception as e:  # any failure is the test's result, reported in one line
        print(f"RESULT FAIL: {type(e).__name__}: {e}")
        return 1
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
