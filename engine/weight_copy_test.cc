// Model::Load's weight copy (engine/weight_copy.h): with the copy every streamed Linear lives
// outside the checkpoint's file mapping (the embedding stays mapped unless the LM head shares
// it), holds the same bytes, and the model computes bit-identical logits; without it every
// Linear reads from the mapping.
#include "engine/weight_copy.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/demo/checkpoint_generator.h"
#include "engine/model.h"

namespace strata::engine {
namespace {

// [begin, end) of every mapping of a .safetensors file in this process (/proc/self/maps).
std::vector<std::pair<uintptr_t, uintptr_t>> SafetensorsMappings() {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(".safetensors") == std::string::npos) continue;
    std::istringstream fields(line);
    std::string range;
    fields >> range;
    const size_t dash = range.find('-');
    ranges.emplace_back(std::stoull(range.substr(0, dash), nullptr, 16),
                        std::stoull(range.substr(dash + 1), nullptr, 16));
  }
  return ranges;
}

bool InMapping(const void* p, const std::vector<std::pair<uintptr_t, uintptr_t>>& ranges) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (const auto& [begin, end] : ranges) {
    if (a >= begin && a < end) return true;
  }
  return false;
}

struct Case {
  std::string name, family;
  bool mxfp4 = false, tied = false;
};

class WeightCopyTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    dir_ =
        testing::TempDir() + "/weight_copy_" + GetParam().name + "_" + std::to_string(::getpid());
    engine::demo::GeneratorOptions options;
    options.family = GetParam().family;
    options.seed = 3;
    options.mxfp4_experts = GetParam().mxfp4;
    if (GetParam().tied) options.overrides["tie_embeddings"] = "true";
    ASSERT_TRUE(engine::demo::GenerateCheckpoint(options, dir_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Model> Load(bool copy, int64_t max_copy_bytes = -1) {
    ModelLoadOptions options;
    options.copy_weights = copy;
    options.max_copy_bytes = max_copy_bytes;
    auto model = Model::Load(dir_, options);
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? std::move(*model) : nullptr;
  }

  std::string dir_;
};

std::vector<float> PromptLogits(const Model& model) {
  const std::vector<int32_t> prompt = {5, 17, 3, 250, 9, 41, 7};
  SequenceCache cache(model.geometry(), static_cast<int64_t>(prompt.size()));
  ForwardSequence seq{prompt.data(), static_cast<int64_t>(prompt.size()), 0, cache.view(),
                      LogitsMode::kAll};
  std::vector<float> logits;
  model.Forward({seq}, &logits);
  return logits;
}

TEST_P(WeightCopyTest, CopiesLeaveTheMappingWithTheSameBytesAndLogits) {
  std::unique_ptr<Model> mapped = Load(false), copied = Load(true, int64_t{1} << 40);
  ASSERT_TRUE(mapped && copied);
  const auto mappings = SafetensorsMappings();
  ASSERT_FALSE(mappings.empty());

  std::vector<std::pair<const Linear*, LinearRole>> from_mapped, from_copied;
  ForEachLinear(mapped->weights(), [&](const Linear& w, LinearRole role) {
    from_mapped.push_back({&w, role});
  });
  ForEachLinear(copied->weights(), [&](const Linear& w, LinearRole role) {
    from_copied.push_back({&w, role});
  });
  ASSERT_EQ(from_mapped.size(), from_copied.size());
  int checked = 0, mxfp4 = 0;
  for (size_t i = 0; i < from_mapped.size(); ++i) {
    const Linear& m = *from_mapped[i].first;
    const Linear& c = *from_copied[i].first;
    const LinearRole role = from_mapped[i].second;
    ASSERT_EQ(m.empty(), c.empty()) << "linear " << i;
    if (m.empty()) continue;
    SCOPED_TRACE("linear " + std::to_string(i) + " [" + std::to_string(m.out_features) + ", " +
                 std::to_string(m.in_features) + "]");
    ASSERT_EQ(m.format, c.format);
    EXPECT_TRUE(InMapping(m.data, mappings)) << "without the copy every weight is mapped";
    const bool stays_mapped = role == LinearRole::kEmbedding && !GetParam().tied;
    EXPECT_EQ(InMapping(c.data, mappings), stays_mapped);
    const auto scale_bytes = m.format == WeightFormat::kMxfp4
                                 ? static_cast<size_t>(m.out_features * (m.in_features / 32))
                                 : size_t{0};
    ASSERT_EQ(std::memcmp(m.data, c.data, static_cast<size_t>(m.num_bytes()) - scale_bytes), 0);
    if (m.format == WeightFormat::kMxfp4) {
      ++mxfp4;
      EXPECT_FALSE(InMapping(c.scales, mappings));
      EXPECT_EQ(std::memcmp(m.scales, c.scales, scale_bytes), 0);
    }
    ++checked;
  }
  EXPECT_GT(checked, 10);
  EXPECT_EQ(mxfp4 > 0, GetParam().mxfp4);
  if (GetParam().tied) {
    EXPECT_EQ(copied->weights().lm_head.data, copied->weights().embed.data) << "one copy";
  }
  EXPECT_EQ(copied->weight_stats().total_bytes, mapped->weight_stats().total_bytes);
  EXPECT_EQ(PromptLogits(*copied), PromptLogits(*mapped));  // bit for bit
}

// A copy larger than the memory allowed for it is not made: every weight stays mapped.
TEST_P(WeightCopyTest, ACopyThatDoesNotFitLeavesTheWeightsMapped) {
  std::unique_ptr<Model> model = Load(true, /*max_copy_bytes=*/4096);
  ASSERT_TRUE(model);
  const auto mappings = SafetensorsMappings();
  int linears = 0;
  ForEachLinear(model->weights(), [&](const Linear& w, LinearRole) {
    if (w.empty()) return;
    ++linears;
    EXPECT_TRUE(InMapping(w.data, mappings));
  });
  EXPECT_GT(linears, 10);
  EXPECT_GT(MappedLinearBytes(model->weights()), 4096);
}

// Expert parallelism: a process copies only the routed experts it runs; the others stay in the
// mapping (never read there), everything else is copied as before.
TEST_P(WeightCopyTest, OnlyTheProcesssRoutedExpertsAreCopied) {
  ModelLoadOptions options;
  options.max_copy_bytes = int64_t{1} << 40;
  std::unique_ptr<Model> all = Load(true, options.max_copy_bytes);
  ASSERT_TRUE(all);
  const int num_experts = all->config().moe.num_experts;
  ASSERT_GT(num_experts, 1);
  options.routed_experts.assign(static_cast<size_t>(num_experts), false);
  for (int e = 0; e < num_experts; e += 2) options.routed_experts[static_cast<size_t>(e)] = true;
  auto loaded = Model::Load(dir_, options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Model& half = **loaded;
  const auto mappings = SafetensorsMappings();
  int kept = 0, left = 0;
  int64_t left_bytes = 0;  // what the copy skipped: the unrun experts, each range aligned
  auto aligned = [](int64_t bytes) {
    const int64_t a = AlignedBuffer::kAlignment;
    return (bytes + a - 1) / a * a;
  };
  for (const LayerWeights& layer : half.weights().layers) {
    if (!layer.moe) continue;
    EXPECT_FALSE(InMapping(layer.moe->router.data, mappings));
    for (int e = 0; e < num_experts; ++e) {
      const ExpertWeights& x = layer.moe->experts[static_cast<size_t>(e)];
      const bool runs = options.routed_experts[static_cast<size_t>(e)];
      for (const Linear* w : {&x.w1, &x.w3, &x.w2}) {
        EXPECT_EQ(InMapping(w->data, mappings), !runs) << "expert " << e;
        (runs ? kept : left) += 1;
        if (!runs) left_bytes += aligned(w->data_bytes()) + aligned(w->scale_bytes());
      }
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(left, 0);
  EXPECT_EQ(half.weight_copy_bytes(), all->weight_copy_bytes() - left_bytes);
  EXPECT_EQ(PromptLogits(half), PromptLogits(*all));  // the mapped experts hold the same bytes
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, WeightCopyTest,
                         testing::Values(Case{"k3", "k3"}, Case{"k3_mxfp4", "k3", true},
                                         Case{"kimi_linear_tied", "kimi-linear", false, true}),
                         [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace strata::engine
