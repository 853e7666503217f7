#!/usr/bin/env bash
# bench/gpu_pack.sh — build the CUDA kernel tests and cuda_gpu_bench HERE and pack them, with the
# shared libraries they need, into build/gpu-pack for bench/gpu_check.sh on a lent GPU machine
# (that machine has the NVIDIA driver, CUDA and cuBLAS but not Strata's Debian dev packages, so
# it cannot configure Strata itself). cuBLAS, the driver and the C library come from that
# machine; absl, libgomp and cudart travel; libstdc++/libgcc_s travel as a fallback only.
#
# The binaries are stripped and everything is packed as build/gpu-pack/pack.tar.xz (~15 MB: the
# device tool carries at most 64 MiB, and oneDNN alone is 40 MB unpacked); gpu_check.sh unpacks
# it on the GPU machine.
#
# Usage: bench/gpu_pack.sh            (build dir: $STRATA_GPU_BUILD or build/gpu-check)
# Then:  device run: command "bench/gpu_check.sh", carry ["build/gpu-pack"]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${STRATA_GPU_BUILD:-$ROOT/build/gpu-check}
PACK=${STRATA_GPU_PACK:-$ROOT/build/gpu-pack}
JOBS=${JOBS:-2}

if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_WITH_CUDA=ON >/dev/null
fi
ninja -C "$BUILD" -j"$JOBS" strata_gpu_check

STAGE="$PACK.staging"
rm -rf "$PACK" "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/lib-fallback"
bins=()
for b in "$BUILD"/kernels/cuda/cuda_*_test "$BUILD"/kernels/cuda/cuda_gpu_bench \
  "$BUILD"/engine/cuda/engine_cuda_*_test "$BUILD"/bench/cuda_engine_bench \
  "$BUILD"/tools/strata-make-checkpoint "$BUILD"/strata; do
  [[ -x "$b" ]] || continue
  [[ $(basename "$b") == *_emu_* ]] && continue  # the CPU emulator's builds (tests/cuda_emu)
  cp "$b" "$STAGE/bin/"
  strip --strip-unneeded "$STAGE/bin/$(basename "$b")" 2>/dev/null || true
  bins+=("$b")
done
# kernels_cuda_test links NCCL (200+ MB): not carried; gpu_check.sh runs it only from a build.

# Libraries the GPU machine provides itself (driver, cuBLAS, glibc) are not carried.
skip='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libdl\.so|/libpthread\.so|/librt\.so|libcuda\.so|libcublas|libnccl'
for b in "${bins[@]}"; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  if [[ "$lib" =~ $skip ]]; then continue; fi
  if [[ "$lib" =~ libstdc\+\+|libgcc_s ]]; then
    cp -L "$lib" "$STAGE/lib-fallback/"
  else
    cp -L "$lib" "$STAGE/lib/"
  fi
done

{
  echo "packed: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (+local changes)')"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "binaries: $(cd "$STAGE/bin" && ls | tr '\n' ' ')"
} > "$STAGE/MANIFEST"
mkdir -p "$PACK"
cp "$STAGE/MANIFEST" "$PACK/MANIFEST"
tar -C "$STAGE" -cf - . | xz -T"$JOBS" -6 > "$PACK/pack.tar.xz"
rm -rf "$STAGE"
cat "$PACK/MANIFEST"
du -sh "$PACK"
