// Responses kept for OpenAI's `store` / `previous_response_id` (/v1/responses): in memory, and
// with a directory (`strata serve --responses-dir DIR`) on disk too, so they outlive restarts.
//
// A stored response is its Response object (what GET /v1/responses/{id} returns) and the
// conversation that led to it as chat messages — the earlier turns, this request's input and
// the reply (text and tool calls) — without `instructions`, which OpenAI does not carry over to
// a request that continues it. A request naming previous_response_id starts from those messages.
// A background response not finished yet also keeps the request that makes it (`request`), so
// that a server restarted before it finished runs it again (OpenAiService::
// ResumeBackgroundResponses).
// Bounded by bytes (each entry counted as its JSON text), least recently used first out: a long
// conversation stores its whole history once per turn, so the bound is what keeps it in check.
//
// On disk: DIR/lock (flock'ed: one server per directory) and DIR/responses/ID.json, one record
// {"id", "seq", "response", "messages"[, "request"][, "input_items"]} per entry, mirroring the
// memory: an entry evicted or erased loses its file. Each is written to a temporary name and
// renamed, so a crash leaves the old record or the new one; records holding a request (an
// acceptance) are fsynced first, finished ones are not (they outlive the process dying, not a power
// loss). At start the records are loaded in the order they were last written (`seq`), the oldest
// evicted first if they no longer fit. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "core/durable_file.h"
#include "server/frontend/internal/lru_map.h"

namespace strata::frontend {

using Json = nlohmann::ordered_json;

struct StoredResponse {
  Json response;  // the Response object
  Json messages;  // the conversation through this response, as chat messages
  // A background response still queued or in progress: {"body": its request body (with the
  // seed it was given when it named none), "history": the messages its previous_response_id
  // named (or [])}; else null.
  Json request;
  // The request's input as Responses items (ResponsesRequest::input_items); null when unknown.
  Json input_items;
};

class ResponseStore {
 public:
  explicit ResponseStore(int64_t capacity_bytes);  // ≥ 1; memory only
  // Over `dir` (created where missing; locked): loads the records there. FailedPrecondition
  // when another process uses `dir`; the OS's error naming the path when it is unusable.
  // Unreadable or inconsistent records are named in a warning and skipped (left on disk).
  static absl::StatusOr<std::unique_ptr<ResponseStore>> Open(int64_t capacity_bytes,
                                                             const std::string& dir);

  // Keeps `stored` under `id` (replacing an entry of that id), evicting the least recently
  // used ones until it fits. ResourceExhausted when the entry is larger than the whole
  // capacity (not kept; an older entry of `id` is dropped). With a directory, the OS's error
  // naming the path when the record cannot be written (then it is not kept in memory either),
  // and InvalidArgument for an entry with a `request` whose id no file can be named after
  // (kMaxHexIdBytes); other such entries are kept in memory only.
  absl::Status Put(const std::string& id, StoredResponse stored);
  // A copy of the entry, refreshed as recently used.
  std::optional<StoredResponse> Get(std::string_view id) { return responses_.Find(id); }
  bool Erase(std::string_view id);

  // The ids of the entries loaded from the directory with a `request` (background responses a
  // previous process accepted and did not finish), oldest first; empty after the first call.
  std::vector<std::string> TakeUnfinished();

  int64_t num_bytes() const { return responses_.cost(); }
  int64_t num_responses() const { return responses_.size(); }
  int64_t capacity_bytes() const { return responses_.capacity(); }
  const std::string& dir() const { return dir_; }  // empty: memory only

 private:
  // Ids of [A-Za-z0-9_-] name their record up to this many bytes; others, hex-encoded, up to
  // the second bound (a file name is at most 255 bytes). Longer ones are kept in memory only.
  static constexpr size_t kMaxPlainIdBytes = 240;
  static constexpr size_t kMaxHexIdBytes = 120;

  void RemoveRecordLocked(std::string_view id);  // disk_mu_ held
  // DIR/responses/NAME.json; nullopt when no file can be named after `id`.
  std::optional<std::string> RecordPath(std::string_view id) const;

  internal::LruMap<StoredResponse> responses_;
  std::string dir_;
  std::unique_ptr<DirectoryLock> lock_;
  // Orders a record's write with its entry's memory update (a record on disk is the entry in
  // memory).
  std::mutex disk_mu_;
  int64_t next_seq_ = 0;  // guarded by disk_mu_
  std::vector<std::string> unfinished_;
};

}  // namespace strata::frontend
