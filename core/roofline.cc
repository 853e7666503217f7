#include "core/roofline.h"

#include <omp.h>
#include "core/avx512_intrinsics.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/amx.h"
#include "core/cpu_features.h"

namespace strata::bench {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

float FmaChainsAvx2(long iterations) {
  __m256 acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_ps(1.0f + 0.01f * i);
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iterations; ++it) {
    for (int i = 0; i < 10; ++i) acc[i] = _mm256_fmadd_ps(acc[i], mul, add);
  }
  __m256 sum = acc[0];
  for (int i = 1; i < 10; ++i) sum = _mm256_add_ps(sum, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, sum);
  return out[0];
}

__attribute__((target("avx512f"))) float FmaChainsAvx512(long iterations) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(1.0f + 0.01f * i);
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iterations; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], mul, add);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}

// vdpbf16ps: 2 products + 2 adds per f32 lane, 16 lanes.
__attribute__((target("avx512f,avx512bf16"))) float Bf16DotChains(long iterations) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(1.0f + 0.01f * i);
  const __m512bh pair = (__m512bh)_mm512_set1_epi16(0x3380);  // bf16 6e-8: sums stay finite
  for (long it = 0; it < iterations; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], pair, pair);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}

// Best FLOP/s over two runs of `chains(iterations)` on every thread, each iteration
// flops_per_iteration per thread.
template <typename Chains>
double PeakOverThreads(Chains chains, long iterations, double flops_per_iteration) {
  double best = 0;
  for (int rep = 0; rep < 2; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    float sink = 0;
#pragma omp parallel reduction(+ : sink)
    { sink += chains(iterations); }
    const double s = Seconds(start);
    const double flops =
        flops_per_iteration * static_cast<double>(iterations) * omp_get_max_threads();
    if (sink != -1.0f) best = std::max(best, flops / s);
  }
  return best;
}

}  // namespace

__attribute__((target("amx-tile,amx-bf16"))) float AmxBf16Chains(long iterations) {
  alignas(64) uint16_t operand[16 * 32];
  std::fill(operand, operand + 16 * 32, uint16_t{0x3380});  // bf16 6e-8: sums stay finite
  alignas(64) float out[16 * 16];
  ConfigureAmxTiles16x64();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  for (long it = 0; it < iterations; ++it) {
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 5);
    _tile_dpbf16ps(2, 4, 5);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_stored(3, out, 64);
  _tile_release();
  return out[0];
}

double MeasureReadBandwidth(long bytes) {
  const long n = bytes / static_cast<long>(sizeof(float));
  float* data = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n) * 4));
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) data[i] = 1.0f;  // first touch by the reading thread
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    float total = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : total)
    for (long i = 0; i < n; ++i) total += data[i];
    const double s = Seconds(start);
    if (total != static_cast<float>(-1)) best = std::max(best, static_cast<double>(bytes) / s);
  }
  std::free(data);
  return best;
}

double MeasurePeakF32Flops() {
  if (ActiveIsa() >= Isa::kAvx512) {
    return PeakOverThreads([](long n) { return FmaChainsAvx512(n); }, 20'000'000, 2.0 * 12 * 16);
  }
  return PeakOverThreads([](long n) { return FmaChainsAvx2(n); }, 20'000'000, 2.0 * 10 * 8);
}

double MeasurePeakAmxBf16Flops() {
  if (!GetCpuFeatures().amx_bf16 || ActiveIsa() != Isa::kAvx512Bf16) return 0.0;
  return PeakOverThreads([](long n) { return AmxBf16Chains(n); }, 200'000, kAmxBf16ChainFlops);
}

double MeasurePeakBf16DotFlops() {
  if (ActiveIsa() != Isa::kAvx512Bf16) return 0.0;
  return PeakOverThreads([](long n) { return Bf16DotChains(n); }, 10'000'000, 4.0 * 12 * 16);
}

}  // namespace strata::bench
