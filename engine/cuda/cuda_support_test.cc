// What the CUDA backend accepts, checked without a GPU (runs in CI): the model shapes the
// kernels take (CudaModel::CheckSupported names the dimension and the value they need), the
// device cache spec, and the error when no device is visible.
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "engine/cuda/cuda_executor.h"
#include "engine/cuda/cuda_model.h"
#include "engine/demo/checkpoint_generator.h"
#include "engine/model.h"
#include "kernels/cuda/testing.h"

namespace strata::engine::cuda {
namespace {

class CudaSupportTest : public testing::Test {
 protected:
  std::unique_ptr<Model> Load(const std::string& family,
                              const std::map<std::string, std::string>& overrides) {
    const std::string dir = testing::TempDir() + "/cuda_support_" + std::to_string(getpid()) + "_" +
                            std::to_string(counter_++);
    dirs_.push_back(dir);
    engine::demo::GeneratorOptions options;
    options.family = family;
    options.preset = "tiny";
    options.overrides = overrides;
    auto generated = engine::demo::GenerateCheckpoint(options, dir);
    EXPECT_TRUE(generated.ok()) << generated.status();
    auto model = Model::Load(dir);
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? std::move(*model) : nullptr;
  }
  void TearDown() override {
    for (const std::string& d : dirs_) std::filesystem::remove_all(d);
  }

  // Release head shapes on a small model.
  const std::map<std::string, std::string> kReleaseHeads = {
      {"kda_head_dim", "128"}, {"kv_lora", "512"}, {"qk_rope", "64"},
      {"qk_nope", "128"},      {"v_head", "128"},  {"hidden", "128"}};

  int counter_ = 0;
  std::vector<std::string> dirs_;
};

TEST_F(CudaSupportTest, ReleaseHeadShapesAreSupported) {
  for (const char* family : {"k3", "kimi-linear"}) {
    std::unique_ptr<Model> model = Load(family, kReleaseHeads);
    ASSERT_NE(model, nullptr);
    EXPECT_TRUE(CudaModel::CheckSupported(model->config()).ok())
        << family << ": " << CudaModel::CheckSupported(model->config());
  }
}

TEST_F(CudaSupportTest, OtherLatentWidthsAreRefusedNamingTheDims) {
  std::unique_ptr<Model> model = Load("k3", {{"kda_head_dim", "128"}});  // latent 32 + 8
  ASSERT_NE(model, nullptr);
  const absl::Status status = CudaModel::CheckSupported(model->config());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("512 + 64"), std::string::npos) << status;
  EXPECT_NE(status.message().find("32 + 8"), std::string::npos) << status;
}

TEST_F(CudaSupportTest, OtherKdaHeadDimsAreRefusedNamingTheDim) {
  std::map<std::string, std::string> overrides = kReleaseHeads;
  overrides["kda_head_dim"] = "64";
  std::unique_ptr<Model> model = Load("kimi-linear", overrides);
  ASSERT_NE(model, nullptr);
  const absl::Status status = CudaModel::CheckSupported(model->config());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("head_dim 128; this model has 64"), std::string::npos) << status;
}

TEST_F(CudaSupportTest, DeviceCachesKeepBf16LatentsAndF32State) {
  std::unique_ptr<Model> model = Load("k3", kReleaseHeads);
  ASSERT_NE(model, nullptr);
  const ModelConfig& cfg = model->config();
  const kvcache::ModelCacheSpec spec = CudaCacheSpecFor(cfg);
  EXPECT_EQ(spec.latent_dtype, kvcache::LatentDType::kBF16);
  EXPECT_EQ(spec.latent_dim, 576);
  EXPECT_EQ(spec.num_mla_layers, cfg.NumMlaLayers());
  EXPECT_EQ(spec.num_kda_layers, cfg.NumKdaLayers());
  EXPECT_EQ(spec.kda_state_bytes_per_layer, int64_t{cfg.kda.num_heads} * 128 * 128 * 4);
  EXPECT_EQ(spec.kda_conv_bytes_per_layer,
            int64_t{3} * (cfg.kda.conv_kernel_size - 1) * cfg.kda.num_heads * 128 * 4);
}

TEST_F(CudaSupportTest, CreateWithoutADeviceSaysSo) {
  if (kernels::cuda::testing::HasCudaDevice()) GTEST_SKIP() << "a CUDA device is visible";
  std::unique_ptr<Model> model = Load("k3", kReleaseHeads);
  ASSERT_NE(model, nullptr);
  auto executor = CudaExecutor::Create(*model);
  ASSERT_FALSE(executor.ok());
  EXPECT_EQ(executor.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(executor.status().message().find("no CUDA device"), std::string::npos)
      << executor.status();
}

}  // namespace
}  // namespace strata::engine::cuda
