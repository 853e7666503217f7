// Weights quantised from a bf16 checkpoint (engine/weight_quantize.h). MXFP4 routed experts at
// load (`--quantization mxfp4`) and written once (`strata quantize`,
// engine/checkpoint_quantize.h): both give each expert exactly the codes core/mxfp4_quantize.h
// gives its stored values, leave every other weight as stored, and compute the same logits bit
// for bit. Int8 projections (`--quantization int8`, `mxfp4,int8`): each exactly
// core/int8_quantize.h's codes of its stored values, the embedding, routers and kv_b_proj kept.
#include "engine/weight_quantize.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/int8_quantize.h"
#include "core/mxfp4_quantize.h"
#include "engine/checkpoint_quantize.h"
#include "engine/demo/checkpoint_generator.h"
#include "engine/generator.h"
#include "engine/model.h"
#include "kernels/cpu/matmul.h"

namespace strata::engine {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class WeightQuantizeTest : public testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::TempDir() + "/weight_quantize_" + std::to_string(::getpid());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A bf16 checkpoint of `family` in `<root>/<name>` (two shards: the index is rewritten too).
  std::string Generate(const std::string& name, const std::string& family, bool mxfp4 = false,
                       std::map<std::string, std::string> overrides = {}) {
    engine::demo::GeneratorOptions options;
    options.family = family;
    options.seed = 5;
    options.num_shards = 2;
    options.mxfp4_experts = mxfp4;
    options.overrides = std::move(overrides);
    const std::string dir = root_ + "/" + name;
    EXPECT_TRUE(engine::demo::GenerateCheckpoint(options, dir).ok());
    return dir;
  }

  static std::unique_ptr<Model> Load(const std::string& dir, bool quantize, bool copy = true) {
    return Load(dir, quantize ? WeightQuantization::kMxfp4 : WeightQuantization::kNone, copy);
  }
  static std::unique_ptr<Model> Load(const std::string& dir, WeightQuantization scheme,
                                     bool copy = true) {
    ModelLoadOptions options;
    options.copy_weights = copy;
    options.quantization = scheme;
    auto model = Model::Load(dir, options);
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? std::move(*model) : nullptr;
  }

  static std::vector<float> Logits(const Model& model) {
    auto logits = PromptLogits(model, {5, 17, 3, 250, 9, 41, 7, 2, 88, 13}, 4);
    EXPECT_TRUE(logits.ok()) << logits.status();
    return logits.ok() ? *logits : std::vector<float>();
  }

  std::string root_;
};

// Every Linear of `a` and `b` side by side.
std::vector<std::pair<const Linear*, const Linear*>> Pairs(const Model& a, const Model& b) {
  std::vector<const Linear*> la, lb;
  ForEachLinear(a.weights(), [&](const Linear& w, LinearRole) { la.push_back(&w); });
  ForEachLinear(b.weights(), [&](const Linear& w, LinearRole) { lb.push_back(&w); });
  EXPECT_EQ(la.size(), lb.size());
  std::vector<std::pair<const Linear*, const Linear*>> out;
  for (size_t i = 0; i < std::min(la.size(), lb.size()); ++i) out.push_back({la[i], lb[i]});
  return out;
}

bool SameBytes(const Linear& a, const Linear& b) {
  return a.format == b.format && a.num_bytes() == b.num_bytes() &&
         std::memcmp(a.data, b.data, static_cast<size_t>(a.data_bytes())) == 0 &&
         (a.scales == nullptr ||
          std::memcmp(a.scales, b.scales, static_cast<size_t>(a.scale_bytes())) == 0);
}

