// The engine loop of one data-parallel rank (ARCHITECTURE.md, "Data flow"):
//
//   loop:  admit submissions and cancellations → plan = scheduler.Schedule()
//          → result = executor.Execute(plan) → events = scheduler.Commit(result)
//          → push events to the requests' streams
//
// Front ends call Submit/Cancel from any thread; they never block on the engine. The
// submission queue is bounded: beyond `max_queued_requests` requests not yet finished,
// Submit answers ResourceExhausted ("overloaded") instead of queueing silently.
// One thread (started by Start) owns the scheduler and the executor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/executor.h"
#include "scheduler/scheduler.h"
#include "server/request_stream.h"

namespace strata::server {

struct EngineLoopOptions {
  int64_t max_queued_requests = 1024;  // submitted and unfinished requests, at most
};

// A snapshot of the loop's state after its latest step (for /server_info, metrics, tests).
struct EngineStats {
  int64_t num_steps = 0;
  int64_t num_unfinished = 0;  // submitted and not yet finished
  scheduler::SchedulerStats scheduler;
  double last_step_ms = 0.0;
  int64_t num_generated_tokens_total = 0;  // tokens sampled and delivered since start
  // [num_experts] tokens routed to each expert since start, summed over MoE layers.
  std::vector<int64_t> expert_tokens_total;
};

class EngineLoop {
 public:
  EngineLoop(std::unique_ptr<scheduler::Scheduler> scheduler,
             std::unique_ptr<engine::StepExecutor> executor, EngineLoopOptions options);
  ~EngineLoop();  // Stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  void Start();
  // Aborts everything still running and joins the thread.
  void Stop();

  // Validates and queues a request (thread-safe). InvalidArgument for a request the scheduler
  // can never run (empty prompt, over max_model_len, duplicate id), ResourceExhausted when the
  // queue is full, Unavailable after Stop.
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(scheduler::Request request);
  // Aborts a request (thread-safe; unknown or finished ids are ignored). Its pages and slot are
  // freed at the next step and its stream ends with finish = abort.
  void Cancel(const std::string& request_id);

  EngineStats stats() const;
  const scheduler::SchedulerConfig& scheduler_config() const { return scheduler_config_; }

 private:
  void Run();
  void AdmitPending();
  void Dispatch(const std::vector<scheduler::SequenceEvent>& events);

  std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::unique_ptr<engine::StepExecutor> executor_;
  const scheduler::SchedulerConfig scheduler_config_;
  const EngineLoopOptions options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<scheduler::Request, std::shared_ptr<RequestStream>>> pending_;
  std::vector<std::string> cancels_;
  std::unordered_map<std::string, std::shared_ptr<RequestStream>> streams_;  // unfinished
  bool stopping_ = false;
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace strata::server
