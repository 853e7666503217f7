// MLA attention benchmark against ceilings measured in the same run (docs/performance.md):
//   read_GBps   streaming read of 1 GiB over all threads (core/roofline.h)
//   f32_GFLOPs  register-resident FMA chains over all threads (AVX-512 where present)
// Cases (K3 head shapes: dn 128, dr 64, dv 128, r 512 → 576-wide latent rows; K3 96 heads,
// Kimi-Linear 32):
//   decode   one token per sequence over a 32K-token paged cache (block size 64, shuffled
//            blocks), batch 1 and 8, every sequence its own cache. Prints GB/s of cache bytes
//            read, % of read_GBps, GFLOP/s, % of f32_GFLOPs and pct_roof = floor / time with
//            floor = max(bytes / read, flops / peak) (the kernel is compute-bound at these head
//            counts: 96 heads do ~96 FLOP per cache byte, the machine ~5-10).
//   kv_b     decode batch 1 over a 512-token context with kv_b_proj in bf16 (read in place, as
//            models load it; every other case too) against its f32 copy, alternating; 16
//            layers' copies called in turn so the weights come from DRAM, as in a model; and
//            the expanded prefill of a 512-token prompt (1K without --quick) with each.
//   dtypes   decode batch 8 at Kimi-Linear (32) and 16 heads over f32, bf16 and fp8 caches
//            (--kv-cache-dtype): ms and the speed-up over f32 measured in the same run.
//   prefill  both forms (absorbed / expanded, mla_prefill.h) on a 512-token prompt and on a
//            128-token chunk after 2K cached tokens, then a 4K-token prompt in one chunk with
//            the automatic choice: tokens/s, GFLOP/s of the form's FLOPs and % of f32_GFLOPs.
// Each case prints the best and the mean of its repetitions, the ceilings being measured right
// before it (a shared machine's load drifts).
//
// Run: kernels_cpu_mla_bench [--quick | --long [C,...] | --forms [C]] (not run by ctest). --quick:
// 8K context, 1K prompt (and the form cases scaled down with it). --long: a 2,048-token chunk after
// C cached tokens at one head (LongContext below).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/roofline.h"
#include "core/tensor.h"
#include "kernels/cpu/latent_codec.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/mla_decode.h"
#include "kernels/cpu/mla_prefill.h"

namespace strata::kernels::cpu {
namespace {

using Clock = std::chrono::steady_clock;

struct Ceilings {
  double read_bps;
  double flops;
};

Ceilings Measure() { return {bench::MeasureReadBandwidth(), bench::MeasurePeakF32Flops()}; }

void PrintCeilings(const char* when, const Ceilings& c) {
  std::printf("ceilings (%s): read_GBps %.1f  f32_GFLOPs %.1f  threads %d  isa %s\n", when,
              c.read_bps * 1e-9, c.flops * 1e-9, omp_get_max_threads(), IsaName(ActiveIsa()));
}

// A paged latent pool of `num_seqs` × `len` tokens, blocks shuffled, filled in parallel; rows
// in `dtype` (the f32 values encoded).
struct Pool {
  AlignedBuffer pages;
  std::vector<std::vector<int32_t>> tables;
  LatentDType dtype = LatentDType::kF32;
  static constexpr int kBlockSize = 64;
  static constexpr int kRopeDim = 64;

  Pool(int num_seqs, int64_t len, int lat_w, LatentDType row_dtype = LatentDType::kF32)
      : dtype(row_dtype) {
    const int64_t blocks_per_seq = (len + kBlockSize - 1) / kBlockSize;
    const int64_t num_blocks = blocks_per_seq * num_seqs;
    const int64_t floats = num_blocks * kBlockSize * lat_w;
    pages = AlignedBuffer(static_cast<size_t>(floats) * sizeof(float));
    float* p = pages.as<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < floats; ++i)
      p[i] = static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::mt19937 rng(1);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int s = 0; s < num_seqs; ++s) {
      tables.emplace_back(ids.begin() + s * blocks_per_seq, ids.begin() + (s + 1) * blocks_per_seq);
    }
    if (dtype == LatentDType::kF32) return;
    const int64_t row_bytes = LatentBytesPerToken(dtype, lat_w, kRopeDim);
    AlignedBuffer encoded(static_cast<size_t>(num_blocks * kBlockSize * row_bytes));
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < num_blocks * kBlockSize; ++row) {
      EncodeLatentRow(dtype, p + row * lat_w, lat_w, kRopeDim,
                      encoded.as<std::byte>() + row * row_bytes);
    }
    pages = std::move(encoded);
  }
  PagedLatent View(int s, int64_t len) const {
    return {pages.data(), tables[static_cast<size_t>(s)].data(), kBlockSize, len, dtype, kRopeDim};
  }
};

