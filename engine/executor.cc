#include "engine/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/check.h"

namespace strata::engine {

kvcache::ModelCacheSpec CacheSpecFor(const ModelConfig& cfg) {
  const CacheGeometry g = GetCacheGeometry(cfg);
  kvcache::ModelCacheSpec spec;
  spec.num_mla_layers = g.num_mla_layers;
  spec.latent_dim = g.latent_dim;
  spec.latent_dtype = kvcache::LatentDType::kF32;
  spec.num_kda_layers = g.num_kda_layers;
  spec.kda_state_bytes_per_layer = g.kda_state_floats * 4;
  spec.kda_conv_bytes_per_layer = g.kda_conv_floats * 4;
  return spec;
}

CpuExecutor::CpuExecutor(const Model& model, const kvcache::CacheLayout& layout)
    : model_(model), layout_(layout), arena_(static_cast<size_t>(layout.TotalBytes())) {
  const CacheGeometry& g = model.geometry();
  CHECK(layout.latent_dtype == kvcache::LatentDType::kF32) << "the CPU executor keeps f32 latents";
  CHECK_EQ(layout.num_mla_layers, g.num_mla_layers);
  CHECK_EQ(layout.num_kda_layers, g.num_kda_layers);
  if (g.num_mla_layers > 0) CHECK_EQ(layout.latent_dim, g.latent_dim);
  if (g.num_kda_layers > 0) {
    CHECK_EQ(layout.kda_state_bytes_per_layer, g.kda_state_floats * 4);
    CHECK_EQ(layout.kda_conv_bytes_per_layer, g.kda_conv_floats * 4);
  }
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

void CpuExecutor::CopyRow(int32_t from_row, int32_t to_row) {
  for (int j = 0; j < layout_.num_kda_layers; ++j) {
    std::memcpy(StatePtr(j, to_row), StatePtr(j, from_row), layout_.kda_state_bytes_per_layer);
    std::memcpy(ConvPtr(j, to_row), ConvPtr(j, from_row), layout_.kda_conv_bytes_per_layer);
  }
}

void CpuExecutor::InitSlot(const ScheduledSequence& seq) {
  if (seq.slot < 0 || layout_.num_kda_layers == 0) return;
  CHECK_LT(seq.slot, layout_.num_slots);
  const int32_t row = layout_.SlotRow(seq.slot);
  switch (seq.slot_init) {
    case SlotInit::kCarry:
      return;
    case SlotInit::kZero:
      for (int j = 0; j < layout_.num_kda_layers; ++j) {
        std::memset(StatePtr(j, row), 0, layout_.kda_state_bytes_per_layer);
        std::memset(ConvPtr(j, row), 0, layout_.kda_conv_bytes_per_layer);
      }
      return;
    case SlotInit::kFromCheckpoint:
      CHECK(seq.source_checkpoint >= 0 && seq.source_checkpoint < layout_.num_checkpoints);
      CopyRow(layout_.CheckpointRow(seq.source_checkpoint), row);
      return;
  }
}

SampledToken CpuExecutor::SampleOne(const ScheduledSequence& seq, float* logits) const {
  const int64_t vocab = model_.config().vocab_size;
  SampledToken out;
  out.seq_id = seq.seq_id;
  std::vector<double> logprobs;
  if (seq.num_logprobs >= 0) {  // log-softmax of the raw model distribution (vLLM default)
    const float max_logit = *std::max_element(logits, logits + vocab);
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - max_logit);
    const double log_z = max_logit + std::log(sum);
    logprobs.resize(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) logprobs[i] = logits[i] - log_z;
  }
  CHECK(seq.sampler != nullptr) << "sequence " << seq.seq_id << " has no sampler";
  out.token_id = seq.sampler->Sample(logits, vocab);
  if (!logprobs.empty()) {
    out.logprob = static_cast<float>(logprobs[out.token_id]);
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) order[i] = static_cast<int32_t>(i);
    const int64_t n = std::min<int64_t>(seq.num_logprobs, vocab);
    std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
      return logprobs[a] > logprobs[b] || (logprobs[a] == logprobs[b] && a < b);
    });
    for (int64_t i = 0; i < n; ++i) {
      out.top_logprobs.push_back({order[i], static_cast<float>(logprobs[order[i]])});
    }
  }
  return out;
}

StepResult CpuExecutor::Execute(const StepPlan& plan) {
  const auto start = std::chrono::steady_clock::now();
  StepResult result;
  result.step_id = plan.step_id;
  // 1. Slots that start this step (zeroed, or copied from a prefix-cache checkpoint).
  for (const ScheduledSequence& seq : plan.sequences) InitSlot(seq);

  // 2. One forward over the ragged batch.
  std::vector<ForwardSequence> batch;
  batch.reserve(plan.sequences.size());
  for (const ScheduledSequence& seq : plan.sequences) {
    ForwardSequence f;
    f.token_ids = seq.token_ids.data();
    f.num_new_tokens = static_cast<int64_t>(seq.token_ids.size());
    f.num_computed_tokens = seq.num_computed_tokens;
    f.logits = seq.sample ? LogitsMode::kLast : LogitsMode::kNone;
    CHECK_GE(static_cast<int64_t>(seq.block_table.size()) * layout_.block_size,
             seq.num_computed_tokens + f.num_new_tokens)
        << "block table of sequence " << seq.seq_id << " is too short";
    f.cache.block_table = seq.block_table.data();
    f.cache.block_size = layout_.block_size;
    for (int j = 0; j < layout_.num_mla_layers; ++j) {
      f.cache.mla_pages.push_back(
          reinterpret_cast<float*>(arena_.as<char>() + layout_.MlaLayerOffset(j)));
    }
    if (seq.slot >= 0) {
      for (int j = 0; j < layout_.num_kda_layers; ++j) {
        f.cache.kda_state.push_back(StatePtr(j, layout_.SlotRow(seq.slot)));
        f.cache.kda_conv.push_back(ConvPtr(j, layout_.SlotRow(seq.slot)));
      }
    } else {
      CHECK_EQ(layout_.num_kda_layers, 0) << "sequence " << seq.seq_id << " has no slot";
    }
    batch.push_back(std::move(f));
  }
  model_.Forward(batch, &logits_, &result.expert_tokens);

  // 3. Sampling, in plan order (one logits row per sampled sequence).
  const int64_t vocab = model_.config().vocab_size;
  int64_t row = 0;
  for (const ScheduledSequence& seq : plan.sequences) {
    if (!seq.sample || seq.token_ids.empty()) continue;
    result.sampled.push_back(SampleOne(seq, logits_.data() + row * vocab));
    ++row;
  }

  // 4. KDA checkpoints at the boundary this step ended on.
  for (const ScheduledSequence& seq : plan.sequences) {
    if (seq.save_checkpoint < 0 || seq.slot < 0) continue;
    CHECK_LT(seq.save_checkpoint, layout_.num_checkpoints);
    CopyRow(layout_.SlotRow(seq.slot), layout_.CheckpointRow(seq.save_checkpoint));
  }
  result.forward_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace strata::engine
