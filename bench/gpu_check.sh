#!/usr/bin/env bash
# bench/gpu_check.sh — on a machine with an NVIDIA GPU (H200 here): run every CUDA kernel test
# against kernels/reference (fresh random inputs, poisoned outputs; relative errors
# tabulated), then benchmark every kernel at K3 and Kimi-Linear shapes against ceilings measured
# in the same run. Prints the benchmark table LAST. Budget: well under 8 minutes.
#
# Binaries come from, in order:
#   1. a pack made here by bench/gpu_pack.sh (build/gpu-pack, or $STRATA_GPU_PACK): the lent GPU
#      machine cannot build Strata (no Debian dev packages), so on it:
#        bench/gpu_pack.sh            (on the development machine, first)
#        device run: command "bench/gpu_check.sh", carry ["build/gpu-pack"], timeout_s 560
#   2. else a CUDA build: configures build/gpu-check ($STRATA_GPU_BUILD) and builds only the
#      target strata_gpu_check (needs the Debian packages of tools/setup.sh and nvcc).
# Logs go to build/gpu-check-logs, or with $OUT set (the device tool, which fetches at most 8
# files) to a temporary folder, and at the end $OUT gets five files: summary.txt (what this
# prints after "== summary"), bench.log, relerr.txt, gpu-results.json (the tables as issue 49's
# results file, bench/gpu_results_json.py) and logs.tar.gz (every log).
# STRATA_GPU_CHECK_BUDGET_S (default 520) is the whole run's time budget: each test binary gets
# at most a quarter of it (120 s at most), the kernel benchmark what is left (330 s at most).
# Then the end-to-end engine benchmark (cuda_engine_bench = `strata bench --device cuda`) on a
# generated Kimi-Linear-shaped bench checkpoint, batch 1, 8 and 64, next to its roofline floor, and
# a serving smoke test: `strata serve --device cuda` on that checkpoint answers a completion, a
# streamed chat completion and /metrics (bench/gpu_serve_smoke.py). With two GPUs or more also
# `strata bench --device cuda --tensor-parallel-size 2` (decode graphs with NCCL inside, the
# all-reduce bus bandwidth in a graph next to the decode step).
# Options: --quick (bench: first shape of each kernel only), --tests-only, --bench-only,
# --e2e-only (the end-to-end rows and the serving smoke test alone), --profile-decode (also: Nsight
# Compute, where it can read the counters, times every kernel and every replayed decode graph of
# a short batch-1 run as whole workloads: ncu-decode.log), --ncu-kernels (Nsight Compute's
# speed-of-light, occupancy, warp-stall and memory sections for one launch of each row of the
# kernels short of their targets — MLA decode, KDA decode, the grouped GEMM, the int8 GEMV:
# ncu-kernels.log; with --e2e-only it runs before the serving smoke test).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PACK=${STRATA_GPU_PACK:-$ROOT/build/gpu-pack}
BUILD=${STRATA_GPU_BUILD:-$ROOT/build/gpu-check}
BUDGET_S=${STRATA_GPU_CHECK_BUDGET_S:-520}
if [[ -n "${OUT:-}" ]]; then LOGS=${TMPDIR:-/tmp}/strata-gpu-check-logs; else LOGS=$ROOT/build/gpu-check-logs; fi
rm -rf "$LOGS"
QUICK=""; RUN_TESTS=1; RUN_BENCH=1; RUN_KERNEL_BENCH=1; PROFILE=0; NCU_KERNELS=0
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK="--quick" ;;
    --tests-only) RUN_BENCH=0 ;;
    --bench-only) RUN_TESTS=0 ;;
    --e2e-only) RUN_TESTS=0; RUN_KERNEL_BENCH=0 ;;
    --profile-decode) PROFILE=1 ;;
    --ncu-kernels) NCU_KERNELS=1 ;;
    *) echo "usage: $0 [--quick] [--tests-only|--bench-only|--e2e-only] [--profile-decode] [--ncu-kernels]"; exit 2 ;;
  esac
done
mkdir -p "$LOGS"
START=$SECONDS
elapsed() { echo "$((SECONDS - START))s"; }

echo "== gpu_check: $(date -u +%H:%M:%S)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
    --format=csv,noheader 2>&1 | tee "$LOGS/nvidia-smi.txt"
