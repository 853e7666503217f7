#include "engine/cuda/device_weights.h"

#include <cuda_runtime.h>

#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/int8_quantize.h"
#include "core/log.h"
#include "core/status.h"
#include "kernels/cuda/cuda_status.h"

namespace strata::engine::cuda {

absl::StatusOr<const uint16_t*> HostBf16(const Linear& w, const std::string& what,
                                         std::vector<uint16_t>* staging) {
  const auto count = static_cast<size_t>(w.out_features * w.in_features);
  switch (w.format) {
    case WeightFormat::kBf16:
      return static_cast<const uint16_t*>(w.data);
    case WeightFormat::kF32:
      staging->resize(count);
      ConvertF32ToBf16(static_cast<const float*>(w.data), count, staging->data());
      return staging->data();
    case WeightFormat::kMxfp4:
      break;
    case WeightFormat::kInt8: {
      std::vector<float> decoded(count);
      DecodeInt8(static_cast<const int8_t*>(w.data), reinterpret_cast<const uint16_t*>(w.scales),
                 count, decoded.data());
      staging->resize(count);
      ConvertF32ToBf16(decoded.data(), count, staging->data());
      return staging->data();
    }
  }
  return absl::UnimplementedError(
      absl::StrCat(what, ": MXFP4 is only supported for routed experts on the CUDA backend"));
}

// Allocates and fills the device copies; one DeviceBuffer per tensor group.
class WeightUploader {
 public:
  explicit WeightUploader(DeviceWeights* out) : out_(out) {}

  absl::StatusOr<char*> Alloc(int64_t bytes, const std::string& what) {
    ASSIGN_OR_RETURN(kernels::cuda::DeviceBuffer b,
                     kernels::cuda::DeviceBuffer::Allocate(bytes, what.c_str()));
    char* p = b.as<char>();
    out_->bytes_ += bytes;
    out_->buffers_.push_back(std::move(b));
    return p;
  }

  absl::Status Copy(void* dst, const void* src, int64_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    return kernels::cuda::CudaStatus(
        cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice),
        "weight upload cudaMemcpy");
  }

  // `w` as bf16 [out, in] at dst (HostBf16).
  absl::Status CopyBf16(const Linear& w, uint16_t* dst, const std::string& what) {
    ASSIGN_OR_RETURN(const uint16_t* bf16, HostBf16(w, what, &staging_));
    return Copy(dst, bf16, w.out_features * w.in_features * 2);
  }

  // The row-wise concatenation of `parts` (same in_features) as one matrix: int8 codes and
  // scales when every part is int8, else bf16. With row_align > 1 each part starts at a multiple
  // of row_align rows, zero rows between (their outputs 0, never read): the parts' columns of
  // the product stay 16-byte aligned for row_align 4 and f32 outputs.
  absl::StatusOr<DeviceMatrix> Stacked(std::initializer_list<const Linear*> parts,
                                       const std::string& what, int64_t row_align = 1) {
    DeviceMatrix m;
    bool all_int8 = true;
    auto aligned = [row_align](int64_t rows) {
      return (rows + row_align - 1) / row_align * row_align;
    };
    for (const Linear* p : parts) {
      if (p->empty()) return absl::InternalError(absl::StrCat(what, ": missing part"));
      if (m.in != 0 && p->in_features != m.in) {
        return absl::InternalError(absl::StrCat(what, ": parts differ in width"));
      }
      m.in = p->in_features;
      m.out = aligned(m.out) + p->out_features;
      all_int8 = all_int8 && p->format == WeightFormat::kInt8;
    }
    m.out = aligned(m.out);
    if (all_int8) {
      const int64_t groups = m.in / kInt8GroupSize;
      ASSIGN_OR_RETURN(char* codes, Alloc(m.out * m.in, what + " (int8)"));
      ASSIGN_OR_RETURN(char* scales, Alloc(m.out * groups * 2, what + " (int8 scales)"));
      RETURN_IF_ERROR(Zero(codes, m.out * m.in));
      RETURN_IF_ERROR(Zero(scales, m.out * groups * 2));
      m.codes = reinterpret_cast<const int8_t*>(codes);
      m.scales = reinterpret_cast<const uint16_t*>(scales);
      int64_t row = 0;
      for (const Linear* p : parts) {
        RETURN_IF_ERROR(Copy(codes + row * m.in, p->data, p->out_features * m.in));
        RETURN_IF_ERROR(Copy(scales + row * groups * 2, p->scales, p->out_features * groups * 2));
        row = aligned(row + p->out_features);
      }
      return m;
    }
    ASSIGN_OR_RETURN(char* base, Alloc(m.out * m.in * 2, what));
    RETURN_IF_ERROR(Zero(base, m.out * m.in * 2));
    auto* dst = reinterpret_cast<uint16_t*>(base);
    int64_t row = 0;
    for (const Linear* p : parts) {
      RETURN_IF_ERROR(CopyBf16(*p, dst + row * m.in, what));
      row = aligned(row + p->out_features);
    }
    m.w = reinterpret_cast<const uint16_t*>(base);
    return m;
  }

