// libFuzzer target: GBNF grammars (guided_grammar, grammar, ebnf) and their matcher (built by
// tests/fuzz/run_fuzz.sh). Input: a grammar, a NUL byte, then bytes fed through the matcher.
// Errors carry a message; a compiled grammar has a root and no alternative that runs off its
// elements; the matcher's states stay within their bounds; every text it accepts is
// well-formed UTF-8; nothing crashes, hangs (left recursion is refused, expansion is bounded)
// or overflows the stack.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "engine/structured/cfg_matcher.h"
#include "engine/structured/gbnf.h"
#include "engine/structured/json_matcher.h"
#include "tests/fuzz/fuzz_input.h"

namespace ss = strata::structured;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [grammar, text] = SplitAtNul(data, size);
  absl::StatusOr<ss::CfgGrammar> g = ss::CompileGbnf(grammar);
  if (!g.ok()) {
    CHECK(!g.status().message().empty());
    return 0;
  }
  CHECK_LE(g->elements.size(), ss::kMaxGrammarElements + 4 * g->alternatives.size());
  CHECK(g->root >= 0 && static_cast<size_t>(g->root) < g->alternatives.size());
  for (const auto& alternatives : g->alternatives) {
    for (int32_t start : alternatives) {
      size_t i = static_cast<size_t>(start);
      while (g->elements[i].kind != ss::CfgElement::kEnd) ++i;  // every alternative ends
    }
  }
  ss::CfgMatchState state = ss::CfgMatchState::Start(*g);
  ss::CfgMatchState next;
  uint8_t utf8 = 0;
  if (state.CanFinish()) CHECK_EQ(utf8, 0);
  for (char c : text) {
    if (!state.Advance(*g, static_cast<uint8_t>(c), &next)) break;
    utf8 = ss::Utf8Next(utf8, static_cast<uint8_t>(c));
    CHECK(utf8 != ss::kUtf8Bad);  // the grammar only steps through whole code points
    std::swap(state, next);
    if (state.CanFinish()) CHECK_EQ(utf8, 0);
  }
  return 0;
}
