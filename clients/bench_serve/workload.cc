#include "clients/bench_serve/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace strata::bench_serve {
namespace {

// A length in value·[1 − ratio, 1 + ratio], at least `min`.
int64_t DrawLength(std::mt19937_64& rng, int64_t value, double ratio, int64_t min) {
  const auto lo = static_cast<int64_t>(std::floor(static_cast<double>(value) * (1.0 - ratio)));
  const auto hi = static_cast<int64_t>(std::ceil(static_cast<double>(value) * (1.0 + ratio)));
  std::uniform_int_distribution<int64_t> dist(std::max(lo, min), std::max(hi, min));
  return dist(rng);
}

}  // namespace

absl::StatusOr<std::vector<BenchRequest>> RandomRequests(const RandomDataset& d) {
  if (d.num_prompts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num-prompts must be >= 1, got ", d.num_prompts));
  }
  if (d.input_len < 1 || d.output_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--random-input-len and --random-output-len must be >= 1, got ", d.input_len,
                     " and ", d.output_len));
  }
  if (!(d.range_ratio >= 0.0 && d.range_ratio < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--random-range-ratio must be in [0, 1), got ", d.range_ratio));
  }
  if (d.prefix_len < 0 || d.vocab_size < 2) {
    return absl::InvalidArgumentError(absl::StrCat("--random-prefix-len must be >= 0 (got ",
                                                   d.prefix_len, ") and the vocabulary >= 2 (got ",
                                                   d.vocab_size, ")"));
  }
  std::mt19937_64 rng(d.seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(d.vocab_size - 1));
  std::vector<int32_t> prefix(static_cast<size_t>(d.prefix_len));
  for (int32_t& t : prefix) t = token(rng);
  std::vector<BenchRequest> out(static_cast<size_t>(d.num_prompts));
  for (BenchRequest& r : out) {
    const int64_t input = DrawLength(rng, d.input_len, d.range_ratio, 1);
    r.output_len = DrawLength(rng, d.output_len, d.range_ratio, 1);
    r.prompt_ids = prefix;
    for (int64_t i = 0; i < input; ++i) r.prompt_ids.push_back(token(rng));
    r.prompt_len = static_cast<int64_t>(r.prompt_ids.size());
  }
  return out;
}

absl::StatusOr<std::vector<BenchRequest>> ShareGptRequests(const ShareGptDataset& d,
                                                           TokenCounter count_tokens) {
  std::ifstream file(d.path);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read --dataset-path ", d.path));
  std::stringstream text;
  text << file.rdbuf();
  const nlohmann::json data =
      nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!data.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(d.path, " is not a ShareGPT file: expected a JSON list of conversations"));
  }
  // (prompt, reply) of every usable conversation, then a seeded shuffle.
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const nlohmann::json& item : data) {
    if (!item.is_object() || !item.contains("conversations")) continue;
    const nlohmann::json& turns = item["conversations"];
    if (!turns.is_array() || turns.size() < 2) continue;
    const nlohmann::json& human = turns[0];
    const nlohmann::json& reply = turns[1];
    if (!human.is_object() || !reply.is_object() || !human.contains("value") ||
        !reply.contains("value") || !human["value"].is_string() || !reply["value"].is_string()) {
      continue;
    }
    pairs.emplace_back(human["value"].get<std::string>(), reply["value"].get<std::string>());
  }
  std::mt19937_64 rng(d.seed);
  std::shuffle(pairs.begin(), pairs.end(), rng);
  std::vector<BenchRequest> out;
  for (const auto& [prompt, reply] : pairs) {
    if (static_cast<int64_t>(out.size()) >= d.num_prompts) break;
    BenchRequest r;
    r.prompt_text = prompt;
    auto prompt_len = count_tokens(prompt);
    if (!prompt_len.ok()) return prompt_len.status();
    r.prompt_len = *prompt_len;
    if (d.fixed_output_len > 0) {
      r.output_len = d.fixed_output_len;
    } else {
      auto reply_len = count_tokens(reply);
      if (!reply_len.ok()) return reply_len.status();
      r.output_len = *reply_len;
    }
    if (r.prompt_len < 4 || r.output_len < 1 || r.prompt_len + r.output_len > d.max_total_len) {
      continue;
    }
    out.push_back(std::move(r));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        d.path, " has no conversation with a prompt of >= 4 tokens and prompt + reply <= ",
        d.max_total_len, " tokens"));
  }
  return out;
}

std::vector<double> ArrivalTimes(int64_t num, double request_rate, double burstiness,
                                 uint64_t seed) {
  std::vector<double> out(static_cast<size_t>(std::max<int64_t>(num, 0)), 0.0);
  if (!(request_rate > 0.0) || std::isinf(request_rate)) return out;
  // Gamma(shape k, scale θ) has mean kθ: θ = 1 / (rate · k) keeps the mean gap 1 / rate.
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
  double t = 0.0;
  for (double& at : out) {
    at = t;
    t += gap(rng);
  }
  return out;
}

}  // namespace strata::bench_serve
