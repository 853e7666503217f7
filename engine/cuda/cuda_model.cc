#include "engine/cuda/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "engine/cuda/expert_exchange.h"
#include "engine/glu_ffn.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/grouped_gemm.h"
#include "kernels/cuda/int8_gemm.h"
#include "kernels/cuda/kda_chunk.h"
#include "kernels/cuda/kda_decode.h"
#include "kernels/cuda/mla_decode.h"
#include "kernels/cuda/mla_prefill.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/mxfp4.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/router.h"

namespace strata::engine::cuda {
namespace kc = kernels::cuda;
namespace {

constexpr float kL2NormEps = 1e-6f;      // FLA l2norm (docs/model.md §3.3), as engine/kda_mixer.cc
constexpr float kLatentNormEps = 1e-6f;  // q_a / kv_a layernorms, as engine/mla_mixer.cc

// y = x · Wᵀ, f32 or bf16 out: cuBLAS for bf16 weights, int8_gemm.h for int8 ones.
template <typename OutT>
absl::Status Gemm(const DeviceContext& c, const DeviceMatrix& w, const uint16_t* x, int64_t m,
                  OutT* y) {
  if (!w.int8()) return kc::GemmBf16(c.cublas, x, m, w.in, w.in, w.w, w.out, y, w.out, c.stream);
  const kc::GemmInt8Path path =
      c.decode_only ? kc::GemmInt8Path::kAuto : kc::GemmInt8Path::kTensorCores;
  const int64_t bytes = kc::GemmInt8WorkspaceBytes(m, path);
  void* ws = nullptr;
  if (bytes > 0) {
    ASSIGN_OR_RETURN(ws, c.scratch->TakeBytes(bytes));
  }
  return kc::GemmInt8(x, m, w.in, w.codes, w.scales, w.out, y, ws, bytes, c.stream, path);
}

// The routed experts' weights as the grouped GEMM takes them: bf16, or the codes and scales in
// the experts' format.
kc::GroupedWeights GroupedExpertWeights(const DeviceExperts& w, const uint16_t* bf16,
                                        const void* codes, const void* scales) {
  if (w.mxfp4) {
    return kc::GroupedWeights::Mxfp4(static_cast<const uint8_t*>(codes),
                                     static_cast<const uint8_t*>(scales));
  }
  if (w.int8) {
    return kc::GroupedWeights::Int8(static_cast<const int8_t*>(codes),
                                    static_cast<const uint16_t*>(scales));
  }
  return kc::GroupedWeights::Bf16(bf16);
}
kc::GroupedWeights GateUpWeights(const DeviceExperts& w) {
  return GroupedExpertWeights(w, w.gate_up, w.gate_up_codes, w.gate_up_scales);
}
kc::GroupedWeights DownWeights(const DeviceExperts& w) {
  return GroupedExpertWeights(w, w.down, w.down_codes, w.down_scales);
}

// Quantised expert weights [rows, cols] (GateUpWeights / DownWeights) as bf16 into dst, as the
// grouped GEMM's load path decodes them.
absl::Status DequantExperts(const kc::GroupedWeights& w, int64_t rows, int64_t cols, uint16_t* dst,
                            cudaStream_t stream) {
  if (w.mxfp4_packed != nullptr) {
    return kc::DequantMxfp4ToBf16(w.mxfp4_packed, w.mxfp4_scales, rows, cols, dst, stream);
  }
  return kc::DequantInt8ToBf16(w.int8_codes, w.int8_scales, rows, cols, dst, stream);
}

template <typename T>
absl::StatusOr<T*> Take(const DeviceContext& c, int64_t count) {
  return c.scratch->Take<T>(count);
}

// o_gated [rows, H·dv] bf16 = σ(gate) ⊙ W_UV,h ō_h for the latent attention outputs o_lat
// [rows, H, 512] bf16 (gate: logits or null).
absl::Status ValueProjectionAndGate(const DeviceContext& ctx, const uint16_t* w_kvb,
                                    const kc::MlaHeadDims& dims, const uint16_t* o_lat,
                                    int64_t rows, const float* gate, uint16_t* o_gated) {
  const int64_t values = rows * dims.num_heads * dims.v_head_dim;
  ASSIGN_OR_RETURN(float* o, Take<float>(ctx, values));
  RETURN_IF_ERROR(kc::MlaApplyValueProjection(ctx.cublas, o_lat, static_cast<int>(rows), w_kvb,
                                              dims, o, ctx.stream));
  return kc::GateToBf16(o, gate, values, o_gated, ctx.stream);
}

int AttnResMaxSources(const ModelConfig& cfg) {
  const int block = cfg.attn_res_block_size;
  return (cfg.num_layers + block - 1) / block + 1;
}

}  // namespace

absl::Status CudaModel::CheckSupported(const ModelConfig& cfg) {
  auto unsupported = [](const std::string& what) {
    return absl::UnimplementedError(absl::StrCat("the CUDA backend needs ", what));
  };
  if (cfg.NumMlaLayers() > 0) {
    const MlaConfig& m = cfg.mla;
    if (m.kv_lora_rank + m.qk_rope_head_dim != kc::kMlaLatentDim ||
        m.qk_rope_head_dim != kc::kMlaRopeDim) {
      return unsupported(absl::StrCat("MLA latent rows of 512 + 64 values (kv_lora_rank 512, ",
                                      "qk_rope_head_dim 64); this model has ", m.kv_lora_rank,
                                      " + ", m.qk_rope_head_dim));
    }
  }
  if (cfg.NumKdaLayers() > 0) {
    if (cfg.kda.head_dim != kc::kKdaHeadDim) {
      return unsupported(absl::StrCat("KDA head_dim 128; this model has ", cfg.kda.head_dim));
    }
    if (cfg.kda.conv_kernel_size < 1 || cfg.kda.conv_kernel_size > 4) {
      return unsupported(
          absl::StrCat("a KDA short conv of 1..4 taps; this model has ", cfg.kda.conv_kernel_size));
    }
  }
  const MoeConfig& moe = cfg.moe;
  if (moe.num_experts > 0 &&
      (moe.num_experts > kc::kMaxRouterExperts || moe.num_experts_per_token > kc::kMaxRouterTopK ||
       moe.num_expert_group > kc::kMaxRouterGroups)) {
    return unsupported(absl::StrCat("≤ ", kc::kMaxRouterExperts, " experts, top-k ≤ ",
                                    kc::kMaxRouterTopK, " and ≤ ", kc::kMaxRouterGroups,
                                    " expert groups; this model has ", moe.num_experts, ", ",
                                    moe.num_experts_per_token, ", ", moe.num_expert_group));
  }
  if (cfg.has_attn_res() && AttnResMaxSources(cfg) > kc::kMaxAttnResSources) {
    return unsupported(absl::StrCat("≤ ", kc::kMaxAttnResSources,
                                    " AttnRes sources; this model has ", AttnResMaxSources(cfg)));
  }
  return absl::OkStatus();
}

CudaModel::CudaModel(const Model& model, std::unique_ptr<DeviceWeights> weights)
    : model_(model), weights_(std::move(weights)) {
  int kda = 0, mla = 0;
  for (int l = 0; l < model.config().num_layers; ++l) {
    mixer_index_.push_back(model.config().IsKda(l) ? kda++ : mla++);
    moe_index_.push_back(model.weights().layers[static_cast<size_t>(l)].moe ? num_moe_layers_++
                                                                            : -1);
  }
}

absl::StatusOr<std::unique_ptr<CudaModel>> CudaModel::Create(const Model& model,
                                                             const CudaModelOptions& options) {
  RETURN_IF_ERROR(CheckSupported(model.config()));
  const TensorParallelShard shard = model.tensor_parallel();
  DeviceCollectives* tp = options.tensor_parallel;
  if (shard.enabled() != (tp != nullptr) ||
      (tp != nullptr && (tp->rank() != shard.rank || tp->size() != shard.size))) {
    return absl::InvalidArgumentError(
        "a tensor-parallel shard needs its group in CudaModelOptions::tensor_parallel (same rank "
        "and size), and a group needs a shard");
  }
  const ContextParallelShard& cp = model.context_parallel();
  if (DeviceCollectives* cp_group = options.context_parallel; cp_group != nullptr) {
    if (cp_group->size() != cp.size || cp_group->rank() != cp.rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CudaModelOptions::context_parallel is rank ", cp_group->rank(), " of ", cp_group->size(),
          " but the shard is context-parallel rank ", cp.rank, " of ", cp.size));
    }
  } else if (cp.enabled() && (tp == nullptr || tp->size() != cp.size)) {
    return absl::InvalidArgumentError(
        "decode context parallelism over fewer ranks than the tensor-parallel group needs its "
        "group in CudaModelOptions::context_parallel");
  }
  // Under tensor parallelism the rank's own share of the routed experts (engine/tensor_parallel.h);
  // with an exchange too (data-parallel groups of tensor-parallel ranks), the exchange's.
  std::vector<int> tp_experts;
  std::vector<int32_t> local_of;
  if (tp != nullptr && options.expert_exchange == nullptr) {
    const std::vector<bool>& mine = model.tensor_parallel_experts();
    for (size_t e = 0; e < mine.size(); ++e) {
      local_of.push_back(mine[e] ? static_cast<int32_t>(tp_experts.size()) : -1);
      if (mine[e]) tp_experts.push_back(static_cast<int>(e));
    }
  }
  const std::vector<int>* local_experts = options.expert_exchange != nullptr
                                              ? &options.expert_exchange->local_experts()
                                          : tp != nullptr ? &tp_experts
                                                          : nullptr;
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceWeights> weights,
                   DeviceWeights::Upload(model, local_experts));
  std::unique_ptr<CudaModel> m(new CudaModel(model, std::move(weights)));
  m->options_ = options;
  if (!local_of.empty()) {
    ASSIGN_OR_RETURN(m->tp_local_of_,
                     kc::DeviceBuffer::Allocate(static_cast<int64_t>(local_of.size()) * 4,
                                                "tensor-parallel expert map"));
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpy(m->tp_local_of_.get(), local_of.data(),
                                           local_of.size() * 4, cudaMemcpyHostToDevice),
                                "tensor-parallel expert map cudaMemcpy");
  }
  ASSIGN_OR_RETURN(m->expert_offsets_host_,
                   kc::PinnedBuffer::Allocate((int64_t{model.config().moe.num_experts} + 1) * 4,
                                              "MoE expert offsets"));
  ASSIGN_OR_RETURN(m->route_done_, kc::DeviceBuffer::Allocate(4, "MoE route counter"));
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemset(m->route_done_.get(), 0, 4),
                              "MoE route counter cudaMemset");
  return m;
}

