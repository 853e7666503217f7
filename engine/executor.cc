#include "engine/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "engine/cache_copy.h"
#include "engine/step_codec.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::engine {

kvcache::ModelCacheSpec CacheSpecFor(const ModelConfig& cfg, LatentDType latent_dtype) {
  const CacheGeometry g = GetCacheGeometry(cfg);
  kvcache::ModelCacheSpec spec;
  spec.num_mla_layers = g.num_mla_layers;
  spec.latent_dim = g.latent_dim;
  spec.rope_dim = g.rope_dim;
  spec.latent_dtype = latent_dtype;
  spec.num_kda_layers = g.num_kda_layers;
  spec.kda_state_bytes_per_layer = g.kda_state_floats * 4;
  spec.kda_conv_bytes_per_layer = g.kda_conv_floats * 4;
  return spec;
}

CpuExecutor::CpuExecutor(const Model& model, const kvcache::CacheLayout& layout)
    : model_(model), layout_(layout), arena_(static_cast<size_t>(layout.TotalBytes())) {
  const CacheGeometry& g = model.geometry();
  CHECK_EQ(layout.num_mla_layers, g.num_mla_layers);
  CHECK_EQ(layout.num_kda_layers, g.num_kda_layers);
  if (g.num_mla_layers > 0) {
    CHECK_EQ(layout.latent_dim, g.latent_dim);
    CHECK_EQ(layout.rope_dim, g.rope_dim);
  }
  if (g.num_kda_layers > 0) {
    CHECK_EQ(layout.kda_state_bytes_per_layer, g.kda_state_floats * 4);
    CHECK_EQ(layout.kda_conv_bytes_per_layer, g.kda_conv_floats * 4);
  }
  kda_snapshot_bytes_ =
      layout.num_kda_layers * (layout.kda_state_bytes_per_layer + layout.kda_conv_bytes_per_layer);
  kda_snapshot_budget_ = layout.TotalBytes() / 8;
}

float* CpuExecutor::StatePtr(int kda_layer, int32_t row) const {
  return reinterpret_cast<float*>(arena_.as<char>() + layout_.KdaStateOffset(kda_layer) +
                                  row * layout_.kda_state_bytes_per_layer);
}

float* CpuExecutor::ConvPtr(int kda_layer, int32_t row) const {
  return reinterpret_cast<float*>(arena_.as<char>() + layout_.KdaConvOffset(kda_layer) +
                                  row * layout_.kda_conv_bytes_per_layer);
}

const float* CpuExecutor::StateRow(int kda_layer, int32_t row) const {
  return StatePtr(kda_layer, row);
}

const float* CpuExecutor::ConvRow(int kda_layer, int32_t row) const {
  return ConvPtr(kda_layer, row);
}

void CpuExecutor::CopyRow(int32_t from_row, int32_t to_row) {
  for (int j = 0; j < layout_.num_kda_layers; ++j) {
    std::memcpy(StatePtr(j, to_row), StatePtr(j, from_row), layout_.kda_state_bytes_per_layer);
    std::memcpy(ConvPtr(j, to_row), ConvPtr(j, from_row), layout_.kda_conv_bytes_per_layer);
  }
}

void CpuExecutor::SnapshotCopy(int32_t row, int32_t snapshot, bool restore) {
  char* copy = kda_snapshots_.as<char>() + snapshot * kda_snapshot_bytes_;
  for (int j = 0; j < layout_.num_kda_layers; ++j) {
    for (auto [cache, bytes] :
         {std::pair{reinterpret_cast<char*>(StatePtr(j, row)), layout_.kda_state_bytes_per_layer},
          std::pair{reinterpret_cast<char*>(ConvPtr(j, row)), layout_.kda_conv_bytes_per_layer}}) {
      std::memcpy(restore ? cache : copy, restore ? copy : cache, static_cast<size_t>(bytes));
      copy += bytes;
    }
  }
}

