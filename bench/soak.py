#!/usr/bin/env python3
"""Mixed-traffic soak of a running Strata (or any OpenAI-compatible) server: checks invariants
under load, not speed.

    python3 bench/soak.py --port 8000 --seconds 150 --workers 8

Before the load it computes greedy references for a few prompts (some sharing a 300-word
system prompt) one at a time; then WORKERS threads send, for SECONDS, a random mix of: those
references again (plain or streamed: the text must be identical under any batch, prefix-cache
hit or chunking), sampled chats (n up to 3, top-p/top-k, stop strings, logprobs, penalties,
seeds), json_schema outputs (a finished one must parse and match), forced tool calls (arguments
must be JSON), streams the client cuts after a few chunks, 600–1,500-word prompts, streamed
chats with usage, and invalid requests (must be 4xx with an error object). After it: no request
running or waiting (/metrics), the references once more, and the server's RSS before and after.
Run it against a server with few sequences and a small cache (--max-num-seqs 6
--kv-cache-memory 12MiB) to exercise eviction, and with --speculative-config. Exit status 1
when any check failed (each printed as PROBLEM). Standard library only.
"""
import argparse
import http.client
import json
import random
import re
import socket
import sys
import threading
import time

parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--host", default="localhost")
parser.add_argument("--port", type=int, default=8000)
parser.add_argument("--seconds", type=float, default=120, help="how long the load runs")
parser.add_argument("--workers", type=int, default=8, help="client threads")
ARGS = parser.parse_args()
HOST, PORT, DURATION, WORKERS = ARGS.host, ARGS.port, ARGS.seconds, ARGS.workers
MODEL = None
problems = []
counts = {}
lock = threading.Lock()


def note(kind):
    with lock:
        counts[kind] = counts.get(kind, 0) + 1


def problem(msg):
    with lock:
        problems.append(msg)
    print("PROBLEM:", msg, flush=True)


def post(path, body, timeout=300):
    c = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def get(path):
    c = http.client.HTTPConnection(HOST, PORT, timeout=30)
    c.request("GET", path)
    r = c.getresponse()
    data = r.read().decode()
    c.close()
    return r.status, data


def stream(path, body, stop_after=None):
    c = http.client.HTTPConnection(HOST, PORT, timeout=300)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        data = r.read()
        c.close()
        return r.status, data, None
    events = []
    done = False
    while True:
        line = r.fp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        payload = line[6:]
        if payload == b"[DONE]":
            done = True
            break
        events.append(json.loads(payload))
        if stop_after is not None and len(events) >= stop_after:
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
            return 200, None, "cut"
    c.close()
    return 200, events, done


WORDS = "alpha beta gamma delta the of and to a in is that for it as with was on be by tensor cache expert".split()
SYSTEM = " ".join(random.Random(7).choice(WORDS) for _ in range(300))


def prompt_text(rng, length):
    return " ".join(rng.choice(WORDS) for _ in range(length))


# Greedy references: prompt -> text, computed alone before the load.
REF_PROMPTS = [SYSTEM + " question %d: " % i + prompt_text(random.Random(i), 20) for i in range(4)]
REF_PROMPTS += [prompt_text(random.Random(100 + i), 200 + 37 * i) for i in range(3)]
refs = {}


def greedy_body(p, max_tokens=24, stream_=False):
    return {"model": MODEL, "prompt": p, "max_tokens": max_tokens, "temperature": 0, "stream": stream_}


def compute_refs():
    for p in REF_PROMPTS:
        st, data = post("/v1/completions", greedy_body(p))
        assert st == 200, data
        refs[p] = json.loads(data)["choices"][0]["text"]


def completion(kind, path, req):
    """POSTs a request that must succeed; its parsed JSON after the shape checks, or None."""
    st, data = post(path, req)
    return check_completion(kind, req, st, data)


def check_completion(kind, req, st, data):
    """The answer (status, body) to a request that must succeed: its JSON, or None."""
    if st != 200:
        problem(f"{kind}: status {st} {data[:300]!r}")
        return None
    try:
        obj = json.loads(data)
    except ValueError:
        problem(f"{kind}: bad JSON {data[:200]!r}")
        return None
    n = req.get("n", 1)
    if len(obj.get("choices", [])) != n:
        problem(f"{kind}: {len(obj.get('choices', []))} choices for n={n}")
    u = obj.get("usage", {})
    mt = req.get("max_tokens") or req.get("max_completion_tokens")
    if mt and u.get("completion_tokens", 0) > mt * n:
        problem(f"{kind}: completion_tokens {u.get('completion_tokens')} > {mt}*{n}")
    for ch in obj.get("choices", []):
        if ch.get("finish_reason") not in ("stop", "length", "tool_calls"):
            problem(f"{kind}: finish_reason {ch.get('finish_reason')}")
    note(kind)
    return obj


