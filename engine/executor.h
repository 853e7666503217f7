// The batched executor: runs a StepPlan (engine/step.h) as one Model::Forward over a ragged
// batch, on caches that live in one arena laid out by kvcache::CacheLayout, then samples.
//
// Per step, in this order (kvcache/README.md): copies to and from the offload tiers, checkpoint →
// slot copies and slot zeroing for sequences that start, the forward (MLA pages through block
// tables, KDA state per slot; no padding token ever touches a state), sampling of the sequences
// that asked for it (with log-probabilities of the raw model distribution when requested), the
// replay of the kept tokens of sequences that verified drafts into their KDA caches (kda_drafts.h).
// Slot → checkpoint copies happen inside the forward, in each KDA layer as the sequence's tokens
// pass the save (forward_batch.h, KdaCacheSave): a prefill chunk saves at its checkpoint boundaries
// without ending there.
//
// Speculative drafts on the CPU: the replay costs about what the KDA layers spent on those
// tokens in the forward (compute, no weights), the one part of a verifying step that a
// snapshot saves when every draft is accepted — the common case where lookup drafts at all.
// So while the copies fit in an eighth of the cache arena's bytes, a drafting sequence's KDA
// caches are copied aside before the step and updated in place by the forward: all accepted,
// nothing more to do; a rejection restores the copy and replays the kept tokens. Past that
// budget sequences verify without updating and always replay.
// Weights are applied once per step to all rows of the batch.
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"
#include "engine/model.h"
#include "engine/step.h"
#include "engine/step_sampling.h"
#include "kvcache/cache_layout.h"
#include "kvcache/memory_planner.h"

namespace strata::engine {

// The seam between the scheduler's engine loop and the compute backend (fakes in tests).
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual StepResult Execute(const StepPlan& plan) = 0;
  // The same into a result the caller reuses from step to step: its vectors keep their
  // capacity, so an executor that supports it (CpuExecutor) allocates nothing in steady-state
  // decode. Default: *result = Execute(plan).
  virtual void ExecuteInto(const StepPlan& plan, StepResult* result) { *result = Execute(plan); }
};

// A rank of a tensor-parallel group other than its lead (server/tensor_parallel_follower.h):
// runs the lead's plans on its shard, in the order the lead executes them.
class StepFollower {
 public:
  virtual ~StepFollower() = default;
  // Runs the lead's next plan; its step id, or −1 when the lead ended the group (nothing ran).
  virtual int64_t FollowStep() = 0;
};

// What the caches of `cfg` need per token and per sequence: KDA states in f32 (the CPU backend
// computes in f32), latent rows in `latent_dtype` (f32 exact; bf16 / fp8 hold 2× / 3.5× the
// tokens in the same bytes, and the MLA kernels read that much less).
kvcache::ModelCacheSpec CacheSpecFor(const ModelConfig& cfg,
                                     LatentDType latent_dtype = LatentDType::kF32);

class CpuExecutor : public StepExecutor, public StepFollower {
 public:
  // `layout` must come from PlanMemory(CacheSpecFor(model.config()), ...). The model must
  // outlive the executor.
  CpuExecutor(const Model& model, const kvcache::CacheLayout& layout);

  StepResult Execute(const StepPlan& plan) override;
  // No heap allocation once warm (same or smaller batch, result reused): the forward batch,
  // its cache pointer vectors, the logits and the log-probability scratch only grow.
  void ExecuteInto(const StepPlan& plan, StepResult* result) override;

  // Hook for data-parallel ranks (server/engine_loop.h): every Execute passes `context`'s
  // exchange and workspace to Model::Forward (its expert_tokens is ignored: each step reports
  // its own). Set before the first Execute; the pointees must outlive the executor. With an
  // exchange, Execute must run in lockstep on every rank, an empty plan included.
  void set_forward_context(const ForwardContext& context) { forward_context_ = context; }

  // Tensor parallelism (engine/tensor_parallel.h; the model is a shard and the context names
  // its group): on the lead rank (0) Execute first sends the plan to the other ranks, which
  // call FollowStep in the same order; they run the same forward on their shards, never sample,
  // and learn from the lead how many drafts it accepted (their KDA caches keep the same tokens).
  // Returns the step id followed, or −1 when the lead called EndFollowers (nothing ran).
  int64_t FollowStep() override;
  // On the lead, for drivers without a step gate (`strata bench`): every follower's next
  // FollowStep returns −1.
  void EndFollowers();

