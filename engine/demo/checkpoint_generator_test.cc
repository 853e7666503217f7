#include "engine/demo/checkpoint_generator.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "engine/demo/demo_tokenizer.h"
#include "engine/demo/tensor_layout.h"
#include "engine/model_config.h"

namespace strata::engine::demo {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// ---- a minimal, independent safetensors reader (docs/checkpoint.md §1 rule 2)
// ---------------------

struct StoredTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  std::string file;
};

std::vector<uint8_t> ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Every tensor of every *.safetensors file in `dir`.
std::map<std::string, StoredTensor> ReadAllTensors(const fs::path& dir) {
  std::map<std::string, StoredTensor> tensors;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    const std::vector<uint8_t> file = ReadBytes(entry.path());
    uint64_t header_size = 0;
    for (int i = 0; i < 8; ++i) header_size |= static_cast<uint64_t>(file.at(i)) << (8 * i);
    const nlohmann::json header = nlohmann::json::parse(
        std::string(file.begin() + 8, file.begin() + 8 + static_cast<int64_t>(header_size)));
    for (const auto& [name, info] : header.items()) {
      if (name == "__metadata__") continue;
      StoredTensor t;
      t.dtype = info["dtype"].get<std::string>();
      t.shape = info["shape"].get<std::vector<int64_t>>();
      const uint64_t begin = 8 + header_size + info["data_offsets"][0].get<uint64_t>();
      const uint64_t end = 8 + header_size + info["data_offsets"][1].get<uint64_t>();
      t.bytes.assign(file.begin() + static_cast<int64_t>(begin),
                     file.begin() + static_cast<int64_t>(end));
      t.file = entry.path().filename().string();
      EXPECT_TRUE(tensors.emplace(name, std::move(t)).second) << name << " stored twice";
    }
  }
  return tensors;
}

nlohmann::json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Directories made by FreshDir, removed when the test program ends.
std::vector<fs::path>& CreatedDirs() {
  static auto* dirs = new std::vector<fs::path>();
  return *dirs;
}

class RemoveCreatedDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const fs::path& dir : CreatedDirs()) fs::remove_all(dir);
  }
};
[[maybe_unused]] ::testing::Environment* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new RemoveCreatedDirs);

// An empty directory private to this process (other builds may run the same test concurrently).
fs::path FreshDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       absl::StrCat("checkpoint_generator_test_", getpid(), "_", name);
  fs::remove_all(dir);
  CreatedDirs().push_back(dir);
  return dir;
}

GeneratedCheckpoint Generate(const GeneratorOptions& options, const fs::path& dir) {
  absl::StatusOr<GeneratedCheckpoint> result = GenerateCheckpoint(options, dir.string());
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : GeneratedCheckpoint{};
}

// ---- expected tensor lists, transcribed from docs/checkpoint.md §3/§4 for the tiny presets
// -------- Tiny preset (task spec): d 96, V 512, 6 layers with MLA at 0-based 3 and 5, KDA 2 heads
// × 32 (P 64), conv 4, MLA 3 heads, d_n 16, d_r 8, d_v 16, r_kv 32, dense layer 0 width 160, 8
// experts of width 32. K3: r_q 48, latent 64, 2 shared experts; K-L: 1 shared expert.

using Expected = std::map<std::string, std::pair<std::string, std::vector<int64_t>>>;

constexpr int64_t kD = 96, kV = 512, kP = 64, kDk = 32, kHk = 2, kK = 4, kH = 3, kRq = 48,
                  kRkv = 32, kDn = 16, kDr = 8, kDv = 16, kIDense = 160, kE = 8, kI = 32,
                  kLatent = 64;
constexpr int kLayers = 6;
bool IsMlaLayer(int l) { return l == 3 || l == 5; }

