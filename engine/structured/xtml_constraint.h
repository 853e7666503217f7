// Structured output and forced tool calls for Kimi K3's XTML replies (docs/k3-format.md): the
// existing byte-level matchers (json_constraint.h) composed with the fixed XTML markup, whose
// markers are control tokens allowed alone at their place and whose tag names and attributes are
// ordinary text matched exactly (ExactTextGrammar).
//
// The reply starts inside the channel the prompt opened. With thinking on (the prompt opened
// `O think S`) the reasoning is free — except that the end ids and <|end_of_msg|> cannot come, so
// the reply cannot end before the constrained part — until the model writes `C think S`; then:
//
//   [O response S] BODY C response S  TOOLS  C message S E   then only the end ids
//
// (`O response S` only after reasoning: with thinking off the prompt opened the response
// channel). With a response format BODY matches it (the JSON or grammar constraint, whose end id
// is `C`) and TOOLS is empty. With forced tool calls BODY is empty and TOOLS is
//
//   O tools S ( O call tool="NAME" index="i" S ARG* C call S ){1,max_calls} C tools S
//   ARG = O argument key="KEY" type="TYPE" S VALUE C argument S
//
// with NAME an allowed tool, i the call's index from 1, KEY the tool's `parameters` properties in
// schema order (each at most once; every required one; no other key), TYPE and VALUE one of the
// property's forms (XtmlArgumentForm): a string-typed value is its raw text, any other is JSON
// matching the property's schema.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampling.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/token_vocab.h"

namespace strata::structured {

// The control-token ids of K3's markers (from the checkpoint's tokenizer).
struct XtmlMarkers {
  int32_t open = -1;
  int32_t close = -1;
  int32_t sep = -1;
  int32_t end_of_message = -1;
};

// One way to write an argument's value: its `type` attribute (boolean, null, number, string,
// object, array) and the grammar of its body. A "string" body is raw text (the output parser
// keeps it as the string); any other is JSON text the parser reads back as the value.
struct XtmlArgumentForm {
  std::string type;
  std::shared_ptr<const JsonGrammar> body;
};

struct XtmlArgument {
  std::string key;
  bool required = false;
  std::vector<XtmlArgumentForm> forms;  // distinct types
};

struct XtmlTool {
  std::string name;
  std::vector<XtmlArgument> arguments;  // in schema order
};

// The arguments of tool `name` from its compiled `parameters`. Each property's forms:
//   - a string schema: "string", its raw text matching the schema's `pattern` / `format` when it
//     has one (minLength / maxLength then not enforced on top), else any text of minLength to
//     maxLength code points (any text when those bounds would need too large an automaton);
//   - a string enum / const: "string", exactly one of the values;
//   - number / integer, object, array, boolean / null (as enum or const): that type, the value
//     as JSON matching the property's whole schema;
//   - anyOf: the forms of its alternatives (one form per type; a non-string form takes JSON
//     matching the whole anyOf, so its parsed value always fits the schema);
//   - no type (any value): all six types.
// An object schema without properties (free keys, or no `parameters`) gives no arguments.
// InvalidArgument when `parameters` is not an object schema.
absl::StatusOr<XtmlTool> XtmlToolFor(std::string name, const JsonGrammar& parameters);

struct XtmlReplyOptions {
  XtmlMarkers markers;
  bool thinking = false;  // the prompt opened the think channel
  // Response format: the response channel's body, a constraint whose only end id is
  // markers.close. Null with tools.
  std::shared_ptr<const engine::TokenConstraint> response;
  std::vector<XtmlTool> tools;   // forced tool calls: the tools a call may name
  int max_calls = 1;             // calls in the tools channel, at least 1
  std::vector<int32_t> end_ids;  // EOS, stop ids: allowed once <|end_of_msg|> was written
};

class XtmlReplyConstraint : public engine::TokenConstraint {
 public:
  // Exactly one of options.response and options.tools is set.
  XtmlReplyConstraint(XtmlReplyOptions options, std::shared_ptr<const TokenVocab> vocab);
  std::unique_ptr<engine::TokenMatcher> NewMatcher() const override;

  const XtmlReplyOptions& options() const { return options_; }
  const std::shared_ptr<const TokenVocab>& vocab() const { return vocab_; }
  // A matcher of exactly one of `texts` (ordinary text), then `end_id`.
  std::shared_ptr<const engine::TokenConstraint> TextThen(std::vector<std::string> texts,
                                                          int32_t end_id) const;
  // The fixed tag names, each then `<|sep|>`.
  const std::shared_ptr<const engine::TokenConstraint>& Tag(const std::string& name) const;

 private:
  XtmlReplyOptions options_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::vector<std::pair<std::string, std::shared_ptr<const engine::TokenConstraint>>> tags_;
};

// `value` as an XTML attribute value: `&` → `&amp;`, then `"` → `&quot;`.
std::string XtmlAttributeValue(const std::string& value);

}  // namespace strata::structured
