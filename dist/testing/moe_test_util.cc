#include "dist/testing/moe_test_util.h"

#include <algorithm>
#include <random>
#include <utility>

#include "core/check.h"
#include "core/tensor.h"

namespace strata::dist::testing {

engine::Linear F32Linear(int64_t out, int64_t in,
                         const std::function<float(int64_t, int64_t)>& value) {
  engine::Linear l;
  l.format = engine::WeightFormat::kF32;
  l.out_features = out;
  l.in_features = in;
  l.owned = AlignedBuffer(static_cast<size_t>(out * in) * sizeof(float));
  float* data = l.owned.as<float>();
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) data[o * in + i] = value(o, i);
  }
  l.data = data;
  return l;
}

TinyMoe MakeMoe(int num_experts, int top_k, bool latent, uint32_t seed) {
  TinyMoe moe;
  moe.cfg.hidden_size = 40;
  moe.cfg.activation = latent ? engine::FfnActivation::kSitu : engine::FfnActivation::kSwiGlu;
  moe.cfg.situ_beta = 4.0f;
  moe.cfg.situ_linear_beta = 25.0f;
  moe.cfg.moe.num_experts = num_experts;
  moe.cfg.moe.num_experts_per_token = top_k;
  moe.cfg.moe.moe_intermediate_size = 24;
  moe.cfg.moe.routed_expert_hidden_size = latent ? 28 : 0;
  moe.width = latent ? 28 : 40;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.4f, 0.4f);
  auto random = [&](int64_t, int64_t) { return u(rng); };
  const int64_t inter = moe.cfg.moe.moe_intermediate_size;
  for (int e = 0; e < num_experts; ++e) {
    engine::ExpertWeights ew;
    ew.w1 = F32Linear(inter, moe.width, random);
    ew.w3 = F32Linear(inter, moe.width, random);
    ew.w2 = F32Linear(moe.width, inter, random);
    moe.w.experts.push_back(std::move(ew));
  }
  return moe;
}

RankInput MakeInput(const TinyMoe& moe, int64_t rows, Routing routing,
                    const ExpertPlacement& placement, uint32_t seed) {
  const int k = moe.cfg.moe.num_experts_per_token, num_experts = moe.cfg.moe.num_experts;
  if (routing == Routing::kAllToExpert0) CHECK_EQ(k, 1);
  if (routing == Routing::kOneExpertPerRankSlot) CHECK_EQ(k, placement.world_size);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), positive(0.1f, 1.0f);
  RankInput in;
  in.rows = rows;
  for (int64_t i = 0; i < rows * moe.width; ++i) in.z.push_back(u(rng));
  std::vector<int32_t> all(static_cast<size_t>(num_experts));
  for (int e = 0; e < num_experts; ++e) all[static_cast<size_t>(e)] = e;
  for (int64_t r = 0; r < rows; ++r) {
    if (routing == Routing::kRandom) {
      std::shuffle(all.begin(), all.end(), rng);
      in.ids.insert(in.ids.end(), all.begin(), all.begin() + k);
    } else if (routing == Routing::kAllToExpert0) {
      in.ids.push_back(0);
    } else {
      const size_t first = in.ids.size();
      for (int j = 0; j < k; ++j) {
        std::vector<int> candidates;
        for (int e : placement.local[static_cast<size_t>(j)]) {
          if (std::find(in.ids.begin() + first, in.ids.end(), e) == in.ids.end()) {
            candidates.push_back(e);
          }
        }
        CHECK(!candidates.empty()) << "rank " << j << " has no expert left for slot " << j;
        in.ids.push_back(candidates[rng() % candidates.size()]);
      }
    }
    for (int j = 0; j < k; ++j) in.weights.push_back(positive(rng));
  }
  return in;
}

RankInput Concatenate(const std::vector<RankInput>& inputs) {
  RankInput all;
  for (const auto& in : inputs) {
    all.z.insert(all.z.end(), in.z.begin(), in.z.end());
    all.ids.insert(all.ids.end(), in.ids.begin(), in.ids.end());
    all.weights.insert(all.weights.end(), in.weights.begin(), in.weights.end());
    all.rows += in.rows;
  }
  return all;
}

}  // namespace strata::dist::testing
