#include "engine/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "engine/glu_ffn.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/workspace.h"
#include "kernels/reference/glu.h"
#include "kernels/reference/matmul.h"
#include "kernels/reference/rms_norm.h"

namespace strata::engine {
namespace {

class Rng {
 public:
  explicit Rng(uint32_t seed) : state_(seed * 2654435761u + 1) {}
  uint32_t Next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 17;
    state_ ^= state_ << 5;
    return state_;
  }
  float Uniform() { return static_cast<float>(Next() % 20001) / 10000.0f - 1.0f; }  // [−1, 1]

 private:
  uint32_t state_;
};

Linear RandomLinear(int64_t out, int64_t in, bool mxfp4, Rng& rng) {
  Linear w;
  w.out_features = out;
  w.in_features = in;
  if (mxfp4) {
    w.format = WeightFormat::kMxfp4;
    w.owned = AlignedBuffer(static_cast<size_t>(out * (in / 2 + in / 32)));
    uint8_t* p = w.owned.as<uint8_t>();
    for (int64_t b = 0; b < out * in / 2; ++b) p[b] = static_cast<uint8_t>(rng.Next());
    for (int64_t b = 0; b < out * in / 32; ++b) p[out * in / 2 + b] = 122 + rng.Next() % 3;
    w.data = p;
    w.scales = p + out * in / 2;
    return w;
  }
  w.format = WeightFormat::kBf16;
  w.owned = AlignedBuffer(static_cast<size_t>(out * in) * 2);
  uint16_t* p = w.owned.as<uint16_t>();
  const float scale = 2.0f / std::sqrt(static_cast<float>(in));
  for (int64_t i = 0; i < out * in; ++i) p[i] = F32ToBf16(scale * rng.Uniform());
  w.data = p;
  return w;
}

// y = x · Wᵀ by the f64-accumulating reference.
std::vector<float> RefLinear(const Linear& w, const float* x, int64_t m) {
  std::vector<float> y(static_cast<size_t>(m * w.out_features));
  if (w.format == WeightFormat::kMxfp4) {
    kernels::MatmulMxfp4Reference(x, m, w.in_features, static_cast<const uint8_t*>(w.data),
                                  w.scales, w.out_features, y.data());
  } else {
    kernels::MatmulBf16Reference(x, m, w.in_features, static_cast<const uint16_t*>(w.data),
                                 w.out_features, y.data());
  }
  return y;
}

std::vector<float> RefGluFfn(const kernels::GluParams& act, const Linear& gate, const Linear& up,
                             const Linear& down, const float* x, int64_t m) {
  std::vector<float> g = RefLinear(gate, x, m);
  const std::vector<float> u = RefLinear(up, x, m);
  kernels::GluReference(g.data(), u.data(), static_cast<int64_t>(g.size()), act, g.data());
  return RefLinear(down, g.data(), m);
}

struct Layer {
  ModelConfig cfg;
  MoeWeights w;
};

// A small MoE layer: 7 experts top-3, hidden 96; LatentMoE (width 64, SiTU, norm) or not
// (SwiGLU); routed experts bf16 or MXFP4; shared experts bf16 (width 2 × 64).
std::unique_ptr<Layer> MakeLayer(bool latent, bool mxfp4, uint32_t seed) {
  auto layer = std::make_unique<Layer>();
  ModelConfig& cfg = layer->cfg;
  Rng rng(seed);
  cfg.hidden_size = 96;
  cfg.activation = latent ? FfnActivation::kSitu : FfnActivation::kSwiGlu;
  cfg.situ_beta = 4.0f;
  cfg.situ_linear_beta = 25.0f;
  MoeConfig& m = cfg.moe;
  m.num_experts = 7;
  m.num_experts_per_token = 3;
  m.num_shared_experts = 2;
  m.moe_intermediate_size = 64;
  m.routed_scaling_factor = 2.0f;
  m.routed_expert_hidden_size = latent ? 64 : 0;
  m.latent_use_norm = latent;
  m.mxfp4_experts = mxfp4;
  const int64_t d = cfg.hidden_size, width = latent ? 64 : d, inter = m.moe_intermediate_size;
  MoeWeights& w = layer->w;
  w.router = RandomLinear(m.num_experts, d, false, rng);
  for (int e = 0; e < m.num_experts; ++e) w.score_bias.push_back(0.1f * rng.Uniform());
  if (latent) {
    w.latent_down = RandomLinear(width, d, false, rng);
    w.latent_up = RandomLinear(d, width, false, rng);
    for (int64_t c = 0; c < width; ++c) w.latent_norm.push_back(1.0f + 0.5f * rng.Uniform());
  }
  w.experts.resize(static_cast<size_t>(m.num_experts));
  for (ExpertWeights& e : w.experts) {
    e.w1 = RandomLinear(inter, width, mxfp4, rng);
    e.w3 = RandomLinear(inter, width, mxfp4, rng);
    e.w2 = RandomLinear(width, inter, mxfp4, rng);
  }
  w.shared.gate_proj = RandomLinear(2 * inter, d, false, rng);
  w.shared.up_proj = RandomLinear(2 * inter, d, false, rng);
  w.shared.down_proj = RandomLinear(d, 2 * inter, false, rng);
  return layer;
}

// routed[r] = Σ_j weights[r, j] · Expert_{ids[r, j]}(z[r]) over ids ≥ 0, by the reference.
std::vector<float> RefRouted(const Layer& l, const float* z, int64_t rows, const int32_t* ids,
                             const float* weights) {
  const MoeConfig& m = l.cfg.moe;
  const int64_t width = m.is_latent() ? m.routed_expert_hidden_size : l.cfg.hidden_size;
  std::vector<float> out(static_cast<size_t>(rows * width), 0.0f);
  const kernels::GluParams act = GluFromConfig(l.cfg);
  for (int64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < m.num_experts_per_token; ++j) {
      const int32_t e = ids[r * m.num_experts_per_token + j];
      if (e < 0) continue;
      const ExpertWeights& ew = l.w.experts[static_cast<size_t>(e)];
      const std::vector<float> y = RefGluFfn(act, ew.w1, ew.w3, ew.w2, z + r * width, 1);
      for (int64_t c = 0; c < width; ++c) {
        out[r * width + c] += weights[r * m.num_experts_per_token + j] * y[c];
      }
    }
  }
  return out;
}

