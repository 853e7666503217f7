#include "server/frontend/generation_response.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/log.h"
#include "server/frontend/api_error.h"
#include "server/frontend/image_inputs.h"

namespace strata::frontend {
namespace {

std::mt19937_64& Generator() {
  static std::mt19937_64 generator{std::random_device{}()};
  return generator;
}
std::mutex generator_mu;

}  // namespace

std::string NewResponseId(std::string_view prefix) {
  std::lock_guard<std::mutex> lock(generator_mu);
  return absl::StrFormat("%s-%016x%016x", std::string(prefix), Generator()(), Generator()());
}

uint64_t RandomSeed() {
  std::lock_guard<std::mutex> lock(generator_mu);
  return Generator()();
}

uint64_t CacheSaltHash(std::string_view salt) {
  if (salt.empty()) return 0;
  uint64_t h = 14695981039346656037ull;  // FNV-1a, stable across processes
  for (unsigned char c : salt) h = (h ^ c) * 1099511628211ull;
  return h == 0 ? 1 : h;
}

GenerationResponse::GenerationResponse(const ServedModel& model, GenerationSpec spec,
                                       ResponseHooks hooks)
    : model_(model), spec_(std::move(spec)), hooks_(std::move(hooks)) {
  if (hooks_.in_flight) (*hooks_.in_flight)++;
}

GenerationResponse::~GenerationResponse() {
  if (!finished_) Cancel();
  DetachAll();
  if (hooks_.in_flight) (*hooks_.in_flight)--;
}

void GenerationResponse::ChoiceEnded(Choice& c, const std::string& finish_reason) const {
  if (!hooks_.on_choice_finished || !c.timing) return;
  hooks_.on_choice_finished(c.timing->Ended(finish_reason, server::RequestTimingRecorder::Now()));
  c.timing.reset();
}

void GenerationResponse::RecordReply(Choice& c, const ChoiceDelta& d) const {
  if (model_.reply_tokens == nullptr || spec_.kind == ApiKind::kCompletion) return;
  c.reply_text += d.text;
  c.reply_ids.insert(c.reply_ids.end(), d.token_ids.begin(), d.token_ids.end());
  c.reply_has_tool_calls = c.reply_has_tool_calls || !d.tool_calls.empty();
  if (!d.finish_reason) return;
  std::vector<int32_t> ids = std::move(c.reply_ids);
  if (c.reply_has_tool_calls || (*d.finish_reason != "stop" && *d.finish_reason != "length")) {
    return;
  }
  if (const int32_t think_end = c.spec->options.think_end_id; think_end >= 0) {
    const auto last = std::find(ids.rbegin(), ids.rend(), think_end);
    if (last != ids.rend()) ids.erase(ids.begin(), last.base());
  }
  const std::vector<int32_t>& hidden = c.spec->options.hidden_stop_ids;
  if (!ids.empty() && std::find(hidden.begin(), hidden.end(), ids.back()) != hidden.end()) {
    ids.pop_back();
  }
  model_.reply_tokens->Remember(c.reply_text, std::move(ids));
}

namespace {

// Every choice submitted, or none (the ones already submitted are cancelled) and the status.
absl::StatusOr<std::vector<std::shared_ptr<server::RequestStream>>> SubmitChoices(
    const ServedModel& model, const std::vector<ChoiceSpec>& choices) {
  std::vector<std::shared_ptr<server::RequestStream>> streams;
  for (const ChoiceSpec& choice_spec : choices) {
    absl::StatusOr<std::shared_ptr<server::RequestStream>> stream =
        model.engine->Submit(choice_spec.request);
    if (!stream.ok()) {
      for (size_t i = 0; i < streams.size(); ++i) {
        model.engine->Cancel(choices[i].request.request_id);
      }
      return stream.status();
    }
    streams.push_back(std::move(*stream));
  }
  return streams;
}

// SubmitChoices, once more with the request ids made unique when the ids came from the client
// (X-Request-Id) and one is taken; that conflict is a 400 naming request_id.
absl::StatusOr<std::vector<std::shared_ptr<server::RequestStream>>> SubmitRenamingOnConflict(
    const ServedModel& model, GenerationSpec& spec) {
  absl::StatusOr<std::vector<std::shared_ptr<server::RequestStream>>> streams =
      SubmitChoices(model, spec.choices);
  if (!streams.ok() && streams.status().code() == absl::StatusCode::kAlreadyExists &&
      spec.rename_on_conflict) {
    static std::atomic<uint64_t> retries{0};
    const std::string suffix = absl::StrCat(".", retries.fetch_add(1) + 1);
    for (ChoiceSpec& choice : spec.choices) absl::StrAppend(&choice.request.request_id, suffix);
    streams = SubmitChoices(model, spec.choices);
  }
  if (!streams.ok() && streams.status().code() == absl::StatusCode::kAlreadyExists) {
    return InvalidField("request_id", std::string(streams.status().message()));
  }
  return streams;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GenerationResponse>> GenerationResponse::Submit(
    const ServedModel& model, GenerationSpec spec, ResponseHooks hooks) {
  ASSIGN_OR_RETURN(std::vector<std::shared_ptr<server::RequestStream>> streams,
                   SubmitRenamingOnConflict(model, spec));
  return FromStreams(model, std::move(spec), std::move(hooks), std::move(streams));
}

std::unique_ptr<GenerationResponse> GenerationResponse::SubmitWhenEncoded(
    const ServedModel& model, GenerationSpec spec, ResponseHooks hooks,
    std::shared_ptr<ImageEncodeJob> images) {
  CHECK(images != nullptr);
  std::unique_ptr<GenerationResponse> response(
      new GenerationResponse(model, std::move(spec), std::move(hooks)));
  response->AddChoices();
  response->images_ = std::move(images);
  return response;
}

std::unique_ptr<GenerationResponse> GenerationResponse::FromStreams(
    const ServedModel& model, GenerationSpec spec, ResponseHooks hooks,
    std::vector<std::shared_ptr<server::RequestStream>> streams) {
  CHECK_EQ(streams.size(), spec.choices.size());
  std::unique_ptr<GenerationResponse> response(
      new GenerationResponse(model, std::move(spec), std::move(hooks)));
  response->AddChoices();
  for (size_t i = 0; i < streams.size(); ++i) response->choices_[i].stream = std::move(streams[i]);
  return response;
}

void GenerationResponse::AddChoices() {
  const double submitted = server::RequestTimingRecorder::Now();
  for (const ChoiceSpec& choice_spec : spec_.choices) {
    Choice choice;
    choice.spec = &choice_spec;
    choice.decoder = std::make_unique<ChoiceDecoder>(*model_.tokenizer, choice_spec.options);
    choice.final.index = choice_spec.index;
    choice.final.logprobs_requested = spec_.logprobs;
    choice.timing = std::make_unique<server::RequestTimingRecorder>(
        choice_spec.request.request_id, submitted,
        static_cast<int64_t>(choice_spec.request.prompt.size()));
    if (spec_.kind == ApiKind::kResponses) {
      choice.events = std::make_unique<ResponsesStreamWriter>(
          spec_.meta, spec_.responses_echo, spec_.logprobs ? model_.tokenizer : nullptr);
    } else if (spec_.kind == ApiKind::kMessages) {
      const std::vector<int64_t>& prompts = spec_.group_prompt_tokens;
      choice.events =
          std::make_unique<MessagesStreamWriter>(spec_.meta, prompts.empty() ? 0 : prompts[0]);
    }
    choices_.push_back(std::move(choice));
  }
}

bool GenerationResponse::SubmitEncoded(http::HttpResponse* out) {
  const std::vector<engine::MediaEmbedding> media = images_->media();
  images_.reset();
  for (ChoiceSpec& choice : spec_.choices) choice.request.media = media;
  absl::StatusOr<std::vector<std::shared_ptr<server::RequestStream>>> streams =
      SubmitRenamingOnConflict(model_, spec_);
  if (!streams.ok()) {
    error_ = streams.status();
    for (Choice& c : choices_) {
      ChoiceEnded(c, "error");
      c.done = true;
    }
    Finish(out);
    return false;
  }
  for (size_t i = 0; i < choices_.size(); ++i) {
    choices_[i].stream = std::move((*streams)[i]);
    if (wake_) choices_[i].stream->SetNotifier(wake_);
  }
  return true;
}

void GenerationResponse::Start(std::function<void()> wake) {
  if (images_ != nullptr) {
    wake_ = wake;
    images_->OnDone(std::move(wake));
    return;
  }
  for (Choice& c : choices_) c.stream->SetNotifier(wake);
}

void GenerationResponse::DetachAll() {
  for (Choice& c : choices_) {
    if (c.stream) c.stream->SetNotifier(nullptr);
  }
}

void GenerationResponse::Cancel() {
  if (images_ != nullptr) images_->Cancel();  // skips what is not encoded yet
  for (Choice& c : choices_) {
    if (!c.done) {
      if (c.stream) model_.engine->Cancel(c.spec->request.request_id);
      ChoiceEnded(c, "abort");
    }
    c.done = true;
  }
  finished_ = true;
  DetachAll();
}

void GenerationResponse::StreamStart(std::string* body) const {
  for (const Choice& c : choices_) {
    if (c.events) *body += c.events->Start();
  }
}

void GenerationResponse::StreamOpenChoice(Choice& c, std::string* body) {
  if (c.opened) return;
  c.opened = true;
  if (c.events) return;
  if (spec_.kind == ApiKind::kChat) {
    Json delta = {{"role", "assistant"}, {"content", ""}};
    *body += ChunkEvent(
        c, ChatChunkJson(spec_.meta, c.spec->index, std::move(delta), nullptr, std::nullopt));
    if (!c.spec->echo_text.empty()) {  // as vLLM: the echoed message right after the role
      *body +=
          ChunkEvent(c, ChatChunkJson(spec_.meta, c.spec->index,
                                      Json{{"content", c.spec->echo_text}}, nullptr, std::nullopt));
    }
  } else if (!c.spec->echo_text.empty() && spec_.echo_logprobs < 0) {
    *body += ChunkEvent(c, CompletionChunkJson(spec_.meta, c.spec->index, c.spec->echo_text,
                                               nullptr, std::nullopt));
  }
}

std::string GenerationResponse::ChunkEvent(Choice& c, Json chunk, std::vector<int32_t> token_ids) {
  if (spec_.return_token_ids) {
    Json& choice = chunk["choices"][0];
    bool& sent = spec_.kind == ApiKind::kChat ? chat_prompt_ids_sent_ : c.prompt_ids_sent;
    if (!sent) {
      sent = true;
      (spec_.kind == ApiKind::kChat ? chunk : choice)["prompt_token_ids"] = c.spec->request.prompt;
    }
    choice["token_ids"] = std::move(token_ids);
  }
  if (spec_.continuous_usage) {
    Usage usage;
    const size_t group = static_cast<size_t>(c.spec->group);
    usage.prompt_tokens = group < spec_.group_prompt_tokens.size()
                              ? spec_.group_prompt_tokens[group]
                              : c.decoder->num_prompt_tokens();
    usage.completion_tokens = c.spec->prompt_only ? 0 : c.decoder->num_output_tokens();
    usage.cached_tokens = c.decoder->num_cached_tokens();
    chunk["usage"] = UsageJson(usage);
  }
  return SseData(chunk);
}

void GenerationResponse::StreamEcho(Choice& c, std::string* body) {
  c.echoed = true;
  const std::vector<TokenLogprobEntry> entries =
      PromptLogprobEntries(c.spec->request.prompt.at(0), c.prompt_scores, spec_.echo_logprobs);
  Json logprobs = CompletionLogprobsJson(*model_.tokenizer, entries, c.text_offset);
  for (const TokenLogprobEntry& e : entries) {
    c.text_offset += static_cast<int64_t>(TokenText(*model_.tokenizer, e.token_id).size());
  }
  *body += ChunkEvent(c, CompletionChunkJson(spec_.meta, c.spec->index, c.spec->echo_text,
                                             std::move(logprobs), std::nullopt));
}

void GenerationResponse::AddPromptScores(const Choice& c, FinalChoice* final) const {
  if (spec_.echo_logprobs >= 0) {
    std::vector<TokenLogprobEntry> entries =
        PromptLogprobEntries(c.spec->request.prompt.at(0), c.prompt_scores, spec_.echo_logprobs);
    entries.insert(entries.end(), std::make_move_iterator(final->logprobs.begin()),
                   std::make_move_iterator(final->logprobs.end()));
    final->logprobs = std::move(entries);
  }
  if (spec_.prompt_logprobs >= 0) {
    final->prompt_logprobs =
        PromptLogprobsJson(*model_.tokenizer, c.prompt_scores, spec_.prompt_logprobs);
  }
}

void GenerationResponse::StreamDelta(Choice& c, const ChoiceDelta& d, std::string* body) {
  const int index = c.spec->index;
  // A step whose tokens show nothing yet still gets its (empty) text chunk, unless the finish
  // chunk follows anyway: one chunk per engine step, as vLLM streams.
  const bool silent_step =
      d.num_tokens > 0 && !d.finish_reason && d.reasoning.empty() && d.tool_calls.empty();
  const bool has_text = !d.text.empty() || !d.logprobs.empty() || silent_step;
  if (c.events) {
    *body += c.events->Delta(d);
    return;
  }
  // The step's token ids go with its first chunk (every step with tokens has one).
  bool ids_sent = false;
  const auto emit = [&](Json chunk) {
    *body += ChunkEvent(c, std::move(chunk), ids_sent ? std::vector<int32_t>() : d.token_ids);
    ids_sent = true;
  };
  if (spec_.kind == ApiKind::kChat) {
    // The step's logprobs ride on its first chunk: the reasoning's when it has some (as vLLM
    // streams a reasoning token's logprobs with its reasoning_content), else the text's.
    Json logprobs =
        spec_.logprobs ? ChatLogprobsJson(*model_.tokenizer, d.logprobs) : Json(nullptr);
    if (!d.reasoning.empty()) {
      emit(ChatChunkJson(spec_.meta, index, Json{{"reasoning_content", d.reasoning}},
                         std::move(logprobs), std::nullopt));
      logprobs = spec_.logprobs ? Json{{"content", Json::array()}} : Json(nullptr);
    }
    if (!d.text.empty() || silent_step || (has_text && d.reasoning.empty())) {
      emit(ChatChunkJson(spec_.meta, index, Json{{"content", d.text}}, std::move(logprobs),
                         std::nullopt));
    }
    if (!d.tool_calls.empty()) {
      Json delta = {{"tool_calls", ToolCallDeltasJson(d.tool_calls)}};
      emit(ChatChunkJson(spec_.meta, index, std::move(delta), nullptr, std::nullopt));
    }
    if (d.finish_reason) {
      emit(ChatChunkJson(spec_.meta, index, Json::object(), nullptr, d.finish_reason));
    }
    return;
  }
  if (has_text) {
    Json logprobs = spec_.logprobs
                        ? CompletionLogprobsJson(*model_.tokenizer, d.logprobs, c.text_offset)
                        : Json(nullptr);
    for (const TokenLogprobEntry& e : d.logprobs) {
      c.text_offset += static_cast<int64_t>(TokenText(*model_.tokenizer, e.token_id).size());
    }
    emit(CompletionChunkJson(spec_.meta, index, d.text, std::move(logprobs), std::nullopt));
  }
  if (d.finish_reason) {
    emit(CompletionChunkJson(spec_.meta, index, "", nullptr, d.finish_reason));
  }
}

void GenerationResponse::StreamProgress(const Choice& c, const server::PrefillProgress& progress,
                                        std::string* body) const {
  Json chunk =
      spec_.kind == ApiKind::kChat
          ? ChatChunkJson(spec_.meta, c.spec->index,
                          Json{{"role", "assistant"}, {"content", nullptr}}, nullptr, std::nullopt)
          : CompletionChunkJson(spec_.meta, c.spec->index, "", nullptr, std::nullopt);
  chunk["prompt_progress"] = Json{{"total", progress.total},
                                  {"cache", progress.cached},
                                  {"processed", progress.processed},
                                  {"time_ms", progress.time_ms}};
  *body += SseData(chunk);
}

void GenerationResponse::Accumulate(Choice& c, ChoiceDelta&& d) const {
  c.final.text += d.text;
  if (spec_.return_token_ids) {
    if (!c.final.token_ids) c.final.token_ids.emplace();
    c.final.token_ids->insert(c.final.token_ids->end(), d.token_ids.begin(), d.token_ids.end());
  }
  c.final.reasoning += d.reasoning;
  for (engine::ToolCallDelta& call : d.tool_calls) {
    if (call.index < 0) continue;
    if (static_cast<size_t>(call.index) >= c.final.tool_calls.size()) {
      c.final.tool_calls.resize(call.index + 1);
    }
    ToolCall& whole = c.final.tool_calls[call.index];
    if (call.id) whole.id = *call.id;
    if (call.name) whole.name = *call.name;
    whole.arguments += call.arguments;
  }
  if (spec_.kind == ApiKind::kResponses && !d.text.empty()) {
    c.final.text_logprobs.insert(c.final.text_logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  }
  for (TokenLogprobEntry& e : d.logprobs) c.final.logprobs.push_back(std::move(e));
  if (d.finish_reason) c.final.finish_reason = *d.finish_reason;
  if (d.stop_string_matched) c.final.stop_string = d.stop_string;
}

Usage GenerationResponse::TotalUsage() const {
  Usage usage;
  std::vector<bool> counted(spec_.group_prompt_tokens.size(), false);
  for (const Choice& c : choices_) {
    if (!c.spec->prompt_only) usage.completion_tokens += c.decoder->num_output_tokens();
    const int group = c.spec->group;
    if (group >= 0 && group < static_cast<int>(counted.size()) && !counted[group]) {
      counted[group] = true;
      usage.prompt_tokens += spec_.group_prompt_tokens[group];
      usage.cached_tokens += c.decoder->num_cached_tokens();
    }
  }
  return usage;
}

void GenerationResponse::Finish(http::HttpResponse* out) {
  finished_ = true;
  DetachAll();
  if (!error_.ok()) {
    ApiError error = ToApiError(error_);
    if (spec_.stream && choices_.at(0).events) {
      out->body += choices_.at(0).events->Error(error);
    } else if (spec_.stream) {
      out->body += SseData(error.ToJson());
      out->body += kSseDone;
    } else {
      out->status = error.http_status;
      out->body = spec_.kind == ApiKind::kMessages ? JsonText(AnthropicErrorJson(error))
                                                   : error.ToJsonString();
    }
    return;
  }
  const Usage usage = TotalUsage();
  if (choices_.at(0).events) {
    // One choice (the Responses and Messages APIs have no n).
    Choice& c = choices_.at(0);
    if (spec_.stream) out->body += c.events->Finish(c.final, usage);
    if (!spec_.stream || spec_.on_responses_done) {
      const Json object = c.events->FinalObject(c.final, usage);
      if (spec_.on_responses_done) spec_.on_responses_done(object, c.final);
      if (!spec_.stream) {
        out->status = 200;
        out->body = JsonText(object);
      }
    }
    return;
  }
  if (spec_.stream) {
    if (spec_.include_usage) {
      const char* object =
          spec_.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion";
      out->body += SseData(UsageChunkJson(spec_.meta, object, usage));
    }
    out->body += kSseDone;
    return;
  }
  std::vector<FinalChoice> finals;
  for (Choice& c : choices_) {
    if (!c.spec->echo_text.empty()) c.final.text = c.spec->echo_text + c.final.text;
    AddPromptScores(c, &c.final);
    if (spec_.return_token_ids) {
      c.final.prompt_token_ids = c.spec->request.prompt;
      if (!c.final.token_ids) c.final.token_ids.emplace();
    }
    finals.push_back(std::move(c.final));
  }
  std::sort(finals.begin(), finals.end(),
            [](const FinalChoice& a, const FinalChoice& b) { return a.index < b.index; });
  Json body = spec_.kind == ApiKind::kChat
                  ? ChatCompletionJson(spec_.meta, *model_.tokenizer, finals, usage)
                  : CompletionJson(spec_.meta, *model_.tokenizer, finals, usage);
  out->status = 200;
  out->body = JsonText(body);
}

bool GenerationResponse::Poll(http::HttpResponse* out) {
  if (finished_) return true;
  if (images_ != nullptr) {
    if (!images_->done()) return false;
    if (!SubmitEncoded(out)) return true;
  }
  if (!started_) {
    started_ = true;
    if (spec_.stream) StreamStart(&out->body);
  }
  bool all_done = true;
  for (Choice& c : choices_) {
    if (c.done) continue;
    for (server::StreamEvent& event : c.stream->Drain()) {
      if (event.progress_only()) {  // before the first token: no text, no timing
        if (spec_.stream && spec_.return_progress && !c.events) {
          StreamProgress(c, *event.progress, &out->body);
        }
        continue;
      }
      if (c.timing) c.timing->OnEvent(event, server::RequestTimingRecorder::Now());
      if (spec_.stream) StreamOpenChoice(c, &out->body);
      if (!event.prompt_scores.empty()) c.prompt_scores = std::move(event.prompt_scores);
      ChoiceDelta delta = c.decoder->Apply(event);
      if (!delta.error.ok()) {
        error_ = delta.error;
        ChoiceEnded(c, "error");
        break;
      }
      if (c.spec->prompt_only) {  // the token generated only because the engine needs one
        delta.text.clear();
        delta.logprobs.clear();
        delta.token_ids.clear();
        delta.num_tokens = 0;
        if (delta.finish_reason) delta.finish_reason = "length";
      }
      if (spec_.stream && spec_.echo_logprobs >= 0 && !c.echoed && !event.token_ids.empty()) {
        StreamEcho(c, &out->body);
      }
      if (delta.stop_string_matched) model_.engine->Cancel(c.spec->request.request_id);
      RecordReply(c, delta);
      if (delta.finish_reason) {
        c.done = true;
        ChoiceEnded(c, *delta.finish_reason);
      }
      if (spec_.stream) StreamDelta(c, delta, &out->body);
      // Streamed responses end with the whole response too.
      if (!spec_.stream || c.events) Accumulate(c, std::move(delta));
      if (c.done) break;
    }
    if (!error_.ok()) {
      c.done = true;
      Cancel();
      break;
    }
    all_done = all_done && c.done;
  }
  if (!error_.ok() || all_done) {
    Finish(out);
    return true;
  }
  return false;
}

}  // namespace strata::frontend
