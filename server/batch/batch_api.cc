// batch_api.h: routes, the batch records and their worker.
#include "server/batch/batch_api.h"

#include <algorithm>
#include <ctime>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "core/file.h"
#include "core/json_limits.h"
#include "core/log.h"
#include "core/status.h"
#include "server/batch/batch_line.h"
#include "server/batch/batch_runner.h"
#include "server/batch/batch_store.h"
#include "server/frontend/api_error.h"
#include "server/frontend/generation_response.h"
#include "server/frontend/openai_service.h"
#include "server/http/multipart.h"
#include "server/http/query.h"

namespace strata::batch {

using frontend::ApiErrorStatus;
using frontend::InvalidField;
using frontend::InvalidType;
using frontend::MissingField;

struct BatchApi::Batch {
  std::string id;
  std::string endpoint;
  std::string input_file_id;
  std::string completion_window;
  Json metadata;  // null or an object of strings
  // validating (queued) → in_progress → finalizing → completed; or failed; or
  // cancelling → cancelled.
  std::string status = "validating";
  Json errors;  // null or {"object": "list", "data": [...]}
  std::string output_file_id;
  std::string error_file_id;
  int64_t created_at = 0;
  int64_t in_progress_at = 0;  // 0: not yet (null)
  int64_t finalizing_at = 0;
  int64_t completed_at = 0;
  int64_t failed_at = 0;
  int64_t cancelling_at = 0;
  int64_t cancelled_at = 0;
  int64_t expired_at = 0;
  int64_t total = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t seq = 0;      // creation order (the directory's listing is not)
  bool cancel = false;  // a cancel was asked (guarded by the API's mu_)
  // The creating request's credentials, sent with each of its requests.
  std::vector<http::Header> auth_headers;
};

namespace {

constexpr std::string_view kFiles = "/v1/files";
constexpr std::string_view kBatches = "/v1/batches";
constexpr size_t kMaxListedErrors = 100;

int64_t Now() { return static_cast<int64_t>(std::time(nullptr)); }

// A batch with requests still to answer: it runs, carries on after a restart, is a backlog.
bool Unfinished(const std::string& status) {
  return status == "validating" || status == "in_progress" || status == "finalizing" ||
         status == "cancelling";
}

// "/v1/files/ID/content" under `base` → {"ID", "content"}; {} when `path` is `base` itself.
std::vector<std::string> Segments(std::string_view path, std::string_view base) {
  std::string_view rest = path.substr(base.size());
  if (rest.empty()) return {};
  rest.remove_prefix(1);  // '/'
  return absl::StrSplit(absl::string_view(rest.data(), rest.size()), '/');
}

using http::QueryParam;

// ?limit=N within [1, max] (default `fallback`).
absl::StatusOr<int64_t> Limit(std::string_view target, int64_t fallback, int64_t max) {
  const std::string text = QueryParam(target, "limit");
  if (text.empty()) return fallback;
  int64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n < 1 || n > max) {
    return InvalidField(
        "limit", absl::StrCat("'limit' must be an integer in [1, ", max, "]; got '", text, "'"));
  }
  return n;
}

http::HttpResponse JsonOk(const nlohmann::ordered_json& json) {
  return frontend::JsonResponse(json);
}

http::HttpResponse MethodNotAllowed(const http::HttpRequest& request,
                                    std::vector<std::string> allowed) {
  http::HttpResponse r = frontend::ErrorResponse(
      ApiErrorStatus(absl::StatusCode::kFailedPrecondition,
                     absl::StrCat("method ", request.method, " is not allowed for ", request.path)),
      /*retry_after_seconds=*/1);
  r.headers.push_back({"Allow", absl::StrJoin(allowed, ", ")});
  return r;
}

nlohmann::ordered_json FileObject(const StoredFile& f) {
  return {{"id", f.id},
          {"object", "file"},
          {"bytes", static_cast<int64_t>(f.content->size())},
          {"created_at", f.created_at},
          {"expires_at", nullptr},
          {"filename", f.filename},
          {"purpose", f.purpose},
          {"status", "processed"},
          {"status_details", nullptr}};
}

// {"object": "list", "data": …, "first_id", "last_id", "has_more"} over `objects` from the one
// after `after` (all when empty), at most `limit`.
absl::StatusOr<nlohmann::ordered_json> Page(std::vector<nlohmann::ordered_json> objects,
                                            const std::string& after, int64_t limit) {
  size_t start = 0;
  if (!after.empty()) {
    auto it = std::find_if(objects.begin(), objects.end(),
                           [&](const auto& o) { return o["id"] == after; });
    if (it == objects.end()) {
      return InvalidField("after", absl::StrCat("'after' names no listed object: '", after, "'"));
    }
    start = static_cast<size_t>(it - objects.begin()) + 1;
  }
  const size_t end = std::min(objects.size(), start + static_cast<size_t>(limit));
  nlohmann::ordered_json data = nlohmann::ordered_json::array();
  for (size_t i = start; i < end; ++i) data.push_back(std::move(objects[i]));
  nlohmann::ordered_json page = {{"object", "list"}, {"data", data}};
  page["first_id"] = data.empty() ? nlohmann::ordered_json(nullptr) : data.front()["id"];
  page["last_id"] = data.empty() ? nlohmann::ordered_json(nullptr) : data.back()["id"];
  page["has_more"] = end < objects.size();
  return page;
}

}  // namespace