// The whole block by the reference, with the routing MoeRoute chose.
std::vector<float> RefMoe(const Layer& l, const std::vector<float>& x, int64_t rows,
                          Workspace& ws) {
  const MoeConfig& m = l.cfg.moe;
  std::vector<int32_t> ids(static_cast<size_t>(rows * m.num_experts_per_token));
  std::vector<float> weights(ids.size());
  MoeRoute(l.cfg, l.w, x.data(), rows, ids.data(), weights.data(), ws);
  std::vector<float> z = m.is_latent() ? RefLinear(l.w.latent_down, x.data(), rows) : x;
  std::vector<float> out = RefRouted(l, z.data(), rows, ids.data(), weights.data());
  if (m.is_latent()) {
    kernels::RmsNormReference(out.data(), rows, m.routed_expert_hidden_size, l.w.latent_norm.data(),
                              l.cfg.rms_norm_eps, out.data());
    out = RefLinear(l.w.latent_up, out.data(), rows);
  }
  const std::vector<float> shared =
      RefGluFfn(GluFromConfig(l.cfg), l.w.shared.gate_proj, l.w.shared.up_proj,
                l.w.shared.down_proj, x.data(), rows);
  for (size_t i = 0; i < out.size(); ++i) out[i] += shared[i];
  return out;
}

// |a − b| ≤ 1e-4 · max|b| (+1e-6): f32 accumulation against f64 over k ≤ 128; a missing,
// doubled or misweighted expert term is of the order of max|b|.
::testing::AssertionResult Close(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  float scale = 0.0f;
  for (float v : b) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(std::fabs(a[i] - b[i]) <= 1e-4f * scale + 1e-6f)) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs reference "
                                           << b[i] << " (max " << scale << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<float> RandomRows(int64_t count, Rng& rng) {
  std::vector<float> v(static_cast<size_t>(count));
  for (float& e : v) e = rng.Uniform();
  return v;
}

