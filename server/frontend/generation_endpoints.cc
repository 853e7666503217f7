// OpenAiService: /v1/chat/completions, /v1/completions, /v1/messages, /tokenize, /detokenize;
// the chat path the Responses API shares (responses_endpoints.cc).
#include <algorithm>
#include <ctime>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "server/frontend/api_error.h"
#include "server/frontend/engine_request.h"
#include "server/frontend/internal/endpoint_steps.h"
#include "server/frontend/internal/strings.h"
#include "server/frontend/json_fields.h"
#include "server/frontend/messages_request.h"
#include "server/frontend/openai_service.h"
#include "server/frontend/prompt_builder.h"

namespace strata::frontend {
namespace {

// Errors of the chat prompt naming a chat part (an image's messages[i].content[j]...) name the
// Responses and Messages APIs' own list instead: their message indices differ from chat's.
std::function<std::string(const std::string&)> ChatParamRenamer(ApiKind kind) {
  return [kind](const std::string& param) -> std::string {
    if (kind == ApiKind::kChat || !absl::StartsWith(param, "messages[")) return param;
    return kind == ApiKind::kResponses ? "input" : "messages";
  };
}

using internal::ApplyRequestIdHeader;
using internal::Draining;
using internal::LimitsFor;

// A new response's id and creation time, or `given`'s where it has an id (a resumed background
// response keeps its own); the model name it shows.
ResponseMeta MetaFor(const ServedModel& model, std::string_view prefix,
                     const std::string& request_id, const ResponseMeta* given = nullptr) {
  ResponseMeta meta;
  if (given != nullptr && !given->id.empty()) {
    meta = *given;
  } else {
    meta.id = request_id.empty() ? NewResponseId(prefix)
                                 : absl::StrCat(internal::Av(prefix), "-", request_id);
    meta.created = static_cast<int64_t>(std::time(nullptr));
  }
  meta.model = model.names.empty() ? "" : model.names[0];
  return meta;
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
  spec.return_progress = gen.return_progress;
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
  return ChatOffTheIoThread(req, ApiKind::kChat,
                            [this, req] { return GenerateChat(req, ApiKind::kChat, Json()); });
}

OpenAiService::Result OpenAiService::Messages(const http::HttpRequest& request) {
  if (draining_) return Draining();
  ASSIGN_OR_RETURN(const ServedModel* model, ReadyModel());
  ASSIGN_OR_RETURN(Json body, ParseJsonBody(request.body));
  ASSIGN_OR_RETURN(ChatCompletionRequest req,
                   ParseMessagesRequest(body, LimitsFor(options_, *model)));
  RETURN_IF_ERROR(ApplyRequestIdHeader(request, &req.gen));
  return ChatOffTheIoThread(req, ApiKind::kMessages,
                            [this, req] { return GenerateChat(req, ApiKind::kMessages, Json()); });
}

OpenAiService::Result OpenAiService::CountMessageTokens(const http::HttpRequest& request) {
  ASSIGN_OR_RETURN(const ServedModel* model, ReadyModel());
  ASSIGN_OR_RETURN(Json body, ParseJsonBody(request.body));
  ASSIGN_OR_RETURN(ChatCompletionRequest req,
                   ParseMessagesRequest(body, LimitsFor(options_, *model), /*count_tokens=*/true));
  ASSIGN_OR_RETURN(model, ModelFor(req.gen.model));
  absl::StatusOr<std::vector<int32_t>> prompt = ChatPromptIds(*model, req);
  if (!prompt.ok()) return WithParamRenamed(prompt.status(), ChatParamRenamer(ApiKind::kMessages));
  return http::HandlerResult{JsonResponse({{"input_tokens", prompt->size()}}), nullptr};
}

OpenAiService::Result OpenAiService::GenerateChat(
    const ChatCompletionRequest& req, ApiKind kind, Json responses_echo,
    std::function<void(const Json&, const FinalChoice&)> on_responses_done, ResponseMeta* meta) {
  ASSIGN_OR_RETURN(const ServedModel* model, ModelFor(req.gen.model));
  absl::StatusOr<ChatPrompt> built = BuildChatPrompt(*model, req);
  if (!built.ok()) return WithParamRenamed(built.status(), ChatParamRenamer(kind));
  ChatPrompt chat_prompt = std::move(*built);
  const std::vector<int32_t>& prompt = chat_prompt.ids;
  const bool responses = kind == ApiKind::kResponses;
  ASSIGN_OR_RETURN(int64_t max_tokens,
                   ResolveMaxTokens(*model, static_cast<int64_t>(prompt.size()), req.gen.max_tokens,
                                    responses ? "input" : "messages"));
  const char* id_prefix = responses ? "resp" : kind == ApiKind::kMessages ? "msg" : "chatcmpl";
  GenerationSpec spec =
      SpecFor(kind, req.gen, MetaFor(*model, id_prefix, req.gen.request_id, meta));
  spec.responses_echo = std::move(responses_echo);
  spec.on_responses_done = std::move(on_responses_done);
  if (meta != nullptr) *meta = spec.meta;
  spec.group_prompt_tokens.push_back(static_cast<int64_t>(prompt.size()));
  const bool forced =
      req.tool_choice == ToolChoice::kRequired || req.tool_choice == ToolChoice::kNamed;
  const bool tools_on = req.tools.is_array() && (req.tool_choice == ToolChoice::kAuto || forced);
  const auto filters = TokenFilters(*model, req.gen);
  // The vision tower runs once per image (on the encoder thread, or not at all for an image in
  // its cache), after every check that can refuse the request; the choices are submitted when
  // the rows are there.
  std::shared_ptr<ImageEncodeJob> images = EncodeChatImages(*model, &chat_prompt);
  std::optional<structured::ThinkingEnd> thinking_end;
  for (int i = 0; i < req.gen.n; ++i) {
    ChoiceSpec choice;
    choice.index = i;
    choice.request = EngineRequest(*model, req.gen, prompt, max_tokens, spec.meta.id, i, true);
    choice.request.media = chat_prompt.media;
    if (forced) RETURN_IF_ERROR(ForceToolCalls(*model, req, &choice.request));
    choice.options = OptionsFor(req.gen, choice.request, tools_on);
    ApplyReasoning(*model, prompt, &choice.request, &choice.options);
    if (req.thinking_token_budget) {
      if (i == 0) thinking_end = ThinkingEndFor(*model, choice.options);  // same prompt for all
      if (thinking_end) {
        ApplyThinkingBudget(*model, *thinking_end, *req.thinking_token_budget, &choice.request);
      }
    }
    AddTokenFilters(filters, &choice.request);
    choice.echo_text = req.echo_text;
    choice.request.report_prefill_progress = spec.return_progress && kind == ApiKind::kChat;
    spec.choices.push_back(std::move(choice));
  }
  return Generate(*model, std::move(spec), std::move(images));
}

OpenAiService::Result OpenAiService::Completions(const http::HttpRequest& request) {
  if (draining_) return Draining();
  ASSIGN_OR_RETURN(const ServedModel* model, ReadyModel());
  ASSIGN_OR_RETURN(Json body, ParseJsonBody(request.body));
  ASSIGN_OR_RETURN(CompletionRequest req,
                   ParseCompletionRequest(body, LimitsFor(options_, *model)));
  RETURN_IF_ERROR(ApplyRequestIdHeader(request, &req.gen));
  ASSIGN_OR_RETURN(model, ModelFor(req.gen.model));
  RETURN_IF_ERROR(CheckFieldsWithoutTokenizer(*model, req.gen));
  // Served without a tokenizer the text is empty: the ids are the output, unless refused.
  if (model->skip_tokenizer_init && !body.contains("return_token_ids")) {
    req.gen.return_token_ids = true;
  }
  GenerationSpec spec =
      SpecFor(ApiKind::kCompletion, req.gen, MetaFor(*model, "cmpl", req.gen.request_id));
  if (req.echo) spec.echo_logprobs = req.gen.num_logprobs;
  const bool prompt_only = req.gen.max_tokens == 0;  // echo only (ParseCompletionRequest)
  const auto filters = TokenFilters(*model, req.gen);
  const bool many = req.prompts.size() > 1;
  for (size_t p = 0; p < req.prompts.size(); ++p) {
    const PromptInput& input = req.prompts[p];
    const std::string param = many ? absl::StrCat("prompt[", p, "]") : "prompt";
    std::vector<int32_t> prompt = input.token_ids;
    if (input.text) {
      ASSIGN_OR_RETURN(prompt,
                       TextPromptIds(*model, *input.text, /*add_special_tokens=*/true, param));
    }
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
      choice.request.report_prefill_progress = spec.return_progress;
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
    // The ids the chat request gets (vLLM counts images the same way): the template's segments,
    // earlier replies as the model wrote them, each image's placeholder expanded to one
    // position per row of the image (the image decoded and measured; the tower does not run).
    ASSIGN_OR_RETURN(ids, ChatPromptIds(*model, req));
    if (add_special.value_or(false)) {  // the BOS / EOS the tokenizer's config asks for
      const engine::Tokenizer& tokenizer = *model->tokenizer;
      if (tokenizer.adds_bos()) ids.insert(ids.begin(), *tokenizer.bos_id());
      if (tokenizer.adds_eos()) ids.push_back(*tokenizer.eos_id());
    }
  } else {
    ASSIGN_OR_RETURN(auto prompt, r.String("prompt"));
    if (!prompt) return MissingField("prompt");
    ASSIGN_OR_RETURN(ids, TextPromptIds(*model, *prompt, add_special.value_or(true)));
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
  RETURN_IF_ERROR(RequireTokenizer(*model, "tokens"));
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