BatchApi::BatchApi(BatchApiOptions options) : BatchApi(std::move(options), nullptr) {
  CHECK(options_.dir.empty()) << "BatchApi::Open keeps files in a directory";
}

BatchApi::BatchApi(BatchApiOptions options, std::unique_ptr<BatchStore> disk)
    : options_(std::move(options)),
      disk_(std::move(disk)),
      files_(options_.files_store_bytes, disk_.get()) {
  CHECK_GE(options_.max_in_flight, 1);
  if (disk_ != nullptr) LoadBatches();
  worker_ = std::thread([this] { WorkerLoop(); });
}

absl::StatusOr<std::unique_ptr<BatchApi>> BatchApi::Open(BatchApiOptions options) {
  std::unique_ptr<BatchStore> disk;
  if (!options.dir.empty()) {
    ASSIGN_OR_RETURN(disk, BatchStore::Open(options.dir));
  }
  return std::unique_ptr<BatchApi>(new BatchApi(std::move(options), std::move(disk)));
}

std::unique_ptr<BatchApi::Batch> BatchApi::FromRecord(const Json& r) {
  auto b = std::make_unique<Batch>();
  auto text = [&](const char* key, std::string* out) {
    auto it = r.find(key);
    if (it == r.end() || !(it->is_string() || it->is_null())) return false;
    *out = it->is_null() ? "" : it->get<std::string>();
    return true;
  };
  auto number = [](const Json& o, const char* key, int64_t* out) {
    auto it = o.find(key);
    if (it == o.end() || !(it->is_number_integer() || it->is_null())) return false;
    *out = it->is_null() ? 0 : it->get<int64_t>();
    return true;
  };
  const Json counts = r.value("request_counts", Json::object());
  const bool ok =
      text("id", &b->id) && text("endpoint", &b->endpoint) &&
      text("input_file_id", &b->input_file_id) &&
      text("completion_window", &b->completion_window) && text("status", &b->status) &&
      text("output_file_id", &b->output_file_id) && text("error_file_id", &b->error_file_id) &&
      number(r, "created_at", &b->created_at) && number(r, "in_progress_at", &b->in_progress_at) &&
      number(r, "finalizing_at", &b->finalizing_at) &&
      number(r, "completed_at", &b->completed_at) && number(r, "failed_at", &b->failed_at) &&
      number(r, "cancelling_at", &b->cancelling_at) &&
      number(r, "cancelled_at", &b->cancelled_at) && number(r, "expired_at", &b->expired_at) &&
      number(r, "seq", &b->seq) && counts.is_object() && number(counts, "total", &b->total) &&
      number(counts, "completed", &b->completed) && number(counts, "failed", &b->failed);
  constexpr std::string_view kStatuses[] = {"validating", "in_progress", "finalizing", "completed",
                                            "failed",     "cancelling",  "cancelled",  "expired"};
  if (!ok ||
      std::find(std::begin(kStatuses), std::end(kStatuses), b->status) == std::end(kStatuses)) {
    return nullptr;
  }
  b->metadata = r.value("metadata", Json());
  b->errors = r.value("errors", Json());
  return b;
}