Expected ExpectedK3Tiny(bool mxfp4) {
  const std::string m = "language_model.model.";
  Expected x;
  x["language_model.model.embed_tokens.weight"] = {"BF16", {kV, kD}};
  x["language_model.model.norm.weight"] = {"BF16", {kD}};
  x["language_model.model.output_attn_res_norm.weight"] = {"BF16", {kD}};
  x["language_model.model.output_attn_res_proj.weight"] = {"BF16", {1, kD}};
  x["language_model.lm_head.weight"] = {"BF16", {kV, kD}};
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = absl::StrCat(m, "layers.", l, ".");
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "self_attention_res_norm",
                          "mlp_res_norm"}) {
      x[p + n + ".weight"] = {"BF16", {kD}};
    }
    x[p + "self_attention_res_proj.weight"] = {"BF16", {1, kD}};
    x[p + "mlp_res_proj.weight"] = {"BF16", {1, kD}};
    const std::string a = p + "self_attn.";
    if (IsMlaLayer(l)) {
      x[a + "q_a_proj.weight"] = {"BF16", {kRq, kD}};
      x[a + "q_a_layernorm.weight"] = {"BF16", {kRq}};
      x[a + "q_b_proj.weight"] = {"BF16", {kH * (kDn + kDr), kRq}};
      x[a + "kv_a_proj_with_mqa.weight"] = {"BF16", {kRkv + kDr, kD}};
      x[a + "kv_a_layernorm.weight"] = {"BF16", {kRkv}};
      x[a + "kv_b_proj.weight"] = {"BF16", {kH * (kDn + kDv), kRkv}};
      x[a + "g_proj.weight"] = {"BF16", {kH * kDv, kD}};
      x[a + "o_proj.weight"] = {"BF16", {kD, kH * kDv}};
    } else {
      for (const char* n : {"q", "k", "v"}) {
        x[a + n + "_proj.weight"] = {"BF16", {kP, kD}};
        x[a + n + "_conv1d.weight"] = {"F32", {kP, 1, kK}};
      }
      x[a + "f_a_proj.weight"] = {"BF16", {kDk, kD}};
      x[a + "f_b_proj.weight"] = {"BF16", {kP, kDk}};
      x[a + "A_log"] = {"F32", {kDk}};  // [D_k], zero-padded beyond H_k
      x[a + "dt_bias"] = {"F32", {kP}};
      x[a + "b_proj.weight"] = {"BF16", {kHk, kD}};
      x[a + "g_proj.weight"] = {"BF16", {kP, kD}};
      x[a + "o_norm.weight"] = {"F32", {kDk}};
      x[a + "o_proj.weight"] = {"BF16", {kD, kP}};
    }
    if (l == 0) {
      x[p + "mlp.gate_proj.weight"] = {"BF16", {kIDense, kD}};
      x[p + "mlp.up_proj.weight"] = {"BF16", {kIDense, kD}};
      x[p + "mlp.down_proj.weight"] = {"BF16", {kD, kIDense}};
      continue;
    }
    const std::string e = p + "block_sparse_moe.";
    x[e + "gate.weight"] = {"BF16", {kE, kD}};
    x[e + "gate.e_score_correction_bias"] = {"F32", {kE}};
    x[e + "routed_expert_down_proj.weight"] = {"BF16", {kLatent, kD}};
    x[e + "routed_expert_norm.weight"] = {"BF16", {kLatent}};
    x[e + "routed_expert_up_proj.weight"] = {"BF16", {kD, kLatent}};
    x[e + "shared_experts.gate_proj.weight"] = {"BF16", {2 * kI, kD}};
    x[e + "shared_experts.up_proj.weight"] = {"BF16", {2 * kI, kD}};
    x[e + "shared_experts.down_proj.weight"] = {"BF16", {kD, 2 * kI}};
    for (int i = 0; i < kE; ++i) {
      const std::string w = absl::StrCat(e, "experts.", i, ".");
      if (mxfp4) {
        x[w + "w1.weight_packed"] = {"U8", {kI, kLatent / 2}};
        x[w + "w1.weight_scale"] = {"U8", {kI, kLatent / 32}};
        x[w + "w3.weight_packed"] = {"U8", {kI, kLatent / 2}};
        x[w + "w3.weight_scale"] = {"U8", {kI, kLatent / 32}};
        x[w + "w2.weight_packed"] = {"U8", {kLatent, kI / 2}};
        x[w + "w2.weight_scale"] = {"U8", {kLatent, kI / 32}};
      } else {
        x[w + "w1.weight"] = {"BF16", {kI, kLatent}};
        x[w + "w3.weight"] = {"BF16", {kI, kLatent}};
        x[w + "w2.weight"] = {"BF16", {kLatent, kI}};
      }
    }
  }
  return x;
}

Expected ExpectedKimiLinearTiny() {
  Expected x;
  x["model.embed_tokens.weight"] = {"BF16", {kV, kD}};
  x["model.norm.weight"] = {"BF16", {kD}};
  x["lm_head.weight"] = {"BF16", {kV, kD}};
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    x[p + "input_layernorm.weight"] = {"BF16", {kD}};
    x[p + "post_attention_layernorm.weight"] = {"BF16", {kD}};
    const std::string a = p + "self_attn.";
    if (IsMlaLayer(l)) {
      x[a + "q_proj.weight"] = {"BF16", {kH * (kDn + kDr), kD}};
      x[a + "kv_a_proj_with_mqa.weight"] = {"BF16", {kRkv + kDr, kD}};
      x[a + "kv_a_layernorm.weight"] = {"BF16", {kRkv}};
      x[a + "kv_b_proj.weight"] = {"BF16", {kH * (kDn + kDv), kRkv}};
      x[a + "o_proj.weight"] = {"BF16", {kD, kH * kDv}};
    } else {
      for (const char* n : {"q", "k", "v"}) {
        x[a + n + "_proj.weight"] = {"BF16", {kP, kD}};
        x[a + n + "_conv1d.weight"] = {"BF16", {kP, 1, kK}};
      }
      x[a + "f_a_proj.weight"] = {"BF16", {kDk, kD}};
      x[a + "f_b_proj.weight"] = {"BF16", {kP, kDk}};
      x[a + "A_log"] = {"F32", {1, 1, kHk, 1}};
      x[a + "dt_bias"] = {"F32", {kP}};
      x[a + "b_proj.weight"] = {"BF16", {kHk, kD}};
      x[a + "g_a_proj.weight"] = {"BF16", {kDk, kD}};
      x[a + "g_b_proj.weight"] = {"BF16", {kP, kDk}};
      x[a + "o_norm.weight"] = {"BF16", {kDk}};
      x[a + "o_proj.weight"] = {"BF16", {kD, kP}};
    }
    if (l == 0) {
      x[p + "mlp.gate_proj.weight"] = {"BF16", {kIDense, kD}};
      x[p + "mlp.up_proj.weight"] = {"BF16", {kIDense, kD}};
      x[p + "mlp.down_proj.weight"] = {"BF16", {kD, kIDense}};
      continue;
    }
    const std::string e = p + "block_sparse_moe.";
    x[e + "gate.weight"] = {"BF16", {kE, kD}};
    x[e + "gate.e_score_correction_bias"] = {"BF16", {kE}};
    x[e + "shared_experts.gate_proj.weight"] = {"BF16", {kI, kD}};
    x[e + "shared_experts.up_proj.weight"] = {"BF16", {kI, kD}};
    x[e + "shared_experts.down_proj.weight"] = {"BF16", {kD, kI}};
    for (int i = 0; i < kE; ++i) {
      const std::string w = absl::StrCat(e, "experts.", i, ".");
      x[w + "w1.weight"] = {"BF16", {kI, kD}};
      x[w + "w3.weight"] = {"BF16", {kI, kD}};
      x[w + "w2.weight"] = {"BF16", {kD, kI}};
    }
  }
  return x;
}

