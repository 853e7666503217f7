// VisionEncoder::Encode against a tower written here from the reference kernels (f64 sums,
// weights widened to f32) on generated tiny K3 towers, over grids that exercise each step's
// edge cases; plus the loader's errors and the text-only case.
#include "engine/vision/vision_encoder.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "engine/checkpoint.h"
#include "engine/demo/checkpoint_generator.h"
#include "engine/model.h"
#include "engine/safetensors_writer.h"
#include "engine/vision/vision_testing.h"
#include "kernels/reference/matmul.h"
#include "kernels/reference/rms_norm.h"
#include "kernels/reference/vit.h"

namespace strata::engine {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test and process (ctest runs the tests of this binary in parallel).
std::string TestDir(const std::string& tag) {
  std::string test = testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(test.begin(), test.end(), '/', '_');
  return testing::TempDir() + "/vision_encoder_test_" + tag + "_" + std::to_string(::getpid()) +
         "_" + test;
}

// The weight as f32 [out, in] (the checkpoint's bf16 widened exactly).
std::vector<float> Widen(const Linear& w) {
  const int64_t count = w.out_features * w.in_features;
  std::vector<float> out(static_cast<size_t>(count));
  switch (w.format) {
    case WeightFormat::kF32:
      std::copy_n(static_cast<const float*>(w.data), count, out.data());
      break;
    case WeightFormat::kBf16:
      for (int64_t i = 0; i < count; ++i)
        out[i] = Bf16ToF32(static_cast<const uint16_t*>(w.data)[i]);
      break;
    default:
      ADD_FAILURE() << "vision weights are bf16 or f32, never quantised";
  }
  return out;
}

// y[m, out] = x[m, in] · Wᵀ with f64 sums.
std::vector<float> Product(const Linear& w, const std::vector<float>& x, int64_t m) {
  EXPECT_EQ(static_cast<int64_t>(x.size()), m * w.in_features);
  const std::vector<float> wide = Widen(w);
  std::vector<float> y(static_cast<size_t>(m * w.out_features));
  kernels::MatmulReference(x.data(), m, w.in_features, wide.data(), w.out_features, y.data());
  return y;
}

std::vector<float> Norm(const std::vector<float>& x, int64_t dim, const std::vector<float>& weight,
                        float eps) {
  std::vector<float> y(x.size());
  kernels::RmsNormReference(x.data(), static_cast<int64_t>(x.size()) / dim, dim, weight.data(), eps,
                            y.data());
  return y;
}

// The tower as docs/vision.md states it, step by step on the reference kernels: patch
// embedding + the bilinear position table; per block x += wo(attn(rope(q), rope(k), v)) on
// RMSNorm0(x) and x += fc1(gelu_tanh(fc0(RMSNorm1(x)))); the final RMSNorm; the 2×2 merge;
// RMSNorm_{projector_ln_eps}(proj.2(gelu_erf(proj.0(merged)))).
std::vector<float> ReferenceEncode(const VisionConfig& c, const VisionWeights& w,
                                   const media::ImagePatches& image) {
  const int gh = image.grid_height, gw = image.grid_width;
  const int64_t n = image.num_patches(), d = c.hidden_size, q = c.qkv_hidden_size;
  std::vector<float> x = Product(w.patch_embed, image.patches, n);
  kernels::reference::AddBilinearPositions(w.pos_emb.data(), c.pos_emb_height, c.pos_emb_width,
                                           static_cast<int>(d), gh, gw, x.data());
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
  for (const VisionBlockWeights& b : w.blocks) {
    std::vector<float> qkv = Product(b.wqkv, Norm(x, d, b.norm0, kVisionRmsNormEps), n);
    kernels::reference::Rope2d(qkv.data(), 3 * q, gh, gw, c.num_heads, c.head_dim(), c.rope_theta);
    kernels::reference::Rope2d(qkv.data() + q, 3 * q, gh, gw, c.num_heads, c.head_dim(),
                               c.rope_theta);
    std::vector<float> attn(static_cast<size_t>(n * q));
    kernels::reference::VitAttention(qkv.data(), qkv.data() + q, qkv.data() + 2 * q, 3 * q, n,
                                     c.num_heads, c.head_dim(), scale, attn.data());
    const std::vector<float> attn_out = Product(b.wo, attn, n);
    for (size_t i = 0; i < x.size(); ++i) x[i] += attn_out[i];
    std::vector<float> hidden = Product(b.fc0, Norm(x, d, b.norm1, kVisionRmsNormEps), n);
    kernels::reference::GeluTanh(hidden.data(), static_cast<int64_t>(hidden.size()));
    const std::vector<float> mlp_out = Product(b.fc1, hidden, n);
    for (size_t i = 0; i < x.size(); ++i) x[i] += mlp_out[i];
  }
  x = Norm(x, d, w.final_norm, kVisionRmsNormEps);
  const int64_t rows = n / 4;
  std::vector<float> merged(static_cast<size_t>(rows * 4 * d));
  kernels::reference::MergePatches2x2(x.data(), gh, gw, static_cast<int>(d), merged.data());
  std::vector<float> projected = Product(w.proj0, merged, rows);
  kernels::reference::GeluErf(projected.data(), static_cast<int64_t>(projected.size()));
  return Norm(Product(w.proj2, projected, rows), c.text_hidden_size, w.post_norm,
              c.projector_ln_eps);
}

using vision_testing::RandomPatches;

// Encode vs the reference: |y − ref| ≤ kTolerance · (1 + |ref|). Both sides compute the same
// products; the encoder sums in f32 (≤ 588 terms in the patch embedding, 128 in proj.0), the
// reference in f64, and each rounding of order 2^-24 · Σ|x·w| then passes through 2 blocks'
// norms, softmax and GELUs. The rows are RMS-normalised (|ref| ~ 1); the observed gap on these
// grids is ~1e-6 (AVX-512, 2026-12-06), so 5e-5 leaves a margin for other ISAs' summation
// orders while a wrong step (a swapped rotation axis, a transposed merge, a missing norm) moves
// values by O(0.1–1).
constexpr double kTolerance = 5e-5;

::testing::AssertionResult Close(const std::vector<float>& y, const std::vector<float>& ref,
                                 double* worst_out = nullptr) {
  if (y.size() != ref.size()) {
    return ::testing::AssertionFailure() << "sizes " << y.size() << " vs " << ref.size();
  }
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double err = std::fabs(double{y[i]} - ref[i]) / (1 + std::fabs(ref[i]));
    if (!(err <= worst)) {
      worst = std::isnan(err) ? INFINITY : err;
      worst_at = i;
    }
  }
  if (worst_out != nullptr) *worst_out = worst;
  if (worst <= kTolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "worst relative error " << worst << " at [" << worst_at
                                       << "]: " << y[worst_at] << " vs reference " << ref[worst_at];
}

class VisionEncoderTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir("tower");
    auto generated = demo::GenerateCheckpoint(
        {.family = "k3", .preset = "tiny", .seed = 11, .vision = true}, dir_);
    ASSERT_TRUE(generated.ok()) << generated.status();
    auto model = Model::Load(dir_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    ASSERT_NE(model_->vision(), nullptr);
  }
  void TearDown() override {
    model_.reset();
    fs::remove_all(dir_);
  }

