// generate_call.h: submit, poll the request streams, translate and write.
#include "server/grpc/generate_call.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/frontend/choice_decoder.h"
#include "server/grpc/generate_request.h"
#include "server/request_timing_recorder.h"

namespace strata::rpc {
namespace {

// How often a waiting call checks for client cancellation and deadlines.
constexpr absl::Duration kPollInterval = absl::Milliseconds(10);

// Wakes the call's thread when the engine pushes events to any of its streams.
struct Wakeup {
  std::mutex mu;
  std::condition_variable cv;
  bool pending = false;

  void Notify() {
    {
      std::lock_guard<std::mutex> lock(mu);
      pending = true;
    }
    cv.notify_one();
  }
  void Wait(absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, absl::ToChronoMilliseconds(timeout), [this] { return pending; });
    pending = false;
  }
};

struct ChoiceRun {
  const GrpcChoice* spec = nullptr;
  std::shared_ptr<server::RequestStream> stream;
  std::unique_ptr<frontend::ChoiceDecoder> decoder;
  std::vector<int32_t> output_ids;
  double first_token_ms = -1.0;
  double last_token_ms = 0.0;
  bool done = false;
  // The request metrics' view of the choice, until it is reported (EndChoice).
  std::unique_ptr<server::RequestTimingRecorder> timing;
};

class GenerateCall {
 public:
  GenerateCall(const ServiceState& state, const frontend::ServedModel& model,
               GrpcGeneration generation, grpc::ServerContext* context,
               grpc::ServerWriterInterface<v1::GenerateResponse>* writer, absl::Time received)
      : state_(state),
        model_(model),
        gen_(std::move(generation)),
        context_(context),
        writer_(writer),
        received_(received) {}
  ~GenerateCall() {
    CancelUnfinished();
    for (ChoiceRun& choice : choices_) EndChoice(choice, "abort");  // those never ended
  }

  absl::Status Submit();
  grpc::Status Run();

 private:
  // Applies one event; false when the client is gone (a write failed).
  bool Apply(ChoiceRun& choice, const server::StreamEvent& event, absl::Status* error);
  void FillComplete(const ChoiceRun& choice, const frontend::ChoiceDelta& delta,
                    const server::StreamEvent& event, v1::Complete* complete) const;
  void CancelUnfinished();
  // Reports the choice's timings once, with `finish_reason` (REST's ChoiceEnded).
  void EndChoice(ChoiceRun& choice, const std::string& finish_reason) const;

