// MoE layer benchmark against ceilings measured in the same run (docs/performance.md).
//
// Shape: the `bench` checkpoint preset (tools/model_dims.cc BenchDims: Kimi-Linear family,
// hidden 1024, 64 routed experts top-8 of width 256, one shared expert, SwiGLU, bf16), or with
// --mxfp4 the same experts in MXFP4. Enough layers' weights (distinct copies, default 4: ≥ 3× the
// L3) are cycled that every call reads its experts from DRAM, as a real decode step does.
//
// Cases: decode batches of 1, 8 and 32 rows (routing from a random router: each row picks its
// own 8 experts) and a 512-row prefill. Each case runs three variants interleaved call by call
// (the same load on a shared machine):
//   new       engine::MoeForward (fused GLU over every expert in one parallel region, down
//             products added in place, shared expert riding along), thread pool
//   old/omp   the previous scheme: per expert, gather its rows, gate / up / down Matmul calls
//             (one fork/join each), the reference GLU, then a weighted combine; OpenMP
//   old/pool  the same on the thread pool
// Printed per case: ms per call (mean and best), weight bytes actually read per call (distinct
// experts + shared + router), GB/s and % of the read ceiling (decode), GFLOP/s and % of the f32
// FMA ceiling (prefill), and the speed-up of new over old/omp.
//
// Run: engine_moe_bench [--layers N] [--seconds S] [--mxfp4] [--bf16] [--rows N]...
//      [--new-only]   (not run by ctest; --rows picks cases, --new-only times only "new")
// --bf16: MatmulPrecision::kBf16 (--cpu-matmul-precision bf16); the prefill's ceiling is then the
// bf16 products' (AMX tiles, else vdpbf16ps).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/roofline.h"
#include "core/tensor.h"
#include "engine/glu_ffn.h"
#include "engine/linear.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/moe.h"
#include "engine/workspace.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/reference/glu.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using engine::Linear;
using engine::MoeWeights;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Options {
  int layers = 4;
  double seconds = 1.5;  // per case and implementation
  bool mxfp4 = false;
  bool bf16 = false;          // --cpu-matmul-precision bf16
  std::vector<int64_t> rows;  // the cases (--rows, repeatable); default 1, 8, 32, 512
  bool new_only = false;      // --new-only: time only the new variant (for profiling)
};

engine::ModelConfig BenchConfig(bool mxfp4) {
  engine::ModelConfig cfg;
  cfg.hidden_size = 1024;
  cfg.activation = engine::FfnActivation::kSwiGlu;
  engine::MoeConfig& m = cfg.moe;
  m.num_experts = 64;
  m.num_experts_per_token = 8;
  m.num_shared_experts = 1;
  m.moe_intermediate_size = 256;
  m.routed_scaling_factor = 2.446f;
  m.mxfp4_experts = mxfp4;
  return cfg;
}

uint32_t NextRandom(uint32_t& state) {
  state ^= state << 13;
  state ^= state >> 17;
  state ^= state << 5;
  return state;
}

// Random weights scaled like a trained layer (|w| ~ 1/√in), owned by the Linear.
Linear RandomLinear(int64_t out, int64_t in, bool mxfp4, uint32_t& state) {
  Linear w;
  w.out_features = out;
  w.in_features = in;
  if (mxfp4) {
    w.format = engine::WeightFormat::kMxfp4;
    w.owned = AlignedBuffer(static_cast<size_t>(out * (in / 2 + in / 32)));
    uint8_t* p = w.owned.as<uint8_t>();
    for (int64_t b = 0; b < out * in / 2; ++b) p[b] = static_cast<uint8_t>(NextRandom(state));
    for (int64_t b = 0; b < out * in / 32; ++b) p[out * in / 2 + b] = 120;  // 2^-7
    w.data = p;
    w.scales = p + out * in / 2;
    return w;
  }
  w.format = engine::WeightFormat::kBf16;
  w.owned = AlignedBuffer(static_cast<size_t>(out * in) * 2);
  uint16_t* p = w.owned.as<uint16_t>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(in));
  for (int64_t i = 0; i < out * in; ++i) {
    const float u = static_cast<float>(NextRandom(state) % 2001) / 1000.0f - 1.0f;
    p[i] = F32ToBf16(u * scale);
  }
  w.data = p;
  return w;
}