namespace {

kc::KdaDecodeParams KdaParams(const ModelConfig& cfg) {
  kc::KdaDecodeParams params;
  params.num_heads = cfg.kda.num_heads;
  params.head_dim = cfg.kda.head_dim;
  params.conv_size = cfg.kda.conv_kernel_size;
  params.has_lower_bound = cfg.kda.has_gate_lower_bound;
  params.lower_bound = cfg.kda.gate_lower_bound;
  params.norm_eps = cfg.rms_norm_eps;
  params.l2_eps = kL2NormEps;
  return params;
}

// qkv and b rows `proj_ld` floats apart, g rows `g_ld` apart (0: dense rows).
kc::KdaDecodeInputs KdaInputs(const DeviceKda& w, const float* qkv, const float* f, const float* b,
                              const float* g, const int32_t* slots, int64_t proj_ld = 0,
                              int64_t g_ld = 0) {
  kc::KdaDecodeInputs in;
  in.qkv_raw = qkv;
  in.f = f;
  in.b_raw = b;
  in.g_raw = g;
  in.qkv_stride = in.b_stride = proj_ld;
  in.g_stride = g_ld;
  in.conv_w = w.conv_w;
  in.a_log = w.a_log;
  in.dt_bias = w.dt_bias;
  in.o_norm_w = w.o_norm;
  in.slots = slots;
  return in;
}

}  // namespace

absl::Status CudaModel::KdaMultiToken(const kc::KdaDecodeInputs& in, const int32_t* cu_seqlens,
                                      float* state, float* conv, const kc::KdaDecodeParams& params,
                                      uint16_t* y, cudaStream_t stream) const {
  // K3's bounded gate: the chunked tensor-core form; else (Kimi-Linear) the exact serial one.
  const bool chunked = options_.chunked_kda_prefill && params.has_lower_bound &&
                       params.lower_bound >= kc::kKdaChunkedMinLowerBound &&
                       params.lower_bound < 0.0f;
  return chunked ? kc::KdaPrefillChunked(in, cu_seqlens, state, conv, params, y, stream)
                 : kc::KdaPrefillRecurrent(in, cu_seqlens, state, conv, params, y, stream);
}

absl::Status CudaModel::KdaSavingPieces(const kc::KdaDecodeInputs& prefill, const DeviceStep& step,
                                        float* state, float* conv, kc::KdaDecodeParams params,
                                        uint16_t* y, cudaStream_t stream) const {
  const StepLayout& s = *step.host;
  const int64_t state_floats = config().kda.state_floats();
  const int64_t conv_floats = config().kda.conv_floats();
  params.batch = 1;
  for (size_t k = 0; k < s.kda_piece_seq.size(); ++k) {
    const int32_t seq = s.kda_piece_seq[k] - s.num_decode;  // among the prefill sequences
    kc::KdaDecodeInputs in = prefill;
    in.slots += seq;
    RETURN_IF_ERROR(
        KdaMultiToken(in, step.at(s.kda_pieces_cu) + 2 * k, state, conv, params, y, stream));
    const int32_t save_row = s.kda_piece_save_row[k];
    if (save_row < 0) continue;
    const int32_t slot_row = s.ints[static_cast<size_t>(s.kda_slots + s.kda_piece_seq[k])];
    for (auto [cache, floats] : {std::pair{state, state_floats}, std::pair{conv, conv_floats}}) {
      STRATA_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(cache + save_row * floats, cache + slot_row * floats,
                          static_cast<size_t>(floats) * sizeof(float), cudaMemcpyDeviceToDevice,
                          stream),
          "KDA checkpoint cudaMemcpyAsync");
    }
  }
  return absl::OkStatus();
}

