// Matmul benchmarks against ceilings measured in the same run (docs/performance.md):
//   read_GBps   streaming read of 1 GiB over all threads (what decode must do with the weights)
//   triad_GBps  a[i] = b[i] + s·c[i] over 3 × 1/3 GiB (reported, for reference)
//   fma_GFLOPs  a register-blocked f32 FMA loop over all threads (AVX-512 where present)
//   bf16_GFLOPs a vdpbf16ps loop (AVX512_BF16 only; the ceiling of the lossy variant)
//   vnni_GOPs   a vpdpbusd loop (AVX512_VNNI only; the ceiling of the int8-activation products,
//               2 ops per byte product)
// The ceilings are printed at start and end (1 GiB, 20M FMA iterations per thread) and measured
// again, smaller (512 MiB, 5M iterations), right before each case: a shared machine's load
// drifts by the minute. Every case prints ms per call, GB/s, GFLOP/s, its local ceilings and
// pct_ceiling = floor / mean time, floor = max(bytes / read_GBps, flops / peak); pct_best uses
// the fastest call (the ceilings are best-of-N too); pct_cpu compares rates per CPU-second of
// the process on both sides (robust to time slicing; pessimistic where OpenMP threads spin).
// Weights rotate over enough copies to miss the L3, as in a real decode step (all layers'
// weights ≫ L3).
//
// Run: kernels_cpu_bench [--benchmark_filter=decode/bf16] (not run by ctest); --threading and
// --projections run the comparisons described above their functions instead.
#include <benchmark/benchmark.h>
#include <omp.h>
#include "core/avx512_intrinsics.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/roofline.h"
#include "core/tensor.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::kernels::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU seconds of all threads of the process: a rate per CPU-second does not drop when the OS
// hands our threads' cores to other processes (it does drop while threads spin in a barrier).
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Best rate over repetitions, by wall time and per CPU-second.
struct Rate {
  double wall = 0, cpu = 0;
  void Update(double amount, Clock::time_point wall0, double cpu0) {
    wall = std::max(wall, amount / Seconds(wall0));
    cpu = std::max(cpu, amount / (ProcessCpuSeconds() - cpu0));
  }
};

struct Ceilings {
  Rate read, triad, fma, bf16, amx, vnni;  // bytes/s and FLOP/s (vnni: int8 ops/s)
};
Rate ReadBandwidth(const float* data, size_t count) {
  Rate best;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = Clock::now();
    const double c0 = ProcessCpuSeconds();
    float total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (size_t chunk = 0; chunk < count / 4096; ++chunk) {
      const float* p = data + chunk * 4096;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int i = 0; i < 4096; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
      for (float v : lanes) total += v;
    }
    benchmark::DoNotOptimize(total);
    best.Update(static_cast<double>(count * sizeof(float)), t0, c0);
  }
  return best;
}

Rate TriadBandwidth(float* a, const float* b, const float* c, size_t count) {
  Rate best;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = Clock::now();
    const double c0 = ProcessCpuSeconds();
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < count; ++i) a[i] = b[i] + 0.5f * c[i];
    benchmark::ClobberMemory();
    best.Update(3.0 * static_cast<double>(count * sizeof(float)), t0, c0);
  }
  return best;
}

// 12 independent FMA chains per thread (4-cycle latency × 2 pipes, with room).
__attribute__((target("avx512f"))) void FmaThread512(int64_t iters) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1e-3f * i);
  const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-6f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  }
  for (int i = 1; i < 12; ++i) a[0] = _mm512_add_ps(a[0], a[i]);
  benchmark::DoNotOptimize(a[0]);
}

void FmaThread256(int64_t iters) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1e-3f * i);
  const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-6f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  }
  for (int i = 1; i < 12; ++i) a[0] = _mm256_add_ps(a[0], a[i]);
  benchmark::DoNotOptimize(a[0]);
}

