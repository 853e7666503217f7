// Test helpers shared by the matcher and schema tests: feed a text byte by byte.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include <gtest/gtest.h>

#include "engine/structured/json_matcher.h"

namespace strata::structured::testing {

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

}  // namespace strata::structured::testing
