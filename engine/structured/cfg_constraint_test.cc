// The grammar constraint's masks against brute force (every token's bytes fed to the state),
// at the states along random constrained generations, over random vocabularies; masks kept per
// state and shared by the choices; and every generation ended by the end id is a whole `root`.
#include "engine/structured/cfg_constraint.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "core/check.h"
#include "engine/structured/matcher_testing.h"

namespace strata::structured {
namespace {

constexpr int32_t kEndId = 256;  // after the 256 byte tokens

std::shared_ptr<const CfgGrammar> Grammar(std::string_view text) {
  absl::StatusOr<CfgGrammar> g = CompileGbnf(text);
  CHECK(g.ok()) << g.status();
  return std::make_shared<CfgGrammar>(*std::move(g));
}

using testing::Bit;

const char* const kGrammars[] = {
    R"(root ::= "{" ws pair ("," ws pair)* "}"
pair ::= "\"" [a-z]{1,8} "\":" ws (num | "true" | "null")
num ::= "-"? [0-9]+
ws ::= " "?)",
    R"g(root ::= (item ws)+
item ::= "(" root? ")" | [a-c]+ | "é"
ws ::= [ \n]{0,2})g",
    R"(root ::= [^x]* "x")",
};

// Walks random generations under each grammar; at every step the mask equals brute force.
TEST(CfgConstraint, MasksMatchBruteForce) {
  const std::vector<std::string> pieces = {"{", "}", "\"", ":",    ",", " ",    "\n",   "-",
                                           "0", "9", "a",  "b",    "c", "z",    "true", "null",
                                           "(", ")", "é",  "\xc3", "x", "ab\":"};
  const int64_t vocab_ids = 257 + 300 + 5;  // a few padding ids past the tokenizer's
  std::mt19937 rng(11);
  // With the default table of walk states, and with one so small that walks overflow it.
  for (const size_t max_walk_states : {CfgConstraint::kDefaultMaxWalkStates, size_t{3}})
    for (const char* text : kGrammars) {
      std::vector<std::string> tokens = testing::RandomVocab(3, 300, pieces);
      tokens[kEndId].clear();  // the end id has no bytes
      auto vocab = std::make_shared<TokenVocab>(tokens);
      CfgConstraint constraint(Grammar(text), vocab, {kEndId}, max_walk_states);
      int ended = 0;
      for (int run = 0; run < 12; ++run) {
        auto matcher = constraint.NewMatcher();
        auto* m = static_cast<CfgTokenMatcher*>(matcher.get());
        CfgMatchState state = CfgMatchState::Start(constraint.grammar());
        std::string generated;
        for (int step = 0; step < 40; ++step) {
          std::vector<uint64_t> bits;
          m->AllowedTokens(vocab_ids, &bits);
          std::vector<int32_t> allowed;
          for (int32_t id = 0; id < vocab_ids; ++id) {
            bool expected = false;
            if (id == kEndId) {
              expected = state.CanFinish();
            } else if (id < vocab->size() && !vocab->bytes(id).empty()) {
              // The lowest id of identical bytes only (TokenVocab's rule).
              bool first = true;
              for (int32_t j = 0; j < id && first; ++j) first = vocab->bytes(j) != vocab->bytes(id);
              CfgMatchState out, scratch;
              expected = first &&
                         state.AdvanceBytes(constraint.grammar(), vocab->bytes(id), &out, &scratch);
            }
            ASSERT_EQ(Bit(bits, id), expected)
                << text << "\nafter '" << generated << "', token " << id << " '"
                << (id < vocab->size() ? vocab->bytes(id) : "") << "'";
            if (expected) allowed.push_back(id);
          }
          ASSERT_FALSE(allowed.empty()) << "dead end after '" << generated << "'";
          // Go on for 20 steps, then end as soon as the text may end.
          const bool can_end = std::find(allowed.begin(), allowed.end(), kEndId) != allowed.end();
          int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
          if (pick == kEndId && allowed.size() > 1 && step < 20) {
            pick = allowed[0] == kEndId ? allowed[1] : allowed[0];
          }
          if (can_end && step >= 20) pick = kEndId;
          m->Accept(pick);
          if (pick == kEndId) {
            EXPECT_TRUE(m->finished());
            ++ended;
            break;
          }
          CfgMatchState next, scratch;
          ASSERT_TRUE(
              state.AdvanceBytes(constraint.grammar(), vocab->bytes(pick), &next, &scratch));
          state = next;
          generated += vocab->bytes(pick);
          EXPECT_EQ(m->complete(), state.CanFinish());
        }
      }
      EXPECT_GT(ended, 0) << text;
    }
}