absl::Status CudaModel::KdaMixer(const DeviceKda& w, int kda_index, const DeviceStep& step,
                                 const DeviceCaches& caches, const DeviceContext& ctx,
                                 const Rows& rows) {
  const ModelConfig& cfg = config();
  const int64_t n = rows.n, heads = cfg.kda.num_heads, p = cfg.kda.projection_size();
  const int64_t dk = cfg.kda.head_dim;
  const StepLayout& s = *step.host;
  // One product for q|k|v, b and a full-rank g (DeviceKda::in_proj): their rows are column
  // ranges of proj [n, ld]; the low-rank f (and g) in products of their own.
  const int64_t ld = w.in_proj.out;
  ASSIGN_OR_RETURN(float* proj, Take<float>(ctx, n * ld));
  ASSIGN_OR_RETURN(uint16_t * low, Take<uint16_t>(ctx, n * dk));
  ASSIGN_OR_RETURN(float* f, Take<float>(ctx, n * p));
  ASSIGN_OR_RETURN(uint16_t * y, Take<uint16_t>(ctx, n * p));
  RETURN_IF_ERROR(Gemm(ctx, w.in_proj, rows.normed, n, proj));
  float* const qkv = proj;
  float* const b = proj + w.b_column;
  float* g = proj + w.g_column;
  int64_t g_ld = ld;
  RETURN_IF_ERROR(Gemm(ctx, w.f_a, rows.normed, n, low));
  RETURN_IF_ERROR(Gemm(ctx, w.f_b, low, n, f));
  if (!w.in_proj_has_g) {
    ASSIGN_OR_RETURN(g, Take<float>(ctx, n * p));
    g_ld = p;
    RETURN_IF_ERROR(Gemm(ctx, w.g_a, rows.normed, n, low));
    RETURN_IF_ERROR(Gemm(ctx, w.g_b, low, n, g));
  }

  kc::KdaDecodeParams params = KdaParams(cfg);
  float* state = caches.kda_state[static_cast<size_t>(kda_index)];
  float* conv = caches.kda_conv[static_cast<size_t>(kda_index)];
  const int64_t d = s.num_decode;
  if (d > 0) {
    params.batch = static_cast<int>(d);
    RETURN_IF_ERROR(kc::KdaDecodeStep(KdaInputs(w, qkv, f, b, g, step.at(s.kda_slots), ld, g_ld),
                                      state, conv, params, y, ctx.stream));
  }
  // The prefill sequences' rows follow the decode rows (step_layout.h): the plain ones, then
  // those saving checkpoints inside the step, then the last num_drafting, which verify drafts:
  // their caches are read, not written, and their rows kept for the replay of the tokens the
  // sampler keeps (ReplayKdaDrafts).
  const int32_t drafting = s.num_drafting;
  const int32_t plain = s.num_plain_prefill();
  const kc::KdaDecodeInputs in = KdaInputs(w, qkv + d * ld, f + d * p, b + d * ld, g + d * g_ld,
                                           step.at(s.kda_slots) + d, ld, g_ld);
  if (plain > 0) {
    params.batch = plain;
    RETURN_IF_ERROR(
        KdaMultiToken(in, step.at(s.prefill_cu), state, conv, params, y + d * p, ctx.stream));
  }
  RETURN_IF_ERROR(KdaSavingPieces(in, step, state, conv, params, y + d * p, ctx.stream));
  if (drafting > 0) {
    const DeviceKdaDrafts& kept = step.kda_drafts;
    const int64_t first = s.first_draft_row, count = n - first;
    if (kept.base == nullptr || kept.num_rows != count) {
      return absl::InternalError("KDA draft rows not reserved for the step");
    }
    // Kept dense (ReplayKdaDrafts reads them with dense strides).
    for (auto [dst, src, width, src_ld] :
         {std::tuple{kept.qkv(kda_index), qkv, 3 * p, ld}, std::tuple{kept.f(kda_index), f, p, p},
          std::tuple{kept.b(kda_index), b, heads, ld}}) {
      STRATA_CUDA_RETURN_IF_ERROR(
          cudaMemcpy2DAsync(dst, width * 4, src + first * src_ld, src_ld * 4, width * 4, count,
                            cudaMemcpyDeviceToDevice, ctx.stream),
          "KDA draft rows cudaMemcpy2DAsync");
    }
    kc::KdaDecodeInputs verify = in;
    const int32_t before = s.num_prefill() - drafting;
    verify.slots += before;
    params.batch = drafting;
    params.update_caches = false;
    RETURN_IF_ERROR(KdaMultiToken(verify, step.at(s.prefill_cu) + before, state, conv, params,
                                  y + d * p, ctx.stream));
  }
  return Gemm(ctx, w.o, y, n, rows.out);
}

absl::Status CudaModel::ReplayKdaDrafts(const DeviceStep& step, const DeviceCaches& caches,
                                        const DeviceContext& ctx, const int32_t* cu,
                                        const int32_t* ends) {
  const StepLayout& s = *step.host;
  const DeviceKdaDrafts& kept = step.kda_drafts;
  if (s.num_drafting == 0 || kept.base == nullptr) return absl::OkStatus();
  kc::KdaDecodeParams params = KdaParams(config());
  params.batch = s.num_drafting;
  ASSIGN_OR_RETURN(uint16_t * y, Take<uint16_t>(ctx, kept.num_rows * kept.width));  // discarded
  const int32_t* slots = step.at(s.kda_slots) + (s.num_sequences - s.num_drafting);
  for (int l = 0; l < config().num_layers; ++l) {
    const DeviceLayer& lw = weights_->layer(l);
    if (!lw.kda) continue;
    const int j = mixer_index_[static_cast<size_t>(l)];
    // The output gate only has to be readable: y is discarded.
    kc::KdaDecodeInputs in =
        KdaInputs(*lw.kda, kept.qkv(j), kept.f(j), kept.b(j), kept.f(j), slots);
    in.seq_ends = ends;
    RETURN_IF_ERROR(KdaMultiToken(in, cu, caches.kda_state[static_cast<size_t>(j)],
                                  caches.kda_conv[static_cast<size_t>(j)], params, y, ctx.stream));
  }
  return absl::OkStatus();
}

absl::Status CudaModel::MlaMixer(const DeviceMla& w, int mla_index, const DeviceStep& step,
                                 const DeviceCaches& caches, const DeviceContext& ctx,
                                 const Rows& rows) {
  const MlaConfig& m = config().mla;
  const StepLayout& s = *step.host;
  const int64_t n = rows.n, heads = m.num_heads, dv = m.v_head_dim;
  ASSIGN_OR_RETURN(uint16_t * q, Take<uint16_t>(ctx, n * heads * m.qk_head_dim()));
  if (!w.q_a.empty()) {
    ASSIGN_OR_RETURN(float* cq, Take<float>(ctx, n * m.q_lora_rank));
    ASSIGN_OR_RETURN(uint16_t * cq_normed, Take<uint16_t>(ctx, n * m.q_lora_rank));
    RETURN_IF_ERROR(Gemm(ctx, w.q_a, rows.normed, n, cq));
    RETURN_IF_ERROR(
        kc::RmsNorm(cq, n, m.q_lora_rank, w.q_a_norm, kLatentNormEps, cq_normed, ctx.stream));
    RETURN_IF_ERROR(Gemm(ctx, w.q_b, cq_normed, n, q));
  } else {
    RETURN_IF_ERROR(Gemm(ctx, w.q, rows.normed, n, q));
  }
  ASSIGN_OR_RETURN(float* kv, Take<float>(ctx, n * m.latent_dim()));
  RETURN_IF_ERROR(Gemm(ctx, w.kv_a, rows.normed, n, kv));
  void* pages = caches.mla_pages[static_cast<size_t>(mla_index)];
  RETURN_IF_ERROR(kc::MlaWriteLatents(kv, n, m.kv_lora_rank, m.qk_rope_head_dim, w.kv_a_norm,
                                      kLatentNormEps, step.at(s.slot_mapping), pages,
                                      caches.latent_dtype, ctx.stream));

  const float* gate = nullptr;  // logits [n, H·dv]; the attention epilogues apply σ
  if (!w.g.empty()) {
    ASSIGN_OR_RETURN(float* g, Take<float>(ctx, n * heads * dv));
    RETURN_IF_ERROR(Gemm(ctx, w.g, rows.normed, n, g));
    gate = g;
  }
  ASSIGN_OR_RETURN(uint16_t * o_gated, Take<uint16_t>(ctx, n * heads * dv));
  if (model_.context_parallel().enabled()) {
    RETURN_IF_ERROR(
        ContextParallelAttention(m, w, step, pages, caches.latent_dtype, ctx, q, n, gate, o_gated));
    return Gemm(ctx, w.o, o_gated, n, rows.out);
  }
  const int64_t d = s.num_decode;
  const float scale = 1.0f / std::sqrt(static_cast<float>(m.qk_head_dim()));

  // Prefill rows: the MHA form (K/V expanded per head, causal flash attention), over context
  // windows when the whole context's expansion would not fit the scratch budget; the absorbed
  // form with the decode rows when the windows would be too short to pay for their launches.
  kc::MlaPrefillParams mha;
  mha.num_seqs = s.num_prefill();
  mha.num_heads = m.num_heads;
  mha.max_blocks_per_seq = s.max_blocks_per_seq;
  mha.max_context = static_cast<int>(s.max_prefill_context);
  mha.max_new = static_cast<int>(s.max_prefill_new);
  mha.total_context = s.total_prefill_context;
  mha.total_new = s.num_prefill_rows();
  mha.scale = scale;
  mha.cache_dtype = caches.latent_dtype;
  int64_t window = options_.mha_context_chunk;
  if (window <= 0) {  // 0: the whole context fits; −1: not even the accumulators fit
    window = s.num_prefill_rows() > 0
                 ? kc::MlaPrefillContextChunkFor(mha, options_.mha_prefill_scratch_bytes)
                 : -1;
  }
  if (window > 0) mha.max_context_chunk = window;
  const bool use_mha = options_.mha_prefill && s.num_prefill_rows() > 0 &&
                       m.qk_nope_head_dim == kc::kMlaQkNopeDim &&
                       m.v_head_dim == kc::kMlaVHeadDim &&
                       (window == 0 || window >= options_.min_mha_context_chunk ||
                        (window > 0 && window == options_.mha_context_chunk));
  const int64_t absorbed_rows = use_mha ? d : n;
  if (absorbed_rows > 0) {
    RETURN_IF_ERROR(AbsorbedAttention(m, w, step, pages, caches.latent_dtype, ctx, q, absorbed_rows,
                                      gate, o_gated));
  }
  if (use_mha) {
    const int64_t bytes = kc::MlaPrefillWorkspaceBytes(mha);
    ASSIGN_OR_RETURN(void* ws, ctx.scratch->TakeBytes(bytes));
    RETURN_IF_ERROR(kc::MlaPrefillMha(ctx.cublas, q + d * heads * m.qk_head_dim(), pages,
                                      step.at(s.block_tables) + d * s.max_blocks_per_seq,
                                      step.at(s.prefill_cu), step.at(s.prefill_cu_k), w.kv_b,
                                      gate != nullptr ? gate + d * heads * dv : nullptr, mha, ws,
                                      bytes, o_gated + d * heads * dv, ctx.stream));
  }
  return Gemm(ctx, w.o, o_gated, n, rows.out);
}

