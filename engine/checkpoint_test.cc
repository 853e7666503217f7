#include "engine/checkpoint.h"

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/check.h"
#include "engine/safetensors_writer.h"

namespace strata::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A minimal valid Kimi-Linear config (2 layers: KDA then MLA).
constexpr char kConfig[] = R"json({
  "model_type": "kimi_linear",
  "vocab_size": 16, "hidden_size": 8, "num_hidden_layers": 2, "rms_norm_eps": 1e-5,
  "linear_attn_config": {"kda_layers": [1], "full_attn_layers": [2], "num_heads": 2,
                         "head_dim": 4, "short_conv_kernel_size": 4},
  "num_attention_heads": 2, "q_lora_rank": null, "kv_lora_rank": 4, "qk_nope_head_dim": 4,
  "qk_rope_head_dim": 2, "v_head_dim": 4, "mla_use_nope": true,
  "intermediate_size": 16, "first_k_dense_replace": 1, "moe_layer_freq": 1,
  "num_experts": 4, "num_experts_per_token": 2, "num_shared_experts": 1,
  "moe_intermediate_size": 8, "hidden_act": "silu"
})json";

class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "strata_ckpt_XXXXXX";
    CHECK(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  WriteFile(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

// `count` distinct bytes starting at `first`: tells apart tensors and catches off-by-one views.
std::vector<uint8_t> Pattern(size_t count, uint8_t first) {
  std::vector<uint8_t> bytes(count);
  for (size_t i = 0; i < count; ++i) bytes[i] = static_cast<uint8_t>(first + 3 * i);
  return bytes;
}

TensorToWrite Tensor(std::string name, DType dtype, Shape shape, uint8_t first) {
  const size_t num_bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  return TensorToWrite{std::move(name), dtype, std::move(shape), Pattern(num_bytes, first)};
}

// A safetensors file with a hand-written header (for malformed cases). `length` overrides the
// 8-byte little-endian header length.
std::vector<uint8_t> RawFile(std::string_view header, const std::vector<uint8_t>& data,
                             std::optional<uint64_t> length = std::nullopt) {
  const uint64_t n = length.value_or(header.size());
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

absl::Status ParseStatus(const std::vector<uint8_t>& file) {
  return ParseSafetensors(file.data(), file.size(), "bad.safetensors").status();
}

std::vector<uint8_t> Bytes(const TensorInfo& info) {
  return std::vector<uint8_t>(info.data, info.data + info.num_bytes);
}

// ---- writer + parser ----------------------------------------------------------------------

TEST(SafetensorsWriterTest, LayoutIsPaddedHeaderThenDataInGivenOrder) {
  const std::vector<TensorToWrite> tensors = {Tensor("z.first", DType::kBF16, {3}, 1),
                                              Tensor("a.second", DType::kF32, {2, 1}, 100)};
  const std::vector<uint8_t> file = SerializeSafetensors(tensors, {});
  uint64_t header_size = 0;
  std::memcpy(&header_size, file.data(), 8);
  EXPECT_EQ(header_size % 8, 0u);
  ASSERT_EQ(file.size(), 8 + header_size + 6 + 8);
  const std::string header(file.begin() + 8, file.begin() + 8 + header_size);
  EXPECT_THAT(header, HasSubstr("\"data_offsets\":[0,6]"));
  EXPECT_THAT(header, HasSubstr("\"data_offsets\":[6,14]"));
  EXPECT_THAT(header, HasSubstr("\"dtype\":\"BF16\""));
  EXPECT_EQ(header.find("__metadata__"), std::string::npos);
  // Data section: z.first's 6 bytes, then a.second's 8 bytes.
  std::vector<uint8_t> expected_data = Pattern(6, 1);
  const std::vector<uint8_t> second = Pattern(8, 100);
  expected_data.insert(expected_data.end(), second.begin(), second.end());
  EXPECT_EQ(std::vector<uint8_t>(file.begin() + 8 + header_size, file.end()), expected_data);
}

TEST(SafetensorsWriterTest, ParserReadsBackWhatWasWritten) {
  const std::vector<TensorToWrite> tensors = {Tensor("w", DType::kBF16, {2, 3}, 7),
                                              Tensor("b", DType::kF32, {3}, 50),
                                              Tensor("e", DType::kU8, {0, 4}, 0)};
  const std::vector<uint8_t> file = SerializeSafetensors(tensors, {{"format", "pt"}});
  auto parsed = ParseSafetensors(file.data(), file.size(), "t.safetensors");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 3u);
  const TensorInfo& w = parsed->at("w");
  EXPECT_EQ(w.dtype, DType::kBF16);
  EXPECT_EQ(w.shape, Shape({2, 3}));
  EXPECT_EQ(Bytes(w), Pattern(12, 7));
  EXPECT_EQ(w.file, "t.safetensors");
  EXPECT_EQ(Bytes(parsed->at("b")), Pattern(12, 50));
  EXPECT_EQ(parsed->at("e").num_bytes, 0u);
  EXPECT_EQ(parsed->at("e").shape, Shape({0, 4}));
}

TEST(SafetensorsFileTest, MapsFileAndExposesMetadata) {
  TempDir dir;
  ASSERT_TRUE(WriteSafetensors(dir / "m.safetensors", {Tensor("x", DType::kF16, {5}, 9)},
                               {{"format", "pt"}, {"note", "tiny"}})
                  .ok());
  auto file = SafetensorsFile::Open(dir / "m.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(Bytes((*file)->tensors().at("x")), Pattern(10, 9));
  EXPECT_EQ((*file)->tensors().at("x").file, dir / "m.safetensors");
  EXPECT_EQ((*file)->metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}, {"note", "tiny"}}));
}

