#include "engine/cuda/cuda_vision_encoder.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/log.h"
#include "core/status.h"
#include "engine/cuda/device_weights.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/vit.h"

namespace strata::engine::cuda {
namespace kc = kernels::cuda;

absl::StatusOr<char*> CudaVisionEncoder::Alloc(int64_t bytes, const char* what) {
  ASSIGN_OR_RETURN(kc::DeviceBuffer b,
                   kc::DeviceBuffer::Allocate(std::max<int64_t>(bytes, 16),
                                              absl::StrCat("the vision tower's ", what).c_str()));
  char* p = b.as<char>();
  buffers_.push_back(std::move(b));
  return p;
}

absl::StatusOr<const uint16_t*> CudaVisionEncoder::UploadMatrix(const Linear& w, const char* what) {
  const int64_t count = w.out_features * w.in_features;
  std::vector<uint16_t> staging;
  ASSIGN_OR_RETURN(const uint16_t* src, HostBf16(w, absl::StrCat("vision tower ", what), &staging));
  ASSIGN_OR_RETURN(char* dst, Alloc(count * 2, what));
  weight_bytes_ += count * 2;
  RETURN_IF_ERROR(
      kc::CudaStatus(cudaMemcpy(dst, src, static_cast<size_t>(count) * 2, cudaMemcpyHostToDevice),
                     "vision weight upload cudaMemcpy"));
  return reinterpret_cast<const uint16_t*>(dst);
}

absl::StatusOr<const float*> CudaVisionEncoder::UploadFloats(const std::vector<float>& v,
                                                             const char* what) {
  const int64_t bytes = static_cast<int64_t>(v.size()) * 4;
  ASSIGN_OR_RETURN(char* dst, Alloc(bytes, what));
  weight_bytes_ += bytes;
  RETURN_IF_ERROR(
      kc::CudaStatus(cudaMemcpy(dst, v.data(), static_cast<size_t>(bytes), cudaMemcpyHostToDevice),
                     "vision weight upload cudaMemcpy"));
  return reinterpret_cast<const float*>(dst);
}

absl::StatusOr<std::unique_ptr<CudaVisionEncoder>> CudaVisionEncoder::Create(
    const VisionEncoder& cpu, int device, int64_t max_patches) {
  const VisionConfig& c = cpu.config();
  if (c.head_dim() > kc::kVitMaxHeadDim || c.head_dim() % 4 != 0) {
    return absl::UnimplementedError(
        absl::StrCat("the CUDA vision tower takes heads of at most ", kc::kVitMaxHeadDim,
                     " values, a multiple of 4; this one has ", c.head_dim()));
  }
  std::unique_ptr<CudaVisionEncoder> e(new CudaVisionEncoder(cpu));
  e->device_ = device;
  e->max_patches_ = max_patches > 0 ? max_patches : c.in_patch_limit;
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), "cudaSetDevice");
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&e->stream_, cudaStreamNonBlocking),
                              "cudaStreamCreate (vision)");
  for (cudaEvent_t& event : e->block_done_) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event), "cudaEventCreate (vision)");
  }
  ASSIGN_OR_RETURN(kc::CublasHandle handle, kc::CublasHandle::Create());
  e->cublas_.emplace(std::move(handle));

  const VisionWeights& w = cpu.weights();
  ASSIGN_OR_RETURN(e->patch_embed_, e->UploadMatrix(w.patch_embed, "patch embedding"));
  ASSIGN_OR_RETURN(e->pos_emb_, e->UploadFloats(w.pos_emb, "position table"));
  for (const VisionBlockWeights& b : w.blocks) {
    Block d;
    ASSIGN_OR_RETURN(d.norm0, e->UploadFloats(b.norm0, "norm0"));
    ASSIGN_OR_RETURN(d.norm1, e->UploadFloats(b.norm1, "norm1"));
    ASSIGN_OR_RETURN(d.wqkv, e->UploadMatrix(b.wqkv, "wqkv"));
    ASSIGN_OR_RETURN(d.wo, e->UploadMatrix(b.wo, "wo"));
    ASSIGN_OR_RETURN(d.fc0, e->UploadMatrix(b.fc0, "mlp.fc0"));
    ASSIGN_OR_RETURN(d.fc1, e->UploadMatrix(b.fc1, "mlp.fc1"));
    e->blocks_.push_back(d);
  }
  ASSIGN_OR_RETURN(e->final_norm_, e->UploadFloats(w.final_norm, "final norm"));
  ASSIGN_OR_RETURN(e->proj0_, e->UploadMatrix(w.proj0, "projector proj.0"));
  ASSIGN_OR_RETURN(e->proj2_, e->UploadMatrix(w.proj2, "projector proj.2"));
  ASSIGN_OR_RETURN(e->post_norm_, e->UploadFloats(w.post_norm, "projector post_norm"));

  // The working buffers of the largest image (Encode's steps name what each holds).
  const int64_t n = e->max_patches_, m = n / 4;
  const int64_t d = c.hidden_size, q = c.qkv_hidden_size, inter = c.intermediate_size;
  const int64_t p = 3 * int64_t{c.patch_size} * c.patch_size, t = c.text_hidden_size;
  const auto floats = [&](int64_t count, const char* what) -> absl::StatusOr<float*> {
    e->working_bytes_ += count * 4;
    ASSIGN_OR_RETURN(char* b, e->Alloc(count * 4, what));
    return reinterpret_cast<float*>(b);
  };
  ASSIGN_OR_RETURN(e->patches_, floats(n * p, "patches"));
  e->working_bytes_ += n * std::max({p, d, q, inter}) * 2;
  ASSIGN_OR_RETURN(char* narrow, e->Alloc(n * std::max({p, d, q, inter}) * 2, "bf16 operands"));
  e->narrow_ = reinterpret_cast<uint16_t*>(narrow);
  ASSIGN_OR_RETURN(e->x_, floats(n * d, "residual stream"));
  ASSIGN_OR_RETURN(e->qkv_, floats(n * 3 * q, "q|k|v"));
  ASSIGN_OR_RETURN(e->wide_, floats(n * std::max({inter, q, d}), "activations"));
  ASSIGN_OR_RETURN(e->out_, floats(std::max(n * d, m * t), "products"));
  ASSIGN_OR_RETURN(e->rows_, floats(m * t, "rows"));
  LOG_INFO("vision",
           "vision tower on device {}: {:.1f} MiB of weights, {:.1f} MiB of working memory for "
           "images of up to {} patches",
           device, static_cast<double>(e->weight_bytes_) / (1 << 20),
           static_cast<double>(e->working_bytes_) / (1 << 20), e->max_patches_);
  return e;
}