TEST_F(WeightQuantizeTest, LoadQuantisesEachExpertAsItsStoredValuesAndNothingElse) {
  for (const std::string family : {"kimi-linear", "k3"}) {
    SCOPED_TRACE(family);
    const std::string dir = Generate(family, family);
    std::unique_ptr<Model> plain = Load(dir, false), quantized = Load(dir, true);
    ASSERT_TRUE(plain && quantized);
    int experts = 0, others = 0;
    int64_t expert_copy_bytes = 0;  // what the plain load copied of them (64-byte aligned)
    std::vector<LinearRole> roles;
    ForEachLinear(plain->weights(), [&](const Linear&, LinearRole role) { roles.push_back(role); });
    const auto pairs = Pairs(*plain, *quantized);
    for (size_t i = 0; i < pairs.size(); ++i) {
      const Linear& p = *pairs[i].first;
      const Linear& q = *pairs[i].second;
      if (p.empty()) continue;
      if (roles[i] != LinearRole::kRoutedExpert) {
        EXPECT_TRUE(SameBytes(p, q)) << "linear " << i << " is not a routed expert: unchanged";
        ++others;
        continue;
      }
      ASSERT_EQ(p.format, WeightFormat::kBf16);
      expert_copy_bytes += (p.data_bytes() + 63) / 64 * 64;
      ASSERT_EQ(q.format, WeightFormat::kMxfp4);
      std::vector<float> values(static_cast<size_t>(p.out_features * p.in_features));
      ConvertToF32(DType::kBF16, p.data, values.size(), values.data());
      const Mxfp4Weights expected = QuantizeMxfp4(values, p.out_features, p.in_features);
      ASSERT_EQ(std::memcmp(q.data, expected.packed.data(), expected.packed.size()), 0) << i;
      ASSERT_EQ(std::memcmp(q.scales, expected.scales.data(), expected.scales.size()), 0) << i;
      ++experts;
    }
    const ModelConfig& cfg = plain->config();
    int moe_layers = 0;
    for (int l = 0; l < cfg.num_layers; ++l) moe_layers += cfg.IsMoe(l) ? 1 : 0;
    EXPECT_EQ(experts, 3 * moe_layers * cfg.moe.num_experts);
    EXPECT_GT(others, 10);
    // The experts' bytes shrink to 17/64 (4 bits + 8 bits per 32 against 16 bits).
    const int64_t expert_bf16 = plain->weight_stats().routed_expert_bytes_per_layer_expert;
    EXPECT_EQ(quantized->weight_stats().routed_expert_bytes_per_layer_expert * 64,
              expert_bf16 * 17);
    // Quantised experts are not copied again; the other weights still are.
    EXPECT_EQ(quantized->weight_copy_bytes(), plain->weight_copy_bytes() - expert_copy_bytes);
    EXPECT_GT(quantized->weight_copy_bytes(), 0);

    // Coarser experts move the logits. How far says little on random tiny models (k3's tiny
    // one amplifies any change: 0.61 relative RMS; Kimi-Linear's 0.14); unrelated logits would
    // be ~1.4 apart. The bytes above are the check that matters.
    const std::vector<float> a = Logits(*plain), b = Logits(*quantized);
    ASSERT_EQ(a.size(), b.size());
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff += (a[i] - b[i]) * double{a[i] - b[i]};
      norm += a[i] * double{a[i]};
    }
    EXPECT_GT(std::sqrt(diff / norm), 1e-4);
    EXPECT_LT(std::sqrt(diff / norm), 1.0);
    // The copy to huge pages changes nothing.
    EXPECT_EQ(Logits(*Load(dir, true, /*copy=*/false)), b);
  }
}

