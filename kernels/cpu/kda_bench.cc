// KDA kernel benchmark against ceilings measured in the same run (docs/performance.md):
//   read_GBps   streaming read of 1 GiB over all threads (core/roofline.h)
//   f32_GFLOPs  register-resident FMA chains over all threads (AVX-512 where present)
// Cases (D = 128; K3: 96 heads, Kimi-Linear: 32 heads; docs/model.md §2.1):
//   decode   KdaDecode over batches of 1, 8, 32 sequences, each with its own state, rotating over
//            enough state copies (layers) to miss the LLC as a real step does. Traffic counted:
//            the state read and written once, 2·H·D·D·4 bytes per sequence. Prints GB/s of that
//            traffic and % of read_GBps (target ≥ 70 %: the floor is read + write).
//   prefill  KdaPrefill of one prompt with chunk 16, 32, 64: tokens/s, GFLOP/s and % of
//            f32_GFLOPs. FLOPs counted per token and head: the three state products 6·D² plus
//            the intra-chunk L, A (4·C·D), A·U and the solve (3·C·D), for a full chunk C.
// Each case prints the best and the mean of its repetitions and `cpu`: the best rate per
// CPU-second of the process (÷ threads) over the ceiling per CPU-second (robust to a shared
// machine's time slicing, which makes the wall-clock ratios of one case noisy).
//
// Run: kernels_cpu_kda_bench [--quick | --prefill-chunk C] (not run by ctest). --quick: fewer
// repetitions, 256-token prompt (else 1024). --prefill-chunk C: only the prefill cases at chunk
// C, 20 repetitions each (to profile one shape).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/roofline.h"
#include "core/tensor.h"
#include "kernels/cpu/kda_chunk.h"
#include "kernels/cpu/kda_decode.h"

namespace strata::kernels::cpu {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kDim = 128;
constexpr int kConv = 4;
constexpr double kLlcMissBytes = 512.0 * (1 << 20);  // state copies rotate over ≥ this much

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Wall-clock ceilings (core/roofline.h) and the same per CPU-second of the process: each wall
// rate scaled by the share of the threads' time the measurement actually ran (a shared machine
// time-slices us; the per-CPU rates compare like with like, `cpu` columns below).
struct Ceilings {
  double read_bps, flops;          // wall clock
  double read_bps_cpu, flops_cpu;  // per CPU-second of all threads
};

template <typename Fn>
std::pair<double, double> WallAndCpuRate(Fn&& measure) {
  const auto t0 = Clock::now();
  const double c0 = CpuSeconds();
  const double rate = measure();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = (CpuSeconds() - c0) / omp_get_max_threads();
  return {rate, rate * wall / std::max(cpu, 1e-9)};
}

Ceilings Measure() {
  const auto [read, read_cpu] = WallAndCpuRate([] { return bench::MeasureReadBandwidth(); });
  const auto [flops, flops_cpu] = WallAndCpuRate([] { return bench::MeasurePeakF32Flops(); });
  return {read, flops, read_cpu, flops_cpu};
}

void PrintCeilings(const char* when, const Ceilings& c) {
  std::printf(
      "ceilings (%s): read_GBps %.1f (cpu %.1f)  f32_GFLOPs %.1f (cpu %.1f)  threads %d  isa %s\n",
      when, c.read_bps * 1e-9, c.read_bps_cpu * 1e-9, c.flops * 1e-9, c.flops_cpu * 1e-9,
      omp_get_max_threads(), IsaName(ActiveIsa()));
}

// Random floats in an AlignedBuffer: 2 MiB or more go on transparent huge pages, as the engine's
// workspace rows do (on 4 KiB pages the per-head gathers of a prefill, one row per page at K3's
// 48 KiB row stride, would measure TLB misses the engine does not have).
AlignedBuffer Random(int64_t n, float mean, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, scale);
  AlignedBuffer v(static_cast<size_t>(n) * sizeof(float), AlignedBuffer::Fill::kUninitialized);
  float* x = v.as<float>();
  for (int64_t i = 0; i < n; ++i) x[i] = dist(rng);
  return v;
}

