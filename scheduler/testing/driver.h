// Driver: runs a Scheduler against the FakeExecutor the way the engine loop does
// (Schedule -> Execute -> Commit) and collects every request's emitted tokens and end, so
// tests can compare them with FakeExecutor::ExpectedOutput.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/step.h"
#include "scheduler/request.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_config.h"
#include "scheduler/testing/fake_executor.h"

namespace strata::scheduler::testing {

class Driver {
 public:
  explicit Driver(const SchedulerConfig& config, int32_t vocab_size = 1000);

  Scheduler& scheduler() { return scheduler_; }
  FakeExecutor& executor() { return executor_; }
  int32_t vocab_size() const { return vocab_size_; }

  // One engine step. Returns the plan; the step's events are in last_events().
  engine::StepPlan Step();
  // Steps until the scheduler has no work (at most max_steps); returns the steps taken.
  int RunUntilIdle(int max_steps = 10000);

  const std::vector<SequenceEvent>& last_events() const { return last_events_; }
  // Every token emitted for `request_id`, in order.
  const std::vector<int32_t>& output(const std::string& request_id) { return outputs_[request_id]; }
  std::optional<FinishReason> finish_reason(const std::string& request_id) const;
  // How many events carried `finished` for `request_id` (must end up exactly 1).
  int num_finish_events(const std::string& request_id) const;

 private:
  int32_t vocab_size_;
  Scheduler scheduler_;
  FakeExecutor executor_;
  std::vector<SequenceEvent> last_events_;
  std::map<std::string, std::vector<int32_t>> outputs_;
  std::map<std::string, FinishReason> finished_;
  std::map<std::string, int> num_finish_events_;
};

}  // namespace strata::scheduler::testing