bool IsVisionTensor(const std::string& name) {
  return absl::StartsWith(name, "vision_tower.") || absl::StartsWith(name, "mm_projector.");
}

void ExpectExactly(const Expected& expected, const std::map<std::string, StoredTensor>& stored) {
  std::set<std::string> language_model;
  for (const auto& [name, tensor] : stored) {
    if (!IsVisionTensor(name)) language_model.insert(name);
  }
  for (const auto& [name, want] : expected) {
    auto it = stored.find(name);
    if (it == stored.end()) {
      ADD_FAILURE() << "missing " << name;
      continue;
    }
    EXPECT_EQ(it->second.dtype, want.first) << name;
    EXPECT_EQ(it->second.shape, want.second) << name;
  }
  for (const std::string& name : language_model) {
    EXPECT_TRUE(expected.contains(name)) << "unexpected tensor " << name;
  }
}

// ---- tests ---------------------------------------------------------------------------------

TEST(CheckpointGeneratorTest, K3TinyHoldsExactlyTheTensorsOfCheckpointMd) {
  const fs::path dir = FreshDir("k3_names");
  Generate({.family = "k3", .preset = "tiny"}, dir);
  const auto stored = ReadAllTensors(dir);
  ExpectExactly(ExpectedK3Tiny(/*mxfp4=*/false), stored);
  // Text only without --vision: no tower, no vision_config, no preprocessor_config.json.
  for (const auto& [name, tensor] : stored) EXPECT_FALSE(IsVisionTensor(name)) << name;
  EXPECT_FALSE(ReadJson(dir / "config.json").contains("vision_config"));
  EXPECT_FALSE(fs::exists(dir / "preprocessor_config.json"));
}

TEST(CheckpointGeneratorTest, KimiLinearTinyHoldsExactlyTheTensorsOfCheckpointMd) {
  const fs::path dir = FreshDir("kl_names");
  Generate({.family = "kimi-linear", .preset = "tiny"}, dir);
  const auto stored = ReadAllTensors(dir);
  ExpectExactly(ExpectedKimiLinearTiny(), stored);
  for (const auto& [name, tensor] : stored) EXPECT_FALSE(IsVisionTensor(name)) << name;
}

TEST(CheckpointGeneratorTest, Mxfp4ExpertsAreStoredPackedWithQuantizationConfig) {
  const fs::path dir = FreshDir("k3_mxfp4");
  Generate({.family = "k3", .preset = "tiny", .mxfp4_experts = true}, dir);
  ExpectExactly(ExpectedK3Tiny(/*mxfp4=*/true), ReadAllTensors(dir));
  const nlohmann::json config = ReadJson(dir / "config.json");
  ASSERT_TRUE(config.contains("quantization_config"));
  const nlohmann::json& q = config["quantization_config"];
  EXPECT_EQ(q["quant_method"], "compressed-tensors");
  EXPECT_EQ(q["format"], "mxfp4-pack-quantized");
  EXPECT_EQ(q["config_groups"]["group_0"]["weights"]["group_size"], 32);
  EXPECT_TRUE(q["ignore"].is_array());
  EXPECT_EQ(config["text_config"]["quantization_config"], q);
}

float Bf16At(const StoredTensor& t, size_t i) {
  return Bf16ToF32(static_cast<uint16_t>(t.bytes[2 * i] | (t.bytes[2 * i + 1] << 8)));
}

