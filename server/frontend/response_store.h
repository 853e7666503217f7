// Responses kept for OpenAI's `store` / `previous_response_id` (/v1/responses), in memory.
//
// A stored response is its Response object (what GET /v1/responses/{id} returns) and the
// conversation that led to it as chat messages — the earlier turns, this request's input and
// the reply (text and tool calls) — without `instructions`, which OpenAI does not carry over to
// a request that continues it. A request naming previous_response_id starts from those messages.
// Bounded by bytes (each entry counted as its JSON text), least recently used first out: a long
// conversation stores its whole history once per turn, so the bound is what keeps it in check.
// Nothing survives a restart. Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/frontend/internal/lru_map.h"

namespace strata::frontend {

using Json = nlohmann::ordered_json;

struct StoredResponse {
  Json response;  // the Response object
  Json messages;  // the conversation through this response, as chat messages
};

class ResponseStore {
 public:
  explicit ResponseStore(int64_t capacity_bytes);  // ≥ 1

  // Keeps `stored` under `id` (replacing an entry of that id), evicting the least recently
  // used ones until it fits; an entry larger than the whole capacity is not kept (false).
  bool Put(const std::string& id, StoredResponse stored);
  // A copy of the entry, refreshed as recently used.
  std::optional<StoredResponse> Get(std::string_view id) { return responses_.Find(id); }
  bool Erase(std::string_view id) { return responses_.Erase(id); }

  int64_t num_bytes() const { return responses_.cost(); }
  int64_t num_responses() const { return responses_.size(); }
  int64_t capacity_bytes() const { return responses_.capacity(); }

 private:
  internal::LruMap<StoredResponse> responses_;
};

}  // namespace strata::frontend
