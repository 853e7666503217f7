#!/usr/bin/env bash
# Strata vs llama.cpp serving the same checkpoint under the same load (docs/performance.md: ratios measured
# in one run). Each engine runs as an OpenAI server with the same number of concurrent sequences
# and threads; strata-bench-serve sends both the same random token-id prompts at the same Poisson
# arrival rates (greedy, ignore_eos: every request generates exactly OUT tokens).
#
#   bench/peer_serve_compare.sh BUILD_DIR PEER_DIR SCRATCH [THREADS=2] [PARALLEL=8] [ROUNDS=2]
#                               [RATES=0.5,1,2,inf] [IN=256] [OUT=64] [PROMPTS=24]
#
# BUILD_DIR: a Strata build (./strata, ./strata-bench-serve, ./tools/strata-make-checkpoint).
# PEER_DIR:  the llama.cpp driver scripts (the workplace's shared/peer; hf2gguf.py); a benchmark
#            tool only. llama.cpp is served by bench/peer_server.mjs (llama-server's slots over
#            node-llama-cpp: PARALLEL sequences decoded in one batch).
# SCRATCH:   a directory this script may write (node-llama-cpp, the checkpoint, its GGUF, results).
#
# Only one server runs at a time (an idle one would still hold memory and threads); rounds
# alternate the engines so all see the same machine, and each figure is the median over rounds.
# Prints a Markdown table: per rate, request and output throughput, TTFT, TPOT and ITL.
# ENGINES (default "strata llama.cpp") may add strata-bf16: Strata with
# --cpu-matmul-precision bf16 (activations rounded to bf16 in the big products, as llama.cpp does).
# EXPERTS=mxfp4 serves both engines the same MXFP4 routed experts, EXPERTS=mxfp4,int8 the other
# matrices as the same int8 values too (peer_setup.sh: peer_experts).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/peer_setup.sh"

(($# >= 3)) || peer_usage "$0"
peer_dirs "$1" "$2" "$3"
threads=${4:-2}
parallel=${5:-8}
rounds=${6:-2}
rates=${7:-0.5,1,2,inf}
input_len=${8:-256}
output_len=${9:-64}
prompts=${10:-24}
peer_require "$0" "$build/strata" "$build/strata-bench-serve" \
  "$build/tools/strata-make-checkpoint" "$peer/hf2gguf.py"
peer_setup "$build" "$scratch"
peer_experts "${EXPERTS:-bf16}"

port=${STRATA_BENCH_PORT:-8190}
ctx=$(((input_len + output_len + 255) / 256 * 256))
server_pid=
stop_server() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
  fi
}
trap stop_server EXIT

start_server() {  # engine log
  case $1 in
    strata | strata-bf16)
      local precision=f32
      [[ $1 == strata-bf16 ]] && precision=bf16
      OMP_NUM_THREADS=$threads "$build/strata" serve --model "$peer_model" \
        --served-model-name bench --host 127.0.0.1 --port "$port" --grpc-port 0 \
        --max-num-seqs "$parallel" --max-model-len "$ctx" --cpu-matmul-precision "$precision" \
        --quantization "${strata_quantization:-none}" \
        --log-level warn >"$2" 2>&1 &
      ;;
    llama.cpp)
      node "$here/peer_server.mjs" --model "$peer_gguf" --name bench --port "$port" \
        --parallel "$parallel" --ctx-size "$ctx" --threads "$threads" >"$2" 2>&1 &
      ;;
  esac
  server_pid=$!
}

results=$scratch/serve_results.jsonl
: >"$results"
for ((r = 1; r <= rounds; ++r)); do
  for engine in ${ENGINES:-strata llama.cpp}; do
    echo "round $r/$rounds: $engine" >&2
    start_server "$engine" "$scratch/serve_$engine.log"
    "$build/strata-bench-serve" --base-url "http://127.0.0.1:$port" --model bench \
      --dataset-name random --random-input-len "$input_len" --random-output-len "$output_len" \
      --random-vocab-size 32000 --num-prompts "$prompts" --request-rate "$rates" --seed "$r" \
      --ignore-eos --temperature 0 --ready-check-timeout-sec 300 \
      --save-result --result-dir "$scratch" --result-filename serve_round.json >&2 ||
      { echo "peer_serve_compare: $engine failed requests; its log:" >&2
        tail -20 "$scratch/serve_$engine.log" >&2; exit 1; }
    stop_server
    python3 -c 'import json,sys
runs = json.load(open(sys.argv[1]))
for run in runs if isinstance(runs, list) else [runs]:
    run["engine"] = sys.argv[2]; run["round"] = int(sys.argv[3]); print(json.dumps(run))' \
      "$scratch/serve_round.json" "$engine" "$r" >>"$results"
  done
done

python3 - "$results" "$llama_release" "$nlc_version" "$threads" "$parallel" "$input_len" \
  "$output_len" "$prompts" "${EXPERTS:-bf16}" <<'PY'
import datetime, json, statistics, sys

path, release, nlc, threads, parallel, input_len, output_len, prompts, experts = sys.argv[1:]
rows = [json.loads(line) for line in open(path)]
rates = list(dict.fromkeys(str(r["request_rate"]) for r in rows))

def med(engine, rate, key):
    got = [r[key] for r in rows if r["engine"] == engine and str(r["request_rate"]) == rate]
    return statistics.median(got)

print(f"### Serving: Strata vs llama.cpp ({datetime.date.today()}, llama.cpp {release} via "
      f"node-llama-cpp {nlc} behind bench/peer_server.mjs; bench preset bf16, routed experts "
      f"{experts}, {threads} threads and "
      f"{parallel} concurrent sequences each; {prompts} random prompts of {input_len} tokens, "
      f"{output_len} generated; median of {max(r['round'] for r in rows)} alternating rounds)")
print()
engines = list(dict.fromkeys(r["engine"] for r in rows))
print("| rate (req/s) | engine | req/s | output tok/s | TTFT median / p99 (ms) | TPOT median (ms) | ITL median (ms) |")
print("|---|---|---|---|---|---|---|")
for rate in rates:
    for engine in engines:
        print(f"| {rate} | {engine} | {med(engine, rate, 'request_throughput'):.2f} | "
              f"{med(engine, rate, 'output_throughput'):.1f} | "
              f"{med(engine, rate, 'median_ttft_ms'):.0f} / {med(engine, rate, 'p99_ttft_ms'):.0f} | "
              f"{med(engine, rate, 'median_tpot_ms'):.1f} | {med(engine, rate, 'median_itl_ms'):.1f} |")
print()
print("| rate (req/s) | engine | output tok/s vs llama.cpp | TTFT median, llama.cpp / it | TPOT median, llama.cpp / it |")
print("|---|---|---|---|---|")
for rate in rates:
    ratio = lambda key, a, b: med(a, rate, key) / med(b, rate, key)
    for engine in (e for e in engines if e != "llama.cpp"):
        print(f"| {rate} | {engine} | {ratio('output_throughput', engine, 'llama.cpp'):.2f}x | "
              f"{ratio('median_ttft_ms', 'llama.cpp', engine):.2f}x | "
              f"{ratio('median_tpot_ms', 'llama.cpp', engine):.2f}x |")
PY
