// The OpenAI-compatible REST surface (docs/api.md): routing, auth, readiness and draining, and the
// endpoints. Implements http::HttpHandler, so it is tested without sockets.
//
//   GET  /health, GET|POST /ping        200 while the process runs (also while loading)
//   GET  /version                      {"version": ...}
//   GET  /ready, /v1/health/ready      200 when a model is set and not draining, else 503
//   GET  /v1/models, /v1/models/{id}   the served model (with max_model_len)
//   POST /v1/chat/completions          chat (stream or not, n, logprobs, tools, ...)
//   POST /v1/completions               text completion (string / ids / lists of either)
//   POST /v1/responses                 OpenAI's Responses API, served as a chat completion
//   GET|DELETE /v1/responses/{id}      a stored response; POST /v1/responses/{id}/cancel
//                                      cancels a background one
//   POST /v1/messages                  Anthropic's Messages API, served as a chat completion
//   POST /v1/messages/count_tokens     its prompt's token count ({"input_tokens": N})
//   POST /tokenize, /detokenize        vLLM shapes
//   GET  /server_info, /metrics        from providers set by the process (404 when unset)
//   POST /reset_prefix_cache           vLLM's: forget the cached prefixes no request holds
//                                      (between benchmark runs); needs the API key when set
//   /v1/files…, /v1/batches…           OpenAI's Files and Batches API when the process adds it
//                                      (ServiceOptions::extra_routes_*, server/batch/batch_api.h)
// Errors are OpenAI error objects (api_error.h), Anthropic's on /v1/messages*
// (messages_render.h); an unknown path is 404, a known path with the wrong method 405 (with
// Allow). With an API key, /v1/* needs `Authorization: Bearer KEY` or `x-api-key: KEY`.
// Thread-safe: Handle runs concurrently on the I/O threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/scheduler.h"
#include "server/frontend/background_responses.h"
#include "server/frontend/deferred_response.h"
#include "server/frontend/generation_response.h"
#include "server/frontend/openai_request.h"
#include "server/frontend/response_store.h"
#include "server/frontend/served_model.h"
#include "server/http/http_types.h"

namespace strata::frontend {

struct ServiceOptions {
  std::string api_key;              // empty: no authentication
  RequestLimits limits;             // vocab_size is taken from the model
  int retry_after_seconds = 1;      // on 429
  std::string version = "unknown";  // GET /version
  // Per finished choice (metrics, request log); may be empty.
  std::function<void(const server::RequestTimings&)> on_choice_finished;
  // /v1/responses `store` and previous_response_id, GET / DELETE /v1/responses/{id}; null:
  // nothing is stored (previous_response_id is refused). Must outlive the service.
  ResponseStore* response_store = nullptr;
  // /v1/responses `background: true` (with a response_store) and POST
  // /v1/responses/{id}/cancel; null: background is refused. Must outlive the service; stopped
  // (BackgroundResponses::Stop) before the engine goes.
  BackgroundResponses* background_responses = nullptr;
  // Routes another module serves (the Files and Batches API, server/batch/batch_api.h):
  // requests whose path `serves` accepts go to `handle` after the API key check, and its
  // errors are rendered as the service's. Unset: those paths are 404.
  std::function<bool(std::string_view path)> extra_routes_serve;
  std::function<absl::StatusOr<http::HttpResponse>(const http::HttpRequest&)> extra_routes_handle;
};

// The headers of an SSE response.
std::vector<http::Header> SseHeaders();

class OpenAiService : public http::HttpHandler {
 public:
  explicit OpenAiService(ServiceOptions options);

  // Makes the model servable (ready). `model` must outlive the service; set once.
  void SetModel(const ServedModel* model);
  // Readiness goes to 503 and new generation requests are refused (503 server_draining);
  // requests in flight continue.
  void StartDraining() { draining_ = true; }
  bool draining() const { return draining_; }
  // Generation responses alive (submitted and not yet fully written or cancelled).
  int64_t num_in_flight() const { return in_flight_->load(); }

  // Runs again, from their start and under their ids, the background responses a previous
  // process accepted and did not finish (kept by a ResponseStore over a directory); one that
  // cannot run now (its request no longer fits this server's model or limits) ends "failed",
  // saying why. Call once the model is set. Returns how many run.
  int ResumeBackgroundResponses();

  // Body of /server_info (the service adds "draining" and "num_requests_in_flight").
  void SetServerInfoProvider(std::function<Json()> provider) { server_info_ = std::move(provider); }
  // Prometheus text for /metrics.
  void SetMetricsProvider(std::function<std::string()> provider) { metrics_ = std::move(provider); }
  // POST /reset_prefix_cache (404 when unset): one result per rank of the process.
  using PrefixCacheResetter =
      std::function<absl::StatusOr<std::vector<scheduler::Scheduler::PrefixCacheReset>>()>;
  void SetPrefixCacheResetter(PrefixCacheResetter resetter) {
    prefix_cache_resetter_ = std::move(resetter);
  }