// The absorbed form over rows [0, rows) of the step: the decode rows through the paged decode
// kernel and, when rows > num_decode, the prefill rows through the paged prefill; then W_UV and
// the output gate into o_gated (bf16).
absl::Status CudaModel::AbsorbedAttention(const MlaConfig& m, const DeviceMla& w,
                                          const DeviceStep& step, const void* pages,
                                          LatentDType cache_dtype, const DeviceContext& ctx,
                                          const uint16_t* q, int64_t rows, const float* gate,
                                          uint16_t* o_gated) {
  const StepLayout& s = *step.host;
  const int64_t heads = m.num_heads, d = s.num_decode;
  const kc::MlaHeadDims dims{m.num_heads, m.qk_nope_head_dim, m.v_head_dim};
  ASSIGN_OR_RETURN(uint16_t * q_abs, Take<uint16_t>(ctx, rows * heads * kc::kMlaLatentDim));
  ASSIGN_OR_RETURN(uint16_t * o_lat, Take<uint16_t>(ctx, rows * heads * kc::kMlaValueDim));
  RETURN_IF_ERROR(
      kc::MlaAbsorbQuery(ctx.cublas, q, static_cast<int>(rows), w.kv_b, dims, q_abs, ctx.stream));
  kc::MlaDecodeParams params;
  params.num_heads = m.num_heads;
  params.max_blocks_per_seq = s.max_blocks_per_seq;
  params.scale = 1.0f / std::sqrt(static_cast<float>(m.qk_head_dim()));
  params.cache_dtype = cache_dtype;
  if (d > 0) {
    params.batch = static_cast<int>(d);
    params.max_context = static_cast<int>(s.max_decode_context);
    const int64_t bytes = kc::MlaDecodeWorkspaceBytes(params);
    ASSIGN_OR_RETURN(void* ws, ctx.scratch->TakeBytes(bytes));
    RETURN_IF_ERROR(kc::MlaPagedDecode(q_abs, pages, step.at(s.block_tables), step.at(s.seq_lens),
                                       params, ws, bytes, o_lat, ctx.stream));
  }
  if (rows > d) {
    params.batch = static_cast<int>(rows - d);
    params.max_context = static_cast<int>(s.max_prefill_context);
    const int64_t bytes = kc::MlaDecodeWorkspaceBytes(params);
    ASSIGN_OR_RETURN(void* ws, ctx.scratch->TakeBytes(bytes));
    RETURN_IF_ERROR(kc::MlaPagedPrefill(
        q_abs + d * heads * kc::kMlaLatentDim, pages, step.at(s.block_tables), step.at(s.query_seq),
        step.at(s.query_len), params, ws, bytes, o_lat + d * heads * kc::kMlaValueDim, ctx.stream));
  }
  return ValueProjectionAndGate(ctx, w.kv_b, dims, o_lat, rows, gate, o_gated);
}

// Decode context parallelism (engine/tensor_parallel.h; the CPU's AttendContextParallel in
// engine/mla_mixer.cc): q̃ of this rank's heads → all-gather (every head of the group) → each
// rank's queries over this rank's rows (MlaPagedPartial, one launch per source rank) →
// all-to-all (each partial to its heads' rank) → log-sum-exp merge → W_UV and the gate.
// With C < T the ranks g·C … g·C + C − 1 form context-parallel group g (every position once),
// whose own communicator (CudaModelOptions::context_parallel) carries both collectives: a rank
// moves C − 1 shares, not T − 1. Collectives on the stream: no host synchronisation.
absl::Status CudaModel::ContextParallelAttention(const MlaConfig& m, const DeviceMla& w,
                                                 const DeviceStep& step, const void* pages,
                                                 LatentDType cache_dtype, const DeviceContext& ctx,
                                                 const uint16_t* q, int64_t rows, const float* gate,
                                                 uint16_t* o_gated) {
  const StepLayout& s = *step.host;
  DeviceCollectives* group =
      options_.context_parallel != nullptr ? options_.context_parallel : options_.tensor_parallel;
  CHECK(group != nullptr && group->size() == s.cp_size)
      << "the context-parallel group holds the C ranks that share the positions";
  if (rows == 0) return absl::OkStatus();  // every rank runs the same plan: all skip together
  const int parts = s.cp_size;
  const int64_t heads = m.num_heads;
  const int64_t q_values = rows * heads * kc::kMlaLatentDim;  // even: 576 per head
  const int64_t part = rows * heads * (kc::kMlaValueDim + 1);
  const kc::MlaHeadDims dims{m.num_heads, m.qk_nope_head_dim, m.v_head_dim};
  ASSIGN_OR_RETURN(uint16_t * q_abs, Take<uint16_t>(ctx, q_values));
  ASSIGN_OR_RETURN(uint16_t * all_q, Take<uint16_t>(ctx, parts * q_values));
  ASSIGN_OR_RETURN(float* send, Take<float>(ctx, parts * part));
  ASSIGN_OR_RETURN(float* recv, Take<float>(ctx, parts * part));
  ASSIGN_OR_RETURN(uint16_t * o_lat, Take<uint16_t>(ctx, rows * heads * kc::kMlaValueDim));
  RETURN_IF_ERROR(
      kc::MlaAbsorbQuery(ctx.cublas, q, static_cast<int>(rows), w.kv_b, dims, q_abs, ctx.stream));
  RETURN_IF_ERROR(group->AllGather(q_abs, q_values * sizeof(uint16_t), all_q, ctx.stream));
  kc::MlaDecodeParams params;
  params.batch = static_cast<int>(rows);
  params.num_heads = m.num_heads;
  params.max_blocks_per_seq = s.max_blocks_per_seq;
  params.max_context = static_cast<int>(s.max_cp_query_len);
  params.scale = 1.0f / std::sqrt(static_cast<float>(m.qk_head_dim()));
  params.cache_dtype = cache_dtype;
  const int64_t bytes = kc::MlaDecodeWorkspaceBytes(params);
  ASSIGN_OR_RETURN(void* ws, ctx.scratch->TakeBytes(bytes));
  for (int c = 0; c < parts; ++c) {
    RETURN_IF_ERROR(kc::MlaPagedPartial(all_q + c * q_values, pages, step.at(s.block_tables),
                                        step.at(s.cp_query_seq), step.at(s.cp_query_len), params,
                                        ws, bytes, send + c * part, ctx.stream));
  }
  RETURN_IF_ERROR(group->AllToAll(send, recv, part * sizeof(float), ctx.stream));
  RETURN_IF_ERROR(kc::MlaMergePartials(recv, parts, rows * heads, o_lat, ctx.stream));
  return ValueProjectionAndGate(ctx, w.kv_b, dims, o_lat, rows, gate, o_gated);
}