  // Bytes for copies of drafting sequences' KDA caches (default: an eighth of the arena; 0:
  // every drafting sequence verifies without updating and replays).
  void set_kda_snapshot_budget(int64_t bytes) { kda_snapshot_budget_ = bytes; }

  const kvcache::CacheLayout& layout() const { return layout_; }
  // Bytes of one KDA layer's state row (tests compare slots and checkpoints).
  const float* StateRow(int kda_layer, int32_t row) const;
  // And of its conv cache row.
  const float* ConvRow(int kda_layer, int32_t row) const;

 private:
  float* StatePtr(int kda_layer, int32_t row) const;
  float* ConvPtr(int kda_layer, int32_t row) const;
  void InitSlot(const ScheduledSequence& seq);
  // Step 0: the plan's cache saves into result->saved, then its loads (engine/step.h).
  void CopyCacheUnits(const StepPlan& plan, StepResult* result);
  // batch_[i].kda_saves from the plan's checkpoint saves (after the rest of BuildBatch).
  void BuildCheckpointSaves(const StepPlan& plan);
  void CopyRow(int32_t from_row, int32_t to_row);
  // Copies the KDA caches of state row `row` to copy `snapshot` (or back, `restore`).
  void SnapshotCopy(int32_t row, int32_t snapshot, bool restore);
  // Fills batch_[0, plan.sequences.size()) from the plan.
  void BuildBatch(const StepPlan& plan);
  // One step; `lead` false: a tensor-parallel follower (no sampling, no scoring; the accepted
  // draft counts come from the lead).
  void RunStep(const StepPlan& plan, bool lead, StepResult* result);
  // Step 3 on the lead: samples every task's rows into result->sampled (setting num_entries).
  void SampleTasks(const StepPlan& plan, StepResult* result);
  // The group of a tensor-parallel shard, else null.
  TensorParallelGroup* tensor_parallel() const;

  const Model& model_;
  kvcache::CacheLayout layout_;
  AlignedBuffer arena_;
  ForwardContext forward_context_;
  // Forward scratch of this executor (when forward_context_ names none): the model's own
  // workspace may be in use on another thread (e.g. a Generate() beside the engine loop).
  std::unique_ptr<Workspace> workspace_ = std::make_unique<Workspace>();
  // Storage reused from step to step (sizes only grow).
  std::vector<ForwardSequence> batch_;
  std::vector<std::vector<EmbeddingRows>> embeddings_;  // batch_[i].embeddings (image rows)
  std::vector<KdaCacheSave> kda_saves_;                 // batch_'s checkpoint saves; only grows
  std::vector<float> logits_;
  KdaDraftRows kda_drafts_;
  std::vector<KdaReplay> replays_;
  AlignedBuffer kda_snapshots_;       // [n][KDA layers][state, conv] from before the step
  std::vector<int32_t> snapshot_of_;  // by plan index: its copy in kda_snapshots_, or −1
  int64_t kda_snapshot_bytes_ = 0;    // one sequence's copy
  int64_t kda_snapshot_budget_ = 0;   // bytes
  StepSampler sampler_;
  // One sampling task per sequence that samples (ExecuteInto step 3).
  struct SampleTask {
    size_t plan_index = 0;
    int64_t first_row = 0;    // its first sampled logits row
    size_t first_entry = 0;   // where its entries go in StepResult::sampled before compaction
    int32_t num_entries = 0;  // sampled rows: 1 + accepted drafts (+ the rejected one)
  };
  std::vector<SampleTask> sample_tasks_;
  std::vector<SampleScratch> sample_scratch_;  // by task: grows only
  std::vector<uint8_t> plan_bytes_;            // tensor parallelism: the encoded plan
  std::vector<int32_t> accepted_entries_;      // tensor parallelism: num_entries by task
  std::vector<kvcache::CacheSpan> spans_;      // CopyCacheUnits scratch
  std::vector<float> save_scratch_;            // GatherSavedShares scratch
};

}  // namespace strata::engine
