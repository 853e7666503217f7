#!/usr/bin/env bash
# Long-context sweep (issue 45; docs/performance.md "Long context"): prefill tokens/s, time to
# first token and decode tokens/s at each context length, through the engine (`strata bench
# --prompt-tokens N`, one sequence), on a K3-shaped tiny checkpoint with one MLA head (the one
# tests/long_context serves). Writes a Markdown table and a PNG plot of prefill time against
# context length (gnuplot, tools/setup.sh) into --out.
#
# The MLA prefill attention figure is an estimate: prefill time is fitted as a·T + b·T² over
# all lengths (least squares; a: the per-token work — KDA, projections, MoE — b: attention, the
# only part that grows with the context) and, per length, the time above a·T is charged to
# attention, whose FLOPs are H·(d_qk + d_v)·T² for a causal T-token prefill (the expanded
# form's, the fewer), against the f32 peak `strata bench` measures. The shortest length and rows
# where that time is under a fifth of the prefill (noise) print "-".
#
# usage: bench/long_context.sh [--strata BIN] [--make-checkpoint BIN] [--lengths 4096,32768,...]
#                              [--gen-tokens N] [--out DIR] [--threads N] [--model DIR]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
strata=$root/build/ci/strata
make_checkpoint=$root/build/ci/tools/strata-make-checkpoint
lengths=4096,32768,131072,262144,524288,1048576
gen_tokens=16
out=$root/build/long_context
threads=
model=

while [[ $# -gt 0 ]]; do
  case "$1" in
    --strata) strata=$2; shift 2 ;;
    --make-checkpoint) make_checkpoint=$2; shift 2 ;;
    --lengths) lengths=$2; shift 2 ;;
    --gen-tokens) gen_tokens=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "long_context.sh: unknown flag '$1' (see --help)" >&2; exit 2 ;;
  esac
done

mkdir -p "$out"
# The tests/long_context checkpoint: layer 1 KDA, layer 2 MLA with one head (d_n 16, d_r 8,
# d_v 16, kv_lora 32), hidden 96.
if [[ -z $model ]]; then
  model=$out/model
  "$make_checkpoint" --family k3 --preset tiny --seed 45 --demo-tokenizer --out "$model" \
    --set mla_heads=1 --set layers=2 --set full_attn=2 --set vocab=8192 >/dev/null
fi
heads=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c=c.get('text_config',c); print(c['num_attention_heads'], c['qk_nope_head_dim']+c['qk_rope_head_dim'], c['v_head_dim'])" "$model/config.json")

results=$out/results.jsonl
: >"$results"
IFS=, read -ra sizes <<<"$lengths"
for n in "${sizes[@]}"; do
  echo "long_context: prompt $n tokens ..." >&2
  start=$(date +%s.%N)
  "$strata" bench --model "$model" --prompt-tokens "$n" --gen-tokens "$gen_tokens" --json \
    ${threads:+--threads "$threads"} 2>/dev/null | tr -d '\n' >>"$results"
  echo >>"$results"
  echo "long_context:   done in $(python3 -c "import sys,time; print(round(time.time()-float(sys.argv[1]),1))" "$start") s" >&2
done

python3 - "$results" "$out" $heads <<'EOF'
import json, sys
path, out, heads, d_qk, d_v = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rows = [json.loads(line) for line in open(path) if line.strip()]
base = rows[0]
# Least squares of prefill_s = a·T + b·T² (no intercept).
sxx = sum(float(r["prompt_tokens"]) ** 2 for r in rows)
sxy = sum(float(r["prompt_tokens"]) ** 3 for r in rows)
syy = sum(float(r["prompt_tokens"]) ** 4 for r in rows)
sx_t = sum(float(r["prompt_tokens"]) * (r["prompt_tokens"] / r["prefill_tokens_per_s"]) for r in rows)
sy_t = sum(float(r["prompt_tokens"]) ** 2 * (r["prompt_tokens"] / r["prefill_tokens_per_s"]) for r in rows)
det = sxx * syy - sxy * sxy
base_s_per_token = (sx_t * syy - sy_t * sxy) / det if len(rows) > 1 and det > 0 else 1.0 / base["prefill_tokens_per_s"]
peak = max(r["measured_peak_f32_gflop_s"] for r in rows)
lines = ["| context (tokens) | prefill tokens/s | prefill s (TTFT) | decode tokens/s at that context | MLA attention GFLOP/s (est.) | % of f32 peak (est.) |",
         "|---:|---:|---:|---:|---:|---:|"]
dat = []
for r in rows:
    t = r["prompt_tokens"]
    prefill_s = t / r["prefill_tokens_per_s"]
    attention_s = prefill_s - t * base_s_per_token
    flops = heads * (d_qk + d_v) * float(t) * t
    if r is base or attention_s <= 0.2 * prefill_s:
        gflops, pct = "-", "-"
    else:
        g = flops / attention_s / 1e9
        gflops, pct = f"{g:.1f}", f"{100 * g / peak:.0f}%"
    lines.append(f"| {t:,} | {r['prefill_tokens_per_s']:,.0f} | {prefill_s:.2f} | "
                 f"{r['decode_tokens_per_s']:,.0f} | {gflops} | {pct} |")
    dat.append(f"{t} {prefill_s:.4f} {r['prefill_tokens_per_s']:.1f} {r['decode_tokens_per_s']:.1f}")
lines.append("")
lines.append(f"{base['threads']} threads, {base['kv_cache_dtype']} latent cache, "
             f"{base['gen_tokens']} decode tokens per run; f32 peak {peak:.0f} GFLOP/s (the best "
             "of the runs' own measurements).")
open(f"{out}/long_context.md", "w").write("\n".join(lines) + "\n")
open(f"{out}/long_context.dat", "w").write("\n".join(dat) + "\n")
print("\n".join(lines))
EOF

if command -v gnuplot >/dev/null; then
  gnuplot <<EOF
set terminal png size 900,560
set output "$out/long_context.png"
set title "Prefill time and decode rate vs context (tiny K3, one MLA head, CPU)"
set xlabel "context (tokens)"
set logscale x 2
set format x "%.0s%c"
set logscale y
set ylabel "prefill time (s)"
set y2label "decode tokens/s"
set y2tics
set logscale y2
set key left top
set grid
plot "$out/long_context.dat" using 1:2 with linespoints lw 2 title "prefill time (TTFT)", \
     "$out/long_context.dat" using 1:4 axes x1y2 with linespoints lw 2 title "decode tokens/s"
EOF
  echo "long_context: table $out/long_context.md, plot $out/long_context.png" >&2
else
  echo "long_context: table $out/long_context.md (no gnuplot: tools/setup.sh installs it)" >&2
fi
