// Bounded parsing of JSON text that comes from outside the process: request bodies, batch
// lines, JSON carried inside request fields (a json_schema string, tool-call arguments).
//
// Three limits are checked while the text is parsed, so a value that breaks one is never
// built: nesting depth, values in all and members of one object. With the depth
// bounded, every recursive walker of the parsed value (nlohmann's dump, copy and compare, the
// schema compiler, template values) recurses at most kMaxJsonDepth levels; nothing here
// recurses at all. Parsing takes time linear in the text: nlohmann::ordered_json's own parser
// inserts each key by a linear scan of the object (100,000 keys: ~12 s), this builder appends
// members and finds duplicate keys when the object ends, by sorting their hashes (~40 ms).
//
// Duplicate keys keep nlohmann's meaning: the last value wins, at the first key's position.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

// Arrays and objects inside one another: `[[1]]` is 2 deep, a scalar 0. Far above what any
// API shape needs (a JSON Schema of 60 levels is ~120 here) and far below what a recursive
// walker's stack holds (nlohmann's dump uses ~200 bytes a level).
inline constexpr int kMaxJsonDepth = 256;
// Values in all (arrays, objects and scalars; a key is not a value): 1,114,112, room for a
// prompt of 1M token ids and the fields around it. With the 16 MiB body limit a parse then
// takes about what nlohmann's lexer needs to read the text (16 MiB: ~0.4 s on a busy 2-core
// machine) and the parsed value stays well under 100 MiB.
inline constexpr int64_t kMaxJsonValues = (int64_t{1} << 20) + (int64_t{1} << 16);
// Members of one object: 262,144 (a logit_bias over any vocabulary fits). Arrays are bounded by
// kMaxJsonValues only. Request readers look their fields up by a scan of the object, which
// this keeps cheap.
inline constexpr int64_t kMaxJsonObjectMembers = int64_t{1} << 18;

struct JsonLimits {
  int max_depth = kMaxJsonDepth;
  int64_t max_values = kMaxJsonValues;
  int64_t max_object_members = kMaxJsonObjectMembers;
};

// Parses `text` as one JSON value (RFC 8259: no comments, nothing after the value but
// whitespace). Errors are InvalidArgument:
//   syntax:  "parse error at line 1, column 7: syntax error while parsing value - ..."
//   a limit: "JSON nesting deeper than 256 levels at byte 4096 (at 'messages[0].content[0]')
//            (the limit)"
//            (IsJsonLimitError; JsonLimitPath gives the path).
absl::StatusOr<nlohmann::ordered_json> ParseBoundedJson(std::string_view text,
                                                        const JsonLimits& limits = {});
// The same into nlohmann::json (keys sorted), for readers that do not keep key order.
absl::StatusOr<nlohmann::json> ParseBoundedJsonSorted(std::string_view text,
                                                      const JsonLimits& limits = {});

// The error came from a limit (depth, values, object members), not from the syntax.
bool IsJsonLimitError(const absl::Status& status);
// A limit error's path to the value it stopped at ("messages[0].content[0]"; at most
// kMaxJsonPathParts parts, then "…"); "" at the top level and for other errors.
std::string JsonLimitPath(const absl::Status& status);
inline constexpr int kMaxJsonPathParts = 8;

// Appends `key` → `value` to `object` (an object, or null: made one) without operator[]'s linear
// scan for an existing key: the caller guarantees the key is new (the keys of a proto map, of
// another object). Building an n-key object so takes O(n), not O(n²).
void AppendNewMember(nlohmann::ordered_json* object, std::string key, nlohmann::ordered_json value);

}  // namespace strata
