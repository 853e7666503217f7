// Helpers for tests that run an EngineLoop over the scheduler's fake model
// (scheduler/testing/fake_executor.h): a small cache configuration and reading a stream to its
// end.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "absl/time/time.h"
#include "scheduler/scheduler_config.h"
#include "server/request_stream.h"

namespace strata::server::testing {

inline constexpr int32_t kFakeVocab = 500;

// 64 blocks of 16 tokens, 16 KDA slots, no checkpoints or prefix caching, chunks of 64 tokens.
inline scheduler::SchedulerConfig FakeModelConfig(int max_num_seqs = 8) {
  scheduler::SchedulerConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 256;
  c.block_size = 16;
  c.num_blocks = 64;
  c.num_slots = 16;
  c.num_checkpoint_slots = 0;
  c.enable_prefix_caching = false;
  return c;
}

// Every event of the stream up to its terminal one; fails the test when none comes in 20 s.
inline std::vector<StreamEvent> CollectEvents(RequestStream& stream) {
  std::vector<StreamEvent> events;
  while (true) {
    std::optional<StreamEvent> e = stream.Next(absl::Seconds(20));
    if (!e) {
      ADD_FAILURE() << stream.request_id() << ": no event within 20 s";
      return events;
    }
    events.push_back(*std::move(e));
    if (events.back().terminal()) return events;
  }
}

}  // namespace strata::server::testing