absl::Status CudaModel::Mlp(const DeviceMlp& w, const DeviceContext& ctx, const uint16_t* x,
                            int64_t n, float* out, bool accumulate) {
  const int64_t inter = w.gate_up.out / 2;
  ASSIGN_OR_RETURN(float* gu, Take<float>(ctx, n * 2 * inter));
  ASSIGN_OR_RETURN(uint16_t * h, Take<uint16_t>(ctx, n * inter));
  RETURN_IF_ERROR(Gemm(ctx, w.gate_up, x, n, gu));
  RETURN_IF_ERROR(
      kc::Glu(gu, gu + inter, n, inter, 2 * inter, GluFromConfig(config()), h, ctx.stream));
  if (!accumulate) return Gemm(ctx, w.down, h, n, out);
  const DeviceMatrix& down = w.down;
  if (!down.int8()) {  // the add in cuBLAS's epilogue
    return kc::GemmBf16Accumulate(ctx.cublas, h, n, down.in, down.in, down.w, down.out, out,
                                  down.out, ctx.stream);
  }
  ASSIGN_OR_RETURN(float* part, Take<float>(ctx, n * down.out));
  RETURN_IF_ERROR(Gemm(ctx, down, h, n, part));
  return kc::AddInPlace(out, part, n * down.out, ctx.stream);
}

absl::StatusOr<CudaModel::Permutation> CudaModel::TakePermutation(const DeviceContext& ctx,
                                                                  int64_t n, int32_t* offsets) {
  const int64_t pairs = n * config().moe.num_experts_per_token;
  Permutation perm;
  perm.offsets = offsets;
  ASSIGN_OR_RETURN(perm.permuted_token, Take<int32_t>(ctx, pairs));
  ASSIGN_OR_RETURN(perm.pair_row, Take<int32_t>(ctx, pairs));
  return perm;
}

absl::Status CudaModel::RoutedExperts(const DeviceExperts& w, const DeviceContext& ctx,
                                      const uint16_t* z, int64_t n, const int32_t* ids,
                                      const float* weights, float* routed,
                                      int32_t* expert_offsets) {
  const int num_experts = static_cast<int>(w.num_experts);
  const int64_t permute_bytes = kc::MoePermuteWorkspaceBytes(num_experts);
  ASSIGN_OR_RETURN(void* permute_ws, ctx.scratch->TakeBytes(permute_bytes));
  ASSIGN_OR_RETURN(Permutation perm, TakePermutation(ctx, n, expert_offsets));
  RETURN_IF_ERROR(kc::MoePermute(ids, n, config().moe.num_experts_per_token, num_experts,
                                 permute_ws, permute_bytes, perm.offsets, perm.permuted_token,
                                 perm.pair_row, ctx.stream));
  return ExpertsOnPermutation(w, ctx, z, n, perm, weights, routed, /*accumulate=*/false);
}

// The rows dropped pairs leave past offsets[E] name token 0 and no expert covers them (never
// used).
absl::Status CudaModel::ExpertsOnPermutation(const DeviceExperts& w, const DeviceContext& ctx,
                                             const uint16_t* z, int64_t n, const Permutation& perm,
                                             const float* weights, float* routed, bool accumulate,
                                             DeferredCombine* defer) {
  const int top_k = config().moe.num_experts_per_token;
  const int64_t pairs = n * top_k;
  ASSIGN_OR_RETURN(uint16_t * h, Take<uint16_t>(ctx, pairs * w.inter));
  ASSIGN_OR_RETURN(float* y, Take<float>(ctx, pairs * w.out_width));
  if (options_.own_grouped_gemm) {
    RETURN_IF_ERROR(OwnGroupedGemms(w, ctx, z, n, perm.permuted_token, pairs, perm.offsets, h, y));
  } else {
    ASSIGN_OR_RETURN(uint16_t * x_perm, Take<uint16_t>(ctx, pairs * w.in_width));
    RETURN_IF_ERROR(
        kc::MoeGatherRows(z, perm.permuted_token, pairs, w.in_width, x_perm, ctx.stream));
    RETURN_IF_ERROR(CublasGroupedGemms(w, ctx, x_perm, perm.offsets, h, y));
  }
  if (defer != nullptr) {  // the residual add that follows sums the experts' rows
    defer->routed = kc::RoutedSum{y, perm.pair_row, weights, top_k};
    defer->shared = accumulate;
    return absl::OkStatus();
  }
  return kc::MoeCombine(y, perm.pair_row, weights, n, top_k, w.out_width, routed, ctx.stream,
                        accumulate);
}

// Strata's grouped GEMM: offsets read on the device (no host synchronisation: graph-capturable),
// the rows gathered and gate|up's GLU applied in the first product, whose work list the down
// product reuses; MXFP4 and int8 weights dequantised in the load path.
absl::Status CudaModel::OwnGroupedGemms(const DeviceExperts& w, const DeviceContext& ctx,
                                        const uint16_t* z, int64_t n, const int32_t* permuted_token,
                                        int64_t rows, const int32_t* offsets, uint16_t* h,
                                        float* y) {
  const int num_experts = static_cast<int>(w.num_experts);
  const int64_t bytes = kc::GroupedGemmWorkspaceBytes(num_experts, rows);
  ASSIGN_OR_RETURN(void* ws, ctx.scratch->TakeBytes(bytes));
  const kc::GroupedWeights gate_up = GateUpWeights(w), down = DownWeights(w);
  kc::GroupedGemmOptions gather;
  gather.x_rows = permuted_token;
  gather.x_row_count = n;
  RETURN_IF_ERROR(kc::GroupedGemmGlu(z, offsets, num_experts, rows, gate_up, w.inter, w.in_width,
                                     GluFromConfig(config()), h, kc::GroupedGemmTile::kAuto, ws,
                                     bytes, ctx.stream, gather));
  kc::GroupedGemmOptions reuse;
  reuse.reuse_work_list = true;
  return kc::GroupedGemm(h, offsets, num_experts, rows, down, w.out_width, w.inter, y,
                         kc::GroupedGemmTile::kAuto, ws, bytes, ctx.stream, reuse);
}