TEST(SafetensorsFileTest, MissingAndEmptyFilesAreErrors) {
  TempDir dir;
  auto missing = SafetensorsFile::Open(dir / "nope.safetensors");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.safetensors"));
  WriteFile(dir / "empty.safetensors", std::string_view());
  auto empty = SafetensorsFile::Open(dir / "empty.safetensors");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("empty.safetensors: file is 0 bytes"));
}

TEST(SafetensorsWriterTest, WriteToMissingDirectoryFails) {
  EXPECT_FALSE(WriteSafetensors("/nonexistent-dir/x.safetensors", {}).ok());
}

// ---- malformed headers --------------------------------------------------------------------

TEST(ParseSafetensorsTest, RejectsFileShorterThanLengthField) {
  absl::Status status = ParseStatus({1, 2, 3, 4, 5});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("bad.safetensors: file is 5 bytes"));
}

TEST(ParseSafetensorsTest, RejectsTruncatedData) {
  std::vector<uint8_t> file = SerializeSafetensors(
      {Tensor("a", DType::kF32, {2}, 0), Tensor("b", DType::kF32, {4}, 0)}, {});
  file.resize(file.size() - 1);
  absl::Status status = ParseStatus(file);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("bad.safetensors: tensor 'b' data_offsets [8, 24]"));
  EXPECT_THAT(status.message(), HasSubstr("23 bytes"));
}

TEST(ParseSafetensorsTest, RejectsHeaderLongerThanFile) {
  absl::Status status = ParseStatus(RawFile("{}", {}, /*length=*/1000));
  EXPECT_THAT(status.message(), HasSubstr("bad.safetensors: header length 1000 exceeds the 2"));
}

TEST(ParseSafetensorsTest, RejectsHeaderOverLimit) {
  const uint64_t length = (uint64_t{100} << 20) + 1;
  std::vector<uint8_t> file(8 + length, ' ');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<uint8_t>(length >> (8 * i));
  EXPECT_THAT(ParseStatus(file).message(), HasSubstr("header length 104857601 exceeds the limit"));
}

TEST(ParseSafetensorsTest, RejectsInvalidJsonAndNonObjects) {
  EXPECT_THAT(ParseStatus(RawFile("{\"a\": ", {})).message(),
              HasSubstr("bad.safetensors: header is not valid JSON"));
  EXPECT_THAT(ParseStatus(RawFile("[1, 2]  ", {})).message(),
              HasSubstr("bad.safetensors: header must be a JSON object, found a list of length 2"));
  EXPECT_THAT(ParseStatus(RawFile(R"({"w": 3})", {})).message(),
              HasSubstr("bad.safetensors: tensor 'w' must be a JSON object, found integer 3"));
}

