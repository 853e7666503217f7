// A GBNF grammar (gbnf.h) as a sampling constraint (engine::TokenConstraint): vLLM's
// guided_grammar / structured_outputs.grammar, SGLang's ebnf, llama.cpp's grammar. The text must
// be a `root` of the grammar and may end (an end id) only where it is one.
//
// The tokens a state takes are found by walking the vocabulary trie from it (pruned at the
// first refused byte) and kept per state for the constraint's lifetime (up to kMaxCachedMasks
// states, shared by the request's choices): grammars loop through few states (`[a-z]*` is one
// state however long the word), so most steps copy a cached mask.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/sampling.h"
#include "engine/structured/cfg_matcher.h"
#include "engine/structured/gbnf.h"
#include "engine/structured/token_mask.h"
#include "engine/structured/token_vocab.h"

namespace strata::structured {

class CfgConstraint : public engine::TokenConstraint {
 public:
  // `end_ids`: the ids that end the sequence (EOS, chat end-of-turn, stop_token_ids).
  CfgConstraint(std::shared_ptr<const CfgGrammar> grammar, std::shared_ptr<const TokenVocab> vocab,
                std::vector<int32_t> end_ids);
  std::unique_ptr<engine::TokenMatcher> NewMatcher() const override;

  const CfgGrammar& grammar() const { return *grammar_; }
  const TokenVocab& vocab() const { return *vocab_; }
  const std::vector<int32_t>& end_ids() const { return end_ids_; }

  // The cached token set of the state with key `key` (CfgMatchState::key), or null.
  const std::vector<uint64_t>* FindTokens(const std::vector<int32_t>& key) const;
  // Keeps `bits` as that state's set (unless kMaxCachedMasks are kept: then leaves it).
  void KeepTokens(const std::vector<int32_t>& key, const std::vector<uint64_t>& bits) const;
  static constexpr size_t kMaxCachedMasks = 256;

 private:
  std::shared_ptr<const CfgGrammar> grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<int32_t> end_ids_;
  mutable std::mutex mu_;
  // Guarded by mu_; entries never change once added (pointers to them stay valid).
  mutable std::map<std::vector<int32_t>, std::unique_ptr<const std::vector<uint64_t>>> masks_;
};

class CfgTokenMatcher : public BitMaskMatcher {
 public:
  explicit CfgTokenMatcher(const CfgConstraint* constraint);

  void AllowedTokens(int64_t vocab, std::vector<uint64_t>* bits) override;
  // The text so far is a whole `root` (or an end id was accepted).
  bool complete() const { return finished_ || state_.CanFinish(); }
  // An end id was accepted, or a token the grammar refuses (then only ending is left).
  bool finished() const { return finished_; }

 private:
  void Advance(int32_t token) override;
  // Sets the bits of the tokens under trie node `n` (reached in Depth(depth)) the state takes.
  void Walk(int32_t n, size_t depth, std::vector<uint64_t>* bits);
  CfgMatchState& Depth(size_t depth);

  const CfgConstraint* constraint_;  // held by the sampler's params, which outlive the matcher
  CfgMatchState state_;
  CfgMatchState scratch_;
  std::vector<CfgMatchState> depth_states_;  // [trie depth] walk states, reused
  std::vector<uint64_t> walk_bits_;
  bool finished_ = false;
};

}  // namespace strata::structured