// One layer's parameters and `rows` projected rows (random; the kernels' speed does not depend
// on the values except through the rare unsafe-channel path, which the bounded gate never takes).
struct Layer {
  int heads;
  bool bounded;
  AlignedBuffer conv, a_log, dt_bias, o_norm, q, k, v, f, b, gate;

  Layer(int h, bool k3, int64_t rows) : heads(h), bounded(k3) {
    const int64_t p = int64_t{h} * kDim;
    conv = Random(p * kConv, 0.0f, 0.5f, 1);
    a_log = Random(h, 0.0f, 0.5f, 2);
    dt_bias = Random(p, -2.0f, 0.5f, 3);
    o_norm = Random(kDim, 1.0f, 0.1f, 4);
    q = Random(rows * p, 0.0f, 1.0f, 5);
    k = Random(rows * p, 0.0f, 1.0f, 6);
    v = Random(rows * p, 0.0f, 1.0f, 7);
    f = Random(rows * p, 0.0f, 1.0f, 8);
    b = Random(rows * h, 0.0f, 1.0f, 9);
    gate = Random(rows * p, 0.0f, 1.0f, 10);
  }
  KdaLayerParams Params() const {
    KdaLayerParams p;
    p.num_heads = heads;
    p.head_dim = kDim;
    p.conv_kernel_size = kConv;
    p.q_conv = p.k_conv = p.v_conv = conv.as<float>();
    p.a_log = a_log.as<float>();
    p.dt_bias = dt_bias.as<float>();
    p.has_gate_lower_bound = bounded;
    p.gate_lower_bound = bounded ? -5.0f : 0.0f;
    p.o_norm = o_norm.as<float>();
    return p;
  }
  KdaRows Rows() const {
    return {q.as<float>(), k.as<float>(), v.as<float>(),
            f.as<float>(), b.as<float>(), gate.as<float>()};
  }
};

// Zeroed f32 memory touched in parallel (first-touch placement, no page faults while timed).
AlignedBuffer Zeros(int64_t floats) {
  AlignedBuffer buf(static_cast<size_t>(floats) * sizeof(float));
  float* p = buf.as<float>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < floats; ++i) p[i] = 0.0f;
  return buf;
}

struct Timing {
  double best_s = 1e30, mean_s = 0, cpu_s = 1e30;
};

// fn(i) for i = 0 .. reps−1 (warm-up call with i = reps first, not timed).
template <typename Fn>
Timing Time(int reps, Fn&& fn) {
  fn(reps);
  Timing t;
  double total = 0;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    const double c0 = CpuSeconds();
    fn(i);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    t.best_s = std::min(t.best_s, s);
    t.cpu_s = std::min(t.cpu_s, (CpuSeconds() - c0) / omp_get_max_threads());
    total += s;
  }
  t.mean_s = total / reps;
  return t;
}

