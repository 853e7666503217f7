// Test helpers shared by the matcher and schema tests: feed a text byte by byte.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/check.h"
#include "engine/structured/json_matcher.h"
#include "engine/structured/json_schema.h"

namespace strata::structured::testing {

// Bit `id` of a token mask (64 ids a word).
inline bool Bit(const std::vector<uint64_t>& bits, int64_t id) {
  return ((bits[static_cast<size_t>(id / 64)] >> (id % 64)) & 1) != 0;
}

// The compiled JSON schema `text` (a test's literal: CHECKed).
inline std::shared_ptr<const JsonGrammar> CompiledSchema(const char* text) {
  absl::StatusOr<JsonGrammar> g = CompileJsonSchema(Json::parse(text));
  CHECK(g.ok()) << g.status();
  return std::make_shared<JsonGrammar>(*std::move(g));
}

// Feeds `text` from the start state into *state; false as soon as no thread takes a byte.
inline bool Feed(const JsonGrammar& g, std::string_view text, JsonMatchState* state) {
  *state = JsonMatchState::Start(g);
  JsonMatchState next;
  for (char c : text) {
    if (!state->Advance(g, static_cast<uint8_t>(c), &next)) return false;
    std::swap(*state, next);
  }
  return true;
}

// `text` is a complete value of `g`.
inline bool Accepts(const JsonGrammar& g, std::string_view text) {
  JsonMatchState s;
  return Feed(g, text, &s) && s.CanFinish();
}

// Every text of `accepted` is complete under `g`; none of `rejected` is.
inline void ExpectVerdicts(const JsonGrammar& g, std::initializer_list<std::string> accepted,
                           std::initializer_list<std::string> rejected) {
  for (const std::string& text : accepted) EXPECT_TRUE(Accepts(g, text)) << text;
  for (const std::string& text : rejected) EXPECT_FALSE(Accepts(g, text)) << text;
}

// A vocabulary for constraint tests: ids 0–255 the single bytes, 256 the end id (no bytes), then
// `extra` tokens each 1–4 random `pieces` (some repeat: duplicates must be allowed only once).
inline std::vector<std::string> RandomVocab(uint32_t seed, int extra,
                                            const std::vector<std::string>& pieces) {
  std::mt19937 rng(seed);
  std::vector<std::string> vocab(257);
  for (int b = 0; b < 256; ++b)
    vocab[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  std::uniform_int_distribution<size_t> piece(0, pieces.size() - 1);
  for (int i = 0; i < extra; ++i) {
    std::string t;
    const int n = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int k = 0; k < n; ++k) t += pieces[piece(rng)];
    vocab.push_back(t);
  }
  return vocab;
}

}  // namespace strata::structured::testing