  absl::Status Zero(void* dst, int64_t bytes) {
    return kernels::cuda::CudaStatus(cudaMemset(dst, 0, static_cast<size_t>(bytes)),
                                     "weight upload cudaMemset");
  }

  // One matrix; an empty Linear gives an empty DeviceMatrix.
  absl::StatusOr<DeviceMatrix> Matrix(const Linear& w, const std::string& what) {
    if (w.empty()) return DeviceMatrix{};
    return Stacked({&w}, what);
  }

  // f32 values (null for an empty vector); several vectors are concatenated.
  absl::StatusOr<const float*> Floats(std::initializer_list<const std::vector<float>*> parts,
                                      const std::string& what) {
    int64_t count = 0;
    for (const std::vector<float>* p : parts) count += static_cast<int64_t>(p->size());
    if (count == 0) return nullptr;
    ASSIGN_OR_RETURN(char* base, Alloc(count * 4, what));
    char* dst = base;
    for (const std::vector<float>* p : parts) {
      RETURN_IF_ERROR(Copy(dst, p->data(), static_cast<int64_t>(p->size()) * 4));
      dst += p->size() * 4;
    }
    return reinterpret_cast<const float*>(base);
  }

  absl::Status Experts(const MoeWeights& w, const ModelConfig& cfg, DeviceExperts* e,
                       const std::string& what);
  absl::Status QuantizedExperts(const MoeWeights& w, DeviceExperts* e, const std::string& what);
  // Routed experts to upload, by global id (all of them unless set).
  std::vector<int> experts_;
  absl::Status Kda(const KdaWeights& w, DeviceKda* d, const std::string& what);
  absl::Status Mla(const MlaWeights& w, DeviceMla* d, const std::string& what);
  absl::Status Mlp(const MlpWeights& w, DeviceMlp* d, const std::string& what);
  absl::Status Moe(const MoeWeights& w, const ModelConfig& cfg, DeviceMoe* d,
                   const std::string& what);
  absl::Status Layer(const LayerWeights& w, const ModelConfig& cfg, int l, DeviceLayer* d);

 private:
  DeviceWeights* out_;
  std::vector<uint16_t> staging_;
};

absl::Status WeightUploader::Experts(const MoeWeights& w, const ModelConfig& cfg, DeviceExperts* e,
                                     const std::string& what) {
  const MoeConfig& m = cfg.moe;
  e->num_experts = static_cast<int64_t>(experts_.size());
  e->inter = m.moe_intermediate_size;
  e->in_width = e->out_width = m.is_latent() ? m.routed_expert_hidden_size : cfg.hidden_size;
  // The uploaded experts decide (with --quantization and expert parallelism only this
  // process's experts are quantised); int8 only when every uploaded matrix is (an odd width
  // keeps a matrix as stored; then all go up as bf16, the int8 ones decoded).
  bool all_int8 = !experts_.empty();
  for (int x : experts_) {
    const ExpertWeights& ew = w.experts[static_cast<size_t>(x)];
    for (const Linear* l : {&ew.w1, &ew.w3, &ew.w2}) {
      all_int8 = all_int8 && l->format == WeightFormat::kInt8;
    }
  }
  e->mxfp4 = !experts_.empty() &&
             w.experts[static_cast<size_t>(experts_[0])].w1.format == WeightFormat::kMxfp4;
  e->int8 = all_int8;
  const int64_t gu_rows = 2 * e->inter, n = e->num_experts;
  if (n == 0) return absl::OkStatus();  // a rank holding no expert
  if (!e->mxfp4 && !e->int8) {
    ASSIGN_OR_RETURN(char* gu, Alloc(n * gu_rows * e->in_width * 2, what + " gate|up"));
    ASSIGN_OR_RETURN(char* down, Alloc(n * e->out_width * e->inter * 2, what + " down"));
    for (int64_t x = 0; x < n; ++x) {
      const ExpertWeights& ew = w.experts[static_cast<size_t>(experts_[static_cast<size_t>(x)])];
      auto* g = reinterpret_cast<uint16_t*>(gu) + x * gu_rows * e->in_width;
      RETURN_IF_ERROR(CopyBf16(ew.w1, g, what));
      RETURN_IF_ERROR(CopyBf16(ew.w3, g + e->inter * e->in_width, what));
      RETURN_IF_ERROR(
          CopyBf16(ew.w2, reinterpret_cast<uint16_t*>(down) + x * e->out_width * e->inter, what));
    }
    e->gate_up = reinterpret_cast<const uint16_t*>(gu);
    e->down = reinterpret_cast<const uint16_t*>(down);
    return absl::OkStatus();
  }
  return QuantizedExperts(w, e, what);
}