__attribute__((target("avx512f,avx512bf16"))) void Bf16DotThread(int64_t iters) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1e-3f * i);
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3f80);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbf16_ps(a[i], b, b);
  }
  for (int i = 1; i < 12; ++i) a[0] = _mm512_add_ps(a[0], a[i]);
  benchmark::DoNotOptimize(a[0]);
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void VnniDotThread(int64_t iters) {
  __m512i a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_epi32(i);
  const __m512i b = _mm512_set1_epi8(3), c = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbusd_epi32(a[i], b, c);
  }
  for (int i = 1; i < 12; ++i) a[0] = _mm512_add_epi32(a[0], a[i]);
  benchmark::DoNotOptimize(a[0]);
}

// GFLOP/s of `body(iters)` on all threads, where one iteration is flops_per_iter per thread.
template <typename Body>
Rate PeakFlops(Body body, double flops_per_iter, int64_t iters) {
  Rate best;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    const double c0 = ProcessCpuSeconds();
    int threads = 1;
#pragma omp parallel
    {
#pragma omp single
      threads = omp_get_num_threads();
      body(iters);
    }
    best.Update(flops_per_iter * static_cast<double>(iters) * threads, t0, c0);
  }
  return best;
}

// One 1 GiB buffer for the bandwidth ceilings, first-touched by all threads.
const AlignedBuffer& BandwidthBuffer() {
  static const AlignedBuffer* buffer = [] {
    const size_t count = (size_t{1} << 30) / sizeof(float);
    auto* b = new AlignedBuffer(count * sizeof(float));
    float* data = b->as<float>();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) data[i] = 1.0f;
    return b;
  }();
  return *buffer;
}

// read_bytes of the buffer are streamed (the triad uses all of it); fma_iters per thread.
Ceilings MeasureCeilings(size_t read_bytes, int64_t fma_iters) {
  Ceilings c;
  float* data = BandwidthBuffer().as<float>();
  const size_t count = BandwidthBuffer().size() / sizeof(float);
  c.read = ReadBandwidth(data, std::min(count, read_bytes / sizeof(float)));
  const size_t third = std::min(count, read_bytes / sizeof(float)) / 3;
  c.triad = TriadBandwidth(data, data + third, data + 2 * third, third);
  const bool avx512 = ActiveIsa() >= Isa::kAvx512;
  c.fma = avx512 ? PeakFlops(FmaThread512, 12 * 16 * 2, fma_iters)
                 : PeakFlops(FmaThread256, 12 * 8 * 2, fma_iters);
  if (GetCpuFeatures().avx512bf16) {
    c.bf16 = PeakFlops(Bf16DotThread, 12 * 32 * 2, fma_iters);
  }
  if (GetCpuFeatures().avx512vnni) {
    c.vnni = PeakFlops(VnniDotThread, 12 * 64 * 2, fma_iters);
  }
  if (GetCpuFeatures().amx_bf16) {
    c.amx = PeakFlops(
        [](int64_t iters) { benchmark::DoNotOptimize(strata::bench::AmxBf16Chains(iters)); },
        strata::bench::kAmxBf16ChainFlops, fma_iters / 25);
  }
  return c;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string line;
  std::getline(in, line);
  return line;
}

void PrintCeilings(const char* when, const Ceilings& c) {
  std::printf(
      "ceilings (%s, %d threads, isa %s, loadavg %s): read %.1f GB/s, triad %.1f GB/s, "
      "f32 FMA %.1f GFLOP/s, bf16 dot %.1f GFLOP/s, AMX bf16 %.1f GFLOP/s, int8 dot (VNNI) %.1f "
      "GOP/s; per CPU-second: read %.1f GB, f32 FMA %.1f GFLOP\n",
      when, omp_get_max_threads(), IsaName(ActiveIsa()), LoadAverage().c_str(), c.read.wall / 1e9,
      c.triad.wall / 1e9, c.fma.wall / 1e9, c.bf16.wall / 1e9, c.amx.wall / 1e9, c.vnni.wall / 1e9,
      c.read.cpu / 1e9, c.fma.cpu / 1e9);
  std::fflush(stdout);
}

// ---- the matmul benchmarks ---------------------------------------------------------------

struct Case {
  const char* phase;  // decode / prefill
  WeightFormat format;
  int64_t m, n, k;
  MatmulAlgo algo;
  Isa isa_cap;
};