void BatchApi::LoadBatches() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Batch*> unfinished;
  for (const Json& record : disk_->LoadBatches()) {
    std::unique_ptr<Batch> b = FromRecord(record);
    if (b == nullptr || batches_.contains(b->id)) {
      LOG_WARN("batch",
               "--files-dir: skipping batch {}: its record lacks a field, holds a wrong type or "
               "an unknown status, or repeats an id",
               record.value("id", std::string("?")));
      continue;
    }
    next_seq_ = std::max(next_seq_, b->seq + 1);
    if (Unfinished(b->status)) {
      if (b->status == "finalizing") b->status = "in_progress";  // its lines are all written
      b->cancel = b->status == "cancelling";
      b->auth_headers = options_.resumed_headers;
      unfinished.push_back(b.get());
    }
    batch_order_.push_back(b->id);
    batches_.emplace(b->id, std::move(b));
  }
  auto by_seq = [this](const std::string& a, const std::string& b) {
    return batches_.at(a)->seq < batches_.at(b)->seq;
  };
  std::sort(batch_order_.begin(), batch_order_.end(), by_seq);
  std::sort(unfinished.begin(), unfinished.end(),
            [](const Batch* a, const Batch* b) { return a->seq < b->seq; });
  for (const Batch* b : unfinished) queue_.push_back(b->id);
  // An unfinished batch's record names no output file yet: files of its output names are what
  // a crash between storing them and rewriting the record left (it finishes again and writes
  // them anew).
  for (const StoredFile& file : files_.List()) {
    const auto made_by = [&](const Batch* b) {
      return file.filename == b->id + "_output.jsonl" || file.filename == b->id + "_error.jsonl";
    };
    if (file.purpose == "batch_output" &&
        std::any_of(unfinished.begin(), unfinished.end(), made_by)) {
      LOG_INFO("batch", "--files-dir: removing {} ({}): its batch did not record it", file.id,
               file.filename);
      files_.Delete(file.id);
    }
  }
  if (!batches_.empty()) {
    LOG_INFO("batch", "{} batches loaded from {}; {} to run or carry on", batches_.size(),
             disk_->dir(), unfinished.size());
  }
}

absl::Status BatchApi::Persist(const Batch& batch) const {
  if (disk_ == nullptr) return absl::OkStatus();
  Json record = BatchObject(batch);
  record["seq"] = batch.seq;
  absl::Status written = disk_->PutBatch(batch.id, record);
  if (!written.ok()) LOG_ERROR("batch", "batch {}: {}", batch.id, written.ToString());
  return written;
}

BatchApi::~BatchApi() { Stop(); }

bool BatchApi::Serves(std::string_view path) {
  for (std::string_view base : {kFiles, kBatches}) {
    if (path == base ||
        (path.starts_with(base) && path.size() > base.size() + 1 && path[base.size()] == '/')) {
      return true;
    }
  }
  return false;
}

std::string_view BatchApi::RouteTemplate(std::string_view path) {
  if (path == kFiles || path == kBatches) return path == kFiles ? kFiles : kBatches;
  if (path.starts_with(kFiles)) {
    const std::vector<std::string> s = Segments(path, kFiles);
    if (s.size() == 1) return "/v1/files/{file_id}";
    if (s.size() == 2 && s[1] == "content") return "/v1/files/{file_id}/content";
  } else if (path.starts_with(kBatches)) {
    const std::vector<std::string> s = Segments(path, kBatches);
    if (s.size() == 1) return "/v1/batches/{batch_id}";
    if (s.size() == 2 && s[1] == "cancel") return "/v1/batches/{batch_id}/cancel";
  }
  return "none";
}

