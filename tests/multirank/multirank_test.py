#!/usr/bin/env python3
"""Multi-rank `strata serve` end to end (issue 9; server/MULTIRANK.md).

Real `strata serve` processes on 127.0.0.1, joined over Gloo (data-parallel attention,
expert-parallel MoE), against one process serving alone:

  setup        make the tiny K3- and Kimi-Linear-shaped checkpoints (7 routed experts, the demo
               tokenizer copied in) once for the other cases
  equal        1 process vs 2 processes (7 experts split 4/3) vs 4 processes (redundant expert
               replicas from a placement file): the same prompts (k3: and a chat with an image),
               sent concurrently to different ranks' HTTP ports, give the same greedy tokens (and
               log-probabilities within 1e-3)
  local-ranks  one process with --local-ranks 2 (and replicas) equals one process alone
  kill         kill -9 one of 3 ranks mid-generation: every survivor exits non-zero within the
               collective timeout (plus slack) and its error names the dead rank and a collective
  hang         SIGSTOP one of 3 ranks of an idle group: the others' step all-reduce times out
               after the collective timeout and they exit non-zero naming the silent rank
  cuda-ep      with --device cuda (run it with strata-emu, the CUDA path on the CPU emulator,
               and --family k3cuda, real MLA/KDA head shapes): 2 processes and one process with
               --local-ranks 2, each rank holding only its experts' weights and exchanging rows
               on the device, equal one process alone
  tp           --tensor-parallel-size 2 (families k3tp, kltp: head counts 2 divides) in one
               process (with speculative decoding and prefix hits; then with
               --decode-context-parallel-size 2) and over two processes (rank 0 serves, rank 1
               only computes) equals one process alone, a chat with an image too (k3tp); kill -9
               of rank 1 ends rank 0 within the collective timeout
  tp-dp        two data-parallel groups of --tensor-parallel-size 2 (experts over all 4 ranks)
               in one process (drafts, prefix hits) and over four processes joined by Gloo with
               --decode-context-parallel-size 2 (ranks 0 and 2 serve) equal one process alone,
               a chat with an image (k3tp) included; also with --device cuda (strata-emu,
               --family k3cudatp: the exchange in device memory)
  tp-offload   --kv-offload-dir under --tensor-parallel-size 2 (with --device cuda on strata-emu):
               a prompt pushed out of the cache comes back from the lead's disk tier, same tokens
  cuda-tp      --device cuda --tensor-parallel-size 2 (strata-emu, --family k3cudatp) in one
               process and over two processes, and TP 4 x DCP 2 over two processes of two local
               ranks, give one process's greedy tokens (log-probabilities within 5e-2) with the
               decode steps as CUDA graphs on every rank; SIGTERM stops the group cleanly

usage: multirank_test.py CASE --strata BIN --make-checkpoint BIN --work DIR
                         [--family k3|kl|k3cuda|k3tp|kltp|k3cudatp] [--device cpu|cuda]
"""
import argparse
import base64
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import zlib

MODEL_NAME = "tiny"
NUM_EXPERTS = 7
VOCAB = 8192  # the demo tokenizer's size
MAX_TOKENS = 10
FAMILIES = {"k3": ["--family", "k3", "--seed", "31", "--vision"],
            "kl": ["--family", "kimi-linear", "--seed", "32"],
            # The shapes the CUDA kernels take (MLA latent 512 + 64, KDA head_dim 128).
            "k3cuda": ["--family", "k3", "--seed", "33", "--set", "kda_head_dim=128", "--set",
                       "kv_lora=512", "--set", "qk_rope=64", "--set", "qk_nope=128", "--set",
                       "v_head=128", "--set", "hidden=256", "--set", "layers=2", "--set",
                       "expert_intermediate=64"],
            # Head counts that 2 divides (tensor parallelism splits heads).
            # With a vision tower: the tp cases also send a chat with an image.
            "k3tp": ["--family", "k3", "--seed", "34", "--vision", "--set", "mla_heads=4", "--set",
                     "kda_heads=4"],
            "kltp": ["--family", "kimi-linear", "--seed", "35", "--set", "mla_heads=4", "--set",
                     "kda_heads=4"],
            # The CUDA kernels' shapes with head counts 2 divides.
            "k3cudatp": ["--family", "k3", "--seed", "36", "--set", "kda_head_dim=128", "--set",
                         "kv_lora=512", "--set", "qk_rope=64", "--set", "qk_nope=128", "--set",
                         "v_head=128", "--set", "hidden=256", "--set", "layers=2", "--set",
                         "expert_intermediate=64", "--set", "mla_heads=4", "--set",
                         "kda_heads=4", "--vision"]}


def fail(message):
    print("FAIL: " + message, flush=True)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def checkpoint_dir(work, family):
    return os.path.join(work, "ckpt_" + family)


def server_env():
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"  # several servers share the test machine's cores
    for name in ("LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX", "LWS_GROUP_SIZE"):
        env.pop(name, None)
    return env


