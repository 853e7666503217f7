#!/usr/bin/env bash
# ctest emu.serve_cuda_smoke: the GPU check's serving smoke test (gpu_serve_smoke.py:
# `strata serve --device cuda --replicas 2`, a greedy completion, the same completion on both
# replicas at once, a streamed chat completion, /metrics, and the device sampler's
# log-probabilities, logit bias and penalties through the API) against strata-emu, whose CUDA path
# runs on the CPU emulator, on a small K3 checkpoint with the real MLA/KDA head shapes.
# Usage: emu_serve_smoke_test.sh STRATA_EMU STRATA_MAKE_CHECKPOINT GPU_SERVE_SMOKE_PY
set -euo pipefail
strata=$1
make_checkpoint=$2
smoke=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$make_checkpoint" --preset tiny --family k3 --demo-tokenizer --out "$dir/k3" \
  --set kda_head_dim=128 --set kv_lora=512 --set qk_rope=64 --set qk_nope=128 --set v_head=128 \
  --set hidden=256 --set layers=2 --set vocab=8192 --set expert_intermediate=64 >/dev/null
# 3 GiB of emulated device memory: both replicas' caches stay small.
STRATA_CUDA_EMU_MEMORY_MIB=3072 python3 "$smoke" "$strata" "$dir/k3" cuda
