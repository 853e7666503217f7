#!/usr/bin/env bash
# One command-line framework for every command (core/command_line.h): `strata --help` and
# `strata-client --help` list their subcommands; `<binary> <command> --help` (and -h) prints the
# usage line and the command's flags on stdout and exits 0 for every subcommand either lists;
# an unknown flag exits 2 naming it and pointing at `--help`; an unknown command exits 2.
# Usage: cli_help_test.sh STRATA STRATA_CLIENT [STRATA_BENCH_SERVE]
set -uo pipefail
strata=$1
client=$2
bench_serve=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run NAME COMMAND...: stdout in $work/NAME.out, stderr in $work/NAME.err, status in $rc.
run() {
  local name=$1
  shift
  rc=0
  timeout 60 "$@" > "$work/$name.out" 2> "$work/$name.err" || rc=$?
}

# Flags each command must list (contracts of scripts, tests and the Helm chart).
declare -A strata_flags=(
  [generate]="--model --prompt-ids --max-tokens --temperature --top-k --top-p --seed --stop-ids --ignore-eos --kv-cache-dtype --quantization --log-level"
  [logits]="--model --ids-file --out --prefill-chunk --kv-cache-dtype --quantization"
  [bench]="--model --prompt-tokens --gen-tokens --batch --threads --device --json"
  [quantize]="--model --out --quantization --log-level"
  [tokenize]="--model --text-file --add-special-tokens --parse-special"
  [detokenize]="--model --ids --skip-special-tokens"
  [chat-template]="--model --messages-file --tools-file --kwargs-file --add-generation-prompt"
  [parse-output]="--model --thinking --tools --tool-choice --chunk"
  [serve]="--model --host --port --grpc-port --max-num-seqs --kv-cache-memory --api-key --log-level --world-size"
  [run-batch]="--input-file --output-file --max-concurrent-requests --model --max-num-seqs"
  [plan]="--config --tensor-parallel-size --tp-size --decode-context-parallel-size --dcp-size --data-parallel-size --dp-size --device-memory --quantization --kv-cache-dtype --reserve --json"
)
declare -A client_flags=(
  [generate]="--target --prompt --prompt-ids --max-tokens --stream --temperature --seed --n --stop --timeout --api-key"
  [tokenize]="--target --text --api-key"
  [info]="--target --api-key"
)

# check_binary BINARY NAME ARRAY: the top-level help, then every listed subcommand.
check_binary() {
  local bin=$1 prog=$2
  local -n expected=$3
  run top "$bin" --help
  [[ $rc -eq 0 ]] || fail "$prog --help exited $rc"
  grep -q "^usage: $prog <command>" "$work/top.out" || fail "$prog --help: no usage line"
  # The subcommands the binary lists: two-space indented words under "commands:".
  local listed
  listed=$(sed -n '/^commands:/,/^$/s/^  \([a-z-]*\) .*/\1/p' "$work/top.out")
  for cmd in "${!expected[@]}"; do
    grep -qx "$cmd" <<< "$listed" || fail "$prog --help does not list '$cmd'"
  done
  for cmd in $listed; do
    [[ -n "${expected[$cmd]:-}" ]] || fail "$prog $cmd: not known to this test (add its flags)"
    for help in --help -h; do
      run help "$bin" "$cmd" $help
      [[ $rc -eq 0 ]] || fail "$prog $cmd $help exited $rc: $(cat "$work/help.err")"
      [[ ! -s "$work/help.err" ]] || fail "$prog $cmd $help wrote to stderr: $(cat "$work/help.err")"
      grep -q "^usage: $prog $cmd " "$work/help.out" || fail "$prog $cmd $help: no usage line"
      for flag in ${expected[$cmd]:-} --help; do
        grep -qE "^  $flag( |$)" "$work/help.out" || fail "$prog $cmd $help does not list $flag"
      done
    done
    run bad "$bin" "$cmd" --frobnicate
    [[ $rc -eq 2 ]] || fail "$prog $cmd --frobnicate exited $rc, not 2"
    grep -q "unknown flag --frobnicate" "$work/bad.err" ||
      fail "$prog $cmd --frobnicate: '$(cat "$work/bad.err")' does not name the flag"
    grep -qF "see \`$prog $cmd --help\`" "$work/bad.err" ||
      fail "$prog $cmd --frobnicate: no pointer to --help in '$(cat "$work/bad.err")'"
    [[ ! -s "$work/bad.out" ]] || fail "$prog $cmd --frobnicate wrote to stdout"
  done
  run unknown "$bin" frobnicate
  [[ $rc -eq 2 ]] || fail "$prog frobnicate exited $rc, not 2"
  grep -q "unknown command 'frobnicate'" "$work/unknown.err" || fail "$prog frobnicate: not named"
  run none "$bin"
  [[ $rc -eq 2 ]] || fail "$prog without a command exited $rc, not 2"
  echo "$prog: $(wc -w <<< "$listed") commands checked"
}

check_binary "$strata" strata strata_flags
check_binary "$client" strata-client client_flags

# A flag's value that reads --help is a value, not a request for help; a missing required flag
# is a usage error naming it.
run value "$strata" tokenize --model "$work/none" --text-file --help
[[ $rc -eq 1 ]] || fail "tokenize --text-file --help exited $rc (expected the tokenizer load to fail)"
run required "$strata" quantize --model "$work/none"
[[ $rc -eq 2 ]] && grep -q -- "--model and --out are required" "$work/required.err" ||
  fail "quantize without --out: exit $rc, '$(cat "$work/required.err")'"

if [[ -n "$bench_serve" ]]; then
  run bs "$bench_serve" --help
  [[ $rc -eq 0 ]] && grep -q "^usage: strata-bench-serve " "$work/bs.out" &&
    grep -qE "^  --request-rate " "$work/bs.out" || fail "strata-bench-serve --help: exit $rc"
  run bs "$bench_serve" --frobnicate
  [[ $rc -eq 2 ]] && grep -qF "see \`strata-bench-serve --help\`" "$work/bs.err" ||
    fail "strata-bench-serve --frobnicate: exit $rc, '$(cat "$work/bs.err")'"
fi

[[ $failures -eq 0 ]] || { echo "$failures failures"; exit 1; }
echo ok