// MXFP4 or int8 experts: each matrix's codes and scales as stored (Linear::data_bytes /
// scale_bytes), rows stacked as the bf16 layout stacks them ([E, 2I, …] gate then up, [E, out, …]).
absl::Status WeightUploader::QuantizedExperts(const MoeWeights& w, DeviceExperts* e,
                                              const std::string& what) {
  const auto expert = [&](int64_t x) -> const ExpertWeights& {
    return w.experts[static_cast<size_t>(experts_[static_cast<size_t>(x)])];
  };
  const WeightFormat format = expert(0).w1.format;
  const char* name = WeightFormatName(format);
  const int64_t n = e->num_experts;
  // Per expert: gate|up = w1 then w3 (same shape), down = w2.
  const int64_t gu_codes = 2 * expert(0).w1.data_bytes(),
                gu_scales = 2 * expert(0).w1.scale_bytes();
  const int64_t d_codes = expert(0).w2.data_bytes(), d_scales = expert(0).w2.scale_bytes();
  ASSIGN_OR_RETURN(char* gu_c, Alloc(n * gu_codes, absl::StrCat(what, " gate|up (", name, ")")));
  ASSIGN_OR_RETURN(char* gu_s, Alloc(n * gu_scales, what + " gate|up scales"));
  ASSIGN_OR_RETURN(char* d_c, Alloc(n * d_codes, absl::StrCat(what, " down (", name, ")")));
  ASSIGN_OR_RETURN(char* d_s, Alloc(n * d_scales, what + " down scales"));
  for (int64_t x = 0; x < n; ++x) {
    const ExpertWeights& ew = expert(x);
    for (const Linear* l : {&ew.w1, &ew.w3, &ew.w2}) {
      if (l->format != format) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": experts mix ", name, " and other formats"));
      }
    }
    const int64_t half = gu_codes / 2, half_scales = gu_scales / 2;
    RETURN_IF_ERROR(Copy(gu_c + x * gu_codes, ew.w1.data, half));
    RETURN_IF_ERROR(Copy(gu_c + x * gu_codes + half, ew.w3.data, half));
    RETURN_IF_ERROR(Copy(gu_s + x * gu_scales, ew.w1.scales, half_scales));
    RETURN_IF_ERROR(Copy(gu_s + x * gu_scales + half_scales, ew.w3.scales, half_scales));
    RETURN_IF_ERROR(Copy(d_c + x * d_codes, ew.w2.data, d_codes));
    RETURN_IF_ERROR(Copy(d_s + x * d_scales, ew.w2.scales, d_scales));
  }
  e->gate_up_codes = gu_c;
  e->gate_up_scales = gu_s;
  e->down_codes = d_c;
  e->down_scales = d_s;
  return absl::OkStatus();
}

