// Forced tool calls (tool_choice "required" or a named function) as a sampling constraint: the
// reply is a Kimi tool-call section and nothing else,
//
//   <|tool_calls_section_begin|>
//     <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{arguments}<|tool_call_end|>
//     … more calls (required, unless parallel calls are off)
//   <|tool_calls_section_end|>  then an end id
//
// with NAME one of the allowed tools, IDX the call's index in this reply (0, 1, …) and the
// arguments JSON fitting that tool's `parameters` schema. The markers are special tokens, each
// allowed alone at its place; the name and the arguments are walked by JSON token matchers
// (json_constraint.h) whose "end ids" are the marker that follows them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampling.h"
#include "engine/structured/json_constraint.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/token_vocab.h"

namespace strata::structured {

// The special-token ids of Kimi's tool-call markers.
struct ToolCallTokens {
  int32_t section_begin = -1;
  int32_t section_end = -1;
  int32_t call_begin = -1;
  int32_t argument_begin = -1;
  int32_t call_end = -1;
};

struct ToolSpec {
  std::string name;
  std::shared_ptr<const JsonGrammar> arguments;  // the tool's parameters schema
};

struct ToolCallOptions {
  std::vector<ToolSpec> tools;  // the tools a call may name (one for a named tool_choice)
  int max_calls = 1;            // calls in the section, at least 1
  ToolCallTokens markers;
  std::vector<int32_t> end_ids;  // allowed once the section is closed
};

class ToolCallConstraint : public engine::TokenConstraint {
 public:
  ToolCallConstraint(ToolCallOptions options, std::shared_ptr<const TokenVocab> vocab);
  std::unique_ptr<engine::TokenMatcher> NewMatcher() const override;

  const ToolCallOptions& options() const { return options_; }
  const std::shared_ptr<const TokenVocab>& vocab() const { return vocab_; }
  // The grammar of the call id text "functions.NAME:IDX" for call `index`, any allowed NAME.
  std::shared_ptr<const JsonGrammar> NameGrammar(int index) const;

 private:
  ToolCallOptions options_;
  std::shared_ptr<const TokenVocab> vocab_;
};

}  // namespace strata::structured
