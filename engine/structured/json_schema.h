// A JSON Schema compiled into the grammar the structured-output matcher walks
// (json_matcher.h): a graph of plain nodes, one per schema (sub)object, with $ref cycles kept
// as node indices so recursive schemas work.
//
// Supported (the subset OpenAI's strict structured outputs and xgrammar's defaults cover):
//   type (one name or a list), enum, const, properties + required, additionalProperties
//   (false, or a schema/true on an object without properties), items, prefixItems (tuples),
//   minItems, maxItems,
//   minLength, maxLength, pattern (regex.h), format (date, time, date-time, uuid, email, ipv4
//   and hostname are enforced; other formats are annotations), minimum, maximum, exclusiveMinimum,
//   exclusiveMaximum, multipleOf (numbers then have at most kMaxBoundedFractionDigits fraction
//   digits and no exponent), anyOf / oneOf (as anyOf), allOf with one member, $ref to "#",
//   "#/$defs/…" or "#/definitions/…", boolean schemas (true = any value).
// Ignored (annotations): title, description, default, examples, $schema, $id,
//   $comment, deprecated, readOnly, writeOnly, discriminator (OpenAPI / Pydantic tagged unions:
//   their oneOf alternatives already fix the tag), and $defs / definitions themselves.
// Anything else (propertyNames, uniqueItems, …) is an InvalidArgument naming the keyword and its
// path: a constraint the output would silently break is refused rather than ignored.
//
// Output shape the grammar fixes (as xgrammar's strict mode does): an object's properties come
// in the order the schema lists them, optional ones may be left out, no others appear; enum and
// const values are written in compact JSON (nlohmann's dump()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/structured/regex.h"

namespace strata::structured {

using Json = nlohmann::ordered_json;

enum class NodeKind : uint8_t {
  kAny,       // any JSON value
  kObject,    // properties (ordered) or free keys
  kArray,     // items
  kString,    // min/max length in code points
  kNumber,    // any JSON number
  kInteger,   // a JSON number without fraction or exponent
  kLiterals,  // one of `literals` (compact JSON texts: enum, const, true/false/null)
  kAnyOf,     // one of `alternatives`
  kText,      // raw text (not JSON) matching `pattern`: the root of a regex grammar only
};

// Numbers with bounds are written in fixed point: this many fraction digits at most (integers
// none), kMaxIntegerDigits − this many integer digits, no exponent. The bounds are exact in
// units of 10^−kMaxBoundedFractionDigits.
inline constexpr int kMaxBoundedFractionDigits = 9;

struct SchemaProperty {
  std::string key_text;  // the key as JSON text without the opening quote: `name"`
  int32_t value = 0;     // node index
  bool required = false;
};

struct SchemaNode {
  NodeKind kind = NodeKind::kAny;
  // kObject: with properties, exactly those (in order); without, free keys whose values match
  // `additional` (−1: no keys at all, an empty object).
  std::vector<SchemaProperty> properties;
  int32_t additional = -1;
  // kArray: the nodes of the first items (prefixItems), then `items` for the rest (−1: no
  // more items; max_items then equals the prefix length); item counts.
  std::vector<int32_t> prefix_items;
  int32_t items = -1;
  int64_t min_items = 0;
  int64_t max_items = -1;  // −1: unbounded
  // kString: lengths in code points; `pattern` (or `format`): index in JsonGrammar::patterns,
  // which the decoded string must match (−1: none). kText: the pattern of the text.
  int64_t min_length = 0;
  int64_t max_length = -1;  // −1: unbounded
  int32_t pattern = -1;
  // kNumber, kInteger with bounds or multipleOf: min_scaled ≤ value × 10^scale ≤ max_scaled,
  // and value × 10^scale a multiple of multiple_scaled (0: any), where scale is 0 for integers
  // and kMaxBoundedFractionDigits for numbers.
  bool bounded = false;
  int64_t min_scaled = 0;
  int64_t max_scaled = 0;
  int64_t multiple_scaled = 0;
  std::vector<std::string> literals;  // kLiterals: sorted (bytewise), no duplicates
  std::vector<int32_t> alternatives;  // kAnyOf (never another kAnyOf: flattened)
  std::vector<int32_t> keys_sorted;   // kObject: property indices by key_text, bytewise
};

// Grammars come from the functions below, which keep the SchemaNode invariants the matcher
// relies on (sorted literals, keys_sorted).
struct JsonGrammar {
  std::vector<SchemaNode> nodes;
  std::vector<ByteDfa> patterns;
  int32_t root = 0;
  bool root_whitespace = true;  // whitespace may precede the root value
  // Digits a number's exponent may have (numbers without bounds; those have no exponent). 2
  // keeps every number a finite, non-zero double when its digits are (Kimi K3's tool-call
  // arguments are read back as doubles, xtml_constraint.h).
  int max_exponent_digits = 64;
};

// The grammar of any JSON object (response_format json_object).
JsonGrammar AnyJsonObjectGrammar();

// The text is exactly one of `texts` (raw, not JSON; no whitespace around): vLLM's
// guided_choice, and the call ids of forced tool calls.
JsonGrammar ExactTextGrammar(std::vector<std::string> texts);

// 10^n for n in [0, 18] (a table: the matcher's bounded numbers use it per byte).
inline int64_t Pow10(int n) {
  static constexpr int64_t kPowers[] = {1,
                                        10,
                                        100,
                                        1000,
                                        10000,
                                        100000,
                                        1000000,
                                        10000000,
                                        100000000,
                                        1000000000,
                                        10000000000,
                                        100000000000,
                                        1000000000000,
                                        10000000000000,
                                        100000000000000,
                                        1000000000000000,
                                        10000000000000000,
                                        100000000000000000,
                                        1000000000000000000};
  return kPowers[n];
}

// The least multiple of k (≥ 1) that is ≥ a.
inline int64_t FirstMultipleAtLeast(int64_t a, int64_t k) {
  return a >= 0 ? (a + k - 1) / k * k : -(-a / k * k);
}

// The text matches the regular expression `dfa` (vLLM's guided_regex).
JsonGrammar RegexTextGrammar(ByteDfa dfa);

// Compiles `schema`. Errors (InvalidArgument) name the JSON pointer of the offending part:
// unsupported keyword, bad keyword value, unresolvable $ref, an empty enum, min > max, a
// schema no value can satisfy, more than kMaxSchemaNodes nodes, nesting (schemas and enum /
// const values together) deeper than kMaxSchemaDepth, a pattern the regex compiler refuses,
// patterns beyond kMaxPatternCells in all.
absl::StatusOr<JsonGrammar> CompileJsonSchema(const Json& schema);

inline constexpr int64_t kMaxSchemaNodes = 10000;
// Transitions of all the schema's pattern automata together (4 bytes each: 16 MiB).
inline constexpr size_t kMaxPatternCells = size_t{1} << 22;
inline constexpr int kMaxSchemaDepth = 128;

}  // namespace strata::structured
