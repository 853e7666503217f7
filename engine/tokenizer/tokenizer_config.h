// tokenizer_config.json (Hugging Face format) as far as Strata reads it.
//
// Read keys: added_tokens_decoder (id -> {content, special}), bos_token / eos_token /
// pad_token / unk_token (string or {"content": ...}), add_bos_token, add_eos_token,
// chat_template (string, or a list of {name, template}), tokenizer_class, auto_map.
// Extension: "pat_str" — the pre-tokenizer regex (tiktoken's name for it). When absent the
// pattern comes from the table of known vocabularies (by sha256), else Kimi's pattern.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace strata::engine {

struct AddedToken {
  std::string content;
  bool special = true;  // skipped by decode(skip_special_tokens=true)
};

struct TokenizerConfig {
  std::map<int32_t, AddedToken> added_tokens;  // by id
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  bool add_bos_token = false;
  bool add_eos_token = false;
  std::optional<std::string> pat_str;
  // Chat templates by name; a plain string template is stored as "default".
  std::map<std::string, std::string> chat_templates;
  std::string tokenizer_class;
  // True for Moonshot's tokenization_kimi.py (tokenizer_class TikTokenTokenizer or an auto_map
  // naming tokenization_kimi): reserved special ids are filled in, long runs are split before
  // encoding, and tool declarations are key-sorted before the template sees them.
  bool kimi_tokenizer = false;
  // Not from tokenizer_config.json: `model_type` of the config.json beside it (or of its
  // `text_config`), empty when absent. "kimi_k3" selects K3's XTML prompt format.
  std::string model_type;
};

// Parses the JSON text of tokenizer_config.json.
absl::StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view json_text);

}  // namespace strata::engine
