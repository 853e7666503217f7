"""Command line: python3 -m strata_client generate --target HOST:PORT --prompt-ids 1,2,3 ...

Prints the generated text, then the generated token ids as one JSON array on the last line
(the same contract as the C++ strata-client).
"""
import argparse
import json
import sys

import grpc

from strata_client import Client


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="strata_client")
    parser.add_argument("command", choices=["generate", "tokenize", "info"])
    parser.add_argument("--target", default="localhost:50051")
    parser.add_argument("--prompt")
    parser.add_argument("--prompt-ids")
    parser.add_argument("--text", help="tokenize: the text")
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--top-p", type=float)
    parser.add_argument("--top-k", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--image", action="append", default=[],
                        help="an image file, once per media placeholder of the prompt")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--timeout", type=float)
    args = parser.parse_args(argv)
    with Client(args.target) as client:
        try:
            if args.command == "tokenize":
                print(json.dumps(client.tokenize(args.text or "")))
            elif args.command == "info":
                info, loads = client.model_info(), client.loads()
                print(json.dumps({"model": info.names[0], "max_model_len": info.max_model_len,
                                  "num_running": loads.num_running}))
            else:
                ids = [int(x) for x in args.prompt_ids.split(",")] if args.prompt_ids else None
                kwargs = dict(prompt=args.prompt, prompt_ids=ids, max_tokens=args.max_tokens,
                              temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                              seed=args.seed, images=args.image)
                tokens = []
                for response in client.stream(timeout=args.timeout, **kwargs):
                    if response.HasField("chunk") and response.chunk.index == 0:
                        tokens.extend(response.chunk.token_ids)
                        sys.stdout.write(response.chunk.text)
                        if args.stream:
                            sys.stdout.flush()
                print()
                print(json.dumps(tokens))
        except grpc.RpcError as e:
            print(f"strata_client: rpc error {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