std::vector<float> Random(int64_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

MlaDims Dims(int heads) { return {heads, 128, 64, 128, 512}; }

// The head shape of the long-context test model (tests/long_context): one head, d_n 16, d_r 8,
// d_v 16, kv_lora 32.
MlaDims TinyDims() { return {1, 16, 8, 16, 32}; }

// kv_b_proj [heads·(dn + dv), r] as a bf16 checkpoint holds it, and its exact f32 copy.
struct Kvb {
  std::vector<uint16_t> bf16;
  std::vector<float> f32;
  int64_t k = 0;
  explicit Kvb(int heads) : Kvb(Dims(heads)) {}
  explicit Kvb(const MlaDims& d)
      : f32(Random(int64_t{d.num_heads} * (d.qk_nope_head_dim + d.v_head_dim) * d.kv_lora_rank,
                   1.0f / std::sqrt(static_cast<float>(d.kv_lora_rank)), 2)),
        k(d.kv_lora_rank) {
    bf16.resize(f32.size());
    ConvertF32ToBf16(f32.data(), f32.size(), bf16.data());
    for (size_t i = 0; i < f32.size(); ++i) f32[i] = Bf16ToF32(bf16[i]);
  }
  MatmulWeights View(bool in_bf16) const {
    const int64_t rows = static_cast<int64_t>(f32.size()) / k;
    if (in_bf16) return {WeightFormat::kBf16, rows, k, bf16.data(), nullptr};
    return {WeightFormat::kF32, rows, k, f32.data(), nullptr};
  }
};

struct Timing {
  double best_s = 1e30, mean_s = 0;
};

template <typename Fn>
Timing Time(int reps, Fn&& fn) {
  Timing t;
  double total = 0;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    t.best_s = std::min(t.best_s, s);
    total += s;
  }
  t.mean_s = total / reps;
  return t;
}

// Returns the best time in seconds. kv_b_proj in bf16 (as models load it) unless f32_kvb.
// layers > 1: that many copies of the weights and caches, called in turn, so that each call
// finds its weights out of cache as a model's layers do (the kv_b case).
double Decode(const char* name, int heads, int batch, int64_t len, int reps,
              LatentDType dtype = LatentDType::kF32, bool f32_kvb = false, int layers = 1) {
  const MlaDims d = Dims(heads);
  const int lat_w = d.kv_lora_rank + d.qk_rope_head_dim;
  Pool pool(batch * layers, len, lat_w, dtype);
  const std::vector<Kvb> kvb(static_cast<size_t>(layers), Kvb(heads));
  const std::vector<float> q = Random(int64_t{batch} * heads * 192, 1.0f, 3);
  const std::vector<float> g = Random(int64_t{batch} * heads * 128, 1.0f, 4);
  std::vector<float> o(static_cast<size_t>(batch) * heads * 128);
  std::vector<std::vector<MlaDecodeSequence>> seqs(static_cast<size_t>(layers));
  for (int l = 0; l < layers; ++l) {
    for (int b = 0; b < batch; ++b) {
      seqs[l].push_back({pool.View(l * batch + b, len), q.data() + b * heads * 192,
                         g.data() + b * heads * 128, o.data() + b * heads * 128});
    }
  }
  AlignedBuffer scratch(MlaDecodeScratchBytes(d, seqs[0]));
  const float scale = 1.0f / std::sqrt(192.0f);
  const Ceilings c = Measure();
  int layer = 0;
  auto call = [&] {
    MlaDecode(d, scale, kvb[layer].View(!f32_kvb), seqs[layer], scratch.data());
    layer = (layer + 1) % layers;
  };
  for (int l = 0; l < layers; ++l) call();  // warm-up (page faults, scratch)
  const Timing t = Time(reps, call);
  const double cache_bytes =
      double(batch) * double(len) * double(LatentBytesPerToken(dtype, lat_w, Pool::kRopeDim));
  const double weight_bytes = (f32_kvb ? 4.0 : 2.0) * static_cast<double>(kvb[0].f32.size());
  const double flops = 2.0 * batch * heads * (len * (lat_w + d.kv_lora_rank) + 2.0 * 128 * 512);
  const double floor_s = std::max((cache_bytes + weight_bytes) / c.read_bps, flops / c.flops);
  std::printf(
      "decode %-11s %-4s kv_b %-4s heads %2d batch %d ctx %6lld: %8.2f ms (mean %8.2f)  cache "
      "%6.1f GB/s = %5.1f%% of read  %6.1f GFLOP/s = %5.1f%% of f32  pct_roof %5.1f%% (best) "
      "%5.1f%% (mean)\n",
      name, std::string(LatentDTypeName(dtype)).c_str(), f32_kvb ? "f32" : "bf16", heads, batch,
      static_cast<long long>(len), t.best_s * 1e3, t.mean_s * 1e3, cache_bytes / t.best_s * 1e-9,
      100.0 * cache_bytes / t.best_s / c.read_bps, flops / t.best_s * 1e-9,
      100.0 * flops / t.best_s / c.flops, 100.0 * floor_s / t.best_s, 100.0 * floor_s / t.mean_s);
  return t.best_s;
}

