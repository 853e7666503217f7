// Tensor parallelism (docs/architecture.md, "Parallelism"): T ranks of a group hold one copy of
// the model between them and run every step together.
//
// How the model is cut (Megatron's column → row pattern, one all-reduce per block):
//   KDA        q/k/v/b/f_b/g projections, short-conv channels, A_log and dt_bias by head; each
//              rank keeps the recurrent state of its heads only; f_a, g_a, o_norm replicated;
//              o_proj by input columns (row-parallel) → partial sums
//   MLA        q_proj (or q_b_proj), kv_b_proj and g_proj by head; q_a_proj, kv_a_proj_with_mqa
//              and their norms replicated, so the 576-value latent cache is the same on every
//              rank; o_proj row-parallel → partial sums
//   MLP        gate/up by output rows, down by input columns (dense layers and shared experts)
//   MoE        router replicated (every rank routes every token the same way); routed experts
//              spread over the ranks (each runs its own on every token); LatentMoE sums the
//              experts' latent rows over the group first (latent_norm is not linear), then each
//              rank applies its rows of latent_up to its share of the hidden columns
//   embedding  vocab-parallel: a rank holds rows [begin, end) of its share, others are zeros;
//   LM head    vocab-parallel: each rank's logits of its share, gathered where they are needed
// Each rank's ModelConfig is the checkpoint's with its own head counts (ShardConfig), so the
// mixers and the cache geometry run unchanged on a shard; Model::Forward adds the collectives:
// after the embedding, after every mixer and every FFN block (AttnRes mixes reduced rows), and
// the logits gather.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/linear.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"

namespace strata::engine {

// Which part of the model a rank holds.
struct TensorParallelShard {
  int rank = 0;
  int size = 1;
  bool enabled() const { return size > 1; }
};

// The collectives Model::Forward needs, over the ranks of one tensor-parallel group (dist/
// implements them over a Communicator). Every rank calls them in the same order with the same
// counts. A failure is fatal for the process (the implementation logs the collective and the
// rank, then exits so the orchestrator restarts the group): the forward never sees an error.
class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: data = Σ over ranks; every rank ends with the same bytes.
  virtual void AllReduceSum(float* data, int64_t count) = 0;
  // recv[r · count, (r + 1) · count) = rank r's send.
  virtual void AllGather(const float* send, int64_t count, float* recv) = 0;
  // Rank 0's `bytes` bytes into every rank's `data` (step plans from the lead rank).
  virtual void BroadcastFromLead(void* data, int64_t bytes) = 0;
  // recv[r · count, (r + 1) · count) = rank r's send[rank · count, (rank + 1) · count).
  virtual void AllToAll(const float* send, float* recv, int64_t count_per_rank) = 0;
  // Decode context parallelism over C < T ranks: the group of the C ranks that share this rank's
  // positions (ContextParallelShard below), over which the MLA layers' query all-gather and
  // partials' all-to-all run — a rank moves C − 1 shares instead of T − 1. Null: this group
  // (C = T, or no context parallelism).
  virtual TensorParallelGroup* context_parallel() { return nullptr; }
};

// Decode context parallelism (`--decode-context-parallel-size C`): each sequence's latent cache
// is spread over the C ranks by position — rank d holds positions p ≡ d (mod C), at its local
// row p / C — so a sequence can hold C times what one rank's cache does. MLA layers attend where
// the rows live and merge the partial results exactly (kernels/cpu/mla_context_parallel.h).
// C divides T: tensor-parallel rank r is rank r mod C of context-parallel group r / C, and the
// T / C groups hold the same rows (vLLM's meaning of C < T).
struct ContextParallelShard {
  int rank = 0;
  int size = 1;
  bool enabled() const { return size > 1; }
  // Local cache rows of a sequence of `tokens` positions on the rank holding the most.
  int64_t MaxLocalRows(int64_t tokens) const { return (tokens + size - 1) / size; }
  // Rows this rank holds of positions 0 .. positions − 1.
  int64_t LocalRows(int64_t positions) const {
    return positions > rank ? (positions - rank + size - 1) / size : 0;
  }
  bool Owns(int64_t position) const { return position % size == rank; }
};

// [begin, end) of `total` items (vocabulary rows, hidden columns) that `shard` holds: shares of
// ceil(total / size), the last ones shorter or empty.
struct ShardRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
int64_t ShardStride(int64_t total, int size);  // ceil(total / size)
ShardRange RangeOf(int64_t total, TensorParallelShard shard);

// InvalidArgument when `cfg` cannot be split over `tp_size` ranks, naming the layer kind and the
// counts (e.g. "3 KDA heads cannot be split over --tensor-parallel-size 2").
absl::Status CheckTensorParallelSplit(const ModelConfig& cfg, int tp_size);

// The config one rank of the group computes with: KDA and MLA head counts divided by `tp_size`
// (CheckTensorParallelSplit must pass). Everything else is the checkpoint's.
ModelConfig ShardConfig(const ModelConfig& cfg, int tp_size);

// Routed experts rank `shard` runs when the experts are spread over the group: contiguous
// shares, the first num_experts % size ranks one more ([num_experts], true for its own).
std::vector<bool> ShardRoutedExperts(int num_experts, TensorParallelShard shard);

// Replaces the weights of `w` (as loaded for the full `cfg`) with `shard`'s part: views into the
// checkpoint's mapping where the part is contiguous (rows), copies where it is not (columns).
// Errors name the tensor when a quantised weight's columns cannot be cut at its 32-wide groups.
absl::Status ShardModelWeights(const ModelConfig& cfg, TensorParallelShard shard, ModelWeights* w);

// Rows [begin, begin + count) of `w`: a view when `w` does not own its bytes, else a copy.
Linear SliceRows(const Linear& w, int64_t begin, int64_t count);
// Columns [begin, begin + count) of `w` (a copy). Quantised formats need begin and count on
// their 32-wide groups; InvalidArgument otherwise.
absl::StatusOr<Linear> SliceColumns(const Linear& w, int64_t begin, int64_t count);

}  // namespace strata::engine
