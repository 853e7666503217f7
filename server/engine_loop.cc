#include "server/engine_loop.h"

#include <chrono>

#include "core/log.h"

namespace strata::server {

EngineLoop::EngineLoop(std::unique_ptr<scheduler::Scheduler> scheduler,
                       std::unique_ptr<engine::StepExecutor> executor, EngineLoopOptions options)
    : scheduler_(std::move(scheduler)),
      executor_(std::move(executor)),
      scheduler_config_(scheduler_->config()),
      options_(options) {}

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Run(); });
}

void EngineLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Whatever never finished ends with abort (nothing accepted is silently dropped).
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, stream] : streams_) {
    StreamEvent event;
    event.finish = FinishReason::kAbort;
    stream->Push(std::move(event));
  }
  streams_.clear();
  pending_.clear();
}

absl::StatusOr<std::shared_ptr<RequestStream>> EngineLoop::Submit(scheduler::Request request) {
  absl::Status valid = scheduler::ValidateRequest(request, scheduler_config_);
  if (!valid.ok()) return valid;
  auto stream = std::make_shared<RequestStream>(request.request_id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the engine is shutting down");
    if (static_cast<int64_t>(streams_.size()) >= options_.max_queued_requests) {
      return absl::ResourceExhaustedError("server overloaded: " + std::to_string(streams_.size()) +
                                          " requests in flight (limit " +
                                          std::to_string(options_.max_queued_requests) + ")");
    }
    if (!streams_.emplace(request.request_id, stream).second) {
      return absl::InvalidArgumentError("request id '" + request.request_id +
                                        "' is already in flight");
    }
    pending_.emplace_back(std::move(request), stream);
  }
  cv_.notify_all();
  return stream;
}

void EngineLoop::Cancel(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!streams_.count(request_id)) return;
    cancels_.push_back(request_id);
  }
  cv_.notify_all();
}

EngineStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// Moves queued submissions and cancellations into the scheduler (engine thread).
void EngineLoop::AdmitPending() {
  std::deque<std::pair<scheduler::Request, std::shared_ptr<RequestStream>>> pending;
  std::vector<std::string> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(pending_);
    cancels.swap(cancels_);
  }
  for (auto& [request, stream] : pending) {
    std::string id = request.request_id;
    absl::StatusOr<engine::SequenceId> added = scheduler_->Add(std::move(request));
    if (!added.ok()) {
      StreamEvent event;
      event.error = added.status();
      stream->Push(std::move(event));
      std::lock_guard<std::mutex> lock(mu_);
      streams_.erase(id);
    }
  }
  for (const std::string& id : cancels) scheduler_->Abort(id);
}

void EngineLoop::Dispatch(const std::vector<scheduler::SequenceEvent>& events) {
  std::vector<std::pair<std::shared_ptr<RequestStream>, StreamEvent>> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const scheduler::SequenceEvent& e : events) {
      auto it = streams_.find(e.request_id);
      if (it == streams_.end()) continue;
      StreamEvent event;
      if (e.token) {
        ++stats_.num_generated_tokens_total;
        event.token_ids.push_back(*e.token);
        event.logprobs.push_back(e.logprob);
        event.top_logprobs.push_back(e.top_logprobs);
      }
      if (e.finished) {
        switch (*e.finished) {
          case scheduler::FinishReason::kStop:
            event.finish = FinishReason::kStop;
            break;
          case scheduler::FinishReason::kLength:
            event.finish = FinishReason::kLength;
            break;
          case scheduler::FinishReason::kAbort:
            event.finish = FinishReason::kAbort;
            break;
        }
      }
      event.num_prompt_tokens = e.num_prompt_tokens;
      event.num_cached_tokens = e.num_cached_tokens;
      event.num_output_tokens = e.num_output_tokens;
      out.emplace_back(it->second, std::move(event));
      if (e.finished) streams_.erase(it);
    }
    stats_.num_unfinished = static_cast<int64_t>(streams_.size());
  }
  for (auto& [stream, event] : out) stream->Push(std::move(event));
}

void EngineLoop::Run() {
  LOG_INFO("engine", "engine loop started");
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !pending_.empty() || !cancels_.empty() || scheduler_->HasWork();
      });
      if (stopping_) break;
    }
    AdmitPending();
    if (!scheduler_->HasWork()) continue;
    const auto start = std::chrono::steady_clock::now();
    engine::StepPlan plan = scheduler_->Schedule();
    engine::StepResult result;
    if (!plan.sequences.empty()) result = executor_->Execute(plan);
    result.step_id = plan.step_id;
    std::vector<scheduler::SequenceEvent> events = scheduler_->Commit(result);
    Dispatch(events);
    const double step_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    LOG_DEBUG("engine", "step={} seqs={} tokens={} ms={:.2f}", plan.step_id, plan.sequences.size(),
              plan.num_tokens(), step_ms);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.num_steps++;
    stats_.last_step_ms = step_ms;
    if (stats_.expert_tokens_total.size() < result.expert_tokens.size()) {
      stats_.expert_tokens_total.resize(result.expert_tokens.size(), 0);
    }
    for (size_t e = 0; e < result.expert_tokens.size(); ++e) {
      stats_.expert_tokens_total[e] += result.expert_tokens[e];
    }
    stats_.scheduler = scheduler_->stats();
  }
  LOG_INFO("engine", "engine loop stopped");
}

}  // namespace strata::server
