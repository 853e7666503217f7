#!/usr/bin/env bash
# `strata plan` on the released configs (tests/data/configs): the table and --json, the SGLang
# aliases, and refusals by name with exit status 2 (engine/parallel_plan.h has the arithmetic,
# engine/parallel_plan_test.cc checks it by hand).
# Usage: plan_cli_test.sh STRATA CONFIGS_DIR
set -uo pipefail
strata=$1
configs=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run NAME ARGS...: stdout in $work/NAME.out, stderr in $work/NAME.err, status in $rc.
run() {
  local name=$1
  shift
  rc=0
  timeout 60 "$strata" plan "$@" > "$work/$name.out" 2> "$work/$name.err" || rc=$?
}

k3=$configs/kimi_k3/config.json
linear=$configs/kimi_linear  # a directory holding config.json works too

run table --config "$k3" --tensor-parallel-size 16 --decode-context-parallel-size 16 \
  --device-memory 141GiB
[[ $rc -eq 0 ]] || fail "K3 TP16 exited $rc: $(cat "$work/table.err")"
grep -q "^Kimi K3: TP 16 x DCP 16 x DP 1 = 16 ranks" "$work/table.out" || fail "no K3 header"
grep -q "56 routed experts per MoE layer (mxfp4)" "$work/table.out" || fail "K3's experts are not MXFP4"
grep -q "DCP query all-gather" "$work/table.out" || fail "no DCP collective in the table"

run json --config "$k3" --tp-size 8 --dcp-size 8 --dp-size 2 --device-memory 141GiB --json
[[ $rc -eq 0 ]] || fail "K3 --json exited $rc: $(cat "$work/json.err")"
python3 - "$work/json.out" <<'PY' || fail "K3 --json: $(cat "$work/json.out")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, "one JSON object on one line"
plan = json.loads(lines[0])
assert plan["model"] == "Kimi K3" and plan["world_size"] == 16, plan
assert plan["per_rank"]["routed_experts_max"] == 56, plan["per_rank"]
assert plan["sequences_per_group"] > 0 and plan["cache_tokens_per_group"] > 0
w = plan["weight_bytes_per_rank"]
assert w["total"] == sum(v for k, v in w.items() if k != "total")
names = [c["name"] for c in plan["collectives"]]
assert "expert dispatch all-to-all" in names and "DCP output merge" in names, names
PY

run linear --config "$linear" --device-memory 141GiB --kv-cache-dtype fp8
[[ $rc -eq 0 ]] || fail "Kimi-Linear exited $rc: $(cat "$work/linear.err")"
grep -q "none (one rank)" "$work/linear.out" || fail "one rank should have no collectives"

# refused: EXPECTED_TEXT ARGS...: exit status 2 and the text on stderr.
refused() {
  local text=$1
  shift
  run refused "$@"
  [[ $rc -eq 2 ]] || fail "plan $* exited $rc, not 2"
  grep -qF -- "$text" "$work/refused.err" ||
    fail "plan $*: '$(cat "$work/refused.err")' does not say '$text'"
}
refused "32 KDA heads cannot be split over --tensor-parallel-size 3" \
  --config "$linear" --tensor-parallel-size 3 --device-memory 80GiB
refused "--decode-context-parallel-size 3 must divide --tensor-parallel-size 8" \
  --config "$k3" --tensor-parallel-size 8 --decode-context-parallel-size 3 --device-memory 141GiB
refused "smaller than the weights of one rank" \
  --config "$k3" --tensor-parallel-size 8 --device-memory 80GiB
refused "--tensor-parallel-size and --tp-size mean the same" --config "$k3" --tensor-parallel-size 8 --tp-size 16 --device-memory 141GiB
refused "--quantization compressed-tensors needs" \
  --config "$linear" --quantization compressed-tensors --device-memory 141GiB
run missing --config "$work/none.json" --device-memory 1GiB
[[ $rc -eq 1 ]] || fail "a missing config exited $rc, not 1"

if ((failures > 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "plan_cli: all checks passed"