struct HeaderCase {
  std::string header;
  std::string message;
};

TEST(ParseSafetensorsTest, RejectsBadEntries) {
  const std::vector<uint8_t> data(16, 0);
  const HeaderCase cases[] = {
      {R"({"w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 2]}})",
       "tensor 'w' has unknown dtype 'Q4_K'"},
      {R"({"w": {"shape": [2], "data_offsets": [0, 2]}})",
       "tensor 'w' has no \"dtype\" (expected a string such as \"BF16\")"},
      {R"({"w": {"dtype": 4, "shape": [2], "data_offsets": [0, 2]}})",
       "tensor 'w' dtype must be a string, found integer 4"},
      {R"({"w": {"dtype": "U8", "shape": [-1, 2], "data_offsets": [0, 2]}})",
       "tensor 'w' shape must be a list of non-negative integers, found element integer -1"},
      {R"({"w": {"dtype": "U8", "shape": [2.5], "data_offsets": [0, 2]}})",
       "tensor 'w' shape must be a list of non-negative integers, found element number 2.5"},
      {R"({"w": {"dtype": "U8", "shape": "2", "data_offsets": [0, 2]}})",
       "tensor 'w' shape must be a list of non-negative integers, found string '2'"},
      {R"({"w": {"dtype": "U8", "shape": [4294967296, 4294967296], "data_offsets": [0, 2]}})",
       "tensor 'w' shape has more elements than fit in 64 bits"},
      // A zero dim does not excuse the others: strides would still overflow.
      {R"({"w": {"dtype": "U8", "shape": [0, 4294967296, 4294967296], "data_offsets": [0, 0]}})",
       "tensor 'w' shape has more elements than fit in 64 bits"},
      {R"({"w": {"dtype": "U8", "data_offsets": [0, 2]}})",
       "tensor 'w' has no \"shape\" (expected a list of non-negative integers)"},
      {R"({"w": {"dtype": "U8", "shape": [2], "data_offsets": [0]}})",
       "tensor 'w' data_offsets must be [begin, end], two non-negative integers; found a list of "
       "length 1"},
      {R"({"w": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2, 4]}})",
       "tensor 'w' data_offsets must be [begin, end], two non-negative integers; found a list of "
       "length 3"},
      {R"({"w": {"dtype": "U8", "shape": [2], "data_offsets": [-2, 0]}})",
       "tensor 'w' data_offsets must be [begin, end], two non-negative integers; found element "
       "integer -2"},
      {R"({"w": {"dtype": "U8", "shape": [2], "data_offsets": [0, "2"]}})",
       "tensor 'w' data_offsets must be [begin, end], two non-negative integers; found element "
       "string '2'"},
      {R"({"w": {"dtype": "U8", "shape": [2], "data_offsets": 7}})",
       "tensor 'w' data_offsets must be [begin, end], two non-negative integers; found integer 7"},
      {R"({"w": {"dtype": "U8", "shape": [2]}})",
       "tensor 'w' has no \"data_offsets\" (expected [begin, end])"},
      {R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [4, 2]}})",
       "tensor 'w' data_offsets [4, 2] have begin > end"},
      {R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [14, 18]}})",
       "tensor 'w' data_offsets [14, 18] end beyond the data section of 16 bytes"},
      {R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
       "tensor 'w' data_offsets [0, 8] span 8 bytes, but shape [3] of F32 needs 3 x 4 bytes"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       "tensors 'a' (data_offsets [0, 8]) and 'b' (data_offsets [4, 12]) overlap"},
      {R"({"a": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]},
           "b": {"dtype": "U8", "shape": [2], "data_offsets": [6, 8]}})",
       "tensors 'a' (data_offsets [0, 16]) and 'b' (data_offsets [6, 8]) overlap"},
      {R"({"__metadata__": {"format": 1}})",
       "__metadata__ must map strings to strings; key 'format' holds integer 1"},
      {R"({"__metadata__": ["pt"]})", "__metadata__ must be an object of strings"},
  };
  for (const HeaderCase& c : cases) {
    absl::Status status = ParseStatus(RawFile(c.header, data));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.header;
    EXPECT_THAT(status.message(), HasSubstr("bad.safetensors: " + c.message)) << c.header;
  }
}