// FLOPs of the form (per README): P = attended (query, row) pairs.
double PrefillFlops(const MlaDims& d, int64_t cached, int64_t tokens, MlaPrefillForm form) {
  const double pairs = static_cast<double>(tokens) * cached + tokens * (tokens + 1) / 2.0;
  const double r = d.kv_lora_rank, dn = d.qk_nope_head_dim, dr = d.qk_rope_head_dim;
  const double dv = d.v_head_dim;
  if (form == MlaPrefillForm::kAbsorbed) {
    return 2.0 * d.num_heads * (pairs * (2 * r + dr) + tokens * (dn + dv) * r);
  }
  return 2.0 * d.num_heads * ((cached + tokens) * (dn + dv) * r + pairs * (dn + dr + dv));
}

const char* FormName(MlaPrefillForm f) {
  return f == MlaPrefillForm::kAbsorbed   ? "absorbed"
         : f == MlaPrefillForm::kExpanded ? "expanded"
                                          : "auto";
}

// A chunk of `tokens` new tokens after `cached` ones, in one call.
double Prefill(const char* name, const MlaDims& d, int64_t cached, int64_t tokens,
               MlaPrefillForm form, int reps, bool f32_kvb = false) {
  const int heads = d.num_heads;
  const int lat_w = d.kv_lora_rank + d.qk_rope_head_dim;
  const int q_w = d.qk_nope_head_dim + d.qk_rope_head_dim, dv = d.v_head_dim;
  const int64_t len = cached + tokens;
  Pool pool(1, len, lat_w);
  const Kvb kvb(d);
  const MatmulWeights w = kvb.View(!f32_kvb);
  const std::vector<float> q = Random(tokens * heads * q_w, 1.0f, 3);
  const std::vector<float> g = Random(tokens * heads * dv, 1.0f, 4);
  std::vector<float> o(static_cast<size_t>(tokens * heads * dv));
  PagedLatent context = pool.View(0, len);
  context.rope_dim = d.qk_rope_head_dim;
  const MlaPrefillSequence seq{context, tokens, q.data(), g.data(), o.data()};
  AlignedBuffer scratch(MlaPrefillScratchBytes(d, {&seq, 1}));
  const float scale = 1.0f / std::sqrt(static_cast<float>(q_w));
  const MlaPrefillForm used =
      form == MlaPrefillForm::kAuto ? MlaPrefillChooseForm(d, cached, tokens) : form;
  const Ceilings c = Measure();
  if (reps > 1) MlaPrefill(d, scale, w, {&seq, 1}, scratch.data(), form);  // warm-up
  const Timing t = Time(reps, [&] { MlaPrefill(d, scale, w, {&seq, 1}, scratch.data(), form); });
  const double flops = PrefillFlops(d, cached, tokens, used);
  // The expanded form under --cpu-matmul-precision bf16 runs bf16 products (AMX tiles, else
  // vdpbf16ps): its ceiling is theirs.
  const bool bf16 = used == MlaPrefillForm::kExpanded &&
                    GetMatmulPrecision() == MatmulPrecision::kBf16 && Bf16MatmulSupported();
  const bool amx = bf16 && Bf16MatmulUsesAmx();
  const double peak = amx    ? bench::MeasurePeakAmxBf16Flops()
                      : bf16 ? bench::MeasurePeakBf16DotFlops()
                             : c.flops;
  const char* precision = amx ? "bf16-amx" : bf16 ? "bf16" : "f32";
  const char* peak_name = amx ? "amx_bf16" : bf16 ? "bf16_dot" : "f32";
  std::printf(
      "prefill %-11s heads %2d cached %5lld new %5lld %-8s(%s) %-8s kv_b %-4s: %8.1f ms (mean "
      "%8.1f)  %8.0f tokens/s  %6.1f GFLOP/s = %5.1f%% of %s\n",
      name, heads, static_cast<long long>(cached), static_cast<long long>(tokens), FormName(form),
      FormName(used), precision, f32_kvb ? "f32" : "bf16", t.best_s * 1e3, t.mean_s * 1e3,
      tokens / t.best_s, flops / t.best_s * 1e-9, 100.0 * flops / t.best_s / peak, peak_name);
  return t.best_s;
}

}  // namespace
}  // namespace strata::kernels::cpu