def send_reference(rng):
    """A greedy reference, plain or streamed: the text computed alone before the load."""
    p = rng.choice(REF_PROMPTS)
    if rng.random() < 0.5:
        obj = completion("ref", "/v1/completions", greedy_body(p))
        if obj is None:
            return
        text = obj["choices"][0]["text"]
    else:
        st, ev, done = stream("/v1/completions", greedy_body(p, stream_=True))
        if st != 200 or not done:
            problem(f"ref stream: status {st} done {done}")
            return
        text = "".join(e["choices"][0]["text"] for e in ev if e.get("choices"))
        note("ref")
    if text != refs[p]:
        problem(f"ref mismatch for prompt #{REF_PROMPTS.index(p)}: {text!r} vs {refs[p]!r}")


def send_chat(rng):
    """A sampled chat with random parameters."""
    req = {"model": MODEL, "messages": [{"role": "system", "content": SYSTEM},
                                        {"role": "user", "content": prompt_text(rng, rng.randint(1, 80))}],
           "max_tokens": rng.randint(1, 48), "temperature": rng.choice([0, 0.7, 1.0, 1.5]),
           "n": rng.choice([1, 1, 2, 3])}
    if rng.random() < 0.3: req["top_p"] = 0.9
    if rng.random() < 0.3: req["top_k"] = 20
    if rng.random() < 0.2: req["stop"] = [rng.choice(WORDS)]
    if rng.random() < 0.2: req["logprobs"] = True; req["top_logprobs"] = 3
    if rng.random() < 0.2: req["presence_penalty"] = 0.5
    if rng.random() < 0.1: req["seed"] = rng.randint(0, 1000)
    completion("chat", "/v1/chat/completions", req)