  const ServiceState& state_;
  const frontend::ServedModel& model_;
  const GrpcGeneration gen_;
  grpc::ServerContext* context_;
  grpc::ServerWriterInterface<v1::GenerateResponse>* writer_;
  const absl::Time received_;
  double queued_ms_ = 0.0;
  std::shared_ptr<Wakeup> wakeup_ = std::make_shared<Wakeup>();
  std::vector<ChoiceRun> choices_;
};

absl::Status GenerateCall::Submit() {
  choices_.reserve(gen_.choices.size());
  for (const GrpcChoice& spec : gen_.choices) {
    ChoiceRun run;
    run.spec = &spec;
    run.decoder = std::make_unique<frontend::ChoiceDecoder>(*model_.tokenizer, spec.options);
    absl::StatusOr<std::shared_ptr<server::RequestStream>> stream =
        model_.engine->Submit(spec.request);
    if (!stream.ok()) return stream.status();  // the destructor cancels the earlier ones
    run.stream = *std::move(stream);
    run.timing = std::make_unique<server::RequestTimingRecorder>(
        spec.request.request_id, server::RequestTimingRecorder::Now(),
        static_cast<int64_t>(spec.request.prompt.size()));
    run.stream->SetNotifier([w = wakeup_] { w->Notify(); });
    choices_.push_back(std::move(run));
  }
  queued_ms_ = absl::ToDoubleMilliseconds(absl::Now() - received_);
  wakeup_->Notify();  // events pushed before the notifier was set
  return absl::OkStatus();
}

grpc::Status GenerateCall::Run() {
  size_t num_done = 0;
  while (num_done < choices_.size()) {
    if (context_->IsCancelled()) {
      CancelUnfinished();
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the request");
    }
    for (ChoiceRun& choice : choices_) {
      if (choice.done) continue;
      for (const server::StreamEvent& event : choice.stream->Drain()) {
        absl::Status error;
        if (!Apply(choice, event, &error)) {
          CancelUnfinished();
          return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
        }
        if (!error.ok()) return ToGrpcStatus(error);
        if (choice.done) {
          ++num_done;
          break;
        }
      }
    }
    if (num_done < choices_.size()) wakeup_->Wait(kPollInterval);
  }
  return grpc::Status::OK;
}

bool GenerateCall::Apply(ChoiceRun& choice, const server::StreamEvent& event, absl::Status* error) {
  if (event.progress_only()) {  // only requests with return_progress get these
    v1::GenerateResponse response;
    v1::Progress* progress = response.mutable_progress();
    progress->set_index(static_cast<uint32_t>(choice.spec->index));
    progress->set_total(event.progress->total);
    progress->set_cached(event.progress->cached);
    progress->set_processed(event.progress->processed);
    progress->set_time_ms(event.progress->time_ms);
    return writer_->Write(response);
  }
  if (choice.timing) choice.timing->OnEvent(event, server::RequestTimingRecorder::Now());
  frontend::ChoiceDelta delta = choice.decoder->Apply(event);
  if (!delta.error.ok()) {
    *error = delta.error;
    choice.done = true;
    EndChoice(choice, "error");
    return true;
  }
  const double at_ms = queued_ms_ + event.elapsed_ms;
  if (!event.token_ids.empty()) {
    if (choice.first_token_ms < 0) choice.first_token_ms = at_ms;
    choice.last_token_ms = at_ms;
  }
  choice.output_ids.insert(choice.output_ids.end(), event.token_ids.begin(), event.token_ids.end());
  const bool has_text = gen_.detokenize && !delta.text.empty();
  if (!event.token_ids.empty() || has_text) {
    v1::GenerateResponse response;
    v1::Chunk* chunk = response.mutable_chunk();
    chunk->set_index(static_cast<uint32_t>(choice.spec->index));
    chunk->mutable_token_ids()->Add(event.token_ids.begin(), event.token_ids.end());
    if (has_text) chunk->set_text(delta.text);
    for (size_t k = 0; k < event.logprobs.size() && k < event.token_ids.size(); ++k) {
      v1::TokenLogprob* lp = chunk->add_logprobs();
      lp->set_token_id(event.token_ids[k]);
      lp->set_logprob(event.logprobs[k]);
      if (k < event.top_logprobs.size()) {
        for (const engine::TokenLogprob& top : event.top_logprobs[k]) {
          v1::TokenLogprob* t = lp->add_top();
          t->set_token_id(top.token_id);
          t->set_logprob(top.logprob);
        }
      }
    }
    for (const engine::TokenScore& score : event.prompt_scores) {
      v1::TokenLogprob* lp = chunk->add_prompt_logprobs();
      lp->set_token_id(score.token_id);
      lp->set_logprob(score.logprob);
      lp->set_rank(score.rank);
      for (const engine::TokenLogprob& top : score.top) {
        v1::TokenLogprob* t = lp->add_top();
        t->set_token_id(top.token_id);
        t->set_logprob(top.logprob);
      }
    }
    chunk->mutable_usage()->set_prompt_tokens(choice.decoder->num_prompt_tokens());
    chunk->mutable_usage()->set_completion_tokens(choice.decoder->num_output_tokens());
    chunk->mutable_usage()->set_cached_tokens(choice.decoder->num_cached_tokens());
    if (!writer_->Write(response)) return false;
  }
  if (!delta.finish_reason) return true;
  if (delta.stop_string_matched) model_.engine->Cancel(choice.spec->request.request_id);
  choice.done = true;
  EndChoice(choice, *delta.finish_reason);
  v1::GenerateResponse response;
  FillComplete(choice, delta, event, response.mutable_complete());
  return writer_->Write(response);
}

void GenerateCall::FillComplete(const ChoiceRun& choice, const frontend::ChoiceDelta& delta,
                                const server::StreamEvent& event, v1::Complete* complete) const {
  complete->set_index(static_cast<uint32_t>(choice.spec->index));
  complete->set_finish_reason(*delta.finish_reason);
  const std::vector<std::string>& stops = choice.spec->options.detokenizer.stop;
  if (delta.stop_string_matched) {
    // The stop string that occurs first in the output's text.
    const std::string text = model_.tokenizer->Decode(choice.output_ids).value_or("");
    size_t best = std::string::npos;
    for (const std::string& stop : stops) {
      const size_t at = text.find(stop);
      if (at != std::string::npos && (best == std::string::npos || at < best)) {
        best = at;
        complete->set_matched_stop_str(stop);
      }
    }
  } else if (*delta.finish_reason == "stop" && !choice.output_ids.empty()) {
    const std::vector<int32_t>& hidden = choice.spec->options.hidden_stop_ids;
    const int32_t last = choice.output_ids.back();
    if (std::find(hidden.begin(), hidden.end(), last) != hidden.end()) {
      complete->set_matched_stop_token_id(last);
    }
  }
  v1::Usage* usage = complete->mutable_usage();
  usage->set_prompt_tokens(choice.decoder->num_prompt_tokens());
  usage->set_completion_tokens(choice.decoder->num_output_tokens());
  usage->set_cached_tokens(choice.decoder->num_cached_tokens());
  v1::Timings* timings = complete->mutable_timings();
  timings->set_queued_ms(queued_ms_);
  const double end_ms = queued_ms_ + event.elapsed_ms;
  timings->set_first_token_ms(choice.first_token_ms >= 0 ? choice.first_token_ms : end_ms);
  timings->set_last_token_ms(choice.first_token_ms >= 0 ? choice.last_token_ms : end_ms);
}

void GenerateCall::EndChoice(ChoiceRun& choice, const std::string& finish_reason) const {
  if (!choice.timing) return;
  state_.ChoiceFinished(choice.timing->Ended(finish_reason, server::RequestTimingRecorder::Now()));
  choice.timing.reset();
}

void GenerateCall::CancelUnfinished() {
  for (ChoiceRun& choice : choices_) {
    if (!choice.stream || choice.stream->finished()) continue;
    model_.engine->Cancel(choice.spec->request.request_id);
  }
}

}  // namespace