absl::StatusOr<http::HttpResponse> BatchApi::Handle(const http::HttpRequest& request) {
  const std::string& method = request.method;
  const bool get = method == "GET";
  const bool post = method == "POST";
  const std::string_view route = RouteTemplate(request.path);
  if (route == kFiles) {
    if (post) return UploadFile(request);
    if (get) return ListFiles(request);
    return MethodNotAllowed(request, {"GET", "POST"});
  }
  if (route == kBatches) {
    if (post) return CreateBatch(request);
    if (get) return ListBatches(request);
    return MethodNotAllowed(request, {"GET", "POST"});
  }
  if (route == "none") {
    return ApiErrorStatus(absl::StatusCode::kNotFound, absl::StrCat("no route for ", request.path));
  }
  const std::vector<std::string> s =
      Segments(request.path, route.starts_with(kFiles) ? kFiles : kBatches);
  const std::string& id = s[0];
  if (route == "/v1/files/{file_id}" || route == "/v1/files/{file_id}/content") {
    const bool content = s.size() == 2;
    if (!get && !(method == "DELETE" && !content)) {
      return MethodNotAllowed(request, content ? std::vector<std::string>{"GET"}
                                               : std::vector<std::string>{"GET", "DELETE"});
    }
    std::optional<StoredFile> file = files_.Get(id);
    if (!file) {
      return ApiErrorStatus(absl::StatusCode::kNotFound, absl::StrCat("no file '", id, "'"),
                            "file_id");
    }
    if (method == "DELETE") {
      files_.Delete(id);
      return JsonOk({{"id", id}, {"object", "file"}, {"deleted", true}});
    }
    if (!content) return JsonOk(FileObject(*file));
    http::HttpResponse r;
    r.content_type = "application/octet-stream";
    r.body = *file->content;
    return r;
  }
  if (route == "/v1/batches/{batch_id}/cancel") {
    if (!post) return MethodNotAllowed(request, {"POST"});
    return CancelBatch(id);
  }
  if (!get) return MethodNotAllowed(request, {"GET"});
  std::lock_guard<std::mutex> lock(mu_);
  auto it = batches_.find(id);
  if (it == batches_.end()) {
    return ApiErrorStatus(absl::StatusCode::kNotFound, absl::StrCat("no batch '", id, "'"),
                          "batch_id");
  }
  return JsonOk(BatchObject(*it->second));
}

absl::StatusOr<http::HttpResponse> BatchApi::UploadFile(const http::HttpRequest& request) {
  const std::string* type = request.FindHeader("content-type");
  absl::StatusOr<std::vector<http::FormPart>> parts =
      http::ParseMultipartForm(type ? *type : "", request.body);
  if (!parts.ok()) return InvalidField("file", std::string(parts.status().message()));
  const http::FormPart* file = nullptr;
  const http::FormPart* purpose = nullptr;
  for (const http::FormPart& p : *parts) {
    if (p.name == "file") file = &p;
    if (p.name == "purpose") purpose = &p;
  }
  if (purpose == nullptr) return MissingField("purpose");
  if (purpose->data != "batch") {
    return InvalidField("purpose",
                        absl::StrCat("'purpose' must be 'batch' (files here are batch inputs); "
                                     "got '",
                                     std::string(purpose->data), "'"));
  }
  if (file == nullptr) return MissingField("file");
  if (file->data.empty()) return InvalidField("file", "the file is empty");
  ASSIGN_OR_RETURN(StoredFile stored,
                   files_.Add(file->filename.empty() ? "upload.jsonl" : file->filename, "batch",
                              std::string(file->data)));
  LOG_INFO("batch", "file {} stored: {} bytes ({})", stored.id, stored.content->size(),
           stored.filename);
  return JsonOk(FileObject(stored));
}

absl::StatusOr<http::HttpResponse> BatchApi::ListFiles(const http::HttpRequest& request) const {
  const std::string purpose = QueryParam(request.target, "purpose");
  const std::string order = QueryParam(request.target, "order");
  if (!order.empty() && order != "asc" && order != "desc") {
    return InvalidField("order", absl::StrCat("'order' must be asc or desc; got '", order, "'"));
  }
  ASSIGN_OR_RETURN(const int64_t limit, Limit(request.target, 10000, 10000));
  std::vector<nlohmann::ordered_json> objects;
  for (const StoredFile& f : files_.List()) {
    if (purpose.empty() || f.purpose == purpose) objects.push_back(FileObject(f));
  }
  if (order != "asc") std::reverse(objects.begin(), objects.end());  // newest first by default
  ASSIGN_OR_RETURN(nlohmann::ordered_json page,
                   Page(std::move(objects), QueryParam(request.target, "after"), limit));
  return JsonOk(page);
}

