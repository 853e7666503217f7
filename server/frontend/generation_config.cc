#include "server/frontend/generation_config.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/file.h"
#include "core/status.h"

namespace strata::frontend {
namespace {

// A number field within [min, max] (min exclusive when asked); nullopt when absent or null.
absl::StatusOr<std::optional<double>> Number(const Json& root, const std::string& path,
                                             const char* key, double min, double max,
                                             bool min_exclusive = false) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return std::nullopt;
  const std::string range = absl::StrCat(min_exclusive ? "(" : "[", min, ", ", max, "]");
  if (!it->is_number() || !std::isfinite(it->get<double>())) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": '", key, "' must be a number in ", range, "; got ", it->dump()));
  }
  const double x = it->get<double>();
  if (x < min || x > max || (min_exclusive && x == min)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": '", key, "' must be in ", range, "; got ", it->dump()));
  }
  return x;
}

absl::StatusOr<std::vector<int32_t>> EosIds(const Json& root, const std::string& path) {
  auto it = root.find("eos_token_id");
  std::vector<int32_t> ids;
  if (it == root.end() || it->is_null()) return ids;
  const Json list = it->is_array() ? *it : Json::array({*it});
  for (const Json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": 'eos_token_id' must be a token id or a list of them; got ", it->dump()));
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

// The sampling fields of `root` into `d`. With `skip_transformers_defaults` (a file), a field
// equal to transformers' own default is not a default (vLLM reads to_diff_dict()); an explicit
// override takes every field it names.
absl::Status ReadSamplingFields(const Json& root, const std::string& path,
                                bool skip_transformers_defaults, GenerationDefaults& d) {
  auto take = [&](std::optional<double> x, double transformers_default) {
    return x.has_value() && (!skip_transformers_defaults || *x != transformers_default);
  };
  absl::StatusOr<std::optional<double>> v = Number(root, path, "temperature", 0, 2);
  if (!v.ok()) return v.status();
  if (take(*v, 1.0)) d.temperature = static_cast<float>(**v);
  if (!(v = Number(root, path, "top_p", 0, 1, /*min_exclusive=*/true)).ok()) return v.status();
  if (take(*v, 1.0)) d.top_p = static_cast<float>(**v);
  if (!(v = Number(root, path, "top_k", -1, INT32_MAX)).ok()) return v.status();
  if (v->has_value() && std::trunc(**v) != **v) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": 'top_k' must be an integer"));
  }
  if (take(*v, 50.0)) d.top_k = static_cast<int>(**v);
  if (!(v = Number(root, path, "min_p", 0, 1)).ok()) return v.status();
  if (take(*v, 0.0)) d.min_p = static_cast<float>(**v);
  if (!(v = Number(root, path, "repetition_penalty", 0, 2, /*min_exclusive=*/true)).ok()) {
    return v.status();
  }
  if (take(*v, 1.0)) d.repetition_penalty = static_cast<float>(**v);
  if (!(v = Number(root, path, "max_new_tokens", 1, double(int64_t{1} << 31))).ok()) {
    return v.status();
  }
  if (v->has_value()) d.max_tokens = static_cast<int64_t>(**v);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& dir) {
  GenerationConfig config;
  const std::string path = dir + "/generation_config.json";
  if (!FileExists(path)) return config;
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  const Json root = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  config.source = path;
  RETURN_IF_ERROR(
      ReadSamplingFields(root, path, /*skip_transformers_defaults=*/true, config.defaults));
  absl::StatusOr<std::vector<int32_t>> eos = EosIds(root, path);
  if (!eos.ok()) return eos.status();
  config.eos_token_ids = std::move(*eos);
  return config;
}

absl::Status ApplyGenerationOverride(const std::string& json_text, GenerationConfig& config) {
  constexpr const char* kWhat = "--override-generation-config";
  constexpr const char* kKeys[] = {"temperature",        "top_p",         "top_k", "min_p",
                                   "repetition_penalty", "max_new_tokens"};
  const Json root = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": not a JSON object, e.g. '{\"temperature\": 0.6}'"));
  }
  for (const auto& [key, value] : root.items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWhat, ": unknown field '", key, "' (known: ", absl::StrJoin(kKeys, ", "), ")"));
    }
  }
  RETURN_IF_ERROR(
      ReadSamplingFields(root, kWhat, /*skip_transformers_defaults=*/false, config.defaults));
  config.source =
      config.source.empty() ? std::string(kWhat) : absl::StrCat(config.source, " + ", kWhat);
  return absl::OkStatus();
}

std::string DescribeGenerationConfig(const GenerationConfig& config) {
  std::vector<std::string> parts;
  const GenerationDefaults& d = config.defaults;
  if (d.temperature) parts.push_back(absl::StrCat("temperature ", *d.temperature));
  if (d.top_p) parts.push_back(absl::StrCat("top_p ", *d.top_p));
  if (d.top_k) parts.push_back(absl::StrCat("top_k ", *d.top_k));
  if (d.min_p) parts.push_back(absl::StrCat("min_p ", *d.min_p));
  if (d.repetition_penalty) {
    parts.push_back(absl::StrCat("repetition_penalty ", *d.repetition_penalty));
  }
  if (d.max_tokens) parts.push_back(absl::StrCat("max_tokens ", *d.max_tokens));
  if (!config.eos_token_ids.empty()) {
    parts.push_back(absl::StrCat("eos ids [", absl::StrJoin(config.eos_token_ids, ", "), "]"));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

}  // namespace strata::frontend