const char* AlgoName(MatmulAlgo a) {
  switch (a) {
    case MatmulAlgo::kAuto:
      return "auto";
    case MatmulAlgo::kStreaming:
      return "stream";
    case MatmulAlgo::kOneDnn:
      return "onednn";
    case MatmulAlgo::kBf16DotLossy:
      return "bf16dot_lossy";
    case MatmulAlgo::kOneDnnBf16:
      return "onednn_bf16";
    case MatmulAlgo::kAmxBf16:
      return "amx_bf16";
    case MatmulAlgo::kInt8Vnni:
      return "int8_vnni";
  }
  return "?";
}

int64_t WeightBytes(WeightFormat f, int64_t n, int64_t k) {
  switch (f) {
    case WeightFormat::kF32:
      return 4 * n * k;
    case WeightFormat::kBf16:
      return 2 * n * k;
    case WeightFormat::kMxfp4:
      return n * (k / 2 + k / 32);
    case WeightFormat::kInt8:
      return n * (k + k / 16);
  }
  return 0;
}

// Enough copies of W (random bits, finite values) that cycling through them misses the L3.
struct WeightCopies {
  std::vector<AlignedBuffer> data, scales;
  std::vector<MatmulWeights> views;
};

// copies = 0: enough to miss the L3 (≥ 256 MB in all).
WeightCopies MakeCopies(const Case& c, int64_t copies = 0) {
  constexpr int64_t kMinTotalBytes = int64_t{256} << 20;
  const int64_t bytes = WeightBytes(c.format, c.n, c.k);
  if (copies == 0) copies = std::max<int64_t>(1, (kMinTotalBytes + bytes - 1) / bytes);
  WeightCopies w;
  uint32_t state = 12345;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return state;
  };
  for (int64_t i = 0; i < copies; ++i) {
    const int64_t data_bytes = c.format == WeightFormat::kMxfp4  ? c.n * c.k / 2
                               : c.format == WeightFormat::kInt8 ? c.n * c.k
                                                                 : bytes;
    AlignedBuffer d(static_cast<size_t>(data_bytes));
    uint8_t* p = d.as<uint8_t>();
    // Weights as a checkpoint has them (|w| ≤ 0.1, no subnormals): random bit patterns put
    // subnormal weights and products in the f32 FMAs, which cost Intel CPUs a microcode assist
    // each (measured: the f32 and bf16 tiles 15-18x slower there; vdpbf16ps flushes them).
    for (int64_t b = 0; b < data_bytes; b += 4) {
      uint32_t v = next();
      const auto weight = [&next] {
        return (static_cast<float>(next() >> 8) * (1.0f / 8388608.0f) - 1.0f) * 0.1f;
      };
      if (c.format == WeightFormat::kBf16)
        v = F32ToBf16(weight()) | (uint32_t{F32ToBf16(weight())} << 16);
      if (c.format == WeightFormat::kF32) {
        const float f = weight();
        std::memcpy(&v, &f, sizeof(v));
      }
      std::copy_n(reinterpret_cast<const uint8_t*>(&v), std::min<int64_t>(4, data_bytes - b),
                  p + b);
    }
    MatmulWeights view{c.format, c.n, c.k, d.data(), nullptr};
    if (c.format == WeightFormat::kMxfp4) {
      AlignedBuffer s(static_cast<size_t>(c.n * c.k / 32));
      for (int64_t b = 0; b < c.n * c.k / 32; ++b) s.as<uint8_t>()[b] = 120 + next() % 8;
      view.scales = s.as<uint8_t>();
      w.scales.push_back(std::move(s));
    }
    if (c.format == WeightFormat::kInt8) {  // bf16 scales ~2⁻¹¹: |w| ≤ ~0.1 like the others
      AlignedBuffer s(static_cast<size_t>(c.n * c.k / 32) * 2);
      for (int64_t b = 0; b < c.n * c.k / 32; ++b) {
        s.as<uint16_t>()[b] = static_cast<uint16_t>(116 << 7 | next() % 128);
      }
      view.scales = s.as<uint8_t>();
      w.scales.push_back(std::move(s));
    }
    w.data.push_back(std::move(d));
    w.views.push_back(view);
  }
  return w;
}