class Server:
    """One `strata serve` process; its HTTP port is read from the ready line on stdout."""

    def __init__(self, args, name, work, extra, env=None, cache_memory="32MiB"):
        self.name = name
        self.log_path = os.path.join(work, name + ".log")
        self.log = open(self.log_path, "w")
        cmd = [args.strata, "serve", "--model", checkpoint_dir(args.work, args.family),
               "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", "0",
               "--kv-cache-memory", cache_memory, "--max-num-seqs", "8", "--http-threads", "1",
               "--drain-timeout", "2", "--device", args.device] + extra
        if args.device == "cuda":
            # The tightest pacing: while any sequence generates, a step's prompt chunks share
            # 64 tokens, so where a prompt is split depends on which requests arrived when. The
            # device's KDA prefill counts its 16-token chunks from each piece's start, so the
            # CUDA engine splits prompts at multiples of 16 only (prefill_chunk_alignment) and the
            # result does not depend on the split (unaligned, this case failed 4 runs in 6 at
            # 2-5e-2).
            cmd += ["--target-itl-ms", "1"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env={**server_env(), **(env or {})})
        self.port = None
        self.stdout = []
        self.ready = threading.Event()
        threading.Thread(target=self._read_stdout, daemon=True).start()

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.stdout.append(line)
            m = re.search(r"serving '.*' on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                self.ready.set()
        self.ready.set()

    def wait_ready(self, deadline):
        self.ready.wait(max(0.0, deadline - time.time()))
        if self.port is None:
            self.dump()
            fail(f"{self.name} did not become ready (exit {self.proc.poll()})")

    def lost_coordinator_port(self):
        """Rank 0 found the coordinator port taken: free_port() raced another test for it."""
        return self.proc.poll() is not None and "Address already in use" in self.log_text()

    def log_text(self):
        if not self.log.closed:  # stop_group closes it
            self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def dump(self):
        print(f"---- {self.name} stderr (last 40 lines)", flush=True)
        print("\n".join(self.log_text().splitlines()[-40:]), flush=True)


def start_group(args, label, world, local_ranks=1, placement=None, timeout_s=20):
    """Starts world / local_ranks processes of one group; returns them once all are ready.

    The coordinator port is picked free and then released, so a test running alongside can take
    it before rank 0 listens: then the group is stopped and started again on another port."""
    return start_ranks(
        lambda coordinator: start_group_once(args, label, world, local_ranks, placement,
                                             timeout_s, coordinator),
        lambda servers: servers, 60)


def start_group_once(args, label, world, local_ranks, placement, timeout_s, coordinator):
    servers = []
    num_procs = world // local_ranks
    for node in range(num_procs):
        extra = []
        if world > 1:
            extra = ["--world-size", str(world), "--local-ranks", str(local_ranks),
                     "--node-rank", str(node), "--coordinator", coordinator,
                     "--collective-timeout-s", str(timeout_s), "--rendezvous-timeout-s", "60"]
            if placement:
                extra += ["--expert-placement", placement]
        servers.append(Server(args, f"{label}_node{node}", args.work_case, extra))
    return servers


def start_ranks(make, leads_of, ready_s):
    """Starts ranks that rendezvous at a coordinator: make(coordinator) returns the Servers,
    leads_of(servers) those that must become ready (serve HTTP) within ready_s. As start_group,
    a coordinator port another test took meanwhile starts them again on a fresh one."""
    for attempt in range(3):
        servers = make(f"127.0.0.1:{free_port()}")
        leads = leads_of(servers)
        deadline = time.time() + ready_s
        while time.time() < deadline and not all(s.port is not None for s in leads):
            if any(s.proc.poll() is not None for s in servers):
                break
            time.sleep(0.05)
        if all(s.port is not None for s in leads):
            return servers
        if attempt == 2 or not any(s.lost_coordinator_port() for s in servers):
            break
        print("the coordinator port was taken meanwhile; starting again", flush=True)
        for s in servers:
            if s.proc.poll() is None:
                s.proc.kill()
            s.proc.wait()
            s.log.close()
    for s in leads:
        s.wait_ready(time.time())  # names the first that failed and fails the test
    return servers


def stop_group(servers):
    # Together: a rank leaves the lockstep only once every rank stops.
    for s in servers:
        if s.proc.poll() is None:
            s.proc.send_signal(signal.SIGTERM)
    for s in servers:
        try:
            code = s.proc.wait(60)
        except subprocess.TimeoutExpired:
            s.dump()
            s.proc.kill()
            fail(f"{s.name} did not exit within 60 s of SIGTERM")
        if code != 0:
            s.dump()
            fail(f"{s.name} exited {code} after SIGTERM (expected 0)")
        s.log.close()


def post(port, path, body, timeout=60):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def prompts():
    rng = random.Random(9)
    # Token ids below the demo tokenizer's special tokens; lengths mix prefill chunk sizes.
    return [[rng.randrange(7936) for _ in range(n)] for n in (5, 17, 40, 9, 64, 23)]


def complete(port, prompt, max_tokens=MAX_TOKENS):
    """`prompt`: token ids, (token ids, extra request fields), or {"messages": [...]} (a chat)."""
    if isinstance(prompt, dict):
        body = {"model": MODEL_NAME, "messages": prompt["messages"], "max_tokens": max_tokens,
                "temperature": 0, "ignore_eos": True, "logprobs": True,
                "skip_special_tokens": False}
        content = post(port, "/v1/chat/completions", body)["choices"][0]["logprobs"]["content"]
        return [t["token"] for t in content], [t["logprob"] for t in content]
    prompt, extra = prompt if isinstance(prompt, tuple) else (prompt, {})
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "logprobs": 0, "skip_special_tokens": False, **extra}
    choice = post(port, "/v1/completions", body)["choices"][0]
    return choice["logprobs"]["tokens"], choice["logprobs"]["token_logprobs"]


