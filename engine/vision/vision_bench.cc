// The vision tower (VisionEncoder::Encode) at Kimi K3's sizes against ceilings measured in the
// same run (docs/performance.md, "Vision tower on the CPU").
//
// Shape: K3's released vision_config (D 1024, qkv 1536 = 12 heads × 128, MLP 4096, 64×64
// position table, projector to text_hidden 7168), random bf16 weights built in memory (the
// timing does not depend on the values). `--layers N` blocks (default 2) are really run; the
// released 27 are extrapolated per layer: per_layer = (T(N layers) − T(0 layers)) / N and
// T(27) = T(0) + 27 · per_layer (T(0): patch embedding, position table, merge and projector).
//
// Cases: 448² (32×32 patches, 256 rows) and 1024×768 (padded to 1036×784: 74×56 patches, 1036
// rows) are encoded; 3584² (256×256 patches, 16,384 rows: 27 × 65,536-patch blocks are hours on
// two cores) is estimated from the measured parts: the per-row costs of the 1024×768 case scaled
// by rows, attention by rows² at the rate measured on a 64×128 grid. Printed per case: ms per
// image (best of the runs), images/s and rows/s at 27 layers, the products outside the blocks
// (patch embedding, proj.0, proj.2) alone, the block's products (wqkv, wo, fc0, fc1, timed alone
// on the same kernels) in GFLOP/s and % of the matmul ceiling, the attention
// (kernels::cpu::VitAttention alone) in GFLOP/s and its share of a block, and every matrix FLOP of
// the tower (products + attention's two products) per second of Encode.
//
// --prefill-model DIR: also the time to first token of a 32-token chat without and with one
// 1024×768 image (its 1036 rows more in the prefill, plus the encode), on that checkpoint.
//
// Each quantity is timed in `--rounds` interleaved rounds (each round runs every one of them for
// at least `--seconds`), the best kept: on a shared machine every quantity then sees both busy and
// quiet moments.
//
// Run: engine_vision_bench [--layers N] [--rounds R] [--seconds S] [--bf16] [--prefill-model DIR]
// (not run by ctest). --bf16: MatmulPrecision::kBf16 (--cpu-matmul-precision bf16).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/roofline.h"
#include "core/tensor.h"
#include "engine/generator.h"
#include "engine/linear.h"
#include "engine/model.h"
#include "engine/vision/vision_encoder.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vit.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
using engine::Linear;
using engine::VisionConfig;
using engine::VisionEncoder;
using engine::VisionWeights;

constexpr int kReleasedLayers = 27;

struct Options {
  int layers = 2;
  int rounds = 3;        // interleaved rounds per case (best kept)
  double seconds = 1.0;  // least time per quantity and round (at least one run each)
  bool bf16 = false;
  std::string prefill_model;
};

VisionConfig K3Config(int layers) {
  VisionConfig c;
  c.patch_size = 14;
  c.hidden_size = 1024;
  c.qkv_hidden_size = 1536;
  c.num_heads = 12;
  c.intermediate_size = 4096;
  c.num_layers = layers;
  c.pos_emb_height = c.pos_emb_width = 64;
  c.mm_hidden_size = 1024;
  c.text_hidden_size = 7168;
  return c;
}

uint32_t NextRandom(uint32_t& state) {
  state ^= state << 13;
  state ^= state >> 17;
  state ^= state << 5;
  return state;
}

float Uniform(uint32_t& state) {  // [−1, 1]
  return static_cast<float>(NextRandom(state) % 2001) / 1000.0f - 1.0f;
}

// Random bf16 weights scaled like a trained layer (|w| ~ 1/√in), owned by the Linear.
Linear RandomLinear(int64_t out, int64_t in, uint32_t& state) {
  Linear w;
  w.format = engine::WeightFormat::kBf16;
  w.out_features = out;
  w.in_features = in;
  w.owned = AlignedBuffer(static_cast<size_t>(out * in) * 2);
  uint16_t* p = w.owned.as<uint16_t>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(in));
  for (int64_t i = 0; i < out * in; ++i) p[i] = F32ToBf16(Uniform(state) * scale);
  w.data = p;
  return w;
}

std::vector<float> RandomVector(int64_t n, float center, float spread, uint32_t& state) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = center + spread * Uniform(state);
  return v;
}

