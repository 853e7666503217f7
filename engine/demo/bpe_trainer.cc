#include "engine/demo/bpe_trainer.h"

#include <algorithm>
#include <queue>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace strata::engine::demo {
namespace {

struct Word {
  std::vector<int32_t> ids;
  int64_t count = 0;
  uint64_t stamp = 0;  // last merge that rewrote this word
};

uint64_t Key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Heap entry; the top is the highest count, then the lowest (left, right) ids.
struct Candidate {
  int64_t count;
  int32_t left;
  int32_t right;
  bool operator<(const Candidate& o) const {
    return std::tie(count, o.left, o.right) < std::tie(o.count, left, right);
  }
};

class Trainer {
 public:
  Trainer(std::vector<Word> words) : words_(std::move(words)) {
    for (int b = 0; b < 256; ++b) AddToken(std::string(1, static_cast<char>(b)));
    for (uint32_t w = 0; w < words_.size(); ++w) AddPairs(w, +1);
    for (const auto& [key, count] : pair_count_) Push(key, count);
  }

  absl::StatusOr<std::vector<std::string>> Run(size_t num_tokens) {
    uint64_t merge = 0;
    while (tokens_.size() < num_tokens) {
      if (heap_.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "BPE training ran out of pairs at ", tokens_.size(), " of ", num_tokens, " tokens"));
      }
      const Candidate top = heap_.top();
      heap_.pop();
      auto it = pair_count_.find(Key(top.left, top.right));
      if (it == pair_count_.end() || it->second != top.count) continue;  // stale entry
      Merge(top.left, top.right, ++merge);
    }
    return tokens_;
  }

 private:
  int32_t AddToken(std::string bytes) {
    auto [it, inserted] = id_of_.emplace(bytes, static_cast<int32_t>(tokens_.size()));
    if (inserted) tokens_.push_back(std::move(bytes));
    return it->second;
  }

  void Push(uint64_t key, int64_t count) {
    if (count > 0) {
      heap_.push({count, static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xFFFFFFFF)});
    }
  }

  // Adds (sign +1) or removes (-1) the pair occurrences of word `w`.
  void AddPairs(uint32_t w, int sign) {
    const Word& word = words_[w];
    for (size_t i = 0; i + 1 < word.ids.size(); ++i) {
      const uint64_t key = Key(word.ids[i], word.ids[i + 1]);
      pair_count_[key] += sign * word.count;
      if (sign > 0) pair_words_[key].push_back(w);
      changed_.push_back(key);
    }
  }

  void Merge(int32_t left, int32_t right, uint64_t merge) {
    const int32_t merged = AddToken(tokens_[left] + tokens_[right]);
    const std::vector<uint32_t> affected = std::move(pair_words_[Key(left, right)]);
    pair_words_.erase(Key(left, right));
    changed_.clear();
    for (uint32_t w : affected) {
      Word& word = words_[w];
      if (word.stamp == merge) continue;
      word.stamp = merge;
      AddPairs(w, -1);
      std::vector<int32_t> ids;
      ids.reserve(word.ids.size());
      for (size_t i = 0; i < word.ids.size(); ++i) {
        if (i + 1 < word.ids.size() && word.ids[i] == left && word.ids[i + 1] == right) {
          ids.push_back(merged);
          ++i;
        } else {
          ids.push_back(word.ids[i]);
        }
      }
      word.ids = std::move(ids);
      AddPairs(w, +1);
    }
    std::sort(changed_.begin(), changed_.end());
    changed_.erase(std::unique(changed_.begin(), changed_.end()), changed_.end());
    for (uint64_t key : changed_) Push(key, pair_count_[key]);
  }

  std::vector<Word> words_;
  std::vector<std::string> tokens_;
  absl::flat_hash_map<std::string, int32_t> id_of_;
  absl::flat_hash_map<uint64_t, int64_t> pair_count_;
  absl::flat_hash_map<uint64_t, std::vector<uint32_t>> pair_words_;  // may hold stale entries
  std::priority_queue<Candidate> heap_;
  std::vector<uint64_t> changed_;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> TrainBpe(const std::vector<std::string_view>& texts,
                                                  const engine::PreTokenizer& pretokenizer,
                                                  size_t num_tokens) {
  if (num_tokens <= 256) return absl::InvalidArgumentError("num_tokens must exceed 256");
  absl::flat_hash_map<std::string, int64_t> counts;
  for (std::string_view text : texts) {
    pretokenizer.Split(text, [&](std::string_view piece) { ++counts[std::string(piece)]; });
  }
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [piece, count] : sorted) {
    if (piece.size() < 2) continue;  // single bytes never take part in a merge
    Word w;
    w.count = count;
    for (char c : piece) w.ids.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(w));
  }
  return Trainer(std::move(words)).Run(num_tokens);
}

}  // namespace strata::engine::demo
