// The language model's forward pass on one GPU (issue #10): Model::Forward's math (engine/
// model.cc, docs/model.md) over a StepLayout batch, with the weights in device memory
// (device_weights.h), the latent pages and KDA state slots in device memory (cuda_executor.h)
// and the kernels of kernels/cuda. Asynchronous on the context's stream except for one
// device→host copy of the expert offsets per MoE layer (cuBLAS's grouped GEMM needs them on the
// host; none with own_grouped_gemm).
//
// Per layer, as on the CPU: RMSNorm (fused with the residual add) or the AttnRes mix (fused
// with the sublayer norm) → mixer → FFN. Activations are f32 on the residual stream and bf16
// as GEMM operands; GEMMs accumulate in f32 (cuBLAS). Mixers: KDA decode rows through the fused
// decode kernel, prefill chunks through the chunked tensor-core kernel (K3's bounded gate) or
// the token-serial one (exact for any gate: Kimi-Linear);
// MLA latents written by MlaWriteLatents, decode rows through the tensor-core paged decode,
// prefill rows through the MHA-form flash prefill (over context windows that fit 1 GiB of
// scratch; the absorbed paged prefill when they would be very short). MoE: router top-k on the
// device, permutation, grouped GEMMs (MXFP4 experts dequantised into scratch first), GLU, combine.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/device_arena.h"
#include "engine/cuda/device_collectives.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/step_layout.h"
#include "engine/model.h"
#include "kernels/cuda/kda_decode.h"
#include "kernels/cuda/norm.h"

namespace strata::engine::cuda {

struct DeviceContext {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  DeviceArena* scratch = nullptr;
  // A step of decode rows only (no prompt, draft or scored rows): int8 products may take the
  // GEMV, whose rounding differs from the tensor cores'. Steps with prompt rows keep every row's
  // products independent of the step's other rows, so a prompt gives the same result computed
  // whole or in pieces (kernels/cuda/int8_gemm.h).
  bool decode_only = false;
};

// Device views of the cache arena (kvcache::CacheLayout regions), per layer of each kind.
struct DeviceCaches {
  // [num_blocks · block_size] latent rows: bf16 [latent_dim], or fp8 (core/latent_row.h)
  std::vector<void*> mla_pages;
  LatentDType latent_dtype = LatentDType::kBF16;
  std::vector<float*> kda_state;  // [state rows, H, 128, 128] f32
  std::vector<float*> kda_conv;   // [state rows, K − 1, 3P] f32
};

// The projected KDA inputs of the step's rows that verify drafts (StepLayout::first_draft_row
// on), kept from the forward for the replay of the kept tokens (engine/kda_drafts.h has the
// why): per KDA layer qkv [R, 3P], f [R, P], b [R, H], the layers layer_floats apart.
struct DeviceKdaDrafts {
  float* base = nullptr;  // null: the step verifies no drafts
  int64_t num_rows = 0;   // R
  int64_t width = 0;      // P
  int64_t heads = 0;      // H
  int64_t layer_floats = 0;

