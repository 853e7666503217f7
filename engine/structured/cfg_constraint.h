// A GBNF grammar (gbnf.h) as a sampling constraint (engine::TokenConstraint): vLLM's
// guided_grammar / structured_outputs.grammar, SGLang's ebnf, llama.cpp's grammar. The text must
// be a `root` of the grammar and may end (an end id) only where it is one.
//
// The tokens a state takes are found by walking the vocabulary trie from it (pruned at the
// first refused byte) and kept per state for the constraint's lifetime (up to kMaxCachedMasks
// states, shared by the request's choices): grammars loop through few states (`[a-z]*` is one
// state however long the word), so most steps copy a cached mask.
#pragma once

#include <array>
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
  // `max_walk_states`: how many grammar states each sequence's matcher keeps with their byte
  // transitions (about 1 KiB each); walks past it go on without the table.
  CfgConstraint(std::shared_ptr<const CfgGrammar> grammar, std::shared_ptr<const TokenVocab> vocab,
                std::vector<int32_t> end_ids, size_t max_walk_states = kDefaultMaxWalkStates);
  static constexpr size_t kDefaultMaxWalkStates = 2048;
  std::unique_ptr<engine::TokenMatcher> NewMatcher() const override;

  const CfgGrammar& grammar() const { return *grammar_; }
  const TokenVocab& vocab() const { return *vocab_; }
  const std::vector<int32_t>& end_ids() const { return end_ids_; }
  size_t max_walk_states() const { return max_walk_states_; }

  // The cached token set of the state with key `key` (CfgMatchState::key), or null.
  const std::vector<uint64_t>* FindTokens(const std::vector<int32_t>& key) const;
  // Keeps `bits` as that state's set (unless kMaxCachedMasks are kept: then leaves it).
  void KeepTokens(const std::vector<int32_t>& key, const std::vector<uint64_t>& bits) const;
  static constexpr size_t kMaxCachedMasks = 256;
  // States whose key is longer (deep or many parse stacks) are neither kept with their mask
  // nor in a matcher's transition table: memory stays bounded whatever the grammar.
  static constexpr size_t kMaxKeyInts = 4096;

 private:
  std::shared_ptr<const CfgGrammar> grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<int32_t> end_ids_;
  size_t max_walk_states_;
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
  static constexpr int32_t kUnknown = -2;  // a transition not computed yet
  static constexpr int32_t kDead = -1;     // the state refuses the byte
  // States met while walking the trie, numbered, with their transitions filled in as they are
  // taken: inside a loop (`[^"]*`) almost every byte leads back to one state, so a walk over
  // the vocabulary is mostly table lookups (a lazily built DFA over the grammar's states).
  struct Interned {
    CfgMatchState state;
    std::array<int32_t, 256> next;
  };

  void Advance(int32_t token) override;
  // The state `id` goes to on `byte`: an interned id, kDead, or kUnknown when the table is full
  // (the next state is then in *overflow).
  int32_t Next(int32_t id, uint8_t byte, CfgMatchState* overflow);
  int32_t Intern(const CfgMatchState& state);
  // Sets the bits of the tokens under trie node `n`, reached in interned state `id`.
  void Walk(int32_t n, int32_t id, std::vector<uint64_t>* bits);
  // The same from a state outside the table (past max_walk_states), one state per trie depth.
  void WalkUninterned(int32_t n, size_t depth, std::vector<uint64_t>* bits);
  CfgMatchState& Depth(size_t depth);

  const CfgConstraint* constraint_;  // held by the sampler's params, which outlive the matcher
  CfgMatchState state_;
  CfgMatchState scratch_;
  std::vector<Interned> interned_;
  std::map<std::vector<int32_t>, int32_t> ids_;  // state key → index in interned_
  // The keys' ints in interned_ (each key is held twice: there and in ids_), within
  // kMaxInternedInts.
  size_t interned_ints_ = 0;
  static constexpr size_t kMaxInternedInts = size_t{1} << 18;
  std::vector<CfgMatchState> depth_states_;  // [trie depth] uninterned walk states
  std::vector<uint64_t> walk_bits_;
  bool finished_ = false;
};

}  // namespace strata::structured