TEST(CheckpointGeneratorTest, Mxfp4ExpertsQuantizeTheBf16CheckpointsWeights) {
  const fs::path plain = FreshDir("mxfp4_plain");
  const fs::path quantized = FreshDir("mxfp4_quantized");
  Generate({.family = "k3", .preset = "tiny", .seed = 4}, plain);
  Generate({.family = "k3", .preset = "tiny", .seed = 4, .mxfp4_experts = true}, quantized);
  const auto bf16 = ReadAllTensors(plain);
  const auto mx = ReadAllTensors(quantized);
  int checked = 0;
  for (const char* w : {"w1", "w2", "w3"}) {
    const std::string base =
        absl::StrCat("language_model.model.layers.2.block_sparse_moe.experts.5.", w);
    const StoredTensor& reference = bf16.at(base + ".weight");
    const StoredTensor& packed = mx.at(base + ".weight_packed");
    const StoredTensor& scales = mx.at(base + ".weight_scale");
    const int64_t rows = reference.shape[0], cols = reference.shape[1];
    std::vector<float> decoded(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      DecodeMxfp4(packed.bytes.data() + r * cols / 2, scales.bytes.data() + r * cols / 32,
                  static_cast<size_t>(cols), decoded.data());
      for (int64_t c = 0; c < cols; ++c) {
        const float want = Bf16At(reference, static_cast<size_t>(r * cols + c));
        const float scale = std::ldexp(1.0f, scales.bytes[r * cols / 32 + c / 32] - 127);
        // Half an E2M1 step at this magnitude, plus the bf16 rounding of the reference.
        const float magnitude = std::fabs(want) / scale * (1.0f + 0x1.0p-7f);
        if (std::fabs(want) / scale > 6.0f) {  // saturated at the finer of the group's scales
          ASSERT_EQ(decoded[c], std::copysign(6.0f * scale, want))
              << base << " [" << r << ", " << c << "]";
          ++checked;
          continue;
        }
        const float half_step = magnitude < 2.0f ? 0.25f : (magnitude < 4.0f ? 0.5f : 1.0f);
        ASSERT_LE(std::fabs(decoded[c] - want), half_step * scale + std::fabs(want) * 0x1.0p-8f)
            << base << " [" << r << ", " << c << "]";
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 3 * kI * kLatent);
}

TEST(CheckpointGeneratorTest, SameOptionsGiveByteIdenticalFiles) {
  const fs::path a = FreshDir("same_a");
  const fs::path b = FreshDir("same_b");
  const GeneratorOptions options{.family = "k3",
                                 .preset = "tiny",
                                 .seed = 5,
                                 .num_shards = 2,
                                 .mxfp4_experts = true,
                                 .vision = true};
  const GeneratedCheckpoint first = Generate(options, a);
  const GeneratedCheckpoint second = Generate(options, b);
  ASSERT_EQ(first.files, second.files);
  ASSERT_EQ(first.files.size(), 5u);  // 2 shards, index, config, preprocessor config
  for (const std::string& file : first.files) {
    EXPECT_EQ(ReadBytes(a / file), ReadBytes(b / file)) << file;
  }
}

TEST(CheckpointGeneratorTest, DifferentSeedsGiveDifferentWeightsAndTheSameConfig) {
  const fs::path a = FreshDir("seed_a");
  const fs::path b = FreshDir("seed_b");
  Generate({.family = "kimi-linear", .preset = "tiny", .seed = 1}, a);
  Generate({.family = "kimi-linear", .preset = "tiny", .seed = 2}, b);
  EXPECT_EQ(ReadBytes(a / "config.json"), ReadBytes(b / "config.json"));
  const auto first = ReadAllTensors(a);
  const auto second = ReadAllTensors(b);
  ASSERT_EQ(first.size(), second.size());
  int differing = 0;
  for (const auto& [name, tensor] : first) differing += tensor.bytes != second.at(name).bytes;
  EXPECT_EQ(differing, static_cast<int>(first.size())) << "every tensor must depend on the seed";
}

TEST(CheckpointGeneratorTest, ShardsHoldTheSingleFileBytesAndAnIndex) {
  const fs::path single = FreshDir("single");
  const fs::path sharded = FreshDir("sharded");
  Generate({.family = "k3", .preset = "tiny", .seed = 3, .mxfp4_experts = true}, single);
  const GeneratedCheckpoint result = Generate(
      {.family = "k3", .preset = "tiny", .seed = 3, .num_shards = 3, .mxfp4_experts = true},
      sharded);
  EXPECT_FALSE(fs::exists(sharded / "model.safetensors"));
  const auto one = ReadAllTensors(single);
  const auto three = ReadAllTensors(sharded);
  ASSERT_EQ(one.size(), three.size());
  for (const auto& [name, tensor] : one) {
    ASSERT_TRUE(three.contains(name)) << name;
    EXPECT_EQ(three.at(name).dtype, tensor.dtype) << name;
    EXPECT_EQ(three.at(name).shape, tensor.shape) << name;
    EXPECT_EQ(three.at(name).bytes, tensor.bytes) << name;
  }

  const nlohmann::json index = ReadJson(sharded / "model.safetensors.index.json");
  uint64_t total = 0;
  for (const auto& [name, tensor] : three) {
    EXPECT_EQ(index["weight_map"][name], tensor.file) << name;
    total += tensor.bytes.size();
  }
  EXPECT_EQ(index["weight_map"].size(), three.size());
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  // One layer's tensors are spread over several files.
  std::set<std::string> layer1_files;
  for (const auto& [name, tensor] : three) {
    if (absl::StrContains(name, "model.layers.1.")) layer1_files.insert(tensor.file);
  }
  EXPECT_EQ(layer1_files.size(), 3u);
  EXPECT_THAT(result.files, ::testing::ElementsAre("model-00001-of-00003.safetensors",
                                                   "model-00002-of-00003.safetensors",
                                                   "model-00003-of-00003.safetensors",
                                                   "model.safetensors.index.json", "config.json"));
}

TEST(CheckpointGeneratorTest, RegeneratingWithOtherShardingRemovesStaleFiles) {
  const fs::path dir = FreshDir("restale");
  Generate({.preset = "tiny", .num_shards = 2}, dir);
  Generate({.preset = "tiny", .num_shards = 1}, dir);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir / "model-00001-of-00002.safetensors"));
}

TEST(CheckpointGeneratorTest, ReportsParametersAndBytes) {
  const fs::path dir = FreshDir("counts");
  const GeneratedCheckpoint result = Generate({.family = "kimi-linear", .preset = "tiny"}, dir);
  int64_t params = 0;
  for (const auto& [name, want] : ExpectedKimiLinearTiny()) {
    int64_t n = 1;
    for (int64_t dim : want.second) n *= dim;
    params += n;
  }
  EXPECT_EQ(result.num_parameters, params);
  EXPECT_EQ(result.num_bytes, static_cast<int64_t>(fs::file_size(dir / "model.safetensors") +
                                                   fs::file_size(dir / "config.json")));
}

TEST(CheckpointGeneratorTest, K3ALogIsZeroPaddedBeyondTheHeads) {
  const fs::path dir = FreshDir("alog");
  Generate({.family = "k3", .preset = "tiny", .seed = 9}, dir);
  const StoredTensor a_log =
      ReadAllTensors(dir).at("language_model.model.layers.0.self_attn.A_log");
  ASSERT_EQ(a_log.bytes.size(), static_cast<size_t>(kDk * 4));
  std::vector<float> values(kDk);
  std::memcpy(values.data(), a_log.bytes.data(), a_log.bytes.size());
  for (int i = 0; i < kHk; ++i) EXPECT_NE(values[i], 0.0f) << i;
  for (int i = kHk; i < kDk; ++i) EXPECT_EQ(values[i], 0.0f) << i;
}

// ---- the vision tower (--vision) ----------------------------------------------------------------
// Tiny tower: D 32, qkv 48 = 3 heads × 16, MLP 64, 2 blocks, 8×8 position table, patch 14; the
// projector maps 4·D = 128 to the LM's d = 96.