  // A multiple of 64 floats, so every plane stays 16-byte aligned (the kernels' loads).
  static int64_t LayerFloats(int64_t num_rows, int64_t width, int64_t heads) {
    return (num_rows * (4 * width + heads) + 63) / 64 * 64;
  }
  float* qkv(int kda_index) const { return base + kda_index * layer_floats; }
  float* f(int kda_index) const { return qkv(kda_index) + num_rows * 3 * width; }
  float* b(int kda_index) const { return f(kda_index) + num_rows * width; }
};

// The step's index arrays on the device (a copy of StepLayout::ints) and a device counter of
// out-of-range token ids (zeroed by the caller).
struct DeviceStep {
  const StepLayout* host = nullptr;
  const int32_t* ints = nullptr;
  int32_t* invalid_tokens = nullptr;
  DeviceKdaDrafts kda_drafts;  // with StepLayout::num_drafting > 0 on a model with KDA layers
  const int32_t* at(int64_t offset) const { return ints + offset; }
};

class DeviceExpertExchange;  // expert_exchange.h

struct CudaModelOptions {
  // MLA prefill rows in the MHA form (else always the absorbed form), expanding the context in
  // windows that fit `mha_prefill_scratch_bytes`; windows shorter than `min_mha_context_chunk`
  // rows cost more launches than the absorbed form saves, so those steps use it instead.
  bool mha_prefill = true;
  int64_t mha_prefill_scratch_bytes = int64_t{1} << 30;
  int64_t min_mha_context_chunk = 1024;
  // > 0: always this window (tests exercise the windowed path on short contexts).
  int64_t mha_context_chunk = 0;
  // KDA prefill chunks in the chunked tensor-core form when the gate is bounded (K3); else
  // always the token-serial form.
  bool chunked_kda_prefill = true;
  // Routed experts through Strata's grouped GEMM (offsets read on the device, GLU fused, MXFP4
  // dequantised in the load path: no host synchronisation, so steps can be graph-captured);
  // else cuBLAS's grouped GEMM (one host synchronisation per MoE layer).
  bool own_grouped_gemm = true;
  // Non-null: the routed experts are spread over ranks (expert_exchange.h); this model holds
  // only exchange->local_experts() and every MoE layer goes through the exchange. Must outlive
  // the model.
  DeviceExpertExchange* expert_exchange = nullptr;
  // Non-null: the model is one rank's shard of a tensor-parallel group (engine/tensor_parallel.h;
  // loaded with ModelLoadOptions::tensor_parallel): the embedding is vocab-parallel, every mixer
  // and FFN output is all-reduced over the group, the logits are gathered, each rank runs its
  // share of the routed experts on every token (only those are uploaded). The collectives are
  // enqueued on the compute stream (device_collectives.h), so the forward never waits for the
  // host and decode steps are graph-captured. Must outlive the model. With expert_exchange too
  // (data-parallel groups of tensor-parallel ranks, the experts over all of them) each rank of
  // the group sends its share of the rows through the exchange instead (which synchronises).
  DeviceCollectives* tensor_parallel = nullptr;
  // Decode context parallelism with C < T: the C ranks of this rank's context-parallel group
  // (tensor-parallel ranks g·C … g·C + C − 1), which the MLA layers' query all-gather and
  // partials' all-to-all span. Null: tensor_parallel (required when C = T).
  DeviceCollectives* context_parallel = nullptr;
};

class CudaModel {
 public:
  // Whether the CUDA kernels take this model's shapes; the error names the dimension and the
  // value the kernels need (e.g. MLA latent 512 + 64, KDA head_dim 128).
  static absl::Status CheckSupported(const ModelConfig& cfg);
  // Uploads the weights. `model` must outlive the result.
  static absl::StatusOr<std::unique_ptr<CudaModel>> Create(const Model& model,
                                                           const CudaModelOptions& options = {});

  // Runs every layer over the step, updating the caches, and writes the logits of the step's
  // logit rows, [R, vocab] f32, to `logits` (device), and each MoE layer's expert offsets
  // [E + 1] to `expert_offsets` (device, [num_moe_layers(), E + 1]: the tokens of expert e in
  // that layer are offsets[e + 1] − offsets[e]). With options.own_grouped_gemm it never
  // synchronises with the host (graph-capturable). An empty step launches nothing — with an
  // expert exchange it still takes part in every MoE layer's exchange.
  absl::Status Forward(const DeviceStep& step, const DeviceCaches& caches, const DeviceContext& ctx,
                       float* logits, int32_t* expert_offsets);
  // After a Forward whose last step.host->num_drafting sequences verified drafts (their KDA
  // caches untouched, their rows in step.kda_drafts): advances those caches by the kept tokens,
  // drafting sequence n by rows [cu[n], ends[n]) of the kept rows (device int32 arrays of
  // num_drafting + 1 and num_drafting). Stream-ordered, no host synchronisation.
  absl::Status ReplayKdaDrafts(const DeviceStep& step, const DeviceCaches& caches,
                               const DeviceContext& ctx, const int32_t* cu, const int32_t* ends);
  // Tokens routed to each expert, summed over layers, from a host copy of Forward's table.
  void CountExpertTokens(const int32_t* offsets_table, std::vector<int64_t>* expert_tokens) const;