CudaVisionEncoder::~CudaVisionEncoder() {
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  for (cudaEvent_t event : block_done_) {
    if (event != nullptr) cudaEventDestroy(event);
  }
}

std::vector<float> CudaVisionEncoder::Encode(const media::ImagePatches& image,
                                             const BeforeBlock& before_block) const {
  std::vector<float> rows;
  if (image.num_patches() <= max_patches_) {
    std::lock_guard<std::mutex> lock(mu_);
    const absl::Status status = Run(image, before_block, &rows);
    if (status.ok()) return rows;
    LOG_ERROR("vision", "the CUDA vision tower failed ({}): encoding the image on the CPU",
              status.ToString());
  }
  return cpu_.Encode(image, before_block);
}

absl::Status CudaVisionEncoder::Run(const media::ImagePatches& image,
                                    const BeforeBlock& before_block,
                                    std::vector<float>* result) const {
  const VisionConfig& c = config();
  const int64_t n = image.num_patches(), d = c.hidden_size, q = c.qkv_hidden_size;
  const int64_t inter = c.intermediate_size, p = 3 * int64_t{c.patch_size} * c.patch_size;
  const int64_t m = n / 4, t = c.text_hidden_size, heads = c.num_heads;
  CHECK_EQ(static_cast<int64_t>(image.patches.size()), n * p);
  CHECK(c.merge_height == 2 && c.merge_width == 2 && image.grid_height % 2 == 0 &&
        image.grid_width % 2 == 0)
      << image.grid_height << "x" << image.grid_width << " patches";
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
  cudaStream_t s = stream_;
  cublasHandle_t h = cublas_->get();
  // y[rows, out] = bf16(x)[rows, in] · Wᵀ, x f32 (rounded to bf16 into narrow_ first).
  const auto linear = [&](const float* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                          float* y) -> absl::Status {
    RETURN_IF_ERROR(kc::GateToBf16(x, nullptr, rows * in, narrow_, s));
    return kc::GemmBf16(h, narrow_, rows, in, in, w, out, y, out, s);
  };
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(patches_, image.patches.data(),
                                              image.patches.size() * 4, cudaMemcpyHostToDevice, s),
                              "vision patches cudaMemcpyAsync");
  RETURN_IF_ERROR(linear(patches_, n, p, patch_embed_, d, x_));
  RETURN_IF_ERROR(kc::VitAddBilinearPositions(pos_emb_, c.pos_emb_height, c.pos_emb_width,
                                              static_cast<int>(d), image.grid_height,
                                              image.grid_width, x_, s));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
  for (size_t k = 0; k < blocks_.size(); ++k) {
    const Block& b = blocks_[k];
    cudaEvent_t done = block_done_[k % 2];
    if (before_block) {
      // A block's kernels queue in microseconds: the pacing must pace the device's work, not
      // the launches, so block k is paced once block k − 2 has run (its event, in this slot);
      // block k − 1 keeps the device busy meanwhile.
      if (k >= 2) {
        STRATA_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(done), "vision cudaEventSynchronize");
      }
      before_block(n);
    }
    RETURN_IF_ERROR(kc::RmsNorm(x_, n, d, b.norm0, kVisionRmsNormEps, narrow_, s));
    RETURN_IF_ERROR(kc::GemmBf16(h, narrow_, n, d, d, b.wqkv, 3 * q, qkv_, 3 * q, s));
    for (float* part : {qkv_, qkv_ + q}) {  // q, then k
      RETURN_IF_ERROR(kc::VitRope2d(part, 3 * q, image.grid_height, image.grid_width,
                                    static_cast<int>(heads), c.head_dim(), c.rope_theta, s));
    }
    RETURN_IF_ERROR(kc::VitAttention(qkv_, qkv_ + q, qkv_ + 2 * q, 3 * q, n,
                                     static_cast<int>(heads), c.head_dim(), scale, wide_, s));
    RETURN_IF_ERROR(linear(wide_, n, q, b.wo, d, out_));
    RETURN_IF_ERROR(kc::AddInPlace(x_, out_, n * d, s));
    RETURN_IF_ERROR(kc::RmsNorm(x_, n, d, b.norm1, kVisionRmsNormEps, narrow_, s));
    RETURN_IF_ERROR(kc::GemmBf16(h, narrow_, n, d, d, b.fc0, inter, wide_, inter, s));
    RETURN_IF_ERROR(kc::GeluTanh(wide_, n * inter, s));
    RETURN_IF_ERROR(linear(wide_, n, inter, b.fc1, d, out_));
    RETURN_IF_ERROR(kc::AddInPlace(x_, out_, n * d, s));
    if (before_block) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(done, s), "vision cudaEventRecord");
    }
  }
  // The final norm, the 2×2 merge, the projector (n·D = m·4D: the merge fills out_ exactly).
  RETURN_IF_ERROR(kc::RmsNorm(x_, n, d, final_norm_, kVisionRmsNormEps, wide_, s));
  RETURN_IF_ERROR(kc::VitMergePatches2x2(wide_, image.grid_height, image.grid_width,
                                         static_cast<int>(d), out_, s));
  RETURN_IF_ERROR(linear(out_, m, 4 * d, proj0_, 4 * d, wide_));
  RETURN_IF_ERROR(kc::GeluErf(wide_, m * 4 * d, s));
  RETURN_IF_ERROR(linear(wide_, m, 4 * d, proj2_, t, out_));
  RETURN_IF_ERROR(kc::RmsNorm(out_, m, t, post_norm_, c.projector_ln_eps, rows_, s));
  result->resize(static_cast<size_t>(m * t));
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(result->data(), rows_, result->size() * 4, cudaMemcpyDeviceToHost, s),
      "vision rows cudaMemcpyAsync");
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "vision cudaStreamSynchronize");
  return absl::OkStatus();
}

}  // namespace strata::engine::cuda
