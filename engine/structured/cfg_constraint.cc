// cfg_constraint.h
#include "engine/structured/cfg_constraint.h"

#include <algorithm>
#include <utility>

namespace strata::structured {

CfgConstraint::CfgConstraint(std::shared_ptr<const CfgGrammar> grammar,
                             std::shared_ptr<const TokenVocab> vocab, std::vector<int32_t> end_ids,
                             size_t max_walk_states)
    : grammar_(std::move(grammar)),
      vocab_(std::move(vocab)),
      end_ids_(std::move(end_ids)),
      max_walk_states_(std::max<size_t>(max_walk_states, 1)) {}

std::unique_ptr<engine::TokenMatcher> CfgConstraint::NewMatcher() const {
  return std::make_unique<CfgTokenMatcher>(this);
}

const std::vector<uint64_t>* CfgConstraint::FindTokens(const std::vector<int32_t>& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = masks_.find(key);
  return it == masks_.end() ? nullptr : it->second.get();
}

void CfgConstraint::KeepTokens(const std::vector<int32_t>& key,
                               const std::vector<uint64_t>& bits) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (masks_.size() >= kMaxCachedMasks || key.size() > kMaxKeyInts) return;
  masks_.try_emplace(key, std::make_unique<const std::vector<uint64_t>>(bits));
}

CfgTokenMatcher::CfgTokenMatcher(const CfgConstraint* constraint)
    : constraint_(constraint), state_(CfgMatchState::Start(constraint->grammar())) {}

CfgMatchState& CfgTokenMatcher::Depth(size_t depth) {
  if (depth_states_.size() <= depth) depth_states_.resize(depth + 1);
  return depth_states_[depth];
}

int32_t CfgTokenMatcher::Intern(const CfgMatchState& state) {
  auto it = ids_.find(state.key());
  if (it != ids_.end()) return it->second;
  const size_t ints = state.key().size();
  if (interned_.size() >= constraint_->max_walk_states() || ints > CfgConstraint::kMaxKeyInts ||
      interned_ints_ + ints > kMaxInternedInts) {
    return kUnknown;
  }
  interned_ints_ += ints;
  const auto id = static_cast<int32_t>(interned_.size());
  interned_.push_back({state, {}});
  interned_.back().next.fill(kUnknown);
  ids_.emplace(state.key(), id);
  return id;
}

int32_t CfgTokenMatcher::Next(int32_t id, uint8_t byte, CfgMatchState* overflow) {
  const int32_t known = interned_[static_cast<size_t>(id)].next[byte];
  if (known != kUnknown) return known;
  if (!interned_[static_cast<size_t>(id)].state.Advance(constraint_->grammar(), byte, overflow)) {
    interned_[static_cast<size_t>(id)].next[byte] = kDead;
    return kDead;
  }
  const int32_t next = Intern(*overflow);
  if (next != kUnknown) interned_[static_cast<size_t>(id)].next[byte] = next;
  return next;
}

void CfgTokenMatcher::Walk(int32_t n, int32_t id, std::vector<uint64_t>* bits) {
  const TokenTrie& trie = constraint_->vocab().all();
  const TokenTrie::Node node = trie.nodes[static_cast<size_t>(n)];
  for (int32_t k = 0; k < node.num_children; ++k) {
    const auto e = static_cast<size_t>(node.first_child + k);
    const int32_t child = trie.children[e];
    const int32_t next = Next(id, trie.child_bytes[e], &Depth(0));
    if (next == kDead) continue;
    const int32_t token = trie.nodes[static_cast<size_t>(child)].token;
    if (token >= 0) (*bits)[static_cast<size_t>(token / 64)] |= uint64_t{1} << (token % 64);
    if (next == kUnknown) {
      WalkUninterned(child, 0, bits);  // from Depth(0)
    } else {
      Walk(child, next, bits);
    }
  }
}

void CfgTokenMatcher::WalkUninterned(int32_t n, size_t depth, std::vector<uint64_t>* bits) {
  const TokenTrie& trie = constraint_->vocab().all();
  const TokenTrie::Node node = trie.nodes[static_cast<size_t>(n)];
  for (int32_t k = 0; k < node.num_children; ++k) {
    const auto e = static_cast<size_t>(node.first_child + k);
    const int32_t child = trie.children[e];
    // Depth() may reallocate: take the child's slot before the parent's reference.
    CfgMatchState& next = Depth(depth + 1);
    if (!depth_states_[depth].Advance(constraint_->grammar(), trie.child_bytes[e], &next)) {
      continue;
    }
    const int32_t token = trie.nodes[static_cast<size_t>(child)].token;
    if (token >= 0) (*bits)[static_cast<size_t>(token / 64)] |= uint64_t{1} << (token % 64);
    WalkUninterned(child, depth + 1, bits);
  }
}

void CfgTokenMatcher::AllowedTokens(int64_t vocab, std::vector<uint64_t>* bits) {
  const size_t words = static_cast<size_t>((vocab + 63) / 64);
  bits->assign(words, 0);
  if (!finished_) {
    const std::vector<uint64_t>* tokens = constraint_->FindTokens(state_.key());
    if (tokens == nullptr) {
      walk_bits_.assign(static_cast<size_t>((constraint_->vocab().size() + 63) / 64), 0);
      // Full: start over rather than walk uninterned.
      if (interned_.size() >= constraint_->max_walk_states() ||
          interned_ints_ > kMaxInternedInts / 2) {
        interned_.clear();
        ids_.clear();
        interned_ints_ = 0;
      }
      if (const int32_t root = Intern(state_); root >= 0) {
        Walk(0, root, &walk_bits_);
      } else {  // a state too large for the table
        Depth(0) = state_;
        WalkUninterned(0, 0, &walk_bits_);
      }
      constraint_->KeepTokens(state_.key(), walk_bits_);
      tokens = &walk_bits_;
    }
    std::copy_n(tokens->begin(), std::min(tokens->size(), words), bits->begin());
  }
  AllowEndIds(constraint_->end_ids(), finished_ || state_.CanFinish(), vocab, bits);
}

void CfgTokenMatcher::Advance(int32_t token) {
  if (finished_) return;
  const TokenVocab& v = constraint_->vocab();
  if (IsEndId(constraint_->end_ids(), token) || token < 0 || token >= v.size() ||
      v.bytes(token).empty() ||
      !state_.AdvanceBytes(constraint_->grammar(), v.bytes(token), &scratch_, &Depth(0))) {
    finished_ = true;
    return;
  }
  std::swap(state_, scratch_);
}

}  // namespace strata::structured
