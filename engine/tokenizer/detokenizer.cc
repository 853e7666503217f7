#include "engine/tokenizer/detokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8.h"

namespace strata::engine {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               DetokenizerOptions options)
    : tokenizer_(&tokenizer), options_(std::move(options)) {
  auto& stop = options_.stop;
  stop.erase(std::remove(stop.begin(), stop.end(), std::string()), stop.end());
  for (const std::string& s : stop) max_stop_len_ = std::max(max_stop_len_, s.size());
}

absl::StatusOr<std::string> IncrementalDetokenizer::Add(int32_t id) {
  std::optional<std::string_view> bytes = tokenizer_->TokenBytes(id);
  if (!bytes.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is out of range"));
  }
  if (stopped()) return std::string();
  ++num_ids_;
  if (!(options_.skip_special_tokens && tokenizer_->IsSpecial(id))) {
    pending_.append(bytes->data(), bytes->size());
    DecodePending(/*flush=*/false);
  }
  return Release(/*end_of_stream=*/false);
}

std::string IncrementalDetokenizer::Finish() {
  if (stopped()) return std::string();
  DecodePending(/*flush=*/true);
  return Release(/*end_of_stream=*/true);
}

void IncrementalDetokenizer::DecodePending(bool flush) {
  size_t i = 0;
  while (i < pending_.size()) {
    const Utf8Step step = DecodeUtf8Step(std::string_view(pending_).substr(i));
    if (step.status == Utf8Status::kIncomplete && !flush) break;
    if (step.status == Utf8Status::kChar) {
      held_.append(pending_, i, step.length);
    } else {
      AppendUtf8(kReplacementChar, &held_);
    }
    i += step.length;
  }
  pending_.erase(0, i);
}

std::string IncrementalDetokenizer::Release(bool end_of_stream) {
  // Earliest occurrence of any stop string (ties: the one listed first).
  size_t best_pos = std::string::npos;
  const bool search = num_ids_ >= options_.min_tokens;
  for (size_t k = 0; search && k < options_.stop.size(); ++k) {
    const size_t pos = held_.find(options_.stop[k]);
    if (pos < best_pos) {
      best_pos = pos;
      stop_index_ = k;
    }
  }
  std::string delta;
  if (best_pos != std::string::npos) {
    const size_t keep =
        best_pos + (options_.include_stop_str_in_output ? options_.stop[*stop_index_].size() : 0);
    delta = held_.substr(0, keep);
    held_.clear();
    pending_.clear();
  } else {
    // Hold back the longest suffix that is a proper prefix of some stop string.
    size_t hold = 0;
    if (!end_of_stream) {
      const size_t max_len = std::min(held_.size(), max_stop_len_ == 0 ? 0 : max_stop_len_ - 1);
      for (size_t len = max_len; len > 0 && hold == 0; --len) {
        std::string_view suffix = std::string_view(held_).substr(held_.size() - len);
        for (const std::string& s : options_.stop) {
          if (s.size() > len && s.compare(0, len, suffix) == 0) {
            hold = len;
            break;
          }
        }
      }
    }
    delta = held_.substr(0, held_.size() - hold);
    held_.erase(0, held_.size() - hold);
  }
  output_ += delta;
  return delta;
}

}  // namespace strata::engine
