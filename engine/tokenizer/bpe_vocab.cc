#include "engine/tokenizer/bpe_vocab.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/base64.h"
#include "engine/tokenizer/internal/absl_view.h"

namespace strata::engine {

absl::StatusOr<std::shared_ptr<const BpeVocab>> BpeVocab::FromTiktoken(std::string_view text) {
  std::vector<std::pair<std::string, uint32_t>> entries;
  entries.reserve(text.size() / 16);
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("tiktoken vocab line ", line_no, ": expected `base64 rank`"));
    }
    std::optional<std::string> bytes = Base64Decode(line.substr(0, space));
    if (!bytes.has_value() || bytes->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tiktoken vocab line ", line_no, ": bad base64 token"));
    }
    std::string_view rank_text = line.substr(space + 1);
    uint32_t rank = 0;
    auto [ptr, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (ec != std::errc() || ptr != rank_text.data() + rank_text.size() || rank == kNoRank) {
      return absl::InvalidArgumentError(absl::StrCat("tiktoken vocab line ", line_no,
                                                     ": bad rank '", internal::Av(rank_text), "'"));
    }
    entries.emplace_back(std::move(*bytes), rank);
  }
  return Build(std::move(entries));
}

absl::StatusOr<std::shared_ptr<const BpeVocab>> BpeVocab::FromTokens(
    const std::vector<std::string>& tokens) {
  std::vector<std::pair<std::string, uint32_t>> entries;
  entries.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].empty()) return absl::InvalidArgumentError("empty BPE token");
    entries.emplace_back(tokens[i], static_cast<uint32_t>(i));
  }
  return Build(std::move(entries));
}

std::shared_ptr<const BpeVocab> BpeVocab::Empty() {
  std::shared_ptr<BpeVocab> vocab(new BpeVocab());
  vocab->offsets_ = {0};
  return vocab;
}

absl::StatusOr<std::shared_ptr<const BpeVocab>> BpeVocab::Build(
    std::vector<std::pair<std::string, uint32_t>> entries) {
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].second == entries[i - 1].second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate BPE rank ", entries[i].second));
    }
  }
  std::shared_ptr<BpeVocab> vocab(new BpeVocab());
  const uint32_t rank_end = entries.empty() ? 0 : entries.back().second + 1;
  size_t total_bytes = 0;
  for (const auto& e : entries) total_bytes += e.first.size();
  vocab->storage_.reserve(total_bytes);
  vocab->offsets_.assign(rank_end + 1, 0);
  size_t next = 0;
  for (uint32_t rank = 0; rank < rank_end; ++rank) {
    vocab->offsets_[rank] = static_cast<uint32_t>(vocab->storage_.size());
    if (next < entries.size() && entries[next].second == rank) {
      vocab->storage_.append(entries[next].first);
      ++next;
    }
  }
  vocab->offsets_[rank_end] = static_cast<uint32_t>(vocab->storage_.size());

  vocab->rank_of_.reserve(entries.size());
  for (const auto& e : entries) {
    std::string_view bytes = vocab->TokenBytes(e.second);
    if (!vocab->rank_of_.emplace(bytes, e.second).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate BPE token at ranks ", vocab->rank_of_[bytes], " and ", e.second));
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    const uint32_t rank = vocab->Rank(std::string_view(&c, 1));
    if (rank == kNoRank) {
      return absl::InvalidArgumentError(
          absl::StrCat("BPE vocabulary lacks the single-byte token 0x", absl::Hex(b)));
    }
    vocab->byte_rank_[b] = rank;
  }
  // Every token that splits into two tokens is the merge result of that pair.
  for (const auto& e : entries) {
    std::string_view bytes = vocab->TokenBytes(e.second);
    for (size_t k = 1; k < bytes.size(); ++k) {
      const uint32_t left = vocab->Rank(bytes.substr(0, k));
      if (left == kNoRank) continue;
      const uint32_t right = vocab->Rank(bytes.substr(k));
      if (right == kNoRank) continue;
      vocab->pair_rank_.emplace((uint64_t{left} << 32) | right, e.second);
    }
  }
  return std::shared_ptr<const BpeVocab>(std::move(vocab));
}

std::string BpeVocab::ToTiktoken() const {
  std::string out;
  for (uint32_t rank = 0; rank < rank_end(); ++rank) {
    if (!HasRank(rank)) continue;
    absl::StrAppend(&out, Base64Encode(TokenBytes(rank)), " ", rank, "\n");
  }
  return out;
}

}  // namespace strata::engine