void CpuExecutor::InitSlot(const ScheduledSequence& seq) {
  if (seq.slot < 0 || layout_.num_kda_layers == 0) return;
  CHECK_LT(seq.slot, layout_.num_slots);
  const int32_t row = layout_.SlotRow(seq.slot);
  switch (seq.slot_init) {
    case SlotInit::kCarry:
      break;
    case SlotInit::kZero:
      for (int j = 0; j < layout_.num_kda_layers; ++j) {
        std::memset(StatePtr(j, row), 0, layout_.kda_state_bytes_per_layer);
        std::memset(ConvPtr(j, row), 0, layout_.kda_conv_bytes_per_layer);
      }
      return;
    case SlotInit::kFromCheckpoint:
      CHECK(seq.source_checkpoint >= 0 && seq.source_checkpoint < layout_.num_checkpoint_ids());
      CopyRow(layout_.CheckpointRow(seq.source_checkpoint), row);
      break;
  }
}

void CpuExecutor::BuildBatch(const StepPlan& plan) {
  if (batch_.size() < plan.sequences.size()) batch_.resize(plan.sequences.size());
  if (embeddings_.size() < plan.sequences.size()) embeddings_.resize(plan.sequences.size());
  snapshot_of_.assign(plan.sequences.size(), -1);
  int64_t draft_rows = 0;
  int32_t num_snapshots = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const ScheduledSequence& seq = plan.sequences[i];
    ForwardSequence& f = batch_[i];
    f.token_ids = seq.token_ids.data();
    f.num_new_tokens = static_cast<int64_t>(seq.token_ids.size());
    f.num_computed_tokens = seq.num_computed_tokens;
    embeddings_[i].clear();
    MediaRowsIn(seq.media, seq.num_computed_tokens, f.num_new_tokens, model_.config().hidden_size,
                &embeddings_[i]);
    f.embeddings = embeddings_[i];
    CHECK_LE(seq.score_targets.size(), seq.token_ids.size()) << "sequence " << seq.seq_id;
    // Scored rows need every new token's logits; the sampled row is then the last of them.
    f.logits = !seq.score_targets.empty() ? LogitsMode::kAll
               : seq.sample               ? LogitsMode::kLast
                                          : LogitsMode::kNone;
    CHECK(seq.num_draft_tokens == 0 ||
          (seq.sample && seq.score_targets.empty() && seq.num_draft_tokens < f.num_new_tokens))
        << "drafts of sequence " << seq.seq_id;
    f.num_last_logits = 1 + seq.num_draft_tokens;
    // KDA caches advance only by the tokens the sampler keeps (replayed after sampling).
    f.kda_draft_row = -1;
    f.kda_update_caches = false;
    if (seq.num_draft_tokens > 0 && layout_.num_kda_layers > 0) {
      f.kda_draft_row = draft_rows;
      draft_rows += f.num_new_tokens;
      if ((num_snapshots + 1) * kda_snapshot_bytes_ <= kda_snapshot_budget_) {
        snapshot_of_[i] = num_snapshots++;
        f.kda_update_caches = true;
      }
    }
    // With decode context parallelism a block holds every C-th position of C·block_size.
    CHECK_GE(static_cast<int64_t>(seq.block_table.size()) * layout_.block_size *
                 model_.context_parallel().size,
             seq.num_computed_tokens + f.num_new_tokens)
        << "block table of sequence " << seq.seq_id << " is too short";
    f.cache.block_table = seq.block_table.data();
    f.cache.block_size = layout_.block_size;
    f.cache.mla_pages.clear();
    f.cache.latent_dtype = layout_.latent_dtype;
    f.cache.rope_dim = layout_.rope_dim;
    f.cache.kda_state.clear();
    f.cache.kda_conv.clear();
    for (int j = 0; j < layout_.num_mla_layers; ++j) {
      f.cache.mla_pages.push_back(arena_.as<std::byte>() + layout_.MlaLayerOffset(j));
    }
    if (seq.slot >= 0) {
      for (int j = 0; j < layout_.num_kda_layers; ++j) {
        f.cache.kda_state.push_back(StatePtr(j, layout_.SlotRow(seq.slot)));
        f.cache.kda_conv.push_back(ConvPtr(j, layout_.SlotRow(seq.slot)));
      }
    } else {
      CHECK_EQ(layout_.num_kda_layers, 0) << "sequence " << seq.seq_id << " has no slot";
    }
  }
  BuildCheckpointSaves(plan);
  if (draft_rows > 0) kda_drafts_.Reserve(model_.config(), draft_rows);
  const auto snapshot_bytes = static_cast<size_t>(num_snapshots * kda_snapshot_bytes_);
  if (kda_snapshots_.size() < snapshot_bytes) {
    kda_snapshots_ = AlignedBuffer(snapshot_bytes, AlignedBuffer::Fill::kUninitialized);
  }
}

