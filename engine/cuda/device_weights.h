// Every weight of a loaded Model copied to the device once (issue #10: weights loaded once;
// bf16 matrices, MXFP4 routed experts kept packed), in the layouts the CUDA kernels take:
//   - matrices as bf16 [out, in] (f32 checkpoints are rounded to bf16 once, here), or int8
//     codes [out, in] with bf16 scales [out, in/32] where `--quantization int8` made them so
//     (kernels/cuda/int8_gemm.h; a stack whose parts mix int8 with another format holds the
//     int8 parts as bf16(code · scale));
//   - the KDA q|k|v projections stacked into one [3P, d] matrix and their conv weights into one
//     [3P, K] table (the fused decode kernel reads channels [q | k | v]);
//   - gate|up of the dense MLP and of the shared experts stacked [2I, d] (one GEMM, then GLU);
//   - routed experts of a MoE layer stacked [E, 2I, in] (gate rows, then up rows) and
//     [E, out, I] for the down products; MXFP4 experts the same way, packed, with their scales;
//   - norm weights and small parameters as f32.
// Pointers are device pointers into buffers this object owns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model.h"
#include "kernels/cuda/device_buffer.h"

namespace strata::engine::cuda {

struct DeviceMatrix {  // y = x · Wᵀ, W [out, in]: bf16 bits, or int8 groups of 32
  int64_t out = 0, in = 0;
  const uint16_t* w = nullptr;       // bf16 [out, in]
  const int8_t* codes = nullptr;     // int8 [out, in]
  const uint16_t* scales = nullptr;  // bf16 [out, in/32] (with codes)
  bool empty() const { return w == nullptr && codes == nullptr; }
  bool int8() const { return codes != nullptr; }
};

struct DeviceExperts {  // one MoE layer's routed experts (this rank's, under expert parallelism)
  int64_t num_experts = 0;
  int64_t inter = 0;      // I
  int64_t in_width = 0;   // their input width (L_d with LatentMoE, else d)
  int64_t out_width = 0;  // their output width (the same)
  bool mxfp4 = false;
  bool int8 = false;
  const uint16_t* gate_up = nullptr;  // bf16 [E, 2I, in_width]
  const uint16_t* down = nullptr;     // bf16 [E, out_width, I]
  // MXFP4 or int8: codes and scales as the format stores them (MXFP4: packed E2M1 [E·2I,
  // in_width/2] and E8M0 [E·2I, in_width/32]; int8: [E·2I, in_width] and bf16 [E·2I,
  // in_width/32]); down likewise over [E·out_width, I].
  const void* gate_up_codes = nullptr;
  const void* gate_up_scales = nullptr;
  const void* down_codes = nullptr;
  const void* down_scales = nullptr;
};

struct DeviceKda {
  // Every f32 input projection of the normed rows stacked into one product [q|k|v|b|g]: q|k|v
  // from column 0, b from b_column, the full-rank g (in_proj_has_g; else g_a/g_b) from
  // g_column, each start a multiple of 4 columns (zero rows between: 16-byte aligned rows).
  DeviceMatrix in_proj;
  bool in_proj_has_g = false;
  int64_t b_column = 0, g_column = 0;
  DeviceMatrix f_a, f_b, g_a, g_b, o;
  const float* conv_w = nullptr;   // [3P, K]
  const float* a_log = nullptr;    // [H]
  const float* dt_bias = nullptr;  // [P]
  const float* o_norm = nullptr;   // [D]
};

struct DeviceMla {
  DeviceMatrix q, q_a, q_b, kv_a, g, o;  // q (no q LoRA) or q_a/q_b; g may be empty
  const float* q_a_norm = nullptr;
  const float* kv_a_norm = nullptr;
  const uint16_t* kv_b = nullptr;  // [H·(dn + dv), r_kv] bf16
};

struct DeviceMlp {
  DeviceMatrix gate_up, down;  // [2I, d], [d, I]
};

struct DeviceMoe {
  DeviceMatrix router;
  const float* score_bias = nullptr;  // [E] or null
  DeviceMatrix latent_down, latent_up;
  const float* latent_norm = nullptr;  // or null
  DeviceExperts experts;
  DeviceMlp shared;  // empty gate_up without shared experts
};

struct DeviceAttnRes {
  const float* norm = nullptr;
  const float* proj = nullptr;
};

struct DeviceLayer {
  const float* input_norm = nullptr;
  const float* post_norm = nullptr;
  DeviceAttnRes attn_res, mlp_res;
  std::unique_ptr<DeviceKda> kda;
  std::unique_ptr<DeviceMla> mla;
  std::unique_ptr<DeviceMlp> dense;
  std::unique_ptr<DeviceMoe> moe;
};

class DeviceWeights {
 public:
  // Uploads every weight of `model` (synchronously). `local_experts` (global ids, ascending;
  // null: all): the routed experts this rank holds under expert parallelism — only these are
  // uploaded, stacked in that order. Errors: device memory exhausted (naming the tensor group
  // and the bytes), a weight format the device path does not take, an expert id out of range.
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Upload(
      const Model& model, const std::vector<int>* local_experts = nullptr);

  const DeviceMatrix& embed() const { return embed_; }
  const DeviceMatrix& lm_head() const { return lm_head_; }
  const float* final_norm() const { return final_norm_; }
  const DeviceAttnRes& output_res() const { return output_res_; }
  const DeviceLayer& layer(int l) const { return layers_[static_cast<size_t>(l)]; }
  int64_t bytes() const { return bytes_; }

 private:
  friend class WeightUploader;
  DeviceWeights() = default;

  std::vector<kernels::cuda::DeviceBuffer> buffers_;
  int64_t bytes_ = 0;
  DeviceMatrix embed_, lm_head_;
  const float* final_norm_ = nullptr;
  DeviceAttnRes output_res_;
  std::vector<DeviceLayer> layers_;
};

// `w` [out, in] as bf16 values in host memory, ready to copy to the device: its own data when it
// is stored as bf16, else converted into `staging` (f32 rounded to nearest even; int8 decoded
// to code · scale first: the values the int8 kernels' tensor-core path multiplies by).
// Unimplemented, naming `what`, for MXFP4 (routed experts only, uploaded packed).
absl::StatusOr<const uint16_t*> HostBf16(const Linear& w, const std::string& what,
                                         std::vector<uint16_t>* staging);

}  // namespace strata::engine::cuda