// `strata quantize` with each scheme: the written checkpoint loads (no flag) with every weight's
// bytes those the same scheme gives at load, and the same logits bit for bit.
TEST_F(WeightQuantizeTest, WrittenCheckpointLoadsAsTheQuantisationAtLoad) {
  for (const std::string family : {"kimi-linear", "k3"}) {
    const std::string dir = Generate(family, family);
    std::ofstream(dir + "/chat_template.jinja") << "{{ messages }}";
    for (const auto& [scheme, suffix] : {std::pair{WeightQuantization::kMxfp4, "mxfp4"},
                                         {WeightQuantization::kInt8, "int8"},
                                         {WeightQuantization::kMxfp4Int8, "mxfp4-int8"}}) {
      SCOPED_TRACE(family + " " + suffix);
      const std::string out = root_ + "/" + family + "-" + suffix;
      auto written = QuantizeCheckpoint(dir, out, scheme);
      ASSERT_TRUE(written.ok()) << written.status();
      EXPECT_EQ(written->files, 2);
      EXPECT_LT(written->output_bytes, written->input_bytes);
      EXPECT_FALSE(fs::exists(out + ".partial"));

      std::unique_ptr<Model> online = Load(dir, scheme), offline = Load(out, false);
      ASSERT_TRUE(online && offline);
      EXPECT_EQ(offline->config().moe.mxfp4_experts, QuantizesExpertsToMxfp4(scheme))
          << "config.json has quantization_config";
      int64_t matrices = 0, int8 = 0;
      for (const auto& [a, b] : Pairs(*online, *offline)) {
        if (a->empty()) continue;
        EXPECT_TRUE(SameBytes(*a, *b));
        matrices += a->format == WeightFormat::kMxfp4 || a->format == WeightFormat::kInt8;
        int8 += a->format == WeightFormat::kInt8;
      }
      EXPECT_EQ(matrices, written->matrices);
      EXPECT_EQ(int8, written->int8_matrices);
      EXPECT_EQ(int8 > 0, QuantizesToInt8(scheme));
      EXPECT_EQ(Logits(*online), Logits(*offline));  // bit for bit
      // Quantising the written checkpoint at load finds nothing left to do.
      EXPECT_EQ(Logits(*Load(out, scheme)), Logits(*offline));

      // Shards keep their names; the index maps every output tensor to the shard holding it.
      const nlohmann::json index =
          nlohmann::json::parse(ReadAll(out + "/model.safetensors.index.json"));
      const nlohmann::json& map = index["weight_map"];
      const std::string layer = offline->config().tensor_prefix + "model.layers.1.";
      const std::string expert = layer + "block_sparse_moe.experts.0.w2.";
      EXPECT_EQ(map.contains(expert + "weight_packed"), QuantizesExpertsToMxfp4(scheme));
      EXPECT_EQ(map.contains(expert + "weight"), !QuantizesExpertsToMxfp4(scheme));
      EXPECT_TRUE(map.contains(expert + "weight_scale")) << map.dump().substr(0, 300);
      EXPECT_EQ(map.contains(layer + "self_attn.o_proj.weight_scale"), QuantizesToInt8(scheme));
      EXPECT_TRUE(map.contains(layer + "self_attn.o_proj.weight"));
      for (const auto& [name, shard] : map.items()) {
        EXPECT_TRUE(fs::exists(out + "/" + shard.get<std::string>())) << name;
      }
      EXPECT_EQ(ReadAll(out + "/chat_template.jinja"), "{{ messages }}");
      EXPECT_EQ(ReadAll(out + "/tiktoken.model"), ReadAll(dir + "/tiktoken.model"));
    }
  }
}

// K3's release (MXFP4 experts already): int8 written over it keeps the experts and records both
// groups in quantization_config.
TEST_F(WeightQuantizeTest, Int8WrittenOverMxfp4ExpertsKeepsThem) {
  const std::string dir = Generate("release", "k3", /*mxfp4=*/true);
  const std::string out = root_ + "/release-int8";
  // mxfp4,int8 finds the experts done and writes the int8 part, as int8 does.
  auto both = QuantizeCheckpoint(dir, root_ + "/release-both", WeightQuantization::kMxfp4Int8);
  ASSERT_TRUE(both.ok()) << both.status();
  auto written = QuantizeCheckpoint(dir, out, WeightQuantization::kInt8);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(both->matrices, written->matrices);
  EXPECT_EQ(ReadAll(root_ + "/release-both/config.json"), ReadAll(out + "/config.json"));
  EXPECT_EQ(written->matrices, written->int8_matrices);
  std::unique_ptr<Model> online = Load(dir, WeightQuantization::kInt8), offline = Load(out, false);
  ASSERT_TRUE(online && offline);
  EXPECT_TRUE(offline->config().moe.mxfp4_experts);
  for (const auto& [a, b] : Pairs(*online, *offline)) {
    if (!a->empty()) {
      EXPECT_TRUE(SameBytes(*a, *b));
    }
  }
  EXPECT_EQ(Logits(*online), Logits(*offline));
  const nlohmann::json config = nlohmann::json::parse(ReadAll(out + "/config.json"));
  const nlohmann::json& q = config.contains("text_config")
                                ? config["text_config"]["quantization_config"]
                                : config["quantization_config"];
  EXPECT_EQ(q["format"], "mixed-precision") << q.dump();
  EXPECT_EQ(q["config_groups"].size(), 2u) << q.dump();
  bool router_ignored = false;
  for (const auto& name : q["ignore"]) {
    router_ignored = router_ignored || name.get<std::string>().ends_with("block_sparse_moe.gate");
  }
  EXPECT_TRUE(router_ignored) << q["ignore"].dump();
}