// --long [C,C,...]: one 2,048-token chunk after C cached tokens (default 32K, 256K, 1M), the
// prefill a long prompt's later chunks run (--max-num-batched-tokens 2048), at one head of K3's
// shape and of the long-context test model's, f32 and (where the CPU has AVX512-BF16) bf16
// products; the form kAuto picks (expanded).
int LongContext(const std::string& lengths) {
  using namespace strata::kernels::cpu;  // NOLINT(build/namespaces)
  std::vector<int64_t> contexts;
  for (size_t at = 0; at < lengths.size();) {
    const size_t comma = std::min(lengths.find(',', at), lengths.size());
    contexts.push_back(std::stoll(lengths.substr(at, comma - at)));
    at = comma + 1;
  }
  PrintCeilings("start", Measure());
  constexpr int64_t kChunk = 2048;
  for (const int64_t cached : contexts) {
    for (const bool bf16 : {false, true}) {
      SetMatmulPrecision(bf16 ? MatmulPrecision::kBf16 : MatmulPrecision::kF32);
      if (bf16 && !Bf16MatmulSupported()) continue;
      Prefill("tiny-head", TinyDims(), cached, kChunk, MlaPrefillForm::kAuto, 2);
      Prefill("k3-head", Dims(1), cached, kChunk, MlaPrefillForm::kAuto, cached > 300000 ? 1 : 2);
    }
  }
  SetMatmulPrecision(MatmulPrecision::kF32);
  PrintCeilings("end", Measure());
  return 0;
}

// --forms [C]: the absorbed and the expanded form on chunks of 16 to 1,024 tokens after C cached
// tokens (default 32K) at 8 of K3's heads (one work item per head, as at 96), f32 and (where the
// CPU has AVX512-BF16) bf16 products: where one form overtakes the other, against the chunk size
// at which MlaPrefillChooseForm switches (its calibration).
int Forms(int64_t cached) {
  using namespace strata::kernels::cpu;  // NOLINT(build/namespaces)
  PrintCeilings("start", Measure());
  const auto d = Dims(8);
  for (const bool bf16 : {false, true}) {
    SetMatmulPrecision(bf16 ? MatmulPrecision::kBf16 : MatmulPrecision::kF32);
    if (bf16 && !Bf16MatmulSupported()) continue;
    for (const int64_t tokens : {16, 32, 64, 128, 256, 512, 1024}) {
      const double absorbed = Prefill("k3", d, cached, tokens, MlaPrefillForm::kAbsorbed, 2);
      const double expanded = Prefill("k3", d, cached, tokens, MlaPrefillForm::kExpanded, 2);
      const MlaPrefillForm faster =
          expanded < absorbed ? MlaPrefillForm::kExpanded : MlaPrefillForm::kAbsorbed;
      const MlaPrefillForm chosen = MlaPrefillChooseForm(d, cached, tokens, bf16 ? 2.0 : 1.0);
      std::printf(
          "forms %s cached %lld new %5lld: expanded/absorbed time %.2f, faster %s, "
          "chosen %s%s\n",
          bf16 ? "bf16" : "f32 ", static_cast<long long>(cached), static_cast<long long>(tokens),
          expanded / absorbed, FormName(faster), FormName(chosen),
          faster == chosen ? "" : "  <- MISCHOSEN");
    }
  }
  SetMatmulPrecision(MatmulPrecision::kF32);
  PrintCeilings("end", Measure());
  return 0;
}