def generate_all(servers, prompt_list=None):
    """Every prompt, sent at once, prompt i to process i mod n; [(tokens, logprobs)]."""
    prompt_list = prompt_list or prompts()
    results = [None] * len(prompt_list)
    errors = []

    def run(i, prompt):
        try:
            results[i] = complete(servers[i % len(servers)].port, prompt)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"prompt {i}: {e}")

    threads = [threading.Thread(target=run, args=(i, p)) for i, p in enumerate(prompt_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for s in servers:
            s.dump()
        fail("; ".join(errors))
    return results


def compare(label, reference, got, logprob_tolerance=1e-3):
    for i, ((ref_tokens, ref_lp), (tokens, lp)) in enumerate(zip(reference, got)):
        if tokens != ref_tokens:
            fail(f"{label}: prompt {i}: tokens {tokens} != one process's {ref_tokens}")
        worst = max(abs(a - b) for a, b in zip(ref_lp, lp))
        if worst > logprob_tolerance:
            fail(f"{label}: prompt {i}: log-probabilities differ by {worst:.2e} "
                 f"(> {logprob_tolerance})")
    print(f"ok   {label}: {len(got)} prompts x {MAX_TOKENS} greedy tokens equal one process's",
          flush=True)


def weight_copy_bytes(port):
    info = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info").read())
    return info["model"]["weight_copy_bytes"]


# Bytes of the weights one process alone copies to huge pages (set by reference_tokens).
single_copy_bytes = None


def reference_tokens(args, prompt_list=None):
    global single_copy_bytes
    servers = start_group(args, "single", 1)
    try:
        single_copy_bytes = weight_copy_bytes(servers[0].port)
        return generate_all(servers, prompt_list)
    finally:
        stop_group(servers)


def check_expert_share(servers, label):
    """Each process of a group copies only its ranks' routed experts: less than one process
    alone (the dense weights, router and embedding are the same everywhere)."""
    if not single_copy_bytes:  # not measured, or --device cuda (no host copy at all)
        return
    copied = [weight_copy_bytes(s.port) for s in servers]
    for node, got in enumerate(copied):
        if not 0 < got < single_copy_bytes:
            fail(f"{label}: process {node} copied {got} bytes of weights, one process alone "
                 f"{single_copy_bytes}: it should hold only its ranks' experts")
    print(f"ok   {label}: the processes copy {copied} bytes of weights, one alone "
          f"{single_copy_bytes}", flush=True)


def metric_sum(text, name, rank):
    """Sum of the samples of `name` with label rank="<rank>" in a Prometheus text page."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and f'rank="{rank}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def check_rank_metrics(port, ranks):
    """Each rank's routed-token counters and all-to-all histogram have counted (the metrics are
    polled from the engine every 200 ms: wait up to 5 s)."""
    deadline = time.time() + 5
    while True:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        missing = [f"rank {r}: {name}" for r in ranks
                   for name in ("strata:expert_routed_tokens_total",
                                "strata:all_to_all_seconds_count")
                   if metric_sum(text, name, r) <= 0]
        if not missing:
            return
        if time.time() > deadline:
            fail("/metrics lacks " + ", ".join(missing))
        time.sleep(0.2)


def run_group(args, label, world, local_ranks=1, placement=None, prompt_list=None):
    servers = start_group(args, label, world, local_ranks, placement)
    if world // local_ranks > 1:
        check_expert_share(servers, label)
    got = generate_all(servers, prompt_list)
    for node, s in enumerate(servers):
        check_rank_metrics(s.port, range(node * local_ranks, (node + 1) * local_ranks))
    stop_group(servers)
    return got


def write_placement(args, name, replicas):
    path = os.path.join(args.work_case, name)
    with open(path, "w") as f:
        json.dump({"num_experts": NUM_EXPERTS, "replicas": replicas}, f)
    return path


def case_setup(args):
    if os.path.exists(args.work):
        shutil.rmtree(args.work)
    os.makedirs(args.work)
    # --demo-tokenizer: the demo tokenizer (vocab 8192) in the family's chat format.
    for family, flags in FAMILIES.items():
        out = checkpoint_dir(args.work, family)
        subprocess.run([args.make_checkpoint, "--preset", "tiny", *flags, "--set",
                        f"vocab={VOCAB}", "--set", f"experts={NUM_EXPERTS}", "--demo-tokenizer",
                        "--out", out], check=True, stdout=subprocess.DEVNULL)
    print("ok   setup: checkpoints " + ", ".join(FAMILIES), flush=True)


def case_equal(args):
    equal_prompts = prompts()
    if args.family in VISION_FAMILIES:  # a data-parallel rank encodes its own requests' images
        equal_prompts.append(image_prompt(4))
    reference = reference_tokens(args, equal_prompts)
    got = run_group(args, "two", 2, prompt_list=equal_prompts)
    compare(f"{args.family}: 2 processes, 7 experts split 4/3", reference, got)
    # Even split of 7 on 4: 0-1 | 2-3 | 4-5 | 6; expert 0 also on ranks 2, 3 and expert 5 on 0.
    placement = write_placement(args, "replicas4.json", [{"expert": 0, "ranks": [2, 3]},
                                                         {"expert": 5, "ranks": [0]}])
    got = run_group(args, "four", 4, placement=placement, prompt_list=equal_prompts)
    compare(f"{args.family}: 4 processes, redundant replicas", reference, got)


def case_local_ranks(args):
    reference = reference_tokens(args)
    placement = write_placement(args, "replicas2.json", [{"expert": 6, "ranks": [0]}])
    got = run_group(args, "local2", 2, local_ranks=2, placement=placement)
    compare(f"{args.family}: 1 process with --local-ranks 2 (replicas)", reference, got)


def case_replicas(args):
    """--replicas 2: two whole-model engine loops in one process, no collectives; concurrent
    requests spread over both (least loaded) and give one process's tokens."""
    reference = reference_tokens(args)
    server = Server(args, "replicas2", args.work_case, ["--replicas", "2"])
    server.wait_ready(time.time() + 60)
    got = generate_all([server])
    deadline = time.time() + 5  # the metrics are polled from the engine every 200 ms
    while True:
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics").read().decode()
        idle = [r for r in (0, 1) if metric_sum(text, "strata:generation_tokens_total", r) <= 0]
        if not idle:
            break
        if time.time() > deadline:
            server.dump()
            fail(f"--replicas 2: replica(s) {idle} generated nothing")
        time.sleep(0.2)
    info = json.loads(urllib.request.urlopen(
        f"http://127.0.0.1:{server.port}/server_info").read())
    if info["parallel"]["replicas"] != 2 or "--coordinator" in server.log_text():
        fail(f"--replicas 2: server_info parallel {info['parallel']}")
    stop_group([server])
    compare(f"{args.family}: --replicas 2, both replicas busy", reference, got)


def expect_survivors_fail(servers, victim, since, limit, pattern, cascade=None):
    """Every server but `victim` exits non-zero within `limit` s of `since`, logging `pattern`
    (or, when `cascade` is given, `cascade`: a survivor blocked on another survivor rather than
    on the victim sees that survivor exit first; at least one must still match `pattern`);
    returns how long each took."""
    times = []
    named_victim = False
    for s in servers:
        if s is victim:
            continue
        try:
            code = s.proc.wait(max(0.1, since + limit - time.time()))
        except subprocess.TimeoutExpired:
            s.dump()
            s.proc.kill()
            fail(f"{s.name} still running {limit} s after {victim.name} failed")
        took = time.time() - since
        errors = [ln for ln in s.log_text().splitlines() if " E [" in ln or "strata:" in ln]
        if code == 0:
            s.dump()
            fail(f"{s.name} exited 0 after its peer failed (expected non-zero)")
        if any(re.search(pattern, ln) for ln in errors):
            named_victim = True
        elif not (cascade and any(re.search(cascade, ln) for ln in errors)):
            s.dump()
            fail(f"{s.name}'s error log does not match /{pattern}/"
                 + (f" nor /{cascade}/" if cascade else ""))
        print(f"ok   {s.name} exited {code} {took:.1f} s later: {errors[-1][24:300]}", flush=True)
        times.append(took)
    for s in servers:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
        if not s.log.closed:
            s.log.close()
    if not named_victim:
        fail(f"no survivor named {victim.name} in its error log (/{pattern}/)")
    return times


def case_kill(args):
    """kill -9 of rank 1 mid-generation: its peers see the closed connections at once."""
    timeout_s = 5
    servers = start_group(args, "kill", 3, timeout_s=timeout_s)
    # Long generations on every rank, so all are mid-step when rank 1 dies.
    for s in servers:
        threading.Thread(target=lambda p=s.port: _ignore_errors(complete, p, [1, 2, 3], 1000),
                         daemon=True).start()
    time.sleep(2.0)
    for s in servers:
        if s.proc.poll() is not None:
            s.dump()
            fail(f"{s.name} exited early ({s.proc.returncode})")
    servers[1].proc.send_signal(signal.SIGKILL)
    # The collective timeout plus slack for a loaded machine.
    expect_survivors_fail(servers, servers[1], time.time(), timeout_s + 10,
                          r"rank 1\b.*(closed|did not answer)|(all-to-all|all-reduce).*rank 1\b",
                          cascade=r"(all-to-all|all-reduce).*rank [02]\b.*(closed|did not answer)")


def case_hang(args):
    """SIGSTOP of rank 2 in an idle group: its peers' has-work all-reduce times out."""
    timeout_s = 3
    servers = start_group(args, "hang", 3, timeout_s=timeout_s)
    time.sleep(0.5)
    servers[2].proc.send_signal(signal.SIGSTOP)
    stopped_at = time.time()
    # Which survivor waits on rank 2 depends on where in the all-reduce rank 2 stopped: one
    # blocked on the other survivor sees that survivor exit (after its timeout) instead.
    times = expect_survivors_fail(servers, servers[2], stopped_at, timeout_s + 10,
                                  r"step gate all-reduce.*rank 2\b.*did not answer",
                                  cascade=r"step gate all-reduce.*rank [01]\b.*(closed|did not answer)")
    if min(times) < timeout_s * 0.8:  # a silent peer is only detected by the timeout
        fail(f"a survivor failed {min(times):.1f} s after the hang, before the {timeout_s} s "
             "collective timeout")


def case_cuda_ep(args):
    if args.device != "cuda":
        fail("cuda-ep runs with --device cuda")
    reference = reference_tokens(args)
    got = run_group(args, "two", 2)
    compare(f"{args.family} on the device: 2 processes, 7 experts split 4/3", reference, got)
    got = run_group(args, "local2", 2, local_ranks=2)
    compare(f"{args.family} on the device: 1 process with --local-ranks 2", reference, got)


def server_info(port):
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info").read())


def png(width, height, seed):
    """An RGB PNG of seeded noise (written here: the test's interpreter may lack Pillow)."""
    rng = random.Random(seed)
    raw = b"".join(b"\0" + bytes(rng.randrange(256) for _ in range(3 * width))
                   for _ in range(height))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) +
            chunk(b"IEND", b""))