// Expert parallelism: each scheme quantises only this process's routed experts (int8 the other
// projections as well).
TEST_F(WeightQuantizeTest, ExpertParallelismQuantisesOnlyThisProcesssExperts) {
  const std::string dir = Generate("ep", "kimi-linear");
  for (const WeightFormat target : {WeightFormat::kMxfp4, WeightFormat::kInt8}) {
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok());
    auto weights = LoadModelWeights(**ckpt);
    ASSERT_TRUE(weights.ok());
    const int64_t e = (*ckpt)->config().moe.num_experts;
    std::vector<bool> mine(static_cast<size_t>(e), false);
    mine[1] = mine[static_cast<size_t>(e - 1)] = true;
    auto q = target == WeightFormat::kMxfp4
                 ? QuantizeRoutedExperts((*ckpt)->config(), &*weights, mine)
                 : QuantizeLinearsInt8(**ckpt, &*weights, mine);
    ASSERT_TRUE(q.ok()) << q.status();
    int layers = 0;
    for (const LayerWeights& l : weights->layers) {
      if (!l.moe) continue;
      ++layers;
      for (int64_t x = 0; x < e; ++x) {
        const WeightFormat f = l.moe->experts[static_cast<size_t>(x)].w2.format;
        EXPECT_EQ(f, mine[static_cast<size_t>(x)] ? target : WeightFormat::kBf16) << x;
      }
    }
    if (target == WeightFormat::kMxfp4) {
      EXPECT_EQ(q->matrices, 2 * 3 * layers);
      EXPECT_EQ(q->quantized_bytes * 64, q->source_bytes * 17);  // 4 bits + 8 per 32
    } else {
      EXPECT_GT(q->matrices, 2 * 3 * layers);
      EXPECT_EQ(q->quantized_bytes * 32, q->source_bytes * 17);  // 8 bits + 16 per 32
    }
  }
}

TEST_F(WeightQuantizeTest, RefusalsNameWhatIsWrong) {
  const std::string dir = Generate("ok", "kimi-linear");
  // The output directory must be new.
  fs::create_directories(root_ + "/taken");
  auto taken = QuantizeCheckpoint(dir, root_ + "/taken", WeightQuantization::kMxfp4);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(taken.status().message().find("taken exists"), std::string::npos);

  // Experts that are MXFP4 already: nothing to write; at load the flag changes nothing.
  const std::string mxfp4 = Generate("mxfp4", "k3", /*mxfp4=*/true);
  auto again = QuantizeCheckpoint(mxfp4, root_ + "/again", WeightQuantization::kMxfp4);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(again.status().message().find("MXFP4 already"), std::string::npos) << again.status();
  EXPECT_FALSE(fs::exists(root_ + "/again.partial"));
  EXPECT_EQ(Logits(*Load(mxfp4, true)), Logits(*Load(mxfp4, false)));
  // vLLM's --quantization compressed-tensors: the checkpoint's own, which must be there.
  EXPECT_TRUE(Model::Load(mxfp4, {.quantization = WeightQuantization::kCheckpoint}).ok());
  const absl::Status none =
      Model::Load(dir, {.quantization = WeightQuantization::kCheckpoint}).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.message().find("no compressed-tensors quantization_config"), std::string::npos)
      << none;
  EXPECT_NE(none.message().find("--quantization mxfp4"), std::string::npos) << none;

  // An expert width that is not a whole number of 32-value groups.
  const std::string odd = Generate("odd", "kimi-linear", false, {{"expert_intermediate", "40"}});
  for (const absl::Status& status :
       {QuantizeCheckpoint(odd, root_ + "/odd-out", WeightQuantization::kMxfp4).status(),
        Model::Load(odd, {.quantization = WeightQuantization::kMxfp4}).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("experts.0.w2.weight"), std::string::npos) << status;
    EXPECT_NE(status.message().find("multiple of 32"), std::string::npos) << status;
    EXPECT_NE(status.message().find("40"), std::string::npos) << status;
  }
}

