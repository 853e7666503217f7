#include "server/engine_loop.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/log.h"
#include "scheduler/prefill_pacer.h"

namespace strata::server {

// One local rank. The queues and stats are guarded by EngineLoop::mu_; the scheduler, executor
// and gate belong to the rank's thread.
struct EngineLoop::Rank {
  struct Pending {
    scheduler::Request request;
    std::shared_ptr<RequestStream> stream;
    Clock::time_point submitted;
  };
  // When a sequence was submitted and how long it waited for its first step (rank thread).
  struct SequenceClock {
    Clock::time_point submitted;
    std::optional<double> queued_ms;
    // With report_prefill_progress: the request, its prompt's length, the prompt tokens its
    // first step found in the caches, and whether the prompt is all computed (no more progress).
    std::string request_id;
    int64_t num_prompt_tokens = 0;
    int64_t num_cached_tokens = 0;
    bool report_progress = false;
    bool prompt_done = false;
  };

  int index = 0;  // local rank
  EngineRank parts;
  std::condition_variable cv;
  std::deque<Pending> pending;
  std::vector<std::string> cancels;
  // Work for the rank's thread between steps (ResetPrefixCache).
  std::vector<std::function<void(scheduler::Scheduler&)>> controls;
  int64_t num_unfinished = 0;  // requests submitted here and not finished
  EngineStats stats;
  engine::StepResult result;  // of the latest step (rank thread)
  // Rank thread: the admitted, unfinished sequences' clocks, how many of them have not run a
  // step yet, the stats at the latest on_step report and the next one (reused: the copies keep
  // their vectors' capacity, so a report allocates nothing).
  std::unordered_map<engine::SequenceId, SequenceClock> clocks;
  int64_t num_never_scheduled = 0;
  EngineStats reported, to_report;
  std::optional<scheduler::PrefillPacer> pacer;  // with target_itl_ms
  // The graceful stop's write-down: when its first plan ran, units written (rank thread).
  std::optional<Clock::time_point> write_down_start;
  int64_t written_down_units = 0;
  std::thread thread;
};

namespace {

double MillisecondsSince(std::chrono::steady_clock::time_point start,
                         std::chrono::steady_clock::time_point now) {
  return std::chrono::duration<double, std::milli>(now - start).count();
}

std::vector<EngineRank> OneRank(std::unique_ptr<scheduler::Scheduler> scheduler,
                                std::unique_ptr<engine::StepExecutor> executor) {
  std::vector<EngineRank> ranks(1);
  ranks[0].scheduler = std::move(scheduler);
  ranks[0].executor = std::move(executor);
  return ranks;
}

const scheduler::SchedulerConfig& FirstConfig(const std::vector<EngineRank>& ranks) {
  CHECK(!ranks.empty()) << "an engine loop needs at least one rank";
  return ranks[0].scheduler->config();
}

// Sums `b` into `a`; usage fractions become held / total over both pools.
void AddStats(const EngineStats& b, EngineStats& a) {
  a.num_steps = std::max(a.num_steps, b.num_steps);  // ranks in lockstep step together
  a.num_empty_steps += b.num_empty_steps;
  a.num_unfinished += b.num_unfinished;
  a.last_step_ms = std::max(a.last_step_ms, b.last_step_ms);
  a.num_generated_tokens_total += b.num_generated_tokens_total;
  a.all_to_all_seconds_total += b.all_to_all_seconds_total;
  if (a.expert_tokens_total.size() < b.expert_tokens_total.size()) {
    a.expert_tokens_total.resize(b.expert_tokens_total.size(), 0);
  }
  for (size_t e = 0; e < b.expert_tokens_total.size(); ++e) {
    a.expert_tokens_total[e] += b.expert_tokens_total[e];
  }
  scheduler::SchedulerStats& s = a.scheduler;
  const scheduler::SchedulerStats& t = b.scheduler;
  s.step_id = std::max(s.step_id, t.step_id);
  s.num_running += t.num_running;
  s.num_waiting += t.num_waiting;
  s.num_scheduled_seqs += t.num_scheduled_seqs;
  s.num_prefill_tokens += t.num_prefill_tokens;
  s.num_decode_tokens += t.num_decode_tokens;
  s.num_preempted += t.num_preempted;
  s.num_preempted_total += t.num_preempted_total;
  s.num_prefill_tokens_total += t.num_prefill_tokens_total;
  s.num_prefill_tokens_computed += t.num_prefill_tokens_computed;
  s.num_prefill_tokens_remaining += t.num_prefill_tokens_remaining;
  s.num_decode_tokens_total += t.num_decode_tokens_total;
  s.num_finished_total += t.num_finished_total;
  s.num_aborted_total += t.num_aborted_total;
  s.num_spec_drafts_total += t.num_spec_drafts_total;
  s.num_spec_draft_tokens_total += t.num_spec_draft_tokens_total;
  s.num_spec_accepted_tokens_total += t.num_spec_accepted_tokens_total;
  s.num_blocks += t.num_blocks;
  s.num_free_blocks += t.num_free_blocks;
  s.num_cached_blocks += t.num_cached_blocks;
  s.num_slots += t.num_slots;
  s.num_free_slots += t.num_free_slots;
  s.num_checkpoints += t.num_checkpoints;
  s.num_lent_checkpoints += t.num_lent_checkpoints;
  s.num_pending_checkpoints += t.num_pending_checkpoints;
  s.num_prefix_queries += t.num_prefix_queries;
  s.num_prefix_query_tokens += t.num_prefix_query_tokens;
  s.num_prefix_hits += t.num_prefix_hits;
  s.num_prefix_hit_tokens += t.num_prefix_hit_tokens;
  s.num_prefix_waits += t.num_prefix_waits;
  s.num_tier_hits += t.num_tier_hits;
  s.num_tier_hit_tokens += t.num_tier_hit_tokens;
  s.num_tier_loaded_blocks += t.num_tier_loaded_blocks;
  s.num_tier_loaded_checkpoints += t.num_tier_loaded_checkpoints;
  s.num_tier_loaded_bytes += t.num_tier_loaded_bytes;
  s.num_tier_stored_units += t.num_tier_stored_units;
  s.num_tier_stored_bytes += t.num_tier_stored_bytes;
  s.num_tier_store_failures += t.num_tier_store_failures;
  s.num_tier_waits += t.num_tier_waits;
  s.num_tier_load_failures += t.num_tier_load_failures;
  s.num_tier_staged_hits += t.num_tier_staged_hits;
  // The ranks share the process's tiers: their snapshots are of the same tiers, never summed.
  if (b.offload.has_value() && !a.offload.has_value()) a.offload = b.offload;
  s.block_usage = s.num_blocks > 0 ? 1.0 - double(s.num_free_blocks) / s.num_blocks : 0.0;
  s.slot_usage = s.num_slots > 0 ? 1.0 - double(s.num_free_slots) / s.num_slots : 0.0;
}

}  // namespace

EngineLoop::EngineLoop(std::unique_ptr<scheduler::Scheduler> scheduler,
                       std::unique_ptr<engine::StepExecutor> executor, EngineLoopOptions options)
    : EngineLoop(OneRank(std::move(scheduler), std::move(executor)), std::move(options)) {}

EngineLoop::EngineLoop(std::vector<EngineRank> ranks, EngineLoopOptions options)
    : scheduler_config_(FirstConfig(ranks)), options_(std::move(options)) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    CHECK(ranks[i].scheduler != nullptr && ranks[i].executor != nullptr) << "rank " << i;
    auto r = std::make_unique<Rank>();
    r->index = static_cast<int>(i);
    r->parts = std::move(ranks[i]);
    if (options_.target_itl_ms > 0) {
      scheduler::PrefillPacerConfig pacing;
      pacing.target_step_ms = options_.target_itl_ms;
      pacing.max_tokens = r->parts.scheduler->config().max_num_batched_tokens;
      r->pacer.emplace(pacing);
      r->parts.scheduler->SetPrefillTokensWithDecodes(r->pacer->tokens());
    }
    // After the cap: the stats before the first step show the one it will use.
    r->stats.scheduler = r->parts.scheduler->stats();
    r->reported = r->stats;
    ranks_.push_back(std::move(r));
  }
}

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_ || stopping_) return;
  started_ = true;
  for (auto& r : ranks_) {
    // What the tiers found at start (a restart's entries) shows before the first step.
    if (const kvcache::OffloadTiers* tiers = r->parts.scheduler->offload_tiers()) {
      r->stats.offload = tiers->Stats();
    }
    Rank* rank = r.get();
    r->thread = std::thread([this, rank] {
      if (rank->parts.gate) {
        RunLockstep(*rank);
      } else {
        Run(*rank);
      }
    });
  }
}

void EngineLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  for (auto& r : ranks_) r->cv.notify_all();
  for (auto& r : ranks_) {
    if (r->thread.joinable()) r->thread.join();
  }
  // Whatever never finished ends with abort (nothing accepted is silently dropped).
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  for (auto& [id, entry] : streams_) {
    StreamEvent event;
    event.finish = FinishReason::kAbort;
    event.elapsed_ms = MillisecondsSince(entry.submitted, now);
    entry.stream->Push(std::move(event));
  }
  streams_.clear();
  for (auto& r : ranks_) {
    r->pending.clear();
    r->num_unfinished = 0;
  }
}

absl::StatusOr<std::shared_ptr<RequestStream>> EngineLoop::Submit(scheduler::Request request) {
  absl::Status valid = scheduler::ValidateRequest(request, scheduler_config_);
  if (!valid.ok()) return valid;
  auto stream = std::make_shared<RequestStream>(request.request_id);
  Rank* target = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the engine is shutting down");
    if (static_cast<int64_t>(streams_.size()) >= options_.max_queued_requests) {
      return absl::ResourceExhaustedError("server overloaded: " + std::to_string(streams_.size()) +
                                          " requests in flight (limit " +
                                          std::to_string(options_.max_queued_requests) + ")");
    }
    // Least loaded: fewest unfinished requests (queued + running). Ties go round the ranks,
    // starting after the previous choice: requests that each finish before the next arrives
    // (an idle group) alternate instead of all landing on the first rank.
    for (size_t k = 0; k < ranks_.size(); ++k) {
      Rank* r = ranks_[(tie_start_ + k) % ranks_.size()].get();
      if (target == nullptr || r->num_unfinished < target->num_unfinished) target = r;
    }
    tie_start_ = static_cast<size_t>(target->index + 1) % ranks_.size();
    const Clock::time_point submitted = Clock::now();
    if (!streams_.emplace(request.request_id, StreamEntry{stream, target->index, submitted})
             .second) {
      return absl::AlreadyExistsError("request id '" + request.request_id +
                                      "' is already in flight");
    }
    target->stats.num_unfinished = ++target->num_unfinished;
    target->pending.push_back(Rank::Pending{std::move(request), stream, submitted});
  }
  target->cv.notify_all();
  return stream;
}