  const VisionEncoder& encoder() const { return *model_->vision(); }
  const VisionConfig& config() const { return encoder().config(); }

  // Encodes a random grid and checks it against the reference; returns the encoder's rows.
  std::vector<float> ExpectMatchesReference(int grid_h, int grid_w, uint32_t seed) {
    SCOPED_TRACE(testing::Message() << grid_h << "x" << grid_w << " patches");
    const media::ImagePatches image = RandomPatches(grid_h, grid_w, config().patch_size, seed);
    const std::vector<float> rows = encoder().Encode(image);
    EXPECT_EQ(static_cast<int64_t>(rows.size()),
              media::NumMergedRows(image, config()) * config().text_hidden_size);
    EXPECT_EQ(media::NumMergedRows(image, config()), int64_t{grid_h / 2} * (grid_w / 2));
    double worst = 0;
    EXPECT_TRUE(Close(rows, ReferenceEncode(config(), encoder().weights(), image), &worst));
    RecordProperty(std::to_string(grid_h) + "x" + std::to_string(grid_w) + "_worst",
                   testing::PrintToString(worst));
    return rows;
  }

  std::string dir_;
  std::unique_ptr<Model> model_;
};

TEST_F(VisionEncoderTest, TinyTowerHasTheGeneratedShapes) {
  // The grids below are chosen against these sizes (8×8 is the table, 12×10 exceeds it).
  EXPECT_EQ(config().pos_emb_height, 8);
  EXPECT_EQ(config().pos_emb_width, 8);
  EXPECT_EQ(config().num_layers, 2);
  EXPECT_EQ(static_cast<int>(encoder().weights().blocks.size()), 2);
  EXPECT_EQ(config().text_hidden_size, model_->config().hidden_size);
}

TEST_F(VisionEncoderTest, OneMergedRow) { ExpectMatchesReference(2, 2, 1); }

