#include "scheduler/testing/driver.h"

namespace strata::scheduler::testing {

Driver::Driver(const SchedulerConfig& config, int32_t vocab_size)
    : vocab_size_(vocab_size),
      scheduler_(config),
      executor_(config.num_blocks, config.block_size, config.has_kda_layers ? config.num_slots : 0,
                config.num_checkpoint_slots, vocab_size) {}

engine::StepPlan Driver::Step() {
  engine::StepPlan plan = scheduler_.Schedule();
  engine::StepResult result = executor_.Execute(plan);
  last_events_ = scheduler_.Commit(result);
  for (const SequenceEvent& event : last_events_) {
    if (event.token.has_value()) outputs_[event.request_id].push_back(*event.token);
    if (event.finished.has_value()) {
      finished_[event.request_id] = *event.finished;
      ++num_finish_events_[event.request_id];
    }
  }
  return plan;
}

int Driver::RunUntilIdle(int max_steps) {
  int steps = 0;
  while (scheduler_.HasWork() && steps < max_steps) {
    Step();
    ++steps;
  }
  return steps;
}

std::optional<FinishReason> Driver::finish_reason(const std::string& request_id) const {
  auto it = finished_.find(request_id);
  if (it == finished_.end()) return std::nullopt;
  return it->second;
}

int Driver::num_finish_events(const std::string& request_id) const {
  auto it = num_finish_events_.find(request_id);
  return it == num_finish_events_.end() ? 0 : it->second;
}

}  // namespace strata::scheduler::testing