void EngineLoop::Cancel(const std::string& request_id) {
  Rank* target = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(request_id);
    if (it == streams_.end()) return;
    target = ranks_[static_cast<size_t>(it->second.rank)].get();
    target->cancels.push_back(request_id);
  }
  target->cv.notify_all();
}

absl::StatusOr<std::vector<scheduler::Scheduler::PrefixCacheReset>> EngineLoop::ResetPrefixCache(
    std::chrono::milliseconds timeout) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<scheduler::Scheduler::PrefixCacheReset> results;
    size_t done = 0;
  };
  auto shared = std::make_shared<Shared>();
  shared->results.resize(ranks_.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || stopping_) return absl::UnavailableError("the engine is not running");
    for (size_t i = 0; i < ranks_.size(); ++i) {
      ranks_[i]->controls.push_back([shared, i](scheduler::Scheduler& scheduler) {
        const scheduler::Scheduler::PrefixCacheReset reset = scheduler.ResetPrefixCache();
        std::lock_guard<std::mutex> done_lock(shared->mu);
        shared->results[i] = reset;
        ++shared->done;
        shared->cv.notify_all();
      });
    }
  }
  for (const auto& rank : ranks_) rank->cv.notify_all();
  std::unique_lock<std::mutex> lock(shared->mu);
  if (!shared->cv.wait_for(lock, timeout, [&] { return shared->done == ranks_.size(); })) {
    return absl::DeadlineExceededError(
        absl::StrCat("the prefix cache reset did not run within ", timeout.count(),
                     " ms (a long step); it still happens at the next step boundary"));
  }
  return shared->results;
}

EngineStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (ranks_.size() == 1) return ranks_[0]->stats;
  EngineStats sum;
  for (const auto& r : ranks_) AddStats(r->stats, sum);
  return sum;
}

EngineStats EngineLoop::rank_stats(int local_rank) const {
  CHECK(local_rank >= 0 && local_rank < num_ranks()) << "local rank " << local_rank;
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_[static_cast<size_t>(local_rank)]->stats;
}

// Moves queued submissions and cancellations into the scheduler (the rank's thread).
void EngineLoop::AdmitPending(Rank& r) {
  std::deque<Rank::Pending> pending;
  std::vector<std::string> cancels;
  std::vector<std::function<void(scheduler::Scheduler&)>> controls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(r.pending);
    cancels.swap(r.cancels);
    controls.swap(r.controls);
  }
  for (const auto& control : controls) control(*r.parts.scheduler);
  for (Rank::Pending& p : pending) {
    std::string id = p.request.request_id;
    const int64_t num_prompt_tokens = static_cast<int64_t>(p.request.prompt.size());
    const bool report_progress = p.request.report_prefill_progress;
    absl::StatusOr<engine::SequenceId> added = r.parts.scheduler->Add(std::move(p.request));
    if (added.ok()) {
      Rank::SequenceClock& clock = r.clocks[*added];
      clock = Rank::SequenceClock{p.submitted, std::nullopt};
      if (report_progress) {
        clock.request_id = id;
        clock.num_prompt_tokens = num_prompt_tokens;
        clock.report_progress = true;
      }
      ++r.num_never_scheduled;
    } else {
      StreamEvent event;
      event.error = added.status();
      event.elapsed_ms = MillisecondsSince(p.submitted, Clock::now());
      p.stream->Push(std::move(event));
      std::lock_guard<std::mutex> lock(mu_);
      if (streams_.erase(id) > 0) r.stats.num_unfinished = --r.num_unfinished;
    }
  }
  for (const std::string& id : cancels) r.parts.scheduler->Abort(id);
}

void EngineLoop::Dispatch(Rank& r, std::vector<scheduler::SequenceEvent> events) {
  std::vector<std::pair<std::shared_ptr<RequestStream>, StreamEvent>> out;
  const Clock::time_point now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (scheduler::SequenceEvent& e : events) {
      auto it = streams_.find(e.request_id);
      if (it == streams_.end()) continue;
      StreamEvent event;
      if (e.token) {
        ++r.stats.num_generated_tokens_total;
        event.token_ids.push_back(*e.token);
        event.logprobs.push_back(e.logprob);
        event.top_logprobs.push_back(e.top_logprobs);
        event.prompt_scores = std::move(e.prompt_scores);
      }
      event.finish = e.finished;
      event.num_prompt_tokens = e.num_prompt_tokens;
      event.num_cached_tokens = e.num_cached_tokens;
      event.num_output_tokens = e.num_output_tokens;
      event.elapsed_ms = MillisecondsSince(it->second.submitted, now);
      if (auto clock = r.clocks.find(e.seq_id); clock != r.clocks.end()) {
        event.queued_ms = clock->second.queued_ms;
      }
      out.emplace_back(it->second.stream, std::move(event));
      if (e.finished) {
        streams_.erase(it);
        --r.num_unfinished;
      }
    }
    r.stats.num_unfinished = r.num_unfinished;
  }
  for (const scheduler::SequenceEvent& e : events) {
    if (!e.finished) continue;
    auto clock = r.clocks.find(e.seq_id);
    if (clock == r.clocks.end()) continue;
    if (!clock->second.queued_ms) --r.num_never_scheduled;  // aborted while waiting
    r.clocks.erase(clock);
  }
  for (auto& [stream, event] : out) stream->Push(std::move(event));
}