  http::HandlerResult Handle(http::HttpRequest request) override;
  http::HttpResponse ProtocolError(int status, std::string_view code,
                                   std::string_view message) override;

 private:
  using Result = absl::StatusOr<http::HandlerResult>;

  Result Route(const http::HttpRequest& request);
  absl::Status CheckAuth(const http::HttpRequest& request) const;
  absl::StatusOr<const ServedModel*> ModelFor(const std::string& requested) const;
  absl::StatusOr<const ServedModel*> ReadyModel() const;

  Result ChatCompletions(const http::HttpRequest& request);
  Result Responses(const http::HttpRequest& request);
  Result Messages(const http::HttpRequest& request);
  Result CountMessageTokens(const http::HttpRequest& request);
  // Chat, Responses and Messages requests from here on: prompt, choices, submission.
  // `meta`: where the response's id and creation time go; one arriving with an id gives them
  // (a resumed background response keeps its own).
  Result GenerateChat(const ChatCompletionRequest& req, ApiKind kind, Json responses_echo,
                      std::function<void(const Json&, const FinalChoice&)> on_responses_done = {},
                      ResponseMeta* meta = nullptr);
  // Background mode: stores the "queued" response with `request` (what a restarted server runs
  // again: ResponseStore's StoredResponse::request) and hands `pending` to the
  // BackgroundResponses. Returns that queued object; the store's error when it cannot be kept,
  // 503 when draining.
  absl::StatusOr<Json> StartBackground(const ResponseMeta& meta, const ResponsesRequest& req,
                                       Json request,
                                       std::unique_ptr<http::PendingResponse> pending);
  // A background response a previous process accepted, run again from its start under its id.
  absl::Status ResumeBackground(const std::string& id, const StoredResponse& stored);
  Result CancelResponse(const std::string& id);
  // GET /v1/responses/{id}?stream=true[&starting_after=N]: a streamed background response's
  // events after N, then live.
  Result FollowResponse(const std::string& id, const std::string& starting_after);
  // GET /v1/responses/{id}/input_items[?after=ITEM&limit=N&order=asc|desc]: OpenAI's list of
  // the input items a stored response was made from (20 a page, newest first by default).
  Result ListInputItems(const std::string& id, const std::string& target);
  Result StoredResponseRoute(const http::HttpRequest& request);
  Result Completions(const http::HttpRequest& request);
  Result Tokenize(const http::HttpRequest& request);
  Result Detokenize(const http::HttpRequest& request);
  Result Models(const http::HttpRequest& request) const;
  Result Ready() const;
  Result ServerInfo() const;
  Result ResetPrefixCache() const;
  Result Metrics() const;
  // Submits the choices now, or (with `images`) once the encoder thread has their rows.
  Result Generate(const ServedModel& model, GenerationSpec spec,
                  std::shared_ptr<ImageEncodeJob> images = nullptr);
  // A chat-shaped request with an image to fetch (an http(s) or file:// URL: blocking I/O and
  // decoding) is answered by `work` on a DeferredWork thread (deferred_response.h); others
  // (data: URLs, no image) run `work` here. `kind` shapes the errors.
  Result ChatOffTheIoThread(const ChatCompletionRequest& req, ApiKind kind,
                            std::function<Result()> work);

  const ServiceOptions options_;
  std::atomic<const ServedModel*> model_{nullptr};
  std::atomic<bool> draining_{false};
  std::shared_ptr<std::atomic<int64_t>> in_flight_ = std::make_shared<std::atomic<int64_t>>(0);
  std::function<Json()> server_info_;
  std::function<std::string()> metrics_;
  PrefixCacheResetter prefix_cache_resetter_;
  // Threads for requests with images to fetch (created with the first; last: joined first, while
  // everything their work uses is still here).
  std::once_flag deferred_once_;
  std::unique_ptr<DeferredWork> deferred_work_;
};

// The route `path` belongs to, for metrics labels: the path itself for a fixed route,
// "/v1/models/{model}" and "/v1/responses/{response_id}" for those, "none" for a path that is
// not served (whatever its method).
std::string_view RouteTemplate(std::string_view path);

// An HttpResponse holding `json` (status 200 unless given).
http::HttpResponse JsonResponse(const Json& json, int status = 200);
// The response for an error status (adds Retry-After on 429).
http::HttpResponse ErrorResponse(const absl::Status& status, int retry_after_seconds);

}  // namespace strata::frontend
