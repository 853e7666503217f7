// response_store.h: the memory bound, and the records mirroring it in a directory.
#include "server/frontend/response_store.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/log.h"
#include "core/status.h"

namespace strata::frontend {
namespace {

// JSON text (bytes that are not UTF-8 as U+FFFD, as every response renders them).
std::string Text(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// An entry's parts as JSON text, each serialised once: they give its size (the bound counts the
// id and these) and make its record.
struct EntryText {
  std::string response, messages, request, input_items;  // "" for a null part
  int64_t bytes = 0;
};

EntryText TextOf(const std::string& id, const StoredResponse& stored) {
  EntryText t;
  t.bytes = static_cast<int64_t>(id.size());
  for (auto [part, text] : {std::pair{&stored.response, &t.response},
                            {&stored.messages, &t.messages},
                            {&stored.request, &t.request},
                            {&stored.input_items, &t.input_items}}) {
    if (part->is_null()) continue;
    *text = Text(*part);
    t.bytes += static_cast<int64_t>(text->size());
  }
  return t;
}

// The record of an entry whose text is `t` (ParseRecord reads it back).
std::string RecordText(const std::string& id, int64_t seq, const EntryText& t) {
  std::string record = absl::StrCat("{\"id\":", Text(Json(id)), ",\"seq\":", seq,
                                    ",\"response\":", t.response, ",\"messages\":", t.messages);
  if (!t.request.empty()) absl::StrAppend(&record, ",\"request\":", t.request);
  if (!t.input_items.empty()) absl::StrAppend(&record, ",\"input_items\":", t.input_items);
  record += '}';
  return record;
}

absl::Status TooLarge(const std::string& id, int64_t bytes, int64_t capacity) {
  return absl::ResourceExhaustedError(
      absl::StrCat("response ", id, " (", bytes, " bytes as JSON) is larger than the whole store (",
                   capacity, " bytes, --responses-store-memory): not stored"));
}

// A record's entry when it is one: "id" naming the file, an integer "seq", an object
// "response", an array "messages", "request" an object and "input_items" an array where
// present.
template <typename PathOf>
std::optional<std::pair<StoredResponse, int64_t>> ParseRecord(const Json& record,
                                                              const std::string& path,
                                                              const PathOf& record_path) {
  const auto id = record.find("id");
  const auto seq = record.find("seq");
  const auto response = record.find("response");
  const auto messages = record.find("messages");
  const auto request = record.find("request");
  const auto items = record.find("input_items");
  if (id == record.end() || !id->is_string() || path != record_path(id->get<std::string>()) ||
      seq == record.end() || !seq->is_number_integer() || response == record.end() ||
      !response->is_object() || messages == record.end() || !messages->is_array() ||
      (request != record.end() && !request->is_object()) ||
      (items != record.end() && !items->is_array())) {
    return std::nullopt;
  }
  return std::make_pair(
      StoredResponse{*response, *messages, request == record.end() ? Json() : *request,
                     items == record.end() ? Json() : *items},
      seq->get<int64_t>());
}

}  // namespace

ResponseStore::ResponseStore(int64_t capacity_bytes) : responses_(capacity_bytes) {
  CHECK_GE(capacity_bytes, 1);
}

absl::StatusOr<std::unique_ptr<ResponseStore>> ResponseStore::Open(int64_t capacity_bytes,
                                                                   const std::string& dir) {
  ASSIGN_OR_RETURN(std::unique_ptr<DirectoryLock> lock,
                   DirectoryLock::Acquire(dir, {"responses"}, "--responses-dir"));
  auto store = std::make_unique<ResponseStore>(capacity_bytes);
  store->dir_ = dir;
  store->lock_ = std::move(lock);
  const std::string records = dir + "/responses";
  RemoveFilesEnding(records, ".tmp");  // writes a crash cut short: the old record stands
  std::vector<std::pair<std::string, std::pair<StoredResponse, int64_t>>> loaded;
  for (const std::string& path : ListFilesEnding(records, ".json")) {
    absl::StatusOr<Json> record = ReadJsonObjectFile(path);
    std::optional<std::pair<StoredResponse, int64_t>> entry =
        record.ok()
            ? ParseRecord(*record, path,
                          [&](const std::string& id) { return store->RecordPath(id).value_or(""); })
            : std::nullopt;
    if (!entry) {
      LOG_WARN("responses", "--responses-dir: skipping {}: {}", path,
               record.ok() ? "not a response record (\"id\" naming the file, an integer "
                             "\"seq\", a \"response\" object, a \"messages\" array)"
                           : record.status().ToString());
      continue;
    }
    loaded.emplace_back((*record)["id"].get<std::string>(), *std::move(entry));
  }
  std::sort(loaded.begin(), loaded.end(),
            [](const auto& a, const auto& b) { return a.second.second < b.second.second; });
  std::lock_guard<std::mutex> disk_lock(store->disk_mu_);
  for (auto& [id, entry] : loaded) {
    store->next_seq_ = std::max(store->next_seq_, entry.second + 1);
    const bool unfinished = !entry.first.request.is_null();
    const int64_t bytes = TextOf(id, entry.first).bytes;
    std::vector<std::string> evicted;
    if (!store->responses_.Put(id, std::move(entry.first), bytes, &evicted)) evicted.push_back(id);
    for (const std::string& gone : evicted) {
      LOG_INFO("responses",
               "--responses-dir: dropping response {}: the stored ones no longer fit "
               "--responses-store-memory ({} bytes)",
               gone, capacity_bytes);
      store->RemoveRecordLocked(gone);
      std::erase(store->unfinished_, gone);
    }
    if (unfinished && store->responses_.Find(id)) store->unfinished_.push_back(id);
  }
  LOG_INFO("responses", "--responses-dir {}: {} stored responses loaded ({} bytes), {} to resume",
           dir, store->num_responses(), store->num_bytes(), store->unfinished_.size());
  return store;
}

absl::Status ResponseStore::Put(const std::string& id, StoredResponse stored) {
  const EntryText text = TextOf(id, stored);
  const int64_t bytes = text.bytes;
  const std::optional<std::string> path = dir_.empty() ? std::nullopt : RecordPath(id);
  const bool accepted = !stored.request.is_null();
  if (!dir_.empty() && !path && accepted) {
    return absl::InvalidArgumentError(absl::StrCat(
        "response id '", id,
        "' cannot name a file of --responses-dir (an X-Request-Id or "
        "request_id of at most ",
        kMaxPlainIdBytes - 5, " bytes of [A-Za-z0-9_-], or of at most ", kMaxHexIdBytes - 5,
        " bytes of any kind, can): a background response must be kept there"));
  }
  if (!path) {  // memory only (an id no file can be named after is kept so, too)
    if (!responses_.Put(id, std::move(stored), bytes)) {
      return TooLarge(id, bytes, capacity_bytes());
    }
    return absl::OkStatus();
  }
  std::lock_guard<std::mutex> lock(disk_mu_);
  if (bytes > capacity_bytes()) {
    responses_.Erase(id);
    RemoveRecordLocked(id);
    return TooLarge(id, bytes, capacity_bytes());
  }
  absl::Status written =
      WriteFileAtomically(*path, RecordText(id, next_seq_++, text), /*fsync=*/accepted);
  if (!written.ok()) {
    responses_.Erase(id);  // what was stored under id may already be overwritten
    RemoveRecordLocked(id);
    return written;
  }
  std::vector<std::string> evicted;
  responses_.Put(id, std::move(stored), bytes, &evicted);
  for (const std::string& gone : evicted) RemoveRecordLocked(gone);
  return absl::OkStatus();
}

bool ResponseStore::Erase(std::string_view id) {
  if (dir_.empty()) return responses_.Erase(id);
  std::lock_guard<std::mutex> lock(disk_mu_);
  RemoveRecordLocked(id);
  return responses_.Erase(id);
}

std::vector<std::string> ResponseStore::TakeUnfinished() {
  std::vector<std::string> ids;
  ids.swap(unfinished_);
  return ids;
}

std::optional<std::string> ResponseStore::RecordPath(std::string_view id_view) const {
  const std::string id(id_view);
  const bool plain = !id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  if (plain && id.size() <= kMaxPlainIdBytes) return absl::StrCat(dir_, "/responses/", id, ".json");
  // Other ids (X-Request-Id is any header value) as "~" and their bytes in hex.
  if (id.size() <= kMaxHexIdBytes) {
    return absl::StrCat(dir_, "/responses/~", absl::BytesToHexString(id), ".json");
  }
  return std::nullopt;
}

void ResponseStore::RemoveRecordLocked(std::string_view id) {
  const std::optional<std::string> path = RecordPath(id);
  if (path && ::unlink(path->c_str()) != 0 && errno != ENOENT) {
    LOG_WARN("responses", "cannot remove {}: {}", *path, std::strerror(errno));
  }
}

}  // namespace strata::frontend
