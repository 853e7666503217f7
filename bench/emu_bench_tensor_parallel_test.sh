#!/usr/bin/env bash
# ctest emu.bench_cuda_tensor_parallel: `strata bench --device cuda --tensor-parallel-size T`
# (server/cli/bench_cuda_ranks.h) on the CUDA emulator, K3-shaped with the real MLA/KDA head
# shapes: TP 2 and TP 4 x DCP 2 must finish with positive prefill and decode rates, every rank
# must replay decode graphs (the collectives on the stream), and the report must count the
# decode step's all-reduces (1 + 2 per layer + 1 per LatentMoE layer) and give a positive
# all-reduce bus bandwidth, measured in a graph, at both message sizes. The rates measure the
# emulator; only a GPU measures speed.
# Usage: emu_bench_tensor_parallel_test.sh STRATA_EMU STRATA_MAKE_CHECKPOINT
set -euo pipefail
strata=$1
make_checkpoint=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$make_checkpoint" --preset tiny --family k3 --set kda_head_dim=128 --set kv_lora=512 \
  --set qk_rope=64 --set qk_nope=128 --set v_head=128 --set hidden=256 --set layers=2 \
  --set vocab=1000 --set expert_intermediate=64 --set mla_heads=4 --set kda_heads=4 \
  --out "$dir/k3" >/dev/null
for run in "2 1" "4 2"; do
  read -r tp dcp <<< "$run"
  out=$("$strata" bench --model "$dir/k3" --device cuda --tensor-parallel-size "$tp" \
        --decode-context-parallel-size "$dcp" --prompt-tokens 24 --gen-tokens 4 --batch 2 \
        --json)
  echo "TP $tp x DCP $dcp: $out"
  python3 - "$out" "$tp" "$dcp" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
tp, dcp = int(sys.argv[2]), int(sys.argv[3])
t = r["tensor_parallel"]
assert t["tensor_parallel_size"] == tp and t["decode_context_parallel_size"] == dcp, t
assert r["warm_up_runs"] == 1, r
# Every rank ran its decode steps as CUDA graphs (warm-up and timed run: 3 decode steps each).
assert len(t["graph_replays_per_rank"]) == tp and min(t["graph_replays_per_rank"]) >= 3, t
for key in ("prefill_tokens_per_s", "decode_tokens_per_s"):
    assert r[key] > 0, (key, r[key])
# Two layers, one of them LatentMoE: the embedding's, 2 per layer, 1 latent sum.
assert t["all_reduces_per_decode_step"] == 6, t
assert t["decode_message_bytes"] == 2 * 256 * 4, t
for key in ("decode_message_bus_gb_s", "large_message_bus_gb_s", "decode_step_ms",
            "decode_step_all_reduce_ms"):
    assert t[key] > 0, (key, t)
assert 0 < t["decode_step_all_reduce_share"] < 1, t
PY
done
echo "emu.bench_cuda_tensor_parallel: ok"
