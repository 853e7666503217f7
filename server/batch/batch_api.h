// OpenAI's Files and Batches APIs, served by `strata serve` next to its online traffic: a client
// uploads a batch input file (the lines `strata run-batch` reads), creates a batch from it,
// polls it and downloads its output and error files — what `client.files.create`,
// `client.batches.create`, `client.batches.retrieve` and `client.files.content` do.
//
//   POST   /v1/files                 multipart/form-data: file, purpose "batch" → file object
//   GET    /v1/files                 ?purpose= &order=asc|desc &after= &limit= → list
//   GET    /v1/files/{file_id}       file object
//   GET    /v1/files/{file_id}/content   the file's bytes
//   DELETE /v1/files/{file_id}       {"id", "object": "file", "deleted": true}
//   POST   /v1/batches               {"input_file_id", "endpoint", "completion_window": "24h",
//                                     "metadata"} → batch object
//   GET    /v1/batches               ?after= &limit= → list, newest first
//   GET    /v1/batches/{batch_id}    batch object (status, request_counts, output_file_id, …)
//   POST   /v1/batches/{batch_id}/cancel   → "cancelling", then "cancelled"
//
// A batch is checked when it is created (the file exists and is a batch input; every line is a
// request to the batch's endpoint with a custom_id — else the batch is "failed" with the
// lines' errors), then runs in creation order, one batch at a time, on a worker thread through
// the same handler as online requests (batch_runner.h), with at most `max_in_flight` requests
// in flight so that online requests keep the rest of the engine's room (and, for lines that set
// none, priority `priority`: behind online requests under priority scheduling). When it ends, its
// answered requests (2xx) are the output file and the others (API errors, lines not sent) the
// error file, both in input order. Cancelling stops reading lines; requests in flight finish
// and are in the files. A batch still running 24 hours after its creation expires: nothing
// more is sent, the unsent requests are "batch_expired" lines of its error file. Each request
// carries the batch creator's Authorization / x-api-key headers.
//
// Files and batches are kept in memory (within `files_store_bytes`) and, with a directory
// (`dir`, --files-dir: batch_store.h), on disk before they are accepted, so that they outlive
// the process: at shutdown the running batch stops reading (RequestStop), its requests in
// flight finish or, past the drain, are cancelled (Stop) — and it carries on at the next start
// from its first unwritten line, each request answered once, while queued batches wait for that
// start. A crash loses at most the requests in flight (sent again). Every line kept from before
// is checked first (batch_store.h KeepValidLines): one that is torn, not JSON, not an answer to
// one of the input's requests or a repeat is dropped and its request runs again (its line then
// comes after the others). The line files, like everything in the directory, are 0600. Without
// a directory a running batch ends "cancelled" at shutdown and queued ones with it.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "server/batch/file_store.h"
#include "server/http/http_types.h"
#include "server/store_metrics.h"

namespace strata::batch {

struct BatchApiOptions {
  int64_t files_store_bytes = int64_t{1} << 30;  // all files together
  int64_t max_in_flight = 32;                    // a running batch's requests at a time, >= 1
  int64_t max_lines = 50000;                     // requests per input file (OpenAI's limit)
  // The priority of batch requests that set none: behind online ones (0) with
  // --scheduling-policy priority; no effect with fcfs.
  int priority = 1;
  // OpenAI's completion_window ("24h", the only one): a batch not done by created_at + this
  // sends nothing more, ends "expired", its unsent requests "batch_expired" error lines.
  int64_t completion_window_s = 24 * 3600;
  // Also keep files and batches here (BatchApi::Open); empty: memory only.
  std::string dir;
  // The headers of requests of batches loaded from `dir` (credentials are not written to disk:
  // the server's own key).
  std::vector<http::Header> resumed_headers;
};

class BatchStore;

class BatchApi {
 public:
  // In memory only (options.dir empty).
  explicit BatchApi(BatchApiOptions options);
  // With options.dir: opens and locks it and loads its files and batches (the unfinished ones
  // run again once SetHandler is called). The directory's error when it cannot be used.
  static absl::StatusOr<std::unique_ptr<BatchApi>> Open(BatchApiOptions options);
  ~BatchApi();  // Stop()
  BatchApi(const BatchApi&) = delete;
  BatchApi& operator=(const BatchApi&) = delete;

