#!/usr/bin/env python3
"""Serving smoke test for a lent GPU machine (bench/gpu_check.sh; standard library only).

Starts `strata serve --device cuda --replicas 2 --model CKPT` on free local ports (two
whole-model replicas: on one GPU both share it), waits for /ready, then checks that a greedy
completion, a streamed chat completion and /metrics answer, and that two greedy completions of
the same prompt sent at once (so to both replicas) agree with the first (the CUDA path is
deterministic). Prints one `RESULT ...` line (tokens/s of the first completion as the client
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


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        return 2
    strata, ckpt = sys.argv[1], sys.argv[2]
    device = sys.argv[3] if len(sys.argv) == 4 else "cuda"
    port, grpc_port = free_port(), free_port()
    cmd = [strata, "serve", "--device", device, "--model", ckpt, "--port", str(port),
           "--grpc-port", str(grpc_port), "--served-model-name", "gpu-smoke",
           "--max-model-len", "2048", "--replicas", "2"]
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

        status, metrics = request(port, "/metrics")
        series = sum(1 for line in metrics.splitlines() if line.startswith("strata:"))
        print(f"/metrics: {status}, {series} strata: samples")

        ok = tokens == 48 and same and done and series > 0
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