void CpuExecutor::BuildCheckpointSaves(const StepPlan& plan) {
  size_t num_saves = 0;
  for (const ScheduledSequence& seq : plan.sequences) num_saves += seq.save_checkpoints.size();
  if (kda_saves_.size() < num_saves) kda_saves_.resize(num_saves);  // never shrinks: reused
  size_t next = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const ScheduledSequence& seq = plan.sequences[i];
    ForwardSequence& f = batch_[i];
    f.kda_saves = {};
    if (seq.save_checkpoints.empty() || layout_.num_kda_layers == 0) continue;
    CHECK(seq.slot >= 0 && seq.num_draft_tokens == 0) << "checkpoint saves of " << seq.seq_id;
    const size_t first = next;
    int64_t previous = 0;
    for (const CheckpointSave& save : seq.save_checkpoints) {
      CHECK(save.checkpoint >= 0 && save.checkpoint < layout_.num_checkpoint_ids() &&
            save.num_tokens > previous && save.num_tokens <= f.num_new_tokens)
          << "checkpoint " << save.checkpoint << " after " << save.num_tokens << " tokens of "
          << seq.seq_id;
      previous = save.num_tokens;
      KdaCacheSave& out = kda_saves_[next++];
      out.num_tokens = save.num_tokens;
      out.kda_state.clear();
      out.kda_conv.clear();
      for (int j = 0; j < layout_.num_kda_layers; ++j) {
        out.kda_state.push_back(StatePtr(j, layout_.CheckpointRow(save.checkpoint)));
        out.kda_conv.push_back(ConvPtr(j, layout_.CheckpointRow(save.checkpoint)));
      }
    }
    f.kda_saves = absl::MakeConstSpan(kda_saves_).subspan(first, next - first);
  }
}

StepResult CpuExecutor::Execute(const StepPlan& plan) {
  StepResult result;
  ExecuteInto(plan, &result);
  return result;
}

TensorParallelGroup* CpuExecutor::tensor_parallel() const {
  return model_.tensor_parallel().enabled() ? forward_context_.tensor_parallel : nullptr;
}

void CpuExecutor::ExecuteInto(const StepPlan& plan, StepResult* result) {
  if (TensorParallelGroup* tp = tensor_parallel(); tp != nullptr) {
    SendStepPlan(*tp, plan, &plan_bytes_);
  }
  RunStep(plan, /*lead=*/true, result);
}

int64_t CpuExecutor::FollowStep() {
  TensorParallelGroup* tp = tensor_parallel();
  CHECK(tp != nullptr && tp->rank() != 0) << "FollowStep is for the other ranks of a group";
  std::optional<StepPlan> plan = ReceiveStepPlan(*tp, &plan_bytes_);
  if (!plan.has_value()) return -1;  // EndFollowers
  StepResult result;
  RunStep(*plan, /*lead=*/false, &result);
  return plan->step_id;
}

