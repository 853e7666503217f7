#!/usr/bin/env python3
"""The offload tiers through `strata serve` end to end (issue 48; docs/kv-offload.md).

Two demo-sized K3 checkpoints of equal shapes and other weights (A, B) made here by
strata-make-checkpoint; `strata serve --kv-cache-memory 8MiB` (a cache of ~5K tokens) with
--kv-offload-dir / --kv-offload-memory; a 2,000-token id prompt DOC pushed out of the cache by
three others of the same length:

  hit        DOC, the others, DOC again: usage.prompt_tokens_details.cached_tokens >= 1,950, the
             same tokens and log-probabilities bit for bit (f32 cache) as its first, computed
             run, and only what the hit left to compute is scheduled (strata:iteration_tokens_total);
             /server_info and /metrics count the tier's hit
  restart    a restarted server on the same directory: DOC's first request hits
  staged     with --kv-offload-max-load-per-step 1MiB the hit loads over several steps, same
             answer
  write-down a prefix still in the device cache at a graceful stop hits after the restart
  host       --kv-offload-memory with the disk tier: hits from host memory; a graceful stop
             writes the host tier down, and the next start finds it
  foreign    checkpoint B, and checkpoint A with --kv-cache-dtype bf16, on the same directory:
             no hit, B's answer equals B served without a tier, the files are left alone
  truncated  every file in the directory truncated while A runs: DOC is computed again, the same
             tokens come back; the next start drops the bad files
  full       --kv-offload-disk 1MiB: every request answered right while the tier evicts
  kill -9    A killed with SIGKILL while it writes; the next start serves DOC right

With --tensor-parallel (a test of its own), A served by --tensor-parallel-size 2, whose lead
keeps every rank's share of a unit in its tiers (engine/cache_copy.h):

  tp hit     DOC, the others, DOC again from the disk tier: the computed run's answer bit for
             bit, and one rank's tokens
  tp restart the restarted group's first request hits, loading over several steps
  tp write-down a prefix still in the group's caches at a graceful stop hits after the restart
  dcp host   --decode-context-parallel-size 2 (another layout: no hit from the TP 2 files) with
             a host tier: DOC hits from memory, same tokens
  one rank   a single-rank server on the group's directory: no hit, its own answer

With --data-parallel (a test of its own), A served by --data-parallel-size 2 in one process:
two groups, each with its own scheduler and device cache, sharing the process's tiers (requests
alternate between the idle groups):

  dp hit     DOC on group 0, pushed out of group 0 by three others; DOC again lands on group 1,
             whose device never saw it: >= 1,950 tokens from the shared disk tier, the computed
             run's tokens and log-probabilities bit for bit
  dp restart a restarted two-group server hits on its first request; so does a one-group server
             on the same directory (the entries' layout is the group's, not the count of groups)
  dp host    --kv-offload-memory too: group 1's hit comes from host memory

usage: kv_offload_serve_test.py --strata BIN --make-checkpoint BIN --work DIR
                                [--tensor-parallel | --data-parallel]
"""
import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

PROMPT_TOKENS = 2000
MIN_CACHED = 1950
# The CPU executor's results depend, in the last bits, on where a prompt is cut into chunks and on
# whether a KDA checkpoint was saved inside a chunk or at its end (scheduler_config.h,
# prefill_chunk_alignment). A hit computes DOC's tokens from 1,984 (31 blocks) on; with chunks of
# 1,984 tokens (31 blocks) a computed DOC is cut there too, and its checkpoint there is a chunk's
# end, so a hit's log-probabilities must equal the computed run's bit for bit.
CHUNK_TOKENS = 1984
FULL_HIT = 1984
CACHE_MEMORY = "8MiB"  # ~5K tokens of the demo checkpoint: DOC and two others


LIVE = []  # servers to kill if the test fails