BatchApi::Json BatchApi::CheckInput(const Batch& batch, const std::string& content,
                                    int64_t* lines) const {
  Json data = Json::array();
  auto fail = [&](std::string code, std::string message, int64_t line) {
    if (data.size() >= kMaxListedErrors) return;
    data.push_back({{"code", std::move(code)},
                    {"message", std::move(message)},
                    {"param", nullptr},
                    {"line", line}});
  };
  std::istringstream in(content);
  int64_t number = 0;
  *lines = 0;
  for (std::string text; std::getline(in, text);) {
    ++number;
    if (absl::StripAsciiWhitespace(text).empty()) continue;
    if (++*lines > options_.max_lines) {
      fail("too_many_requests",
           absl::StrCat("the file has more than ", options_.max_lines, " requests (the limit)"),
           number);
      break;
    }
    std::optional<std::string> custom_id;
    absl::StatusOr<BatchRequestLine> line = ParseBatchLine(text, number, &custom_id);
    if (!line.ok()) {
      fail("invalid_request", std::string(line.status().message()), number);
    } else if (line->url != batch.endpoint) {
      fail("mismatched_endpoint",
           absl::StrCat("line ", number, ": url '", line->url, "' is not the batch's endpoint '",
                        batch.endpoint, "'"),
           number);
    }
  }
  if (*lines == 0) fail("empty_file", "the input file has no requests", 0);
  if (data.empty()) return nullptr;
  return {{"object", "list"}, {"data", std::move(data)}};
}

absl::StatusOr<http::HttpResponse> BatchApi::CreateBatch(const http::HttpRequest& request) {
  absl::StatusOr<Json> parsed = ParseBoundedJson(request.body);
  if (!parsed.ok() && IsJsonLimitError(parsed.status())) {
    return InvalidField("", std::string(parsed.status().message()));
  }
  if (!parsed.ok() || !parsed->is_object()) {
    return InvalidField("", "the request body must be a JSON object");
  }
  const Json& body = *parsed;
  auto string_field = [&](const char* key) -> absl::StatusOr<std::string> {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return MissingField(key);
    if (!it->is_string()) return InvalidType(key, "a string");
    return it->get<std::string>();
  };
  auto batch = std::make_unique<Batch>();
  ASSIGN_OR_RETURN(batch->input_file_id, string_field("input_file_id"));
  ASSIGN_OR_RETURN(batch->endpoint, string_field("endpoint"));
  ASSIGN_OR_RETURN(batch->completion_window, string_field("completion_window"));
  if (std::find(std::begin(kBatchUrls), std::end(kBatchUrls), batch->endpoint) ==
      std::end(kBatchUrls)) {
    return InvalidField(
        "endpoint", absl::StrCat("'endpoint' must be one of ",
                                 absl::StrJoin(std::begin(kBatchUrls), std::end(kBatchUrls), ", ",
                                               [](std::string* out, std::string_view url) {
                                                 out->append(url);
                                               }),
                                 "; got '", batch->endpoint, "'"));
  }
  if (batch->completion_window != "24h") {
    return InvalidField(
        "completion_window",
        absl::StrCat("'completion_window' must be '24h'; got '", batch->completion_window, "'"));
  }
  if (auto m = body.find("metadata"); m != body.end() && !m->is_null()) {
    if (!m->is_object() || m->size() > 16) {
      return InvalidType("metadata", "an object of at most 16 string values");
    }
    for (const auto& [key, value] : m->items()) {
      if (!value.is_string() || key.size() > 64 ||
          value.get_ref<const std::string&>().size() > 512) {
        return InvalidType(absl::StrCat("metadata.", key),
                           "a string of at most 512 characters (keys at most 64)");
      }
    }
    batch->metadata = *m;
  }
  std::optional<StoredFile> input = files_.Get(batch->input_file_id);
  if (!input) {
    return ApiErrorStatus(absl::StatusCode::kNotFound,
                          absl::StrCat("no file '", batch->input_file_id, "'"), "input_file_id");
  }
  if (input->purpose != "batch") {
    return InvalidField("input_file_id", absl::StrCat("file '", input->id, "' has purpose '",
                                                      input->purpose, "', not 'batch'"));
  }
  for (const char* name : {"authorization", "x-api-key"}) {
    if (const std::string* v = request.FindHeader(name)) batch->auth_headers.push_back({name, *v});
  }
  batch->id = frontend::NewResponseId("batch");
  batch->created_at = Now();
  batch->errors = CheckInput(*batch, *input->content, &batch->total);
  std::lock_guard<std::mutex> lock(mu_);
  if (!batch->errors.is_null()) {
    batch->status = "failed";
    batch->failed_at = Now();
    batch->total = 0;
  } else if (stop_) {
    return ApiErrorStatus(absl::StatusCode::kUnavailable, "the server is shutting down");
  }
  batch->seq = next_seq_++;
  if (absl::Status kept = Persist(*batch); !kept.ok()) {
    return ApiErrorStatus(absl::StatusCode::kInternal,
                          absl::StrCat("the batch could not be kept: ", kept.message()));
  }
  if (batch->status == "validating") {
    queue_.push_back(batch->id);
    cv_.notify_all();
  }
  LOG_INFO("batch", "batch {} created over {} ({} requests to {}): {}", batch->id,
           batch->input_file_id, batch->total, batch->endpoint, batch->status);
  const Json object = BatchObject(*batch);
  batch_order_.push_back(batch->id);
  batches_.emplace(batch->id, std::move(batch));
  return JsonOk(object);
}