std::unique_ptr<MoeWeights> RandomLayer(const engine::ModelConfig& cfg, uint32_t seed) {
  const engine::MoeConfig& m = cfg.moe;
  const int64_t d = cfg.hidden_size, inter = m.moe_intermediate_size;
  uint32_t state = seed * 2654435761u + 1;
  auto w = std::make_unique<MoeWeights>();
  w->router = RandomLinear(m.num_experts, d, false, state);
  w->score_bias.assign(static_cast<size_t>(m.num_experts), 0.0f);
  w->experts.resize(static_cast<size_t>(m.num_experts));
  for (engine::ExpertWeights& e : w->experts) {
    e.w1 = RandomLinear(inter, d, m.mxfp4_experts, state);
    e.w3 = RandomLinear(inter, d, m.mxfp4_experts, state);
    e.w2 = RandomLinear(d, inter, m.mxfp4_experts, state);
  }
  const int64_t shared = inter * m.num_shared_experts;
  w->shared.gate_proj = RandomLinear(shared, d, false, state);
  w->shared.up_proj = RandomLinear(shared, d, false, state);
  w->shared.down_proj = RandomLinear(d, shared, false, state);
  return w;
}

// The previous MoeForward (one Matmul call per projection per expert, reference GLU), kept
// here as the baseline the new one is measured against.
void PerExpertMoe(const engine::ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t rows,
                  float* out, engine::Workspace& ws) {
  const engine::MoeConfig& m = cfg.moe;
  const int64_t d = cfg.hidden_size, top_k = m.num_experts_per_token;
  const int64_t inter = m.moe_intermediate_size;
  engine::WorkspaceScope scope(ws);
  int32_t* ids = ws.Array<int32_t>(rows * top_k);
  float* weights = ws.Floats(rows * top_k);
  engine::MoeRoute(cfg, w, x, rows, ids, weights, ws);
  std::fill_n(out, rows * d, 0.0f);
  float* xe = ws.Floats(rows * d);
  float* g = ws.Floats(rows * inter);
  float* u = ws.Floats(rows * inter);
  float* ye = ws.Floats(rows * d);
  int64_t* which = ws.Array<int64_t>(rows);
  float* wgt = ws.Floats(rows);
  const kernels::GluParams act = engine::GluFromConfig(cfg);
  for (int64_t e = 0; e < m.num_experts; ++e) {
    int64_t count = 0;
    for (int64_t i = 0; i < rows * top_k; ++i) {
      if (ids[i] != e) continue;
      which[count] = i / top_k;
      wgt[count] = weights[i];
      std::memcpy(xe + count * d, x + (i / top_k) * d, static_cast<size_t>(d) * sizeof(float));
      ++count;
    }
    if (count == 0) continue;
    const engine::ExpertWeights& ew = w.experts[static_cast<size_t>(e)];
    engine::LinearForward(ew.w1, xe, count, g);
    engine::LinearForward(ew.w3, xe, count, u);
    kernels::GluReference(g, u, count * inter, act, g);
    engine::LinearForward(ew.w2, g, count, ye);
    for (int64_t r = 0; r < count; ++r) {
      for (int64_t c = 0; c < d; ++c) out[which[r] * d + c] += wgt[r] * ye[r * d + c];
    }
  }
  float* shared = ws.Floats(rows * d);
  engine::GluFfn(act, w.shared.gate_proj, w.shared.up_proj, w.shared.down_proj, x, rows, shared,
                 ws);
  for (int64_t i = 0; i < rows * d; ++i) out[i] += shared[i];
}

// CPU seconds of all threads of the process (robust to time slicing by other processes; counts
// threads that spin while waiting).
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double total = 0, best = 1e30, cpu = 0;
  int64_t calls = 0;
  double bytes = 0;  // weight bytes read, summed over calls
  void Add(double s, double cpu_s, double b) {
    cpu += cpu_s;
    total += s;
    best = std::min(best, s);
    bytes += b;
    ++calls;
  }
  double Mean() const { return total / static_cast<double>(std::max<int64_t>(calls, 1)); }
  double CpuMean() const { return cpu / static_cast<double>(std::max<int64_t>(calls, 1)); }
  double BytesPerCall() const { return bytes / static_cast<double>(std::max<int64_t>(calls, 1)); }
};

// Bytes one MoeForward call reads: router, every expert with ≥ 1 row, the shared expert.
double BytesRead(const MoeWeights& w, const int64_t* expert_tokens) {
  double bytes = static_cast<double>(w.router.num_bytes() + w.shared.gate_proj.num_bytes() +
                                     w.shared.up_proj.num_bytes() + w.shared.down_proj.num_bytes());
  for (size_t e = 0; e < w.experts.size(); ++e) {
    if (expert_tokens[e] == 0) continue;
    bytes += static_cast<double>(w.experts[e].w1.num_bytes() + w.experts[e].w2.num_bytes() +
                                 w.experts[e].w3.num_bytes());
  }
  return bytes;
}