def image_prompt(seed):
    """A chat with a 112 x 84 image (48 patches, 12 rows in the text model): under tensor
    parallelism the lead writes the rows and the followers zeros at those places."""
    url = "data:image/png;base64," + base64.b64encode(png(112, 84, seed)).decode()
    return {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": "What is this?"}]}]}


VISION_FAMILIES = ("k3", "k3tp", "k3cudatp")


def drafting_prompt(seed):
    """One token 192 times, and a logit_bias that makes it the continuation too: n-gram lookup
    drafts it again after every token and the sampler accepts the drafts (the followers must
    replay those). Its blocks are also cached for the second round's prefix hits."""
    token = random.Random(seed).randrange(7936)
    return ([token] * 192, {"logit_bias": {str(token): 100}})


# N-gram drafts: the followers keep in their KDA caches what the lead's sampler accepted.
NGRAM_SPEC = ('{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, '
              '"prompt_lookup_max": 2}')


def check_drafted_and_hit(label, engine):
    if engine["num_prefix_hit_tokens"] == 0 or engine["num_spec_accepted_tokens_total"] == 0:
        fail(f"{label}: no prefix hit or no accepted draft: {engine}")
    print(f"ok   {label}: {engine['num_prefix_hit_tokens']} prefix-hit tokens, "
          f"{engine['num_spec_draft_tokens_total']} draft tokens "
          f"({engine['num_spec_accepted_tokens_total']} accepted)", flush=True)


def check_tp2_dcp2(args, name, label, reference, tp_prompts, ready_s, *tolerance):
    """One process of TP 2 x DCP 2: /server_info shows twice one rank's tokens per group, and the
    greedy tokens equal one process's (within `tolerance` when given)."""
    servers = [Server(args, name, args.work_case,
                      ["--tensor-parallel-size", "2", "--decode-context-parallel-size", "2"])]
    servers[0].wait_ready(time.time() + ready_s)
    plan = server_info(servers[0].port)["memory_plan"]
    if plan["num_tokens_per_group"] != 2 * plan["num_tokens"]:
        fail(f"{label}: /server_info memory_plan with DCP 2: {plan}")
    got = generate_all(servers, tp_prompts)
    stop_group(servers)
    compare(f"{label}: --tensor-parallel-size 2 --decode-context-parallel-size 2", reference, got,
            *tolerance)


def case_tp(args):
    """--tensor-parallel-size 2: one process with two ranks, then one process per rank (rank 0
    serves, rank 1 only computes), each equal to one process alone; killing rank 1 ends rank 0
    within the collective timeout."""
    tp_prompts = prompts() + [drafting_prompt(11)]
    if args.family in VISION_FAMILIES:
        tp_prompts.append(image_prompt(5))
    reference = reference_tokens(args, tp_prompts)
    # With n-gram speculative decoding and, the second time, prefix-cache hits (KDA checkpoints
    # of each rank's heads).
    servers = [Server(args, "tp_local", args.work_case,
                      ["--tensor-parallel-size", "2", "--speculative-config", NGRAM_SPEC])]
    servers[0].wait_ready(time.time() + 60)
    info = server_info(servers[0].port)["parallel"]
    if info["tensor_parallel_size"] != 2 or info["data_parallel_size"] != 1:
        fail(f"/server_info parallel: {info}")
    for attempt in ("", ", again from the prefix cache"):
        got = generate_all(servers, tp_prompts)
        compare(f"{args.family}: --tensor-parallel-size 2 in one process{attempt}", reference, got)
    engine = server_info(servers[0].port)["engine"]
    stop_group(servers)
    check_drafted_and_hit(f"{args.family} under tensor parallelism", engine)

    # Decode context parallelism: each rank holds every other position's latent row, so a
    # sequence holds twice what one rank's cache does.
    check_tp2_dcp2(args, "tp_dcp", f"{args.family}", reference, tp_prompts, 60)

    timeout_s = 5
    def make_pair(coordinator):
        extra = ["--tensor-parallel-size", "2", "--world-size", "2", "--coordinator", coordinator,
                 "--collective-timeout-s", str(timeout_s), "--rendezvous-timeout-s", "60"]
        return [Server(args, f"tp_rank{r}", args.work_case, extra + ["--rank", str(r)])
                for r in range(2)]
    lead, follower = start_ranks(make_pair, lambda ranks: ranks[:1], 60)
    got = generate_all([lead], tp_prompts)
    compare(f"{args.family}: --tensor-parallel-size 2 over 2 processes", reference, got)
    if follower.port is not None or follower.proc.poll() is not None:
        fail(f"rank 1 answered HTTP or exited ({follower.proc.poll()}): it only computes")
    threading.Thread(target=lambda: _ignore_errors(complete, lead.port, [1, 2, 3], 1000),
                     daemon=True).start()
    time.sleep(1.0)
    follower.proc.send_signal(signal.SIGKILL)
    killed_at = time.time()
    try:
        code = lead.proc.wait(timeout=timeout_s + 15)
    except subprocess.TimeoutExpired:
        lead.dump()
        fail("rank 0 still runs after its tensor-parallel peer was killed")
    if code != 75 or not re.search(r"tensor-parallel|step gate", lead.log_text()):
        lead.dump()
        fail(f"rank 0 exited with {code} without naming the failed collective")
    print(f"ok   {args.family}: rank 0 exited {code} {time.time() - killed_at:.1f} s after its "
          "tensor-parallel peer was killed", flush=True)


# Measured 1.3e-2 at most on the emulator (the device path itself is ~1e-2 from the f32 CPU).
CUDA_TP_LOGPROB_TOLERANCE = 5e-2


def case_tp_dp(args):
    """Data parallelism over tensor-parallel groups: two groups of --tensor-parallel-size 2, the
    routed experts spread over all four ranks (each group's rank r sends its share of the rows
    through the exchange). One process (vLLM's --data-parallel-size 2 spelling; n-gram drafts,
    then prefix hits), then four processes over Gloo with --decode-context-parallel-size 2
    (ranks 0 and 2 serve, 1 and 3 only compute); concurrent requests to both groups give one
    process's greedy tokens. With --device cuda (strata-emu, --family k3cudatp) the executors
    exchange the rows on the device; log-probabilities then agree to CUDA_TP_LOGPROB_TOLERANCE
    (see case_cuda_tp)."""
    tolerance = [CUDA_TP_LOGPROB_TOLERANCE] if args.device == "cuda" else []
    ready_s = 90 if args.device == "cuda" else 60
    dp_prompts = prompts() + [drafting_prompt(13)]
    if args.family in VISION_FAMILIES:
        dp_prompts.append(image_prompt(7))
    reference = reference_tokens(args, dp_prompts)
    server = Server(args, "tp_dp_local", args.work_case,
                    ["--tensor-parallel-size", "2", "--data-parallel-size", "2",
                     "--speculative-config", NGRAM_SPEC])
    server.wait_ready(time.time() + ready_s)
    info = server_info(server.port)["parallel"]
    if (info["tensor_parallel_size"], info["data_parallel_size"], info["expert_parallel_size"],
            info["local_ranks"]) != (2, 2, 4, 4):
        fail(f"/server_info parallel: {info}")
    for attempt in ("", ", again from the prefix cache"):
        got = generate_all([server], dp_prompts)
        compare(f"{args.family}: 2 data-parallel groups of --tensor-parallel-size 2 in one "
                f"process{attempt}", reference, got, *tolerance)
    # Both groups' leads stepped and ran their experts' rows (requests go to the least loaded).
    check_rank_metrics(server.port, [0, 2])
    stop_group([server])

    # With decode context parallelism too: each group's two ranks split its sequences' cache.
    def make_ranks(coordinator):
        extra = ["--tensor-parallel-size", "2", "--decode-context-parallel-size", "2",
                 "--world-size", "4", "--coordinator", coordinator, "--rendezvous-timeout-s", "60"]
        return [Server(args, f"tp_dp_rank{r}", args.work_case, extra + ["--rank", str(r)],
                       env={"STRATA_CPU_COMM": "gloo"}) for r in range(4)]
    ranks = start_ranks(make_ranks, lambda ranks: [ranks[0], ranks[2]], ready_s)
    leads = [ranks[0], ranks[2]]
    got = generate_all(leads, dp_prompts)
    for r in (1, 3):
        if ranks[r].port is not None or ranks[r].proc.poll() is not None:
            fail(f"rank {r} answered HTTP or exited ({ranks[r].proc.poll()}): it only computes")
    if "Gloo over TCP" not in ranks[0].log_text():
        fail("the four processes did not connect over Gloo")
    stop_group(ranks)
    compare(f"{args.family}: 2 groups of --tensor-parallel-size 2 x --decode-context-parallel-size"
            " 2 over 4 processes (Gloo)", reference, got, *tolerance)


def case_tp_offload(args):
    """--kv-offload-dir under --tensor-parallel-size 2 (run it with --device cuda on strata-emu,
    --family k3cudatp; the CPU has kv_offload_serve_tp): a 700-token prompt pushed out of a
    2 MiB cache per rank (2 sequences: ~1,400 tokens and one KDA checkpoint) by three others
    comes back from the lead's disk tier (every rank's share of each block and checkpoint) with
    the tokens it was computed with, loading over several steps (64 KiB a step): on the device
    those loads run on the copy stream beside the steps."""
    rng = random.Random(21)
    doc, *others = [[rng.randrange(300, 7900) for _ in range(700)] for _ in range(4)]
    tier = os.path.join(args.work_case, "tier")
    shutil.rmtree(tier, ignore_errors=True)
    server = Server(args, "tp_offload", args.work_case,
                    ["--tensor-parallel-size", "2", "--kv-offload-dir", tier,
                     "--kv-offload-max-load-per-step", "64KiB", "--max-num-seqs", "2"],
                    cache_memory="2MiB")
    server.wait_ready(time.time() + 90)
    first = complete(server.port, doc, 6)
    for other in others:
        complete(server.port, other, 6)
    again = complete(server.port, doc, 6)
    hits = server_info(server.port)["kv_offload"]["prefix_hits"]
    stop_group([server])
    if hits["tokens"] < 640 or hits["checkpoints_loaded"] < 1:
        fail(f"{args.family}: no tier hit under tensor parallelism: {hits}")
    if hits["loaded_over_several_steps"] < 1:
        fail(f"{args.family}: the tier hit loaded in one step: {hits}")
    worst = max(abs(a - b) for a, b in zip(first[1], again[1]))
    if again[0] != first[0] or worst > CUDA_TP_LOGPROB_TOLERANCE:
        fail(f"{args.family}: from the tier {again} != computed {first}")
    print(f"ok   {args.family}: {hits['tokens']} prompt tokens from the tier under "
          f"--tensor-parallel-size 2, the computed run's tokens (log-probabilities within "
          f"{worst:.1e})", flush=True)


def case_cuda_tp(args):
    """--device cuda --tensor-parallel-size 2 (strata-emu, the CUDA path on the CPU emulator): one
    process with two ranks (n-gram drafts, then prefix hits), the same with
    --decode-context-parallel-size 2, then one process per rank (rank 0 serves, rank 1 only
    computes), then TP 4 x DCP 2 over two processes of two local ranks; each gives the greedy
    tokens of one process alone on the device, the decode steps captured as CUDA graphs on
    every rank (the collectives on the stream). The shards add their f32 partial
    products in another order and the bf16 rounding of a later GEMM operand may move by an ulp,
    so the chosen tokens' log-probabilities agree to ~1e-2 (CUDA_TP_LOGPROB_TOLERANCE), not bit
    for bit (engine/cuda/tensor_parallel_test.cc); these prompts have no near-tie that would
    flip a token."""
    if args.device != "cuda":
        fail("cuda-tp runs with --device cuda")
    tp_prompts = prompts() + [drafting_prompt(12)]
    if args.family in VISION_FAMILIES:
        tp_prompts.append(image_prompt(6))
    reference = reference_tokens(args, tp_prompts)
    servers = [Server(args, "cuda_tp_local", args.work_case,
                      ["--tensor-parallel-size", "2", "--speculative-config", NGRAM_SPEC])]
    servers[0].wait_ready(time.time() + 90)
    info = server_info(servers[0].port)["parallel"]
    if info["tensor_parallel_size"] != 2:
        fail(f"/server_info parallel: {info}")
    for attempt in ("", ", again from the prefix cache"):
        got = generate_all(servers, tp_prompts)
        compare(f"{args.family} on the device: --tensor-parallel-size 2 in one process{attempt}",
                reference, got, CUDA_TP_LOGPROB_TOLERANCE)
    engine = server_info(servers[0].port)["engine"]
    stop_group(servers)
    check_drafted_and_hit(f"{args.family} on the device under tensor parallelism", engine)
    # Decode steps are CUDA graphs on both ranks, the all-reduces captured on the stream.
    check_graphs_captured(f"{args.family}: --tensor-parallel-size 2 in one process", servers[0], 2)

    # Decode context parallelism on the device: each rank's cache holds every other position and
    # the MLA layers merge the ranks' partial attention (log-sum-exp).
    check_tp2_dcp2(args, "cuda_tp_dcp", f"{args.family} on the device", reference, tp_prompts, 90,
                   CUDA_TP_LOGPROB_TOLERANCE)

    def make_pair(coordinator):
        extra = ["--tensor-parallel-size", "2", "--world-size", "2", "--coordinator", coordinator,
                 "--rendezvous-timeout-s", "60"]
        return [Server(args, f"cuda_tp_rank{r}", args.work_case, extra + ["--rank", str(r)])
                for r in range(2)]
    lead, follower = start_ranks(make_pair, lambda ranks: ranks[:1], 90)
    got = generate_all([lead], tp_prompts)
    compare(f"{args.family} on the device: --tensor-parallel-size 2 over 2 processes", reference,
            got, CUDA_TP_LOGPROB_TOLERANCE)
    if follower.port is not None or follower.proc.poll() is not None:
        fail(f"rank 1 answered HTTP or exited ({follower.proc.poll()}): it only computes")
    stop_group([lead, follower])
    for rank, server in enumerate((lead, follower)):
        check_graphs_captured(f"{args.family}: rank {rank} of 2 processes", server, 1)

    # One group across two processes of two local ranks each (the Helm chart's TP16 over two
    # 8-GPU pods, scaled down): --tensor-parallel-size 4 with --decode-context-parallel-size 2
    # (each context-parallel group of 2 on its own communicator); node 0 leads and serves, node
    # 1 only computes, both capture their ranks' decode graphs.
    def make_nodes(coordinator):
        extra = ["--tensor-parallel-size", "4", "--decode-context-parallel-size", "2",
                 "--local-ranks", "2", "--num-nodes", "2", "--coordinator", coordinator,
                 "--rendezvous-timeout-s", "60"]
        return [Server(args, f"cuda_tp4_node{n}", args.work_case, extra + ["--node-rank", str(n)])
                for n in range(2)]
    nodes = start_ranks(make_nodes, lambda nodes: nodes[:1], 120)
    got = generate_all([nodes[0]], tp_prompts)
    if nodes[1].port is not None or nodes[1].proc.poll() is not None:
        fail(f"node 1 answered HTTP or exited ({nodes[1].proc.poll()}): it only computes")
    stop_group(nodes)
    compare(f"{args.family} on the device: --tensor-parallel-size 4 x "
            "--decode-context-parallel-size 2 over 2 processes of 2 ranks", reference, got,
            CUDA_TP_LOGPROB_TOLERANCE)
    for n, server in enumerate(nodes):
        check_graphs_captured(f"{args.family}: node {n} of a group across 2 processes", server, 2)


def check_graphs_captured(label, server, at_least):
    """The server's log shows at least `at_least` decode graphs captured (one per rank and
    bucket): the step's collectives are on the stream, so tensor-parallel steps are graphs."""
    captured = server.log_text().count("captured the decode graph")
    if captured < at_least:
        server.dump()
        fail(f"{label}: {captured} decode graphs captured, expected at least {at_least}")
    print(f"ok   {label}: {captured} decode graphs captured", flush=True)


def _ignore_errors(fn, *a):
    try:
        fn(*a)
    except Exception:  # noqa: BLE001 - the server is expected to die mid-request
        pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=["setup", "equal", "local-ranks", "replicas", "kill", "hang",
                                     "cuda-ep", "tp", "tp-dp", "tp-offload", "cuda-tp"])
    p.add_argument("--strata", required=True)
    p.add_argument("--make-checkpoint", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--family", choices=sorted(FAMILIES), default="k3")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = p.parse_args()
    if args.case != "setup":
        if not os.path.exists(checkpoint_dir(args.work, args.family)):
            fail(f"no checkpoint in {args.work}: run the setup case first")
        args.work_case = os.path.join(args.work, f"{args.case}_{args.family}")
        os.makedirs(args.work_case, exist_ok=True)
    {"setup": case_setup, "equal": case_equal, "local-ranks": case_local_ranks,
     "replicas": case_replicas, "kill": case_kill, "hang": case_hang,
     "cuda-ep": case_cuda_ep, "tp": case_tp, "tp-dp": case_tp_dp, "tp-offload": case_tp_offload,
     "cuda-tp": case_cuda_tp}[args.case](args)


if __name__ == "__main__":
    main()