TEST_F(VisionEncoderTest, NonSquareGrids) {
  ExpectMatchesReference(2, 6, 2);
  ExpectMatchesReference(6, 4, 3);
}

TEST_F(VisionEncoderTest, OddMergedSides) { ExpectMatchesReference(6, 10, 4); }  // 3×5 merged

TEST_F(VisionEncoderTest, GridOfThePositionTableSize) {
  // At the table's size the bilinear resize is the identity: it adds the table itself.
  const int h = config().pos_emb_height, w = config().pos_emb_width, d = config().hidden_size;
  std::vector<float> added(static_cast<size_t>(h * w * d), 0.0f);
  kernels::reference::AddBilinearPositions(encoder().weights().pos_emb.data(), h, w, d, h, w,
                                           added.data());
  EXPECT_EQ(added, encoder().weights().pos_emb);
  ExpectMatchesReference(h, w, 5);
}

TEST_F(VisionEncoderTest, GridLargerThanThePositionTable) { ExpectMatchesReference(12, 10, 6); }

TEST_F(VisionEncoderTest, ImagesOfDifferentSizesOneAfterTheOther) {
  const media::ImagePatches a = RandomPatches(4, 6, config().patch_size, 7);
  const media::ImagePatches b = RandomPatches(10, 2, config().patch_size, 8);
  const std::vector<float> a_alone = encoder().Encode(a);
  const std::vector<float> b_after_a = encoder().Encode(b);
  const std::vector<float> a_after_b = encoder().Encode(a);
  // Nothing carries over from one image to the next: identical rows, bit for bit.
  EXPECT_EQ(a_after_b, a_alone);
  EXPECT_TRUE(Close(b_after_a, ReferenceEncode(config(), encoder().weights(), b)));
  EXPECT_TRUE(Close(a_alone, ReferenceEncode(config(), encoder().weights(), a)));
  // Images never see each other: b's rows do not depend on which image came before.
  const std::vector<float> b_after_other = [&] {
    encoder().Encode(RandomPatches(8, 8, config().patch_size, 9));
    return encoder().Encode(b);
  }();
  EXPECT_EQ(b_after_other, b_after_a);
}

// The pacing hook (ImageEncoder::BeforeBlock) runs before each block with the patch count and
// changes nothing in the rows.
TEST_F(VisionEncoderTest, BeforeBlockRunsBeforeEachBlock) {
  const media::ImagePatches image = RandomPatches(4, 6, config().patch_size, 21);
  std::vector<int64_t> calls;
  const std::vector<float> rows = encoder().Encode(image, [&](int64_t n) { calls.push_back(n); });
  EXPECT_EQ(calls, std::vector<int64_t>(static_cast<size_t>(config().num_layers), 24));
  EXPECT_EQ(rows, encoder().Encode(image));
}

TEST_F(VisionEncoderTest, ConcurrentEncodesGiveEachImageItsOwnRows) {
  // Encode is const and may run on any thread (vision_encoder.h): two images at once give the
  // same rows as one after the other.
  const media::ImagePatches a = RandomPatches(6, 4, config().patch_size, 10);
  const media::ImagePatches b = RandomPatches(8, 10, config().patch_size, 11);
  const std::vector<float> a_alone = encoder().Encode(a), b_alone = encoder().Encode(b);
  std::vector<float> a_concurrent, b_concurrent;
  std::thread other([&] {
    for (int i = 0; i < 3; ++i) a_concurrent = encoder().Encode(a);
  });
  for (int i = 0; i < 3; ++i) b_concurrent = encoder().Encode(b);
  other.join();
  EXPECT_EQ(a_concurrent, a_alone);
  EXPECT_EQ(b_concurrent, b_alone);
}

TEST_F(VisionEncoderTest, QuantizationLeavesTheTowerAlone) {
  // --quantization applies to the language model only: the tower stays bf16, same rows.
  ModelLoadOptions options;
  options.quantization = WeightQuantization::kInt8;
  auto quantized = Model::Load(dir_, options);
  ASSERT_TRUE(quantized.ok()) << quantized.status();
  ASSERT_NE((*quantized)->vision(), nullptr);
  const VisionWeights& w = (*quantized)->vision()->weights();
  for (const Linear* l :
       {&w.patch_embed, &w.blocks[0].wqkv, &w.blocks[1].fc1, &w.proj0, &w.proj2}) {
    EXPECT_EQ(l->format, WeightFormat::kBf16);
  }
  const media::ImagePatches image = RandomPatches(4, 4, config().patch_size, 12);
  EXPECT_EQ((*quantized)->vision()->Encode(image), encoder().Encode(image));
}

// --- Loading errors and the text-only case ---------------------------------------------------

