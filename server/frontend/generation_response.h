// A completion being generated: n choices (per prompt) submitted to the engine loop, their
// event streams decoded (choice_decoder.h) and rendered as an SSE stream or, at the end, as one
// JSON body. Implements http::PendingResponse: the engine thread only wakes the I/O thread
// (RequestStream notifier); decoding and rendering happen in Poll on the I/O thread.
//
// Stream shape (docs/api.md "Streaming"): chat sends one {"role": "assistant", "content": ""} chunk
// per choice first; then content / tool_calls chunks as text becomes final; each choice ends
// with a chunk whose delta is {} and whose finish_reason is set; with include_usage a chunk
// with `choices: []` and usage follows; then `data: [DONE]`. An error after the stream
// started is sent as a `data:` event holding the error object, then [DONE]. /v1/responses and
// /v1/messages (one choice) stream their own events instead (responses_render.h,
// messages_render.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/request.h"
#include "server/frontend/choice_decoder.h"
#include "server/frontend/messages_render.h"
#include "server/frontend/response_render.h"
#include "server/frontend/responses_render.h"
#include "server/frontend/served_model.h"
#include "server/http/http_types.h"
#include "server/metrics.h"
#include "server/request_timing_recorder.h"

namespace strata::frontend {

class ImageEncodeJob;  // image_inputs.h

enum class ApiKind { kChat, kCompletion, kResponses, kMessages };

struct ChoiceSpec {
  int index = 0;  // the choice's index in the response
  int group = 0;  // which prompt (usage counts each prompt once)
  scheduler::Request request;
  ChoiceOptions options;
  // echo (completions: the prompt; chat: the final message, ChatCompletionRequest::echo_text):
  // shown before the generated text (a stream: in a chunk of its own, the choice's first).
  std::string echo_text;
  // Completions' echo with max_tokens 0: one token is generated (the engine needs one) and
  // dropped; the choice ends with "length" and counts no completion tokens.
  bool prompt_only = false;
};

// Process-wide observers of responses.
struct ResponseHooks {
  std::shared_ptr<std::atomic<int64_t>> in_flight;  // live responses (for the drain)
  // Called once per choice when it ends (finish reason as the client sees it; "abort" when
  // the client went away), on the I/O thread.
  std::function<void(const server::RequestTimings&)> on_choice_finished;
};

struct GenerationSpec {
  ApiKind kind = ApiKind::kChat;
  ResponseMeta meta;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;  // every chunk carries its choice's usage so far (vLLM)
  bool logprobs = false;
  // vLLM's return_token_ids: each choice's token ids (every chunk: the ones it consumed) and
  // the prompt's (the first chunk of a choice; chat: top level, completions: in the choice).
  bool return_token_ids = false;
  // llama.cpp's return_progress (chat and completions streams): while a choice's prompt
  // prefills, one chunk per prefill chunk carrying `prompt_progress` {total, cache, processed,
  // time_ms} (the engine requests ask for progress events: report_prefill_progress).
  bool return_progress = false;
  // Prompt scores (the engine requests ask for them): completions' echo with logprobs puts
  // the prompt's tokens first in each choice's logprobs (top echo_logprobs); prompt_logprobs
  // >= 0 renders vLLM's prompt_logprobs (that many alternatives).
  int echo_logprobs = -1;
  int prompt_logprobs = -1;
  std::vector<int64_t> group_prompt_tokens;  // per prompt
  std::vector<ChoiceSpec> choices;
  // An engine id already in use is made unique (a suffix) instead of refusing the request (ids
  // from X-Request-Id: GenerationFields::request_id_from_header).
  bool rename_on_conflict = false;
  Json responses_echo;  // kResponses: the request fields the Response object repeats
  // kResponses: called on the I/O thread with the final Response object and its choice when the
  // response ends without an error (stored for previous_response_id); may be empty.
  std::function<void(const Json& response, const FinalChoice& choice)> on_responses_done;
};

class GenerationResponse : public http::PendingResponse {
 public:
  // Submits every choice; when one is refused (queue full, shutting down, invalid), the ones
  // already submitted are cancelled and the engine's status is returned.
  static absl::StatusOr<std::unique_ptr<GenerationResponse>> Submit(const ServedModel& model,
                                                                    GenerationSpec spec,
                                                                    ResponseHooks hooks);
  // Submits the choices once `images` is done (their requests' media get its rows), from the
  // first Poll after the encoder thread wakes the response: until then the client sees nothing
  // (a stream its head and keep-alives), and a client that leaves cancels the encoding. A
  // refusal then is the response's error (a stream's error event).
  static std::unique_ptr<GenerationResponse> SubmitWhenEncoded(
      const ServedModel& model, GenerationSpec spec, ResponseHooks hooks,
      std::shared_ptr<ImageEncodeJob> images);
  // A response over streams already submitted (one per choice, in order); also for tests,
  // which push events into the streams themselves.
  static std::unique_ptr<GenerationResponse> FromStreams(
      const ServedModel& model, GenerationSpec spec, ResponseHooks hooks,
      std::vector<std::shared_ptr<server::RequestStream>> streams);
  ~GenerationResponse() override;