void RunCase(benchmark::State& state, Case c) {
  SetIsaOverride(c.isa_cap);
  if (!MatmulAlgoSupported(c.algo, c.format) || ActiveIsa() != c.isa_cap) {
    ClearIsaOverride();
    state.SkipWithError("not supported on this CPU");
    for (auto _ : state) {
    }
    return;
  }
  const WeightCopies w = MakeCopies(c);
  // Ceilings again right before this case (the load on a shared machine drifts by the minute).
  const Ceilings local = MeasureCeilings(size_t{512} << 20, 5'000'000);
  std::vector<float> x(static_cast<size_t>(c.m * c.k)), y(static_cast<size_t>(c.m * c.n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
  MatmulWithAlgo(c.algo, w.views[0], x.data(), c.m, y.data());  // warm-up (oneDNN primitives)
  size_t copy = 0;
  double seconds = 0, best = 1e30;
  const double cpu0 = ProcessCpuSeconds();
  for (auto _ : state) {
    const auto t0 = Clock::now();
    MatmulWithAlgo(c.algo, w.views[copy], x.data(), c.m, y.data());
    const double call = Seconds(t0);
    seconds += call;
    best = std::min(best, call);
    copy = (copy + 1) % w.views.size();
    benchmark::DoNotOptimize(y.data());
  }
  const double iterations = static_cast<double>(state.iterations());
  const double cpu_per_call = (ProcessCpuSeconds() - cpu0) / iterations;
  ClearIsaOverride();
  const double per_call = seconds / iterations;
  const double bytes = static_cast<double>(WeightBytes(c.format, c.n, c.k) + 4 * c.m * (c.k + c.n));
  const double flops = 2.0 * c.m * c.n * c.k;
  const bool amx = c.algo == MatmulAlgo::kAmxBf16 ||
                   (c.algo == MatmulAlgo::kOneDnnBf16 && GetCpuFeatures().amx_bf16);
  const Rate& peak = amx                               ? local.amx
                     : c.algo == MatmulAlgo::kInt8Vnni ? local.vnni
                     : c.algo == MatmulAlgo::kBf16DotLossy || c.algo == MatmulAlgo::kOneDnnBf16
                         ? local.bf16
                         : local.fma;
  const double floor_s = std::max(bytes / local.read.wall, flops / peak.wall);
  const double floor_cpu_s = std::max(bytes / local.read.cpu, flops / peak.cpu);
  state.counters["ms"] = per_call * 1e3;
  state.counters["GBps"] = bytes / per_call / 1e9;
  state.counters["GFLOPs"] = flops / per_call / 1e9;
  state.counters["ceil_GBps"] = local.read.wall / 1e9;
  state.counters["ceil_GFLOPs"] = peak.wall / 1e9;
  state.counters["bound_by_bw"] = bytes / local.read.wall >= flops / peak.wall;
  state.counters["pct_ceiling"] = 100.0 * floor_s / per_call;
  // The ceilings are best-of-N; on a shared machine the fastest call is the comparable figure.
  state.counters["ms_best"] = best * 1e3;
  state.counters["pct_best"] = 100.0 * floor_s / best;
  // Per CPU-second on both sides: robust to time slicing by other processes.
  state.counters["pct_cpu"] = 100.0 * floor_cpu_s / cpu_per_call;
}

void RegisterCases() {
  const int64_t decode_shapes[][2] = {
      {2304, 2304}, {4096, 1024}, {1024, 4096}, {32000, 1024}, {12288, 7168}};
  const int64_t prefill_shapes[][2] = {{2304, 2304}, {4096, 1024}, {1024, 4096}, {32000, 1024}};
  const int64_t expert_shapes[][2] = {{3072, 3584}, {3584, 3072}};  // K3 routed experts
  std::vector<Case> cases;
  const Isa best = ActiveIsa();
  for (auto [n, k] : decode_shapes) {
    for (int64_t m : {1, 4, 16}) {
      for (MatmulAlgo a : {MatmulAlgo::kStreaming, MatmulAlgo::kBf16DotLossy}) {
        cases.push_back({"decode", WeightFormat::kBf16, m, n, k, a, best});
      }
      cases.push_back({"decode", WeightFormat::kBf16, m, n, k, MatmulAlgo::kStreaming, Isa::kAvx2});
    }
    cases.push_back({"decode", WeightFormat::kBf16, 16, n, k, MatmulAlgo::kOneDnn, best});
  }
  // Decode batches and short prefill chunks: the exact tiles against bf16 products on AMX
  // (--cpu-matmul-precision bf16 on AMX CPUs from kBf16MinRows rows).
  for (auto [n, k] : prefill_shapes) {
    for (int64_t m : {16, 32, 64, 128}) {
      for (MatmulAlgo a : {MatmulAlgo::kStreaming, MatmulAlgo::kAmxBf16}) {
        cases.push_back({"batch", WeightFormat::kBf16, m, n, k, a, best});
      }
    }
  }
  for (auto [n, k] : expert_shapes) {
    for (int64_t m : {1, 4, 16}) {
      cases.push_back({"decode", WeightFormat::kMxfp4, m, n, k, MatmulAlgo::kStreaming, best});
      cases.push_back({"decode", WeightFormat::kMxfp4, m, n, k, MatmulAlgo::kInt8Vnni, best});
      cases.push_back(
          {"decode", WeightFormat::kMxfp4, m, n, k, MatmulAlgo::kStreaming, Isa::kAvx2});
    }
    cases.push_back({"prefill", WeightFormat::kMxfp4, 512, n, k, MatmulAlgo::kStreaming, best});
    cases.push_back({"prefill", WeightFormat::kMxfp4, 512, n, k, MatmulAlgo::kOneDnn, best});
  }
  // Int8 (--quantization int8) at the dense shapes: decode in registers, prefill exact (scratch
  // tiles) against the bf16 products on AMX.
  for (auto [n, k] : decode_shapes) {
    for (int64_t m : {1, 4, 16}) {
      cases.push_back({"decode", WeightFormat::kInt8, m, n, k, MatmulAlgo::kStreaming, best});
      cases.push_back({"decode", WeightFormat::kInt8, m, n, k, MatmulAlgo::kInt8Vnni, best});
    }
    cases.push_back({"decode", WeightFormat::kInt8, 1, n, k, MatmulAlgo::kStreaming, Isa::kAvx2});
  }
  for (MatmulAlgo a : {MatmulAlgo::kStreaming, MatmulAlgo::kAmxBf16}) {
    cases.push_back({"prefill", WeightFormat::kInt8, 512, 4096, 1024, a, best});
  }
  for (int64_t m : {1, 16}) {
    cases.push_back({"decode", WeightFormat::kF32, m, 4096, 1024, MatmulAlgo::kStreaming, best});
  }
  // Small matrices (the bench preset's routed experts): fork/join overhead shows here.
  for (auto [n, k] : {std::pair<int64_t, int64_t>{256, 1024}, {1024, 256}}) {
    cases.push_back({"decode", WeightFormat::kBf16, 1, n, k, MatmulAlgo::kStreaming, best});
    for (MatmulAlgo a : {MatmulAlgo::kStreaming, MatmulAlgo::kInt8Vnni}) {
      cases.push_back({"decode", WeightFormat::kMxfp4, 1, n, k, a, best});
    }
  }
  cases.push_back({"prefill", WeightFormat::kF32, 512, 4096, 1024, MatmulAlgo::kStreaming, best});
  cases.push_back({"prefill", WeightFormat::kF32, 512, 4096, 1024, MatmulAlgo::kOneDnn, best});
  for (auto [n, k] : prefill_shapes) {
    for (MatmulAlgo a : {MatmulAlgo::kStreaming, MatmulAlgo::kOneDnn, MatmulAlgo::kBf16DotLossy,
                         MatmulAlgo::kOneDnnBf16, MatmulAlgo::kAmxBf16}) {
      cases.push_back({"prefill", WeightFormat::kBf16, 512, n, k, a, best});
    }
    cases.push_back(
        {"prefill", WeightFormat::kBf16, 512, n, k, MatmulAlgo::kStreaming, Isa::kAvx2});
  }
  for (const Case& c : cases) {
    const std::string name = std::string(c.phase) + "/" + WeightFormatName(c.format) + "/m" +
                             std::to_string(c.m) + "/n" + std::to_string(c.n) + "/k" +
                             std::to_string(c.k) + "/" + AlgoName(c.algo) + "/" +
                             IsaName(c.isa_cap);
    benchmark::RegisterBenchmark(name.c_str(), RunCase, c)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

// ---- threading backends, interleaved -------------------------------------------------------
// `--threading`: decode-sized products (m = 1, 8) under the three ways of running them — the
// pool, OpenMP (one parallel region per call; set OMP_WAIT_POLICY as the deployment does) and one
// thread — alternating in blocks of 8 calls, so all three see the same load on a shared machine.
// pct = floor / mean time against the read ceiling measured right before (all threads); pct_cpu
// = the same per CPU-second on both sides.

struct Variant {
  const char* name;
  ThreadingBackend backend;
  int threads;
  double wall = 0, best = 1e30, cpu = 0;
  int64_t calls = 0;
};

void CompareThreading() {
  const int threads = omp_get_max_threads();
  const int64_t shapes[][3] = {{1, 2304, 2304},  {1, 4096, 1024},  {1, 1024, 4096},
                               {1, 32000, 1024}, {1, 12288, 7168}, {1, 256, 1024},
                               {1, 1024, 256},   {8, 4096, 1024},  {8, 1024, 256}};
  for (auto [m, n, k] : shapes) {
    const Case c{"decode", WeightFormat::kBf16, m, n, k, MatmulAlgo::kStreaming, ActiveIsa()};
    const WeightCopies w = MakeCopies(c);
    const Ceilings local = MeasureCeilings(size_t{512} << 20, 5'000'000);
    std::vector<float> x(static_cast<size_t>(m * k), 0.25f), y(static_cast<size_t>(m * n));
    Variant variants[] = {{"pool", ThreadingBackend::kPool, threads},
                          {"omp", ThreadingBackend::kOpenMp, threads},
                          {"1 thread", ThreadingBackend::kPool, 1}};
    size_t copy = 0;
    const auto start = Clock::now();
    while (Seconds(start) < 3.0) {
      for (Variant& v : variants) {
        SetThreadingBackend(v.backend);
        omp_set_num_threads(v.threads);
        for (int rep = 0; rep < 8; ++rep) {
          const auto t0 = Clock::now();
          const double c0 = ProcessCpuSeconds();
          Matmul(w.views[copy], x.data(), m, y.data());
          const double call = Seconds(t0);
          v.cpu += ProcessCpuSeconds() - c0;
          v.wall += call;
          v.best = std::min(v.best, call);
          ++v.calls;
          copy = (copy + 1) % w.views.size();
        }
      }
    }
    omp_set_num_threads(threads);
    SetThreadingBackend(ThreadingBackend::kPool);
    const double bytes = static_cast<double>(WeightBytes(c.format, n, k) + 4 * m * (k + n));
    std::printf(
        "threading m=%lld n=%lld k=%lld (%.1f MB; read %.1f GB/s, %.1f GB per CPU-s; "
        "loadavg %s)\n",
        static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
        bytes / 1e6, local.read.wall / 1e9, local.read.cpu / 1e9, LoadAverage().c_str());
    for (const Variant& v : variants) {
      const double mean = v.wall / static_cast<double>(v.calls);
      const double cpu = v.cpu / static_cast<double>(v.calls);
      std::printf("  %-8s %8.1f us mean %8.1f us best  pct %5.1f  pct_best %5.1f  pct_cpu %5.1f\n",
                  v.name, mean * 1e6, v.best * 1e6, 100.0 * bytes / local.read.wall / mean,
                  100.0 * bytes / local.read.wall / v.best, 100.0 * bytes / local.read.cpu / cpu);
    }
    std::fflush(stdout);
  }
}

// ---- a layer's projections of one input: one call per product vs MatmulProducts ----------
// `--projections`: the six projections of a KDA layer's input (q, k, v: P × d; f_a, g_a:
// 128 × d; β: H × d; bf16) at the bench checkpoint's shape (d 1024, 16 heads, P 2048) and
// Kimi-Linear's (d 2304, 32 heads, P 4096), m = 1 and 16, run as six Matmul calls and as one
// MatmulProducts call, alternating in blocks of 8, over enough layers' copies to miss the L3.
// pct = floor / mean time, floor = max(weight bytes / read ceiling, FLOPs / f32 FMA peak).

void CompareProjections() {
  struct Shape {
    const char* name;
    int64_t d, heads;
  };
  for (const Shape& shape : {Shape{"bench", 1024, 16}, Shape{"kimi-linear", 2304, 32}}) {
    const int64_t d = shape.d, p = shape.heads * 128;
    const int64_t rows[] = {p, p, p, 128, shape.heads, 128};
    int64_t layer_bytes = 0;
    for (int64_t n : rows) layer_bytes += WeightBytes(WeightFormat::kBf16, n, d);
    const int64_t layers =
        std::max<int64_t>(2, ((int64_t{256} << 20) + layer_bytes - 1) / layer_bytes);
    std::vector<WeightCopies> weights;
    for (int64_t n : rows) {
      const Case c{"decode", WeightFormat::kBf16, 1, n, d, MatmulAlgo::kStreaming, ActiveIsa()};
      weights.push_back(MakeCopies(c, layers));
    }
    for (int64_t m : {1, 16}) {
      const Ceilings local = MeasureCeilings(size_t{512} << 20, 5'000'000);
      std::vector<float> x(static_cast<size_t>(m * d), 0.25f);
      std::vector<std::vector<float>> y;
      for (int64_t n : rows) y.emplace_back(static_cast<size_t>(m * n));
      double wall[2] = {0, 0}, best[2] = {1e30, 1e30};
      int64_t calls[2] = {0, 0};
      int64_t layer = 0;
      const auto start = Clock::now();
      while (Seconds(start) < 3.0) {
        for (int variant = 0; variant < 2; ++variant) {
          for (int rep = 0; rep < 8; ++rep) {
            MatmulProduct products[6];
            for (size_t j = 0; j < 6; ++j) {
              products[j] = {weights[j].views[static_cast<size_t>(layer)], x.data(), y[j].data()};
            }
            const auto t0 = Clock::now();
            if (variant == 0) {
              for (const MatmulProduct& q : products) Matmul(q.w, q.x, m, q.y);
            } else {
              MatmulProducts(products, 6, m);
            }
            const double call = Seconds(t0);
            wall[variant] += call;
            best[variant] = std::min(best[variant], call);
            ++calls[variant];
            layer = (layer + 1) % layers;
          }
        }
      }
      const double bytes = static_cast<double>(layer_bytes);
      const double floor_s = std::max(
          bytes / local.read.wall, 2.0 * m * static_cast<double>(layer_bytes / 2) / local.fma.wall);
      std::printf(
          "projections %s m=%lld (%.1f MB per layer; read %.1f GB/s, f32 %.0f GFLOP/s; loadavg "
          "%s)\n",
          shape.name, static_cast<long long>(m), bytes / 1e6, local.read.wall / 1e9,
          local.fma.wall / 1e9, LoadAverage().c_str());
      const char* names[2] = {"6 calls", "1 call"};
      for (int v = 0; v < 2; ++v) {
        const double mean = wall[v] / static_cast<double>(calls[v]);
        std::printf("  %-8s %8.1f us mean %8.1f us best  pct %5.1f  pct_best %5.1f\n", names[v],
                    mean * 1e6, best[v] * 1e6, 100.0 * floor_s / mean, 100.0 * floor_s / best[v]);
      }
      std::printf(
          "  one call over six: %.2fx (mean), %.2fx (best)\n",
          (wall[0] / static_cast<double>(calls[0])) / (wall[1] / static_cast<double>(calls[1])),
          best[0] / best[1]);
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cpu

int main(int argc, char** argv) {
  using namespace strata::kernels::cpu;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--threading") {
      CompareThreading();
      return 0;
    }
    if (std::string(argv[i]) == "--projections") {
      CompareProjections();
      return 0;
    }
  }
  benchmark::Initialize(&argc, argv);
  PrintCeilings("start", MeasureCeilings(size_t{1} << 30, 20'000'000));
  RegisterCases();
  benchmark::RunSpecifiedBenchmarks();
  PrintCeilings("end", MeasureCeilings(size_t{1} << 30, 20'000'000));
  benchmark::Shutdown();
  return 0;
}