  int num_moe_layers() const { return num_moe_layers_; }
  int64_t expert_offsets_ints() const {
    return int64_t{num_moe_layers_} * (config().moe.num_experts + 1);
  }
  const CudaModelOptions& options() const { return options_; }

  const ModelConfig& config() const { return model_.config(); }
  const ContextParallelShard& context_parallel() const { return model_.context_parallel(); }
  int64_t weight_bytes() const { return weights_->bytes(); }

 private:
  CudaModel(const Model& model, std::unique_ptr<DeviceWeights> weights);

  // Activations of one step: residual stream h, the sublayer input (bf16) and output.
  struct Rows {
    int64_t n = 0;
    float* h = nullptr;
    uint16_t* normed = nullptr;
    float* out = nullptr;
    const int32_t* live_rows = nullptr;  // device: rows [0, *live_rows) are real tokens
  };
  absl::Status KdaMixer(const DeviceKda& w, int kda_index, const DeviceStep& step,
                        const DeviceCaches& caches, const DeviceContext& ctx, const Rows& rows);
  // The multi-token KDA kernel this model's gate takes (chunked for K3's bounded gate).
  absl::Status KdaMultiToken(const kernels::cuda::KdaDecodeInputs& in, const int32_t* cu_seqlens,
                             float* state, float* conv,
                             const kernels::cuda::KdaDecodeParams& params, uint16_t* y,
                             cudaStream_t stream) const;
  // The KDA pieces of the sequences saving checkpoints inside the step (StepLayout), one
  // launch each, copying the layer's state and conv rows to the checkpoint after a piece that
  // ends at a save. `prefill`: the inputs from the first prefill row on.
  absl::Status KdaSavingPieces(const kernels::cuda::KdaDecodeInputs& prefill,
                               const DeviceStep& step, float* state, float* conv,
                               kernels::cuda::KdaDecodeParams params, uint16_t* y,
                               cudaStream_t stream) const;
  absl::Status MlaMixer(const DeviceMla& w, int mla_index, const DeviceStep& step,
                        const DeviceCaches& caches, const DeviceContext& ctx, const Rows& rows);
  absl::Status AbsorbedAttention(const MlaConfig& m, const DeviceMla& w, const DeviceStep& step,
                                 const void* pages, LatentDType cache_dtype,
                                 const DeviceContext& ctx, const uint16_t* q, int64_t rows,
                                 const float* gate, uint16_t* o_gated);
  // The same result when each rank holds every C-th position of the cache (decode context
  // parallelism over the tensor-parallel group).
  absl::Status ContextParallelAttention(const MlaConfig& m, const DeviceMla& w,
                                        const DeviceStep& step, const void* pages,
                                        LatentDType cache_dtype, const DeviceContext& ctx,
                                        const uint16_t* q, int64_t rows, const float* gate,
                                        uint16_t* o_gated);
  // out = the GLU MLP of x, or out += it with `accumulate`.
  absl::Status Mlp(const DeviceMlp& w, const DeviceContext& ctx, const uint16_t* x, int64_t n,
                   float* out, bool accumulate = false);
  // A MoE layer's combine left to the residual add that follows (AddRmsNorm with a RoutedSum):
  // `shared` says whether out holds the shared expert's rows to add the sum to.
  struct DeferredCombine {
    kernels::cuda::RoutedSum routed;
    bool shared = false;
  };
  // With `defer` non-null the layer may leave its combine there (defer->routed.y_perm set) and
  // out then holds only the shared expert's rows (or nothing).
  absl::Status Moe(const DeviceMoe& w, int moe_layer, const DeviceContext& ctx, const Rows& rows,
                   int32_t* expert_offsets, DeferredCombine* defer = nullptr);
  // The (token, slot) pairs of a MoE layer grouped by expert (kernels/cuda/moe.h MoePermute).
  struct Permutation {
    int32_t* offsets = nullptr;         // [E + 1] of w's experts
    int32_t* permuted_token = nullptr;  // [n·top_k]
    int32_t* pair_row = nullptr;        // [n·top_k]
  };
  absl::StatusOr<Permutation> TakePermutation(const DeviceContext& ctx, int64_t n,
                                              int32_t* offsets);
  // routed [n] = the weighted sum of each row's experts among w's (ids index w's experts; −1:
  // none), through MoePermute then ExpertsOnPermutation.
  absl::Status RoutedExperts(const DeviceExperts& w, const DeviceContext& ctx, const uint16_t* z,
                             int64_t n, const int32_t* ids, const float* weights, float* routed,
                             int32_t* expert_offsets);
  // routed [n] = the weighted sum of each row's experts over the pairs `perm` groups, or
  // routed += it with `accumulate`.
  absl::Status ExpertsOnPermutation(const DeviceExperts& w, const DeviceContext& ctx,
                                    const uint16_t* z, int64_t n, const Permutation& perm,
                                    const float* weights, float* routed, bool accumulate,
                                    DeferredCombine* defer = nullptr);
  // The routed experts of a MoE layer through the exchange (options_.expert_exchange).
  absl::Status ExchangeExperts(const DeviceExperts& w, int moe_layer, const DeviceContext& ctx,
                               const uint16_t* z, int64_t n, int32_t* ids, const float* weights,
                               float* routed);
  // The gate|up product reads row permuted_token[r] of z [n, in] (the gather in its load path).
  absl::Status OwnGroupedGemms(const DeviceExperts& w, const DeviceContext& ctx, const uint16_t* z,
                               int64_t n, const int32_t* permuted_token, int64_t rows,
                               const int32_t* offsets, uint16_t* h, float* y);
  absl::Status CublasGroupedGemms(const DeviceExperts& w, const DeviceContext& ctx,
                                  const uint16_t* x_perm, const int32_t* offsets, uint16_t* h,
                                  float* y);
  absl::Status Layers(const DeviceStep& step, const DeviceCaches& caches, const DeviceContext& ctx,
                      const Rows& rows, int32_t* expert_offsets);
  absl::Status LayersAttnRes(const DeviceStep& step, const DeviceCaches& caches,
                             const DeviceContext& ctx, const Rows& rows, int32_t* expert_offsets);
  absl::Status Mixer(int l, const DeviceStep& step, const DeviceCaches& caches,
                     const DeviceContext& ctx, const Rows& rows);
  absl::Status Ffn(int l, const DeviceContext& ctx, const Rows& rows, int32_t* expert_offsets,
                   DeferredCombine* defer = nullptr);
  absl::Status EmptyStepExchanges(const DeviceContext& ctx);
  // Sums `count` floats of device memory over the tensor-parallel group (nothing without one).
  absl::Status AllReduce(const DeviceContext& ctx, float* x, int64_t count) const;
  // The LM head of `r` rows: with tensor parallelism each rank's vocabulary share, gathered.
  absl::Status LmHead(const DeviceContext& ctx, const uint16_t* x, int64_t r, float* logits);
  // LatentMoE under tensor parallelism: out [n, d] = this rank's latent_up rows applied to
  // `latent` (its share of the hidden columns), zeros in the other columns.
  absl::Status LatentUpShare(const DeviceMoe& w, const DeviceContext& ctx, const uint16_t* latent,
                             int64_t n, float* out);

  const Model& model_;
  CudaModelOptions options_;
  std::unique_ptr<DeviceWeights> weights_;
  std::vector<int> mixer_index_;  // layer -> ordinal among layers of its mixer kind
  std::vector<int> moe_index_;    // layer -> ordinal among MoE layers (−1: dense)
  int num_moe_layers_ = 0;
  kernels::cuda::PinnedBuffer expert_offsets_host_;  // [E + 1] int32
  // With tensor parallelism: [E] int32 on the device, this rank's index of each routed expert
  // (−1: another rank runs it).
  kernels::cuda::DeviceBuffer tp_local_of_;
  // RouteAndPermute's done counter (one int32, zero between calls; the stream orders its uses).
  kernels::cuda::DeviceBuffer route_done_;
};

}  // namespace strata::engine::cuda
