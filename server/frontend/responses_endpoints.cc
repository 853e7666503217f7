// OpenAiService: /v1/responses (OpenAI's Responses API over the chat path), its stored
// responses (GET / DELETE /v1/responses/{id}, GET …/input_items) and background mode (POST
// …/cancel, GET ?stream=true&starting_after=N; background_responses.h).
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "core/status.h"
#include "server/frontend/api_error.h"
#include "server/frontend/internal/endpoint_steps.h"
#include "server/frontend/json_fields.h"
#include "server/frontend/openai_service.h"
#include "server/frontend/responses_render.h"
#include "server/http/query.h"

namespace strata::frontend {
namespace {

using internal::ApplyRequestIdHeader;
using internal::Draining;
using internal::LimitsFor;

// An SSE response over `events`.
http::HandlerResult EventStream(std::unique_ptr<http::PendingResponse> events) {
  http::HandlerResult result;
  result.response.content_type = "text/event-stream";
  result.response.headers = SseHeaders();
  result.pending = std::move(events);
  return result;
}

// The reply of a finished response as the chat message a continuation shows the model.
Json AssistantMessage(const FinalChoice& choice) {
  Json message = {{"role", "assistant"}, {"content", choice.text}};
  if (!choice.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCall& call : choice.tool_calls) {
      calls.push_back({{"id", call.id},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    }
    message["tool_calls"] = std::move(calls);
  }
  return message;
}

// Puts `entry` under `id`; a failure (the entry larger than the store, the disk) is logged: the
// response itself went on.
void Keep(ResponseStore* store, const std::string& id, StoredResponse entry) {
  const absl::Status kept = store->Put(id, std::move(entry));
  if (!kept.ok()) LOG_WARN("responses", "response {} not stored: {}", id, kept.ToString());
}

// Stores a finished response with its conversation (the reply appended) and input items under
// its id.
std::function<void(const Json&, const FinalChoice&)> StoreWhenDone(ResponseStore* store,
                                                                   const ResponsesRequest& req) {
  return [store, conversation = req.conversation, items = req.input_items](
             const Json& response, const FinalChoice& choice) {
    Json messages = conversation;
    messages.push_back(AssistantMessage(choice));
    Keep(store, response["id"].get<std::string>(), {response, std::move(messages), Json(), items});
  };
}

// `entry` ended as `response` (failed, cancelled): nothing of it runs again.
StoredResponse Ended(StoredResponse entry, Json response) {
  entry.response = std::move(response);
  entry.request = Json();
  return entry;
}

}  // namespace

OpenAiService::Result OpenAiService::Responses(const http::HttpRequest& request) {
  if (draining_) return Draining();
  ASSIGN_OR_RETURN(const ServedModel* model, ReadyModel());
  ASSIGN_OR_RETURN(Json body, ParseJsonBody(request.body));
  ResponseStore* store = options_.response_store;
  Json history = Json::array();
  // A previous_response_id of another type is ParseResponsesRequest's error.
  if (auto it = body.find("previous_response_id"); it != body.end() && it->is_string()) {
    if (store == nullptr) {
      return InvalidField("previous_response_id",
                          "'previous_response_id' is not supported: this server stores no "
                          "responses (--responses-store-memory 0); send the whole conversation "
                          "in 'input'",
                          "unsupported_value");
    }
    std::optional<StoredResponse> previous = store->Get(it->get_ref<const std::string&>());
    if (!previous) {
      return InvalidField("previous_response_id",
                          absl::StrCat("Previous response with id '", it->get<std::string>(),
                                       "' not found (never stored, deleted, or evicted to keep "
                                       "the store within --responses-store-memory)"),
                          "previous_response_not_found");
    }
    if (const Json status = previous->response.value("status", Json());
        status == "queued" || status == "in_progress") {
      return InvalidField("previous_response_id",
                          absl::StrCat("Previous response with id '", it->get<std::string>(),
                                       "' is still ", status.get<std::string>(),
                                       " (background); continue it once it has completed"));
    }
    history = std::move(previous->messages);
  }
  // What a restarted server runs again of a background response, with the history it started
  // from (the response previous_response_id names may be gone by then), and a seed of its own
  // when it names none: the run after a restart draws what the first drew, so a stream resumed
  // across the restart goes on where it was wherever the engine's logits repeat.
  Json background_request;
  if (auto it = body.find("background"); it != body.end() && *it == true) {
    if (auto seed = body.find("seed"); seed == body.end() || seed->is_null()) {
      body["seed"] = static_cast<int64_t>(RandomSeed() >> 1);
    }
    background_request = {{"body", body}, {"history", history}};
  }
  ASSIGN_OR_RETURN(ResponsesRequest req,
                   ParseResponsesRequest(body, LimitsFor(options_, *model), history));
  RETURN_IF_ERROR(ApplyRequestIdHeader(request, &req.chat.gen));
  const bool stored = req.store && store != nullptr;
  req.echo["store"] = stored;
  if (req.background && (!stored || options_.background_responses == nullptr)) {
    return InvalidField("background",
                        "'background' is not supported: this server stores no responses "
                        "(--responses-store-memory 0)",
                        "unsupported_value");
  }
  if (!req.background) {
    return ChatOffTheIoThread(req.chat, ApiKind::kResponses, [this, req, store, stored] {
      return GenerateChat(req.chat, ApiKind::kResponses, req.echo,
                          stored ? StoreWhenDone(store, req) : nullptr);
    });
  }
  // Background: the queued object comes back at once (its images fetched here).
  ResponseMeta meta;
  ASSIGN_OR_RETURN(http::HandlerResult result,
                   GenerateChat(req.chat, ApiKind::kResponses, req.echo,
                                stored ? StoreWhenDone(store, req) : nullptr, &meta));
  const bool stream = result.pending->streaming();
  ASSIGN_OR_RETURN(Json queued, StartBackground(meta, req, std::move(background_request),
                                                std::move(result.pending)));
  if (!stream) return http::HandlerResult{JsonResponse(queued), nullptr};
  // Streamed: this request follows the events from the first; a client that loses them
  // resumes with GET /v1/responses/{id}?stream=true&starting_after=N.
  return EventStream(options_.background_responses->Follow(meta.id, -1));
}

int OpenAiService::ResumeBackgroundResponses() {
  ResponseStore* store = options_.response_store;
  if (store == nullptr || options_.background_responses == nullptr) return 0;
  int resumed = 0;
  for (const std::string& id : store->TakeUnfinished()) {
    std::optional<StoredResponse> stored = store->Get(id);
    if (!stored || stored->request.is_null()) continue;  // deleted or ended since the load
    const absl::Status status = ResumeBackground(id, *stored);
    if (status.ok()) {
      ++resumed;
      continue;
    }
    LOG_WARN("responses", "background response {} cannot run again after the restart: {}", id,
             status.ToString());
    Json failed = stored->response;
    failed["status"] = "failed";
    failed["error"] = {
        {"code", "server_error"},
        {"message", absl::StrCat("the server restarted while this response was ",
                                 stored->response.value("status", "queued"),
                                 ", and its request cannot run again: ", status.message())}};
    Keep(store, id, Ended(*std::move(stored), std::move(failed)));
  }
  if (resumed > 0) LOG_INFO("responses", "{} background responses run again", resumed);
  return resumed;
}

absl::Status OpenAiService::ResumeBackground(const std::string& id, const StoredResponse& stored) {
  ASSIGN_OR_RETURN(const ServedModel* model, ReadyModel());
  const Json& request = stored.request;
  if (!request.contains("body") || !request["body"].is_object() || !request.contains("history") ||
      !request["history"].is_array()) {
    return absl::DataLossError("its kept request lacks \"body\" or \"history\"");
  }
  ASSIGN_OR_RETURN(
      ResponsesRequest req,
      ParseResponsesRequest(request["body"], LimitsFor(options_, *model), request["history"]));
  req.echo["store"] = true;
  ResponseMeta meta;
  meta.id = id;
  meta.created = stored.response.value("created_at", int64_t{0});
  ASSIGN_OR_RETURN(http::HandlerResult result,
                   GenerateChat(req.chat, ApiKind::kResponses, req.echo,
                                StoreWhenDone(options_.response_store, req), &meta));
  return StartBackground(meta, req, request, std::move(result.pending)).status();
}

absl::StatusOr<Json> OpenAiService::StartBackground(
    const ResponseMeta& meta, const ResponsesRequest& req, Json request,
    std::unique_ptr<http::PendingResponse> pending) {
  ResponseStore* store = options_.response_store;
  Json queued = ResponseObjectJson(meta, req.echo, nullptr, nullptr);
  queued["status"] = "queued";
  // Kept before it runs (the final object replaces it): a server that stops before it ends
  // runs it again.
  const StoredResponse entry = {queued, req.conversation, std::move(request), req.input_items};
  RETURN_IF_ERROR(store->Put(meta.id, entry));
  BackgroundResponses::Callbacks callbacks;
  callbacks.on_started = [store, id = meta.id] {
    std::optional<StoredResponse> stored = store->Get(id);
    if (!stored || stored->response["status"] != "queued") return;
    stored->response["status"] = "in_progress";
    Keep(store, id, *std::move(stored));
  };
  // A response that ended well was stored by itself (on_responses_done); one still queued or
  // in progress ended with an error: "failed", with the error it was answered (its body, or a
  // stream's `error` event).
  callbacks.on_finished = [store, id = meta.id, entry](const http::HttpResponse& response) {
    std::optional<StoredResponse> stored = store->Get(id);
    if (stored && stored->response["status"] != "queued" &&
        stored->response["status"] != "in_progress") {
      return;
    }
    constexpr std::string_view kErrorEvent = "event: error\ndata: ";
    std::string_view text = response.body;
    if (const size_t event = text.rfind(kErrorEvent); event != text.npos) {
      text = text.substr(event + kErrorEvent.size());
    }
    const Json body = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    Json error = body.is_object() ? body.value("error", body) : Json(Json::object());
    if (!error.is_object()) error = Json::object();
    Json failed = entry.response;
    failed["status"] = "failed";
    failed["error"] = {{"code", error.value("code", Json("server_error"))},
                       {"message", error.value("message", Json("the response failed"))}};
    Keep(store, id, Ended(entry, std::move(failed)));
  };
  if (!options_.background_responses->Add(meta.id, std::move(pending), std::move(callbacks))) {
    store->Erase(meta.id);
    return Draining();
  }
  return queued;
}

OpenAiService::Result OpenAiService::FollowResponse(const std::string& id,
                                                    const std::string& starting_after) {
  int64_t after = -1;
  if (!starting_after.empty() && (!absl::SimpleAtoi(starting_after, &after) || after < 0)) {
    return InvalidField("starting_after",
                        absl::StrCat("'starting_after' must be a sequence number (an integer "
                                     ">= 0); got '",
                                     starting_after, "'"));
  }
  std::unique_ptr<http::PendingResponse> reader =
      options_.background_responses != nullptr ? options_.background_responses->Follow(id, after)
                                               : nullptr;
  if (reader == nullptr) {
    return InvalidField("stream",
                        absl::StrCat("no events of response '", id,
                                     "' are kept: only a background response created with "
                                     "'stream': true can be streamed again, while it runs and "
                                     "for a while after; GET it without 'stream'"));
  }
  return EventStream(std::move(reader));
}

OpenAiService::Result OpenAiService::CancelResponse(const std::string& id) {
  ResponseStore* store = options_.response_store;
  BackgroundResponses* background = options_.background_responses;
  std::optional<StoredResponse> found = store != nullptr ? store->Get(id) : std::nullopt;
  if (background != nullptr && background->Cancel(id)) {
    Json cancelled = found ? found->response : Json{{"id", id}, {"object", "response"}};
    cancelled["status"] = "cancelled";
    if (found) Keep(store, id, Ended(*std::move(found), cancelled));
    return http::HandlerResult{JsonResponse(cancelled), nullptr};
  }
  if (!found) {
    return ApiErrorStatus(absl::StatusCode::kNotFound,
                          absl::StrCat("Response with id '", id, "' not found"), {}, "not_found");
  }
  if (found->response.value("background", false) != true) {
    return InvalidField("response_id", absl::StrCat("Response with id '", id,
                                                    "' was not created with 'background': "
                                                    "true; only background responses can be "
                                                    "cancelled"));
  }
  // Finished before the cancel (completed, failed, cancelled): as it ended.
  return http::HandlerResult{JsonResponse(found->response), nullptr};
}

OpenAiService::Result OpenAiService::ListInputItems(const std::string& id,
                                                    const std::string& target) {
  ResponseStore* store = options_.response_store;
  std::optional<StoredResponse> found = store != nullptr ? store->Get(id) : std::nullopt;
  if (!found) {
    return ApiErrorStatus(absl::StatusCode::kNotFound,
                          absl::StrCat("Response with id '", id, "' not found"), {}, "not_found");
  }
  const std::string limit_text = http::QueryParam(target, "limit");
  int64_t limit = 20;
  if (!limit_text.empty() && (!absl::SimpleAtoi(limit_text, &limit) || limit < 1 || limit > 100)) {
    return InvalidField(
        "limit", absl::StrCat("'limit' must be an integer in [1, 100]; got '", limit_text, "'"));
  }
  std::string order = http::QueryParam(target, "order");
  if (order.empty()) order = "desc";
  if (order != "asc" && order != "desc") {
    return InvalidField("order", absl::StrCat("'order' must be asc or desc; got '", order, "'"));
  }
  // Items as the request gave them; ids the client did not give are the response's own.
  Json items = found->input_items.is_array() ? found->input_items : Json::array();
  for (size_t k = 0; k < items.size(); ++k) {
    if (items[k].contains("id")) continue;
    const std::string type = StringOr(items[k], "type", "message");
    const char* prefix = type == "function_call"          ? "fc"
                         : type == "function_call_output" ? "fco"
                         : type == "reasoning"            ? "rs"
                                                          : "msg";
    items[k]["id"] = absl::StrCat(prefix, "_", id, "_in", k);
  }
  if (order == "desc") std::reverse(items.begin(), items.end());
  size_t start = 0;
  if (const std::string after = http::QueryParam(target, "after"); !after.empty()) {
    while (start < items.size() && StringOr(items[start], "id", "") != after) ++start;
    if (start == items.size()) {
      return InvalidField(
          "after", absl::StrCat("no input item of response '", id, "' has the id '", after, "'"));
    }
    ++start;
  }
  const size_t end = std::min(items.size(), start + static_cast<size_t>(limit));
  Json page = Json::array();
  for (size_t k = start; k < end; ++k) page.push_back(items[k]);
  const Json first = page.empty() ? Json() : page.front()["id"];
  const Json last = page.empty() ? Json() : page.back()["id"];
  return http::HandlerResult{JsonResponse({{"object", "list"},
                                           {"data", std::move(page)},
                                           {"first_id", first},
                                           {"last_id", last},
                                           {"has_more", end < items.size()}}),
                             nullptr};
}

OpenAiService::Result OpenAiService::StoredResponseRoute(const http::HttpRequest& request) {
  std::string id = request.path.substr(std::string_view("/v1/responses/").size());
  if (request.method == "POST") {  // …/{id}/cancel (Route checked the path)
    id.resize(id.size() - std::string_view("/cancel").size());
    return CancelResponse(id);
  }
  if (constexpr std::string_view kItems = "/input_items"; id.ends_with(kItems)) {
    id.resize(id.size() - kItems.size());  // GET (Route checked the method)
    return ListInputItems(id, request.target);
  }
  ResponseStore* store = options_.response_store;
  if (request.method == "GET" && http::QueryParam(request.target, "stream") == "true") {
    return FollowResponse(id, http::QueryParam(request.target, "starting_after"));
  }
  if (request.method == "DELETE" && options_.background_responses != nullptr) {
    options_.background_responses->Cancel(id);  // a running background response stops first
  }
  if (request.method == "DELETE" && store != nullptr && store->Erase(id)) {
    return http::HandlerResult{
        JsonResponse({{"id", id}, {"object", "response.deleted"}, {"deleted", true}}), nullptr};
  }
  std::optional<StoredResponse> found =
      request.method == "GET" && store != nullptr ? store->Get(id) : std::nullopt;
  if (!found) {
    return ApiErrorStatus(
        absl::StatusCode::kNotFound,
        absl::StrCat("Response with id '", id, "' not found",
                     store == nullptr ? " (this server stores no responses)" : ""),
        {}, "not_found");
  }
  return http::HandlerResult{JsonResponse(found->response), nullptr};
}

}  // namespace strata::frontend