TEST(WeightQuantizationTest, FlagValuesAreTheSchemesOrNoneAndOthersAreNamed) {
  EXPECT_EQ(*ParseWeightQuantization(""), WeightQuantization::kNone);
  EXPECT_EQ(*ParseWeightQuantization("none"), WeightQuantization::kNone);
  EXPECT_EQ(*ParseWeightQuantization("mxfp4"), WeightQuantization::kMxfp4);
  EXPECT_EQ(*ParseWeightQuantization("int8"), WeightQuantization::kInt8);
  EXPECT_EQ(*ParseWeightQuantization("mxfp4,int8"), WeightQuantization::kMxfp4Int8);
  EXPECT_EQ(*ParseWeightQuantization("int8,mxfp4"), WeightQuantization::kMxfp4Int8);
  EXPECT_EQ(*ParseWeightQuantization("compressed-tensors"), WeightQuantization::kCheckpoint);
  for (const char* bad : {"fp8", "MXFP4", "awq", "int8,", "mxfp4,mxfp4", "int4"}) {
    const absl::Status status = ParseWeightQuantization(bad).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find(std::string("\"") + bad + "\" is not supported"),
              std::string::npos)
        << status;
    EXPECT_NE(status.message().find("mxfp4"), std::string::npos) << status;
  }
}

TEST_F(WeightQuantizeTest, NonFiniteExpertValuesAreRefusedWithTheirTensorAndRow) {
  engine::demo::GeneratorOptions options;
  options.family = "kimi-linear";
  options.seed = 5;
  const std::string dir = root_ + "/inf";
  ASSERT_TRUE(engine::demo::GenerateCheckpoint(options, dir).ok());
  // Overwrite one bf16 value of an expert (row 3) with +inf in the file.
  std::string name;
  size_t offset = 0;
  {
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok());
    name = (*ckpt)->config().tensor_prefix + "model.layers.2.block_sparse_moe.experts.4.w3.weight";
    auto t = (*ckpt)->Find(name);
    ASSERT_TRUE(t.ok()) << t.status();
    const std::string bytes = ReadAll(dir + "/model.safetensors");
    const std::string head(reinterpret_cast<const char*>((*t)->data), 64);
    offset = bytes.find(head);  // the tensor's first bytes (random values: unique)
    ASSERT_NE(offset, std::string::npos);
    offset += static_cast<size_t>(3 * (*t)->shape[1] + 7) * 2;
  }
  {
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    const char inf_bf16[2] = {'\x80', '\x7f'};
    f.write(inf_bf16, 2);
  }
  for (const absl::Status& status :
       {QuantizeCheckpoint(dir, root_ + "/inf-out", WeightQuantization::kMxfp4).status(),
        Model::Load(dir, {.quantization = WeightQuantization::kMxfp4}).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find(name + ": row 3 "), std::string::npos) << status;
    EXPECT_NE(status.message().find("infinite or NaN"), std::string::npos) << status;
  }
  EXPECT_FALSE(fs::exists(root_ + "/inf-out"));
  EXPECT_FALSE(fs::exists(root_ + "/inf-out.partial"));
  // Without the flag the checkpoint loads as before (the bf16 path reads the value as it is).
  EXPECT_TRUE(Model::Load(dir).ok());
}