VisionWeights RandomTower(const VisionConfig& c, uint32_t seed) {
  uint32_t state = seed * 2654435761u + 1;
  const int64_t d = c.hidden_size, q = c.qkv_hidden_size, inter = c.intermediate_size;
  const int64_t p = c.patch_size, merged = 4 * d;
  VisionWeights w;
  w.patch_embed = RandomLinear(d, 3 * p * p, state);
  w.pos_emb = RandomVector(int64_t{c.pos_emb_height} * c.pos_emb_width * d, 0.0f, 0.02f, state);
  for (int i = 0; i < c.num_layers; ++i) {
    engine::VisionBlockWeights b;
    b.norm0 = RandomVector(d, 1.0f, 0.1f, state);
    b.norm1 = RandomVector(d, 1.0f, 0.1f, state);
    b.wqkv = RandomLinear(3 * q, d, state);
    b.wo = RandomLinear(d, q, state);
    b.fc0 = RandomLinear(inter, d, state);
    b.fc1 = RandomLinear(d, inter, state);
    w.blocks.push_back(std::move(b));
  }
  w.final_norm = RandomVector(d, 1.0f, 0.1f, state);
  w.proj0 = RandomLinear(merged, merged, state);
  w.proj2 = RandomLinear(c.text_hidden_size, merged, state);
  w.post_norm = RandomVector(c.text_hidden_size, 1.0f, 0.1f, state);
  return w;
}

// An image of width × height pixels as preprocessing gives it: padded to whole 2×2 windows of
// patches, normalised to [−1, 1].
media::ImagePatches RandomImage(int width, int height, int patch, uint32_t seed) {
  media::ImagePatches image;
  image.original_width = image.width = width;
  image.original_height = image.height = height;
  const int window = 2 * patch;
  image.grid_width = (width + window - 1) / window * 2;
  image.grid_height = (height + window - 1) / window * 2;
  uint32_t state = seed + 17;
  image.patches = RandomVector(image.num_patches() * 3 * patch * patch, 0.0f, 1.0f, state);
  return image;
}

// Best seconds of `fn` over runs lasting at least `seconds` together (at least one run).
double BestSeconds(const std::function<void()>& fn, double seconds) {
  double best = 1e30, total = 0;
  do {
    const Clock::time_point t0 = Clock::now();
    fn();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  } while (total < seconds);
  return best;
}

// Per-block costs at n patches, each timed alone on the kernels Encode uses.
struct BlockParts {
  double products_s = 0;   // wqkv, wo, fc0, fc1
  double attention_s = 0;  // VitAttention over the n patches, all heads
  double products_flop = 0, attention_flop = 0;
};

double AttentionFlop(const VisionConfig& c, int64_t n) {
  return 4.0 * static_cast<double>(n) * static_cast<double>(n) * c.qkv_hidden_size;
}

double AttentionSeconds(const VisionConfig& c, int64_t n, double seconds) {
  const int64_t q = c.qkv_hidden_size;
  uint32_t state = 99;
  const std::vector<float> qkv = RandomVector(n * 3 * q, 0.0f, 1.0f, state);
  std::vector<float> out(static_cast<size_t>(n * q));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
  return BestSeconds(
      [&] {
        kernels::cpu::VitAttention(qkv.data(), qkv.data() + q, qkv.data() + 2 * q, 3 * q, n,
                                   c.num_heads, c.head_dim(), scale, out.data());
      },
      seconds);
}

BlockParts MeasureBlock(const VisionConfig& c, const engine::VisionBlockWeights& b, int64_t n,
                        double seconds) {
  const int64_t d = c.hidden_size, q = c.qkv_hidden_size, inter = c.intermediate_size;
  uint32_t state = 5;
  const std::vector<float> x = RandomVector(n * std::max(d, std::max(q, inter)), 0.0f, 1.0f, state);
  std::vector<float> y(static_cast<size_t>(n * std::max(3 * q, inter)));
  BlockParts parts;
  parts.products_s = BestSeconds(
      [&] {
        engine::LinearForward(b.wqkv, x.data(), n, y.data());
        engine::LinearForward(b.wo, x.data(), n, y.data());
        engine::LinearForward(b.fc0, x.data(), n, y.data());
        engine::LinearForward(b.fc1, x.data(), n, y.data());
      },
      seconds);
  parts.products_flop = 2.0 * static_cast<double>(n) * (4 * q * d + 2 * inter * d);
  parts.attention_s = AttentionSeconds(c, n, seconds);
  parts.attention_flop = AttentionFlop(c, n);
  return parts;
}