// Stamps the queue time of the plan's sequences that run their first step (and the prompt
// tokens they found in the caches).
void EngineLoop::NoteFirstScheduled(Rank& r, const engine::StepPlan& plan) {
  if (r.num_never_scheduled == 0) return;
  const Clock::time_point now = Clock::now();
  for (const engine::ScheduledSequence& seq : plan.sequences) {
    auto clock = r.clocks.find(seq.seq_id);
    if (clock == r.clocks.end() || clock->second.queued_ms) continue;
    clock->second.queued_ms = MillisecondsSince(clock->second.submitted, now);
    clock->second.num_cached_tokens = seq.num_computed_tokens;
    if (--r.num_never_scheduled == 0) return;
  }
}

// One progress event per prefill chunk of the plan's sequences that asked for them, the last
// (processed == total) with the chunk that completes the prompt; pushed before that step's
// token events.
void EngineLoop::ReportPrefillProgress(Rank& r, const engine::StepPlan& plan) {
  std::vector<std::pair<std::string, StreamEvent>> out;
  const Clock::time_point now = Clock::now();
  for (const engine::ScheduledSequence& seq : plan.sequences) {
    auto it = r.clocks.find(seq.seq_id);
    if (it == r.clocks.end()) continue;
    Rank::SequenceClock& clock = it->second;
    if (!clock.report_progress || clock.prompt_done || !clock.queued_ms) continue;
    PrefillProgress progress;
    progress.total = clock.num_prompt_tokens;
    progress.cached = clock.num_cached_tokens;
    progress.processed =
        std::min(clock.num_prompt_tokens, seq.num_computed_tokens +
                                              static_cast<int64_t>(seq.token_ids.size()) -
                                              seq.num_draft_tokens);
    progress.time_ms = MillisecondsSince(clock.submitted, now) - *clock.queued_ms;
    clock.prompt_done = progress.processed >= progress.total;
    StreamEvent event;
    event.num_prompt_tokens = progress.total;
    event.num_cached_tokens = progress.cached;
    event.queued_ms = clock.queued_ms;
    event.elapsed_ms = MillisecondsSince(clock.submitted, now);
    event.progress = progress;
    out.emplace_back(clock.request_id, std::move(event));
  }
  if (out.empty()) return;
  std::vector<std::pair<std::shared_ptr<RequestStream>, StreamEvent>> pushes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, event] : out) {
      auto stream = streams_.find(id);
      if (stream != streams_.end()) pushes.emplace_back(stream->second.stream, std::move(event));
    }
  }
  for (auto& [stream, event] : pushes) stream->Push(std::move(event));
}

void EngineLoop::RecordStep(Rank& r, const engine::StepResult& result, double step_ms, bool empty) {
  const double all_to_all_s =
      r.parts.all_to_all_seconds_total ? r.parts.all_to_all_seconds_total() : 0.0;
  const bool report = options_.on_step && !empty;
  {
    std::lock_guard<std::mutex> lock(mu_);
    UpdateStats(r, result, step_ms, empty, all_to_all_s);
    if (report) r.to_report = r.stats;
  }
  if (!report) return;
  options_.on_step(r.index, r.reported, r.to_report);
  std::swap(r.reported, r.to_report);
}

