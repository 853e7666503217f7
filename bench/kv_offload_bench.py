#!/usr/bin/env python3
"""Time to first token of a long prompt computed vs read back from the cache tiers (issue 48).

For each prompt length N (token ids, default 32768 and 131072), one `strata serve` with a device
cache of about 1.3 N tokens and a disk tier (--kv-offload-dir, plus --kv-offload-memory with
--host-tier), measured in the same run:

  compute    DOC's first request: its whole prefill
  device     DOC again: the in-memory prefix cache
  tier       DOC after another N-token prompt pushed it out: read back from the tier (what the
             device still holds of it too; "tier GB/s" is the bytes loaded over that TTFT)
  restart    DOC's first request after a restart on the same directory (disk tier only)
  disk       the tier's read bandwidth during `tier` (bytes loaded / that request's time) and
             the disk's sequential bandwidth measured here (a file of the same size, written with
             fsync, then read; the read may come from the page cache — said so)
  impact     the inter-token gaps of a generation streaming beside the `device` and `tier`
             requests: the median gap before them, and the longest gap while each runs (the
             step that computes DOC's last tokens over its whole context is in both; the tier's
             loads add to it what one step carries: --max-load-per-step)

Prints a table; a ratio is only meaningful within one run (machines here are shared and noisy).

usage: kv_offload_bench.py --strata BIN (--model DIR | --make-checkpoint BIN) [--tokens 32768,131072]
       [--host-tier] [--bytes-per-token B (default 1600: the demo model)] [--work DIR]
       [--max-load-per-step SIZE (--kv-offload-max-load-per-step; default the server's)]
"""
import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import threading
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, args, model, cache_bytes, tier_dir, log_path):
        self.port = free_port()
        self.log = open(log_path, "w")
        cmd = [args.strata, "serve", "--model", model, "--host", "127.0.0.1", "--port",
               str(self.port), "--grpc-port", "0", "--kv-cache-memory", str(cache_bytes),
               "--max-num-seqs", "8", "--kv-offload-dir", tier_dir]
        if args.host_tier:
            cmd += ["--kv-offload-memory", str(cache_bytes)]
        if args.max_load_per_step:
            cmd += ["--kv-offload-max-load-per-step", args.max_load_per_step]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("strata serve exited at start; see " + log_path)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/ready", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise SystemExit("strata serve did not become ready")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=120)

    def info(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/server_info", timeout=30) as r:
            return json.loads(r.read())

    def first_token(self, prompt):
        """(seconds to the first token, cached tokens) of a 1-token greedy completion."""
        body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions", body,
                                         {"Content-Type": "application/json"})
        start = time.time()
        with urllib.request.urlopen(request, timeout=3600) as r:
            out = json.loads(r.read())
        details = out["usage"].get("prompt_tokens_details") or {}
        return time.time() - start, details.get("cached_tokens", 0)

    def stream_gaps(self, stop, gaps, max_tokens):
        """Streams a long generation, appending (time, gap seconds) per token until `stop`."""
        body = json.dumps({"prompt": [11, 12, 13, 14], "max_tokens": max_tokens, "temperature": 0,
                           "ignore_eos": True, "stream": True}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions", body,
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=3600) as r:
            last = None
            for line in r:
                if not line.startswith(b"data:"):
                    continue
                now = time.time()
                if last is not None:
                    gaps.append((now, now - last))
                last = now
                if stop.is_set():
                    return


def disk_bandwidth(directory, size_bytes):
    """(write GB/s with fsync, read GB/s) of one sequential file of `size_bytes`."""
    path = os.path.join(directory, "bandwidth.bin")
    block = os.urandom(1 << 20)
    start = time.time()
    with open(path, "wb") as f:
        for _ in range(max(1, size_bytes >> 20)):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    write_s = time.time() - start
    start = time.time()
    with open(path, "rb") as f:
        while f.read(8 << 20):
            pass
    read_s = time.time() - start
    os.remove(path)
    n = max(1, size_bytes >> 20) << 20
    return n / write_s / 1e9, n / read_s / 1e9


