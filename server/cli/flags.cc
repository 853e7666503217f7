#include "server/cli/flags.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/log.h"
#include "nlohmann/json.hpp"

namespace strata::cli {

absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text, const std::string& what) {
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    piece = absl::StripAsciiWhitespace(piece);
    if (piece.empty()) {
      return absl::InvalidArgumentError(what + ": empty entry in '" + text + "'");
    }
    int64_t value = 0;
    if (!absl::SimpleAtoi(piece, &value) || value < 0 || value > INT32_MAX) {
      return absl::InvalidArgumentError(what + ": '" + std::string(piece) +
                                        "' is not a non-negative token id");
    }
    ids.push_back(static_cast<int32_t>(value));
  }
  return ids;
}

absl::Status ApplyCpuMatmulPrecision(const std::string& value) {
  using kernels::cpu::MatmulPrecision;
  if (value != "f32" && value != "bf16" && value != "int8") {
    return absl::InvalidArgumentError("--cpu-matmul-precision must be f32, bf16 or int8, got '" +
                                      value + "'");
  }
  const MatmulPrecision precision = value == "int8"   ? MatmulPrecision::kInt8
                                    : value == "bf16" ? MatmulPrecision::kBf16
                                                      : MatmulPrecision::kF32;
  if (precision != MatmulPrecision::kF32 && !kernels::cpu::Bf16MatmulSupported()) {
    LOG_WARN("engine",
             "--cpu-matmul-precision {}: this CPU has no AVX512_BF16, products over >= 16 rows "
             "stay f32",
             value);
  }
  if (precision == MatmulPrecision::kInt8 && !kernels::cpu::Int8MatmulSupported()) {
    LOG_WARN("engine",
             "--cpu-matmul-precision int8: this CPU has no AVX512_VNNI, the MXFP4 and int8 "
             "products keep f32 activations");
  }
  kernels::cpu::SetMatmulPrecision(precision);
  return absl::OkStatus();
}

absl::StatusOr<LatentDType> ParseKvCacheDType(const std::string& value, const std::string& device) {
  const bool cuda = device == "cuda";
  if (value == "auto") return cuda ? LatentDType::kBF16 : LatentDType::kF32;
  const std::optional<LatentDType> dtype = LatentDTypeFromName(value);
  if (!dtype) {
    return absl::InvalidArgumentError(
        "--kv-cache-dtype must be auto, f32, bf16 or fp8 (or float32, bfloat16, fp8_e4m3, "
        "fp8_ds_mla), got '" +
        value + "'");
  }
  if (cuda && *dtype == LatentDType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-dtype ", value, ": --device cuda stores latent rows in bf16 or fp8"));
  }
  return *dtype;
}

absl::StatusOr<std::vector<std::string>> ParseStringList(const std::string& text,
                                                         const std::string& what) {
  std::vector<std::string> items;
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  if (absl::StartsWith(trimmed, "[")) {
    const nlohmann::json list = nlohmann::json::parse(trimmed, nullptr, /*allow_exceptions=*/false);
    if (!list.is_array()) {
      return absl::InvalidArgumentError(what + " is not a valid JSON array: " + text);
    }
    for (const nlohmann::json& item : list) {
      if (!item.is_string()) {
        return absl::InvalidArgumentError(what + " must list strings, got " + item.dump());
      }
      items.push_back(item.get<std::string>());
    }
    return items;
  }
  for (absl::string_view item : absl::StrSplit(trimmed, ',', absl::SkipWhitespace())) {
    items.emplace_back(absl::StripAsciiWhitespace(item));
  }
  return items;
}

absl::Status ParseSpeculativeConfig(const std::string& text, scheduler::SchedulerConfig* config) {
  const nlohmann::json spec = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!spec.is_object()) {
    return absl::InvalidArgumentError("--speculative-config is not a JSON object: " + text);
  }
  const std::string method = spec.value("method", std::string());
  if (method != "ngram") {
    return absl::InvalidArgumentError(
        "--speculative-config: method must be \"ngram\" (drafts by prompt lookup; Strata has "
        "no draft model, EAGLE or MTP head), got " +
        (spec.contains("method") ? spec["method"].dump() : std::string("none")));
  }
  // num_speculative_tokens, prompt_lookup_max, prompt_lookup_min, disable_by_batch_size
  int values[4] = {-1, 5, -1, 0};
  const char* keys[4] = {"num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min",
                         "disable_by_batch_size"};
  for (const auto& [key, value] : spec.items()) {
    if (key == "method") continue;
    const auto* known =
        std::find_if(std::begin(keys), std::end(keys), [&](const char* k) { return key == k; });
    if (known == std::end(keys)) {
      return absl::InvalidArgumentError(
          "--speculative-config: unknown key \"" + key +
          "\" (known: method, num_speculative_tokens, prompt_lookup_max, prompt_lookup_min, "
          "disable_by_batch_size)");
    }
    const int64_t limit =
        key == "disable_by_batch_size" ? int64_t{1} << 16 : scheduler::kMaxPromptLookup;
    if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > limit) {
      return absl::InvalidArgumentError(absl::StrCat("--speculative-config: ", key,
                                                     " must be an integer in [1, ", limit,
                                                     "], got ", value.dump()));
    }
    values[known - std::begin(keys)] = static_cast<int>(value.get<int64_t>());
  }
  if (values[0] < 0) {
    return absl::InvalidArgumentError(
        "--speculative-config: num_speculative_tokens is required (drafted tokens per step)");
  }
  if (values[0] > scheduler::kMaxSpeculativeTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculative-config: num_speculative_tokens must be in [1, ",
                     scheduler::kMaxSpeculativeTokens, "], got ", values[0]));
  }
  const int lookup_min = values[2] >= 0 ? values[2] : std::min(2, values[1]);
  if (lookup_min > values[1]) {
    return absl::InvalidArgumentError(absl::StrCat("--speculative-config: prompt_lookup_min (",
                                                   lookup_min, ") exceeds prompt_lookup_max (",
                                                   values[1], ")"));
  }
  config->num_speculative_tokens = values[0];
  config->prompt_lookup_max = values[1];
  config->prompt_lookup_min = lookup_min;
  config->speculative_disable_by_batch_size = values[3];
  return absl::OkStatus();
}

}  // namespace strata::cli
