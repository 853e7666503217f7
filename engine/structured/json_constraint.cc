// json_constraint.h: masks from a matcher state and the vocabulary tries.
#include "engine/structured/json_constraint.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace strata::structured {
namespace {

void SetBit(std::vector<uint64_t>* bits, int64_t id) {
  (*bits)[static_cast<size_t>(id / 64)] |= uint64_t{1} << (id % 64);
}

// Sets the bits of the plain tokens under trie node n whose bytes the pattern takes from
// `state` (the plain ones only: other bytes prune the walk).
void WalkPattern(const TokenTrie& trie, int32_t n, int32_t state, const ByteDfa& dfa,
                 const std::vector<uint64_t>& plain, std::vector<uint64_t>* bits) {
  const TokenTrie::Node node = trie.nodes[static_cast<size_t>(n)];
  for (int32_t k = 0; k < node.num_children; ++k) {
    const auto e = static_cast<size_t>(node.first_child + k);
    const uint8_t byte = trie.child_bytes[e];
    if (!IsPlainStringByte(byte)) continue;
    const int32_t next = dfa.Next(state, byte);
    if (next == ByteDfa::kDead) continue;
    const int32_t child = trie.children[e];
    const int32_t token = trie.nodes[static_cast<size_t>(child)].token;
    if (token >= 0 && (plain[static_cast<size_t>(token / 64)] >> (token % 64) & 1) != 0) {
      SetBit(bits, token);
    }
    WalkPattern(trie, child, next, dfa, plain, bits);
  }
}

}  // namespace

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> grammar,
                               std::shared_ptr<const TokenVocab> vocab,
                               std::vector<int32_t> end_ids)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), end_ids_(std::move(end_ids)) {
  CHECK(grammar_ != nullptr && vocab_ != nullptr);
}

std::unique_ptr<engine::TokenMatcher> JsonConstraint::NewMatcher() const {
  return std::make_unique<JsonTokenMatcher>(this);
}

const std::vector<uint64_t>& JsonConstraint::PatternPlainTokens(
    int32_t pattern, int32_t pattern_state, std::vector<uint64_t>* scratch) const {
  const auto key = std::make_pair(pattern, pattern_state);
  {
    std::lock_guard<std::mutex> lock(pattern_mu_);
    if (auto it = pattern_masks_.find(key); it != pattern_masks_.end()) return *it->second;
  }
  // Computed outside the lock (two threads may both compute a state's set; one keeps it).
  auto bits = std::make_unique<std::vector<uint64_t>>(vocab_->plain_mask().size(), 0);
  WalkPattern(vocab_->all(), 0, pattern_state, grammar_->patterns[static_cast<size_t>(pattern)],
              vocab_->plain_mask(), bits.get());
  std::lock_guard<std::mutex> lock(pattern_mu_);
  if (pattern_masks_.size() >= kMaxCachedPatternMasks && pattern_masks_.count(key) == 0) {
    *scratch = std::move(*bits);
    return *scratch;
  }
  auto [it, added] = pattern_masks_.try_emplace(key, std::move(bits));
  return *it->second;
}

JsonTokenMatcher::JsonTokenMatcher(const JsonConstraint* constraint)
    : constraint_(constraint), state_(JsonMatchState::Start(constraint->grammar())) {}

JsonMatchState& JsonTokenMatcher::Depth(size_t depth) {
  if (depth_states_.size() <= depth) depth_states_.resize(depth + 1);
  return depth_states_[depth];
}

void JsonTokenMatcher::Walk(const TokenTrie& trie, int32_t n, size_t depth,
                            std::vector<uint64_t>* bits) {
  const JsonGrammar& grammar = constraint_->grammar();
  const TokenTrie::Node node = trie.nodes[static_cast<size_t>(n)];
  for (int32_t k = 0; k < node.num_children; ++k) {
    const auto e = static_cast<size_t>(node.first_child + k);
    const int32_t child = trie.children[e];
    // The parent's state is Depth(depth) (the root's is state_); Depth() may reallocate, so
    // take the child's slot first.
    JsonMatchState& next = Depth(depth + 1);
    const JsonMatchState& from = depth == 0 ? state_ : depth_states_[depth];
    if (!from.Advance(grammar, trie.child_bytes[e], &next)) continue;
    const int32_t token = trie.nodes[static_cast<size_t>(child)].token;
    if (token >= 0) SetBit(bits, token);
    Walk(trie, child, depth + 1, bits);
  }
}

void JsonTokenMatcher::AllowedTokens(int64_t vocab, std::vector<uint64_t>* bits) {
  const size_t words = static_cast<size_t>((vocab + 63) / 64);
  bits->assign(words, 0);
  const TokenVocab& v = constraint_->vocab();
  if (!finished_) {
    const JsonGrammar& grammar = constraint_->grammar();
    const int64_t room = state_.PlainStringRoom(grammar);
    if (room >= 0) {
      const std::vector<uint64_t>& plain = v.plain_mask();
      const size_t n = std::min(plain.size(), words);
      if (room >= 255) {
        std::copy_n(plain.begin(), n, bits->begin());
      } else {
        for (size_t w = 0; w < n; ++w) {
          for (uint64_t word = plain[w]; word != 0; word &= word - 1) {
            const auto id =
                static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(word)));
            if (v.plain_code_points(id) <= room) (*bits)[w] |= uint64_t{1} << (id % 64);
          }
        }
      }
      Walk(v.non_plain(), 0, 0, bits);
    } else if (int32_t pattern = -1, pattern_state = -1;
               state_.PatternSpot(grammar, &pattern, &pattern_state)) {
      const std::vector<uint64_t>& plain =
          constraint_->PatternPlainTokens(pattern, pattern_state, &pattern_scratch_);
      std::copy_n(plain.begin(), std::min(plain.size(), words), bits->begin());
      Walk(v.non_plain(), 0, 0, bits);
    } else {
      Walk(v.all(), 0, 0, bits);
    }
    // Ids the model has beyond the tokenizer's (padding rows) never come.
    for (int64_t id = v.size(); id < static_cast<int64_t>(words) * 64; ++id) {
      (*bits)[static_cast<size_t>(id / 64)] &= ~(uint64_t{1} << (id % 64));
    }
  }
  AllowEndIds(constraint_->end_ids(), finished_ || state_.CanFinish(), vocab, bits);
}

void JsonTokenMatcher::Advance(int32_t token) {
  if (finished_) return;
  if (IsEndId(constraint_->end_ids(), token)) {
    finished_ = true;
    return;
  }
  const TokenVocab& v = constraint_->vocab();
  if (token < 0 || token >= v.size() || v.bytes(token).empty()) {
    finished_ = true;
    return;
  }
  if (!state_.AdvanceBytes(constraint_->grammar(), v.bytes(token), &scratch_, &Depth(0))) {
    finished_ = true;
    return;
  }
  std::swap(state_, scratch_);
}

}  // namespace strata::structured
