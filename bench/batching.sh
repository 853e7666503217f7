#!/usr/bin/env bash
# Continuous-batching throughput (issue 5): decode tokens/s at 1, 8, 32 and 64 concurrent
# sequences through the real engine (`strata bench`), and the ratio of each to batch 1 measured
# in the same run (target: 64 concurrent >= 10x a single sequence, since weights are shared).
# usage: bench/batching.sh STRATA_BIN [MODEL_DIR] [GEN_TOKENS]
set -euo pipefail
strata=$1 model=${2:-} gen=${3:-32}
model_flag=()
[ -n "$model" ] && model_flag=(--model "$model")
printf '%-6s %12s %12s %10s %12s\n' batch decode_tok/s floor_tok/s pct_floor vs_batch1
base=""
for b in 1 8 32 64; do
  out=$("$strata" bench "${model_flag[@]}" --prompt-tokens 64 --gen-tokens "$gen" --batch "$b" --json)
  read -r tps floor pct <<<"$(/usr/bin/python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(d['decode_tokens_per_s'], d['decode_floor_tokens_per_s'], d['decode_pct_of_roofline'])" "$out")"
  [ -z "$base" ] && base=$tps
  ratio=$(/usr/bin/python3 -c "print(f'{$tps/$base:.2f}x')")
  printf '%-6s %12.1f %12.1f %9.1f%% %12s\n' "$b" "$tps" "$floor" "$pct" "$ratio"
done