constexpr int64_t kVisionD = 32, kVisionQkv = 48, kVisionI = 64, kVisionPos = 8;
constexpr int kVisionLayers = 2;

Expected ExpectedTinyVision() {
  Expected x;
  x["vision_tower.patch_embed.proj.weight"] = {"BF16", {kVisionD, 3, 14, 14}};
  x["vision_tower.patch_embed.pos_emb.weight"] = {"BF16", {kVisionPos, kVisionPos, kVisionD}};
  for (int i = 0; i < kVisionLayers; ++i) {
    const std::string p = absl::StrCat("vision_tower.encoder.blocks.", i, ".");
    x[p + "norm0.weight"] = {"BF16", {kVisionD}};
    x[p + "wqkv.weight"] = {"BF16", {3 * kVisionQkv, kVisionD}};
    x[p + "wo.weight"] = {"BF16", {kVisionD, kVisionQkv}};
    x[p + "norm1.weight"] = {"BF16", {kVisionD}};
    x[p + "mlp.fc0.weight"] = {"BF16", {kVisionI, kVisionD}};
    x[p + "mlp.fc1.weight"] = {"BF16", {kVisionD, kVisionI}};
  }
  x["vision_tower.encoder.final_layernorm.weight"] = {"BF16", {kVisionD}};
  x["mm_projector.proj.0.weight"] = {"BF16", {4 * kVisionD, 4 * kVisionD}};
  x["mm_projector.proj.2.weight"] = {"BF16", {kD, 4 * kVisionD}};
  x["mm_projector.post_norm.weight"] = {"BF16", {kD}};
  return x;
}

int64_t CountElements(const Expected& expected) {
  int64_t count = 0;
  for (const auto& [name, want] : expected) {
    int64_t n = 1;
    for (int64_t dim : want.second) n *= dim;
    count += n;
  }
  return count;
}

// Mean and standard deviation of a bf16 tensor's values.
std::pair<double, double> Moments(const StoredTensor& t) {
  const size_t n = t.bytes.size() / 2;
  double sum = 0.0, sum2 = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double v = Bf16At(t, i);
    sum += v;
    sum2 += v * v;
  }
  const double mean = sum / static_cast<double>(n);
  return {mean, std::sqrt(std::max(0.0, sum2 / static_cast<double>(n) - mean * mean))};
}

TEST(CheckpointGeneratorTest, VisionWritesTheReleasedTensorNamesShapesAndDtypes) {
  const fs::path dir = FreshDir("k3_vision");
  const GeneratedCheckpoint result =
      Generate({.family = "k3", .preset = "tiny", .vision = true}, dir);
  const auto stored = ReadAllTensors(dir);
  ExpectExactly(ExpectedK3Tiny(/*mxfp4=*/false), stored);
  const Expected vision = ExpectedTinyVision();
  int vision_count = 0;
  for (const auto& [name, tensor] : stored) {
    if (!IsVisionTensor(name)) continue;
    ++vision_count;
    ASSERT_TRUE(vision.contains(name)) << "unexpected tensor " << name;
    EXPECT_EQ(tensor.dtype, vision.at(name).first) << name;
    EXPECT_EQ(tensor.shape, vision.at(name).second) << name;
  }
  EXPECT_EQ(vision_count, static_cast<int>(vision.size()));
  EXPECT_EQ(result.num_vision_parameters, CountElements(vision));
  EXPECT_EQ(result.num_parameters, CountElements(ExpectedK3Tiny(false)) + CountElements(vision));
  EXPECT_THAT(result.files, ::testing::ElementsAre("model.safetensors", "config.json",
                                                   "preprocessor_config.json"));
  EXPECT_EQ(result.num_bytes,
            static_cast<int64_t>(fs::file_size(dir / "model.safetensors") +
                                 fs::file_size(dir / "config.json") +
                                 fs::file_size(dir / "preprocessor_config.json")));

  // Scales: norm weights near 1, matrices ~ gain/sqrt(fan_in), a position table of std 0.5.
  const auto [norm_mean, norm_std] =
      Moments(stored.at("vision_tower.encoder.blocks.0.norm0.weight"));
  EXPECT_NEAR(norm_mean, 1.0, 0.1);
  EXPECT_LT(norm_std, 0.2);
  const double patch_std = Moments(stored.at("vision_tower.patch_embed.proj.weight")).second;
  EXPECT_NEAR(patch_std, 2.0 / std::sqrt(3.0 * 14 * 14), 0.01);
  const double pos_std = Moments(stored.at("vision_tower.patch_embed.pos_emb.weight")).second;
  EXPECT_NEAR(pos_std, 0.5, 0.05);
  const double qkv_std = Moments(stored.at("vision_tower.encoder.blocks.1.wqkv.weight")).second;
  EXPECT_NEAR(qkv_std, 1.0 / std::sqrt(static_cast<double>(kVisionD)), 0.02);
}

TEST(CheckpointGeneratorTest, VisionLeavesTheLanguageModelBytesAlone) {
  const fs::path plain = FreshDir("vision_off");
  const fs::path with = FreshDir("vision_on");
  Generate({.family = "k3", .preset = "tiny", .seed = 11}, plain);
  Generate({.family = "k3", .preset = "tiny", .seed = 11, .vision = true}, with);
  const auto lm = ReadAllTensors(plain);
  const auto all = ReadAllTensors(with);
  for (const auto& [name, tensor] : lm) EXPECT_EQ(all.at(name).bytes, tensor.bytes) << name;
  // The switch also leaves no stale preprocessor_config.json behind when turned off again.
  Generate({.family = "k3", .preset = "tiny", .seed = 11}, with);
  EXPECT_FALSE(fs::exists(with / "preprocessor_config.json"));
  EXPECT_FALSE(ReadJson(with / "config.json").contains("vision_config"));
}