double Flops(const engine::ModelConfig& cfg, int64_t rows) {
  const engine::MoeConfig& m = cfg.moe;
  const double d = cfg.hidden_size, inter = m.moe_intermediate_size;
  const double per_row = m.num_experts_per_token * 3 * d * inter +
                         3 * d * inter * m.num_shared_experts + d * m.num_experts;
  return 2.0 * per_row * static_cast<double>(rows);
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string line;
  std::getline(in, line);
  return line;
}

// One variant of a case run for a while: its name, how it runs, its timings.
struct Variant {
  const char* name;
  bool grouped;
  kernels::cpu::ThreadingBackend backend;
  Timing t;
};

// Per variant: decode against the read ceiling; prefill against the AMX / bf16 / f32 product
// ceiling and against the roofline floor max(weight bytes / read ceiling, FLOPs / peak) — an
// expert of a 512-row prefill sees ~64 rows, so its weights' read still bounds it.
void PrintTimings(const Variant* variants, int count, const engine::ModelConfig& cfg, int64_t rows,
                  bool prefill, double peak, const char* peak_name, double read_bw) {
  const double bytes = variants[0].t.BytesPerCall();  // the same routing statistics for all
  for (int i = 0; i < count; ++i) {
    const Variant& v = variants[i];
    const Timing& t = v.t;
    if (prefill) {
      const double flops = Flops(cfg, rows);
      const double floor_s = std::max(bytes / read_bw, flops / peak);
      std::printf(
          "prefill rows=%-4lld %-9s %8.3f ms (best %8.3f, cpu %8.3f)  %6.1f GFLOP/s  %5.1f%% of "
          "%s peak %.1f GFLOP/s (best call %5.1f%%); floor %.3f ms (%s): %5.1f%%\n",
          static_cast<long long>(rows), v.name, t.Mean() * 1e3, t.best * 1e3, t.CpuMean() * 1e3,
          flops / t.Mean() / 1e9, 100.0 * flops / t.Mean() / peak, peak_name, peak / 1e9,
          100.0 * flops / t.best / peak, floor_s * 1e3,
          bytes / read_bw > flops / peak ? "weight read" : "products", 100.0 * floor_s / t.Mean());
    } else {
      std::printf(
          "decode  rows=%-4lld %-9s %8.3f ms (best %8.3f, cpu %8.3f)  %6.1f MB read  %6.2f GB/s  "
          "%5.1f%% of read %.2f GB/s (best call %5.1f%%)\n",
          static_cast<long long>(rows), v.name, t.Mean() * 1e3, t.best * 1e3, t.CpuMean() * 1e3,
          bytes / 1e6, bytes / t.Mean() / 1e9, 100.0 * bytes / t.Mean() / read_bw, read_bw / 1e9,
          100.0 * bytes / t.best / read_bw);
    }
  }
  std::fflush(stdout);
}

