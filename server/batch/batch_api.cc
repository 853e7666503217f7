// batch_api.h: routes, the batch records and their worker.
#include "server/batch/batch_api.h"

#include <algorithm>
#include <ctime>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "core/log.h"
#include "core/status.h"
#include "server/batch/batch_line.h"
#include "server/batch/batch_runner.h"
#include "server/frontend/api_error.h"
#include "server/frontend/generation_response.h"
#include "server/frontend/openai_service.h"
#include "server/http/multipart.h"

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
  int64_t total = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  bool cancel = false;  // a cancel was asked (guarded by the API's mu_)
  // The creating request's credentials, sent with each of its requests.
  std::vector<http::Header> auth_headers;
};

namespace {

constexpr std::string_view kFiles = "/v1/files";
constexpr std::string_view kBatches = "/v1/batches";
constexpr int64_t kWindowSeconds = 24 * 3600;
constexpr size_t kMaxListedErrors = 100;

int64_t Now() { return static_cast<int64_t>(std::time(nullptr)); }

// "/v1/files/ID/content" under `base` → {"ID", "content"}; {} when `path` is `base` itself.
std::vector<std::string> Segments(std::string_view path, std::string_view base) {
  std::string_view rest = path.substr(base.size());
  if (rest.empty()) return {};
  rest.remove_prefix(1);  // '/'
  return absl::StrSplit(absl::string_view(rest.data(), rest.size()), '/');
}

// The decoded value of query parameter `key` in `target`, or empty.
std::string Query(std::string_view target, std::string_view key) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return "";
  for (absl::string_view pair :
       absl::StrSplit(absl::string_view(target.data() + q + 1, target.size() - q - 1), '&')) {
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != absl::string_view(key.data(), key.size())) continue;
    if (eq == absl::string_view::npos) return "";
    std::string out;
    const absl::string_view v = pair.substr(eq + 1);
    for (size_t i = 0; i < v.size(); ++i) {
      int hex = 0;
      if (v[i] == '%' && i + 2 < v.size() && absl::SimpleHexAtoi(v.substr(i + 1, 2), &hex)) {
        out += static_cast<char>(hex);
        i += 2;
      } else {
        out += v[i] == '+' ? ' ' : v[i];
      }
    }
    return out;
  }
  return "";
}

// ?limit=N within [1, max] (default `fallback`).
absl::StatusOr<int64_t> Limit(std::string_view target, int64_t fallback, int64_t max) {
  const std::string text = Query(target, "limit");
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

BatchApi::BatchApi(BatchApiOptions options) : options_(options), files_(options.files_store_bytes) {
  CHECK_GE(options_.max_in_flight, 1);
  worker_ = std::thread([this] { WorkerLoop(); });
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
  const std::string purpose = Query(request.target, "purpose");
  const std::string order = Query(request.target, "order");
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
                   Page(std::move(objects), Query(request.target, "after"), limit));
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
  const Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return InvalidField("", "the request body must be a JSON object");
  }
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
  } else {
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
                   Page(std::move(objects), Query(request.target, "after"), limit));
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
      {"expires_at", b.created_at + kWindowSeconds},
      {"finalizing_at", at(b.finalizing_at)},
      {"completed_at", at(b.completed_at)},
      {"failed_at", at(b.failed_at)},
      {"expired_at", nullptr},
      {"cancelling_at", at(b.cancelling_at)},
      {"cancelled_at", at(b.cancelled_at)},
      {"request_counts", {{"total", b.total}, {"completed", b.completed}, {"failed", b.failed}}},
      {"metadata", b.metadata}};
}

nlohmann::ordered_json BatchApi::Summary() const {
  Json batches = Json::object();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, b] : batches_) {
      batches[b->status] = batches.value(b->status, 0) + 1;
    }
  }
  return {{"files",
           {{"capacity_bytes", files_.capacity_bytes()},
            {"num_bytes", files_.num_bytes()},
            {"num_files", files_.num_files()}}},
          {"batches", std::move(batches)}};
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
        // Queued batches never start: they end as cancelled (nothing of them ran).
        for (const std::string& id : queue_) {
          Batch& b = *batches_.at(id);
          b.status = "cancelled";
          b.cancelling_at = b.cancelled_at = Now();
        }
        queue_.clear();
        return;
      }
      batch = batches_.at(queue_.front()).get();
      queue_.pop_front();
      batch->status = "in_progress";
      batch->in_progress_at = Now();
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
  std::optional<StoredFile> input = files_.Get(batch.input_file_id);
  std::string ok_lines, error_lines;  // the output and error files
  absl::StatusOr<BatchProgress> progress = absl::NotFoundError(
      absl::StrCat("the input file '", batch.input_file_id, "' was deleted before the batch ran"));
  if (input) {
    std::istringstream in(*input->content);
    std::ostringstream out, errors;
    BatchOptions o;
    o.max_in_flight = options_.max_in_flight;
    o.progress_interval_s = 0.5;
    o.id_prefix = batch.id + "-";
    o.headers = batch.auth_headers;
    o.default_priority = options_.priority;
    o.on_progress = [this, &batch](const BatchProgress& p) {
      std::lock_guard<std::mutex> lock(mu_);
      batch.completed = p.succeeded;
      batch.failed = p.failed + p.invalid;
    };
    o.stop = [this, &batch] {
      std::lock_guard<std::mutex> lock(mu_);
      return stop_ || batch.cancel;
    };
    o.abort = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return abort_;
    };
    o.error_out = &errors;
    progress = RunBatch(*handler, in, out, o);
    ok_lines = std::move(out).str();
    error_lines = std::move(errors).str();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.finalizing_at = Now();
    if (batch.status == "in_progress") batch.status = "finalizing";
  }
  absl::Status stored = progress.status();
  std::string output_id, error_id;
  if (stored.ok() && !ok_lines.empty()) {
    absl::StatusOr<StoredFile> f =
        files_.Add(absl::StrCat(batch.id, "_output.jsonl"), "batch_output", std::move(ok_lines));
    stored = f.status();
    if (f.ok()) output_id = f->id;
  }
  if (stored.ok() && !error_lines.empty()) {
    absl::StatusOr<StoredFile> f =
        files_.Add(absl::StrCat(batch.id, "_error.jsonl"), "batch_output", std::move(error_lines));
    stored = f.status();
    if (f.ok()) error_id = f->id;
  }
  std::lock_guard<std::mutex> lock(mu_);
  batch.output_file_id = output_id;
  batch.error_file_id = error_id;
  if (progress.ok()) {
    batch.completed = progress->succeeded;
    batch.failed = progress->failed + progress->invalid + progress->cancelled;
  }
  if (!stored.ok()) {
    batch.status = "failed";
    batch.failed_at = Now();
    Json error = {{"code", "batch_failed"},
                  {"message", std::string(stored.message())},
                  {"param", nullptr},
                  {"line", nullptr}};
    batch.errors = {{"object", "list"}, {"data", Json::array({std::move(error)})}};
  } else if (progress->stopped) {
    batch.status = "cancelled";
    batch.cancelled_at = Now();
    if (batch.cancelling_at == 0) batch.cancelling_at = batch.cancelled_at;  // shutdown
  } else {
    batch.status = "completed";
    batch.completed_at = Now();
  }
  LOG_INFO("batch", "batch {} {}: {} completed, {} failed of {}", batch.id, batch.status,
           batch.completed, batch.failed, batch.total);
}

}  // namespace strata::batch
