// The engine loops of a process's data-parallel ranks (docs/architecture.md, "Data flow" and
// "Parallelism"). Each local rank has its own thread, scheduler and executor:
//
//   loop:  admit submissions and cancellations → plan = scheduler.Schedule()
//          → result = executor.Execute(plan) → events = scheduler.Commit(result)
//          → push events to the requests' streams (each event timed: elapsed since submission,
//            and the time the request waited before its first step; a request with
//            report_prefill_progress first gets one progress event per prefill chunk)
//
// With a StepGate (server/lockstep.h) a rank is one of a group that steps in lockstep: before
// each step the ranks agree on "has work"; while any rank has work every rank runs the step (an
// empty plan where it has none), and the group idles together otherwise.
//
// Front ends call Submit/Cancel from any thread; they never block on the engine. Submit puts a
// request on the least-loaded local rank (its unfinished requests; ties taken in turn, so an
// idle group's sequential requests alternate). The submission queue is
// bounded: beyond `max_queued_requests` requests not yet finished (all local ranks together),
// Submit answers ResourceExhausted ("overloaded") instead of queueing silently; an id already in
// flight is AlreadyExists.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/executor.h"
#include "scheduler/scheduler.h"
#include "server/lockstep.h"
#include "server/request_stream.h"

namespace strata::server {

// A snapshot of a rank's state after its latest step (for /server_info, metrics, tests). For
// several local ranks, EngineLoop::stats() sums them (usage fractions over the summed pools).
struct EngineStats {
  int64_t num_steps = 0;
  int64_t num_empty_steps = 0;  // lockstep: steps run with an empty plan for other ranks
  int64_t num_unfinished = 0;   // submitted and not yet finished
  scheduler::SchedulerStats scheduler;
  double last_step_ms = 0.0;
  int64_t num_generated_tokens_total = 0;  // tokens sampled and delivered since start
  // [num_experts] tokens routed to each expert since start, summed over MoE layers (with expert
  // parallelism: the tokens this rank's experts ran).
  std::vector<int64_t> expert_tokens_total;
  double all_to_all_seconds_total = 0.0;  // MoE exchange time since start (expert parallelism)
  // The offload tiers under the rank's scheduler, if any (docs/kv-offload.md), after its last
  // step.
  std::optional<kvcache::OffloadTiersStats> offload;
};

struct EngineLoopOptions {
  int64_t max_queued_requests = 1024;  // submitted and unfinished requests, at most
  // Lockstep only. An idle group agrees again after `idle_poll`, doubling while it stays idle
  // up to `idle_poll_max` (each agreement is one tiny collective per rank): what a request
  // waits, at most, for the other ranks of an idle group to wake up.
  std::chrono::milliseconds idle_poll{5};
  std::chrono::milliseconds idle_poll_max{20};
  // Lockstep only. After Stop(), how long a rank keeps taking part in steps for ranks that
  // still work before leaving anyway (those then fail on their collective timeout).
  std::chrono::milliseconds stop_grace{60000};
  // Lockstep only. Called on the rank's thread when its gate fails; null: ExitOnCollectiveError
  // (the process exits kCollectiveFailureExitCode). When it returns, that rank's loop ends.
  std::function<void(int rank, const absl::Status& status)> on_gate_error;
  // > 0: while sequences are generating, each rank cuts prompt chunks so that a step takes about
  // this long (scheduler/prefill_pacer.h, from the step times it measures); 0: off.
  double target_itl_ms = 0.0;
  // Optional, called on a rank's thread after each of its steps that ran work (lockstep's empty
  // steps are folded into the next report), outside the loop's lock: the rank's stats after the
  // previous report and now, so counter differences cover exactly the steps in between and
  // `after.last_step_ms` is this step's duration. Metrics hang here (serve: one observation per
  // step); it runs inside the step loop, so it must be quick.
  std::function<void(int local_rank, const EngineStats& before, const EngineStats& after)> on_step;
};

// What one local rank runs.
struct EngineRank {
  std::unique_ptr<scheduler::Scheduler> scheduler;
  std::unique_ptr<engine::StepExecutor> executor;
  // Null: this rank steps alone. Otherwise every rank of the gate's group must be running.
  std::unique_ptr<StepGate> gate;
  // Optional, called on the rank's thread after each step: the MoE exchange time since start
  // (seconds), reported as EngineStats::all_to_all_seconds_total.
  std::function<double()> all_to_all_seconds_total;
};

class EngineLoop {
 public:
  // One rank, no lockstep.
  EngineLoop(std::unique_ptr<scheduler::Scheduler> scheduler,
             std::unique_ptr<engine::StepExecutor> executor, EngineLoopOptions options);
  // Several local ranks (≥ 1). Their schedulers must have the same configuration.
  EngineLoop(std::vector<EngineRank> ranks, EngineLoopOptions options);
  ~EngineLoop();  // Stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  void Start();
  // Aborts everything still running and joins the threads. In lockstep, a rank leaves once all
  // ranks of the group stop (or after `stop_grace`), running empty steps for the others until
  // then.
  void Stop();