TEST(ParseSafetensorsTest, AcceptsAdjacentRangesPaddingAndEmptyTensors) {
  const std::string header =
      R"({"__metadata__": {"format": "pt"},
          "b": {"dtype": "U8", "shape": [8], "data_offsets": [8, 16]},
          "a": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]},
          "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}}     )";
  const std::vector<uint8_t> data = Pattern(16, 0);
  const std::vector<uint8_t> file = RawFile(header, data);
  auto parsed = ParseSafetensors(file.data(), file.size(), "ok");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(Bytes(parsed->at("a")), std::vector<uint8_t>(data.begin(), data.begin() + 8));
  EXPECT_EQ(Bytes(parsed->at("b")), std::vector<uint8_t>(data.begin() + 8, data.end()));
  EXPECT_EQ(parsed->at("e").num_bytes, 0u);
}

// ---- checkpoints --------------------------------------------------------------------------

void WriteIndex(const TempDir& dir, const std::map<std::string, std::string>& weight_map) {
  std::string json = R"({"metadata": {"total_size": 0}, "weight_map": {)";
  bool first = true;
  for (const auto& [tensor, shard] : weight_map) {
    json += (first ? "" : ", ") + ("\"" + tensor + "\": \"" + shard + "\"");
    first = false;
  }
  WriteFile(dir / "model.safetensors.index.json", json + "}}");
}

TEST(CheckpointTest, SingleFileCheckpointLoads) {
  TempDir dir;
  WriteFile(dir / "config.json", kConfig);
  ASSERT_TRUE(WriteSafetensors(dir / "model.safetensors",
                               {Tensor("model.embed_tokens.weight", DType::kBF16, {16, 8}, 1),
                                Tensor("model.norm.weight", DType::kF32, {8}, 200)})
                  .ok());
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const Checkpoint& ckpt = **checkpoint;
  EXPECT_EQ(ckpt.dir(), dir.path());
  EXPECT_EQ(ckpt.config().num_layers, 2);
  EXPECT_TRUE(ckpt.Has("model.norm.weight"));
  EXPECT_FALSE(ckpt.Has("lm_head.weight"));
  EXPECT_THAT(ckpt.TensorNames(), ElementsAre("model.embed_tokens.weight", "model.norm.weight"));
  auto embed = ckpt.Get("model.embed_tokens.weight", {16, 8}, {DType::kF32, DType::kBF16});
  ASSERT_TRUE(embed.ok()) << embed.status();
  EXPECT_EQ((*embed)->dtype, DType::kBF16);
  EXPECT_EQ(Bytes(**embed), Pattern(256, 1));
  auto norm = ckpt.Find("model.norm.weight");
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(Bytes(**norm), Pattern(32, 200));
  EXPECT_EQ((*norm)->file, dir / "model.safetensors");
}

