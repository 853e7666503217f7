#include "server/frontend/reply_tokens.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "core/check.h"
#include "server/frontend/json_fields.h"

namespace strata::frontend {
namespace {

// The text of a chat message's content as the chat template shows it: a string, or the
// concatenated `text` of text parts; nullopt for anything else (images, no content).
std::optional<std::string> MessageContentText(const Json& message) {
  const auto content = message.find("content");
  if (content == message.end()) return std::nullopt;
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) return std::nullopt;
  std::string text;
  for (const Json& part : *content) {
    const auto part_text = part.find("text");
    if (!part.is_object() || part_text == part.end() || !part_text->is_string()) {
      return std::nullopt;
    }
    text += part_text->get_ref<const std::string&>();
  }
  return text;
}

}  // namespace

ReplyTokenMemory::ReplyTokenMemory(const engine::Tokenizer& tokenizer, int64_t capacity_tokens)
    : tokenizer_(tokenizer), replies_(capacity_tokens) {
  CHECK_GE(capacity_tokens, 1);
}

bool ReplyTokenMemory::Remember(std::string_view text, std::vector<int32_t> ids) {
  const auto size = static_cast<int64_t>(ids.size());
  if (text.empty() || ids.empty()) return false;
  absl::StatusOr<std::string> decoded = tokenizer_.Decode(ids);
  if (!decoded.ok() || *decoded != text) return false;
  return replies_.Put(std::move(*decoded), std::move(ids), size);
}

int ReplyTokenMemory::Splice(const Json& messages, std::vector<int32_t>* ids) {
  if (!messages.is_array()) return 0;
  // The kept replies first: most prompts have none, and then nothing is encoded again.
  std::vector<std::optional<std::vector<int32_t>>> kept(messages.size());
  size_t last = 0;  // one past the last message with a kept reply
  for (size_t m = 0; m < messages.size(); ++m) {
    const Json& message = messages[m];
    if (StringOr(message, "role", "") != "assistant") continue;
    const std::optional<std::string> text = MessageContentText(message);
    if (!text || text->empty()) continue;
    kept[m] = Find(*text);
    if (kept[m]) last = m + 1;
  }
  // Every message's content, in order, is found after the previous one's: a user message
  // quoting a reply is not taken for it.
  int spliced = 0;
  size_t from = 0;
  for (size_t m = 0; m < last; ++m) {
    const std::optional<std::string> text = MessageContentText(messages[m]);
    if (!text || text->empty()) continue;
    // The content as the whole prompt's encoding split it: the template puts special tokens
    // around a message's content, and encoding stops at them, so this is the same split.
    const std::vector<int32_t> encoded =
        tokenizer_.Encode(*text, {.add_special_tokens = false, .parse_special = true});
    const auto at = std::search(ids->begin() + static_cast<std::ptrdiff_t>(from), ids->end(),
                                std::boyer_moore_horspool_searcher(encoded.begin(), encoded.end()));
    if (at == ids->end()) continue;  // the template changed the text, or split it otherwise
    const size_t pos = static_cast<size_t>(at - ids->begin());
    const std::vector<int32_t>& own = kept[m] ? *kept[m] : encoded;
    if (own != encoded) {
      ids->erase(at, at + static_cast<std::ptrdiff_t>(encoded.size()));
      ids->insert(ids->begin() + static_cast<std::ptrdiff_t>(pos), own.begin(), own.end());
      ++spliced;
    }
    from = pos + own.size();
  }
  num_spliced_total_ += spliced;
  return spliced;
}

}  // namespace strata::frontend