void EngineLoop::UpdateStats(Rank& r, const engine::StepResult& result, double step_ms, bool empty,
                             double all_to_all_s) {
  EngineStats& s = r.stats;
  s.num_steps++;
  if (empty) s.num_empty_steps++;
  s.last_step_ms = step_ms;
  s.all_to_all_seconds_total = all_to_all_s;
  if (s.expert_tokens_total.size() < result.expert_tokens.size()) {
    s.expert_tokens_total.resize(result.expert_tokens.size(), 0);
  }
  for (size_t e = 0; e < result.expert_tokens.size(); ++e) {
    s.expert_tokens_total[e] += result.expert_tokens[e];
  }
  s.scheduler = r.parts.scheduler->stats();
  if (const kvcache::OffloadTiers* tiers = r.parts.scheduler->offload_tiers()) {
    s.offload = tiers->Stats();
  }
}

// One step. Without work (lockstep: other ranks work) the plan is empty but still executed:
// the executor's forward takes part in every MoE exchange.
void EngineLoop::RunStep(Rank& r, bool has_work) {
  const auto start = Clock::now();
  static const engine::StepPlan kEmptyPlan;
  // The scheduler's plan stays valid until its next Schedule(): no copy (its loads carry bytes).
  const engine::StepPlan& plan = has_work ? r.parts.scheduler->Schedule() : kEmptyPlan;
  if (has_work) NoteFirstScheduled(r, plan);
  engine::StepResult& result = r.result;  // reused: the executor keeps its vectors' capacity
  const bool copies = !plan.cache_saves.empty() || !plan.cache_loads.empty();
  if (!plan.sequences.empty() || copies || r.parts.gate) {
    r.parts.executor->ExecuteInto(plan, &result);
  } else {
    result.sampled.clear();
    result.saved.clear();
    result.expert_tokens.clear();
  }
  if (has_work) {
    result.step_id = plan.step_id;
    std::vector<scheduler::SequenceEvent> events = r.parts.scheduler->Commit(&result);
    ReportPrefillProgress(r, plan);
    Dispatch(r, std::move(events));
  }
  const double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  LOG_DEBUG("engine", "rank={} step={} seqs={} tokens={} ms={:.2f}", r.index, plan.step_id,
            plan.sequences.size(), plan.num_tokens(), step_ms);
  RecordStep(r, result, step_ms, /*empty=*/!has_work);
  if (r.pacer && has_work) {
    const scheduler::SchedulerStats& step = r.stats.scheduler;  // this thread writes it
    r.pacer->Observe(step.num_prefill_tokens, step.num_decode_tokens, step_ms);
    r.parts.scheduler->SetPrefillTokensWithDecodes(r.pacer->tokens());
  }
  if (has_work && plan.sequences.empty() && !copies && !r.parts.gate) {
    // Work but nothing runnable (a request waiting for its prefix to be read from disk): wait
    // a little for the read or a new event instead of spinning.
    std::unique_lock<std::mutex> lock(mu_);
    r.cv.wait_for(lock, std::chrono::milliseconds(1), [&] {
      return stopping_ || !r.pending.empty() || !r.cancels.empty() || !r.controls.empty();
    });
  }
}

const engine::StepPlan* EngineLoop::NextWriteDown(Rank& r) {
  if (r.parts.scheduler->offload_tiers() == nullptr) return nullptr;
  constexpr int64_t kBatchBytes = int64_t{256} << 20;  // host memory a batch holds at once
  const engine::StepPlan* plan = r.parts.scheduler->PlanWriteDown(kBatchBytes);
  if (plan != nullptr && !r.write_down_start) r.write_down_start = Clock::now();
  return plan;
}

void EngineLoop::RunWriteDown(Rank& r, const engine::StepPlan& plan) {
  r.parts.executor->ExecuteInto(plan, &r.result);
  r.result.step_id = plan.step_id;
  r.parts.scheduler->Commit(&r.result);
  r.written_down_units += static_cast<int64_t>(plan.cache_saves.size());
}

