#include "engine/tokenizer/tokenizer_config.h"

#include <charconv>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace strata::engine {
namespace {

using Json = nlohmann::json;

// A token field is either "text" or {"content": "text", ...}; null means unset.
absl::StatusOr<std::optional<std::string>> TokenField(const Json& root, const char* key) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return std::optional<std::string>((*it)["content"].get<std::string>());
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer_config.json: '", key, "' must be a string or {\"content\": ...}"));
}

absl::Status ParseAddedTokens(const Json& root, TokenizerConfig* config) {
  auto it = root.find("added_tokens_decoder");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) {
    return absl::InvalidArgumentError(
        "tokenizer_config.json: 'added_tokens_decoder' must be an object");
  }
  for (const auto& [key, value] : it->items()) {
    int32_t id = -1;
    auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || ptr != key.data() + key.size() || id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer_config.json: added_tokens_decoder key '", key, "' is not an id"));
    }
    if (!value.is_object() || !value.contains("content") || !value["content"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: added_tokens_decoder[",
                                                     key, "] needs a string 'content'"));
    }
    AddedToken token;
    token.content = value["content"].get<std::string>();
    if (value.contains("special") && value["special"].is_boolean()) {
      token.special = value["special"].get<bool>();
    }
    config->added_tokens[id] = std::move(token);
  }
  return absl::OkStatus();
}

absl::Status ParseChatTemplates(const Json& root, TokenizerConfig* config) {
  auto it = root.find("chat_template");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  if (it->is_string()) {
    config->chat_templates["default"] = it->get<std::string>();
    return absl::OkStatus();
  }
  if (it->is_array()) {
    for (const Json& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
          !entry.contains("template") || !entry["template"].is_string()) {
        return absl::InvalidArgumentError(
            "tokenizer_config.json: chat_template list entries need string 'name' and 'template'");
      }
      config->chat_templates[entry["name"].get<std::string>()] =
          entry["template"].get<std::string>();
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      "tokenizer_config.json: 'chat_template' must be a string or a list");
}

bool MentionsKimi(const Json& root) {
  auto it = root.find("auto_map");
  if (it == root.end() || !it->is_object()) return false;
  return absl::StrContains(it->dump(-1, ' ', false, Json::error_handler_t::replace),
                           "tokenization_kimi");
}

}  // namespace

absl::StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view json_text) {
  Json root = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("tokenizer_config.json is not a JSON object");
  }
  TokenizerConfig config;
  if (absl::Status s = ParseAddedTokens(root, &config); !s.ok()) return s;
  if (absl::Status s = ParseChatTemplates(root, &config); !s.ok()) return s;
  struct Field {
    const char* key;
    std::optional<std::string>* out;
  };
  for (Field f : {Field{"bos_token", &config.bos_token}, Field{"eos_token", &config.eos_token},
                  Field{"pad_token", &config.pad_token}, Field{"unk_token", &config.unk_token}}) {
    absl::StatusOr<std::optional<std::string>> value = TokenField(root, f.key);
    if (!value.ok()) return value.status();
    *f.out = std::move(*value);
  }
  for (auto [key, out] : {std::pair{"add_bos_token", &config.add_bos_token},
                          std::pair{"add_eos_token", &config.add_eos_token}}) {
    if (root.contains(key) && root[key].is_boolean()) *out = root[key].get<bool>();
  }
  if (root.contains("pat_str")) {
    if (!root["pat_str"].is_string()) {
      return absl::InvalidArgumentError("tokenizer_config.json: 'pat_str' must be a string");
    }
    config.pat_str = root["pat_str"].get<std::string>();
  }
  if (root.contains("tokenizer_class") && root["tokenizer_class"].is_string()) {
    config.tokenizer_class = root["tokenizer_class"].get<std::string>();
  }
  config.kimi_tokenizer = config.tokenizer_class == "TikTokenTokenizer" || MentionsKimi(root);
  return config;
}

}  // namespace strata::engine
