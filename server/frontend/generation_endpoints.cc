// OpenAiService: /v1/chat/completions, /v1/completions, /tokenize, /detokenize.
#include <algorithm>
#include <ctime>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "server/frontend/api_error.h"
#include "server/frontend/engine_request.h"
#include "server/frontend/internal/strings.h"
#include "server/frontend/json_fields.h"
#include "server/frontend/messages_request.h"
#include "server/frontend/openai_service.h"
#include "server/frontend/prompt_builder.h"
#include "server/http/query.h"

namespace strata::frontend {
namespace {

absl::Status Draining() {
  return ApiErrorStatus(absl::StatusCode::kUnavailable,
                        "the server is shutting down and accepts no new requests", {},
                        "server_draining");
}

RequestLimits LimitsFor(const ServiceOptions& options, const ServedModel& model) {
  RequestLimits limits = options.limits;
  limits.vocab_size = model.vocab_size;
  limits.defaults = model.generation_config.defaults;
  return limits;
}

ResponseMeta MetaFor(const ServedModel& model, std::string_view prefix,
                     const std::string& request_id) {
  ResponseMeta meta;
  meta.id = request_id.empty() ? NewResponseId(prefix)
                               : absl::StrCat(internal::Av(prefix), "-", request_id);
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.model = model.names.empty() ? "" : model.names[0];
  return meta;
}

// The X-Request-Id header (a client's or proxy's trace id) as the request id when the body
// gives none, as vLLM: the response id becomes `<prefix>-<header>`.
absl::Status ApplyRequestIdHeader(const http::HttpRequest& request, GenerationFields* gen) {
  const std::string* header = request.FindHeader("x-request-id");
  if (header == nullptr || header->empty() || !gen->request_id.empty()) return absl::OkStatus();
  if (header->size() > 256) {
    return InvalidField("X-Request-Id", "the X-Request-Id header must be at most 256 bytes");
  }
  gen->request_id = *header;
  gen->request_id_from_header = true;
  return absl::OkStatus();
}

GenerationSpec SpecFor(ApiKind kind, const GenerationFields& gen, ResponseMeta meta) {
  GenerationSpec spec;
  spec.rename_on_conflict = gen.request_id_from_header;
  spec.kind = kind;
  spec.meta = std::move(meta);
  spec.stream = gen.stream;
  spec.include_usage = gen.include_usage;
  spec.continuous_usage = gen.continuous_usage;
  spec.return_token_ids = gen.return_token_ids;
  spec.logprobs = gen.num_logprobs >= 0;
  spec.prompt_logprobs = gen.prompt_logprobs;
  return spec;
}

}  // namespace

OpenAiService::Result OpenAiService::ChatCompletions(const http::HttpRequest& request) {
  if (draining_) return Draining();
  ASSIGN_OR_RETURN(const ServedModel* model, ReadyModel());
  ASSIGN_OR_RETURN(Json body, ParseJsonBody(request.body));
  ASSIGN_OR_RETURN(ChatCompletionRequest req,
                   ParseChatCompletionRequest(body, LimitsFor(options_, *model)));
  RETURN_IF_ERROR(ApplyRequestIdHeader(request, &req.gen));
  return GenerateChat(req, ApiKind::kChat, Json());
}

namespace {

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
  std::function<void(const Json&, const FinalChoice&)> on_done;
  const Json conversation = req.conversation;
  if (stored) {
    on_done = [store, conversation](const Json& response, const FinalChoice& choice) {
      Json messages = conversation;
      messages.push_back(AssistantMessage(choice));
      store->Put(response["id"].get<std::string>(), {response, std::move(messages)});
    };
  }
  ResponseMeta meta;
  ASSIGN_OR_RETURN(http::HandlerResult result, GenerateChat(req.chat, ApiKind::kResponses, req.echo,
                                                            std::move(on_done), &meta));
  if (!req.background) return result;
  return StartBackground(meta, req.echo, conversation, std::move(result.pending));
}

OpenAiService::Result OpenAiService::StartBackground(
    const ResponseMeta& meta, const Json& echo, Json conversation,
    std::unique_ptr<http::PendingResponse> pending) {
  ResponseStore* store = options_.response_store;
  Json queued = ResponseObjectJson(meta, echo, nullptr, nullptr);
  queued["status"] = "queued";
  store->Put(meta.id, {queued, conversation});  // before it runs: the final object replaces it
  BackgroundResponses::Callbacks callbacks;
  callbacks.on_started = [store, id = meta.id] {
    std::optional<StoredResponse> stored = store->Get(id);
    if (!stored || stored->response["status"] != "queued") return;
    stored->response["status"] = "in_progress";
    store->Put(id, *std::move(stored));
  };
  // A response that ended well was stored by itself (on_responses_done); one still queued or
  // in progress ended with an error: "failed", with the error it was answered (its body, or a
  // stream's `error` event).
  callbacks.on_finished = [store, id = meta.id, queued,
                           conversation](const http::HttpResponse& response) {
    std::optional<StoredResponse> stored = store->Get(id);
    if (stored && stored->response["status"] != "queued" &&
        stored->response["status"] != "in_progress") {
      return;
    }
    std::string_view text = response.body;
    if (const size_t event = text.rfind("event: error\ndata: "); event != text.npos) {
      text = text.substr(event + std::string_view("event: error\ndata: ").size());
    }
    const Json body = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    Json error = body.is_object() ? body.value("error", body) : Json(Json::object());
    if (!error.is_object()) error = Json::object();
    Json failed = queued;
    failed["status"] = "failed";
    failed["error"] = {{"code", error.value("code", Json("server_error"))},
                       {"message", error.value("message", Json("the response failed"))}};
    store->Put(id, {std::move(failed), conversation});
  };
  BackgroundResponses* background = options_.background_responses;
  const bool stream = pending->streaming();
  if (!background->Add(meta.id, std::move(pending), std::move(callbacks))) {
    store->Erase(meta.id);
    return Draining();
  }
  if (!stream) return http::HandlerResult{JsonResponse(queued), nullptr};
  // Streamed: this request follows the events from the first; a client that loses them
  // resumes with GET /v1/responses/{id}?stream=true&starting_after=N.
  http::HandlerResult result;
  result.response.content_type = "text/event-stream";
  result.response.headers = SseHeaders();
  result.pending = background->Follow(meta.id, -1);
  return result;
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
  http::HandlerResult result;
  result.response.content_type = "text/event-stream";
  result.response.headers = SseHeaders();
  result.pending = std::move(reader);
  return result;
}

OpenAiService::Result OpenAiService::CancelResponse(const std::string& id) {
  ResponseStore* store = options_.response_store;
  BackgroundResponses* background = options_.background_responses;
  std::optional<StoredResponse> found = store != nullptr ? store->Get(id) : std::nullopt;
  if (background != nullptr && background->Cancel(id)) {
    Json cancelled = found ? found->response : Json{{"id", id}, {"object", "response"}};
    cancelled["status"] = "cancelled";
    if (found) store->Put(id, {cancelled, std::move(found->messages)});
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

OpenAiService::Result OpenAiService::Messages(const http::HttpRequest& request) {
  if (draining_) return Draining();
  ASSIGN_OR_RETURN(const ServedModel* model, ReadyModel());
  ASSIGN_OR_RETURN(Json body, ParseJsonBody(request.body));
  ASSIGN_OR_RETURN(ChatCompletionRequest req,
                   ParseMessagesRequest(body, LimitsFor(options_, *model)));
  RETURN_IF_ERROR(ApplyRequestIdHeader(request, &req.gen));
  return GenerateChat(req, ApiKind::kMessages, Json());
}

OpenAiService::Result OpenAiService::CountMessageTokens(const http::HttpRequest& request) {
  ASSIGN_OR_RETURN(const ServedModel* model, ReadyModel());
  ASSIGN_OR_RETURN(Json body, ParseJsonBody(request.body));
  ASSIGN_OR_RETURN(ChatCompletionRequest req,
                   ParseMessagesRequest(body, LimitsFor(options_, *model), /*count_tokens=*/true));
  ASSIGN_OR_RETURN(model, ModelFor(req.gen.model));
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, ChatPromptIds(*model, req));
  return http::HandlerResult{JsonResponse({{"input_tokens", prompt.size()}}), nullptr};
}

OpenAiService::Result OpenAiService::StoredResponseRoute(const http::HttpRequest& request) {
  std::string id = request.path.substr(std::string_view("/v1/responses/").size());
  if (request.method == "POST") {  // …/{id}/cancel (Route checked the path)
    id.resize(id.size() - std::string_view("/cancel").size());
    return CancelResponse(id);
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

OpenAiService::Result OpenAiService::GenerateChat(
    const ChatCompletionRequest& req, ApiKind kind, Json responses_echo,
    std::function<void(const Json&, const FinalChoice&)> on_responses_done,
    ResponseMeta* meta_out) {
  ASSIGN_OR_RETURN(const ServedModel* model, ModelFor(req.gen.model));
  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, ChatPromptIds(*model, req));
  const bool responses = kind == ApiKind::kResponses;
  ASSIGN_OR_RETURN(int64_t max_tokens,
                   ResolveMaxTokens(*model, static_cast<int64_t>(prompt.size()), req.gen.max_tokens,
                                    responses ? "input" : "messages"));
  const char* id_prefix = responses ? "resp" : kind == ApiKind::kMessages ? "msg" : "chatcmpl";
  GenerationSpec spec = SpecFor(kind, req.gen, MetaFor(*model, id_prefix, req.gen.request_id));
  spec.responses_echo = std::move(responses_echo);
  spec.on_responses_done = std::move(on_responses_done);
  if (meta_out != nullptr) *meta_out = spec.meta;
  spec.group_prompt_tokens.push_back(static_cast<int64_t>(prompt.size()));
  const bool forced =
      req.tool_choice == ToolChoice::kRequired || req.tool_choice == ToolChoice::kNamed;
  const bool tools_on = req.tools.is_array() && (req.tool_choice == ToolChoice::kAuto || forced);
  const auto filters = TokenFilters(*model, req.gen);
  for (int i = 0; i < req.gen.n; ++i) {
    ChoiceSpec choice;
    choice.index = i;
    choice.request = EngineRequest(*model, req.gen, prompt, max_tokens, spec.meta.id, i, true);
    if (forced) RETURN_IF_ERROR(ForceToolCalls(*model, req, &choice.request));
    choice.options = OptionsFor(req.gen, choice.request, tools_on);
    ApplyReasoning(*model, prompt, &choice.request, &choice.options);
    AddTokenFilters(filters, &choice.request);
    spec.choices.push_back(std::move(choice));
  }
  return Generate(*model, std::move(spec));
}

OpenAiService::Result OpenAiService::Completions(const http::HttpRequest& request) {
  if (draining_) return Draining();
  ASSIGN_OR_RETURN(const ServedModel* model, ReadyModel());
  ASSIGN_OR_RETURN(Json body, ParseJsonBody(request.body));
  ASSIGN_OR_RETURN(CompletionRequest req,
                   ParseCompletionRequest(body, LimitsFor(options_, *model)));
  RETURN_IF_ERROR(ApplyRequestIdHeader(request, &req.gen));
  ASSIGN_OR_RETURN(model, ModelFor(req.gen.model));
  GenerationSpec spec =
      SpecFor(ApiKind::kCompletion, req.gen, MetaFor(*model, "cmpl", req.gen.request_id));
  if (req.echo) spec.echo_logprobs = req.gen.num_logprobs;
  const bool prompt_only = req.gen.max_tokens == 0;  // echo only (ParseCompletionRequest)
  const auto filters = TokenFilters(*model, req.gen);
  const bool many = req.prompts.size() > 1;
  for (size_t p = 0; p < req.prompts.size(); ++p) {
    const PromptInput& input = req.prompts[p];
    const std::string param = many ? absl::StrCat("prompt[", p, "]") : "prompt";
    std::vector<int32_t> prompt =
        input.text ? TextPromptIds(*model, *input.text, /*add_special_tokens=*/true)
                   : input.token_ids;
    RETURN_IF_ERROR(TruncatePrompt(*model, req.gen.truncate_prompt_tokens, &prompt));
    RETURN_IF_ERROR(CheckPromptIds(*model, prompt, param));
    ASSIGN_OR_RETURN(
        int64_t max_tokens,
        ResolveMaxTokens(*model, static_cast<int64_t>(prompt.size()), req.gen.max_tokens, param));
    if (prompt_only) max_tokens = 1;  // the engine generates one token, the response drops it
    std::string echo_text;
    if (req.echo) {
      if (input.text && !req.gen.truncate_prompt_tokens) {  // truncated: what is left
        echo_text = *input.text;
      } else {
        echo_text = model->tokenizer->Decode(prompt).value_or("");
      }
    }
    spec.group_prompt_tokens.push_back(static_cast<int64_t>(prompt.size()));
    for (int i = 0; i < req.gen.n; ++i) {
      ChoiceSpec choice;
      choice.index = static_cast<int>(p) * req.gen.n + i;
      choice.group = static_cast<int>(p);
      choice.request =
          EngineRequest(*model, req.gen, prompt, max_tokens, spec.meta.id, choice.index, false);
      // Echo with logprobs scores the prompt too (its tokens lead the logprobs).
      choice.request.prompt_logprobs = std::max(choice.request.prompt_logprobs, spec.echo_logprobs);
      choice.options = OptionsFor(req.gen, choice.request, /*parse_tool_calls=*/false);
      AddTokenFilters(filters, &choice.request);
      choice.echo_text = echo_text;
      choice.prompt_only = prompt_only;
      spec.choices.push_back(std::move(choice));
    }
  }
  return Generate(*model, std::move(spec));
}

OpenAiService::Result OpenAiService::Tokenize(const http::HttpRequest& request) {
  ASSIGN_OR_RETURN(const ServedModel* model, ReadyModel());
  ASSIGN_OR_RETURN(Json body, ParseJsonBody(request.body));
  FieldReader r(body);
  ASSIGN_OR_RETURN(auto model_name, r.String("model"));
  ASSIGN_OR_RETURN(model, ModelFor(model_name.value_or("")));
  ASSIGN_OR_RETURN(auto add_special, r.Bool("add_special_tokens"));
  ASSIGN_OR_RETURN(auto return_strs, r.Bool("return_token_strs"));
  std::vector<int32_t> ids;
  if (r.Has("messages")) {
    // Validated as a chat request would be (the same messages rules and errors).
    Json chat = body;
    chat.erase("add_special_tokens");
    chat.erase("return_token_strs");
    ASSIGN_OR_RETURN(ChatCompletionRequest req,
                     ParseChatCompletionRequest(chat, LimitsFor(options_, *model)));
    ASSIGN_OR_RETURN(std::string text, RenderChat(*model, req));
    ids = TextPromptIds(*model, text, add_special.value_or(false));
    // The ids the chat request would get: earlier replies as the model wrote them.
    if (model->reply_tokens != nullptr) model->reply_tokens->Splice(req.messages, &ids);
  } else {
    ASSIGN_OR_RETURN(auto prompt, r.String("prompt"));
    if (!prompt) return MissingField("prompt");
    ids = TextPromptIds(*model, *prompt, add_special.value_or(true));
  }
  Json out = Json::object();
  out["count"] = ids.size();
  out["max_model_len"] = model->max_model_len;
  out["tokens"] = ids;
  if (return_strs.value_or(false)) {
    Json strs = Json::array();
    for (int32_t id : ids) strs.push_back(TokenText(*model->tokenizer, id));
    out["token_strs"] = std::move(strs);
  }
  return http::HandlerResult{JsonResponse(out), nullptr};
}

OpenAiService::Result OpenAiService::Detokenize(const http::HttpRequest& request) {
  ASSIGN_OR_RETURN(const ServedModel* model, ReadyModel());
  ASSIGN_OR_RETURN(Json body, ParseJsonBody(request.body));
  FieldReader r(body);
  ASSIGN_OR_RETURN(auto model_name, r.String("model"));
  ASSIGN_OR_RETURN(model, ModelFor(model_name.value_or("")));
  const Json* tokens = r.Find("tokens");
  if (!tokens) return MissingField("tokens");
  if (!tokens->is_array()) return InvalidType("tokens", "an array of token ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const Json& id = (*tokens)[i];
    const std::string path = absl::StrCat("tokens[", i, "]");
    if (!id.is_number_integer()) return InvalidType(path, "an integer token id");
    const int64_t value =
        id.is_number_unsigned() && id.get<uint64_t>() > INT32_MAX ? INT64_MAX : id.get<int64_t>();
    if (value < 0 || value >= model->tokenizer->vocab_size()) {
      return InvalidField(
          path, absl::StrCat("token id ", id.dump(), " is outside the tokenizer's vocabulary [0, ",
                             model->tokenizer->vocab_size(), ")"));
    }
    ids.push_back(static_cast<int32_t>(value));
  }
  absl::StatusOr<std::string> text = model->tokenizer->Decode(ids);
  if (!text.ok()) return InvalidField("tokens", internal::Sv(text.status().message()));
  return http::HandlerResult{JsonResponse({{"prompt", *text}}), nullptr};
}

}  // namespace strata::frontend