TEST(CheckpointGeneratorTest, VisionConfigHasTheReleasedKeysAndRoundTrips) {
  const fs::path dir = FreshDir("vision_config");
  Generate({.family = "k3", .preset = "tiny", .vision = true}, dir);
  const nlohmann::json config = ReadJson(dir / "config.json");
  ASSERT_TRUE(config.contains("vision_config"));
  const nlohmann::json& v = config["vision_config"];
  for (const char* key :
       {"patch_size", "vt_hidden_size", "qkv_hidden_size", "vt_num_attention_heads",
        "vt_intermediate_size", "vt_num_hidden_layers", "norm_type", "attn_bias", "linear_bias",
        "patch_embed_proj_bias", "init_pos_emb_height", "init_pos_emb_width",
        "pos_emb_interpolation_mode", "merge_kernel_size", "merge_type", "mm_projector_type",
        "mm_hidden_size", "text_hidden_size", "projector_ln_eps"}) {
    EXPECT_TRUE(v.contains(key)) << key;
  }
  EXPECT_EQ(v["norm_type"], "rmsnorm");
  EXPECT_EQ(v["attn_bias"], false);
  EXPECT_EQ(v["merge_type"], "sd2_tpool");
  EXPECT_EQ(v["mm_projector_type"], "patchmergerv2");
  // The vocabulary's K3 control block is its top 256 ids; <|media_pad|> is its 21st entry.
  EXPECT_EQ(config["media_placeholder_token_id"], kV - 256 + 21);
  const nlohmann::json preprocessor = ReadJson(dir / "preprocessor_config.json");
  EXPECT_EQ(preprocessor["in_patch_limit"], 1024);
  EXPECT_EQ(preprocessor["patch_limit_on_one_side"], 512);
  EXPECT_EQ(preprocessor["image_mean"], nlohmann::json({0.5, 0.5, 0.5}));
  EXPECT_EQ(preprocessor["image_std"], nlohmann::json({0.5, 0.5, 0.5}));
  EXPECT_EQ(preprocessor["patch_size"], 14);
  EXPECT_EQ(preprocessor["merge_kernel_size"], 2);

  absl::StatusOr<engine::ModelConfig> parsed = engine::LoadModelConfig(dir.string());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->Validate().ok()) << parsed->Validate();
  ASSERT_TRUE(parsed->vision.has_value());
  const engine::VisionConfig& vision = *parsed->vision;
  EXPECT_EQ(vision.hidden_size, kVisionD);
  EXPECT_EQ(vision.qkv_hidden_size, kVisionQkv);
  EXPECT_EQ(vision.num_heads, 3);
  EXPECT_EQ(vision.head_dim(), 16);
  EXPECT_EQ(vision.intermediate_size, kVisionI);
  EXPECT_EQ(vision.num_layers, kVisionLayers);
  EXPECT_EQ(vision.pos_emb_height, kVisionPos);
  EXPECT_EQ(vision.pos_emb_width, kVisionPos);
  EXPECT_EQ(vision.mm_hidden_size, kVisionD);
  EXPECT_EQ(vision.text_hidden_size, kD);
  EXPECT_EQ(vision.in_patch_limit, 1024);
  EXPECT_EQ(parsed->media_placeholder_token_id, kV - 256 + 21);
}

TEST(CheckpointGeneratorTest, VisionOverridesReachTheTensorsAndTheConfig) {
  const fs::path dir = FreshDir("vision_overrides");
  Generate({.family = "k3",
            .preset = "tiny",
            .vision = true,
            .overrides = {{"vision_hidden", "40"},
                          {"vision_heads", "2"},
                          {"vision_qkv", "64"},
                          {"vision_intermediate", "72"},
                          {"vision_layers", "3"},
                          {"vision_pos_emb", "5"},
                          {"vision_in_patch_limit", "256"}}},
           dir);
  absl::StatusOr<engine::ModelConfig> parsed = engine::LoadModelConfig(dir.string());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->Validate().ok()) << parsed->Validate();
  EXPECT_EQ(parsed->vision->hidden_size, 40);
  EXPECT_EQ(parsed->vision->head_dim(), 32);
  EXPECT_EQ(parsed->vision->num_layers, 3);
  EXPECT_EQ(parsed->vision->in_patch_limit, 256);
  const auto stored = ReadAllTensors(dir);
  EXPECT_EQ(stored.at("vision_tower.patch_embed.pos_emb.weight").shape,
            (std::vector<int64_t>{5, 5, 40}));
  EXPECT_EQ(stored.at("vision_tower.encoder.blocks.2.wqkv.weight").shape,
            (std::vector<int64_t>{192, 40}));
  EXPECT_EQ(stored.at("vision_tower.encoder.blocks.2.mlp.fc0.weight").shape,
            (std::vector<int64_t>{72, 40}));
  EXPECT_EQ(stored.at("mm_projector.proj.2.weight").shape, (std::vector<int64_t>{kD, 160}));
}