// Each Linear of `q` against `p` (the same checkpoint loaded as stored): int8 exactly where
// QuantizeInt8Row puts it, else unchanged. Returns the number of int8 matrices.
int CheckInt8(const Model& p, const Model& q, bool experts_mxfp4) {
  std::vector<LinearRole> roles;
  ForEachLinear(p.weights(), [&](const Linear&, LinearRole role) { roles.push_back(role); });
  std::set<const Linear*> kept;  // routers and kv_b_proj of p
  for (const LayerWeights& l : p.weights().layers) {
    if (l.mla) kept.insert(&l.mla->kv_b_proj);
    if (l.moe) kept.insert(&l.moe->router);
  }
  int int8 = 0;
  const auto pairs = Pairs(p, q);
  for (size_t i = 0; i < pairs.size(); ++i) {
    const Linear& a = *pairs[i].first;
    const Linear& b = *pairs[i].second;
    if (a.empty()) continue;
    const bool expert = roles[i] == LinearRole::kRoutedExpert;
    if (roles[i] == LinearRole::kEmbedding || kept.contains(&a) || a.in_features % 32 != 0) {
      EXPECT_TRUE(SameBytes(a, b)) << "linear " << i << " is kept as stored";
      continue;
    }
    if (expert && experts_mxfp4) {
      EXPECT_EQ(b.format, WeightFormat::kMxfp4) << i;
      continue;
    }
    EXPECT_EQ(b.format, WeightFormat::kInt8) << "linear " << i;
    if (b.format != WeightFormat::kInt8) continue;
    ++int8;
    std::vector<int8_t> codes(static_cast<size_t>(a.out_features * a.in_features));
    std::vector<uint16_t> scales(codes.size() / 32);
    for (int64_t r = 0; r < a.out_features; ++r) {
      EXPECT_TRUE(QuantizeInt8Row(a.format == WeightFormat::kBf16 ? DType::kBF16 : DType::kF32,
                                  static_cast<const char*>(a.data) +
                                      r * a.in_features * (a.format == WeightFormat::kBf16 ? 2 : 4),
                                  a.in_features, codes.data() + r * a.in_features,
                                  scales.data() + r * (a.in_features / 32)));
    }
    EXPECT_EQ(std::memcmp(b.data, codes.data(), codes.size()), 0) << "linear " << i;
    EXPECT_EQ(std::memcmp(b.scales, scales.data(), 2 * scales.size()), 0) << "linear " << i;
  }
  return int8;
}

double RelativeRms(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff += (a[i] - b[i]) * double{a[i] - b[i]};
    norm += a[i] * double{a[i]};
  }
  return std::sqrt(diff / norm);
}

TEST_F(WeightQuantizeTest, Int8QuantisesEachProjectionAsItsStoredValuesAndKeepsTheRest) {
  for (const std::string family : {"kimi-linear", "k3"}) {
    SCOPED_TRACE(family);
    const std::string dir = Generate(family, family);
    std::unique_ptr<Model> plain = Load(dir, WeightQuantization::kNone);
    std::unique_ptr<Model> int8 = Load(dir, WeightQuantization::kInt8);
    std::unique_ptr<Model> mxfp4 = Load(dir, WeightQuantization::kMxfp4);
    std::unique_ptr<Model> both = Load(dir, WeightQuantization::kMxfp4Int8);
    ASSERT_TRUE(plain && int8 && mxfp4 && both);
    const int int8_matrices = CheckInt8(*plain, *int8, /*experts_mxfp4=*/false);
    EXPECT_GT(int8_matrices, 20);
    EXPECT_GT(int8_matrices, CheckInt8(*plain, *both, /*experts_mxfp4=*/true));
    EXPECT_EQ(plain->weights().lm_head.format, WeightFormat::kBf16);
    EXPECT_EQ(int8->weights().lm_head.format, WeightFormat::kInt8);
    EXPECT_EQ(int8->weights().embed.format, WeightFormat::kBf16);
    // mxfp4,int8: the experts are the mxfp4 load's, bit for bit.
    const auto m_pairs = Pairs(*mxfp4, *both);
    std::vector<LinearRole> roles;
    ForEachLinear(plain->weights(), [&](const Linear&, LinearRole role) { roles.push_back(role); });
    for (size_t i = 0; i < m_pairs.size(); ++i) {
      if (roles[i] == LinearRole::kRoutedExpert) {
        EXPECT_TRUE(SameBytes(*m_pairs[i].first, *m_pairs[i].second));
      }
    }
    // Quantised bytes are not copied to huge pages again; what stays as stored still is.
    EXPECT_LT(int8->weight_copy_bytes(), plain->weight_copy_bytes() / 4);
    EXPECT_LT(int8->weight_stats().total_bytes, plain->weight_stats().total_bytes * 6 / 10);
    EXPECT_GT(int8->weights().quantized_bytes(), 0);

    // Int8 groups move the logits less than MXFP4 experts do (each weight within 1/254 of its
    // group's largest, against ~1/12 for E2M1), though random tiny models amplify any change
    // (bf16 rounding of the activations alone moves the bench model's by 6 %); unrelated logits
    // would be ~1.4 apart. The copy to huge pages changes nothing.
    const std::vector<float> exact = Logits(*plain), q8 = Logits(*int8);
    const double int8_error = RelativeRms(exact, q8),
                 mxfp4_error = RelativeRms(exact, Logits(*mxfp4));
    EXPECT_GT(int8_error, 1e-5);
    EXPECT_LT(int8_error, mxfp4_error) << "int8 " << int8_error << ", mxfp4 " << mxfp4_error;
    EXPECT_EQ(Logits(*Load(dir, WeightQuantization::kInt8, /*copy=*/false)), q8);
  }
}