  bool streaming() const override { return spec_.stream; }
  void Start(std::function<void()> wake) override;
  bool Poll(http::HttpResponse* out) override;
  std::string_view keepalive_bytes() const override { return kSsePing; }
  void Cancel() override;

 private:
  struct Choice {
    const ChoiceSpec* spec = nullptr;
    std::shared_ptr<server::RequestStream> stream;
    std::unique_ptr<ChoiceDecoder> decoder;
    FinalChoice final;
    int64_t text_offset = 0;  // completions stream logprobs: bytes of text sent so far
    std::vector<engine::TokenScore> prompt_scores;  // from the first token's event
    bool echoed = false;  // a stream with echo_logprobs sent the prompt's chunk
    bool opened = false;  // a stream sent the choice's opening chunk (role, or echoed prompt)
    bool prompt_ids_sent = false;  // return_token_ids: a completions stream sent the prompt's
    std::unique_ptr<server::RequestTimingRecorder> timing;  // until the choice ends
    // kResponses and kMessages (one choice): its typed events and final object.
    std::unique_ptr<ChoiceEventWriter> events;
    // Chat and responses with a ReplyTokenMemory: the reply's text and ids so far, until it ends.
    std::string reply_text;
    std::vector<int32_t> reply_ids;
    bool reply_has_tool_calls = false;
    bool done = false;
  };

  GenerationResponse(const ServedModel& model, GenerationSpec spec, ResponseHooks hooks);
  // One Choice per spec choice, without its stream yet.
  void AddChoices();
  // SubmitWhenEncoded's images are done: submit the choices. False when that was refused (then
  // *out holds the error and the response is finished).
  bool SubmitEncoded(http::HttpResponse* out);
  void ChoiceEnded(Choice& choice, const std::string& finish_reason) const;
  // Collects a chat reply's text and ids; when it ends with "stop" or "length", hands its content
  // (after any `</think>`, without the token that ended it) to model_.reply_tokens.
  void RecordReply(Choice& choice, const ChoiceDelta& delta) const;
  // Streams open when the response starts (the Responses API's response.created) and each
  // chat / completions choice opens with its first event (the role chunk, or the echoed
  // prompt), as vLLM streams: the first chunk a client sees comes with the first token, so
  // clients that time the first chunk (vLLM's benchmark) measure the real time to first token.
  void StreamStart(std::string* body) const;
  void StreamOpenChoice(Choice& choice, std::string* body);
  void StreamDelta(Choice& choice, const ChoiceDelta& delta, std::string* body);
  // A prompt_progress chunk (llama.cpp's shape: chat, a delta {"role": "assistant", "content":
  // null}; completions, empty text) for a progress event.
  void StreamProgress(const Choice& choice, const server::PrefillProgress& progress,
                      std::string* body) const;
  // One chat / completions chunk of `choice` as an SSE event (with its usage so far when
  // continuous_usage; with return_token_ids, `token_ids` — the generated tokens it consumed —
  // and the prompt's: completions in each choice's first chunk, chat (one prompt, at the top
  // level) in the stream's first chunk).
  std::string ChunkEvent(Choice& choice, Json chunk, std::vector<int32_t> token_ids = {});
  // Completions stream with echo and logprobs: the prompt's chunk, once its scores are in.
  void StreamEcho(Choice& choice, std::string* body);
  // The prompt entries of a finished choice (echo logprobs, prompt_logprobs).
  void AddPromptScores(const Choice& choice, FinalChoice* final) const;
  void Accumulate(Choice& choice, ChoiceDelta&& delta) const;
  Usage TotalUsage() const;
  void Finish(http::HttpResponse* out);
  void DetachAll();

  const ServedModel& model_;
  GenerationSpec spec_;  // only SubmitEncoded changes it (the choices' media)
  std::vector<Choice> choices_;
  std::shared_ptr<ImageEncodeJob> images_;  // SubmitWhenEncoded until it submits
  std::function<void()> wake_;
  ResponseHooks hooks_;
  absl::Status error_;
  bool started_ = false;
  bool chat_prompt_ids_sent_ = false;  // return_token_ids: a chat stream sent the prompt's
  bool finished_ = false;
};

// "chatcmpl-<32 hex>" / "cmpl-<32 hex>" (random).
std::string NewResponseId(std::string_view prefix);
// A random 64-bit sampler seed for requests without a seed.
uint64_t RandomSeed();
// A stable 64-bit hash of a cache_salt string (0 for an empty salt).
uint64_t CacheSaltHash(std::string_view salt);

}  // namespace strata::frontend