// Matrix FLOPs of one image outside the blocks: patch embedding and the projector's products.
double OuterFlop(const VisionConfig& c, int64_t n) {
  const double d = c.hidden_size, p = c.patch_size, rows = static_cast<double>(n) / 4;
  return 2.0 * static_cast<double>(n) * d * 3 * p * p +
         2.0 * rows * (4 * d) * (4 * d + c.text_hidden_size);
}

// Seconds of the products outside the blocks (patch embedding, proj.0, proj.2) alone.
double OuterProductSeconds(const VisionConfig& c, const VisionWeights& w, int64_t n,
                           double seconds) {
  const int64_t d = c.hidden_size, p = c.patch_size, rows = n / 4;
  uint32_t state = 7;
  // x: n patches, then rows merged rows (4D) as input; y: the widest output.
  const std::vector<float> x =
      RandomVector(std::max(n * 3 * p * p, rows * 4 * d), 0.0f, 1.0f, state);
  std::vector<float> y(
      static_cast<size_t>(std::max({n * d, rows * 4 * d, rows * int64_t{c.text_hidden_size}})));
  return BestSeconds(
      [&] {
        engine::LinearForward(w.patch_embed, x.data(), n, y.data());
        engine::LinearForward(w.proj0, x.data(), rows, y.data());
        engine::LinearForward(w.proj2, x.data(), rows, y.data());
      },
      seconds);
}

struct Ceiling {
  const char* name;
  double flops;
};

struct Ceilings {
  double f32 = 0, bf16_dot = 0, amx = 0;
  int measurements = 0;
  void Update() {
    f32 = std::max(f32, bench::MeasurePeakF32Flops());
    bf16_dot = std::max(bf16_dot, bench::MeasurePeakBf16DotFlops());
    amx = std::max(amx, bench::MeasurePeakAmxBf16Flops());
    ++measurements;
  }
};

struct CaseRecord {
  const char* label;
  int64_t n;  // patches
  double encode_s, t0_s, per_layer_s, outer_products_s;
  BlockParts parts;
  bool estimated;
};

void PrintCase(const char* label, const VisionConfig& c, int64_t n, double t0_s, double per_layer_s,
               const BlockParts& parts, const Ceiling& peak, bool estimated, int measured_layers) {
  const int64_t rows = n / 4;
  const double t27 = t0_s + kReleasedLayers * per_layer_s;
  const double tower_flop =
      OuterFlop(c, n) + kReleasedLayers * (parts.products_flop + parts.attention_flop);
  std::printf(
      "%-9s %6lld patches %5lld rows: %s 27 layers %9.3f s = %7.3f images/s %8.0f rows/s"
      "  (0 layers %7.1f ms, per layer %8.1f ms%s)\n",
      label, static_cast<long long>(n), static_cast<long long>(rows),
      estimated ? "ESTIMATED" : "extrapolated", t27, 1.0 / t27, static_cast<double>(rows) / t27,
      t0_s * 1e3, per_layer_s * 1e3,
      estimated
          ? ", scaled from 1024x768 and the attention probe"
          : (std::string(", measured at ") + std::to_string(measured_layers) + " layers").c_str());
  const double products_rate = parts.products_flop / parts.products_s;
  const double attention_rate = parts.attention_flop / parts.attention_s;
  std::printf(
      "          block products %7.1f GFLOP/s = %5.1f%% of %s;  attention %7.1f GFLOP/s = %5.1f%% "
      "of %s, %5.1f%% of a block's time;  whole tower %7.1f GFLOP/s = %5.1f%% of %s\n",
      products_rate * 1e-9, 100 * products_rate / peak.flops, peak.name, attention_rate * 1e-9,
      100 * attention_rate / peak.flops, peak.name, 100 * parts.attention_s / per_layer_s,
      tower_flop / t27 * 1e-9, 100 * tower_flop / t27 / peak.flops, peak.name);
  std::fflush(stdout);
}