TEST(CheckpointGeneratorTest, VisionIsRefusedWhereItCannotApply) {
  const std::string dir = FreshDir("vision_bad").string();
  auto status_of = [&](const GeneratorOptions& options) {
    return GenerateCheckpoint(options, dir).status();
  };
  absl::Status s = status_of({.family = "kimi-linear", .preset = "tiny", .vision = true});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--vision applies to the K3 family only"));
  s = status_of({.preset = "bench", .vision = true});  // bench is Kimi-Linear by default
  EXPECT_THAT(s.message(), HasSubstr("K3 family only"));
  s = status_of({.family = "k3", .preset = "tiny", .overrides = {{"vision_layers", "3"}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("--set vision_layers: the vision tower's sizes need --vision"));
  s = status_of(
      {.family = "k3", .preset = "tiny", .vision = true, .overrides = {{"vision_qkv", "50"}}});
  EXPECT_THAT(s.message(), HasSubstr("vision_qkv 50 must be vision_heads (3)"));
  s = status_of({.family = "k3",
                 .preset = "tiny",
                 .vision = true,
                 .overrides = {{"vision_heads", "4"}, {"vision_qkv", "24"}}});  // head_dim 6
  EXPECT_THAT(s.message(), HasSubstr("a multiple of 4"));
  s = status_of({.family = "k3",
                 .preset = "tiny",
                 .vision = true,
                 .overrides = {{"vision_in_patch_limit", "2"}}});
  EXPECT_THAT(s.message(), HasSubstr("vision_in_patch_limit=2"));
  EXPECT_FALSE(fs::exists(fs::path(dir) / "config.json"));
}

TEST(CheckpointGeneratorTest, DemoPresetAlwaysHasTheVisionTowerAndTheTokenizersPadId) {
  absl::StatusOr<ModelDims> dims = ResolveDims("", "demo", {}, /*mxfp4_experts=*/false);
  ASSERT_TRUE(dims.ok()) << dims.status();
  EXPECT_TRUE(dims->vision);
  EXPECT_EQ(dims->vision_hidden, 128);
  EXPECT_EQ(dims->vision_qkv, 128);
  EXPECT_EQ(dims->vision_heads, 4);
  EXPECT_EQ(dims->vision_intermediate, 256);
  EXPECT_EQ(dims->vision_layers, 2);
  EXPECT_EQ(dims->vision_pos_emb, 16);
  EXPECT_EQ(dims->vision_in_patch_limit, 4096);
  // The config's placeholder is the demo tokenizer's <|media_pad|> (7957), and the other media
  // tokens are special tokens of that tokenizer too.
  EXPECT_EQ(dims->media_placeholder_id(), kDemoNumBpeTokens + kK3MediaPadIndex);
  const std::vector<std::string> specials = DemoSpecialTokens(DemoChatFormat::kKimiK3);
  EXPECT_EQ(specials.at(kK3MediaPadIndex), "<|media_pad|>");
  EXPECT_EQ(specials.at(kK3MediaBeginIndex), "<|media_begin|>");
  EXPECT_EQ(specials.at(kK3MediaContentIndex), "<|media_content|>");
  EXPECT_EQ(specials.at(kK3MediaEndIndex), "<|media_end|>");
  EXPECT_EQ(kDemoNumBpeTokens + kK3MediaPadIndex, 7957);

  const fs::path dir = FreshDir("demo_vision");
  const GeneratedCheckpoint result = Generate({.family = "k3", .preset = "demo"}, dir);
  EXPECT_TRUE(fs::exists(dir / "preprocessor_config.json"));
  absl::StatusOr<engine::ModelConfig> parsed = engine::LoadModelConfig(dir.string());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->Validate().ok()) << parsed->Validate();
  ASSERT_TRUE(parsed->vision.has_value());
  EXPECT_EQ(parsed->vision->text_hidden_size, 256);
  EXPECT_EQ(parsed->media_placeholder_token_id, 7957);
  // patch 128·588 + pos 16·16·128 + 2 blocks × (2·128 + 384·128 + 128·128 + 2·256·128) + final
  // norm 128 + projector 512·512 + 256·512 + 256.
  EXPECT_EQ(result.num_vision_parameters, 75264 + 32768 + 2 * 131328 + 128 + 262144 + 131072 + 256);

  // The Kimi-Linear demo has no tower (and is not refused).
  dims = ResolveDims("kimi-linear", "demo", {}, false);
  ASSERT_TRUE(dims.ok()) << dims.status();
  EXPECT_FALSE(dims->vision);
}

// ---- config.json --------------------------------------------------------------------------------

TEST(CheckpointGeneratorTest, K3ConfigParsesAndValidates) {
  const fs::path dir = FreshDir("k3_config");
  Generate({.family = "k3", .preset = "tiny", .mxfp4_experts = true}, dir);
  absl::StatusOr<engine::ModelConfig> config = engine::LoadModelConfig(dir.string());
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->Validate().ok()) << config->Validate();
  EXPECT_EQ(config->family, engine::ModelFamily::kKimiK3);
  EXPECT_EQ(config->hidden_size, kD);
  EXPECT_EQ(config->vocab_size, kV);
  ASSERT_EQ(config->num_layers, kLayers);
  for (int l = 0; l < kLayers; ++l) EXPECT_EQ(!config->IsKda(l), IsMlaLayer(l)) << l;
  EXPECT_TRUE(config->kda.has_gate_lower_bound);
  EXPECT_FLOAT_EQ(config->kda.gate_lower_bound, -5.0f);
  EXPECT_TRUE(config->kda.use_full_rank_gate);
  EXPECT_EQ(config->mla.q_lora_rank, kRq);
  EXPECT_TRUE(config->mla.use_output_gate);
  EXPECT_EQ(config->moe.routed_expert_hidden_size, kLatent);
  EXPECT_TRUE(config->moe.mxfp4_experts);
  EXPECT_EQ(config->attn_res_block_size, 2);
  EXPECT_EQ(config->activation, engine::FfnActivation::kSitu);
  EXPECT_FLOAT_EQ(config->situ_beta, 4.0f);
  EXPECT_FLOAT_EQ(config->situ_linear_beta, 25.0f);
}