absl::StatusOr<http::HttpResponse> BatchApi::ListBatches(const http::HttpRequest& request) const {
  ASSIGN_OR_RETURN(const int64_t limit, Limit(request.target, 20, 100));
  std::vector<nlohmann::ordered_json> objects;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = batch_order_.rbegin(); it != batch_order_.rend(); ++it) {
      objects.push_back(BatchObject(*batches_.at(*it)));
    }
  }
  ASSIGN_OR_RETURN(nlohmann::ordered_json page,
                   Page(std::move(objects), QueryParam(request.target, "after"), limit));
  return JsonOk(page);
}

absl::StatusOr<http::HttpResponse> BatchApi::CancelBatch(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = batches_.find(id);
  if (it == batches_.end()) {
    return ApiErrorStatus(absl::StatusCode::kNotFound, absl::StrCat("no batch '", id, "'"),
                          "batch_id");
  }
  Batch& b = *it->second;
  if (b.status == "validating") {  // queued, not started: nothing ran
    queue_.erase(std::find(queue_.begin(), queue_.end(), id));
    b.cancel = true;
    b.status = "cancelled";
    b.cancelling_at = b.cancelled_at = Now();
  } else if (b.status == "in_progress") {
    b.cancel = true;
    b.status = "cancelling";
    b.cancelling_at = Now();
  } else if (b.status != "cancelling" && b.status != "cancelled") {
    return InvalidField("batch_id", absl::StrCat("batch '", id, "' is ", b.status,
                                                 "; only a validating or in_progress batch can "
                                                 "be cancelled"));
  }
  Persist(b).IgnoreError();  // logged; a lost cancel leaves the batch running after a restart
  return JsonOk(BatchObject(b));
}

BatchApi::Json BatchApi::BatchObject(const Batch& b) const {
  auto at = [](int64_t t) { return t == 0 ? Json(nullptr) : Json(t); };
  auto id = [](const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); };
  return {
      {"id", b.id},
      {"object", "batch"},
      {"endpoint", b.endpoint},
      {"errors", b.errors},
      {"input_file_id", b.input_file_id},
      {"completion_window", b.completion_window},
      {"status", b.status},
      {"output_file_id", id(b.output_file_id)},
      {"error_file_id", id(b.error_file_id)},
      {"created_at", b.created_at},
      {"in_progress_at", at(b.in_progress_at)},
      {"expires_at", b.created_at + options_.completion_window_s},
      {"finalizing_at", at(b.finalizing_at)},
      {"completed_at", at(b.completed_at)},
      {"failed_at", at(b.failed_at)},
      {"expired_at", at(b.expired_at)},
      {"cancelling_at", at(b.cancelling_at)},
      {"cancelled_at", at(b.cancelled_at)},
      {"request_counts", {{"total", b.total}, {"completed", b.completed}, {"failed", b.failed}}},
      {"metadata", b.metadata}};
}