// cuBLAS's grouped GEMM: it takes the group sizes on the host (one synchronisation per layer);
// GLU as a separate pass; MXFP4 and int8 experts dequantised whole into scratch first.
absl::Status CudaModel::CublasGroupedGemms(const DeviceExperts& w, const DeviceContext& ctx,
                                           const uint16_t* x_perm, const int32_t* offsets,
                                           uint16_t* h, float* y) {
  const int num_experts = static_cast<int>(w.num_experts);
  const int64_t inter = w.inter;
  int32_t* host_offsets = expert_offsets_host_.as<int32_t>();
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_offsets, offsets, (num_experts + 1) * sizeof(int32_t),
                      cudaMemcpyDeviceToHost, ctx.stream),
      "expert offsets cudaMemcpyAsync");
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ctx.stream), "MoE cudaStreamSynchronize");
  const int64_t rows = host_offsets[num_experts];
  const int64_t gemm_bytes = kc::MoeGroupedGemmWorkspaceBytes(num_experts);
  ASSIGN_OR_RETURN(void* gemm_ws, ctx.scratch->TakeBytes(gemm_bytes));
  const uint16_t* gate_up = w.gate_up;
  const uint16_t* down = w.down;
  // MXFP4 / int8: every expert's matrix in bf16, one product at a time.
  const bool quantized = w.mxfp4 || w.int8;
  uint16_t* dequant = nullptr;
  if (quantized) {
    const int64_t values = w.num_experts * std::max(2 * inter * w.in_width, w.out_width * inter);
    ASSIGN_OR_RETURN(dequant, Take<uint16_t>(ctx, values));
    RETURN_IF_ERROR(DequantExperts(GateUpWeights(w), w.num_experts * 2 * inter, w.in_width, dequant,
                                   ctx.stream));
    gate_up = dequant;
  }
  ASSIGN_OR_RETURN(float* gu, Take<float>(ctx, rows * 2 * inter));
  RETURN_IF_ERROR(kc::MoeGroupedGemm(ctx.cublas, x_perm, host_offsets, num_experts, gate_up,
                                     2 * inter, w.in_width, gu, kc::GroupedGemmMode::kAuto, gemm_ws,
                                     gemm_bytes, nullptr, ctx.stream));
  RETURN_IF_ERROR(
      kc::Glu(gu, gu + inter, rows, inter, 2 * inter, GluFromConfig(config()), h, ctx.stream));
  if (quantized) {  // stream order: the gate|up product has consumed the scratch
    RETURN_IF_ERROR(
        DequantExperts(DownWeights(w), w.num_experts * w.out_width, inter, dequant, ctx.stream));
    down = dequant;
  }
  return kc::MoeGroupedGemm(ctx.cublas, h, host_offsets, num_experts, down, w.out_width, inter, y,
                            kc::GroupedGemmMode::kAuto, gemm_ws, gemm_bytes, nullptr, ctx.stream);
}

absl::Status CudaModel::ExchangeExperts(const DeviceExperts& w, int moe_layer,
                                        const DeviceContext& ctx, const uint16_t* z, int64_t n,
                                        int32_t* ids, const float* weights, float* routed) {
  const int top_k = config().moe.num_experts_per_token;
  auto run = [&](const uint16_t* rz, int64_t rows, int32_t* rids, const float* rweights,
                 float* out) -> absl::Status {
    // Offsets of the local experts: scratch (the step's table is indexed by global expert).
    ASSIGN_OR_RETURN(int32_t * offsets, Take<int32_t>(ctx, w.num_experts + 1));
    return RoutedExperts(w, ctx, rz, rows, rids, rweights, out, offsets);
  };
  return options_.expert_exchange->Exchange(moe_layer, z, n, w.in_width, top_k, ids, weights,
                                            routed, ctx, run);
}

absl::Status CudaModel::Moe(const DeviceMoe& w, int moe_layer, const DeviceContext& ctx,
                            const Rows& rows, int32_t* expert_offsets, DeferredCombine* defer) {
  const ModelConfig& cfg = config();
  const MoeConfig& m = cfg.moe;
  const int64_t n = rows.n, top_k = m.num_experts_per_token;
  ASSIGN_OR_RETURN(float* logits, Take<float>(ctx, n * m.num_experts));
  ASSIGN_OR_RETURN(int32_t * ids, Take<int32_t>(ctx, n * top_k));
  ASSIGN_OR_RETURN(float* weights, Take<float>(ctx, n * top_k));
  RETURN_IF_ERROR(Gemm(ctx, w.router, rows.normed, n, logits));
  const kernels::RouterParams params{m.num_experts,      m.num_experts_per_token,
                                     m.num_expert_group, m.topk_group,
                                     m.renormalize,      m.routed_scaling_factor};
  const bool exchange = options_.expert_exchange != nullptr;
  Permutation perm;  // without an exchange: grouped by the routing launch itself
  if (exchange) {
    RETURN_IF_ERROR(kc::Route(logits, n, w.score_bias, params, ids, weights, ctx.stream));
  } else {
    // Padding rows of a graph-replayed step route nowhere; under tensor parallelism this rank's
    // experts on every row (the others' pairs dropped), its partial sums, which the group adds
    // up, and the layer's slot of the global offsets table stays zero.
    kc::RoutePermutation route;
    route.num_experts = static_cast<int>(w.experts.num_experts);
    route.options.live_tokens = rows.live_rows;
    int32_t* offsets = expert_offsets;
    if (options_.tensor_parallel != nullptr) {
      route.options.local_of = tp_local_of_.as<int32_t>();
      route.options.id_space = m.num_experts;
      STRATA_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(expert_offsets, 0, (m.num_experts + 1) * sizeof(int32_t), ctx.stream),
          "expert offsets cudaMemsetAsync");
      ASSIGN_OR_RETURN(offsets, Take<int32_t>(ctx, w.experts.num_experts + 1));
    }
    ASSIGN_OR_RETURN(perm, TakePermutation(ctx, n, offsets));
    route.expert_offsets = perm.offsets;
    route.permuted_token = perm.permuted_token;
    route.pair_row = perm.pair_row;
    route.done_counter = route_done_.as<int32_t>();
    route.workspace_bytes = kc::MoePermuteWorkspaceBytes(route.num_experts);
    ASSIGN_OR_RETURN(route.workspace, ctx.scratch->TakeBytes(route.workspace_bytes));
    RETURN_IF_ERROR(
        kc::RouteAndPermute(logits, n, w.score_bias, params, ids, weights, route, ctx.stream));
  }

  // Routed experts see z = W_down x (LatentMoE) or x itself.
  const uint16_t* z = rows.normed;
  float* routed = rows.out;
  const int64_t width = w.experts.in_width;
  // Without a latent space or an exchange the shared expert runs first, into out, and the
  // routed experts' combine adds to it (one pass, no separate add).
  const bool shared_first = !w.shared.gate_up.empty() && !m.is_latent() && !exchange;
  if (shared_first) RETURN_IF_ERROR(Mlp(w.shared, ctx, rows.normed, n, rows.out));
  // LatentMoE: latent_norm sums the routed rows itself where no all-reduce needs the sum first
  // (the combine folded into the norm: no f32 latent rows).
  const bool latent_folded =
      m.is_latent() && w.latent_norm != nullptr && options_.tensor_parallel == nullptr && !exchange;
  DeferredCombine latent_sum;
  if (m.is_latent()) {
    ASSIGN_OR_RETURN(uint16_t * latent, Take<uint16_t>(ctx, n * width));
    RETURN_IF_ERROR(Gemm(ctx, w.latent_down, rows.normed, n, latent));
    z = latent;
    if (!latent_folded) {
      ASSIGN_OR_RETURN(routed, Take<float>(ctx, n * width));
    }
  }
  if (exchange && options_.tensor_parallel != nullptr) {
    // Data-parallel groups of tensor-parallel ranks: every rank of the group holds the same rows
    // and the experts live on the ranks of every group, so each sends its share of the rows and
    // leaves zeros in the others; the group's sum (below, or after the block) adds them up.
    const ShardRange share =
        RangeOf(n, {options_.tensor_parallel->rank(), options_.tensor_parallel->size()});
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(routed, 0, static_cast<size_t>(n * width) * sizeof(float), ctx.stream),
        "routed rows cudaMemsetAsync");
    RETURN_IF_ERROR(ExchangeExperts(w.experts, moe_layer, ctx, z + share.begin * width,
                                    share.size(), ids + share.begin * top_k,
                                    weights + share.begin * top_k, routed + share.begin * width));
  } else if (exchange) {
    RETURN_IF_ERROR(ExchangeExperts(w.experts, moe_layer, ctx, z, n, ids, weights, routed));
  } else {
    // The combine may wait for the residual add only where nothing reads the routed rows
    // before it: no latent space (latent_norm), no tensor parallelism (the all-reduce).
    const bool deferred = defer != nullptr && !m.is_latent() && options_.tensor_parallel == nullptr;
    RETURN_IF_ERROR(ExpertsOnPermutation(w.experts, ctx, z, n, perm, weights, routed, shared_first,
                                         latent_folded ? &latent_sum
                                         : deferred    ? defer
                                                       : nullptr));
  }
  if (m.is_latent()) {
    ASSIGN_OR_RETURN(uint16_t * routed_bf16, Take<uint16_t>(ctx, n * width));
    if (latent_folded) {
      RETURN_IF_ERROR(kc::RmsNorm(latent_sum.routed, n, width, w.latent_norm, cfg.rms_norm_eps,
                                  routed_bf16, ctx.stream));
    } else if (w.latent_norm != nullptr) {
      // latent_norm is not linear: the whole latent sum first (tensor parallelism).
      RETURN_IF_ERROR(AllReduce(ctx, routed, n * width));
      RETURN_IF_ERROR(
          kc::RmsNorm(routed, n, width, w.latent_norm, cfg.rms_norm_eps, routed_bf16, ctx.stream));
    } else {
      RETURN_IF_ERROR(AllReduce(ctx, routed, n * width));
      RETURN_IF_ERROR(kc::GateToBf16(routed, nullptr, n * width, routed_bf16, ctx.stream));
    }
    if (options_.tensor_parallel != nullptr) {
      RETURN_IF_ERROR(LatentUpShare(w, ctx, routed_bf16, n, rows.out));
    } else {
      RETURN_IF_ERROR(Gemm(ctx, w.latent_up, routed_bf16, n, rows.out));
    }
  }
  if (!w.shared.gate_up.empty() && !shared_first) {  // out = routed part + Shared(x)
    RETURN_IF_ERROR(Mlp(w.shared, ctx, rows.normed, n, rows.out, /*accumulate=*/true));
  }
  return absl::OkStatus();
}