TEST(MoeTest, RunExpertsSkipsNegativeIdsCountsTokensAndMatchesReference) {
  for (bool mxfp4 : {false, true}) {
    const std::unique_ptr<Layer> l = MakeLayer(/*latent=*/true, mxfp4, 1);
    const MoeConfig& m = l->cfg.moe;
    const int64_t rows = 9, width = m.routed_expert_hidden_size, top_k = m.num_experts_per_token;
    Rng rng(2);
    const std::vector<float> z = RandomRows(rows * width, rng);
    std::vector<int32_t> ids(static_cast<size_t>(rows * top_k));
    std::vector<float> weights(ids.size());
    std::vector<int64_t> expected_tokens(static_cast<size_t>(m.num_experts), 5);
    for (size_t i = 0; i < ids.size(); ++i) {
      // Row 4: all ids on other ranks. Elsewhere about one id in four is.
      const bool remote = i / top_k == 4 || rng.Next() % 4 == 0;
      ids[i] = remote ? -1 : static_cast<int32_t>(rng.Next() % m.num_experts);
      weights[i] = rng.Uniform();
      if (!remote) ++expected_tokens[static_cast<size_t>(ids[i])];
    }
    std::vector<int64_t> tokens(static_cast<size_t>(m.num_experts), 5);
    std::vector<float> routed(static_cast<size_t>(rows * width), 123.0f);
    Workspace ws;
    MoeRunExperts(l->cfg, l->w, z.data(), rows, ids.data(), weights.data(), routed.data(),
                  tokens.data(), ws);
    EXPECT_TRUE(Close(routed, RefRouted(*l, z.data(), rows, ids.data(), weights.data())))
        << "mxfp4 " << mxfp4;
    EXPECT_EQ(tokens, expected_tokens);
    for (int64_t c = 0; c < width; ++c) EXPECT_EQ(routed[4 * width + c], 0.0f);
  }
}

TEST(MoeTest, ForwardMatchesReferenceWithAndWithoutLatentAndAllocatesNothingWhenWarm) {
  for (bool latent : {false, true}) {
    for (bool mxfp4 : {false, true}) {
      const std::unique_ptr<Layer> l = MakeLayer(latent, mxfp4, 3);
      for (int64_t rows : {1, 5, 70}) {
        Rng rng(4 + static_cast<uint32_t>(rows));
        const std::vector<float> x = RandomRows(rows * l->cfg.hidden_size, rng);
        std::vector<float> out(x.size());
        Workspace ws;
        MoeForward(l->cfg, l->w, 0, x.data(), rows, out.data(), nullptr, nullptr, ws);
        EXPECT_TRUE(Close(out, RefMoe(*l, x, rows, ws)))
            << "latent " << latent << " mxfp4 " << mxfp4 << " rows " << rows;
        const int64_t warm = ws.num_block_allocations();
        MoeForward(l->cfg, l->w, 0, x.data(), rows, out.data(), nullptr, nullptr, ws);
        EXPECT_EQ(ws.num_block_allocations(), warm) << "rows " << rows;
      }
    }
  }
}

// An exchange that keeps everything local: the seam must give what the local path gives.
class LocalExchange : public MoeExpertExchange {
 public:
  void Exchange(const ModelConfig& cfg, const MoeWeights& w, int, const float* z, int64_t num_rows,
                const int32_t* ids, const float* weights, float* routed, int64_t* expert_tokens,
                Workspace& ws) override {
    ++calls;
    MoeRunExperts(cfg, w, z, num_rows, ids, weights, routed, expert_tokens, ws);
  }
  int calls = 0;
};

TEST(MoeTest, ExchangePathGivesTheLocalResult) {
  for (bool latent : {false, true}) {
    const std::unique_ptr<Layer> l = MakeLayer(latent, /*mxfp4=*/false, 5);
    const int64_t rows = 6;
    Rng rng(6);
    const std::vector<float> x = RandomRows(rows * l->cfg.hidden_size, rng);
    std::vector<float> local(x.size()), exchanged(x.size());
    Workspace ws;
    LocalExchange exchange;
    MoeForward(l->cfg, l->w, 0, x.data(), rows, local.data(), nullptr, nullptr, ws);
    MoeForward(l->cfg, l->w, 0, x.data(), rows, exchanged.data(), nullptr, &exchange, ws);
    EXPECT_EQ(exchange.calls, 1);
    EXPECT_EQ(local, exchanged) << "latent " << latent;
  }
}

}  // namespace
}  // namespace strata::engine