// The 1-minute load average (the machine may be shared: numbers under load are lower bounds).
double LoadAverage() {
  double load = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return load;
}

// Time to first token of `prompt` (one prefill and the first sampled token), best of 2 runs.
double FirstTokenSeconds(const engine::Model& model, const std::vector<int32_t>& prompt) {
  engine::GenerateOptions options;
  options.max_tokens = 1;
  options.ignore_eos = true;
  options.sampling.temperature = 0.0f;
  auto once = [&] {
    auto tokens = engine::Generate(model, prompt, options);
    if (!tokens.ok()) {
      std::fprintf(stderr, "generate: %s\n", tokens.status().ToString().c_str());
      std::exit(1);
    }
  };
  return std::min(BestSeconds(once, 0.0), BestSeconds(once, 0.0));
}

int Run(const Options& opt) {
  if (opt.bf16) kernels::cpu::SetMatmulPrecision(kernels::cpu::MatmulPrecision::kBf16);
  const VisionConfig config = K3Config(opt.layers);
  const VisionConfig config0 = K3Config(0);
  std::printf(
      "vision tower, K3 sizes (D 1024, qkv 1536 = 12 x 128, MLP 4096, table 64x64, "
      "text_hidden 7168), bf16 weights, %d layers run (27 released: extrapolated per "
      "layer), threads %d, products %s\n",
      opt.layers, kernels::cpu::MaxThreads(), kernels::cpu::MatmulPrecisionInEffect());
  // The ceilings are peaks: measured before, between and after the cases, the highest kept (a
  // shared machine lowers single measurements).
  Ceilings ceilings;
  ceilings.Update();
  const VisionEncoder tower(config, RandomTower(config, 1));
  const VisionEncoder outer(config0, RandomTower(config0, 2));

  struct Image {
    const char* label;
    int width, height;
  };
  const Image images[] = {{"448x448", 448, 448}, {"1024x768", 1024, 768}};
  std::vector<CaseRecord> cases;
  double t0_1024 = 0, other_per_layer_1024 = 0;
  BlockParts parts_1024;
  int64_t n_1024 = 0;
  for (const Image& img : images) {
    const media::ImagePatches image = RandomImage(img.width, img.height, config.patch_size, 3);
    const int64_t n = image.num_patches();
    double tl = 1e30, t0 = 1e30, outer_s = 1e30;
    BlockParts parts;
    parts.products_s = parts.attention_s = 1e30;
    for (int round = 0; round < opt.rounds; ++round) {
      tl = std::min(tl, BestSeconds([&] { tower.Encode(image); }, opt.seconds));
      t0 = std::min(t0, BestSeconds([&] { outer.Encode(image); }, opt.seconds));
      const BlockParts p = MeasureBlock(config, tower.weights().blocks[0], n, opt.seconds);
      parts.products_s = std::min(parts.products_s, p.products_s);
      parts.attention_s = std::min(parts.attention_s, p.attention_s);
      parts.products_flop = p.products_flop;
      parts.attention_flop = p.attention_flop;
      outer_s = std::min(outer_s, OuterProductSeconds(config, tower.weights(), n, opt.seconds));
    }
    const double per_layer = (tl - t0) / opt.layers;
    cases.push_back({img.label, n, tl, t0, per_layer, outer_s, parts, false});
    ceilings.Update();
    if (img.width == 1024) {
      t0_1024 = t0;
      other_per_layer_1024 = per_layer - parts.products_s - parts.attention_s;
      parts_1024 = parts;
      n_1024 = n;
    }
  }

  // 3584²: rows-linear parts scaled from 1024×768, attention at the rate of a 64×128 grid.
  const int64_t probe_n = 64 * 128, n_big = 256 * 256;
  const double probe_s =
      std::min(AttentionSeconds(config, probe_n, 0.0), AttentionSeconds(config, probe_n, 0.0));
  const double probe_rate = AttentionFlop(config, probe_n) / probe_s;
  std::printf("attention probe: 64x128 patches (%lld) %.2f s = %.1f GFLOP/s\n",
              static_cast<long long>(probe_n), probe_s, probe_rate * 1e-9);
  const double scale = static_cast<double>(n_big) / static_cast<double>(n_1024);
  BlockParts big;
  big.products_flop = parts_1024.products_flop * scale;
  big.products_s = parts_1024.products_s * scale;
  big.attention_flop = AttentionFlop(config, n_big);
  big.attention_s = big.attention_flop / probe_rate;
  const double big_per_layer = big.products_s + big.attention_s + other_per_layer_1024 * scale;
  cases.push_back({"3584x3584", n_big, 0, t0_1024 * scale, big_per_layer, 0, big, true});
  ceilings.Update();

  std::printf(
      "ceilings (highest of %d measurements): f32 FMA %.1f GFLOP/s, bf16 dot %.1f GFLOP/s, AMX "
      "bf16 %.1f GFLOP/s; load average at the end %.2f\n",
      ceilings.measurements, ceilings.f32 * 1e-9, ceilings.bf16_dot * 1e-9, ceilings.amx * 1e-9,
      LoadAverage());
  const bool bf16 = opt.bf16 && kernels::cpu::Bf16MatmulSupported();
  const Ceiling peak = !bf16                               ? Ceiling{"f32", ceilings.f32}
                       : kernels::cpu::Bf16MatmulUsesAmx() ? Ceiling{"amx", ceilings.amx}
                                                           : Ceiling{"bf16", ceilings.bf16_dot};
  for (const CaseRecord& r : cases) {
    if (!r.estimated) {
      const double outer_flop = OuterFlop(config, r.n);
      std::printf(
          "%-9s encode with %d layers %8.1f ms (best); outside the blocks: products (patch "
          "embedding, proj.0, proj.2) alone %7.1f ms = %6.1f GFLOP/s = %5.1f%% of %s\n",
          r.label, opt.layers, r.encode_s * 1e3, r.outer_products_s * 1e3,
          outer_flop / r.outer_products_s * 1e-9,
          100 * outer_flop / r.outer_products_s / peak.flops, peak.name);
    }
    PrintCase(r.label, config, r.n, r.t0_s, r.per_layer_s, r.parts, peak, r.estimated, opt.layers);
  }

  if (!opt.prefill_model.empty()) {
    auto model = engine::Model::Load(opt.prefill_model);
    if (!model.ok()) {
      std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
      return 1;
    }
    const int64_t vocab = (*model)->config().vocab_size;
    const int64_t image_rows = n_1024 / 4;
    auto prompt = [&](int64_t n) {
      std::vector<int32_t> ids;
      for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 5) % vocab));
      return ids;
    };
    const double text_s = FirstTokenSeconds(**model, prompt(32));
    const double with_rows_s = FirstTokenSeconds(**model, prompt(32 + image_rows));
    const double encode_s =
        t0_1024 +
        kReleasedLayers * (parts_1024.products_s + parts_1024.attention_s + other_per_layer_1024);
    std::printf(
        "time to first token on %s (hidden %lld): 32-token chat %.3f s; with one 1024x768 image "
        "(+%lld rows) prefill %.3f s + encode %.3f s (27 layers, extrapolated) = %.3f s; the "
        "encode alone vs a text prefill of the same %lld rows: %.3f s vs %.3f s\n",
        opt.prefill_model.c_str(), static_cast<long long>((*model)->config().hidden_size), text_s,
        static_cast<long long>(image_rows), with_rows_s, encode_s, with_rows_s + encode_s,
        static_cast<long long>(image_rows), encode_s, with_rows_s - text_s);
  }
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  strata::Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--layers") {
      opt.layers = std::atoi(value().c_str());
    } else if (arg == "--rounds") {
      opt.rounds = std::max(1, std::atoi(value().c_str()));
    } else if (arg == "--seconds") {
      opt.seconds = std::atof(value().c_str());
    } else if (arg == "--bf16") {
      opt.bf16 = true;
    } else if (arg == "--prefill-model") {
      opt.prefill_model = value();
    } else {
      std::fprintf(stderr,
                   "usage: engine_vision_bench [--layers N] [--rounds R] [--seconds S] [--bf16] "
                   "[--prefill-model DIR]\n");
      return 2;
    }
  }
  if (opt.layers < 1) {
    std::fprintf(stderr, "--layers must be at least 1\n");
    return 2;
  }
  return strata::Run(opt);
}
