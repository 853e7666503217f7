// OpenAiService: routing, auth, readiness, /v1/models, /server_info, /metrics (the generation
// and tokenizer endpoints are in generation_endpoints.cc).
#include "server/frontend/openai_service.h"

#include <algorithm>
#include <span>

#include "server/frontend/api_key.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/log.h"
#include "core/status.h"
#include "server/frontend/api_error.h"
#include "server/frontend/image_inputs.h"
#include "server/frontend/messages_render.h"
#include "server/frontend/response_render.h"

namespace strata::frontend {
namespace {

struct RouteEntry {
  std::string_view path;
  std::string_view method;
};

// Every route (for 404 vs 405 and the Allow header).
constexpr RouteEntry kRoutes[] = {
    {"/health", "GET"},
    {"/ping", "GET"},
    {"/ping", "POST"},
    {"/version", "GET"},
    {"/ready", "GET"},
    {"/v1/health/ready", "GET"},
    {"/v1/models", "GET"},
    {"/v1/chat/completions", "POST"},
    {"/v1/completions", "POST"},
    {"/v1/responses", "POST"},
    {"/v1/messages", "POST"},
    {"/v1/messages/count_tokens", "POST"},
    {"/tokenize", "POST"},
    {"/detokenize", "POST"},
    {"/server_info", "GET"},
    {"/metrics", "GET"},
    {"/reset_prefix_cache", "POST"},
};

bool IsModelPath(std::string_view path) {
  return path.size() > 11 && path.substr(0, 11) == "/v1/models/";
}

// /v1/responses/{id}: GET and DELETE a stored response; /v1/responses/{id}/cancel: POST
// cancels a background one; /v1/responses/{id}/input_items: GET lists its input.
constexpr std::string_view kResponsePrefix = "/v1/responses/";
bool IsResponsePath(std::string_view path) {
  return path.size() > kResponsePrefix.size() &&
         path.substr(0, kResponsePrefix.size()) == kResponsePrefix;
}
bool IsResponseSubPath(std::string_view path, std::string_view suffix) {
  return IsResponsePath(path) && path.size() > kResponsePrefix.size() + suffix.size() &&
         path.ends_with(suffix);
}
bool IsResponseCancelPath(std::string_view path) { return IsResponseSubPath(path, "/cancel"); }
bool IsResponseInputItemsPath(std::string_view path) {
  return IsResponseSubPath(path, "/input_items");
}
// The methods a /v1/responses/{id}... path takes.
std::span<const std::string_view> ResponsePathMethods(std::string_view path) {
  static constexpr std::string_view kPost[] = {"POST"};
  static constexpr std::string_view kGet[] = {"GET"};
  static constexpr std::string_view kGetDelete[] = {"GET", "DELETE"};
  if (IsResponseCancelPath(path)) return kPost;
  if (IsResponseInputItemsPath(path)) return kGet;
  return kGetDelete;
}

}  // namespace

std::string_view RouteTemplate(std::string_view path) {
  if (IsModelPath(path)) return "/v1/models/{model}";
  if (IsResponseCancelPath(path)) return "/v1/responses/{response_id}/cancel";
  if (IsResponseInputItemsPath(path)) return "/v1/responses/{response_id}/input_items";
  if (IsResponsePath(path)) return "/v1/responses/{response_id}";
  for (const RouteEntry& r : kRoutes) {
    if (r.path == path) return r.path;
  }
  return "none";
}

http::HttpResponse JsonResponse(const Json& json, int status) {
  http::HttpResponse response;
  response.status = status;
  response.body = JsonText(json);
  return response;
}

http::HttpResponse ErrorResponse(const absl::Status& status, int retry_after_seconds) {
  const ApiError error = ToApiError(status);
  http::HttpResponse response;
  response.status = error.http_status;
  response.body = error.ToJsonString();
  if (error.http_status == 429) {
    response.headers.push_back({"Retry-After", std::to_string(retry_after_seconds)});
  }
  return response;
}

OpenAiService::OpenAiService(ServiceOptions options) : options_(std::move(options)) {}

void OpenAiService::SetModel(const ServedModel* model) { model_.store(model); }

http::HttpResponse OpenAiService::ProtocolError(int status, std::string_view code,
                                                std::string_view message) {
  ApiError error;
  error.http_status = status;
  error.message = std::string(message);
  error.type = status >= 500 ? "server_error" : "invalid_request_error";
  error.code = std::string(code);
  http::HttpResponse response;
  response.status = status;
  response.body = error.ToJsonString();
  response.close_connection = true;
  return response;
}

http::HandlerResult OpenAiService::Handle(http::HttpRequest request) {
  Result result = Route(request);
  if (result.ok()) return std::move(*result);
  const absl::Status& status = result.status();
  http::HandlerResult out;
  out.response = ErrorResponse(status, options_.retry_after_seconds);
  // Anthropic's Messages API: its own error shape (same status codes).
  if (absl::StartsWith(request.path, "/v1/messages")) {
    out.response.body = JsonText(AnthropicErrorJson(ToApiError(status)));
  }
  if (status.code() == absl::StatusCode::kFailedPrecondition) {  // 405
    std::vector<std::string> allowed;
    for (const RouteEntry& r : kRoutes) {
      if (r.path == request.path) allowed.emplace_back(r.method);
    }
    if (IsModelPath(request.path)) allowed.push_back("GET");
    if (IsResponsePath(request.path)) {
      for (std::string_view m : ResponsePathMethods(request.path)) allowed.emplace_back(m);
    }
    out.response.headers.push_back({"Allow", absl::StrJoin(allowed, ", ")});
  }
  if (out.response.status >= 500) {
    LOG_WARN("api", "{} {} -> {}: {}", request.method, request.path, out.response.status,
             std::string(status.message()));
  }
  return out;
}

absl::Status OpenAiService::CheckAuth(const http::HttpRequest& request) const {
  // /v1/* and the admin route need the key.
  if (options_.api_key.empty() ||
      (!absl::StartsWith(request.path, "/v1/") && request.path != "/reset_prefix_cache")) {
    return absl::OkStatus();
  }
  const std::string* header = request.FindHeader("authorization");
  // Anthropic's clients send the key as `x-api-key`.
  const std::string* x_api_key = request.FindHeader("x-api-key");
  if (!header && x_api_key) {
    if (!KeyMatches(*x_api_key, options_.api_key)) {
      return ApiErrorStatus(absl::StatusCode::kUnauthenticated, "incorrect API key provided");
    }
    return absl::OkStatus();
  }
  if (!header) {
    return ApiErrorStatus(absl::StatusCode::kUnauthenticated,
                          "missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: "
                          "<key>')");
  }
  if (!absl::StartsWith(*header, "Bearer ") && !absl::StartsWith(*header, "bearer ")) {
    return ApiErrorStatus(absl::StatusCode::kUnauthenticated,
                          "the Authorization header must be 'Bearer <key>'");
  }
  if (!BearerMatches(*header, options_.api_key)) {
    return ApiErrorStatus(absl::StatusCode::kUnauthenticated, "incorrect API key provided");
  }
  return absl::OkStatus();
}

OpenAiService::Result OpenAiService::Route(const http::HttpRequest& request) {
  const std::string& path = request.path;
  const std::string& method = request.method;
  if (options_.extra_routes_serve && options_.extra_routes_serve(path)) {
    RETURN_IF_ERROR(CheckAuth(request));
    ASSIGN_OR_RETURN(http::HttpResponse response, options_.extra_routes_handle(request));
    return http::HandlerResult{std::move(response), nullptr};
  }
  bool path_known = IsModelPath(path) || IsResponsePath(path);
  bool route_found = IsModelPath(path) && method == "GET";
  if (IsResponsePath(path)) {
    for (std::string_view m : ResponsePathMethods(path)) route_found = route_found || m == method;
  }
  for (const RouteEntry& r : kRoutes) {
    if (r.path != path) continue;
    path_known = true;
    route_found = route_found || r.method == method;
  }
  if (!path_known) {
    return ApiErrorStatus(absl::StatusCode::kNotFound,
                          absl::StrCat("no route for ", method, " ", path), {}, "unknown_url");
  }
  RETURN_IF_ERROR(CheckAuth(request));
  if (!route_found) {
    return ApiErrorStatus(absl::StatusCode::kFailedPrecondition,
                          absl::StrCat("method ", method, " is not allowed for ", path));
  }
  // /ping: vLLM's (SageMaker's) liveness probe, as /health.
  if (path == "/health" || path == "/ping") {
    return http::HandlerResult{JsonResponse({{"status", "ok"}}), nullptr};
  }
  if (path == "/version") {
    return http::HandlerResult{JsonResponse({{"version", options_.version}}), nullptr};
  }
  if (path == "/ready" || path == "/v1/health/ready") return Ready();
  if (path == "/v1/models" || IsModelPath(path)) return Models(request);
  if (path == "/v1/chat/completions") return ChatCompletions(request);
  if (path == "/v1/completions") return Completions(request);
  if (path == "/v1/responses") return Responses(request);
  if (path == "/v1/messages") return Messages(request);
  if (path == "/v1/messages/count_tokens") return CountMessageTokens(request);
  if (IsResponsePath(path)) return StoredResponseRoute(request);
  if (path == "/tokenize") return Tokenize(request);
  if (path == "/detokenize") return Detokenize(request);
  if (path == "/server_info") return ServerInfo();
  if (path == "/reset_prefix_cache") return ResetPrefixCache();
  return Metrics();
}

absl::StatusOr<const ServedModel*> OpenAiService::ReadyModel() const {
  const ServedModel* model = model_.load();
  if (model == nullptr) {
    return ApiErrorStatus(absl::StatusCode::kUnavailable, "the model is still loading", {},
                          "model_loading");
  }
  return model;
}

absl::StatusOr<const ServedModel*> OpenAiService::ModelFor(const std::string& requested) const {
  ASSIGN_OR_RETURN(const ServedModel* model, ReadyModel());
  if (requested.empty()) return model;
  for (const std::string& name : model->names) {
    if (name == requested) return model;
  }
  return ApiErrorStatus(absl::StatusCode::kNotFound,
                        absl::StrCat("The model '", requested, "' does not exist (served: '",
                                     absl::StrJoin(model->names, "', '"), "')"),
                        "model", "model_not_found");
}

OpenAiService::Result OpenAiService::Ready() const {
  if (draining_) {
    return ApiErrorStatus(absl::StatusCode::kUnavailable, "the server is shutting down", {},
                          "server_draining");
  }
  RETURN_IF_ERROR(ReadyModel().status());
  return http::HandlerResult{JsonResponse({{"status", "ready"}}), nullptr};
}

OpenAiService::Result OpenAiService::Models(const http::HttpRequest& request) const {
  ASSIGN_OR_RETURN(const ServedModel* model, ReadyModel());
  auto card = [&](const std::string& name) {
    Json item = Json::object();
    item["id"] = name;
    item["object"] = "model";
    item["created"] = model->created;
    item["owned_by"] = "strata";
    item["root"] = model->root;
    item["parent"] = nullptr;
    item["max_model_len"] = model->max_model_len;
    item["permission"] = Json::array();
    return item;
  };
  if (IsModelPath(request.path)) {
    const std::string id = request.path.substr(11);
    ASSIGN_OR_RETURN(const ServedModel* found, ModelFor(id));
    (void)found;
    return http::HandlerResult{JsonResponse(card(id)), nullptr};
  }
  Json data = Json::array();
  for (const std::string& name : model->names) data.push_back(card(name));
  return http::HandlerResult{JsonResponse({{"object", "list"}, {"data", std::move(data)}}),
                             nullptr};
}

OpenAiService::Result OpenAiService::ServerInfo() const {
  Json info = server_info_ ? server_info_() : Json::object();
  info["draining"] = draining_.load();
  info["num_requests_in_flight"] = in_flight_->load();
  return http::HandlerResult{JsonResponse(info), nullptr};
}

OpenAiService::Result OpenAiService::ResetPrefixCache() const {
  if (!prefix_cache_resetter_) {
    return ApiErrorStatus(absl::StatusCode::kNotFound, "prefix cache reset is not enabled", {},
                          "unknown_url");
  }
  ASSIGN_OR_RETURN(const std::vector<scheduler::Scheduler::PrefixCacheReset> ranks,
                   prefix_cache_resetter_());
  int64_t blocks = 0, checkpoints = 0;
  for (const scheduler::Scheduler::PrefixCacheReset& r : ranks) {
    blocks += r.blocks;
    checkpoints += r.checkpoints;
  }
  return http::HandlerResult{JsonResponse({{"status", "ok"},
                                           {"num_ranks", ranks.size()},
                                           {"num_blocks_dropped", blocks},
                                           {"num_checkpoints_dropped", checkpoints}}),
                             nullptr};
}

OpenAiService::Result OpenAiService::Metrics() const {
  if (!metrics_) {
    return ApiErrorStatus(absl::StatusCode::kNotFound, "metrics are not enabled", {},
                          "unknown_url");
  }
  http::HttpResponse response;
  response.content_type = "text/plain; version=0.0.4; charset=utf-8";
  response.body = metrics_();
  return http::HandlerResult{std::move(response), nullptr};
}

std::vector<http::Header> SseHeaders() {
  // No caching; nginx must not buffer the events.
  return {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
}

OpenAiService::Result OpenAiService::ChatOffTheIoThread(const ChatCompletionRequest& req,
                                                        ApiKind kind,
                                                        std::function<Result()> work) {
  const std::vector<ImagePart> parts = FindImageParts(req.messages);
  const bool fetches = std::any_of(parts.begin(), parts.end(), [](const ImagePart& part) {
    return !absl::StartsWith(part.url, "data:");
  });
  if (!fetches) return work();
  std::call_once(deferred_once_, [this] { deferred_work_ = std::make_unique<DeferredWork>(4); });
  http::HttpResponse head;
  if (req.gen.stream) {
    head.content_type = "text/event-stream";
    head.headers = SseHeaders();
  }
  const bool anthropic = kind == ApiKind::kMessages;
  const int retry_after = options_.retry_after_seconds;
  DeferredErrorFormat format;
  format.error_response = [anthropic, retry_after](const absl::Status& status) {
    http::HttpResponse out = ErrorResponse(status, retry_after);
    if (anthropic) out.body = JsonText(AnthropicErrorJson(ToApiError(status)));
    return out;
  };
  format.error_event = [anthropic](const absl::Status& status) {
    const ApiError error = ToApiError(status);
    if (anthropic)
      return absl::StrCat("event: error\ndata: ", JsonText(AnthropicErrorJson(error)), "\n\n");
    return SseData(error.ToJson()) + std::string(kSseDone);
  };
  return Defer(*deferred_work_, req.gen.stream, std::move(head), std::move(format),
               std::move(work));
}

OpenAiService::Result OpenAiService::Generate(const ServedModel& model, GenerationSpec spec,
                                              std::shared_ptr<ImageEncodeJob> images) {
  const bool stream = spec.stream;
  ResponseHooks hooks{in_flight_, options_.on_choice_finished};
  std::unique_ptr<GenerationResponse> response;
  if (images != nullptr) {
    response = GenerationResponse::SubmitWhenEncoded(model, std::move(spec), std::move(hooks),
                                                     std::move(images));
  } else {
    ASSIGN_OR_RETURN(response,
                     GenerationResponse::Submit(model, std::move(spec), std::move(hooks)));
  }
  http::HandlerResult result;
  if (stream) {
    result.response.content_type = "text/event-stream";
    result.response.headers = SseHeaders();
  }
  result.pending = std::move(response);
  return result;
}

}  // namespace strata::frontend
