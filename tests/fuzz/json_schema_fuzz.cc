// libFuzzer target: response_format schemas and the output matcher (built by
// tests/fuzz/run_fuzz.sh). Input: a JSON Schema text, a NUL byte, then bytes fed to the matcher
// of the compiled grammar. Whatever the matcher accepts as complete must be JSON (nlohmann
// parses it); compile errors carry a message; nothing crashes, hangs or overflows the stack.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "engine/structured/json_matcher.h"
#include "engine/structured/json_schema.h"
#include "tests/fuzz/fuzz_input.h"

namespace ss = strata::structured;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [schema_text, doc] = SplitAtNul(data, size);
  const ss::Json schema = ss::Json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  absl::StatusOr<ss::JsonGrammar> grammar = ss::CompileJsonSchema(schema);
  if (!grammar.ok()) {
    CHECK(!grammar.status().message().empty());
    return 0;
  }
  ss::JsonMatchState state = ss::JsonMatchState::Start(*grammar), next;
  size_t fed = 0;
  for (; fed < doc.size(); ++fed) {
    if (!state.Advance(*grammar, static_cast<uint8_t>(doc[fed]), &next)) break;
    std::swap(state, next);
    CHECK_LE(state.num_threads(), ss::kMaxThreads);
  }
  if (fed == doc.size() && state.CanFinish()) {
    const std::string_view text = doc;
    bool overflow = false;
    bool ok = false;
    try {
      (void)nlohmann::json::parse(text);
      ok = true;
    } catch (const nlohmann::json::out_of_range&) {
      overflow = true;  // a number beyond a double: JSON's grammar allows it
    } catch (const nlohmann::json::exception&) {
    }
    CHECK(ok || overflow);
  }
  return 0;
}
