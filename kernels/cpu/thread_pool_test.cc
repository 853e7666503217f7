#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace strata::kernels::cpu {
namespace {

class BackendScope {
 public:
  explicit BackendScope(ThreadingBackend b) : saved_(GetThreadingBackend()) {
    SetThreadingBackend(b);
  }
  ~BackendScope() { SetThreadingBackend(saved_); }

 private:
  ThreadingBackend saved_;
};

// Runs `jobs` ParallelFor calls of 0..(max_tasks − 1) tasks; every task must run exactly once.
void CheckEveryTaskOnce(int jobs, int64_t max_tasks, uint32_t seed) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(max_tasks));
  uint32_t state = seed;
  for (int job = 0; job < jobs; ++job) {
    state = state * 1664525u + 1013904223u;
    const int64_t n = static_cast<int64_t>(state >> 8) % max_tasks;
    for (int64_t i = 0; i < n; ++i) hits[static_cast<size_t>(i)].store(0);
    ParallelFor(n, true, [&](int64_t task) {
      // A little work so that several threads take part.
      volatile int sink = 0;
      for (int s = 0; s < 200; ++s) sink = sink + s;
      hits[static_cast<size_t>(task)].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "job " << job << " task " << i;
    }
  }
}

TEST(ThreadPoolTest, EveryTaskRunsExactlyOnceOnBothBackends) {
  const int saved = omp_get_max_threads();
  for (ThreadingBackend b : {ThreadingBackend::kPool, ThreadingBackend::kOpenMp}) {
    BackendScope scope(b);
    for (int threads : {1, 2, 3, 5}) {  // more threads than this machine may have cores
      omp_set_num_threads(threads);
      CheckEveryTaskOnce(300, 97, 1 + static_cast<uint32_t>(threads));
    }
  }
  omp_set_num_threads(saved);
}

TEST(ThreadPoolTest, ConcurrentCallersEachGetAllTheirTasks) {
  BackendScope scope(ThreadingBackend::kPool);
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&failures, c] {
      for (int job = 0; job < 200; ++job) {
        std::atomic<int64_t> sum{0};
        const int64_t n = 1 + (job * 7 + c) % 40;
        ParallelFor(n, true, [&](int64_t task) { sum.fetch_add(task + 1); });
        if (sum.load() != n * (n + 1) / 2) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPoolTest, NestedCallRunsInlineOnTheTaskThread) {
  BackendScope scope(ThreadingBackend::kPool);
  std::atomic<int> inner_total{0}, wrong_thread{0};
  ParallelFor(8, true, [&](int64_t) {
    EXPECT_EQ(MaxThreads(), 1);
    const std::thread::id self = std::this_thread::get_id();
    ParallelFor(5, true, [&](int64_t) {
      if (std::this_thread::get_id() != self) wrong_thread.fetch_add(1);
      inner_total.fetch_add(1);
    });
  });
  EXPECT_EQ(inner_total.load(), 40);
  EXPECT_EQ(wrong_thread.load(), 0);
}

TEST(ThreadPoolTest, SerialWhenNotParallelRunsInOrder) {
  std::vector<int64_t> order;
  ParallelFor(6, false, [&](int64_t task) { order.push_back(task); });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace strata::kernels::cpu