TEST(CfgConstraint, MasksAreKeptPerStateAndShared) {
  std::vector<std::string> v(257);
  for (int b = 0; b < 256; ++b) v[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  v.push_back("ab");
  v.push_back("a!");
  auto vocab = std::make_shared<TokenVocab>(v);
  CfgConstraint constraint(Grammar(R"(root ::= [a-z]* "!")"), vocab, {kEndId});
  auto first = constraint.NewMatcher();
  auto second = constraint.NewMatcher();
  auto* a = static_cast<CfgTokenMatcher*>(first.get());
  auto* b = static_cast<CfgTokenMatcher*>(second.get());
  const CfgMatchState start = CfgMatchState::Start(constraint.grammar());
  EXPECT_EQ(constraint.FindTokens(start.key()), nullptr);
  std::vector<uint64_t> bits_a, bits_b;
  a->AllowedTokens(259, &bits_a);
  ASSERT_NE(constraint.FindTokens(start.key()), nullptr);
  b->AllowedTokens(259, &bits_b);
  EXPECT_EQ(bits_a, bits_b);
  EXPECT_TRUE(Bit(bits_a, 'q'));
  EXPECT_TRUE(Bit(bits_a, 257));  // "ab"
  EXPECT_TRUE(Bit(bits_a, 258));  // "a!"
  EXPECT_FALSE(Bit(bits_a, 'A'));
  EXPECT_FALSE(Bit(bits_a, kEndId));
  // After "ab" the state is the start state again: the same mask, from the cache.
  a->Accept(257);
  a->AllowedTokens(259, &bits_b);
  EXPECT_EQ(bits_a, bits_b);
  a->Accept('!');
  a->AllowedTokens(259, &bits_b);
  EXPECT_TRUE(a->complete());
  EXPECT_TRUE(Bit(bits_b, kEndId));
  EXPECT_FALSE(Bit(bits_b, 'a'));  // nothing may follow the '!'
  // A refused token (a sampler ignoring the mask) leaves only the end.
  b->Accept('A');
  EXPECT_TRUE(b->finished());
  b->AllowedTokens(259, &bits_b);
  for (int32_t id = 0; id < 259; ++id) EXPECT_EQ(Bit(bits_b, id), id == kEndId) << id;
}

// An ambiguous nesting grammar: after 20 '(' the state holds 256 stacks 21 deep (its key is
// past kMaxKeyInts), so it is neither kept nor in the transition table; masks still match.
TEST(CfgConstraint, StatesTooLargeToKeepStillMaskExactly) {
  std::vector<std::string> v(257);
  for (int b = 0; b < 256; ++b) v[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  for (const char* t : {"((", "))", ")]", "x)", "(x", "]]"}) v.push_back(t);
  auto vocab = std::make_shared<TokenVocab>(v);
  CfgConstraint constraint(Grammar(R"g(root ::= "(" root ")" | "(" root "]" | "x")g"), vocab,
                           {kEndId});
  auto matcher = constraint.NewMatcher();
  auto* m = static_cast<CfgTokenMatcher*>(matcher.get());
  CfgMatchState state = CfgMatchState::Start(constraint.grammar());
  for (int i = 0; i < 20; ++i) {
    m->Accept('(');
    CfgMatchState next, scratch;
    ASSERT_TRUE(state.AdvanceBytes(constraint.grammar(), "(", &next, &scratch));
    state = next;
  }
  ASSERT_GT(state.key().size(), CfgConstraint::kMaxKeyInts);
  for (int round = 0; round < 2; ++round) {  // the second from no cache either
    std::vector<uint64_t> bits;
    m->AllowedTokens(static_cast<int64_t>(v.size()), &bits);
    EXPECT_EQ(constraint.FindTokens(state.key()), nullptr);
    for (int32_t id = 0; id < static_cast<int32_t>(v.size()); ++id) {
      CfgMatchState out, scratch;
      const bool expected = id != kEndId && state.AdvanceBytes(constraint.grammar(),
                                                               vocab->bytes(id), &out, &scratch);
      EXPECT_EQ(Bit(bits, id), expected) << id << " '" << v[static_cast<size_t>(id)] << "'";
    }
  }
}

TEST(CfgConstraint, MaskLogitsLeavesOnlyTheAllowed) {
  std::vector<std::string> v(257);
  for (int b = 0; b < 256; ++b) v[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  auto vocab = std::make_shared<TokenVocab>(v);
  CfgConstraint constraint(Grammar(R"(root ::= "yes" | "no")"), vocab, {kEndId});
  auto m = constraint.NewMatcher();
  std::vector<float> logits(300, 1.0f);
  m->Prepare(300);
  m->MaskLogits(logits.data(), 300);
  for (int id = 0; id < 300; ++id) {
    EXPECT_EQ(std::isfinite(logits[static_cast<size_t>(id)]), id == 'y' || id == 'n') << id;
  }
}

}  // namespace
}  // namespace strata::structured
