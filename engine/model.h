// The language model of both families (docs/model.md §1): embedding, decoder layers (KDA or Gated
// MLA mixer, dense or MoE FFN), plain pre-norm residuals or Block AttnRes, final norm, LM head.
//
// There is one forward path: Forward() over a ragged batch (forward_batch.h). Single-sequence
// generation, `strata logits` and the batched executor all go through it.
// Thread-safety: Forward() may be called from one thread at a time (it mutates the caches the
// batch points to; the model itself is read-only after Load).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/checkpoint.h"
#include "engine/forward_batch.h"
#include "engine/kda_drafts.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/moe.h"
#include "engine/tensor_parallel.h"
#include "engine/vision/vision_encoder.h"
#include "engine/workspace.h"

namespace strata::engine {

// Per-sequence cache sizes implied by the config (f32 elements unless noted).
struct CacheGeometry {
  int num_kda_layers = 0;
  int num_mla_layers = 0;
  int64_t kda_state_floats = 0;  // per KDA layer: H·D·D
  int64_t kda_conv_floats = 0;   // per KDA layer: 3·(K−1)·P
  int latent_dim = 0;            // per MLA layer and token: r_kv + d_r
  int rope_dim = 0;              // d_r (the latent row's rope part)

  int64_t state_bytes_per_sequence() const {
    return num_kda_layers * (kda_state_floats + kda_conv_floats) * 4;
  }
  int64_t latent_bytes_per_token() const { return int64_t{num_mla_layers} * latent_dim * 4; }
};
CacheGeometry GetCacheGeometry(const ModelConfig& cfg);

// Sizes of the loaded weights (for roofline floors and capacity planning).
struct WeightStats {
  int64_t total_bytes = 0;                           // every weight as stored
  int64_t routed_expert_bytes_per_layer_expert = 0;  // one routed expert of one MoE layer
  int64_t active_params_per_token = 0;  // multiply-adds per token / 1 (excl. embedding)
};

// Per-call options of Model::Forward.
struct ForwardContext {
  // Resized to num_experts and incremented by the tokens routed to each expert (summed over MoE
  // layers; with an exchange: the tokens this rank's experts ran). May be null.
  std::vector<int64_t>* expert_tokens = nullptr;
  // Expert parallelism: null runs every expert here. With an exchange, Forward must be called
  // in lockstep on every rank (an empty batch still runs every MoE layer's exchange).
  MoeExpertExchange* exchange = nullptr;
  // Scratch for this call; null uses the model's own (one caller at a time). Engines that share
  // one Model across threads pass one workspace each.
  Workspace* workspace = nullptr;
  // Where KDA layers keep the rows of sequences with kda_draft_row ≥ 0 (sized by the caller).
  KdaDraftRows* kda_drafts = nullptr;
  // Tensor parallelism: the group of a model loaded as one shard (ModelLoadOptions::
  // tensor_parallel); required then, and every rank of the group runs the same batches.
  TensorParallelGroup* tensor_parallel = nullptr;
};

// `--quantization` (vLLM's flag): weights quantised at load.
enum class WeightQuantization {
  kNone,
  kMxfp4,      // routed experts to MXFP4, K3's release format
  kInt8,       // every Linear a token reads but the embedding, routers and kv_b_proj to int8
  kMxfp4Int8,  // both: routed experts MXFP4, the rest int8
  // vLLM's "compressed-tensors": the checkpoint's own quantization_config, which must exist
  // (K3's release); nothing is quantised at load.
  kCheckpoint,
};
// "mxfp4" / "int8" / "mxfp4,int8" (either order) / "compressed-tensors" / "none" (and "" → none);
// an error naming the accepted values otherwise.
absl::StatusOr<WeightQuantization> ParseWeightQuantization(std::string_view flag);
// What a scheme quantises at load.
bool QuantizesExpertsToMxfp4(WeightQuantization q);
bool QuantizesToInt8(WeightQuantization q);

struct ModelLoadOptions {
  // Copy the weights a step streams out of the memory-mapped checkpoint into one buffer on
  // transparent huge pages (engine/weight_copy.h): faster CPU decode, memory not shared with
  // other processes. Off: they stay in the mapping (the CUDA backend uploads from there).
  bool copy_weights = true;
  // The copy is made only when it fits in this many bytes, else the weights stay mapped (with
  // a warning: the mapping pages from disk where RAM is short, a copy would be OOM-killed).
  // −1: the host's available memory (core/host_memory.h) less `reserve_bytes` (what the
  // caller allocates next: the caches) and kCopySlackBytes (activations, the rest).
  int64_t max_copy_bytes = -1;
  int64_t reserve_bytes = int64_t{1} << 30;
  static constexpr int64_t kCopySlackBytes = int64_t{1} << 30;
  // Expert parallelism: the routed experts this process runs (empty: all). Only those are
  // copied; the others stay mapped and are never read here, so a process holds its share.
  std::vector<bool> routed_experts;
  // Weights stored in bf16/f32 quantised at load (engine/weight_quantize.h); routed experts only
  // those in `routed_experts` when it is set.
  WeightQuantization quantization = WeightQuantization::kNone;
  // Tensor parallelism (engine/tensor_parallel.h): load only this rank's part of the model. Its
  // routed experts are `routed_experts` when set, else an even share of the group's.
  TensorParallelShard tensor_parallel;
  // Decode context parallelism (engine/tensor_parallel.h): the latent cache spread over the
  // tensor-parallel group by position. Size 1 or tensor_parallel.size.
  int decode_context_parallel_size = 1;
};

class Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& dir,
                                                     const ModelLoadOptions& options = {});

  // The config this model computes with: the checkpoint's, with a tensor-parallel shard's own
  // head counts (engine/tensor_parallel.h ShardConfig).
  const ModelConfig& config() const { return config_; }
  // The checkpoint's config as released (equal to config() without tensor parallelism).
  const ModelConfig& checkpoint_config() const { return checkpoint_->config(); }
  const TensorParallelShard& tensor_parallel() const { return tensor_parallel_; }
  const ContextParallelShard& context_parallel() const { return context_parallel_; }
  // With tensor parallelism: [num_experts], true for the routed experts this rank runs.
  const std::vector<bool>& tensor_parallel_experts() const { return tp_routed_experts_; }
  const CacheGeometry& geometry() const { return geometry_; }
  const WeightStats& weight_stats() const { return weight_stats_; }
  // Bytes of weights copied to huge pages at load (0: every weight reads the mapping).
  int64_t weight_copy_bytes() const { return static_cast<int64_t>(weight_copy_.size()); }
  // The loaded weights (host views; the CUDA backend uploads them, engine/cuda).
  const ModelWeights& weights() const { return weights_; }
  // The vision tower (K3 checkpoints with a vision_config; on every rank, whole: images are
  // encoded once, by the rank that admits the request), or null.
  const VisionEncoder* vision() const { return vision_.get(); }

  // Runs all layers over the batch, updating its caches, and writes NumLogitRows(batch)
  // rows of [vocab] logits. CHECKs that token ids are < vocab (callers validate input).
  // `expert_tokens` (may be null) is resized to num_experts and incremented by the tokens
  // routed to each expert, summed over MoE layers.
  void Forward(ForwardBatch batch, std::vector<float>* logits,
               std::vector<int64_t>* expert_tokens = nullptr) const;
  void Forward(ForwardBatch batch, std::vector<float>* logits, const ForwardContext& context) const;

  // After a forward that verified drafts: advances each sequence's KDA caches by the first
  // num_tokens of its saved rows, through every KDA layer (no weights read). `workspace` may
  // be null (the model's own).
  void ReplayKdaDrafts(const KdaDraftRows& drafts, absl::Span<const KdaReplay> sequences,
                       Workspace* workspace = nullptr) const;

 private:
  Model() = default;
  std::unique_ptr<Checkpoint> checkpoint_;
  ModelConfig config_;
  TensorParallelShard tensor_parallel_;
  ContextParallelShard context_parallel_;
  std::vector<bool> tp_routed_experts_;  // with tensor parallelism: the experts this rank runs
  AlignedBuffer weight_copy_;            // the Linears' bytes when copied out of the mapping
  ModelWeights weights_;
  std::unique_ptr<VisionEncoder> vision_;
  CacheGeometry geometry_;
  WeightStats weight_stats_;
  std::vector<int> mixer_index_;  // layer -> ordinal among layers of its mixer kind
  std::vector<int> moe_index_;    // layer -> ordinal among MoE layers (−1: dense)
  mutable std::unique_ptr<Workspace> workspace_ = std::make_unique<Workspace>();
};

// Caches of one sequence, owned: KDA states/conv rows and MLA latent rows for up to
// `max_tokens` positions, laid out as one contiguous page run (block table 0, 1, 2, ...).
class SequenceCache {
 public:
  // Latent rows in `latent_dtype` (core/latent_row.h; f32 exact by default).
  SequenceCache(const CacheGeometry& geometry, int64_t max_tokens, int block_size = 64,
                LatentDType latent_dtype = LatentDType::kF32);
  const SequenceCacheView& view() const { return view_; }
  int64_t max_tokens() const { return max_tokens_; }

 private:
  int64_t max_tokens_;
  std::vector<AlignedBuffer> buffers_;
  std::vector<int32_t> block_table_;
  SequenceCacheView view_;
};

}  // namespace strata::engine
