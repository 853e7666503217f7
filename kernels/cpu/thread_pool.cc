// ParallelFor on either OpenMP (`omp parallel for`, dynamic) or a persistent spin-then-sleep
// pool. The pool: workers stay alive between calls; after a job each spins for a short while
// (kSpinNanos) watching for the next one, then sleeps on a futex. A job is published as one
// 64-bit word [generation:16 | num_tasks:24 | next_task:24]; a thread claims task i by a CAS of
// next_task from i to i + 1 while the word still names the same job, so a worker that wakes
// late can never run a task of a job that has finished (its CAS fails or finds no task left),
// and the caller never waits for a worker that has not claimed anything: it runs tasks itself
// and waits only for tasks in flight.
#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/check.h"

namespace strata::kernels::cpu {
namespace {

constexpr int64_t kSpinNanos = 50'000;        // a worker's spin after a job (then it sleeps)
constexpr int64_t kCallerSpinNanos = 20'000;  // the caller's spin for tasks in flight (then yield)
constexpr int64_t kStallNanos = 50'000;
constexpr int kMinBackoffCalls = 16, kMaxBackoffCalls = 1024;
constexpr uint64_t kIndexBits = 24, kIndexMask = (uint64_t{1} << kIndexBits) - 1;

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void FutexWait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}
void FutexWakeAll(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
          nullptr, 0);
}

uint64_t Generation(uint64_t w) { return w >> (2 * kIndexBits); }
uint64_t NumTasks(uint64_t w) { return (w >> kIndexBits) & kIndexMask; }
uint64_t NextTask(uint64_t w) { return w & kIndexMask; }

thread_local bool in_pool_task = false;

class Pool {
 public:
  static Pool& Get() {
    static Pool* pool = new Pool();  // never destroyed: workers may outlive static destructors
    return *pool;
  }