int main(int argc, char** argv) {
  using namespace strata::kernels::cpu;  // NOLINT(build/namespaces)
  if (argc > 1 && std::string(argv[1]) == "--long") {
    return LongContext(argc > 2 ? argv[2] : "32768,262144,1048576");
  }
  if (argc > 1 && std::string(argv[1]) == "--forms") {
    return Forms(argc > 2 ? std::stoll(argv[2]) : 32768);
  }
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const int64_t ctx = quick ? 8192 : 32768, prompt = quick ? 1024 : 4096;
  PrintCeilings("start", Measure());
  for (int batch : {1, 8}) {
    Decode("k3", 96, batch, ctx, 3);
    Decode("kimi-linear", 32, batch, ctx, 3);
  }
  // The cache formats, each against f32 in the same run.
  for (int heads : {32, 16}) {
    const double f32_s = Decode("dtypes", heads, 8, ctx, 3, strata::LatentDType::kF32);
    for (strata::LatentDType dtype : {strata::LatentDType::kBF16, strata::LatentDType::kFP8}) {
      const double s = Decode("dtypes", heads, 8, ctx, 3, dtype);
      std::printf("  %s over f32 at %d heads: %.2fx\n",
                  std::string(strata::LatentDTypeName(dtype)).c_str(), heads, f32_s / s);
    }
  }
  // kv_b_proj read as bf16 in place against its f32 copy, where its bytes count: batch 1 over a
  // short context, 16 layers' copies in turn (≥ 128 MB of weights at 16 heads in f32, so each
  // call reads them from DRAM as in a model); alternating rounds, best of each.
  for (int heads : {32, 16}) {
    double f32_s = 1e30, bf16_s = 1e30;
    for (int round = 0; round < 3; ++round) {
      f32_s =
          std::min(f32_s, Decode("kv_b", heads, 1, 512, 32, strata::LatentDType::kF32, true, 16));
      bf16_s =
          std::min(bf16_s, Decode("kv_b", heads, 1, 512, 32, strata::LatentDType::kF32, false, 16));
    }
    std::printf("  bf16 kv_b over f32 at %d heads, batch 1, 512-token context: %.2fx\n", heads,
                f32_s / bf16_s);
  }
  // The expanded form's expansion reads kv_b_proj too (in bf16, widened in the loads, against
  // its f32 copy), alternating.
  {
    double f32_s = 1e30, bf16_s = 1e30;
    for (int round = 0; round < 3; ++round) {
      f32_s = std::min(
          f32_s, Prefill("kv_b", Dims(32), 0, prompt / 2, MlaPrefillForm::kExpanded, 1, true));
      bf16_s =
          std::min(bf16_s, Prefill("kv_b", Dims(32), 0, prompt / 2, MlaPrefillForm::kExpanded, 1));
    }
    std::printf("  bf16 kv_b over f32, expanded prefill of %lld tokens at 32 heads: %.2fx\n",
                static_cast<long long>(prompt / 2), f32_s / bf16_s);
  }
  // Both forms on the same chunks (the rule's calibration), then the 4K prompt as kAuto runs it.
  for (MlaPrefillForm form : {MlaPrefillForm::kAbsorbed, MlaPrefillForm::kExpanded}) {
    Prefill("k3", Dims(96), 0, prompt / 8, form, 2);
    Prefill("k3", Dims(96), prompt / 2, prompt / 32, form, 2);
  }
  Prefill("k3", Dims(96), 0, prompt, MlaPrefillForm::kAuto, 1);
  Prefill("kimi-linear", Dims(32), 0, prompt, MlaPrefillForm::kAuto, 1);
  // --cpu-matmul-precision bf16: the expanded form's bf16 products against f32, alternating.
  SetMatmulPrecision(MatmulPrecision::kBf16);
  if (Bf16MatmulSupported()) {
    for (int64_t tokens : {prompt / 8, prompt / 2}) {
      double f32_s = 1e30, bf16_s = 1e30;
      for (int round = 0; round < 2; ++round) {
        SetMatmulPrecision(MatmulPrecision::kF32);
        f32_s = std::min(f32_s,
                         Prefill("kimi-linear", Dims(32), 0, tokens, MlaPrefillForm::kExpanded, 1));
        SetMatmulPrecision(MatmulPrecision::kBf16);
        bf16_s = std::min(
            bf16_s, Prefill("kimi-linear", Dims(32), 0, tokens, MlaPrefillForm::kExpanded, 1));
      }
      std::printf("  %s over f32, %lld-token prompt: %.2fx\n", MatmulPrecisionInEffect(),
                  static_cast<long long>(tokens), f32_s / bf16_s);
    }
    Prefill("kimi-linear", Dims(32), prompt / 2, prompt / 32, MlaPrefillForm::kExpanded, 2);
  } else {
    std::printf("bf16 prefill: not measured (no AVX512-BF16 here)\n");
  }
  SetMatmulPrecision(MatmulPrecision::kF32);
  PrintCeilings("end", Measure());
  return 0;
}