server::BatchCounts BatchApi::Counts() const {
  server::BatchCounts counts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, b] : batches_) {
      ++counts.batches_by_status[b->status];
      if (Unfinished(b->status)) {
        counts.requests_pending += std::max<int64_t>(0, b->total - b->completed - b->failed);
      }
    }
  }
  counts.files_bytes = files_.num_bytes();
  counts.files_capacity_bytes = files_.capacity_bytes();
  return counts;
}

nlohmann::ordered_json BatchApi::Summary() const {
  const server::BatchCounts counts = Counts();
  Json batches = Json::object();
  for (const auto& [status, n] : counts.batches_by_status) batches[status] = n;
  return {{"files",
           {{"capacity_bytes", counts.files_capacity_bytes},
            {"num_bytes", counts.files_bytes},
            {"num_files", files_.num_files()},
            {"dir", disk_ == nullptr ? Json(nullptr) : Json(disk_->dir())}}},
          {"batches", std::move(batches)},
          {"batch_requests_pending", counts.requests_pending}};
}

void BatchApi::SetHandler(http::HttpHandler* handler) {
  std::lock_guard<std::mutex> lock(mu_);
  handler_ = handler;
  cv_.notify_all();
}

void BatchApi::RequestStop() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_all();
}

void BatchApi::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = abort_ = true;
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

void BatchApi::WorkerLoop() {
  while (true) {
    Batch* batch = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || (!queue_.empty() && handler_ != nullptr); });
      if (stop_) {
        // Queued batches never start. Kept on disk, they run after the next start; else they
        // end as cancelled (nothing of them ran).
        for (const std::string& id : queue_) {
          if (disk_ != nullptr) continue;
          Batch& b = *batches_.at(id);
          b.status = "cancelled";
          b.cancelling_at = b.cancelled_at = Now();
        }
        queue_.clear();
        return;
      }
      batch = batches_.at(queue_.front()).get();
      queue_.pop_front();
      if (batch->status == "validating") {  // else one carried on from the directory
        batch->status = "in_progress";
        batch->in_progress_at = Now();
        Persist(*batch).IgnoreError();  // logged; it runs from its start again if lost
      }
    }
    Run(*batch);
  }
}