  // Where batches' requests go (the OpenAI service, once its model is loaded: batches created
  // before wait); set once; must outlive Stop().
  void SetHandler(http::HttpHandler* handler);

  // Whether `path` is one of the routes above.
  static bool Serves(std::string_view path);
  // The route template of such a path, for metrics labels ("/v1/files/{file_id}").
  static std::string_view RouteTemplate(std::string_view path);

  // Answers a request whose path Serves() accepts (the caller checked the API key). Errors are
  // statuses carrying the OpenAI error fields (server/frontend/api_error.h); a wrong method is
  // a 405 response with Allow.
  absl::StatusOr<http::HttpResponse> Handle(const http::HttpRequest& request);

  // No batch reads another line after this (non-blocking); the running batch ends "cancelled"
  // once its requests in flight finish.
  void RequestStop();
  // RequestStop, cancels the running batch's requests in flight (a server draining past its
  // timeout), and waits for the worker. Idempotent.
  void Stop();

  const FileStore& files() const { return files_; }
  // For /server_info: {"files": {"capacity_bytes", "num_bytes", "num_files", "dir"},
  // "batches": {status: count, …}, "batch_requests_pending": n}.
  nlohmann::ordered_json Summary() const;
  // For /metrics (server/store_metrics.h): batches by status, the requests of unfinished ones
  // not answered yet, the files' bytes.
  server::BatchCounts Counts() const;

 private:
  using Json = nlohmann::ordered_json;
  struct Batch;

  BatchApi(BatchApiOptions options, std::unique_ptr<BatchStore> disk);
  // Loads the directory's batches; queues the unfinished ones (constructor).
  void LoadBatches();
  // Writes the batch's record to the directory, if any (mu_ held).
  absl::Status Persist(const Batch& batch) const;
  // A batch from its record, or null (a warning names what is wrong).
  static std::unique_ptr<Batch> FromRecord(const Json& record);

  absl::StatusOr<http::HttpResponse> UploadFile(const http::HttpRequest& request);
  absl::StatusOr<http::HttpResponse> ListFiles(const http::HttpRequest& request) const;
  absl::StatusOr<http::HttpResponse> CreateBatch(const http::HttpRequest& request);
  absl::StatusOr<http::HttpResponse> ListBatches(const http::HttpRequest& request) const;
  absl::StatusOr<http::HttpResponse> CancelBatch(const std::string& id);
  // The batch's JSON object (mu_ held).
  Json BatchObject(const Batch& batch) const;
  // Every line of the input to `batch`'s endpoint with a custom_id: the errors as OpenAI lists
  // them ({"code", "message", "line"}), at most 100; the number of requests into *lines.
  Json CheckInput(const Batch& batch, const std::string& content, int64_t* lines) const;

  void WorkerLoop();
  void Run(Batch& batch);

  const BatchApiOptions options_;
  const std::unique_ptr<BatchStore> disk_;  // null: memory only
  FileStore files_;
  mutable std::mutex mu_;
  http::HttpHandler* handler_ = nullptr;  // guarded by mu_
  std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<Batch>> batches_;  // guarded by mu_
  std::vector<std::string> batch_order_;                   // by creation; guarded by mu_
  std::deque<std::string> queue_;                          // to run; guarded by mu_
  int64_t next_seq_ = 0;                                   // guarded by mu_
  bool stop_ = false;                                      // guarded by mu_
  bool abort_ = false;                                     // guarded by mu_
  std::thread worker_;
};

}  // namespace strata::batch
