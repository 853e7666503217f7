#!/usr/bin/env python3
"""Multi-turn chat load over Strata's gRPC API: time to first token per turn.

Each conversation starts with --first-len random prompt tokens; every later turn sends the whole
conversation so far (the previous prompt, the reply the server generated, token for token) plus
--user-len new tokens, as a chat client does. With prefix caching a turn should compute only
what is new: the reply's tail and the new message. Token ids (not text) keep the replies exact,
so the measurement does not depend on re-tokenization.

    PYTHONPATH=clients/python:build/<name>/proto/python /usr/bin/python3 bench/multi_turn.py \\
        --target localhost:50051 --conversations 4 --turns 3

Prints, per turn, the median prompt tokens served from the prefix cache and the median time to
first token, then the conversations' total time.
"""
import argparse
import concurrent.futures
import random
import statistics
import sys
import time

import grpc
from strata_client import Client


def wait_ready(client, timeout_s):
    """Waits while the server answers UNAVAILABLE (starting, loading the model)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.model_info()
            return
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def run_turn(client, prompt_ids, max_tokens):
    """Streams one greedy turn: (time to first token in s, prompt tokens the server found in its
    prefix cache, the reply's token ids)."""
    start = time.perf_counter()
    first = None
    cached = 0
    reply = []
    for response in client.stream(prompt_ids=prompt_ids, max_tokens=max_tokens, ignore_eos=True,
                                  temperature=0):
        if response.HasField("chunk") and response.chunk.token_ids:
            if first is None:
                first = time.perf_counter() - start
            reply.extend(response.chunk.token_ids)
        elif response.HasField("complete"):
            cached = response.complete.usage.cached_tokens
    if first is None:
        raise RuntimeError("a turn came back without tokens")
    return first, cached, reply


def run_conversation(client, turns, first_len, user_len, output_len, vocab, seed):
    """One conversation: per turn, (time to first token in s, cached prompt tokens)."""
    rng = random.Random(seed)
    context = [rng.randrange(1000, vocab) for _ in range(first_len)]
    results = []
    for turn in range(turns):
        if turn > 0:
            context += [rng.randrange(1000, vocab) for _ in range(user_len)]
        first, cached, reply = run_turn(client, context, output_len)
        results.append((first, cached))
        context += reply
    return results


def run(client, conversations, turns, first_len, user_len, output_len, vocab=30000, seed=0,
        concurrency=1):
    """Plays the conversations, `concurrency` at a time (each its turns in order); returns, per
    turn, a list of (time to first token in s, cached prompt tokens) over the conversations."""
    def play(i):
        return run_conversation(client, turns, first_len, user_len, output_len, vocab,
                                seed * 1_000_003 + i)
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        played = list(pool.map(play, range(conversations)))
    return [[conversation[turn] for conversation in played] for turn in range(turns)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="localhost:50051")
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=1, help="conversations at once")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--first-len", type=int, default=300, help="first prompt, tokens")
    parser.add_argument("--user-len", type=int, default=50, help="each later message, tokens")
    parser.add_argument("--output-len", type=int, default=200, help="each reply, tokens")
    parser.add_argument("--vocab", type=int, default=30000, help="prompt ids in [1000, vocab)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ready-timeout", type=float, default=120,
                        help="seconds to wait for a server still loading")
    args = parser.parse_args(argv)
    if min(args.conversations, args.concurrency, args.turns, args.first_len,
           args.output_len) < 1 or \
            args.user_len < 0 or args.vocab <= 1000:
        parser.error("counts and lengths must be >= 1 (--user-len >= 0), --vocab > 1000")

    with Client(args.target) as client:
        wait_ready(client, args.ready_timeout)
        start = time.perf_counter()
        results = run(client, args.conversations, args.turns, args.first_len, args.user_len,
                      args.output_len, args.vocab, args.seed, args.concurrency)
    for turn, values in enumerate(results):
        prompt = args.first_len + turn * (args.output_len + args.user_len)
        ttft_ms = statistics.median(v[0] for v in values) * 1e3
        cached = statistics.median(v[1] for v in values)
        print(f"turn {turn + 1}: {prompt} prompt tokens, median {cached:.0f} cached, "
              f"median TTFT {ttft_ms:.0f} ms")
    print(f"total: {time.perf_counter() - start:.1f} s for {args.conversations} conversations, "
          f"{args.concurrency} at a time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