void BatchApi::Run(Batch& batch) {
  http::HttpHandler* handler = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handler = handler_;
  }
  // The lines go to memory, or with a directory to its line files, where an earlier run of the
  // batch (before a restart) may have written some: those requests are not sent again.
  std::ostringstream out_memory, errors_memory;
  std::ofstream out_file, errors_file;
  std::ostream* out = &out_memory;
  std::ostream* errors = &errors_memory;
  int64_t done_completed = 0, done_failed = 0;  // by an earlier run
  // request_counts: this run's answers (2xx) and the rest (mu_ held).
  auto count = [&](const BatchProgress& p) {
    batch.completed = done_completed + p.succeeded;
    batch.failed = done_failed + p.failed + p.invalid + p.cancelled + p.expired;
  };
  absl::Status ready = absl::OkStatus();
  std::optional<StoredFile> input = files_.Get(batch.input_file_id);
  const std::string id_prefix = batch.id + "-";
  std::vector<bool> written_before;
  if (disk_ != nullptr && input) {
    const std::string out_path = disk_->LinesPath(batch.id, "output");
    const std::string errors_path = disk_->LinesPath(batch.id, "errors");
    // Only lines that are sound answers to this input's requests count as written.
    absl::StatusOr<KeptLines> kept =
        KeepValidLines(out_path, errors_path, id_prefix, *input->content);
    ready = kept.status();
    if (ready.ok()) {
      done_completed = kept->answered;
      done_failed = kept->failed;
      written_before = std::move(kept->written);
      if (kept->dropped > 0) {
        LOG_WARN("batch", "batch {}: {} line(s) written before dropped, their requests run again",
                 batch.id, kept->dropped);
      }
      out_file.open(out_path, std::ios::binary | std::ios::app);
      errors_file.open(errors_path, std::ios::binary | std::ios::app);
      if (!out_file || !errors_file) {
        ready = absl::InternalError(
            absl::StrCat("cannot open ", out_file ? errors_path : out_path, " to append"));
      }
      out = &out_file;
      errors = &errors_file;
    }
    if (done_completed + done_failed > 0) {
      LOG_INFO("batch", "batch {} carries on after {} requests written before", batch.id,
               done_completed + done_failed);
    }
  }
  absl::StatusOr<BatchProgress> progress = absl::NotFoundError(
      absl::StrCat("the input file '", batch.input_file_id, "' was deleted before the batch ran"));
  if (!ready.ok()) {
    progress = ready;
  } else if (input) {
    std::istringstream in(*input->content);
    BatchOptions o;
    o.max_in_flight = options_.max_in_flight;
    o.progress_interval_s = 0.5;
    o.id_prefix = id_prefix;
    o.headers = batch.auth_headers;
    o.default_priority = options_.priority;
    o.written_before = std::move(written_before);
    o.on_progress = [&](const BatchProgress& p) {
      std::lock_guard<std::mutex> lock(mu_);
      count(p);
    };
    // Kept on disk, a batch pauses at shutdown (carried on at the next start); else it stops
    // like a cancelled one.
    o.stop = [this, &batch] {
      std::lock_guard<std::mutex> lock(mu_);
      return batch.cancel || (disk_ == nullptr && stop_);
    };
    if (disk_ != nullptr) {
      o.pause = [this] {
        std::lock_guard<std::mutex> lock(mu_);
        return stop_;
      };
    }
    o.abort = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return abort_;
    };
    // OpenAI's completion window: past it nothing more is sent (the rest: batch_expired).
    o.expire = [deadline = batch.created_at + options_.completion_window_s] {
      return Now() >= deadline;
    };
    o.error_out = errors;
    progress = RunBatch(*handler, in, *out, o);
  }
  if (progress.ok() && progress->paused) {
    LOG_INFO("batch", "batch {} paused after {} of {} requests; it carries on at the next start",
             batch.id, progress->finished, batch.total);
    return;  // its record says in_progress (or cancelling)
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.finalizing_at = Now();
    if (batch.status == "in_progress") batch.status = "finalizing";
  }
  // The output and error files, from memory or the line files.
  auto lines = [&](std::ostringstream& memory, std::ofstream& file,
                   const char* kind) -> absl::StatusOr<std::string> {
    if (disk_ == nullptr) return std::move(memory).str();
    file.close();
    return ReadFileToString(disk_->LinesPath(batch.id, kind));
  };
  absl::Status stored = progress.status();
  std::string output_id, error_id;
  for (const bool answered : {true, false}) {
    if (!stored.ok()) break;
    absl::StatusOr<std::string> text = answered ? lines(out_memory, out_file, "output")
                                                : lines(errors_memory, errors_file, "errors");
    if (text.ok() && text->empty()) continue;
    absl::StatusOr<StoredFile> f =
        text.ok() ? files_.Add(absl::StrCat(batch.id, answered ? "_output" : "_error", ".jsonl"),
                               "batch_output", *std::move(text))
                  : text.status();
    stored = f.status();
    if (f.ok()) (answered ? output_id : error_id) = f->id;
  }
  std::lock_guard<std::mutex> lock(mu_);
  batch.output_file_id = output_id;
  batch.error_file_id = error_id;
  if (progress.ok()) count(*progress);
  if (!stored.ok()) {
    batch.status = "failed";
    batch.failed_at = Now();
    Json error = {{"code", "batch_failed"},
                  {"message", std::string(stored.message())},
                  {"param", nullptr},
                  {"line", nullptr}};
    batch.errors = {{"object", "list"}, {"data", Json::array({std::move(error)})}};
  } else if (progress->expired_run && !progress->stopped) {
    batch.status = "expired";
    batch.expired_at = Now();
  } else if (progress->stopped) {
    batch.status = "cancelled";
    batch.cancelled_at = Now();
    if (batch.cancelling_at == 0) batch.cancelling_at = batch.cancelled_at;  // shutdown
  } else {
    batch.status = "completed";
    batch.completed_at = Now();
  }
  // The record names the output files before the lines they were made of go.
  if (Persist(batch).ok() && disk_ != nullptr) disk_->RemoveLines(batch.id);
  LOG_INFO("batch", "batch {} {}: {} completed, {} failed of {}", batch.id, batch.status,
           batch.completed, batch.failed, batch.total);
}

}  // namespace strata::batch