def send_schema(rng):
    """A json_schema output: a finished one parses and has exactly the schema's fields."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    req = {"model": MODEL, "messages": [{"role": "user", "content": prompt_text(rng, 10)}],
           "max_tokens": 64, "temperature": 1.0,
           "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}}
    obj = completion("schema", "/v1/chat/completions", req)
    if obj is None or obj["choices"][0]["finish_reason"] != "stop":
        return
    content = obj["choices"][0]["message"]["content"]
    try:
        v = json.loads(content)
    except ValueError:
        problem(f"schema: invalid JSON {content!r}")
        return
    if set(v) != {"name", "age"} or not isinstance(v["age"], int):
        problem(f"schema: wrong object {v}")


def send_cut_stream(rng):
    """A stream the client closes after a few chunks (the server must abort and free it)."""
    req = {"model": MODEL, "prompt": prompt_text(rng, rng.randint(5, 300)), "max_tokens": 200,
           "stream": True, "temperature": 1.0}
    stream("/v1/completions", req, stop_after=rng.randint(1, 5))
    note("cut")


def send_long(rng):
    """A long prompt: several chunks, cache pressure. Over the server's max_model_len it must be
    refused with context_length_exceeded."""
    req = {"model": MODEL, "prompt": prompt_text(rng, rng.randint(600, 1500)), "max_tokens": 4}
    st, data = post("/v1/completions", req)
    if st == 400 and b"context_length_exceeded" in data:
        note("long_refused")
        return
    check_completion("long", req, st, data)


INVALID = [
    {"prompt": "x", "max_tokens": -3},
    {"prompt": "x", "temperature": "hot"},
    {"messages": "nope"},
    {"prompt": [1, 2, 10 ** 9]},
    {"prompt": "x", "n": 1000},
    {"prompt": "x", "logprobs": 10 ** 6},
    {"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "bogus"}}}},
]


def send_invalid(rng):
    """An invalid request: a 4xx with an error object."""
    bad = dict(rng.choice(INVALID), model=MODEL)
    path = "/v1/chat/completions" if "messages" in bad else "/v1/completions"
    st, data = post(path, bad)
    try:
        has_error = "error" in json.loads(data)
    except ValueError:
        has_error = False
    if not (400 <= st < 500) or not has_error:
        problem(f"invalid: status {st} for {bad}: {data[:200]!r}")
    note("invalid")


def send_tool_call(rng):
    """A forced tool call: the arguments of each call parse as JSON."""
    req = {"model": MODEL, "messages": [{"role": "user", "content": "weather?"}], "max_tokens": 80,
           "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
               "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
               "required": ["city"]}}}], "tool_choice": "required", "temperature": 1.0}
    obj = completion("tool", "/v1/chat/completions", req)
    if obj is None or obj["choices"][0]["finish_reason"] != "tool_calls":
        return
    for tc in obj["choices"][0]["message"].get("tool_calls", []):
        try:
            json.loads(tc["function"]["arguments"])
        except ValueError:
            problem(f"tool: bad arguments {tc}")


def send_stream_chat(rng):
    """A streamed chat with usage: one usage chunk, one finish per choice, max_tokens kept."""
    req = {"model": MODEL, "messages": [{"role": "user", "content": prompt_text(rng, 30)}],
           "max_tokens": rng.randint(1, 40), "stream": True, "stream_options": {"include_usage": True},
           "temperature": 0.8, "n": rng.choice([1, 2])}
    st, ev, done = stream("/v1/chat/completions", req)
    if st != 200 or not done:
        problem(f"stream chat: status {st} done {done}")
        return
    usage = [e for e in ev if e.get("usage")]
    if len(usage) != 1:
        problem(f"stream chat: {len(usage)} usage chunks")
    elif usage[0]["usage"]["completion_tokens"] > req["max_tokens"] * req["n"]:
        problem(f"stream chat: {usage[0]['usage']['completion_tokens']} tokens > {req['max_tokens']}*{req['n']}")
    fin = [c.get("finish_reason") for e in ev for c in e.get("choices", []) if c.get("finish_reason")]
    if len(fin) != req["n"]:
        problem(f"stream chat: {len(fin)} finish reasons for n={req['n']}")
    note("stream")


# (weight, sender): the mix of the load.
MIX = [(20, send_reference), (25, send_chat), (10, send_schema), (10, send_cut_stream),
       (10, send_long), (10, send_invalid), (7, send_tool_call), (8, send_stream_chat)]


def one(rng):
    rng.choices([f for _, f in MIX], weights=[w for w, _ in MIX])[0](rng)


def worker(seed, deadline):
    rng = random.Random(seed)
    while time.time() < deadline:
        try:
            one(rng)
        except Exception as e:
            problem(f"exception {type(e).__name__}: {e}")


def metrics():
    st, text = get("/metrics")
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r'^(strata:[a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+|NaN)$', line)
        if m and "bucket" not in m.group(1):
            key = m.group(1) + (m.group(2) or "")
            out[key] = float(m.group(3))
    return out


def rss_kib():
    """The server's resident memory when it runs on this machine (found by its port), else -1."""
    import subprocess
    pattern = f"serve .*--port[ =]{PORT}( |$)"
    pids = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            return int(open(f"/proc/{pid}/status").read().split("VmRSS:")[1].split()[0])
        except (OSError, IndexError):
            continue
    return -1


def main():
    global MODEL
    MODEL = json.loads(get("/v1/models")[1])["data"][0]["id"]
    compute_refs()
    rss0 = rss_kib()
    deadline = time.time() + DURATION
    ts = [threading.Thread(target=worker, args=(s, deadline)) for s in range(WORKERS)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    time.sleep(2)
    m = metrics()
    for key, v in m.items():
        if key.startswith("strata:num_requests_running") or key.startswith("strata:num_requests_waiting"):
            if v != 0:
                problem(f"after the load: {key} = {v}")
    # references again, alone, after the load (cache full of other entries)
    for p in REF_PROMPTS:
        st, data = post("/v1/completions", greedy_body(p))
        if json.loads(data)["choices"][0]["text"] != refs[p]:
            problem(f"ref mismatch after load, prompt #{REF_PROMPTS.index(p)}")
    interesting = {k: v for k, v in m.items() if any(s in k for s in (
        "usage_perc", "preemptions", "evictions", "prefix_cache", "request_success", "checkpoints", "running", "waiting"))}
    print(json.dumps(interesting, indent=0))
    print("counts", counts, "rss MiB", rss0 // 1024, "->", rss_kib() // 1024)
    print("PROBLEMS:", len(problems))
    for p in problems[:30]:
        print(" ", p)
    return 1 if problems else 0


sys.exit(main())
