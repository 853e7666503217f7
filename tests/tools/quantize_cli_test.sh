#!/usr/bin/env bash
# `strata quantize` and `--quantization` from the command line: the written checkpoint
# generates exactly the ids the bf16 one generates when quantised at load, serves its tokenizer;
# int8 on top of it (written or at load) gives the same ids either way, and so does a checkpoint
# written with mxfp4,int8; the commands refuse what they cannot do with a message and a non-zero
# exit.
# Usage: quantize_cli_test.sh STRATA STRATA_MAKE_CHECKPOINT
set -euo pipefail
strata=$1
make_checkpoint=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$make_checkpoint" --family kimi-linear --preset tiny --demo-tokenizer --shards 2 --out "$work/bf16"
summary=$("$strata" quantize --model "$work/bf16" --out "$work/mxfp4" --log-level warn)
echo "$summary"
[[ "$summary" == *'"files":2'* && "$summary" == *'"matrices":'* ]] || fail "summary: $summary"
[[ -f "$work/mxfp4/tiktoken.model" && -f "$work/mxfp4/model.safetensors.index.json" ]] ||
  fail "tokenizer or index not written"
grep -q '"mxfp4-pack-quantized"' "$work/mxfp4/config.json" || fail "no quantization_config"

gen() { "$strata" generate --prompt-ids 5,17,3,250,9 --max-tokens 12 --log-level warn "$@"; }
offline=$(gen --model "$work/mxfp4")
online=$(gen --model "$work/bf16" --quantization mxfp4)
plain=$(gen --model "$work/bf16")
echo "bf16 $plain, quantised at load $online, written $offline"
[[ "$offline" == "$online" ]] || fail "written checkpoint generates $offline, at load $online"
both_offline=$(gen --model "$work/mxfp4" --quantization int8)
both_online=$(gen --model "$work/bf16" --quantization int8,mxfp4)
echo "mxfp4 experts + int8 projections: written + at load $both_offline, at load $both_online"
[[ "$both_offline" == "$both_online" ]] || fail "int8 over the written experts $both_offline, at load $both_online"
[[ -n "$(gen --model "$work/bf16" --quantization int8)" ]] || fail "int8 generated nothing"
summary=$("$strata" quantize --model "$work/bf16" --out "$work/both" --quantization mxfp4,int8 \
  --log-level warn)
echo "$summary"
[[ "$summary" == *'"int8_matrices":'* && "$summary" != *'"int8_matrices":0'* ]] ||
  fail "mxfp4,int8 summary: $summary"
grep -q '"int-quantized"' "$work/both/config.json" || fail "no int8 group in quantization_config"
both_written=$(gen --model "$work/both")
echo "mxfp4,int8 written: $both_written"
[[ "$both_written" == "$both_online" ]] || fail "written mxfp4,int8 generates $both_written, at load $both_online"
bytes() { du -sk "$1" | cut -f1; }
echo "on disk: bf16 $(bytes "$work/bf16") KiB, mxfp4 $(bytes "$work/mxfp4") KiB, mxfp4,int8 $(bytes "$work/both") KiB"
(( $(bytes "$work/both") < $(bytes "$work/mxfp4") )) || fail "int8 projections did not shrink the checkpoint"
printf 'hello' > "$work/t.txt"
"$strata" tokenize --model "$work/mxfp4" --text-file "$work/t.txt" > /dev/null

expect_refusal() {  # expect_refusal TEXT COMMAND...: exits non-zero, stderr names TEXT
  local err rc=0
  err=$("${@:2}" 2>&1 >/dev/null) || rc=$?
  [[ $rc -ne 0 ]] || fail "$* succeeded"
  [[ "$err" == *"$1"* ]] || fail "$*: '$err' does not name '$1'"
}
expect_refusal "exists" "$strata" quantize --model "$work/bf16" --out "$work/mxfp4"
expect_refusal "MXFP4 already" "$strata" quantize --model "$work/mxfp4" --out "$work/again"
expect_refusal "--model and --out are required" "$strata" quantize --model "$work/bf16"
expect_refusal '"int4" is not supported' gen --model "$work/bf16" --quantization int4
expect_refusal "writes mxfp4, int8 or mxfp4,int8" "$strata" quantize --model "$work/bf16" \
  --out "$work/again" --quantization compressed-tensors
expect_refusal "nothing to quantise" "$strata" quantize --model "$work/both" \
  --out "$work/again" --quantization int8
[[ ! -e "$work/again" && ! -e "$work/again.partial" ]] || fail "a refused run left files"

# `strata serve --quantization mxfp4,int8` reports what it runs.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$strata" serve --model "$work/bf16" --quantization mxfp4,int8 --host 127.0.0.1 --port "$port" \
  --grpc-port 0 --log-level warn > "$work/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
info=$(python3 - "$port" <<'PY'
import json, sys, time, urllib.request
for _ in range(300):
    try:
        info = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/server_info"))
        print(json.dumps(info["model"]))
        break
    except Exception:
        time.sleep(0.1)
PY
)
echo "server_info model: $info"
[[ "$info" == *'"routed_experts": "mxfp4"'* ]] || fail "server_info: $info $(cat "$work/serve.log")"
[[ "$info" != *'"quantized_at_load_bytes": 0'* ]] || fail "server_info: nothing quantised at load"
[[ "$info" == *'"projections": "int8"'* && "$info" == *'"lm_head": "int8"'* ]] ||
  fail "server_info: projections and head not int8: $info"
echo ok