  // Validates and queues a request on the least-loaded local rank (thread-safe).
  // InvalidArgument for a request the scheduler can never run (empty prompt, over
  // max_model_len, duplicate id), ResourceExhausted when the queue is full, Unavailable after
  // Stop.
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(scheduler::Request request);
  // Aborts a request (thread-safe; unknown or finished ids are ignored). Its pages and slot are
  // freed at the next step and its stream ends with finish = abort.
  void Cancel(const std::string& request_id);

  // Scheduler::ResetPrefixCache on every local rank, each on its own thread between two of its
  // steps; the results in local-rank order once all ran (thread-safe). DeadlineExceeded when
  // they did not within `timeout` (a long step; the resets still happen), Unavailable when the
  // loop is not running.
  absl::StatusOr<std::vector<scheduler::Scheduler::PrefixCacheReset>> ResetPrefixCache(
      std::chrono::milliseconds timeout);

  // All local ranks together, and one local rank (0 ≤ local_rank < num_ranks()).
  EngineStats stats() const;
  EngineStats rank_stats(int local_rank) const;
  int num_ranks() const { return static_cast<int>(ranks_.size()); }
  const scheduler::SchedulerConfig& scheduler_config() const { return scheduler_config_; }

 private:
  struct Rank;
  using Clock = std::chrono::steady_clock;

  void Run(Rank& r);
  void RunLockstep(Rank& r);
  void RunStep(Rank& r, bool has_work);
  bool StopGraceOver(const Rank& r, Clock::time_point stop_seen) const;
  void AdmitPending(Rank& r);
  void Dispatch(Rank& r, std::vector<scheduler::SequenceEvent> events);
  void NoteFirstScheduled(Rank& r, const engine::StepPlan& plan);
  // At the loop's end, with offload tiers: the device cache's blocks and checkpoints the tiers
  // lack go down to them (Scheduler::PlanWriteDown), so a restart finds them. In lockstep one
  // plan per agreed step (RunLockstep), else all at once (WriteDownCaches).
  const engine::StepPlan* NextWriteDown(Rank& r);  // null: nothing (more) to write down
  void RunWriteDown(Rank& r, const engine::StepPlan& plan);
  void LogWriteDown(const Rank& r);
  void WriteDownCaches(Rank& r);
  void ReportPrefillProgress(Rank& r, const engine::StepPlan& plan);
  void RecordStep(Rank& r, const engine::StepResult& result, double step_ms, bool empty);
  void UpdateStats(Rank& r, const engine::StepResult& result, double step_ms, bool empty,
                   double all_to_all_s);  // under mu_

  std::vector<std::unique_ptr<Rank>> ranks_;
  const scheduler::SchedulerConfig scheduler_config_;
  const EngineLoopOptions options_;

  // Guards the queues, streams, stats and stopping_ of every rank.
  mutable std::mutex mu_;
  struct StreamEntry {
    std::shared_ptr<RequestStream> stream;
    int rank = 0;
    Clock::time_point submitted;
  };
  std::unordered_map<std::string, StreamEntry> streams_;  // unfinished requests
  size_t tie_start_ = 0;  // where Submit's least-loaded search starts (after its last choice)
  bool started_ = false;
  bool stopping_ = false;
};

}  // namespace strata::server
