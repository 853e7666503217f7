// Structured output as a sampling constraint (engine::TokenConstraint): the generated text must
// be JSON matching a JsonGrammar, and may end (an end-of-sequence id) only where the value is
// complete.
//
// Masking one step walks the vocabulary trie (token_vocab.h) from the sequence's matcher state,
// stepping a byte per trie edge and pruning every subtree whose prefix no thread accepts. Inside
// a string every plain token that fits its maxLength is allowed from a precomputed set and only
// the trie of the others is walked (measured over o200k_base's 200k tokens: ≤ 0.25 ms a mask,
// json_constraint_bench); inside a string with a pattern the plain tokens come from a set
// cached per automaton state. Each sequence's matcher keeps one state per trie depth, so a step
// allocates nothing once they have grown.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/sampling.h"
#include "engine/structured/json_matcher.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/token_mask.h"
#include "engine/structured/token_vocab.h"

namespace strata::structured {

class JsonConstraint : public engine::TokenConstraint {
 public:
  // `end_ids`: the ids that end the sequence (EOS, chat end-of-turn, stop_token_ids).
  JsonConstraint(std::shared_ptr<const JsonGrammar> grammar,
                 std::shared_ptr<const TokenVocab> vocab, std::vector<int32_t> end_ids);
  std::unique_ptr<engine::TokenMatcher> NewMatcher() const override;

  const JsonGrammar& grammar() const { return *grammar_; }
  const TokenVocab& vocab() const { return *vocab_; }
  const std::vector<int32_t>& end_ids() const { return end_ids_; }

  // The plain tokens (TokenVocab::plain_mask) that pattern `pattern` takes from state
  // `pattern_state`, as a bit set. Computed once per (pattern, state) and kept for the
  // constraint's lifetime (up to kMaxCachedPatternMasks; past that computed into *scratch).
  // Thread-safe: the CPU executor prepares masks in parallel.
  const std::vector<uint64_t>& PatternPlainTokens(int32_t pattern, int32_t pattern_state,
                                                  std::vector<uint64_t>* scratch) const;
  static constexpr size_t kMaxCachedPatternMasks = 256;

 private:
  std::shared_ptr<const JsonGrammar> grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<int32_t> end_ids_;
  mutable std::mutex pattern_mu_;
  mutable std::map<std::pair<int32_t, int32_t>, std::unique_ptr<const std::vector<uint64_t>>>
      pattern_masks_;  // guarded by pattern_mu_; entries never change once added
};

class JsonTokenMatcher : public BitMaskMatcher {
 public:
  explicit JsonTokenMatcher(const JsonConstraint* constraint);

  void AllowedTokens(int64_t vocab, std::vector<uint64_t>* bits) override;
  // The text so far is a complete value (or an end id was accepted).
  bool complete() const { return finished_ || state_.CanFinish(); }
  // An end id was accepted, or a token the matcher could not take (the output is then no
  // longer constrained to anything but ending).
  bool finished() const { return finished_; }

 private:
  void Advance(int32_t token) override;
  // Sets the bits of the tokens under trie node `n` (reached in state `depth`) that some thread
  // accepts.
  void Walk(const TokenTrie& trie, int32_t n, size_t depth, std::vector<uint64_t>* bits);
  JsonMatchState& Depth(size_t depth);

  // Held by the sampler's params, which outlive the sampler's matcher.
  const JsonConstraint* constraint_;
  JsonMatchState state_;
  JsonMatchState scratch_;
  std::vector<JsonMatchState> depth_states_;  // [trie depth] walk states, reused
  std::vector<uint64_t> pattern_scratch_;
  bool finished_ = false;
};

}  // namespace strata::structured
