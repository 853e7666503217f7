// ImageInputs' accounting of the tower's time: strata:image_encode_seconds_total counts the
// tower's own work, not its waits for the encoder budget's grants (encoder_budget.h), which the
// budget counts itself.
#include "server/frontend/image_inputs.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "engine/vision/vision_encoder.h"
#include "server/frontend/encoder_budget.h"

namespace strata::frontend {
namespace {

using std::chrono::milliseconds;

// A tower of three blocks that asks for a grant before each and computes nothing.
class ThreeBlockEncoder final : public engine::ImageEncoder {
 public:
  const engine::VisionConfig& config() const override { return config_; }
  std::vector<float> Encode(const media::ImagePatches& image,
                            const BeforeBlock& before_block) const override {
    for (int block = 0; block < 3; ++block) {
      if (before_block) before_block(image.num_patches());
    }
    return std::vector<float>(4, 0.0f);
  }

 private:
  engine::VisionConfig config_;
};

TEST(ImageInputsTest, EncodeSecondsLeaveOutTheWaitsForTheEnginesGrants) {
  ThreeBlockEncoder encoder;
  // One patch-token a step while the engine is busy: the first block waits until the engine,
  // busy but no longer stepping, is taken for idle (300 ms), then the tower runs freely. The
  // budget outlives the inputs (their destructor stops it).
  EncoderBudget budget(1, milliseconds(300));
  ImageInputs inputs(&encoder, /*placeholder_id=*/7, ImageInputLimits{});
  inputs.SetEncoderBudget(&budget);
  budget.OnStep(/*busy=*/true);
  auto image = std::make_shared<engine::PreparedImage>();
  image->patches.grid_height = image->patches.grid_width = 4;
  image->content_key = 42;
  image->num_rows = 4;
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<ImageEncodeJob> job =
      inputs.EncodeInBackground({image}, std::vector<engine::MediaEmbedding>(1));
  ASSERT_TRUE(job->WaitFor(milliseconds(10000)));
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(wall, 0.25) << "the tower did not wait for the engine";
  EXPECT_EQ(inputs.stats().images_encoded, 1);
  EXPECT_GE(budget.stats().wait_seconds, 0.25);
  EXPECT_LT(inputs.stats().encode_seconds, 0.1) << "the waits were counted as the tower's time";
}

}  // namespace
}  // namespace strata::frontend