TEST(CheckpointTest, ShardedCheckpointSplitsALayerAcrossShards) {
  TempDir dir;
  WriteFile(dir / "config.json", kConfig);
  const std::string shard1 = "model-00001-of-00002.safetensors";
  const std::string shard2 = "model-00002-of-00002.safetensors";
  ASSERT_TRUE(
      WriteSafetensors(dir / shard1,
                       {Tensor("model.layers.0.self_attn.q_proj.weight", DType::kBF16, {8, 8}, 10),
                        Tensor("model.embed_tokens.weight", DType::kBF16, {16, 8}, 20)})
          .ok());
  ASSERT_TRUE(
      WriteSafetensors(dir / shard2,
                       {Tensor("model.layers.0.self_attn.k_proj.weight", DType::kBF16, {8, 8}, 30),
                        Tensor("model.layers.0.self_attn.A_log", DType::kF32, {1, 1, 2, 1}, 40)})
          .ok());
  WriteIndex(dir, {{"model.layers.0.self_attn.q_proj.weight", shard1},
                   {"model.embed_tokens.weight", shard1},
                   {"model.layers.0.self_attn.k_proj.weight", shard2},
                   {"model.layers.0.self_attn.A_log", shard2}});
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const Checkpoint& ckpt = **checkpoint;
  EXPECT_EQ(ckpt.TensorNames().size(), 4u);
  auto q = ckpt.Get("model.layers.0.self_attn.q_proj.weight", {8, 8}, {DType::kBF16});
  auto k = ckpt.Get("model.layers.0.self_attn.k_proj.weight", {8, 8}, {DType::kBF16});
  auto a_log = ckpt.Get("model.layers.0.self_attn.A_log", {1, 1, 2, 1}, {DType::kF32});
  ASSERT_TRUE(q.ok() && k.ok() && a_log.ok());
  EXPECT_EQ(Bytes(**q), Pattern(128, 10));
  EXPECT_EQ(Bytes(**k), Pattern(128, 30));
  EXPECT_EQ(Bytes(**a_log), Pattern(8, 40));
  EXPECT_EQ((*q)->file, dir / shard1);
  EXPECT_EQ((*k)->file, dir / shard2);
  EXPECT_EQ(Bytes(**ckpt.Find("model.embed_tokens.weight")), Pattern(256, 20));
}

TEST(CheckpointTest, GetReportsMissingTensorDtypeAndShape) {
  TempDir dir;
  WriteFile(dir / "config.json", kConfig);
  ASSERT_TRUE(
      WriteSafetensors(dir / "model.safetensors", {Tensor("w", DType::kF32, {3, 2}, 0)}).ok());
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const Checkpoint& ckpt = **checkpoint;

  auto missing = ckpt.Get("lm_head.weight", {16, 8}, {DType::kBF16});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("tensor 'lm_head.weight' not found in checkpoint " + dir.path()));
  EXPECT_EQ(ckpt.Find("lm_head.weight").status().code(), absl::StatusCode::kNotFound);

  auto dtype = ckpt.Get("w", {3, 2}, {DType::kBF16, DType::kF16});
  EXPECT_EQ(dtype.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dtype.status().message(), HasSubstr("tensor 'w' in " + (dir / "model.safetensors") +
                                                  ": expected dtype BF16 or F16, found F32"));

  auto shape = ckpt.Get("w", {2, 3}, {DType::kF32});
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shape.status().message(), HasSubstr("tensor 'w' in " + (dir / "model.safetensors") +
                                                  ": expected shape [2, 3], found [3, 2]"));
}

TEST(CheckpointTest, MissingDirectoryOrWeightsOrConfigIsNotFound) {
  TempDir dir;
  auto no_dir = Checkpoint::Open(dir / "absent");
  EXPECT_EQ(no_dir.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_dir.status().message(), HasSubstr(dir / "absent"));

  auto no_config = Checkpoint::Open(dir.path());
  EXPECT_EQ(no_config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_config.status().message(), HasSubstr("config.json"));

  WriteFile(dir / "config.json", kConfig);
  auto no_weights = Checkpoint::Open(dir.path());
  EXPECT_EQ(no_weights.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_weights.status().message(),
              HasSubstr("checkpoint directory " + dir.path() +
                        " has neither model.safetensors nor model.safetensors.index.json"));
}

TEST(CheckpointTest, InconsistentLayerListsInConfigAreRejected) {
  TempDir dir;
  std::string config = kConfig;
  const std::string good = "\"full_attn_layers\": [2]";
  config.replace(config.find(good), good.size(), "\"full_attn_layers\": [1]");
  WriteFile(dir / "config.json", config);
  ASSERT_TRUE(WriteSafetensors(dir / "model.safetensors", {Tensor("w", DType::kF32, {1}, 0)}).ok());
  auto checkpoint = Checkpoint::Open(dir.path());
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("config.json: linear_attn_config.full_attn_layers lists layer 1"));
}