// --cpu-matmul-precision int8: decode-sized products (here a 10-token prompt: fewer than
// kBf16MinRows rows) with MXFP4 or int8 weights round their activations to int8 per 32 values.
// The logits move by that rounding, about as much as bf16 rounding moves them (8 significant
// bits either way; random tiny models amplify it through the layers), the greedy choices mostly
// stay; a model without such weights computes as under bf16, bit for bit (kInt8 includes kBf16's
// products: here the MLA prefill attention's).
TEST_F(WeightQuantizeTest, Int8ActivationsMoveOnlyTheQuantisedProductsByTheirRounding) {
  if (!kernels::cpu::Int8MatmulSupported()) GTEST_SKIP() << "no AVX512_VNNI here";
  for (const std::string family : {"kimi-linear", "k3"}) {
    SCOPED_TRACE(family);
    const std::string dir = Generate(family, family);
    std::unique_ptr<Model> plain = Load(dir, WeightQuantization::kNone);
    std::unique_ptr<Model> both = Load(dir, WeightQuantization::kMxfp4Int8);
    ASSERT_TRUE(plain && both);
    const std::vector<float> plain_exact = Logits(*plain), exact = Logits(*both);
    std::vector<float> plain_bf16, plain_int8, rounded;
    kernels::cpu::SetMatmulPrecision(kernels::cpu::MatmulPrecision::kBf16);
    plain_bf16 = Logits(*plain);
    kernels::cpu::SetMatmulPrecision(kernels::cpu::MatmulPrecision::kInt8);
    plain_int8 = Logits(*plain);
    rounded = Logits(*both);
    kernels::cpu::SetMatmulPrecision(kernels::cpu::MatmulPrecision::kF32);
    EXPECT_EQ(plain_int8, plain_bf16);
    EXPECT_NE(plain_int8, plain_exact);  // the MLA prefill's bf16 products do run
    const double moved = RelativeRms(exact, rounded);
    const int64_t vocab = plain->config().vocab_size;
    const int64_t rows = static_cast<int64_t>(exact.size()) / vocab;
    int kept = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const auto best = [&](const std::vector<float>& l) {
        return std::max_element(l.begin() + r * vocab, l.begin() + (r + 1) * vocab) - l.begin();
      };
      kept += best(exact) == best(rounded);
    }
    std::printf(
        "%s int8 activations: logits moved %.2e (relative RMS), argmax kept at %d of %lld\n",
        family.c_str(), moved, kept, static_cast<long long>(rows));
    EXPECT_GT(moved, 1e-5);
    EXPECT_LT(moved, 0.35);
    EXPECT_GE(kept * 10, rows * 7);
  }
}