grpc::Status RunGenerate(ServiceState& state, grpc::ServerContext* context,
                         const v1::GenerateRequest& request,
                         grpc::ServerWriterInterface<v1::GenerateResponse>* writer,
                         absl::Time received) {
  absl::StatusOr<const frontend::ServedModel*> model = state.ModelForGeneration();
  if (!model.ok()) return ToGrpcStatus(model.status());
  absl::StatusOr<GrpcGeneration> generation = BuildGeneration(
      **model, state.limits(), request, [context] { return context->IsCancelled(); });
  if (!generation.ok()) return ToGrpcStatus(generation.status());
  std::vector<std::string> engine_ids;
  for (const GrpcChoice& choice : generation->choices) {
    engine_ids.push_back(choice.request.request_id);
  }
  const std::string id = generation->request_id;
  // The id Control.Abort takes (generated when the client gave none), sent with the headers.
  context->AddInitialMetadata("strata-request-id", id);
  if (absl::Status s = state.Register(id, std::move(engine_ids)); !s.ok()) {
    return ToGrpcStatus(s);
  }
  grpc::Status status;
  {
    GenerateCall call(state, **model, *std::move(generation), context, writer, received);
    absl::Status submitted = call.Submit();
    status = submitted.ok() ? call.Run() : ToGrpcStatus(submitted);
  }
  state.Unregister(id);
  return status;
}

}  // namespace strata::rpc
