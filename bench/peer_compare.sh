#!/usr/bin/env bash
# Strata vs llama.cpp on the same checkpoint, same machine, same run (docs/performance.md: ratios only).
#
#   bench/peer_compare.sh BUILD_DIR PEER_DIR SCRATCH [THREADS=2] [ROUNDS=3] [PP=512] [TG=128]
#                         [EXPERTS=bf16|mxfp4|mxfp4,int8]
#
# BUILD_DIR: a Strata build (has ./strata and ./tools/strata-make-checkpoint).
# PEER_DIR:  the llama.cpp driver scripts (the workplace's shared/peer: hf2gguf.py, llama_bench.mjs,
#            nlc.mjs); they are a benchmark tool only — Strata never uses them to build or run.
# SCRATCH:   a directory this script may write (node-llama-cpp is installed there from the npm
#            registry on first use, the checkpoint and its GGUF are made there).
#
# The checkpoint is the `bench` preset of strata-make-checkpoint (Kimi-Linear shape, 0.74B
# parameters, bf16, official layout), converted to a bf16 GGUF by the peer's converter. Rounds
# alternate Strata and llama.cpp so both see the same machine load; each figure is the median over
# rounds. Decode is measured after the prompt on both sides (llama_bench --tg-after-pp): the
# same context depth. Prints a Markdown table (date, llama.cpp version, tokens/s, ratios).
# EXPERTS=mxfp4: both engines run the routed experts as the same MXFP4 values — Strata the
# `strata quantize` output, llama.cpp a GGUF whose expert tensors are GGML's MXFP4 type holding
# those codes and scales (bench/gguf_mxfp4_experts.py); everything else stays bf16.
# EXPERTS=mxfp4,int8: the other matrices too as the same int8 values — Strata with
# `--quantization int8`, llama.cpp as Q8_0 blocks holding Strata's codes and scales.
# PRECISION=bf16 (environment; default f32): Strata's big products round their activations to
# bf16 (--cpu-matmul-precision bf16), as llama.cpp's bf16 products do; PRECISION=int8 also
# rounds decode's activations to int8 for the MXFP4 and int8 products, as llama.cpp's Q8_0 and
# MXFP4 products always do.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/peer_setup.sh"

(($# >= 3)) || peer_usage "$0"
peer_dirs "$1" "$2" "$3"
threads=${4:-2}
rounds=${5:-3}
pp=${6:-512}
tg=${7:-128}
experts=${8:-bf16}
peer_require "$0" "$build/strata" "$build/tools/strata-make-checkpoint" "$peer/hf2gguf.py" \
  "$peer/llama_bench.mjs"

# 1. llama.cpp through node-llama-cpp's prebuilt binary (CPU build); one checkpoint, two formats.
peer_setup "$build" "$scratch"
peer_experts "$experts"
model=$peer_model
gguf=$peer_gguf

# 2. Alternating rounds.
results=$scratch/results.jsonl
: >"$results"
for ((r = 1; r <= rounds; ++r)); do
  echo "round $r/$rounds: strata" >&2
  OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} "$build/strata" bench --model "$model" \
    --prompt-tokens "$pp" --gen-tokens "$tg" --batch 1 --threads "$threads" \
    --quantization "${strata_quantization:-none}" --cpu-matmul-precision "${PRECISION:-f32}" \
    --json |
    python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); d["engine"]="strata"; print(json.dumps(d))' \
    >>"$results"
  echo "round $r/$rounds: llama.cpp" >&2
  node "$peer/llama_bench.mjs" --model "$gguf" --pp "$pp" --tg "$tg" --reps 1 \
    --threads "$threads" --tg-after-pp --json "$scratch/llama_round.json" >/dev/null
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["engine"]="llama.cpp"; print(json.dumps(d))' \
    "$scratch/llama_round.json" >>"$results"
done

# 3. Table.
python3 - "$results" "$llama_release" "$nlc_version" "$threads" "$pp" "$tg" "$experts" \
  "${PRECISION:-f32}" <<'EOF'
import datetime, json, statistics, sys

path, release, nlc, threads, pp, tg, experts, precision = sys.argv[1:]
rows = [json.loads(line) for line in open(path)]

def strata_figures(r):
    return r["prefill_tokens_per_s"], r["decode_tokens_per_s"]

def llama_figures(r):
    # llama_bench.mjs names its results pp<N>_tps and tg<N>[@d<N>]_tps, each {median, ...}.
    pp = next(v["median"] for k, v in r.items() if k.startswith("pp") and k.endswith("_tps") and v)
    tg = next(v["median"] for k, v in r.items() if k.startswith("tg") and k.endswith("_tps") and v)
    return pp, tg

def medians(engine, figures):
    got = [figures(r) for r in rows if r["engine"] == engine]
    p, t = [g[0] for g in got], [g[1] for g in got]
    return statistics.median(p), statistics.median(t), p, t

s_pp, s_tg, s_pps, s_tgs = medians("strata", strata_figures)
l_pp, l_tg, l_pps, l_tgs = medians("llama.cpp", llama_figures)
reported = next((r.get("llama_cpp") for r in rows if r["engine"] == "llama.cpp"), None)
if isinstance(reported, dict):
    release = reported.get("release", release)
floor = [r for r in rows if r["engine"] == "strata"][0]
print(f"### Strata vs llama.cpp ({datetime.date.today()}, llama.cpp {release} via node-llama-cpp {nlc}, "
      f"{threads} threads each, bench preset bf16, routed experts {experts}, pp {pp}, tg {tg} "
      f"after the prompt, Strata's products {precision})")
print()
print("| phase | Strata tokens/s | llama.cpp tokens/s | Strata / llama.cpp | Strata roofline floor |")
print("|---|---|---|---|---|")
print(f"| prefill | {s_pp:.1f} | {l_pp:.1f} | {s_pp / l_pp:.2f}x | {floor.get('prefill_floor_tokens_per_s', float('nan')):.1f} |")
print(f"| decode | {s_tg:.1f} | {l_tg:.1f} | {s_tg / l_tg:.2f}x | {floor.get('decode_floor_tokens_per_s', float('nan')):.1f} |")
print()
print(f"per round: strata pp {[round(x, 1) for x in s_pps]} tg {[round(x, 1) for x in s_tgs]}; "
      f"llama.cpp pp {[round(x, 1) for x in l_pps]} tg {[round(x, 1) for x in l_tgs]}")
EOF
