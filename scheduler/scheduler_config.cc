#include "scheduler/scheduler_config.h"

#include "absl/strings/str_cat.h"

namespace strata::scheduler {

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kFcfs:
      return "fcfs";
    case Policy::kPriority:
      return "priority";
  }
  return "unknown";
}

absl::Status SchedulerConfig::Validate() const {
  auto positive = [](const char* field, int64_t value) -> absl::Status {
    if (value > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(field, " must be > 0, got ", value));
  };
  auto non_negative = [](const char* field, int64_t value) -> absl::Status {
    if (value >= 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(field, " must be >= 0, got ", value));
  };
  for (absl::Status s :
       {positive("max_num_seqs", max_num_seqs),
        positive("max_num_batched_tokens", max_num_batched_tokens),
        positive("max_model_len", max_model_len), positive("block_size", block_size),
        positive("num_blocks", num_blocks), non_negative("num_slots", num_slots),
        non_negative("num_checkpoint_slots", num_checkpoint_slots),
        non_negative("checkpoint_every_n_blocks", checkpoint_every_n_blocks),
        non_negative("stride_checkpoints_per_sequence", stride_checkpoints_per_sequence),
        non_negative("long_prefill_token_threshold", long_prefill_token_threshold),
        non_negative("prefill_chunk_alignment", prefill_chunk_alignment),
        positive("max_scored_tokens_per_step", max_scored_tokens_per_step),
        positive("max_tier_load_bytes_per_step", max_tier_load_bytes_per_step),
        non_negative("speculative_disable_by_batch_size", speculative_disable_by_batch_size)}) {
    if (!s.ok()) return s;
  }
  if (num_speculative_tokens < 0 || num_speculative_tokens > kMaxSpeculativeTokens) {
    return absl::InvalidArgumentError(absl::StrCat("num_speculative_tokens must be in [0, ",
                                                   kMaxSpeculativeTokens, "], got ",
                                                   num_speculative_tokens));
  }
  if (prompt_lookup_min < 1 || prompt_lookup_min > prompt_lookup_max ||
      prompt_lookup_max > kMaxPromptLookup) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt_lookup_min (", prompt_lookup_min, ") and prompt_lookup_max (", prompt_lookup_max,
        ") must satisfy 1 <= prompt_lookup_min <= prompt_lookup_max <= ", kMaxPromptLookup));
  }
  if (has_kda_layers && num_slots <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_slots must be > 0 for a model with KDA layers, got ", num_slots));
  }
  if (max_num_batched_tokens < max_num_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_num_batched_tokens (", max_num_batched_tokens,
                     ") must be >= max_num_seqs (", max_num_seqs, ")"));
  }
  if (int64_t{num_blocks} * block_size < max_model_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_blocks (", num_blocks, ") * block_size (", block_size,
                     ") = ", int64_t{num_blocks} * block_size, " tokens must be >= max_model_len (",
                     max_model_len, ")"));
  }
  return absl::OkStatus();
}

}  // namespace strata::scheduler