else
  echo "nvidia-smi not found"
fi

# cuBLAS (and, for a build, NCCL) from wherever this machine keeps them.
lib_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -e "$d/libcublas.so.13" ]] && lib_dirs="$lib_dirs:$d"
done
py_dirs=$(python3 -c 'import glob,site,sys
paths=[p for s in site.getsitepackages()+[site.getusersitepackages()] for p in glob.glob(s+"/nvidia/*/lib")]
print(":".join(paths))' 2>/dev/null || true)
[[ -n "$py_dirs" ]] && lib_dirs="$lib_dirs:$py_dirs"
if [[ "$lib_dirs" != *cublas* && "$lib_dirs" != *cuda* && "$lib_dirs" != *nvidia* ]]; then
  found=$(find /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)
  [[ -n "$found" ]] && lib_dirs="$lib_dirs:$(dirname "$found")"
fi
echo "library dirs: ${lib_dirs#:}"

# A pack made by gpu_pack.sh is one xz tarball: unpack it next to the logs' machine-local tmp.
if [[ -f "$PACK/pack.tar.xz" ]]; then
  UNPACKED=${TMPDIR:-/tmp}/strata-gpu-pack
  rm -rf "$UNPACKED" && mkdir -p "$UNPACKED"
  if ! tar -C "$UNPACKED" -xJf "$PACK/pack.tar.xz" 2>"$LOGS/unpack.txt"; then
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$PACK/pack.tar.xz" "$UNPACKED" || { cat "$LOGS/unpack.txt"; echo "unpack FAILED"; exit 1; }
  fi
  PACK=$UNPACKED
fi
if [[ -x "$PACK/bin/cuda_gpu_bench" ]]; then
  BIN="$PACK/bin"
  ENGINE_TESTS="$BIN"
  ENGINE_BENCH="$BIN/cuda_engine_bench"
  MAKE_CKPT="$BIN/strata-make-checkpoint"
  STRATA_BIN="$BIN/strata"
  echo "binaries: pack $PACK"; cat "$PACK/MANIFEST" 2>/dev/null
  export LD_LIBRARY_PATH="$PACK/lib$lib_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ! "$BIN/cuda_router_test" --gtest_list_tests >/dev/null 2>"$LOGS/loader.txt"; then
    echo "loader failed with the system libstdc++ ($(head -c 300 "$LOGS/loader.txt")); using the packed one"
    export LD_LIBRARY_PATH="$PACK/lib:$PACK/lib-fallback$lib_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
else
  echo "binaries: building $BUILD (target strata_gpu_check)"
  if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_WITH_CUDA=ON \
      > "$LOGS/configure.log" 2>&1 || { tail -30 "$LOGS/configure.log"; echo "configure FAILED"; exit 1; }
  fi
  ninja -C "$BUILD" -j"$(nproc)" strata_gpu_check > "$LOGS/build.log" 2>&1 \
    || { grep -E "error|FAILED" "$LOGS/build.log" | head -30; echo "build FAILED"; exit 1; }
  BIN="$BUILD/kernels/cuda"
  ENGINE_TESTS="$BUILD/engine/cuda"
  ENGINE_BENCH="$BUILD/bench/cuda_engine_bench"
  MAKE_CKPT="$BUILD/tools/strata-make-checkpoint"
  STRATA_BIN="$BUILD/strata"
  export LD_LIBRARY_PATH="${lib_dirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# Line-buffered stdout where stdbuf exists: a binary stopped at its time limit keeps its lines.
LINEBUF=(); command -v stdbuf >/dev/null && LINEBUF=(stdbuf -oL -eL)
TEST_CAP_S=$((BUDGET_S / 4)); [[ $TEST_CAP_S -gt 120 ]] && TEST_CAP_S=120
missing=$(ldd "$BIN/cuda_gpu_bench" 2>&1 | grep "not found" || true)
[[ -n "$missing" ]] && echo "WARNING: unresolved libraries: $missing"
echo "== setup done at $(elapsed)"

failed_any=0
test_rows=()
if [[ $RUN_TESTS == 1 ]]; then
  for t in "$BIN"/cuda_*_test "$BIN"/kernels_cuda_test "$ENGINE_TESTS"/engine_cuda_*_test; do
    [[ -x "$t" ]] || continue
    name=$(basename "$t")
    [[ $name == *_emu_* ]] && continue  # the CPU emulator's builds run in ctest, not here
    log="$LOGS/$name.log"
    timeout $TEST_CAP_S "${LINEBUF[@]}" "$t" --gtest_color=no > "$log" 2>&1
    rc=$?
    ok=$(grep -c '^\[       OK \]' "$log")
    fail=$(grep -c '^\[  FAILED  \] .*(' "$log")
    skip=$(grep -c '^\[  SKIPPED \] .*(' "$log")
    status=ok
    if [[ $rc -eq 124 ]]; then status="TIMEOUT"; elif [[ $rc -ne 0 ]]; then status="rc=$rc"; fi
    [[ $status != ok || $fail -gt 0 ]] && failed_any=1
    test_rows+=("| $name | $ok | $fail | $skip | $status |")
    echo "  $name: $ok passed, $fail failed, $skip skipped ($status) at $(elapsed)"
  done
  cat "$LOGS"/*_test.log 2>/dev/null | grep '^\[relerr\]' > "$LOGS/relerr.txt" || true
fi

# run_ncu SECONDS LOG COUNTED ARGS...: Nsight Compute (clocks as found) over ARGS into $LOGS/LOG,
# reporting how many lines hold COUNTED (one per profiled workload); false where ncu is missing.
run_ncu() {
  local seconds=$1 log=$2 counted=$3
  shift 3
  command -v ncu >/dev/null || { echo "ncu not found"; return 1; }
  timeout "$seconds" ncu --clock-control none "$@" > "$LOGS/$log" 2>&1
  echo "ncu rc=$? ($(grep -c "$counted" "$LOGS/$log") workloads profiled)"
}

e2e_rows=()
serve_line=""
if [[ $RUN_BENCH == 1 && -x "$ENGINE_BENCH" && -x "$MAKE_CKPT" ]]; then
  echo "== end-to-end: cuda_engine_bench on the Kimi-Linear bench preset"
  CKPT=${TMPDIR:-/tmp}/strata-bench-kl
  if timeout 120 "$MAKE_CKPT" --preset bench --family kimi-linear --demo-tokenizer --out "$CKPT" \
      > "$LOGS/make-checkpoint.log" 2>&1; then
    # batch:weights[:nopdl|:wgmma] — bf16 at 1, 8 and 64 (docs/performance.md), MXFP4 experts +
    # int8 projections at 1, bf16 at 1 without programmatic dependent launch (STRATA_CUDA_PDL=0,
    # kernels/cuda/internal/launch.cuh): the difference is what PDL buys; and bf16 at 1 and 64
    # with the wgmma kernels (STRATA_CUDA_WGMMA=1, kernels/cuda/wgmma.h: also the grouped GEMM's wgmma tile).
    for run in 1:bf16 8:bf16 64:bf16 1:mxfp4,int8 1:bf16:nopdl 1:bf16:wgmma 64:bf16:wgmma; do
      batch=${run%%:*} rest=${run#*:}
      weights=${rest%%:*}
      quant=(); [[ $weights != bf16 ]] && quant=(--quantization "$weights")
      pdl=(); label=$weights
      [[ $rest == *:nopdl ]] && { pdl=(env STRATA_CUDA_PDL=0); label="$weights, no PDL"; }
      [[ $rest == *:wgmma ]] && { pdl=(env STRATA_CUDA_WGMMA=1); label="$weights, wgmma"; }
      log="$LOGS/engine-bench-b$batch-${rest//[,:]/-}.log"
      timeout 90 "${pdl[@]}" "$ENGINE_BENCH" --model "$CKPT" --prompt-tokens 512 --gen-tokens 64 \
        --batch $batch "${quant[@]}" > "$log" 2>&1
      rc=$?
      grep -o "captured the decode graph.*" "$log" | sort -u | head -3
      tail -4 "$log"
      # "decode step: a CUDA graph of N nodes (M per layer)" is the kernels per decode step.
      row=$(awk -v b=$batch -v wt="$label" '/^prefill +[0-9]/ {p=$2; pf=$4}
        /^decode +[0-9]/ {d=$2; df=$3; dp=$4; ex=$9}
        /^decode step: a CUDA graph of/ {nodes=$7}
        END {if (d != "") printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |", b, wt, p, pf, d, df, dp, ex, nodes)}' \
        "$log")
      [[ $rc -ne 0 || -z "$row" ]] && { row="| $batch | $label | FAILED rc=$rc | | | | | | |"; failed_any=1; }
      e2e_rows+=("$row")
    done
    if [[ $PROFILE == 1 ]]; then
      echo "== profile: ncu over a batch-1 run (prompt 16, gen 16), graphs as whole workloads"
      run_ncu 150 ncu-decode.log 'gpu__time_duration' --graph-profiling graph \
        --metrics gpu__time_duration.sum "$ENGINE_BENCH" --model "$CKPT" --prompt-tokens 16 \
        --gen-tokens 16 --batch 1 && tail -12 "$LOGS/ncu-decode.log"
    fi
    if [[ $NCU_KERNELS == 1 ]]; then
      echo "== ncu: one launch of each row of MLA decode, KDA decode, grouped GEMM, int8 GEMV"
      run_ncu 200 ncu-kernels.log 'Section: GPU Speed Of Light' \
        --kernel-name regex:'MlaDecodeKernel|MlaDecodeWgmmaKernel|KdaRecurrentKernel|GroupedGemmKernel|Int8GemvKernel' \
        --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section MemoryWorkloadAnalysis "$BIN/cuda_gpu_bench" --once
    fi
    gpus=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
    if [[ -x "$STRATA_BIN" && $gpus -ge 2 ]]; then
      # Several GPUs: tensor parallelism 2 (NCCL on the compute stream, decode graphs on both
      # ranks) and the all-reduce bus bandwidth in a graph at the decode message and at 64 MiB.
      echo "== tensor parallel 2: strata bench --device cuda --tensor-parallel-size 2"
      timeout 120 "$STRATA_BIN" bench --device cuda --model "$CKPT" --tensor-parallel-size 2 \
        --prompt-tokens 512 --gen-tokens 64 --batch 8 > "$LOGS/engine-bench-tp2.log" 2>&1 ||
        failed_any=1
      tail -3 "$LOGS/engine-bench-tp2.log"
    fi
    if [[ -x "$STRATA_BIN" ]]; then
      echo "== serve smoke: strata serve --device cuda"
      timeout 100 python3 "$ROOT/bench/gpu_serve_smoke.py" "$STRATA_BIN" "$CKPT" \
        > "$LOGS/serve-smoke.log" 2>&1
      serve_rc=$?
      tail -12 "$LOGS/serve-smoke.log"
      [[ $serve_rc -ne 0 ]] && failed_any=1
      serve_line="serve smoke: $([[ $serve_rc -eq 0 ]] && echo ok || echo "FAILED rc=$serve_rc") ($(grep -m1 '^RESULT' "$LOGS/serve-smoke.log" | cut -c8-))"
    fi
  else
    tail -5 "$LOGS/make-checkpoint.log"; e2e_rows+=("| - | checkpoint generation FAILED | | | | | | | |")
    failed_any=1
  fi
  rm -rf "$CKPT"
fi

bench_rc=0
if [[ $RUN_BENCH == 1 && $RUN_KERNEL_BENCH == 1 ]]; then
  # The whole check must end within the device tool's call limit: the kernel benchmark gets what
  # is left of the budget (at most 330 s), and only the first shapes when little is left.
  left=$((BUDGET_S - (SECONDS - START)))
  [[ $left -gt 330 ]] && left=330
  [[ $left -lt 200 && -z "$QUICK" ]] && { QUICK="--quick"; echo "little time left: --quick"; }
  [[ $left -lt 60 ]] && left=60
  echo "== bench (cuda_gpu_bench $QUICK, up to ${left}s)"
  timeout $left "${LINEBUF[@]}" "$BIN/cuda_gpu_bench" $QUICK > "$LOGS/bench.log" 2>&1
  bench_rc=$?
  grep -v '^|\|^row: ' "$LOGS/bench.log" | tail -40
fi

summary() {
echo
echo "== summary after $(elapsed)"
if [[ $RUN_TESTS == 1 ]]; then
  echo
  echo "| test binary | passed | failed | skipped | status |"
  echo "|---|---:|---:|---:|---|"
  printf '%s\n' "${test_rows[@]}"
  echo
  echo "Relative errors ‖gpu − ref‖/‖ref‖, worst case per kernel (all cases: relerr.txt):"
  echo
  echo "| kernel | cases | worst relerr | tol | worst case | failures |"
  echo "|---|---:|---:|---:|---|---:|"
  awk '{
      k=""; c=""; e=""; t=""; s=$NF
      for (i = 1; i <= NF; ++i) {
        split($i, kv, "=")
        if (kv[1] == "kernel") k = kv[2]; else if (kv[1] == "case") c = kv[2];
        else if (kv[1] == "relerr") e = kv[2]; else if (kv[1] == "tol") t = kv[2];
      }
      n[k]++; if (s == "FAIL") f[k]++  # "flip": a top-2 routing flip, bounded by the test
      bad = (e == "inf" || e == "nan")
      if (!(k in w) || (w[k] != "inf" && (bad || e + 0 > w[k] + 0))) { w[k] = e; wc[k] = c; tol[k] = t }
    } END { for (k in n) printf("| %s | %d | %s | %s | %s | %d |\n", k, n[k], w[k], tol[k], wc[k], f[k] + 0) }' \
    "$LOGS/relerr.txt" | sort
  grep -h -A3 '^\[  FAILED  \]\|Failure$' "$LOGS"/*_test.log 2>/dev/null | head -20
fi
if [[ ${#e2e_rows[@]} -gt 0 ]]; then
  echo
  echo "End-to-end (Kimi-Linear bench preset, prompt 512, gen 64; target: decode within 1.5x of"
  echo "the weight+cache floor, i.e. >= 67% floor):"
  echo
  echo "| batch | weights | prefill tok/s | prefill % floor | decode tok/s | decode floor tok/s | decode % floor | decode time in Execute | kernels per decode step |"
  echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${e2e_rows[@]}"
  printf '%s\n' "${e2e_rows[@]}" > "$LOGS/e2e-rows.md"
fi
[[ -n "$serve_line" ]] && echo && echo "$serve_line"
if [[ $RUN_BENCH == 1 && $RUN_KERNEL_BENCH == 1 ]]; then
  echo
  if ! grep -E '^(\||## )' "$LOGS/bench.log"; then
    echo "(no benchmark table; bench rc=$bench_rc; the rows it finished:)"
    echo "| kernel | shape | time (us) | achieved | % of ceiling | target | also |"
    echo "|---|---|---:|---:|---:|---|---|"
    grep '^row: ' "$LOGS/bench.log" | cut -c6-
  fi
  [[ $bench_rc -ne 0 ]] && echo "bench rc=$bench_rc"
fi
}
summary | tee "$LOGS/summary.txt"  # (a subshell: failed_any is settled after it)
[[ $RUN_BENCH == 1 && $RUN_KERNEL_BENCH == 1 && $bench_rc -ne 0 ]] && failed_any=1
# The machine-readable results (issue 49): commit as bench/results/gpu-YYYY-MM-DD.json.
if [[ -s "$LOGS/bench.log" ]]; then
  e2e_arg=(); [[ -s "$LOGS/e2e-rows.md" ]] && e2e_arg=(--e2e "$LOGS/e2e-rows.md")
  python3 "$ROOT/bench/gpu_results_json.py" --bench-log "$LOGS/bench.log" "${e2e_arg[@]}" \
    --device "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" \
    --out "$LOGS/gpu-results.json" || echo "gpu_results_json.py failed"
fi
if [[ -n "${OUT:-}" ]]; then
  cp "$LOGS/gpu-results.json" "$OUT/" 2>/dev/null
  cp "$LOGS/summary.txt" "$OUT/" 2>/dev/null
  cp "$LOGS/bench.log" "$LOGS/relerr.txt" "$OUT/" 2>/dev/null
  tar -C "$LOGS" -czf "$OUT/logs.tar.gz" . 2>/dev/null
fi
echo "gpu_check finished in $(elapsed); logs in ${OUT:-$LOGS}"
exit $failed_any