TEST(CheckpointGeneratorTest, KimiLinearConfigParsesAndValidates) {
  const fs::path dir = FreshDir("kl_config");
  Generate({.family = "kimi-linear", .preset = "tiny"}, dir);
  absl::StatusOr<engine::ModelConfig> config = engine::LoadModelConfig(dir.string());
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->Validate().ok()) << config->Validate();
  EXPECT_EQ(config->family, engine::ModelFamily::kKimiLinear);
  EXPECT_FALSE(config->kda.has_gate_lower_bound);
  EXPECT_FALSE(config->kda.use_full_rank_gate);
  EXPECT_EQ(config->mla.q_lora_rank, 0);
  EXPECT_FALSE(config->mla.use_output_gate);
  EXPECT_FALSE(config->moe.is_latent());
  EXPECT_FALSE(config->has_attn_res());
  EXPECT_EQ(config->activation, engine::FfnActivation::kSwiGlu);
  EXPECT_FLOAT_EQ(config->moe.routed_scaling_factor, 2.446f);
  EXPECT_EQ(config->moe.num_shared_experts, 1);
}

TEST(CheckpointGeneratorTest, OverridesReachTheConfigAndKeepTheLayerPattern) {
  const fs::path dir = FreshDir("overrides");
  Generate({.family = "k3",
            .preset = "tiny",
            .overrides = {{"layers", "9"},
                          {"groups", "4"},
                          {"topk_group", "2"},
                          {"q_lora", "0"},
                          {"latent", "0"},
                          {"hidden", "80"},
                          {"attn_res_block", "0"}}},
           dir);
  absl::StatusOr<engine::ModelConfig> config = engine::LoadModelConfig(dir.string());
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->Validate().ok()) << config->Validate();
  ASSERT_EQ(config->num_layers, 9);
  std::vector<int> mla;
  for (int l = 0; l < 9; ++l) {
    if (!config->IsKda(l)) mla.push_back(l);
  }
  EXPECT_THAT(mla, ::testing::ElementsAre(3, 7, 8));  // every 4th and the last
  EXPECT_EQ(config->moe.num_expert_group, 4);
  EXPECT_EQ(config->moe.topk_group, 2);
  EXPECT_EQ(config->mla.q_lora_rank, 0);
  EXPECT_FALSE(config->moe.is_latent());
  EXPECT_FALSE(config->has_attn_res());
  const auto stored = ReadAllTensors(dir);
  EXPECT_EQ(stored.at("language_model.model.layers.3.self_attn.q_proj.weight").shape,
            (std::vector<int64_t>{kH * (kDn + kDr), 80}));
  EXPECT_EQ(stored.at("language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight").shape,
            (std::vector<int64_t>{kI, 80}));
  EXPECT_FALSE(stored.contains("language_model.model.output_attn_res_proj.weight"));
}

TEST(CheckpointGeneratorTest, RejectsBadOptionsWithClearMessages) {
  const std::string dir = FreshDir("bad").string();
  auto status_of = [&](const GeneratorOptions& options) {
    return GenerateCheckpoint(options, dir).status();
  };
  absl::Status s = status_of({.preset = "tiny", .overrides = {{"no_such_key", "1"}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no_such_key"));
  s = status_of({.preset = "tiny", .overrides = {{"topk", "9"}}});
  EXPECT_THAT(s.message(), HasSubstr("topk 9 > experts 8"));
  s = status_of({.preset = "tiny", .overrides = {{"hidden", "ninety"}}});
  EXPECT_THAT(s.message(), HasSubstr("hidden=ninety"));
  s = status_of({.family = "kimi-linear", .preset = "tiny", .mxfp4_experts = true});
  EXPECT_THAT(s.message(), HasSubstr("K3 family only"));
  s = status_of(
      {.family = "k3", .preset = "tiny", .mxfp4_experts = true, .overrides = {{"latent", "48"}}});
  EXPECT_THAT(s.message(), HasSubstr("multiples of 32"));
  s = status_of({.preset = "huge"});
  EXPECT_THAT(s.message(), HasSubstr("unknown preset"));
  s = status_of({.family = "k2", .preset = "tiny"});
  EXPECT_THAT(s.message(), HasSubstr("unknown family"));
  s = status_of({.preset = "tiny", .num_shards = 0});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(fs::path(dir) / "config.json"));
}

// ---- presets (counted without writing) -------------------------------------------------------

// Every parameter, the vision tower's included (the K3 demo has one).
int64_t CountParameters(const std::string& family, const std::string& preset) {
  absl::StatusOr<ModelDims> dims = ResolveDims(family, preset, {}, false);
  EXPECT_TRUE(dims.ok()) << dims.status();
  if (!dims.ok()) return 0;
  int64_t count = 0;
  for (const TensorSpec& spec : ListTensors(*dims)) count += NumElements(spec.shape);
  return count;
}

TEST(CheckpointGeneratorTest, BenchPresetHasThePeerBenchmarkShape) {
  // the llama.cpp peer scripts' make_bench_model.py --preset bench writes 743,987,664 parameters.
  EXPECT_EQ(CountParameters("", "bench"), 743987664);
  absl::StatusOr<ModelDims> dims = ResolveDims("", "bench", {}, false);
  ASSERT_TRUE(dims.ok());
  EXPECT_FALSE(dims->k3);
  EXPECT_THAT(dims->full_attn_layers, ::testing::ElementsAre(4, 8, 12));
}

TEST(CheckpointGeneratorTest, DemoPresetIsAK3ModelOf20To40MillionParameters) {
  const int64_t count = CountParameters("", "demo");
  EXPECT_GE(count, 20'000'000);
  EXPECT_LE(count, 40'000'000);
  absl::StatusOr<ModelDims> dims = ResolveDims("", "demo", {}, false);
  ASSERT_TRUE(dims.ok());
  EXPECT_TRUE(dims->k3);
  EXPECT_EQ(dims->vocab, 8192);
  EXPECT_EQ(dims->hidden, 256);
  EXPECT_EQ(dims->layers, 8);
}

}  // namespace
}  // namespace strata::engine::demo
