// ConstraintVocab (served_model.h).
#include "server/frontend/served_model.h"

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace strata::frontend {

std::shared_ptr<const structured::TokenVocab> ConstraintVocab(const engine::Tokenizer& tokenizer) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    if (std::optional<std::string_view> b = tokenizer.TokenBytes(id)) {
      bytes[static_cast<size_t>(id)] = std::string(*b);
    }
  }
  return std::make_shared<structured::TokenVocab>(std::move(bytes));
}

std::optional<structured::ToolCallTokens> ToolCallMarkers(const engine::Tokenizer& tokenizer) {
  structured::ToolCallTokens t;
  const std::pair<const char*, int32_t*> markers[] = {
      {"<|tool_calls_section_begin|>", &t.section_begin},
      {"<|tool_calls_section_end|>", &t.section_end},
      {"<|tool_call_begin|>", &t.call_begin},
      {"<|tool_call_argument_begin|>", &t.argument_begin},
      {"<|tool_call_end|>", &t.call_end}};
  for (const auto& [text, id] : markers) {
    std::optional<int32_t> found = tokenizer.SpecialTokenId(text);
    if (!found) return std::nullopt;
    *id = *found;
  }
  return t;
}

}  // namespace strata::frontend