// Rewrites `dir`/model.safetensors through `edit` (which may drop or reshape tensors).
void RewriteTensors(const std::string& dir,
                    const std::function<void(std::vector<TensorToWrite>&)>& edit) {
  const std::string path = dir + "/model.safetensors";
  std::vector<TensorToWrite> tensors;
  std::map<std::string, std::string> metadata;
  {
    auto file = SafetensorsFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    metadata = (*file)->metadata();
    for (const auto& [name, info] : (*file)->tensors()) {
      tensors.push_back({name, info.dtype, info.shape,
                         std::vector<uint8_t>(info.data, info.data + info.num_bytes)});
    }
  }  // unmapped before the file is replaced
  edit(tensors);
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());
}

class VisionLoadTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir("load");
    auto generated = demo::GenerateCheckpoint(
        {.family = "k3", .preset = "tiny", .seed = 12, .vision = true}, dir_);
    ASSERT_TRUE(generated.ok()) << generated.status();
  }
  void TearDown() override { fs::remove_all(dir_); }

  absl::Status LoadTower() const {
    auto ckpt = Checkpoint::Open(dir_);
    if (!ckpt.ok()) return ckpt.status();
    if (!(*ckpt)->config().vision.has_value()) return absl::InternalError("no vision_config");
    return LoadVisionWeights(**ckpt, *(*ckpt)->config().vision).status();
  }

  std::string dir_;
};

TEST_F(VisionLoadTest, MissingTensorIsNamed) {
  const std::string missing = "vision_tower.encoder.blocks.1.wo.weight";
  RewriteTensors(dir_, [&](std::vector<TensorToWrite>& tensors) {
    const size_t before = tensors.size();
    std::erase_if(tensors, [&](const TensorToWrite& t) { return t.name == missing; });
    ASSERT_EQ(tensors.size() + 1, before);
  });
  const absl::Status status = LoadTower();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(missing), std::string::npos) << status;
  // Model::Load refuses the checkpoint with the same message.
  auto model = Model::Load(dir_);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find(missing), std::string::npos) << model.status();
}

TEST_F(VisionLoadTest, MisshapedTensorsAreNamed) {
  // A matrix read as [out, in] and a table read whole: same bytes, wrong shape.
  for (const std::string name :
       {"mm_projector.proj.2.weight", "vision_tower.patch_embed.pos_emb.weight",
        "vision_tower.patch_embed.proj.weight", "vision_tower.encoder.blocks.0.norm1.weight"}) {
    SCOPED_TRACE(name);
    auto generated = demo::GenerateCheckpoint(
        {.family = "k3", .preset = "tiny", .seed = 12, .vision = true}, dir_);
    ASSERT_TRUE(generated.ok()) << generated.status();
    RewriteTensors(dir_, [&](std::vector<TensorToWrite>& tensors) {
      auto it = std::find_if(tensors.begin(), tensors.end(),
                             [&](const TensorToWrite& t) { return t.name == name; });
      ASSERT_NE(it, tensors.end());
      // Same element count, other shape: [a, b, ...] → [1, a·b·...] (one more dimension).
      it->shape = Shape{1, NumElements(it->shape)};
    });
    const absl::Status status = LoadTower();
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.message().find(name), std::string::npos) << status;
  }
}

TEST(VisionTextOnlyTest, CheckpointWithoutVisionConfigHasNoTower) {
  const std::string dir = TestDir("text");
  {
    auto generated = demo::GenerateCheckpoint({.family = "k3", .preset = "tiny", .seed = 13}, dir);
    ASSERT_TRUE(generated.ok()) << generated.status();
    auto model = Model::Load(dir);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_FALSE((*model)->config().vision.has_value());
    EXPECT_EQ((*model)->vision(), nullptr);
  }
  {
    // The tower's tensors present but `vision_config` removed from config.json: text only, the
    // tensors ignored.
    auto generated = demo::GenerateCheckpoint(
        {.family = "k3", .preset = "tiny", .seed = 13, .vision = true}, dir);
    ASSERT_TRUE(generated.ok()) << generated.status();
    {
      auto with = Model::Load(dir);
      ASSERT_TRUE(with.ok()) << with.status();
      EXPECT_NE((*with)->vision(), nullptr);
    }
    nlohmann::json config;
    {
      std::ifstream in(dir + "/config.json");
      in >> config;
    }
    ASSERT_TRUE(config.contains("vision_config"));
    config.erase("vision_config");
    std::ofstream(dir + "/config.json") << config.dump(2);
    auto model = Model::Load(dir);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_FALSE((*model)->config().vision.has_value());
    EXPECT_EQ((*model)->vision(), nullptr);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata::engine
