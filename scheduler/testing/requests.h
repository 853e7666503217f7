// Helpers the scheduler tests share: prompts, requests and the health check after a run.
// Test-only (gtest); include from *_test.cc files.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/request.h"
#include "scheduler/testing/driver.h"

namespace strata::scheduler::testing {

// Tokens first, first + 1, ..., first + n - 1.
inline std::vector<int32_t> Prompt(int n, int32_t first) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), first);
  return p;
}

inline Request MakeRequest(const std::string& id, std::vector<int32_t> prompt, int64_t max_tokens) {
  Request r;
  r.request_id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  return r;
}

// The scheduler's invariants hold and the fake executor saw no malformed plan.
inline void ExpectHealthy(Driver& d) {
  EXPECT_TRUE(d.scheduler().CheckInvariants().ok()) << d.scheduler().CheckInvariants();
  EXPECT_THAT(d.executor().errors(), ::testing::IsEmpty());
}

}  // namespace strata::scheduler::testing
