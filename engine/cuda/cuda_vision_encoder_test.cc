// The vision tower on the GPU (CudaVisionEncoder) against the CPU tower (VisionEncoder) on a
// tiny K3 checkpoint with a structurally complete tower: images of odd, non-square grids one
// after the other; an image over the device's patch budget encoded by the CPU tower instead.
#include "engine/cuda/cuda_vision_encoder.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "engine/demo/checkpoint_generator.h"
#include "engine/model.h"
#include "engine/vision/vision_testing.h"
#include "kernels/cuda/testing.h"

namespace strata::engine::cuda {
namespace {

using engine::vision_testing::RandomPatches;

// max |a − b| / (1 + |b|).
double Gap(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(double{a[i]} - b[i]) / (1 + std::abs(double{b[i]})));
  }
  return worst;
}

TEST(CudaVisionEncoderTest, RowsMatchTheCpuTower) {
  if (!kernels::cuda::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = ::testing::TempDir() + "/cuda_vision_" + std::to_string(getpid());
  ASSERT_TRUE(
      demo::GenerateCheckpoint({.family = "k3", .preset = "tiny", .seed = 11, .vision = true}, dir)
          .ok());
  auto model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  const VisionEncoder& cpu = *(*model)->vision();
  const int patch = cpu.config().patch_size;
  // A budget of 96 patches: the 10×12 image below goes to the CPU tower.
  auto device = CudaVisionEncoder::Create(cpu, 0, /*max_patches=*/96);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_GT((*device)->weight_bytes(), 0);
  EXPECT_GT((*device)->working_bytes(), 0);
  // bf16 operands (the CPU tower multiplies f32 activations by the bf16 weights): the rows
  // are RMS-normalised (|row| ~ 1); two different images' rows are O(1) apart.
  constexpr double kTolerance = 0.05;
  std::vector<float> previous;
  for (auto [grid_h, grid_w, seed] :
       std::vector<std::tuple<int, int, uint32_t>>{{2, 2, 1}, {4, 6, 2}, {10, 2, 3}, {8, 8, 4}}) {
    const media::ImagePatches image = RandomPatches(grid_h, grid_w, patch, seed);
    const std::vector<float> want = cpu.Encode(image);
    int blocks = 0;  // the pacing hook runs before each block, on the device path too
    const std::vector<float> got = (*device)->Encode(image, [&](int64_t patches) {
      EXPECT_EQ(patches, int64_t{grid_h} * grid_w);
      ++blocks;
    });
    EXPECT_EQ(blocks, cpu.config().num_layers);
    const double gap = Gap(got, want);
    EXPECT_LT(gap, kTolerance) << grid_h << "x" << grid_w;
    std::printf("[vision] %dx%d patches: device vs CPU tower, max gap %.2e\n", grid_h, grid_w, gap);
    if (!previous.empty() && previous.size() == got.size()) {
      EXPECT_GT(Gap(got, previous), 4 * kTolerance) << "two images gave alike rows";
    }
    previous = got;
  }
  // 8×8 and 4×4 images have the same row count: the control above compared them.
  const media::ImagePatches big = RandomPatches(10, 12, patch, 5);
  EXPECT_EQ((*device)->Encode(big), cpu.Encode(big)) << "over the device budget: the CPU tower";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::engine::cuda