absl::Status CudaModel::Mixer(int l, const DeviceStep& step, const DeviceCaches& caches,
                              const DeviceContext& ctx, const Rows& rows) {
  const DeviceLayer& lw = weights_->layer(l);
  const int index = mixer_index_[static_cast<size_t>(l)];
  if (lw.kda) {
    RETURN_IF_ERROR(KdaMixer(*lw.kda, index, step, caches, ctx, rows));
  } else {
    RETURN_IF_ERROR(MlaMixer(*lw.mla, index, step, caches, ctx, rows));
  }
  return AllReduce(ctx, rows.out, rows.n * config().hidden_size);  // o_proj is row-parallel
}

absl::Status CudaModel::Ffn(int l, const DeviceContext& ctx, const Rows& rows,
                            int32_t* expert_offsets, DeferredCombine* defer) {
  const DeviceLayer& lw = weights_->layer(l);
  if (lw.moe) {
    const int moe_layer = moe_index_[static_cast<size_t>(l)];
    const int64_t slot = int64_t{moe_layer} * (config().moe.num_experts + 1);
    RETURN_IF_ERROR(Moe(*lw.moe, moe_layer, ctx, rows, expert_offsets + slot, defer));
  } else {
    RETURN_IF_ERROR(Mlp(*lw.dense, ctx, rows.normed, rows.n, rows.out));
  }
  return AllReduce(ctx, rows.out, rows.n * config().hidden_size);  // down_proj is row-parallel
}

absl::Status CudaModel::AllReduce(const DeviceContext& ctx, float* x, int64_t count) const {
  DeviceCollectives* tp = options_.tensor_parallel;
  if (tp == nullptr || count == 0) return absl::OkStatus();
  return tp->AllReduceSum(x, count, ctx.stream);
}

absl::Status CudaModel::LatentUpShare(const DeviceMoe& w, const DeviceContext& ctx,
                                      const uint16_t* latent, int64_t n, float* out) {
  const int64_t d = config().hidden_size;
  DeviceCollectives* tp = options_.tensor_parallel;
  const ShardRange cols = RangeOf(d, {tp->rank(), tp->size()});
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out, 0, n * d * sizeof(float), ctx.stream),
                              "latent_up share cudaMemsetAsync");
  if (cols.size() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(float* part, Take<float>(ctx, n * cols.size()));
  RETURN_IF_ERROR(Gemm(ctx, w.latent_up, latent, n, part));
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy2DAsync(out + cols.begin, d * sizeof(float), part, cols.size() * sizeof(float),
                        cols.size() * sizeof(float), n, cudaMemcpyDeviceToDevice, ctx.stream),
      "latent_up share cudaMemcpy2DAsync");
  return absl::OkStatus();
}

absl::Status CudaModel::LmHead(const DeviceContext& ctx, const uint16_t* x, int64_t r,
                               float* logits) {
  DeviceCollectives* tp = options_.tensor_parallel;
  if (tp == nullptr) return Gemm(ctx, weights_->lm_head(), x, r, logits);
  // Each rank's [r, its rows] block (padded to the largest share), gathered, then laid side by
  // side into [r, vocab].
  const int64_t vocab = config().vocab_size;
  const int64_t stride = ShardStride(vocab, tp->size());
  ASSIGN_OR_RETURN(float* share, Take<float>(ctx, r * stride));
  ASSIGN_OR_RETURN(float* shares, Take<float>(ctx, tp->size() * r * stride));
  if (weights_->lm_head().out > 0) {
    RETURN_IF_ERROR(Gemm(ctx, weights_->lm_head(), x, r, share));
  }
  RETURN_IF_ERROR(tp->AllGather(share, r * stride * sizeof(float), shares, ctx.stream));
  for (int rank = 0; rank < tp->size(); ++rank) {
    const ShardRange part = RangeOf(vocab, {rank, tp->size()});
    if (part.size() == 0) continue;
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemcpy2DAsync(logits + part.begin, vocab * sizeof(float), shares + rank * r * stride,
                          part.size() * sizeof(float), part.size() * sizeof(float), r,
                          cudaMemcpyDeviceToDevice, ctx.stream),
        "logits share cudaMemcpy2DAsync");
  }
  return absl::OkStatus();
}

// Pre-norm residuals: h += out fused with the next norm (normed = RMSNorm(h)); a MoE layer's
// combine is folded into that add when it can wait for it (DeferredCombine).
absl::Status CudaModel::Layers(const DeviceStep& step, const DeviceCaches& caches,
                               const DeviceContext& ctx, const Rows& rows,
                               int32_t* expert_offsets) {
  const ModelConfig& cfg = config();
  const int64_t n = rows.n, d = cfg.hidden_size;
  const float eps = cfg.rms_norm_eps;
  if (cfg.num_layers > 0) {
    RETURN_IF_ERROR(
        kc::RmsNorm(rows.h, n, d, weights_->layer(0).input_norm, eps, rows.normed, ctx.stream));
  }
  for (int l = 0; l < cfg.num_layers; ++l) {
    RETURN_IF_ERROR(Mixer(l, step, caches, ctx, rows));
    RETURN_IF_ERROR(kc::AddRmsNorm(rows.h, rows.out, n, d, weights_->layer(l).post_norm, eps,
                                   rows.normed, ctx.stream));
    const bool next = l + 1 < cfg.num_layers;
    DeferredCombine combine;
    RETURN_IF_ERROR(Ffn(l, ctx, rows, expert_offsets, next ? &combine : nullptr));
    if (next && combine.routed.y_perm != nullptr) {
      RETURN_IF_ERROR(kc::AddRmsNorm(rows.h, combine.shared ? rows.out : nullptr, combine.routed, n,
                                     d, weights_->layer(l + 1).input_norm, eps, rows.normed,
                                     ctx.stream));
    } else if (next) {
      RETURN_IF_ERROR(kc::AddRmsNorm(rows.h, rows.out, n, d, weights_->layer(l + 1).input_norm, eps,
                                     rows.normed, ctx.stream));
    } else {
      RETURN_IF_ERROR(kc::AddInPlace(rows.h, rows.out, n * d, ctx.stream));
    }
  }
  return absl::OkStatus();
}