def fail(message):
    print("FAIL: " + message, flush=True)
    for server in LIVE:
        server.proc.kill()
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    count = 0

    def __init__(self, args, model_dir, extra, cache_memory=CACHE_MEMORY):
        Server.count += 1
        self.port = free_port()
        self.log_path = os.path.join(args.work, f"serve{Server.count}.log")
        self.log = open(self.log_path, "w")
        cmd = [args.strata, "serve", "--model", model_dir, "--host", "127.0.0.1",
               "--port", str(self.port), "--grpc-port", "0", "--kv-cache-memory", cache_memory,
               "--max-num-batched-tokens", str(CHUNK_TOKENS)] + extra
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        LIVE.append(self)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                fail("strata serve exited at start:\n" + self.log_text()[-3000:])
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/ready", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        fail("strata serve did not become ready in 60 s")

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        LIVE.remove(self)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("strata serve did not stop on SIGTERM within 30 s")
        check(self.proc.returncode == 0, f"strata serve exited {self.proc.returncode}:\n" +
              self.log_text()[-3000:])

    def kill(self):
        LIVE.remove(self)
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def get_json(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as r:
            return json.loads(r.read())

    def metric(self, name, labels=""):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as r:
            text = r.read().decode()
        pattern = r"^" + re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels
                                             else r"(\{[^}]*\})?") + r" (\S+)$"
        m = re.search(pattern, text, re.M)
        check(m is not None, f"/metrics has no {name}{{{labels}}}")
        return float(m.group(m.lastindex))

    def complete(self, prompt):
        """(text, logprobs JSON, cached tokens) of a greedy 8-token completion of `prompt`."""
        body = json.dumps({"prompt": prompt, "max_tokens": 8, "temperature": 0,
                           "logprobs": 3}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions", body,
                                         {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=600) as r:
                out = json.loads(r.read())
        except urllib.error.HTTPError as e:
            fail(f"/v1/completions answered {e.code}: {e.read().decode()[:500]}")
        details = out["usage"].get("prompt_tokens_details") or {}
        choice = out["choices"][0]
        return choice["text"], json.dumps(choice["logprobs"]), details.get("cached_tokens", 0)


def same_answer(answer, reference):
    """The same tokens; the same log-probabilities bit for bit where DOC was cut the same way (a
    full hit or none)."""
    if answer[0] != reference[0]:
        return False
    return answer[1] == reference[1] or answer[2] not in (0, FULL_HIT)


def offload_files(directory):
    return [f for f in glob.glob(os.path.join(directory, "**", "*.kvo"), recursive=True)]


def write_down_then_hit(args, model, extra, directory, doc, reference, label):
    """DOC computed by a server on a fresh tier directory, which then stops gracefully: the write-
    down leaves DOC on disk and the next server's first request hits it. Returns that answer."""
    fresh = os.path.join(args.work, directory)
    server = Server(args, model, extra + ["--kv-offload-dir", fresh])
    server.complete(doc)
    server.stop()
    check("written down" in server.log_text(), f"{label}: no write-down at a graceful stop")
    server = Server(args, model, extra + ["--kv-offload-dir", fresh])
    hit = server.complete(doc)
    check(hit[2] >= MIN_CACHED and same_answer(hit, reference),
          f"{label}: a prefix never evicted, after a restart: {hit[2]} cached")
    server.stop()
    return hit


def staged_hit(args, model, extra, tier, doc, reference, label):
    """A server on `tier` (which holds DOC) with at most 1 MiB of loads a step (~8 of DOC's 31
    blocks): DOC's hit loads over several steps before it computes, and answers as `reference`.
    Returns its cached tokens."""
    server = Server(args, model, extra + ["--kv-offload-dir", tier,
                                          "--kv-offload-max-load-per-step", "1MiB"])
    answer = server.complete(doc)
    check(answer[2] >= MIN_CACHED and same_answer(answer, reference),
          f"{label}: {answer[2]} cached, or another answer")
    hits = server.get_json("/server_info")["kv_offload"]["prefix_hits"]
    check(hits["loaded_over_several_steps"] >= 1, f"{label}: the hit loaded in one step: {hits}")
    server.stop()
    return answer[2]


def hit_after_others(server, doc, others, label, min_cached=MIN_CACHED, exact=True):
    """DOC computed, pushed out of the device cache by the others, then read back from a tier:
    (computed answer, answer from the tier). `exact`: log-probabilities bit for bit too (the hit
    starts where a computed chunk ended)."""
    computed = server.complete(doc)
    check(computed[2] == 0, f"{label}: a fresh server reported {computed[2]} cached tokens")
    for other in others:
        server.complete(other)
    again = server.complete(doc)
    check(again[2] >= min_cached, f"{label}: DOC after eviction: {again[2]} cached tokens")
    check(again[:2 if exact else 1] == computed[:2 if exact else 1],
          f"{label}: DOC from the tier answers differently")
    return computed, again


def tensor_parallel(args, model, doc, others):
    server = Server(args, model, [])
    one_rank = server.complete(doc)
    server.stop()
    tp = ["--tensor-parallel-size", "2"]
    tier = os.path.join(args.work, "tier_tp")
    server = Server(args, model, tp + ["--kv-offload-dir", tier])
    reference, again = hit_after_others(server, doc, others, "tp")
    check(reference[0] == one_rank[0], f"TP 2: {reference[0]!r}, one rank: {one_rank[0]!r}")
    info = server.get_json("/server_info")["kv_offload"]
    check(info["disk"]["hits"] > 0, f"/server_info kv_offload shows no disk hit: {info}")
    server.stop()
    print(f"tp hit: {again[2]} cached tokens from the lead's disk tier, the computed answer bit "
          "for bit, one rank's tokens", flush=True)

    # The restarted group loads the hit over several steps: the followers copy their shares of
    # each step's loads.
    cached = staged_hit(args, model, tp, tier, doc, reference, "TP 2 after a restart")
    print(f"tp restart: {cached} cached tokens loaded over several steps, same answer",
          flush=True)

    # write-down: the group's graceful stop writes the device cache down (the followers copy
    # their shares in lockstep), and the next group finds it.
    hit = write_down_then_hit(args, model, tp, "tier_tp_fresh", doc, reference, "TP 2")
    print(f"tp write-down: a prefix only the device caches held hits after a restart ({hit[2]})",
          flush=True)

    # Each rank's cache holds every other position: half the memory per rank keeps the group's
    # capacity at one rank's, so the others push DOC out.
    server = Server(args, model, tp + ["--decode-context-parallel-size", "2", "--kv-offload-dir",
                                       tier, "--kv-offload-memory", "64MiB"], cache_memory="4MiB")
    # Blocks of 2 x 64 positions: a hit covers 15 of them (1,920 tokens), not where a computed
    # chunk of 1,984 ended, so the same tokens but not the last bits of the log-probabilities.
    computed, again = hit_after_others(server, doc, others, "dcp", 15 * 128, exact=False)
    check(computed[0] == one_rank[0], "TP 2 x DCP 2: another answer than one rank's")
    check(server.metric("strata:kv_offload_hits_total", 'tier="host"') > 0, "no host tier hit")
    server.stop()
    print(f"dcp host: no hit from TP 2's files, then {again[2]} cached tokens from memory",
          flush=True)

    server = Server(args, model, ["--kv-offload-dir", tier])
    alone = server.complete(doc)
    check(alone[2] == 0, f"one rank hit {alone[2]} tokens of the group's tier")
    check(alone[:2] == one_rank[:2], "one rank on the group's tier answers differently")
    server.stop()
    print("one rank: no hit from the group's files, its own answer", flush=True)


def data_parallel(args, model, doc, others):
    dp = ["--data-parallel-size", "2"]
    tier = os.path.join(args.work, "tier_dp")
    # Sequential requests alternate between the idle groups (engine_loop.h): DOC on group 0, then
    # three prompts of DOC's length on group 0 push all of DOC down to the tier (its cache holds
    # ~5K tokens), short fillers go to group 1, and DOC again lands on group 1.
    rng = random.Random(49)
    fourth = [rng.randrange(300, 7900) for _ in range(PROMPT_TOKENS)]
    sequence = [others[0], others[1], [101] * 64, others[2], [102] * 64, fourth]

    def evict_then_hit(server, label):
        # The groups compute alike: the hit's answer equals the computed one bit for bit.
        computed, again = hit_after_others(server, doc, sequence, label)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=30) as r:
            text = r.read().decode()
        hits = {int(rank): float(value) for rank, value in re.findall(
            r'^strata:prefix_cache_hits_total\{[^}]*rank="(\d+)"[^}]*\} (\S+)$', text, re.M)}
        check(hits.get(1, 0) >= MIN_CACHED and hits.get(0, 0) < MIN_CACHED,
              f"{label}: DOC's hit was not group 1's (prefix cache hit tokens per rank: {hits})")
        return computed, again

    server = Server(args, model, dp + ["--kv-offload-dir", tier])
    computed, again = evict_then_hit(server, "dp")
    info = server.get_json("/server_info")
    offload = info["kv_offload"]
    check(offload["engine_ranks"] == 2 and offload["disk"]["hits"] > 0,
          f"/server_info kv_offload: {offload}")
    check(offload["prefix_hits"]["admissions"] >= 1, f"no tier hit counted: {offload}")
    server.stop()
    print(f"dp hit: {again[2]} cached tokens on the group that never computed DOC, same tokens",
          flush=True)

    for label, extra in (("dp restart", dp), ("one group", [])):
        server = Server(args, model, extra + ["--kv-offload-dir", tier])
        restarted = server.complete(doc)
        check(restarted[2] >= MIN_CACHED and restarted[0] == computed[0],
              f"{label} after a restart: {restarted[2]} cached, or another answer")
        server.stop()
        print(f"{label}: {restarted[2]} cached tokens after a restart, same tokens", flush=True)

    server = Server(args, model, dp + ["--kv-offload-dir", os.path.join(args.work, "tier_dp_host"),
                                       "--kv-offload-memory", "64MiB"])
    evict_then_hit(server, "dp host")
    check(server.metric("strata:kv_offload_hits_total", 'tier="host"') > 0, "no host tier hit")
    server.stop()
    print("dp host: the other group's hit came from host memory", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--strata", required=True)
    parser.add_argument("--make-checkpoint", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--tensor-parallel", action="store_true")
    parser.add_argument("--data-parallel", action="store_true")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    models = {}
    for name, seed in (("A", 48), ("B", 49)):
        models[name] = os.path.join(args.work, "model" + name)
        subprocess.run([args.make_checkpoint, "--family", "k3", "--preset", "demo", "--seed",
                        str(seed), "--demo-tokenizer", "--out", models[name]], check=True,
                       stdout=subprocess.DEVNULL)
    rng = random.Random(48)
    doc = [rng.randrange(300, 7900) for _ in range(PROMPT_TOKENS)]
    others = [[rng.randrange(300, 7900) for _ in range(PROMPT_TOKENS)] for _ in range(3)]
    tier = os.path.join(args.work, "tier")
    t_start = time.time()
    if args.tensor_parallel or args.data_parallel:
        (tensor_parallel if args.tensor_parallel else data_parallel)(args, models["A"], doc, others)
        print(f"PASS ({time.time() - t_start:.0f} s)")
        return

    # hit: DOC computed, pushed out by the others, then read back from the disk tier.
    server = Server(args, models["A"], ["--kv-offload-dir", tier])
    reference = server.complete(doc)
    check(reference[2] == 0, f"a fresh server reported {reference[2]} cached tokens")
    for other in others:
        server.complete(other)
    scheduled_before = server.metric("strata:iteration_tokens_total")
    again = server.complete(doc)
    scheduled = server.metric("strata:iteration_tokens_total") - scheduled_before
    check(again[2] >= MIN_CACHED, f"DOC after eviction: {again[2]} cached tokens, want >= {MIN_CACHED}")
    check(again[0] == reference[0], f"DOC from the tier: {again[0]!r}, computed: {reference[0]!r}")
    check(again[1] == reference[1], "DOC from the tier: log-probabilities differ from the computed run")
    check(scheduled <= PROMPT_TOKENS - again[2] + 64,  # + its decodes, reports in flight
          f"the hit still scheduled {scheduled} tokens for {PROMPT_TOKENS - again[2]} uncached")
    info = server.get_json("/server_info")["kv_offload"]
    check(info["prefix_hits"]["admissions"] >= 1 and info["disk"]["hits"] > 0,
          f"/server_info kv_offload shows no disk hit: {info}")
    check(server.metric("strata:kv_offload_hit_tokens_total") >= MIN_CACHED,
          "strata:kv_offload_hit_tokens_total below the hit")
    check(server.metric("strata:kv_offload_entries", 'tier="disk"') > 0, "no disk entries")
    server.stop()
    print(f"hit: {again[2]} of {PROMPT_TOKENS} tokens from the disk tier, {scheduled:.0f} "
          f"scheduled; same tokens and log-probabilities", flush=True)

    # restart: the first request of the new process hits.
    server = Server(args, models["A"], ["--kv-offload-dir", tier])
    restarted = server.complete(doc)
    check(restarted[2] >= MIN_CACHED, f"after a restart: {restarted[2]} cached tokens")
    check(same_answer(restarted, reference), "after a restart: another answer")
    server.stop()
    print(f"restart: {restarted[2]} cached tokens, same answer", flush=True)

    cached = staged_hit(args, models["A"], [], tier, doc, reference, "staged")
    print(f"staged: {cached} cached tokens loaded over several steps, same answer", flush=True)

    # write-down: a graceful stop writes what the device cache holds down to the disk tier.
    hit = write_down_then_hit(args, models["A"], [], "tier_fresh", doc, reference, "one rank")
    print(f"write-down: a prefix only the device cache held hits after a restart ({hit[2]})",
          flush=True)

    # host: the host tier above the disk one; a graceful stop writes it down.
    host_dir = os.path.join(args.work, "tier_host")
    server = Server(args, models["A"], ["--kv-offload-memory", "64MiB", "--kv-offload-dir", host_dir])
    server.complete(doc)
    for other in others:
        server.complete(other)
    hit = server.complete(doc)
    check(hit[2] >= MIN_CACHED and same_answer(hit, reference), f"host tier hit: {hit[2]} cached")
    check(server.metric("strata:kv_offload_hits_total", 'tier="host"') > 0, "no host tier hit")
    for other in others:
        server.complete(other)
    server.stop()
    check("host tier entries written to" in server.log_text(), "no host tier spill at shutdown")
    server = Server(args, models["A"], ["--kv-offload-dir", host_dir])
    hit = server.complete(doc)
    check(hit[2] >= MIN_CACHED and same_answer(hit, reference),
          f"after the host tier was written down: {hit[2]} cached")
    server.stop()
    print("host: hits from memory, and from disk after a restart", flush=True)

    # foreign: another checkpoint, another cache dtype on the same directory.
    server = Server(args, models["B"], [])
    b_reference = server.complete(doc)
    server.stop()
    files_before = len(offload_files(tier))
    server = Server(args, models["B"], ["--kv-offload-dir", tier])
    b_answer = server.complete(doc)
    check(b_answer[2] == 0, f"checkpoint B hit {b_answer[2]} tokens of A's tier")
    check(b_answer[:2] == b_reference[:2], "checkpoint B with A's tier answers differently")
    check(server.get_json("/server_info")["kv_offload"]["disk"]["foreign_files"] >= files_before,
          "A's files not counted as foreign")
    server.stop()
    server = Server(args, models["A"], ["--kv-offload-dir", tier, "--kv-cache-dtype", "bf16"])
    bf16 = server.complete(doc)
    check(bf16[2] == 0, f"a bf16 cache hit {bf16[2]} tokens of the f32 tier")
    server.stop()
    check(len([f for f in offload_files(tier)]) >= files_before, "A's files were removed")
    print("foreign: no hits for checkpoint B or a bf16 cache; B's answer unchanged", flush=True)

    # truncated: every file cut in half while A runs.
    server = Server(args, models["A"], ["--kv-offload-dir", tier])
    for other in others:
        server.complete(other)
    files = offload_files(tier)
    check(len(files) > 0, "no tier files to truncate")
    for f in files:
        with open(f, "r+b") as fh:
            fh.truncate(os.path.getsize(f) // 2)
    cut = server.complete(doc)
    check(same_answer(cut, reference), "after truncation: another answer")
    check(cut[2] < MIN_CACHED, f"truncated files still hit {cut[2]} tokens")
    check(server.metric("strata:kv_offload_load_failures_total") >= 1, "no load failure counted")
    server.stop()
    server = Server(args, models["A"], ["--kv-offload-dir", tier])
    check(server.get_json("/server_info")["kv_offload"]["disk"]["corrupt_entries"] > 0,
          "the next start found no bad file")
    check(same_answer(server.complete(doc), reference), "after a start over bad files: another answer")
    server.stop()
    print(f"truncated: {len(files)} files cut, DOC computed again ({cut[2]} cached), same answer",
          flush=True)

    # full: a 1 MiB disk tier keeps serving.
    small = os.path.join(args.work, "tier_small")
    server = Server(args, models["A"], ["--kv-offload-dir", small, "--kv-offload-disk", "1MiB"])
    for prompt in [doc] + others + [doc]:
        answer = server.complete(prompt)
    check(same_answer(answer, reference), "with a full disk tier: another answer")
    disk = server.get_json("/server_info")["kv_offload"]["disk"]
    check(disk["bytes_used"] <= disk["capacity_bytes"] and disk["evictions"] > 0,
          f"the 1 MiB tier: {disk}")
    server.stop()
    print(f"full: {disk['evictions']} evictions, {disk['bytes_used']} of {disk['capacity_bytes']} "
          f"bytes used, answers right", flush=True)

    # kill -9 while the tier writes.
    killed = os.path.join(args.work, "tier_killed")
    server = Server(args, models["A"], ["--kv-offload-dir", killed])
    for prompt in [doc] + others:
        server.complete(prompt)
    server.kill()
    server = Server(args, models["A"], ["--kv-offload-dir", killed])
    answer = server.complete(doc)
    check(same_answer(answer, reference), "after kill -9: another answer")
    server.stop()
    print(f"kill -9: restarted, DOC answered right ({answer[2]} cached)", flush=True)
    print(f"PASS ({time.time() - t_start:.0f} s)")


if __name__ == "__main__":
    main()
