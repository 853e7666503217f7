// How kernels/cpu spreads a product's tasks over threads: ParallelFor(num_tasks, parallel, body)
// runs body(task) for every task in [0, num_tasks), each exactly once, spread dynamically over
// the threads (the calling thread included) when `parallel`, else on the caller in order.
//
// Two backends (the default is the pool; STRATA_THREADING=omp|pool or SetThreadingBackend):
//   kPool    a persistent pool (thread_pool.cc): workers spin ~50 µs after a job, then sleep
//            on a futex, so back-to-back products of a decode step skip the wake-up while an
//            idle process costs nothing; the caller runs tasks itself and never waits for a
//            worker that has not started one (a slow wake-up on a shared host costs no time).
//   kOpenMp  one `omp parallel for schedule(dynamic, 1)` per call (wake-up cost set by
//            OMP_WAIT_POLICY).
// Results must not depend on which thread ran a task (every kernel writes disjoint outputs per
// task). Thread count: omp_get_max_threads() (OMP_NUM_THREADS, omp_set_num_threads). Called from
// inside a task, an OpenMP parallel region, or while another thread's call is running, it runs
// inline on the caller.
//
// Every kernel on the engine's path uses ParallelFor, never `omp parallel` directly: an OpenMP
// team's workers spin after each region (libgomp's default wait policy) and take the cores the
// pool's workers need — measured on 2 cores, 29 % of decode samples in libgomp and decode 30 %
// slower. The pool's workers are named kWorkerName (`top -H`, `ps -L`); engine/cpu_threads_test
// checks that engine steps start no other thread.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace strata::kernels::cpu {

inline constexpr char kWorkerName[] = "strata-cpu";

using TaskFn = void (*)(void* context, int64_t task);

void ParallelForImpl(int64_t num_tasks, bool parallel, TaskFn fn, void* context);

template <typename Body>
void ParallelFor(int64_t num_tasks, bool parallel, Body&& body) {
  using B = std::remove_reference_t<Body>;
  ParallelForImpl(
      num_tasks, parallel, [](void* context, int64_t task) { (*static_cast<B*>(context))(task); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

// Threads a ParallelFor started here may use (1 inside a task or an OpenMP parallel region).
int MaxThreads();

enum class ThreadingBackend { kPool, kOpenMp };
// For benchmarks and tests; not thread-safe against running ParallelFor calls.
void SetThreadingBackend(ThreadingBackend backend);
ThreadingBackend GetThreadingBackend();

}  // namespace strata::kernels::cpu