  // False when the pool is busy (a concurrent caller): the caller runs the tasks itself.
  bool Run(int64_t num_tasks, int threads, TaskFn fn, void* context) {
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    if (serial_calls_left_ > 0) {  // backing off after a stall (see NoteWait)
      --serial_calls_left_;
      return false;
    }
    CHECK_LT(static_cast<uint64_t>(num_tasks), kIndexMask);
    EnsureWorkers(threads - 1);
    fn_ = fn;
    context_ = context;
    active_workers_.store(threads - 1, std::memory_order_relaxed);
    finished_.store(0, std::memory_order_relaxed);
    generation_ = (generation_ + 1) & 0xFFFF;
    job_.store((generation_ << (2 * kIndexBits)) | (static_cast<uint64_t>(num_tasks) << kIndexBits),
               std::memory_order_seq_cst);
    wake_seq_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) FutexWakeAll(wake_seq_);
    const int64_t start = NowNanos();
    in_pool_task = true;
    const int64_t done = RunClaimedTasks(job_.load(std::memory_order_acquire));
    in_pool_task = false;
    // Wait for the tasks other threads claimed: spin briefly, then yield the core to them.
    const int64_t own_end = NowNanos();
    const int64_t spin_until = own_end + kCallerSpinNanos;
    while (finished_.load(std::memory_order_acquire) + done < num_tasks) {
      if (NowNanos() < spin_until) {
        _mm_pause();
      } else {
        sched_yield();
      }
    }
    NoteWait(start, own_end, NowNanos(), done);
    return true;
  }

 private:
  Pool() = default;

  // On an oversubscribed host a worker can be preempted in the middle of a task, and the caller
  // then waits a scheduler time slice (ms) for it: measured, two threads took 1.9× longer than
  // one on average. A wait far longer than a task (> 50 µs and > 3 of the caller's own tasks)
  // counts as such a stall; after one, the next calls run on the caller alone (16, doubling
  // after each further stall up to 1024, halving back after calls without one), so a loaded
  // machine degrades to one thread instead of to stalls, and an idle one keeps both.
  void NoteWait(int64_t start, int64_t own_end, int64_t end, int64_t own_tasks) {
    const int64_t waited = end - own_end;
    const int64_t per_task = (own_end - start) / std::max<int64_t>(own_tasks, 1);
    if (own_tasks > 0 && waited > kStallNanos && waited > 3 * per_task) {
      serial_calls_left_ = backoff_;
      backoff_ = std::min(2 * backoff_, kMaxBackoffCalls);
    } else if (backoff_ > kMinBackoffCalls) {
      backoff_ /= 2;
    }
  }

  void EnsureWorkers(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      const int index = static_cast<int>(workers_.size());
      workers_.emplace_back([this, index] { WorkerLoop(index); });
      // Named here, not by the worker: the name is set before this call returns.
      pthread_setname_np(workers_.back().native_handle(), kWorkerName);
      workers_.back().detach();
    }
  }

  // Claims and runs tasks of the job in `seen` until none is left; returns how many it ran.
  int64_t RunClaimedTasks(uint64_t seen) {
    int64_t ran = 0;
    while (NextTask(seen) < NumTasks(seen)) {
      if (!job_.compare_exchange_weak(seen, seen + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        continue;  // `seen` reloaded: another claim, or a new job
      }
      fn_(context_, static_cast<int64_t>(NextTask(seen)));
      ++ran;
      seen += 1;
    }
    return ran;
  }

  void WorkerLoop(int index) {
    in_pool_task = true;  // a ParallelFor inside a task runs inline
    uint64_t last_generation = Generation(job_.load(std::memory_order_acquire));
    int64_t idle_since = NowNanos();
    for (;;) {
      const uint64_t seen = job_.load(std::memory_order_acquire);
      if (Generation(seen) != last_generation && NextTask(seen) < NumTasks(seen) &&
          index >= active_workers_.load(std::memory_order_relaxed)) {
        last_generation = Generation(seen);  // not one of this job's threads
      }
      if (Generation(seen) != last_generation && NextTask(seen) < NumTasks(seen)) {
        const int64_t ran = RunClaimedTasks(seen);
        if (ran > 0) finished_.fetch_add(ran, std::memory_order_acq_rel);
        last_generation = Generation(seen);
        idle_since = NowNanos();
        continue;
      }
      if (Generation(seen) != last_generation && NextTask(seen) >= NumTasks(seen)) {
        last_generation = Generation(seen);  // a job finished before this worker got to it
      }
      if (NowNanos() - idle_since < kSpinNanos) {
        _mm_pause();
        continue;
      }
      // Sleep until the next publication (re-checked after announcing ourselves).
      const uint32_t seq = wake_seq_.load(std::memory_order_seq_cst);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      const uint64_t now = job_.load(std::memory_order_seq_cst);
      if (!(Generation(now) != last_generation && NextTask(now) < NumTasks(now))) {
        FutexWait(wake_seq_, seq);
      }
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      idle_since = NowNanos();
    }
  }

  std::mutex mutex_;  // one job at a time; guards the two below
  int serial_calls_left_ = 0;
  int backoff_ = kMinBackoffCalls;
  std::vector<std::thread> workers_;
  TaskFn fn_ = nullptr;
  void* context_ = nullptr;
  std::atomic<int> active_workers_{0};
  uint64_t generation_ = 0;
  std::atomic<uint64_t> job_{0};
  std::atomic<int64_t> finished_{0};
  std::atomic<uint32_t> wake_seq_{0};
  std::atomic<int> sleepers_{0};
};

ThreadingBackend DefaultBackend() {
  const char* env = std::getenv("STRATA_THREADING");
  if (env != nullptr && std::strcmp(env, "omp") == 0) return ThreadingBackend::kOpenMp;
  if (env != nullptr && std::strcmp(env, "pool") == 0) return ThreadingBackend::kPool;
  return ThreadingBackend::kPool;
}

std::atomic<ThreadingBackend>& Backend() {
  static std::atomic<ThreadingBackend> backend{DefaultBackend()};
  return backend;
}

}  // namespace

void SetThreadingBackend(ThreadingBackend backend) { Backend().store(backend); }
ThreadingBackend GetThreadingBackend() { return Backend().load(); }

int MaxThreads() { return omp_in_parallel() || in_pool_task ? 1 : omp_get_max_threads(); }

void ParallelForImpl(int64_t num_tasks, bool parallel, TaskFn fn, void* context) {
  const int threads = parallel && num_tasks > 1 ? MaxThreads() : 1;
  if (threads > 1) {
    if (Backend().load(std::memory_order_relaxed) == ThreadingBackend::kOpenMp) {
#pragma omp parallel for schedule(dynamic, 1)
      for (int64_t task = 0; task < num_tasks; ++task) fn(context, task);
      return;
    }
    if (Pool::Get().Run(num_tasks, threads, fn, context)) return;
  }
  for (int64_t task = 0; task < num_tasks; ++task) fn(context, task);
}

}  // namespace strata::kernels::cpu
