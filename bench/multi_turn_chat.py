#!/usr/bin/env python3
"""Multi-turn chat over the REST API as clients send it: text, not token ids.

Each conversation starts with a user message of --first-words random words; every later turn
sends the whole conversation back as messages (the assistant's replies as the text the server
returned) plus a new user message of --user-words words. With prefix caching a turn should
compute only the reply's tail and the new message; a server that encodes the returned replies
afresh can get other tokens than the model generated and miss the cache from there
(`--reply-token-memory`, server/frontend/reply_tokens.h).

    python3 bench/multi_turn_chat.py --port 8000 --conversations 8 --concurrency 4 --turns 3

`--allowed-below N` restricts replies to token ids below N (allowed_token_ids): for checkpoints
with random weights, whose replies would otherwise hold special tokens their text does not show.
Prints, per turn, the median prompt tokens, cached prompt tokens and time to first token, then
the conversations' wall time. Standard library only.
"""
import argparse
import concurrent.futures
import json
import random
import statistics
import sys
import time
import urllib.request

WORDS = ("the sea ship wind harbour sail night storm captain island map gold rope deck wave "
         "lantern anchor north south east west river mountain forest road city market bread "
         "water stone fire letter song story old new long short bright dark quiet loud").split()


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def chat_turn(args, messages):
    """Streams one greedy turn: (ttft s, reply text, prompt tokens, cached prompt tokens)."""
    body = {"model": args.model, "messages": messages, "max_tokens": args.output_len,
            "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    if args.allowed_below:
        body["allowed_token_ids"] = list(range(args.allowed_below))
    req = urllib.request.Request(f"http://{args.host}:{args.port}/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.monotonic()
    ttft = None
    text = []
    usage = {}
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                usage = event["usage"]
            for choice in event.get("choices", []):
                content = choice.get("delta", {}).get("content")
                if content is not None and "role" not in choice.get("delta", {}):
                    if ttft is None:
                        ttft = time.monotonic() - start
                    text.append(content)
    details = usage.get("prompt_tokens_details") or {}
    return (ttft if ttft is not None else time.monotonic() - start, "".join(text),
            usage.get("prompt_tokens", 0), details.get("cached_tokens", 0))


def conversation(args, index):
    rng = random.Random(args.seed * 1000 + index)
    messages = [{"role": "user", "content": words(rng, args.first_words)}]
    turns = []
    for _ in range(args.turns):
        ttft, reply, prompt, cached = chat_turn(args, messages)
        turns.append((ttft, prompt, cached))
        messages += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": words(rng, args.user_words)}]
    return turns


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default="", help="served model name (default: the server's)")
    p.add_argument("--conversations", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--first-words", type=int, default=200)
    p.add_argument("--user-words", type=int, default=30)
    p.add_argument("--output-len", type=int, default=100)
    p.add_argument("--allowed-below", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not args.model:
        with urllib.request.urlopen(f"http://{args.host}:{args.port}/v1/models") as r:
            args.model = json.loads(r.read())["data"][0]["id"]
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        results = list(pool.map(lambda i: conversation(args, i), range(args.conversations)))
    wall = time.monotonic() - start
    for turn in range(args.turns):
        rows = [r[turn] for r in results]
        print(f"turn {turn + 1}: median {statistics.median(r[1] for r in rows):.0f} prompt tokens, "
              f"{statistics.median(r[2] for r in rows):.0f} cached, time to first token "
              f"{statistics.median(r[0] for r in rows) * 1000:.0f} ms "
              f"(cached {sum(r[2] for r in rows)} of {sum(r[1] for r in rows)} prompt tokens)")
    print(f"{args.conversations} conversations, {args.turns} turns: {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
