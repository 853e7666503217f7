#include "kvcache/memory_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/status.h"

namespace strata::kvcache {
namespace {

absl::Status ValidateInputs(const ModelCacheSpec& spec, const PlannerOptions& options) {
  if (options.memory_budget_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory_budget_bytes must be > 0, got ", options.memory_budget_bytes));
  }
  if (options.block_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size must be > 0, got ", options.block_size));
  }
  if (options.max_num_seqs <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_num_seqs must be > 0, got ", options.max_num_seqs));
  }
  if (!(options.checkpoint_fraction >= 0.0 && options.checkpoint_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_fraction must be in [0, 1), got ", options.checkpoint_fraction));
  }
  CacheLayout shape;
  shape.num_mla_layers = spec.num_mla_layers;
  shape.latent_dim = spec.latent_dim;
  shape.rope_dim = spec.rope_dim;
  shape.latent_dtype = spec.latent_dtype;
  shape.block_size = options.block_size;
  shape.num_kda_layers = spec.num_kda_layers;
  shape.kda_state_bytes_per_layer = spec.kda_state_bytes_per_layer;
  shape.kda_conv_bytes_per_layer = spec.kda_conv_bytes_per_layer;
  return shape.Validate();
}

}  // namespace

CacheLayout LayoutWithPools(const ModelCacheSpec& spec, int block_size, int32_t num_blocks,
                            int32_t num_slots, int32_t num_checkpoints) {
  CacheLayout layout;
  layout.num_mla_layers = spec.num_mla_layers;
  layout.latent_dim = spec.latent_dim;
  layout.rope_dim = spec.rope_dim;
  layout.latent_dtype = spec.latent_dtype;
  layout.block_size = block_size;
  layout.num_blocks = num_blocks;
  layout.num_kda_layers = spec.num_kda_layers;
  layout.kda_state_bytes_per_layer = spec.kda_state_bytes_per_layer;
  layout.kda_conv_bytes_per_layer = spec.kda_conv_bytes_per_layer;
  layout.num_slots = num_slots;
  layout.num_checkpoints = num_checkpoints;
  return layout;
}

absl::StatusOr<CacheLayout> PlanMemory(const ModelCacheSpec& spec, const PlannerOptions& options) {
  RETURN_IF_ERROR(ValidateInputs(spec, options));
  CacheLayout layout = LayoutWithPools(spec, options.block_size, 0, options.max_num_seqs, 0);

  const int64_t slot_bytes = layout.state_bytes_per_sequence();
  const int64_t slack =
      (int64_t{spec.num_mla_layers} + 2 * int64_t{spec.num_kda_layers}) * kRegionAlignmentBytes;
  const int64_t usable = options.memory_budget_bytes - slack;
  if (options.fit_max_num_seqs && slot_bytes > 0) {
    const int64_t fit = std::max<int64_t>(1, usable / 4 / slot_bytes);
    layout.num_slots = static_cast<int32_t>(std::min<int64_t>(layout.num_slots, fit));
  }
  const int64_t live_bytes = slot_bytes * layout.num_slots;
  if (usable < live_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KDA state slots need ", FormatWithThousands(live_bytes + slack), " bytes (max_num_seqs ",
        layout.num_slots, " x ", FormatWithThousands(slot_bytes),
        " bytes per sequence, plus alignment) but the cache memory budget is ",
        FormatWithThousands(options.memory_budget_bytes), " bytes"));
  }
  int64_t rest = usable - live_bytes;
  if (slot_bytes > 0) {
    auto checkpoint_bytes =
        static_cast<int64_t>(std::floor(static_cast<double>(rest) * options.checkpoint_fraction));
    int64_t num_checkpoints = checkpoint_bytes / slot_bytes;
    layout.num_checkpoints = static_cast<int32_t>(
        std::min<int64_t>(num_checkpoints, std::numeric_limits<int32_t>::max()));
    rest -= slot_bytes * layout.num_checkpoints;
  }
  if (spec.num_mla_layers > 0) {
    const int64_t block_bytes = layout.page_bytes() * spec.num_mla_layers;
    layout.num_blocks = static_cast<int32_t>(
        std::min<int64_t>(rest / block_bytes, std::numeric_limits<int32_t>::max()));
    if (layout.num_blocks == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no room for a single latent block: one block needs ", FormatWithThousands(block_bytes),
          " bytes, ", FormatWithThousands(rest), " bytes are left of the cache memory budget ",
          FormatWithThousands(options.memory_budget_bytes), " after ", layout.num_slots,
          " state slots"));
    }
    if (layout.num_tokens() < options.min_num_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the latent cache holds ", FormatWithThousands(layout.num_tokens()),
          " tokens, fewer than the required ", FormatWithThousands(options.min_num_tokens),
          " (needs ", FormatWithThousands(options.min_num_tokens * layout.mla_bytes_per_token()),
          " bytes; the cache memory budget is ", FormatWithThousands(options.memory_budget_bytes),
          " bytes)"));
    }
  }
  CHECK_LE(layout.TotalBytes(), options.memory_budget_bytes);
  return layout;
}

std::string FormatWithThousands(int64_t value) {
  std::string digits = absl::StrCat(value);
  size_t start = digits[0] == '-' ? 1 : 0;
  std::string out = digits.substr(0, start);
  size_t n = digits.size() - start;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[start + i]);
  }
  return out;
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

std::string DescribePlan(const CacheLayout& layout) {
  std::string line = "latent cache: ";
  if (layout.num_mla_layers > 0) {
    double sequences = static_cast<double>(layout.num_tokens()) / 1048576.0;
    std::string seq_text =
        sequences >= 1.0 ? absl::StrFormat("%.1f", sequences) : absl::StrFormat("%.3g", sequences);
    absl::StrAppend(&line, FormatWithThousands(layout.num_tokens()), " tokens (", seq_text,
                    " 1M-token sequences) in ", FormatWithThousands(layout.num_blocks), " ",
                    std::string(LatentDTypeName(layout.latent_dtype)), " blocks of ",
                    layout.block_size);
  } else {
    absl::StrAppend(&line, "none (no MLA layers)");
  }
  if (layout.num_kda_layers > 0) {
    absl::StrAppend(&line, "; ", FormatWithThousands(layout.num_slots), " state slots (",
                    FormatBytes(layout.state_bytes_per_sequence()), " each); ",
                    FormatWithThousands(layout.num_checkpoints),
                    " KDA checkpoints (+ idle state slots)");
  } else {
    absl::StrAppend(&line, "; no KDA state (", FormatWithThousands(layout.num_slots),
                    " sequences)");
  }
  absl::StrAppend(&line, "; ", FormatBytes(layout.TotalBytes()));
  return line;
}

}  // namespace strata::kvcache