void CpuExecutor::SampleTasks(const StepPlan& plan, StepResult* result) {
  const int64_t vocab = model_.config().vocab_size;
  const auto num_tasks = static_cast<int64_t>(sample_tasks_.size());
  PrepareConstraints(plan, vocab, /*parallel=*/true);
  // Each task its own scratch, whichever thread runs it: nothing allocates once they have grown.
  if (sample_scratch_.size() < sample_tasks_.size()) sample_scratch_.resize(sample_tasks_.size());
  SampleTask* tasks = sample_tasks_.data();
  SampleScratch* scratch = sample_scratch_.data();
  float* logits = logits_.data();
  kernels::cpu::ParallelFor(num_tasks, num_tasks > 1, [&](int64_t t) {
    SampleTask& task = tasks[t];
    const ScheduledSequence& seq = plan.sequences[task.plan_index];
    // Rows of the last 1 + k new tokens; row j is num_draft_tokens − j rows before the last.
    for (int32_t j = 0; j <= seq.num_draft_tokens; ++j) {
      SampledToken& out = result->sampled[task.first_entry + static_cast<size_t>(j)];
      sampler_.Sample(seq, logits + (task.first_row + j) * vocab, vocab, &out, &scratch[t]);
      ++task.num_entries;
      if (EndsDraftVerification(seq, seq.num_draft_tokens - j, out.token_id)) break;
    }
  });
}

void CpuExecutor::EndFollowers() {
  TensorParallelGroup* tp = tensor_parallel();
  CHECK(tp != nullptr) << "EndFollowers is for the lead rank of a group";
  EndStepPlans(*tp);
}

void CpuExecutor::CopyCacheUnits(const StepPlan& plan, StepResult* result) {
  std::byte* arena = arena_.as<std::byte>();
  const CacheShares shares{model_.tensor_parallel().rank, model_.tensor_parallel().size,
                           model_.context_parallel().size};
  const absl::Status status = engine::CopyCacheUnits(
      plan, layout_, result, &spans_,
      [&](int64_t offset, int64_t bytes, char* to) {
        std::memcpy(to, arena + offset, static_cast<size_t>(bytes));
        return absl::OkStatus();
      },
      [&](const CacheLoad&, const char* from, int64_t offset, int64_t bytes) {
        std::memcpy(arena + offset, from, static_cast<size_t>(bytes));
        return absl::OkStatus();
      },
      shares);
  CHECK(status.ok()) << status;  // host copies do not fail
  if (TensorParallelGroup* tp = tensor_parallel(); tp != nullptr) {
    GatherSavedShares(*tp, shares, plan, result, &save_scratch_);
  }
}