void RunCase(const engine::ModelConfig& cfg, const std::vector<std::unique_ptr<MoeWeights>>& layers,
             int64_t rows, const Options& opt) {
  const bool prefill = rows > 64;
  const double read_bw = bench::MeasureReadBandwidth(int64_t{512} << 20);
  // Under bf16 products the prefill's ceiling is theirs (AMX tiles, else vdpbf16ps).
  const bool bf16 = kernels::cpu::GetMatmulPrecision() == kernels::cpu::MatmulPrecision::kBf16 &&
                    kernels::cpu::Bf16MatmulSupported();
  const bool amx = bf16 && kernels::cpu::Bf16MatmulUsesAmx();
  const char* peak_name = amx ? "amx_bf16" : bf16 ? "bf16 dot" : "f32";
  const double peak = !prefill ? 0.0
                      : amx    ? bench::MeasurePeakAmxBf16Flops()
                      : bf16   ? bench::MeasurePeakBf16DotFlops()
                               : bench::MeasurePeakF32Flops();
  const int64_t d = cfg.hidden_size;
  std::vector<float> x(static_cast<size_t>(rows * d)), out(x.size()), ref(x.size());
  uint32_t state = 777 + static_cast<uint32_t>(rows);
  for (float& v : x) v = static_cast<float>(NextRandom(state) % 2001) / 1000.0f - 1.0f;
  engine::Workspace ws;
  std::vector<int64_t> tokens(static_cast<size_t>(cfg.moe.num_experts));
  // The variants, alternating call by call: [0] new (grouped, pool), [1] per-expert on OpenMP
  // (the code before this change), [2] per-expert on the pool.
  Variant variants[] = {{"new", true, kernels::cpu::ThreadingBackend::kPool, {}},
                        {"old/omp", false, kernels::cpu::ThreadingBackend::kOpenMp, {}},
                        {"old/pool", false, kernels::cpu::ThreadingBackend::kPool, {}}};
  size_t layer = 0;
  auto run = [&](const Variant& v, const MoeWeights& w, float* y, int64_t* counts) {
    kernels::cpu::SetThreadingBackend(v.backend);
    if (v.grouped) {
      engine::MoeForward(cfg, w, 0, x.data(), rows, y, counts, nullptr, ws);
    } else {
      PerExpertMoe(cfg, w, x.data(), rows, y, ws);
    }
  };
  const int num_variants = opt.new_only ? 1 : 3;
  for (int i = 0; i < num_variants; ++i) run(variants[i], *layers[0], out.data(), nullptr);
  for (bool done = false; !done;) {
    done = true;
    for (int i = 0; i < num_variants; ++i) {
      Variant& v = variants[i];
      const MoeWeights& w = *layers[layer];
      std::fill(tokens.begin(), tokens.end(), 0);
      const auto t0 = Clock::now();
      const double c0 = ProcessCpuSeconds();
      run(v, w, out.data(), tokens.data());
      v.t.Add(Seconds(t0), ProcessCpuSeconds() - c0, v.grouped ? BytesRead(w, tokens.data()) : 0);
      layer = (layer + 1) % layers.size();
      done = done && v.t.total >= opt.seconds;
    }
  }
  // Agreement of new and old on one layer (a sanity check; the tests check correctness).
  if (opt.new_only) {
    PrintTimings(variants, 1, cfg, rows, prefill, peak, peak_name, read_bw);
    return;
  }
  run(variants[0], *layers[0], out.data(), nullptr);
  run(variants[1], *layers[0], ref.data(), nullptr);
  kernels::cpu::SetThreadingBackend(kernels::cpu::ThreadingBackend::kPool);
  double max_diff = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(out[i] - ref[i])));
  }
  PrintTimings(variants, 3, cfg, rows, prefill, peak, peak_name, read_bw);
  std::printf(
      "        rows=%-4lld new vs old/omp: %.2fx (mean), %.2fx (best), %.2fx (cpu); max |diff| "
      "%.2e; loadavg %s\n",
      static_cast<long long>(rows), variants[1].t.Mean() / variants[0].t.Mean(),
      variants[1].t.best / variants[0].t.best, variants[1].t.CpuMean() / variants[0].t.CpuMean(),
      max_diff, LoadAverage().c_str());
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--layers" && i + 1 < argc) {
      opt.layers = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--seconds" && i + 1 < argc) {
      opt.seconds = std::atof(argv[++i]);
    } else if (arg == "--rows" && i + 1 < argc) {
      opt.rows.push_back(std::max<int64_t>(1, std::atoll(argv[++i])));
    } else if (arg == "--new-only") {
      opt.new_only = true;
    } else if (arg == "--mxfp4") {
      opt.mxfp4 = true;
    } else if (arg == "--bf16") {
      opt.bf16 = true;
      kernels::cpu::SetMatmulPrecision(kernels::cpu::MatmulPrecision::kBf16);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--layers N] [--seconds S] [--mxfp4] [--bf16] [--rows N]... "
                   "[--new-only]\n",
                   argv[0]);
      return 2;
    }
  }
  const engine::ModelConfig cfg = BenchConfig(opt.mxfp4);
  std::vector<std::unique_ptr<MoeWeights>> layers;
  double total = 0;
  for (int l = 0; l < opt.layers; ++l) {
    layers.push_back(RandomLayer(cfg, static_cast<uint32_t>(l)));
    for (const auto& e : layers.back()->experts) {
      total += static_cast<double>(e.w1.num_bytes() + e.w2.num_bytes() + e.w3.num_bytes());
    }
  }
  std::printf(
      "MoE bench shape: hidden %d, %d experts top-%d × %d (%s), 1 shared; %d layers, "
      "%.0f MB of experts; %d threads; products %s; loadavg %s\n",
      cfg.hidden_size, cfg.moe.num_experts, cfg.moe.num_experts_per_token,
      cfg.moe.moe_intermediate_size, opt.mxfp4 ? "mxfp4" : "bf16", opt.layers, total / 1e6,
      omp_get_max_threads(), kernels::cpu::MatmulPrecisionInEffect(), LoadAverage().c_str());
  if (opt.rows.empty()) opt.rows = {1, 8, 32, 512};
  for (int64_t rows : opt.rows) RunCase(cfg, layers, rows, opt);
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
