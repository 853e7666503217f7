// The batched executor: runs a StepPlan (engine/step.h) as one Model::Forward over a ragged
// batch, on caches that live in one arena laid out by kvcache::CacheLayout, then samples.
//
// Per step, in this order (kvcache/README.md): checkpoint → slot copies and slot zeroing for
// sequences that start, the forward (MLA pages through block tables, KDA state per slot; no
// padding token ever touches a state), sampling of the sequences that asked for it (with
// log-probabilities of the raw model distribution when requested), slot → checkpoint copies.
// Weights are applied once per step to all rows of the batch.
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"
#include "engine/model.h"
#include "engine/step.h"
#include "kvcache/cache_layout.h"
#include "kvcache/memory_planner.h"

namespace strata::engine {

// The seam between the scheduler's engine loop and the compute backend (fakes in tests).
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual StepResult Execute(const StepPlan& plan) = 0;
};

// What the caches of `cfg` need per token and per sequence (latents and states in f32: the
// CPU backend computes in f32).
kvcache::ModelCacheSpec CacheSpecFor(const ModelConfig& cfg);

class CpuExecutor : public StepExecutor {
 public:
  // `layout` must come from PlanMemory(CacheSpecFor(model.config()), ...). The model must
  // outlive the executor.
  CpuExecutor(const Model& model, const kvcache::CacheLayout& layout);

  StepResult Execute(const StepPlan& plan) override;

  const kvcache::CacheLayout& layout() const { return layout_; }
  // Bytes of one KDA layer's state row (tests compare slots and checkpoints).
  const float* StateRow(int kda_layer, int32_t row) const;

 private:
  float* StatePtr(int kda_layer, int32_t row) const;
  float* ConvPtr(int kda_layer, int32_t row) const;
  void InitSlot(const ScheduledSequence& seq);
  void CopyRow(int32_t from_row, int32_t to_row);
  SampledToken SampleOne(const ScheduledSequence& seq, float* logits) const;

  const Model& model_;
  kvcache::CacheLayout layout_;
  AlignedBuffer arena_;
  std::vector<float> logits_;
};

}  // namespace strata::engine
