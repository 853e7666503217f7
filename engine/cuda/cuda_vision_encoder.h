// Kimi K3's vision tower on a GPU (docs/vision.md): the CPU tower's weights (VisionEncoder)
// copied to the device once — matrices as bf16 (as released), norms and the position table as
// f32 — and the same steps as VisionEncoder::Encode on the device: bf16 products through cuBLAS
// with f32 accumulation, the rest in f32 (kernels/cuda/vit.h, norm.h, model_ops.h).
//
// Memory: Create allocates the working buffers of the largest image the config admits
// (in_patch_limit patches), so serving never allocates and the cache planner, which runs after
// it, sees that memory taken. Encode runs on its own stream and cuBLAS handle, one image at a
// time (a mutex; the server's encoder thread is the only caller). A CUDA error while encoding
// is logged and the image is encoded by the CPU tower instead (the request still gets its rows).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <cuda_runtime.h>

#include "absl/status/statusor.h"
#include "engine/vision/vision_encoder.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"

namespace strata::engine::cuda {

class CudaVisionEncoder final : public ImageEncoder {
 public:
  // Copies `cpu`'s weights to `device` and allocates the working buffers for at most
  // `max_patches` patches an image (default: the config's in_patch_limit). `cpu` must outlive
  // this (the fallback). Errors: device memory exhausted (naming what and the bytes).
  static absl::StatusOr<std::unique_ptr<CudaVisionEncoder>> Create(const VisionEncoder& cpu,
                                                                   int device,
                                                                   int64_t max_patches = 0);
  ~CudaVisionEncoder() override;

  const VisionConfig& config() const override { return cpu_.config(); }
  using ImageEncoder::Encode;
  std::vector<float> Encode(const media::ImagePatches& image,
                            const BeforeBlock& before_block) const override;

  // Bytes on the device: weights, and the working buffers.
  int64_t weight_bytes() const { return weight_bytes_; }
  int64_t working_bytes() const { return working_bytes_; }
  int64_t max_patches() const { return max_patches_; }

 private:
  struct Block {
    const float* norm0 = nullptr;
    const float* norm1 = nullptr;
    const uint16_t* wqkv = nullptr;  // bf16 [3Q, D]
    const uint16_t* wo = nullptr;    // bf16 [D, Q]
    const uint16_t* fc0 = nullptr;   // bf16 [I, D]
    const uint16_t* fc1 = nullptr;   // bf16 [D, I]
  };
  explicit CudaVisionEncoder(const VisionEncoder& cpu) : cpu_(cpu) {}
  absl::StatusOr<const uint16_t*> UploadMatrix(const Linear& w, const char* what);
  absl::StatusOr<const float*> UploadFloats(const std::vector<float>& v, const char* what);
  absl::StatusOr<char*> Alloc(int64_t bytes, const char* what);
  // Encode's steps on the device (rows of the result into `out`).
  absl::Status Run(const media::ImagePatches& image, const BeforeBlock& before_block,
                   std::vector<float>* out) const;

  const VisionEncoder& cpu_;
  int device_ = 0;
  int64_t max_patches_ = 0;
  int64_t weight_bytes_ = 0;
  int64_t working_bytes_ = 0;
  std::vector<kernels::cuda::DeviceBuffer> buffers_;
  std::optional<kernels::cuda::CublasHandle> cublas_;
  cudaStream_t stream_ = nullptr;
  // Paced runs: block k's end, in slot k mod 2 (the host waits for block k − 2 before pacing
  // block k: one block queued ahead).
  cudaEvent_t block_done_[2] = {nullptr, nullptr};
  // Weights.
  const uint16_t* patch_embed_ = nullptr;  // bf16 [D, 3·p·p]
  const float* pos_emb_ = nullptr;         // [pos_h, pos_w, D]
  std::vector<Block> blocks_;
  const float* final_norm_ = nullptr;
  const uint16_t* proj0_ = nullptr;  // bf16 [4D, 4D]
  const uint16_t* proj2_ = nullptr;  // bf16 [T, 4D]
  const float* post_norm_ = nullptr;
  // Working buffers (max_patches_ rows; n = patches, m = n / 4 merged rows).
  float* patches_ = nullptr;    // [n, 3·p·p]
  uint16_t* narrow_ = nullptr;  // bf16 operand of the next product: up to [n, max(3pp, I, Q, D)]
  float* x_ = nullptr;          // [n, D] the residual stream
  float* qkv_ = nullptr;        // [n, 3Q]
  float* wide_ = nullptr;       // [n, max(I, Q, D)] attention out / MLP hidden / final norm
  float* out_ = nullptr;        // [n, D] a block's product before the residual add; then the
                                // projector's [m, 4D] and [m, T] (n·D ≥ m·4D)
  float* rows_ = nullptr;       // [m, T] the result
  mutable std::mutex mu_;
};

}  // namespace strata::engine::cuda