void EngineLoop::LogWriteDown(const Rank& r) {
  if (r.written_down_units == 0) return;
  LOG_INFO("kvoffload", "shutdown: {} cached blocks and checkpoints written down in {:.0f} ms",
           r.written_down_units, MillisecondsSince(*r.write_down_start, Clock::now()));
}

void EngineLoop::WriteDownCaches(Rank& r) {
  while (const engine::StepPlan* plan = NextWriteDown(r)) RunWriteDown(r, *plan);
  LogWriteDown(r);
}

void EngineLoop::Run(Rank& r) {
  LOG_INFO("engine", "engine loop started");
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      r.cv.wait(lock, [&] {
        return stopping_ || !r.pending.empty() || !r.cancels.empty() || !r.controls.empty() ||
               r.parts.scheduler->HasWork();
      });
      if (stopping_) break;
    }
    AdmitPending(r);
    if (!r.parts.scheduler->HasWork()) continue;
    RunStep(r, /*has_work=*/true);
  }
  WriteDownCaches(r);
  LOG_INFO("engine", "engine loop stopped");
}

bool EngineLoop::StopGraceOver(const Rank& r, Clock::time_point stop_seen) const {
  if (Clock::now() - stop_seen < options_.stop_grace) return false;
  LOG_WARN("engine",
           "rank {}: other ranks still run {:.1f} s after stop; leaving the group (they will "
           "fail on their collective timeout)",
           r.parts.gate->rank(), std::chrono::duration<double>(options_.stop_grace).count());
  return true;
}

void EngineLoop::RunLockstep(Rank& r) {
  StepGate& gate = *r.parts.gate;
  LOG_INFO("engine", "engine loop of rank {}/{} started (lockstep)", gate.rank(),
           gate.world_size());
  std::optional<Clock::time_point> stop_seen;
  std::chrono::milliseconds idle_wait = options_.idle_poll;
  bool written_down = false;  // stopping, and nothing (more) to write down
  while (true) {
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stopping_;
    }
    // A stopping rank takes no more work; what it still holds is aborted by Stop().
    if (!stopping) AdmitPending(r);
    if (stopping && !stop_seen) stop_seen = Clock::now();
    // A stopping rank with offload tiers (a tensor-parallel lead) first writes its device cache
    // down, a plan per agreed step: its followers copy their shares of each unit.
    const engine::StepPlan* write_down = stopping && !written_down ? NextWriteDown(r) : nullptr;
    written_down = stopping && write_down == nullptr;
    const bool has_work = (!stopping && r.parts.scheduler->HasWork()) || write_down != nullptr;
    absl::StatusOr<GateDecision> decision = gate.Agree({has_work, written_down});
    if (!decision.ok()) {
      if (options_.on_gate_error) {
        options_.on_gate_error(gate.rank(), decision.status());
        break;
      }
      ExitOnCollectiveError(gate.rank(), "the engine step", decision.status());
    }
    if (decision->any_work()) {
      if (write_down != nullptr) {
        RunWriteDown(r, *write_down);
      } else {
        RunStep(r, has_work);
      }
      idle_wait = options_.idle_poll;
      continue;
    }
    if (decision->all_stopping()) break;
    if (stopping && StopGraceOver(r, *stop_seen)) break;
    // The group is idle: wait for local input (or the poll interval), then agree again.
    std::unique_lock<std::mutex> lock(mu_);
    r.cv.wait_for(lock, idle_wait,
                  [&] { return !stopping_ && (!r.pending.empty() || !r.cancels.empty()); });
    idle_wait = std::min(idle_wait * 2, std::max(options_.idle_poll, options_.idle_poll_max));
  }
  LogWriteDown(r);
  LOG_INFO("engine", "engine loop of rank {} stopped", gate.rank());
}

}  // namespace strata::server