absl::Status WeightUploader::Kda(const KdaWeights& w, DeviceKda* d, const std::string& what) {
  // One product for every f32 input projection of the normed rows: [q|k|v|b] and a full-rank g.
  d->in_proj_has_g = !w.g_proj.empty();
  d->b_column = w.q_proj.out_features + w.k_proj.out_features + w.v_proj.out_features;
  d->g_column = d->b_column + (w.b_proj.out_features + 3) / 4 * 4;
  if (d->in_proj_has_g) {
    ASSIGN_OR_RETURN(d->in_proj, Stacked({&w.q_proj, &w.k_proj, &w.v_proj, &w.b_proj, &w.g_proj},
                                         what + " q|k|v|b|g", /*row_align=*/4));
  } else {
    ASSIGN_OR_RETURN(d->in_proj, Stacked({&w.q_proj, &w.k_proj, &w.v_proj, &w.b_proj},
                                         what + " q|k|v|b", /*row_align=*/4));
  }
  ASSIGN_OR_RETURN(d->f_a, Matrix(w.f_a_proj, what + " f_a"));
  ASSIGN_OR_RETURN(d->f_b, Matrix(w.f_b_proj, what + " f_b"));
  ASSIGN_OR_RETURN(d->g_a, Matrix(w.g_a_proj, what + " g_a"));
  ASSIGN_OR_RETURN(d->g_b, Matrix(w.g_b_proj, what + " g_b"));
  ASSIGN_OR_RETURN(d->o, Matrix(w.o_proj, what + " o"));
  ASSIGN_OR_RETURN(d->conv_w, Floats({&w.q_conv, &w.k_conv, &w.v_conv}, what + " conv"));
  ASSIGN_OR_RETURN(d->a_log, Floats({&w.a_log}, what + " A_log"));
  ASSIGN_OR_RETURN(d->dt_bias, Floats({&w.dt_bias}, what + " dt_bias"));
  ASSIGN_OR_RETURN(d->o_norm, Floats({&w.o_norm}, what + " o_norm"));
  return absl::OkStatus();
}

absl::Status WeightUploader::Mla(const MlaWeights& w, DeviceMla* d, const std::string& what) {
  ASSIGN_OR_RETURN(d->q, Matrix(w.q_proj, what + " q"));
  ASSIGN_OR_RETURN(d->q_a, Matrix(w.q_a_proj, what + " q_a"));
  ASSIGN_OR_RETURN(d->q_b, Matrix(w.q_b_proj, what + " q_b"));
  ASSIGN_OR_RETURN(d->kv_a, Matrix(w.kv_a_proj, what + " kv_a"));
  ASSIGN_OR_RETURN(d->g, Matrix(w.g_proj, what + " g"));
  ASSIGN_OR_RETURN(d->o, Matrix(w.o_proj, what + " o"));
  ASSIGN_OR_RETURN(d->q_a_norm, Floats({&w.q_a_norm}, what + " q_a_norm"));
  ASSIGN_OR_RETURN(d->kv_a_norm, Floats({&w.kv_a_norm}, what + " kv_a_norm"));
  ASSIGN_OR_RETURN(DeviceMatrix kv_b, Matrix(w.kv_b_proj, what + " kv_b"));
  if (kv_b.int8()) {  // --quantization int8 keeps kv_b_proj as stored
    return absl::InternalError(what + ": kv_b_proj must be bf16 or f32 on the device");
  }
  d->kv_b = kv_b.w;
  return absl::OkStatus();
}

absl::Status WeightUploader::Mlp(const MlpWeights& w, DeviceMlp* d, const std::string& what) {
  ASSIGN_OR_RETURN(d->gate_up, Stacked({&w.gate_proj, &w.up_proj}, what + " gate|up"));
  ASSIGN_OR_RETURN(d->down, Matrix(w.down_proj, what + " down"));
  return absl::OkStatus();
}

absl::Status WeightUploader::Moe(const MoeWeights& w, const ModelConfig& cfg, DeviceMoe* d,
                                 const std::string& what) {
  ASSIGN_OR_RETURN(d->router, Matrix(w.router, what + " router"));
  ASSIGN_OR_RETURN(d->score_bias, Floats({&w.score_bias}, what + " score bias"));
  ASSIGN_OR_RETURN(d->latent_down, Matrix(w.latent_down, what + " latent down"));
  ASSIGN_OR_RETURN(d->latent_up, Matrix(w.latent_up, what + " latent up"));
  ASSIGN_OR_RETURN(d->latent_norm, Floats({&w.latent_norm}, what + " latent norm"));
  RETURN_IF_ERROR(Experts(w, cfg, &d->experts, what + " experts"));
  if (w.has_shared()) RETURN_IF_ERROR(Mlp(w.shared, &d->shared, what + " shared experts"));
  return absl::OkStatus();
}