void Decode(const char* name, int heads, int batch, int reps) {
  const Layer layer(heads, std::string(name) == "k3", batch);
  const int64_t state_floats = int64_t{heads} * kDim * kDim;
  const int64_t conv_floats = 3 * (kConv - 1) * int64_t{heads} * kDim;
  const double traffic = 2.0 * 4.0 * static_cast<double>(state_floats) * batch;
  const int copies = std::max(2, static_cast<int>(kLlcMissBytes / (traffic / 2) + 1));
  AlignedBuffer states = Zeros(state_floats * batch * copies);
  AlignedBuffer convs = Zeros(conv_floats * batch * copies);
  std::vector<std::vector<KdaSequence>> seqs(static_cast<size_t>(copies));
  for (int c = 0; c < copies; ++c) {
    for (int s = 0; s < batch; ++s) {
      const int64_t slot = int64_t{c} * batch + s;
      seqs[static_cast<size_t>(c)].push_back(
          {s, 1, states.as<float>() + slot * state_floats, convs.as<float>() + slot * conv_floats});
    }
  }
  std::vector<float> y(static_cast<size_t>(batch) * heads * kDim);
  const KdaLayerParams p = layer.Params();
  const KdaRows rows = layer.Rows();
  const Ceilings c = Measure();
  const Timing t = Time(reps, [&](int i) {
    const auto& s = seqs[static_cast<size_t>(i % copies)];
    KdaDecode(p, s.data(), batch, rows, y.data());
  });
  std::printf(
      "decode  %-11s heads %2d batch %2d: %8.3f ms (mean %8.3f)  state %6.1f GB/s = %5.1f%% of "
      "read (mean %5.1f%%, cpu %5.1f%%)\n",
      name, heads, batch, t.best_s * 1e3, t.mean_s * 1e3, traffic / t.best_s * 1e-9,
      100.0 * traffic / t.best_s / c.read_bps, 100.0 * traffic / t.mean_s / c.read_bps,
      100.0 * traffic / t.cpu_s / c.read_bps_cpu);
}

void Prefill(const char* name, int heads, int64_t tokens, int chunk, int reps) {
  const Layer layer(heads, std::string(name) == "k3", tokens);
  const int64_t state_floats = int64_t{heads} * kDim * kDim;
  AlignedBuffer state = Zeros(state_floats);
  AlignedBuffer conv = Zeros(3 * (kConv - 1) * int64_t{heads} * kDim);
  AlignedBuffer y = Zeros(tokens * heads * kDim);
  const KdaSequence seq{0, tokens, state.as<float>(), conv.as<float>()};
  const KdaLayerParams p = layer.Params();
  const KdaRows rows = layer.Rows();
  const Ceilings c = Measure();
  const Timing t = Time(reps, [&](int) { KdaPrefill(p, &seq, 1, rows, chunk, y.as<float>()); });
  const double d = kDim;
  const double flops = static_cast<double>(tokens) * heads * (6.0 * d * d + 7.0 * chunk * d);
  std::printf(
      "prefill %-11s heads %2d prompt %5lld chunk %2d: %8.1f ms (mean %8.1f)  %8.0f tokens/s  "
      "%6.1f GFLOP/s = %5.1f%% of f32 (cpu %5.1f%%)\n",
      name, heads, static_cast<long long>(tokens), chunk, t.best_s * 1e3, t.mean_s * 1e3,
      tokens / t.best_s, flops / t.best_s * 1e-9, 100.0 * flops / t.best_s / c.flops,
      100.0 * flops / t.cpu_s / c.flops_cpu);
}

}  // namespace
}  // namespace strata::kernels::cpu

int main(int argc, char** argv) {
  using namespace strata::kernels::cpu;  // NOLINT(build/namespaces)
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool quick = mode == "--quick";
  // --prefill-chunk C: only the prefill cases at chunk C, 20 repetitions (for a profiler).
  const int only_chunk = mode == "--prefill-chunk" && argc > 2 ? std::atoi(argv[2]) : 0;
  const int decode_reps = quick ? 10 : 40, prefill_reps = quick ? 2 : only_chunk > 0 ? 20 : 4;
  const int64_t prompt = quick ? 256 : 1024;
  PrintCeilings("start", Measure());
  for (int batch : {1, 8, 32}) {
    if (only_chunk > 0) break;
    Decode("k3", 96, batch, decode_reps);
    Decode("kimi-linear", 32, batch, decode_reps);
  }
  for (int chunk : {16, 32, 64}) {
    if (only_chunk > 0 && chunk != only_chunk) continue;
    Prefill("k3", 96, prompt, chunk, prefill_reps);
    Prefill("kimi-linear", 32, prompt, chunk, prefill_reps);
  }
  PrintCeilings("end", Measure());
  return 0;
}
