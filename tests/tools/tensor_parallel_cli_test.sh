#!/usr/bin/env bash
# `--tensor-parallel-size` on `strata logits` and `strata generate` (T threads, each holding its
# shard, over shared memory — and over Gloo on loopback with STRATA_CPU_COMM=gloo), alone and with `--decode-context-parallel-size` (the latent
# cache split by position): logits equal one rank's within fp32 rounding at T = 2 and 4 on K3- and
# Kimi-Linear-shaped checkpoints (MXFP4 experts and int8 projections too), greedy tokens are
# identical, and what cannot be split is refused by name with a non-zero exit.
# Usage: tensor_parallel_cli_test.sh STRATA STRATA_MAKE_CHECKPOINT
set -euo pipefail
strata=$1
make_checkpoint=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

heads=(--set mla_heads=4 --set kda_heads=4 --set vocab=509)
"$make_checkpoint" --family k3 --preset tiny --seed 3 "${heads[@]}" --set dense_intermediate=128 \
  --out "$work/k3" >/dev/null
"$make_checkpoint" --family kimi-linear --preset tiny --seed 4 "${heads[@]}" --set first_dense=1 \
  --set tie_embeddings=true --out "$work/kl" >/dev/null
"$make_checkpoint" --family k3 --preset tiny --seed 5 --mxfp4 "${heads[@]}" \
  --set hidden=128 --out "$work/k3_mxfp4" >/dev/null
/usr/bin/python3 -c 'import json; print(json.dumps([(i * 37 + 11) % 509 for i in range(45)]))' >"$work/ids.json"

# max |a − b| relative to the logits' scale (Debian's python3: numpy comes from tools/setup.sh)
compare() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import sys
import numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.shape == b.shape, (a.shape, b.shape)
scale = max(1.0, float(np.abs(b).max()))
err = float(np.abs(a - b).max()) / scale
print(f"{err:.2e}")
sys.exit(0 if err <= 2e-5 else 1)
PY
}

# check_model NAME "SIZES" [flags]: logits at each tensor-parallel size, greedy tokens at 2.
check_model() {
  local name=$1 sizes=$2; shift 2
  "$strata" logits --model "$work/$name" --ids-file "$work/ids.json" --out "$work/$name.1.npy" \
    --prefill-chunk 16 --log-level warn "$@"
  for t in $sizes; do
    # Tensor parallelism alone, then with the latent cache split over C ranks (DCP; C divides
    # T, C < T leaves T / C copies of each row).
    for cp in 1 2 4; do
      (( cp <= t && t % cp == 0 )) || continue
      "$strata" logits --model "$work/$name" --ids-file "$work/ids.json" \
        --out "$work/$name.$t.$cp.npy" --prefill-chunk 16 --tensor-parallel-size "$t" \
        --decode-context-parallel-size "$cp" --log-level warn "$@"
      err=$(compare "$work/$name.$t.$cp.npy" "$work/$name.1.npy") ||
        fail "$name $*: TP $t × DCP $cp logits differ from one rank by $err (relative)"
      echo "ok   $name $*: logits with TP $t × DCP $cp equal one rank's (max error $err)"
    done
  done
  one=$("$strata" generate --model "$work/$name" --prompt-ids 5,17,3,250,9,44 --max-tokens 12 \
    --ignore-eos --log-level warn "$@")
  two=$("$strata" generate --model "$work/$name" --prompt-ids 5,17,3,250,9,44 --max-tokens 12 \
    --ignore-eos --tp-size 2 --log-level warn "$@")
  [[ "$one" == "$two" ]] || fail "$name $*: greedy tokens $two with --tp-size 2, $one on one rank"
  dcp=$("$strata" generate --model "$work/$name" --prompt-ids 5,17,3,250,9,44 --max-tokens 12 \
    --ignore-eos --tp-size 2 --dcp-size 2 --log-level warn "$@")
  [[ "$one" == "$dcp" ]] || fail "$name $*: greedy tokens $dcp with TP 2 × DCP 2, $one on one rank"
  echo "ok   $name $*: greedy generate with --tp-size 2 (and --dcp-size 2) = one rank: $one"
}
check_model k3 "2 4"
check_model kl "2 4"
check_model k3_mxfp4 "2 4"
# int8 groups are 32 input columns: at 2 ranks every shard of this model cuts at a group (at 4
# its MLA o_proj shards are 16 wide and stay as stored, so only 2 compares like with like).
check_model k3 "2" --quantization int8

# The collectives' backend: shared memory when every rank is on this host, Gloo when told; the
# logits are the same (both reduce in rank order).
for backend in shm gloo; do
  STRATA_CPU_COMM=$backend "$strata" logits --model "$work/k3" --ids-file "$work/ids.json" \
    --out "$work/k3.$backend.npy" --prefill-chunk 16 --tensor-parallel-size 2 --log-level info \
    2>"$work/$backend.log"
done
grep -q "tensor-parallel group: 2 ranks, shared memory" "$work/shm.log" ||
  fail "TP 2 on one host did not use shared memory: $(cat "$work/shm.log")"
grep -q "tensor-parallel group: 2 ranks, Gloo over TCP" "$work/gloo.log" ||
  fail "STRATA_CPU_COMM=gloo did not use Gloo: $(cat "$work/gloo.log")"
cmp -s "$work/k3.shm.npy" "$work/k3.gloo.npy" || fail "TP 2 logits differ between shm and Gloo"
echo "ok   TP 2 over shared memory and over Gloo: the same logits, bit for bit"

# Refusals: a head count the size does not divide, both spellings at once, out of range.
"$make_checkpoint" --family k3 --preset tiny --out "$work/odd" >/dev/null  # 3 MLA heads
expect_refusal() {
  local want=$1; shift
  set +e
  out=$("$strata" "$@" 2>&1)
  status=$?
  set -e
  [[ $status -ne 0 && "$out" == *"$want"* ]] || fail "strata $*: exit $status, output: $out"
  echo "ok   refused: $want"
}
expect_refusal "3 MLA heads cannot be split over --tensor-parallel-size 2" \
  logits --model "$work/odd" --ids-file "$work/ids.json" --out "$work/x.npy" \
  --tensor-parallel-size 2 --log-level warn
expect_refusal "--tensor-parallel-size and --tp-size mean the same" \
  generate --model "$work/k3" --prompt-ids 1,2 --tensor-parallel-size 2 --tp-size 2
expect_refusal "--decode-context-parallel-size 3 must divide --tensor-parallel-size 4" \
  logits --model "$work/k3" --ids-file "$work/ids.json" --out "$work/x.npy" \
  --tensor-parallel-size 4 --decode-context-parallel-size 3 --log-level warn
expect_refusal "--tensor-parallel-size" \
  generate --model "$work/k3" --prompt-ids 1,2 --tensor-parallel-size 0
echo "PASS"
