// libFuzzer target: regular expressions (JSON Schema `pattern`, guided_regex) and their
// automata (built by tests/fuzz/run_fuzz.sh). Input: a pattern, a NUL byte, then bytes walked
// through the compiled automaton. Errors carry a message; every text the automaton accepts is
// well-formed UTF-8; every state a byte reaches can still accept within the code points it
// says; nothing crashes, hangs (the construction is bounded) or overflows the stack.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "engine/structured/json_matcher.h"
#include "engine/structured/regex.h"
#include "tests/fuzz/fuzz_input.h"

namespace ss = strata::structured;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [pattern, text] = SplitAtNul(data, size);
  for (ss::RegexAnchoring anchoring :
       {ss::RegexAnchoring::kSearch, ss::RegexAnchoring::kFullMatch}) {
    absl::StatusOr<ss::ByteDfa> dfa = ss::CompileRegex(pattern, anchoring);
    if (!dfa.ok()) {
      CHECK(!dfa.status().message().empty());
      continue;
    }
    CHECK_LE(dfa->num_states(), ss::kMaxRegexDfaStates);
    int32_t state = dfa->start;
    uint8_t utf8 = 0;
    for (char c : text) {
      const int32_t next = dfa->Next(state, static_cast<uint8_t>(c));
      if (next == ss::ByteDfa::kDead) break;
      utf8 = ss::Utf8Next(utf8, static_cast<uint8_t>(c));
      CHECK(utf8 != ss::kUtf8Bad);  // the automaton only steps through whole code points
      state = next;
      CHECK(dfa->min_code_points[static_cast<size_t>(state)] < INT32_MAX);
      if (dfa->Accepting(state)) {
        CHECK_EQ(utf8, 0);
        CHECK_EQ(dfa->min_code_points[static_cast<size_t>(state)], 0);
      }
    }
  }
  return 0;
}
