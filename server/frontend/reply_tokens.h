// The token ids of recent chat replies, by their text ("token in, token out" for conversations).
//
// A client continues a conversation by sending the model's earlier replies back as text. Encoding
// that text again need not give the ids the model generated: a model may emit a split of a word
// the tokenizer's merges would not produce (BPE has many splits of one string), and then the
// prompt differs from the cached sequence from that token on. On a KDA model a prefix hit needs
// the recurrent state at exactly the matched position, so one differing token inside a reply
// costs the whole reply again (and every later turn repeats it). Strata remembers each finished
// reply's generated ids under its text and, when a later conversation shows that reply,
// uses them in place of the re-encoding: the prompt reads the same (the ids decode to the text
// the client was sent and sent back), only its split into tokens follows what the model produced.
//
// Only replies whose ids decode to exactly their text are kept (not a reply cut by a stop
// string, nor one with tool calls); reasoning before `</think>` and the token that ended the
// reply are not part of it. Decoding replaces ill-formed UTF-8 with U+FFFD as the client saw it,
// so a reply with such bytes gets them back where the client's text shows U+FFFD: the model
// reads what it wrote. Bounded by tokens, least recently used first out. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "server/frontend/internal/lru_map.h"

namespace strata::frontend {

using Json = nlohmann::ordered_json;

class ReplyTokenMemory {
 public:
  // `tokenizer` must outlive the memory. capacity_tokens ≥ 1.
  ReplyTokenMemory(const engine::Tokenizer& tokenizer, int64_t capacity_tokens);

  // Keeps `ids` for `text` when they decode (Tokenizer::Decode) to exactly `text` and fit the
  // capacity (evicting the least recently used replies); false when not kept. A reply already
  // kept is replaced.
  bool Remember(std::string_view text, std::vector<int32_t> ids);
  // The ids kept for `text` (they decode to exactly `text`), refreshed as recently used.
  std::optional<std::vector<int32_t>> Find(std::string_view text) { return replies_.Find(text); }

  // `ids` encode a rendered conversation (special-token text parsed). For each assistant
  // message of `messages` whose content this memory holds: where its own encoding appears in
  // `ids` after the previous messages' contents, it is replaced by the kept ids. The decoded text
  // of `ids` does not change. Returns the number of replies whose ids changed.
  int Splice(const Json& messages, std::vector<int32_t>* ids);

  int64_t num_tokens() const { return replies_.cost(); }
  int64_t num_replies() const { return replies_.size(); }
  // Replies put back into prompts with other ids than their encoding, since the start.
  int64_t num_spliced_total() const { return num_spliced_total_.load(); }

 private:
  const engine::Tokenizer& tokenizer_;
  // Reply text → its ids; a reply costs its token count.
  internal::LruMap<std::vector<int32_t>> replies_;
  std::atomic<int64_t> num_spliced_total_{0};
};

}  // namespace strata::frontend