// Block AttnRes (docs/model.md §1, §5), as engine/model.cc: sources are the completed blocks plus
// the running partial sum p, slot i < num_blocks is block i, slot num_blocks is p. Every update
// of p (p = a when p is None, else p + a) comes right before a mix, which applies it in its own
// pass (AttnResSources::pending): no separate add or copy launches.
absl::Status CudaModel::LayersAttnRes(const DeviceStep& step, const DeviceCaches& caches,
                                      const DeviceContext& ctx, const Rows& rows,
                                      int32_t* expert_offsets) {
  const ModelConfig& cfg = config();
  const int64_t n = rows.n, d = cfg.hidden_size, slot_floats = n * d;
  const float eps = cfg.rms_norm_eps;
  const int block = cfg.attn_res_block_size;
  ASSIGN_OR_RETURN(float* slots, Take<float>(ctx, AttnResMaxSources(cfg) * slot_floats));
  // p = x0, copied: the first mix writes h, which must alias no source.
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slots, rows.h, slot_floats * sizeof(float),
                                              cudaMemcpyDeviceToDevice, ctx.stream),
                              "AttnRes cudaMemcpyAsync");
  int num_blocks = 0;
  bool partial_empty = false;
  // h = Mix(blocks + [p'], site) with p' = p + pending (pending when p is None; p when pending
  // is null), written back to p; normed = RMSNorm(h; norm_weight) when norm_weight is set.
  auto mix = [&](const DeviceAttnRes& site, const float* norm_weight, const float* pending) {
    kc::AttnResSources sources;
    sources.count = num_blocks + 1;
    for (int i = 0; i < sources.count; ++i) sources.ptr[i] = slots + i * slot_floats;
    if (pending != nullptr) {
      sources.partial = slots + num_blocks * slot_floats;
      sources.pending = pending;
      sources.replace = partial_empty;
      partial_empty = false;
    }
    return kc::AttnResMix(sources, n, d, site.norm, site.proj, eps, rows.h, norm_weight, eps,
                          norm_weight != nullptr ? rows.normed : nullptr, ctx.stream);
  };
  const float* pending = nullptr;
  for (int l = 0; l < cfg.num_layers; ++l) {
    const DeviceLayer& lw = weights_->layer(l);
    RETURN_IF_ERROR(mix(lw.attn_res, lw.input_norm, pending));
    if (l % block == 0) {  // blocks.append(p); p = None
      ++num_blocks;
      partial_empty = true;
    }
    RETURN_IF_ERROR(Mixer(l, step, caches, ctx, rows));
    RETURN_IF_ERROR(mix(lw.mlp_res, lw.post_norm, rows.out));
    RETURN_IF_ERROR(Ffn(l, ctx, rows, expert_offsets));
    pending = rows.out;
  }
  return mix(weights_->output_res(), nullptr, pending);
}

// A rank without rows still takes part in every MoE layer's exchange, in layer order.
absl::Status CudaModel::EmptyStepExchanges(const DeviceContext& ctx) {
  if (options_.expert_exchange == nullptr) return absl::OkStatus();
  for (int l = 0; l < config().num_layers; ++l) {
    const DeviceLayer& lw = weights_->layer(l);
    if (!lw.moe) continue;
    RETURN_IF_ERROR(ExchangeExperts(lw.moe->experts, moe_index_[static_cast<size_t>(l)], ctx,
                                    nullptr, 0, nullptr, nullptr, nullptr));
  }
  return absl::OkStatus();
}

void CudaModel::CountExpertTokens(const int32_t* offsets_table,
                                  std::vector<int64_t>* expert_tokens) const {
  const int num_experts = config().moe.num_experts;
  expert_tokens->assign(static_cast<size_t>(num_experts), 0);
  for (int layer = 0; layer < num_moe_layers_; ++layer) {
    const int32_t* offsets = offsets_table + int64_t{layer} * (num_experts + 1);
    for (int e = 0; e < num_experts; ++e) {
      (*expert_tokens)[static_cast<size_t>(e)] += offsets[e + 1] - offsets[e];
    }
  }
}

absl::Status CudaModel::Forward(const DeviceStep& step, const DeviceCaches& caches,
                                const DeviceContext& ctx, float* logits, int32_t* expert_offsets) {
  const ModelConfig& cfg = config();
  const StepLayout& s = *step.host;
  const int64_t d = cfg.hidden_size;
  Rows rows;
  rows.n = s.num_rows;
  if (rows.n == 0) return EmptyStepExchanges(ctx);
  ASSIGN_OR_RETURN(rows.h, Take<float>(ctx, rows.n * d));
  ASSIGN_OR_RETURN(rows.normed, Take<uint16_t>(ctx, rows.n * d));
  ASSIGN_OR_RETURN(rows.out, Take<float>(ctx, rows.n * d));
  rows.live_rows = step.at(s.live_rows);
  const DeviceMatrix& embed = weights_->embed();
  // Vocab-parallel under tensor parallelism: this rank's rows, zeros for the others' tokens.
  const ShardRange vocab = options_.tensor_parallel != nullptr
                               ? RangeOf(cfg.vocab_size, model_.tensor_parallel())
                               : ShardRange{0, cfg.vocab_size};
  RETURN_IF_ERROR(
      kc::EmbeddingGather(embed.w, kc::VocabShard{vocab.begin, embed.out, cfg.vocab_size}, d,
                          step.at(s.token_ids), rows.n, rows.h, step.invalid_tokens, ctx.stream));
  // Image rows replace their placeholders' embeddings (from host memory: one copy per image
  // piece in the step, ordered on the stream after the gather). The group sums its ranks' rows
  // next, so only the rank holding the vocabulary's start (the lead: it has the rows) writes
  // them and the others zeros (their followers' plans carry the images' places only).
  for (const StepLayout::MediaRows& m : s.media_rows) {
    const size_t bytes = static_cast<size_t>(m.count * d) * sizeof(float);
    if (vocab.begin != 0) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(rows.h + m.row * d, 0, bytes, ctx.stream),
                                  "image rows cudaMemsetAsync");
      continue;
    }
    CHECK(m.media->rows != nullptr) << "image rows missing on the rank that writes them";
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(rows.h + m.row * d, m.media->rows->data() + m.media_row * d, bytes,
                        cudaMemcpyHostToDevice, ctx.stream),
        "image rows cudaMemcpyAsync");
  }
  RETURN_IF_ERROR(AllReduce(ctx, rows.h, rows.n * d));
  if (cfg.has_attn_res()) {
    RETURN_IF_ERROR(LayersAttnRes(step, caches, ctx, rows, expert_offsets));
  } else {
    RETURN_IF_ERROR(Layers(step, caches, ctx, rows, expert_offsets));
  }
  // Final norm of every row (cheap), then the LM head on the sampled rows only.
  const int64_t r = s.num_logit_rows;
  if (r == 0) return absl::OkStatus();
  RETURN_IF_ERROR(kc::RmsNorm(rows.h, rows.n, d, weights_->final_norm(), cfg.rms_norm_eps,
                              rows.normed, ctx.stream));
  ASSIGN_OR_RETURN(uint16_t * selected, Take<uint16_t>(ctx, r * d));
  RETURN_IF_ERROR(
      kc::MoeGatherRows(rows.normed, step.at(s.logit_rows), r, d, selected, ctx.stream));
  return LmHead(ctx, selected, r, logits);
}

}  // namespace strata::engine::cuda
