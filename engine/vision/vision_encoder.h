// The vision tower of Kimi K3 on the CPU (docs/vision.md): MoonViT-V2 over one image's patches,
// the 2×2 merge and the PatchMergerMLPV2 projector — an image's rows in the language model.
//
// Weights are read in place from the checkpoint (BF16 as released; never quantised:
// --quantization applies to the language model only). Encode is const and may run on any
// thread, concurrently with the engine's steps (its products then run on the calling thread:
// kernels/cpu/thread_pool.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/checkpoint.h"
#include "engine/linear.h"
#include "engine/media/image_preprocess.h"
#include "engine/vision/vision_config.h"

namespace strata::engine {

struct VisionBlockWeights {
  std::vector<float> norm0, norm1;  // [D] (RMSNorm, eps kVisionRmsNormEps)
  Linear wqkv;                      // [3·Q, D]: rows q; k; v
  Linear wo;                        // [D, Q]
  Linear fc0;                       // [I, D]
  Linear fc1;                       // [D, I]
};

struct VisionWeights {
  Linear patch_embed;                      // [D, 3·p·p] (the conv [D, 3, p, p] as a matrix)
  std::vector<float> pos_emb;              // [pos_h, pos_w, D]
  std::vector<VisionBlockWeights> blocks;  // [num_layers]
  std::vector<float> final_norm;           // [D]
  Linear proj0;                            // [4D, 4D]
  Linear proj2;                            // [T, 4D]
  std::vector<float> post_norm;            // [T] (RMSNorm, eps projector_ln_eps)
};

// Loads vision_tower.* and mm_projector.* (names and shapes as released; a missing tensor or a
// wrong shape is an error naming it).
absl::StatusOr<VisionWeights> LoadVisionWeights(const Checkpoint& ckpt, const VisionConfig& config);

// What turns an image's patches into its rows: the tower on the CPU (VisionEncoder) or on a GPU
// (engine/cuda/cuda_vision_encoder.h). Encode may be called from one thread at a time.
class ImageEncoder {
 public:
  // Called before each of the tower's blocks with the image's patch count (the server paces the
  // tower against the engine's steps with it: server/frontend/encoder_budget.h).
  using BeforeBlock = std::function<void(int64_t patches)>;

  virtual ~ImageEncoder() = default;
  virtual const VisionConfig& config() const = 0;
  // The image's rows [NumMergedRows(image), text_hidden_size], merged rows row-major.
  std::vector<float> Encode(const media::ImagePatches& image) const {
    return Encode(image, BeforeBlock());
  }
  virtual std::vector<float> Encode(const media::ImagePatches& image,
                                    const BeforeBlock& before_block) const = 0;
};

class VisionEncoder final : public ImageEncoder {
 public:
  VisionEncoder(VisionConfig config, VisionWeights weights)
      : config_(config), weights_(std::move(weights)) {}

  const VisionConfig& config() const override { return config_; }
  const VisionWeights& weights() const { return weights_; }

  // Any thread, concurrently too (const).
  using ImageEncoder::Encode;
  std::vector<float> Encode(const media::ImagePatches& image,
                            const BeforeBlock& before_block) const override;

 private:
  VisionConfig config_;
  VisionWeights weights_;
};

}  // namespace strata::engine