void CpuExecutor::RunStep(const StepPlan& plan, bool lead, StepResult* result) {
  const auto start = std::chrono::steady_clock::now();
  result->step_id = plan.step_id;
  // 0. Copies to and from the offload tiers, before anything writes the cache.
  CopyCacheUnits(plan, result);
  // 1. Slots that start this step (zeroed, or copied from a prefix-cache checkpoint).
  for (const ScheduledSequence& seq : plan.sequences) InitSlot(seq);

  // 2. One forward over the ragged batch (the KDA caches of sequences verifying drafts in place
  // copied aside first).
  BuildBatch(plan);
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    if (snapshot_of_[i] < 0) continue;
    SnapshotCopy(layout_.SlotRow(plan.sequences[i].slot), snapshot_of_[i], /*restore=*/false);
  }
  // Forward resizes expert_tokens (new entries zero) and counts into it.
  result->expert_tokens.clear();
  ForwardContext context = forward_context_;  // set_forward_context: exchange, workspace
  context.expert_tokens = &result->expert_tokens;
  if (context.workspace == nullptr) context.workspace = workspace_.get();
  context.kda_drafts = &kda_drafts_;
  model_.Forward(ForwardBatch(batch_.data(), plan.sequences.size()), &logits_, context);

  // 3. Scoring and sampling. A sequence owns one logits row (kLast), or one per new token
  // (kAll: scored rows first, the sampled row last). Scoring runs sequence by sequence (each
  // spreads its rows over the pool); sampling runs one pool task per sequence — each has its
  // own Sampler (RNG stream, penalties, constraint), so the tokens do not depend on the thread
  // (a 163,840-token top-p draw is ~1 ms: 64 of them in a row were a whole decode step's worth
  // on a big CPU). Each sequence writes its 1 + drafts entries of `sampled` at a fixed offset;
  // the entries are then compacted, overwritten in place so their top_logprobs keep capacity.
  const int64_t vocab = model_.config().vocab_size;
  size_t num_scored = 0;
  for (const ScheduledSequence& seq : plan.sequences) num_scored += !seq.score_targets.empty();
  if (result->scored.size() != num_scored) result->scored.resize(num_scored);
  sample_tasks_.clear();
  int64_t row = 0;
  size_t scored = 0, max_sampled = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const ScheduledSequence& seq = plan.sequences[i];
    if (!seq.score_targets.empty()) {
      if (lead) ScoreTargets(seq, logits_.data() + row * vocab, vocab, &result->scored[scored]);
      ++scored;
      row += static_cast<int64_t>(seq.token_ids.size()) - (seq.sample ? 1 : 0);
    }
    if (!seq.sample || seq.token_ids.empty()) continue;
    sample_tasks_.push_back({i, row, max_sampled, 0});
    row += 1 + seq.num_draft_tokens;
    max_sampled += static_cast<size_t>(1 + seq.num_draft_tokens);
  }
  CHECK_EQ(row, NumLogitRows(ForwardBatch(batch_.data(), plan.sequences.size())));
  if (result->sampled.size() < max_sampled) result->sampled.resize(max_sampled);
  const auto num_tasks = static_cast<int64_t>(sample_tasks_.size());
  bool any_drafts = false;
  for (const ScheduledSequence& seq : plan.sequences) any_drafts |= seq.num_draft_tokens > 0;
  if (lead) SampleTasks(plan, result);
  if (TensorParallelGroup* tp = tensor_parallel(); tp != nullptr && any_drafts) {
    // The followers keep in their KDA caches what the lead's sampler accepted.
    accepted_entries_.resize(sample_tasks_.size());
    for (size_t t = 0; t < sample_tasks_.size(); ++t) {
      if (lead) accepted_entries_[t] = sample_tasks_[t].num_entries;
    }
    tp->BroadcastFromLead(accepted_entries_.data(),
                          num_tasks * static_cast<int64_t>(sizeof(int32_t)));
    for (size_t t = 0; t < sample_tasks_.size(); ++t) {
      sample_tasks_[t].num_entries = accepted_entries_[t];
    }
  } else if (!lead) {
    for (SampleTask& task : sample_tasks_) task.num_entries = 1;
  }
  size_t sampled = 0;
  replays_.clear();
  for (const SampleTask& task : sample_tasks_) {
    for (int32_t j = 0; j < task.num_entries; ++j, ++sampled) {
      const size_t from = task.first_entry + static_cast<size_t>(j);
      if (from != sampled) std::swap(result->sampled[sampled], result->sampled[from]);
    }
    const ScheduledSequence& seq = plan.sequences[task.plan_index];
    const int32_t accepted = task.num_entries - 1;
    // The KDA caches end up holding the tokens before the drafts and the accepted drafts.
    const ForwardSequence& f = batch_[task.plan_index];
    const int64_t kept = f.num_new_tokens - seq.num_draft_tokens + accepted;
    if (f.kda_draft_row < 0 || (f.kda_update_caches && kept == f.num_new_tokens)) continue;
    if (f.kda_update_caches) {  // a rejection after an update in place: from the copy
      SnapshotCopy(layout_.SlotRow(seq.slot), snapshot_of_[task.plan_index], /*restore=*/true);
    }
    replays_.push_back({&f.cache, f.kda_draft_row, kept});
  }
  result->sampled.resize(sampled);  // shrinks only: entries keep their capacity
  // The kept tokens (those before the drafts and the accepted drafts) into the KDA caches.
  model_.ReplayKdaDrafts(kda_drafts_, replays_, context.workspace);

  result->forward_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace strata::engine