// Tied embeddings: the head becomes its own int8 matrix, the embedding stays bf16 and is still
// read (its pages are not released), and the weight count holds both.
TEST_F(WeightQuantizeTest, Int8HeadOfTiedEmbeddingsIsCountedAndTheEmbeddingKept) {
  const std::string dir = Generate("tied", "kimi-linear");
  std::string config = ReadAll(dir + "/config.json");
  const std::string untied = "\"tie_word_embeddings\": false";
  ASSERT_NE(config.find(untied), std::string::npos) << config.substr(0, 400);
  config.replace(config.find(untied), untied.size(), "\"tie_word_embeddings\": true");
  std::ofstream(dir + "/config.json") << config;
  for (const WeightQuantization scheme : {WeightQuantization::kNone, WeightQuantization::kInt8}) {
    std::unique_ptr<Model> model = Load(dir, scheme);
    ASSERT_TRUE(model);
    const ModelWeights& w = model->weights();
    EXPECT_EQ(w.embed.format, WeightFormat::kBf16);
    EXPECT_EQ(w.lm_head.format,
              scheme == WeightQuantization::kInt8 ? WeightFormat::kInt8 : WeightFormat::kBf16);
    std::set<const void*> seen;
    int64_t distinct_bytes = 0;
    ForEachLinear(w, [&](const Linear& x, LinearRole) {
      if (!x.empty() && seen.insert(x.data).second) distinct_bytes += x.num_bytes();
    });
    EXPECT_EQ(model->weight_stats().total_bytes, distinct_bytes);
    EXPECT_FALSE(Logits(*model).empty());
  }
  // Written: the tied head stays the embedding's bf16 tensor (int8 again at load); the rest as
  // at load.
  auto written = QuantizeCheckpoint(dir, root_ + "/tied-int8", WeightQuantization::kInt8);
  ASSERT_TRUE(written.ok()) << written.status();
  std::unique_ptr<Model> offline = Load(root_ + "/tied-int8", WeightQuantization::kNone);
  std::unique_ptr<Model> online = Load(dir, WeightQuantization::kInt8);
  ASSERT_TRUE(offline && online);
  EXPECT_EQ(offline->weights().embed.format, WeightFormat::kBf16);
  EXPECT_EQ(offline->weights().lm_head.data, offline->weights().embed.data);
  std::vector<LinearRole> roles;
  ForEachLinear(online->weights(), [&](const Linear&, LinearRole r) { roles.push_back(r); });
  const auto pairs = Pairs(*online, *offline);
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (roles[i] != LinearRole::kLmHead && !pairs[i].first->empty()) {
      EXPECT_TRUE(SameBytes(*pairs[i].first, *pairs[i].second)) << i;
    }
  }
  EXPECT_EQ(Logits(*Load(root_ + "/tied-int8", WeightQuantization::kInt8)), Logits(*online));
}

TEST_F(WeightQuantizeTest, NonFiniteProjectionValuesAreRefusedWithTheirTensorAndRow) {
  const std::string dir = Generate("nan", "kimi-linear");
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  // A NaN in a projection: refused, naming the tensor and the row.
  const std::string name =
      (*ckpt)->config().tensor_prefix + "model.layers.0.self_attn.o_proj.weight";
  auto t = (*ckpt)->Find(name);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string file = (*t)->file;
  const size_t start =
      ReadAll(file).find(std::string(reinterpret_cast<const char*>((*t)->data), 64));
  ASSERT_NE(start, std::string::npos);
  const size_t offset = start + static_cast<size_t>(5 * (*t)->shape[1] + 2) * 2;
  ckpt->reset();
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    const char nan_bf16[2] = {'\xc0', '\x7f'};
    f.write(nan_bf16, 2);
  }
  const absl::Status status =
      Model::Load(dir, {.quantization = WeightQuantization::kInt8}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(name + ": row 5 "), std::string::npos) << status;
  EXPECT_NE(status.message().find("int8 cannot represent"), std::string::npos) << status;
}

}  // namespace
}  // namespace strata::engine