TEST(CheckpointTest, MalformedWeightsFileIsRejectedWithItsPath) {
  TempDir dir;
  WriteFile(dir / "config.json", kConfig);
  std::vector<uint8_t> file = SerializeSafetensors({Tensor("w", DType::kF32, {4}, 0)}, {});
  file.resize(file.size() - 4);
  WriteFile(dir / "model.safetensors", file);
  auto checkpoint = Checkpoint::Open(dir.path());
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr(dir / "model.safetensors" + ": tensor 'w' data_offsets [0, 16]"));
}

TEST(CheckpointTest, IndexNamingMissingShardIsNotFound) {
  TempDir dir;
  WriteFile(dir / "config.json", kConfig);
  ASSERT_TRUE(WriteSafetensors(dir / "a.safetensors", {Tensor("x", DType::kF32, {1}, 0)}).ok());
  WriteIndex(dir, {{"x", "a.safetensors"}, {"y", "b.safetensors"}});
  auto checkpoint = Checkpoint::Open(dir.path());
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("weight_map assigns tensor 'y' to shard 'b.safetensors', but " +
                        (dir / "b.safetensors") + " does not exist"));
}

TEST(CheckpointTest, IndexAssigningTensorToWrongShardIsRejected) {
  TempDir dir;
  WriteFile(dir / "config.json", kConfig);
  ASSERT_TRUE(WriteSafetensors(dir / "a.safetensors", {Tensor("x", DType::kF32, {1}, 0)}).ok());
  ASSERT_TRUE(WriteSafetensors(dir / "b.safetensors", {Tensor("y", DType::kF32, {1}, 0)}).ok());
  WriteIndex(dir, {{"x", "b.safetensors"}, {"y", "b.safetensors"}});
  auto checkpoint = Checkpoint::Open(dir.path());
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("weight_map assigns tensor 'x' to " + (dir / "b.safetensors") +
                        ", but that file does not contain it"));

  // Mapped to a shard that lacks it while another mapped shard has it.
  WriteIndex(dir, {{"x", "b.safetensors"}, {"y", "a.safetensors"}});
  auto swapped = Checkpoint::Open(dir.path());
  EXPECT_THAT(swapped.status().message(), HasSubstr("(it is in " + (dir / "a.safetensors")));
}

TEST(CheckpointTest, TensorInTwoShardsIsRejected) {
  TempDir dir;
  WriteFile(dir / "config.json", kConfig);
  ASSERT_TRUE(WriteSafetensors(dir / "a.safetensors", {Tensor("x", DType::kF32, {1}, 0)}).ok());
  ASSERT_TRUE(WriteSafetensors(dir / "b.safetensors",
                               {Tensor("x", DType::kF32, {1}, 0), Tensor("y", DType::kF32, {1}, 0)})
                  .ok());
  WriteIndex(dir, {{"x", "a.safetensors"}, {"y", "b.safetensors"}});
  auto checkpoint = Checkpoint::Open(dir.path());
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("tensor 'x' is stored twice: in " + (dir / "a.safetensors") + " and in " +
                        (dir / "b.safetensors")));
}

TEST(CheckpointTest, IndexMustHoldAWeightMapOfSafeNames) {
  TempDir dir;
  WriteFile(dir / "config.json", kConfig);
  WriteFile(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_THAT(Checkpoint::Open(dir.path()).status().message(),
              HasSubstr("model.safetensors.index.json: has no \"weight_map\" object"));
  WriteIndex(dir, {{"x", "../outside.safetensors"}});
  EXPECT_THAT(Checkpoint::Open(dir.path()).status().message(),
              HasSubstr("weight_map entry for tensor 'x' must be a shard file name inside the "
                        "checkpoint directory"));
  WriteFile(dir / "model.safetensors.index.json", "{\"weight_map\": ");
  EXPECT_THAT(Checkpoint::Open(dir.path()).status().message(), HasSubstr("not valid JSON"));
}

}  // namespace
}  // namespace strata::engine