absl::Status WeightUploader::Layer(const LayerWeights& w, const ModelConfig& cfg, int l,
                                   DeviceLayer* d) {
  const std::string what = absl::StrCat("layer ", l);
  ASSIGN_OR_RETURN(d->input_norm, Floats({&w.input_norm}, what + " input norm"));
  ASSIGN_OR_RETURN(d->post_norm, Floats({&w.post_norm}, what + " post norm"));
  ASSIGN_OR_RETURN(d->attn_res.norm, Floats({&w.attn_res.norm}, what + " AttnRes"));
  ASSIGN_OR_RETURN(d->attn_res.proj, Floats({&w.attn_res.proj}, what + " AttnRes"));
  ASSIGN_OR_RETURN(d->mlp_res.norm, Floats({&w.mlp_res.norm}, what + " AttnRes"));
  ASSIGN_OR_RETURN(d->mlp_res.proj, Floats({&w.mlp_res.proj}, what + " AttnRes"));
  if (w.kda) {
    d->kda = std::make_unique<DeviceKda>();
    RETURN_IF_ERROR(Kda(*w.kda, d->kda.get(), what + " KDA"));
  } else {
    d->mla = std::make_unique<DeviceMla>();
    RETURN_IF_ERROR(Mla(*w.mla, d->mla.get(), what + " MLA"));
  }
  if (w.moe) {
    d->moe = std::make_unique<DeviceMoe>();
    RETURN_IF_ERROR(Moe(*w.moe, cfg, d->moe.get(), what + " MoE"));
  } else {
    d->dense = std::make_unique<DeviceMlp>();
    RETURN_IF_ERROR(Mlp(*w.dense, d->dense.get(), what + " MLP"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Upload(
    const Model& model, const std::vector<int>* local_experts) {
  std::unique_ptr<DeviceWeights> out(new DeviceWeights());
  WeightUploader up(out.get());
  const ModelWeights& w = model.weights();
  const ModelConfig& cfg = model.config();
  const int num_experts = cfg.moe.num_experts;
  if (local_experts == nullptr) {
    for (int e = 0; e < num_experts; ++e) up.experts_.push_back(e);
  } else {
    for (int e : *local_experts) {
      if (e < 0 || e >= num_experts) {
        return absl::InvalidArgumentError(
            absl::StrCat("local expert ", e, " is outside [0, ", num_experts, ")"));
      }
    }
    up.experts_ = *local_experts;
  }
  ASSIGN_OR_RETURN(out->embed_, up.Matrix(w.embed, "embedding"));
  if (w.embed.format == WeightFormat::kInt8) {  // --quantization int8 keeps the embedding
    return absl::InternalError("embedding: must be bf16 or f32 on the device");
  }
  // A tied head quantised to int8 has its own bytes (engine/weight_quantize.h).
  if (cfg.tie_word_embeddings && w.lm_head.data == w.embed.data) {
    out->lm_head_ = out->embed_;
  } else {
    ASSIGN_OR_RETURN(out->lm_head_, up.Matrix(w.lm_head, "lm_head"));
  }
  ASSIGN_OR_RETURN(out->final_norm_, up.Floats({&w.final_norm}, "final norm"));
  ASSIGN_OR_RETURN(out->output_res_.norm, up.Floats({&w.output_res.norm}, "output AttnRes"));
  ASSIGN_OR_RETURN(out->output_res_.proj, up.Floats({&w.output_res.proj}, "output AttnRes"));
  out->layers_.resize(w.layers.size());
  for (size_t l = 0; l < w.layers.size(); ++l) {
    RETURN_IF_ERROR(up.Layer(w.layers[l], cfg, static_cast<int>(l), &out->layers_[l]));
  }
  LOG_INFO("cuda", "weights on the device: {:.2f} GiB in {} buffers ({} of {} routed experts)",
           static_cast<double>(out->bytes_) / (1 << 30), out->buffers_.size(), up.experts_.size(),
           num_experts);
  return out;
}

}  // namespace strata::engine::cuda
