// A checkpoint's generation_config.json (Hugging Face) as vLLM applies it (`--generation-config
// auto`, its default): the fields a request leaves out take the file's temperature, top_p,
// top_k, min_p and repetition_penalty, and max_new_tokens caps the default max_tokens; its
// eos_token_id (an id or a list) ends every reply, besides the tokenizer's EOS, unless the
// request sets ignore_eos.
//
// As vLLM (which reads GenerationConfig.to_diff_dict()), a field equal to transformers' own
// default (temperature 1.0, top_p 1.0, top_k 50, repetition_penalty 1.0) is not a default: a
// file that merely spells out top_k 50 does not make every request top-k.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/frontend/openai_request.h"

namespace strata::frontend {

struct GenerationConfig {
  GenerationDefaults defaults;
  std::vector<int32_t> eos_token_ids;  // as listed (the tokenizer's EOS may be among them)
  std::string source;                  // the file read; empty: none
};

// `dir`/generation_config.json; a missing file is an empty config. JSON that does not parse, or
// a field of the wrong type or out of the range a request may ask for, is InvalidArgument naming
// the file, the field and the range.
absl::StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& dir);

// vLLM's --override-generation-config: a JSON object of sampling fields (temperature, top_p,
// top_k, min_p, repetition_penalty, max_new_tokens) set over `config` — every field it names,
// transformers' defaults included. InvalidArgument naming the flag and the field (unknown,
// wrong type, out of range).
absl::Status ApplyGenerationOverride(const std::string& json_text, GenerationConfig& config);

// One line for the start-up log: "temperature 0.6, top_p 0.95, eos ids [163586]" ("none").
std::string DescribeGenerationConfig(const GenerationConfig& config);

}  // namespace strata::frontend