def run_length(args, model, n):
    work = os.path.join(args.work, f"n{n}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tier = os.path.join(work, "tier")
    # The demo-sized K3 checkpoint's cache: ~1.6 KiB per token (f32 latent rows of 2 MLA layers)
    # plus KDA slots and checkpoints (--bytes-per-token for another checkpoint: /server_info's
    # memory plan over its num_tokens); 1.3 N tokens hold DOC but not DOC and another N.
    cache_bytes = int(n * 1.3 * args.bytes_per_token) + (16 << 20)
    rng = random.Random(n)
    doc = [rng.randrange(300, 7900) for _ in range(n)]
    other = [rng.randrange(300, 7900) for _ in range(n)]
    row = {"tokens": n}
    server = Server(args, model, cache_bytes, tier, os.path.join(work, "serve1.log"))
    row["compute_s"], _ = server.first_token(doc)

    def beside_stream(prompt):
        """(ttft, cached, median gap before, max gap during, kv_offload before, after) of
        `prompt` sent while a generation streams."""
        stop, gaps = threading.Event(), []
        streamer = threading.Thread(target=server.stream_gaps, args=(stop, gaps, n // 4))
        streamer.start()
        time.sleep(2.0)
        before = server.info()["kv_offload"]
        t0 = time.time()
        ttft, cached = server.first_token(prompt)
        t1 = time.time()
        after = server.info()["kv_offload"]
        time.sleep(0.5)
        stop.set()
        streamer.join()
        base = [g for (t, g) in gaps if t < t0]
        during = [g for (t, g) in gaps if t0 <= t <= t1 + 0.05]
        return (ttft, cached, 1000 * statistics.median(base) if base else float("nan"),
                1000 * max(during) if during else float("nan"), before, after)

    row["device_s"], row["device_cached"], _, row["gap_max_device_ms"], _, _ = beside_stream(doc)
    server.first_token(other)
    (row["tier_s"], row["tier_cached"], row["gap_median_ms"], row["gap_max_during_ms"], before,
     after) = beside_stream(doc)
    loaded = after["prefix_hits"]["bytes_loaded"] - before["prefix_hits"]["bytes_loaded"]
    row["tier_gb_s"] = loaded / row["tier_s"] / 1e9
    row["bytes_loaded"] = loaded
    server.stop()
    server = Server(args, model, cache_bytes, tier, os.path.join(work, "serve2.log"))
    row["restart_s"], row["restart_cached"] = server.first_token(doc)
    server.stop()
    row["disk_write_gb_s"], row["disk_read_gb_s"] = disk_bandwidth(work, max(loaded, 64 << 20))
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--strata", required=True)
    parser.add_argument("--model")
    parser.add_argument("--make-checkpoint")
    parser.add_argument("--tokens", default="32768,131072")
    parser.add_argument("--host-tier", action="store_true")
    parser.add_argument("--max-load-per-step", help="--kv-offload-max-load-per-step (a size)")
    parser.add_argument("--bytes-per-token", type=float, default=1600.0)
    parser.add_argument("--work", default="/tmp/strata_kv_offload_bench")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model = args.model
    if model is None:
        if args.make_checkpoint is None:
            raise SystemExit("give --model DIR or --make-checkpoint BIN")
        model = os.path.join(args.work, "model")
        if not os.path.exists(os.path.join(model, "config.json")):
            subprocess.run([args.make_checkpoint, "--family", "k3", "--preset", "demo", "--seed",
                            "48", "--demo-tokenizer", "--out", model], check=True,
                           stdout=subprocess.DEVNULL)
    rows = [run_length(args, model, int(n)) for n in args.tokens.split(",")]
    print("\nTTFT of one prompt (1 token out), seconds; same run, same machine")
    print(f"{'tokens':>8} {'compute':>8} {'device':>8} {'tier':>8} {'restart':>8} "
          f"{'x tier':>7} {'tier GB/s':>9} {'disk w/r GB/s':>14} {'gap ms med/dev/tier':>20}")
    for r in rows:
        print(f"{r['tokens']:>8} {r['compute_s']:>8.2f} {r['device_s']:>8.3f} {r['tier_s']:>8.3f} "
              f"{r['restart_s']:>8.3f} {r['compute_s'] / r['tier_s']:>6.1f}x "
              f"{r['tier_gb_s']:>9.2f} {r['disk_write_gb_s']:>6.2f}/{r['disk_read_gb_s']:<7.2f} "
              f"{r['gap_median_ms']:>6.1f}/{r['gap_max_device_ms']:.1f}/{r['gap_max_during_ms']:.1f}")
        print(f"{'':>8} cached tokens: device {r['device_cached']}, tier {r['tier_cached']}, "
              f"restart {r['restart_cached']}; {r['bytes_loaded'] / 2**20:.1f} MiB loaded")
    print("disk read GB/s is a sequential read right after the write: likely the page cache, as "
          "the tier's own reads are.")


if __name__ == "__main__":
    main()
