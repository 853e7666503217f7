// Runs a kernel grid on the CPU: blocks one after another on the launching host thread, each
// CUDA thread of a block a fiber with its own stack. A fiber runs until it reaches a barrier
// (__syncthreads, or a warp collective: shuffles, match, ballot, ldmatrix, mma), then the next
// runnable fiber runs; the last arrival at a barrier completes it (for warp collectives it also
// computes every lane's result) and makes the waiters runnable. Divergent barriers, lanes that
// exit inside a collective and misaligned tensor-core/async-copy addresses abort with a
// diagnostic naming the kernel's block and thread, as a GPU would fault.
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/cuda_emu/emu_internal.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define STRATA_EMU_ASAN 1
#endif

namespace strata_emu {
namespace {

constexpr size_t kStackBytes = size_t{512} << 10;  // per CUDA thread; a guard page below
constexpr size_t kGuardBytes = 4096;
constexpr int kSlotBytes = 64;  // per-lane input/output of one warp collective

#if defined(__x86_64__)
// Saves the callee-saved registers and the stack pointer in *save_sp, continues on load_sp.
extern "C" void strata_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl strata_emu_switch
  .type strata_emu_switch, @function
strata_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size strata_emu_switch, .-strata_emu_switch
)");
#endif

enum class Status {
  kRunnable,
  kWaitingBlock,
  kWaitingWarp,
  kWaitingNamed,  // bar.sync id (Fiber::wait_id)
  kWaitingMbar,   // an mbarrier phase (Fiber::wait_bar)
  kDone
};

struct PendingCopy {
  unsigned char* dst;
  const unsigned char* src;
  int cp_size;
  int src_bytes;
  int group;  // commit group; -1 until committed
};

struct Fiber {
  ThreadState state{};
  int linear = 0, warp = 0, lane = 0;
  Status status = Status::kDone;
  unsigned char* stack = nullptr;  // mapping base (guard page first)
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t context{};
#endif
  std::vector<PendingCopy> copies;
  int committed_groups = 0;
  bool waited_for_grids = false;       // GridDependencyWait called
  int wait_id = 0;                     // kWaitingNamed: the barrier
  const uint64_t* wait_bar = nullptr;  // kWaitingMbar: the mbarrier

  Fiber() = default;
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
  // A host thread's fibers go with it (t_host is thread_local): a process that launches kernels
  // from many short-lived threads (one per rank and step in the rank-thread tests) would
  // otherwise keep every stack mapped and run out of mappings (vm.max_map_count).
  ~Fiber() {
    if (stack != nullptr) munmap(stack, kStackBytes + kGuardBytes);
  }
};

// One warp's share of a wgmma.mma_async (its 16 rows of the m64 tile): where each lane's A
// registers and accumulators live (read and written when the op retires) and the B descriptor.
struct WgmmaOp {
  const uint32_t* a[32];
  float* d[32];
  uint64_t desc_b;
  int n;
  bool accumulate;
};

// An mbarrier (keyed by its shared-memory address): the phase, its pending arrivals and
// transaction bytes, and the bulk copies that complete on it.
struct BulkCopy {
  unsigned char* dst;
  const unsigned char* src;
  uint32_t bytes;
};
struct Mbarrier {
  int arrivals = 0;  // per phase
  int pending = 0;   // arrivals still missing in the current phase
  int64_t tx = 0;    // expected minus completed transaction bytes
  uint32_t phase = 0;
  std::vector<BulkCopy> copies;
};

struct WarpState {
  unsigned int present = 0;   // lanes that exist in this block
  unsigned int exited = 0;    // lanes whose thread returned
  unsigned int arrived = 0;   // lanes waiting in the pending collective
  unsigned int expected = 0;  // lanes the pending collective waits for
  const char* kind = nullptr;
  uint64_t generation = 0;
  alignas(16) unsigned char in[2][32][kSlotBytes];
  alignas(16) unsigned char out[2][32][kSlotBytes];
  std::vector<WgmmaOp> wgmma_open;                // issued, not yet committed
  std::deque<std::vector<WgmmaOp>> wgmma_groups;  // committed, not yet retired
};

struct GridRun {
  const void* func = nullptr;
  const char* name = "kernel";
  void (*invoke)(void*) = nullptr;
  void* args = nullptr;
  dim3 grid, block;
  int threads = 0;
  int live = 0;
  int block_arrived = 0;
  unsigned char* dynamic_smem = nullptr;
  size_t dynamic_smem_bytes = 0;
  bool programmatic = false;  // LaunchConfig::programmatic
  std::vector<WarpState> warps;
  int named_arrived[16] = {};  // bar.sync id: threads arrived
  std::map<const uint64_t*, Mbarrier> mbarriers;
};

// The order in which the runnable threads of a block run between barriers
// (STRATA_CUDA_EMU_SCHEDULE): `forward` (thread 0 first, the default), `reverse`, or
// `shuffle[:seed]` (a new random order for every round). A kernel that reads shared memory
// another thread wrote without a barrier in between passes in at most one of them.
struct Schedule {
  enum Kind { kForward, kReverse, kShuffle } kind = kForward;
  uint32_t seed = 0;
};
thread_local const char* t_schedule_override = nullptr;  // SetScheduleForTesting

Schedule ParseSchedule(const char* text) {
  Schedule s;
  if (text == nullptr || std::strcmp(text, "forward") == 0) return s;
  if (std::strcmp(text, "reverse") == 0) {
    s.kind = Schedule::kReverse;
  } else if (std::strncmp(text, "shuffle", 7) == 0 && (text[7] == '\0' || text[7] == ':')) {
    s.kind = Schedule::kShuffle;
    if (text[7] == ':') s.seed = static_cast<uint32_t>(std::strtoul(text + 8, nullptr, 10));
  } else {
    std::fprintf(stderr,
                 "strata cuda emulator: schedule '%s' is not forward, reverse or "
                 "shuffle[:seed]\n",
                 text);
    std::abort();
  }
  return s;
}

Schedule ScheduleFromEnv() {
  if (t_schedule_override != nullptr) return ParseSchedule(t_schedule_override);
  static const Schedule schedule = ParseSchedule(std::getenv("STRATA_CUDA_EMU_SCHEDULE"));
  return schedule;
}

// Per host thread: the fibers (kept across launches) and the grid being run.
struct HostThread {
  std::vector<int> order;  // the schedule's thread order
  std::mt19937 rng{ScheduleFromEnv().seed};
  std::vector<std::unique_ptr<Fiber>> fibers;
  Fiber* current = nullptr;
  GridRun* run = nullptr;
#if defined(__x86_64__)
  void* scheduler_sp = nullptr;
#else
  ucontext_t scheduler{};
#endif
};
thread_local HostThread t_host;

// AddressSanitizer follows stack switches only when told (its fake stacks and stack bounds);
// without the annotations it reports false stack overflows in fibers.
#if defined(STRATA_EMU_ASAN)
thread_local const void* t_scheduler_stack_bottom = nullptr;
thread_local size_t t_scheduler_stack_size = 0;
void AsanEnterFiber(const Fiber& f, void** fake_stack) {
  __sanitizer_start_switch_fiber(fake_stack, f.stack + kGuardBytes, kStackBytes);
}
void AsanBackInScheduler(void* fake_stack) {
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
}
void AsanFiberStarted() {
  __sanitizer_finish_switch_fiber(nullptr, &t_scheduler_stack_bottom, &t_scheduler_stack_size);
}
void AsanLeaveFiber(void** fake_stack) {  // fake_stack null: the fiber is finished
  __sanitizer_start_switch_fiber(fake_stack, t_scheduler_stack_bottom, t_scheduler_stack_size);
}
void AsanFiberResumed(void* fake_stack) {
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
}
#else
void AsanEnterFiber(const Fiber&, void**) {}
void AsanBackInScheduler(void*) {}
void AsanFiberStarted() {}
void AsanLeaveFiber(void**) {}
void AsanFiberResumed(void*) {}
#endif

[[noreturn]] void Fault(const char* what) {
  const HostThread& h = t_host;
  if (h.current != nullptr && h.run != nullptr) {
    const ThreadState& s = h.current->state;
    std::fprintf(stderr,
                 "strata cuda emulator: %s\n  in kernel %p, block (%u,%u,%u) of (%u,%u,%u), "
                 "thread (%u,%u,%u) of (%u,%u,%u)\n",
                 what, h.run->func, s.block_idx.x, s.block_idx.y, s.block_idx.z, h.run->grid.x,
                 h.run->grid.y, h.run->grid.z, s.thread_idx.x, s.thread_idx.y, s.thread_idx.z,
                 h.run->block.x, h.run->block.y, h.run->block.z);
  } else {
    std::fprintf(stderr, "strata cuda emulator: %s\n", what);
  }
  std::fflush(stderr);
  std::abort();
}

Fiber& Current() {
  if (t_host.current == nullptr) Fault("device function called outside a kernel");
  return *t_host.current;
}

// `finished`: the fiber never runs again (its ASan fake stack can go).
void SwitchToScheduler(bool finished = false) {
  Fiber& f = *t_host.current;
  void* fake_stack = nullptr;
  AsanLeaveFiber(finished ? nullptr : &fake_stack);
#if defined(__x86_64__)
  strata_emu_switch(&f.sp, t_host.scheduler_sp);
#else
  swapcontext(&f.context, &t_host.scheduler);
#endif
  AsanFiberResumed(fake_stack);
}

// Performs the thread's queued cp.async copies of the groups below `below_group` (and, with
// `uncommitted`, those not yet in a group) and drops them from the queue.
void PerformCopies(Fiber& f, int below_group, bool uncommitted = false) {
  size_t kept = 0;
  for (const PendingCopy& c : f.copies) {
    if (c.group >= 0 ? c.group < below_group : uncommitted) {
      if (c.src_bytes > 0) std::memcpy(c.dst, c.src, static_cast<size_t>(c.src_bytes));
      std::memset(c.dst + c.src_bytes, 0, static_cast<size_t>(c.cp_size - c.src_bytes));
    } else {
      f.copies[kept++] = c;
    }
  }
  f.copies.resize(kept);
}

void WakeWarp(GridRun& run, int warp) {
  HostThread& h = t_host;
  const int first = warp * 32;
  for (int i = first; i < first + 32 && i < run.threads; ++i) {
    if (h.fibers[i]->status == Status::kWaitingWarp) h.fibers[i]->status = Status::kRunnable;
  }
}

void CompleteBlockBarrier(GridRun& run) {
  run.block_arrived = 0;
  for (int i = 0; i < run.threads; ++i) {
    Fiber& f = *t_host.fibers[i];
    if (f.status == Status::kWaitingBlock) f.status = Status::kRunnable;
  }
}

void ThreadExited() {
  Fiber& f = Current();
  GridRun& run = *t_host.run;
  // Everything still queued, uncommitted copies too: nothing can wait for them any more.
  PerformCopies(f, f.committed_groups, /*uncommitted=*/true);
  if (run.programmatic && !f.waited_for_grids) {
    // On a GPU its loads and stores could have raced the previous kernel's.
    Fault(
        "a thread of a kernel launched with programmatic dependent launch exited without "
        "waiting for the prior grids (griddepcontrol.wait: internal::AwaitPriorGrids)");
  }
  f.status = Status::kDone;
  --run.live;
  WarpState& w = run.warps[f.warp];
  if (!w.wgmma_open.empty() || !w.wgmma_groups.empty()) {
    Fault("a thread exited with wgmma operations in flight (no wgmma.wait_group retired them)");
  }
  w.exited |= 1u << f.lane;
  if (w.arrived != 0 && (w.expected >> f.lane & 1u)) {
    Fault("a thread exited while other lanes of its warp wait for it in a warp collective");
  }
  if (run.block_arrived > 0 && run.block_arrived == run.live) CompleteBlockBarrier(run);
}

void FiberMain() {
  AsanFiberStarted();
  GridRun& run = *t_host.run;
  run.invoke(run.args);
  ThreadExited();
  SwitchToScheduler(/*finished=*/true);
  Fault("a finished fiber was resumed");
}

Fiber& FiberAt(int index) {
  HostThread& h = t_host;
  while (static_cast<int>(h.fibers.size()) <= index) {
    auto f = std::make_unique<Fiber>();
    void* mem = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) Fault("cannot map a fiber stack");
    mprotect(mem, kGuardBytes, PROT_NONE);  // a stack overflow faults instead of corrupting
    f->stack = static_cast<unsigned char*>(mem);
    h.fibers.push_back(std::move(f));
  }
  return *h.fibers[index];
}

void StartFiber(Fiber& f) {
  f.status = Status::kRunnable;
  f.copies.clear();
  f.committed_groups = 0;
  f.waited_for_grids = false;
  unsigned char* top = f.stack + kGuardBytes + kStackBytes;
#if defined(__x86_64__)
  // Layout `ret` expects: six callee-saved registers, then the entry point; at entry the stack
  // pointer is ≡ 8 (mod 16) as after a call.
  auto* sp = reinterpret_cast<uint64_t*>(top);
  *--sp = 0;  // fake return address of FiberMain
  *--sp = reinterpret_cast<uint64_t>(&FiberMain);
  for (int i = 0; i < 6; ++i) *--sp = 0;
  f.sp = sp;
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack + kGuardBytes;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, &FiberMain, 0);
#endif
}

void Resume(Fiber& f) {
  HostThread& h = t_host;
  h.current = &f;
  void* fake_stack = nullptr;
  AsanEnterFiber(f, &fake_stack);
#if defined(__x86_64__)
  strata_emu_switch(&h.scheduler_sp, f.sp);
#else
  swapcontext(&h.scheduler, &f.context);
#endif
  AsanBackInScheduler(fake_stack);
  h.current = nullptr;
}

[[noreturn]] void Deadlock(GridRun& run) {
  std::string states;
  for (int i = 0; i < run.threads; ++i) {
    const Fiber& f = *t_host.fibers[i];
    if (f.status == Status::kWaitingBlock) {
      states += " t" + std::to_string(i) + ":__syncthreads";
    } else if (f.status == Status::kWaitingWarp) {
      states += " t" + std::to_string(i) + ":" +
                (run.warps[f.warp].kind ? run.warps[f.warp].kind : "warp");
    } else if (f.status == Status::kWaitingNamed) {
      states += " t" + std::to_string(i) + ":bar.sync" + std::to_string(f.wait_id);
    } else if (f.status == Status::kWaitingMbar) {
      states += " t" + std::to_string(i) + ":mbarrier.wait";
    }
    if (states.size() > 600) {
      states += " ...";
      break;
    }
  }
  t_host.current = t_host.fibers[0].get();
  const std::string what =
      "deadlock: every live thread waits at a barrier the others never "
      "reach (divergent __syncthreads or warp collective):" +
      states;
  Fault(what.c_str());
}

void RunBlock(GridRun& run, uint3 block_idx) {
  HostThread& h = t_host;
  const dim3 b = run.block;
  run.live = run.threads;
  run.block_arrived = 0;
  for (int w = 0; w < static_cast<int>(run.warps.size()); ++w) {
    WarpState& ws = run.warps[w];
    const int lanes = std::min(32, run.threads - w * 32);
    ws.present = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
    ws.exited = ws.arrived = ws.expected = 0;
    ws.kind = nullptr;
    ws.wgmma_open.clear();
    ws.wgmma_groups.clear();
  }
  std::fill(std::begin(run.named_arrived), std::end(run.named_arrived), 0);
  run.mbarriers.clear();
  if (run.dynamic_smem != nullptr) std::memset(run.dynamic_smem, 0xff, run.dynamic_smem_bytes);
  for (int i = 0; i < run.threads; ++i) {
    Fiber& f = *h.fibers[i];
    f.linear = i;
    f.warp = i / 32;
    f.lane = i % 32;
    f.state.thread_idx = uint3{static_cast<unsigned>(i) % b.x, static_cast<unsigned>(i) / b.x % b.y,
                               static_cast<unsigned>(i) / (b.x * b.y)};
    f.state.block_idx = block_idx;
    f.state.block_dim = run.block;
    f.state.grid_dim = run.grid;
    StartFiber(f);
  }
  std::vector<int>& order = h.order;
  order.resize(static_cast<size_t>(run.threads));
  for (int i = 0; i < run.threads; ++i) order[static_cast<size_t>(i)] = i;
  const Schedule schedule = ScheduleFromEnv();
  if (schedule.kind == Schedule::kReverse) std::reverse(order.begin(), order.end());
  while (run.live > 0) {
    if (schedule.kind == Schedule::kShuffle) std::shuffle(order.begin(), order.end(), h.rng);
    bool progressed = false;
    for (const int i : order) {
      Fiber& f = *h.fibers[static_cast<size_t>(i)];
      if (f.status != Status::kRunnable) continue;
      Resume(f);
      progressed = true;
    }
    if (!progressed) Deadlock(run);
  }
}

// The calling lane's part of a warp collective: deposits `in`, waits for the lanes of `mask`,
// and returns its output. The last lane to arrive runs combine(warp_state, buffer) which reads
// every lane's input slot and writes every lane's output slot.
template <typename In, typename Out, typename Combine>
Out WarpCollective(const char* kind, unsigned int mask, const In& in, Combine&& combine,
                   bool allow_exited = false) {
  static_assert(sizeof(In) <= kSlotBytes && sizeof(Out) <= kSlotBytes);
  Fiber& f = Current();
  GridRun& run = *t_host.run;
  WarpState& w = run.warps[f.warp];
  if (!(mask >> f.lane & 1u)) Fault("warp collective called by a lane outside its mask");
  if (!allow_exited && (mask & w.exited) != 0) {
    Fault("warp collective whose mask names lanes that have exited");
  }
  const unsigned int expected = mask & w.present & ~w.exited;
  if (w.arrived == 0) {
    w.expected = expected;
    w.kind = kind;
  } else if (w.kind != kind || w.expected != expected) {
    Fault("lanes of one warp are in different warp collectives (divergent warp)");
  }
  const int buf = static_cast<int>(w.generation & 1u);
  std::memcpy(w.in[buf][f.lane], &in, sizeof(In));
  w.arrived |= 1u << f.lane;
  if (w.arrived == w.expected) {
    combine(w, buf);
    w.arrived = 0;
    w.kind = nullptr;
    ++w.generation;
    WakeWarp(run, f.warp);
  } else {
    f.status = Status::kWaitingWarp;
    SwitchToScheduler();
  }
  Out out;
  std::memcpy(&out, w.out[buf][f.lane], sizeof(Out));
  return out;
}

template <typename T>
T SlotIn(const WarpState& w, int buf, int lane) {
  T v;
  std::memcpy(&v, w.in[buf][lane], sizeof(T));
  return v;
}
template <typename T>
void SlotOut(WarpState& w, int buf, int lane, const T& v) {
  std::memcpy(w.out[buf][lane], &v, sizeof(T));
}

// Lanes outside the collective (or exited) read this.
constexpr uint64_t kPoison = ~uint64_t{0};

template <typename SourceLane>
uint64_t Shuffle(const char* kind, unsigned int mask, uint64_t value, int width,
                 SourceLane source_lane) {
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
    Fault("shuffle width must be a power of two in [1, 32]");
  }
  return WarpCollective<uint64_t, uint64_t>(kind, mask, value, [&](WarpState& w, int buf) {
    for (int lane = 0; lane < 32; ++lane) {
      if (!(w.expected >> lane & 1u)) continue;
      const int src = source_lane(lane, width);
      const uint64_t v = (w.expected >> src & 1u) ? SlotIn<uint64_t>(w, buf, src) : kPoison;
      SlotOut(w, buf, lane, v);
    }
  });
}

uint16_t LoadB16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void CheckAligned(const void* p, size_t alignment, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0) Fault(what);
}

}  // namespace

ThreadState& CurrentThread() { return Current().state; }

void SetScheduleForTesting(const char* schedule) {
  if (schedule != nullptr) ParseSchedule(schedule);  // validates
  t_schedule_override = schedule;
  t_host.rng.seed(ScheduleFromEnv().seed);
}

void RunGrid(const void* func, const LaunchConfig& config, void (*invoke)(void*), void* args) {
  HostThread& h = t_host;
  if (h.run != nullptr) Fault("a kernel launched from inside a kernel (dynamic parallelism)");
  GridRun run;
  run.func = func;
  run.invoke = invoke;
  run.args = args;
  run.grid = config.grid;
  run.block = config.block;
  run.threads = static_cast<int>(config.block.x * config.block.y * config.block.z);
  run.programmatic = config.programmatic;
  run.warps.resize(static_cast<size_t>((run.threads + 31) / 32));
  std::unique_ptr<unsigned char, decltype(&std::free)> smem(nullptr, &std::free);
  if (config.dynamic_smem_bytes > 0) {
    const size_t bytes = (config.dynamic_smem_bytes + 127) / 128 * 128;
    smem.reset(static_cast<unsigned char*>(std::aligned_alloc(128, bytes)));
    run.dynamic_smem = smem.get();
    run.dynamic_smem_bytes = config.dynamic_smem_bytes;
  }
  FiberAt(run.threads - 1);
  h.run = &run;
  for (unsigned z = 0; z < config.grid.z; ++z) {
    for (unsigned y = 0; y < config.grid.y; ++y) {
      for (unsigned x = 0; x < config.grid.x; ++x) RunBlock(run, uint3{x, y, z});
    }
  }
  h.run = nullptr;
}

void SyncThreads() {
  Fiber& f = Current();
  GridRun& run = *t_host.run;
  ++run.block_arrived;
  if (run.block_arrived == run.live) {
    CompleteBlockBarrier(run);
    return;
  }
  f.status = Status::kWaitingBlock;
  SwitchToScheduler();
}

void GridDependencyWait() { Current().waited_for_grids = true; }

void SyncWarp(unsigned int mask) {
  WarpCollective<char, char>(
      "__syncwarp", mask, char{0}, [](WarpState&, int) {}, true);
}

unsigned char* DynamicShared() {
  Current();
  return t_host.run->dynamic_smem;
}

uint64_t ShuffleXor(unsigned int mask, uint64_t value, int lane_mask, int width) {
  return Shuffle("__shfl_xor_sync", mask, value, width, [lane_mask](int lane, int w) {
    const int src = lane ^ lane_mask;
    return (src / w == lane / w) ? src : lane;  // outside the segment: own value
  });
}
uint64_t ShuffleIdx(unsigned int mask, uint64_t value, int src_lane, int width) {
  return Shuffle("__shfl_sync", mask, value, width,
                 [src_lane](int lane, int w) { return lane / w * w + (src_lane % w); });
}
uint64_t ShuffleDown(unsigned int mask, uint64_t value, unsigned int delta, int width) {
  return Shuffle("__shfl_down_sync", mask, value, width, [delta](int lane, int w) {
    const int src = lane + static_cast<int>(delta);
    return (src / w == lane / w) ? src : lane;
  });
}
uint64_t ShuffleUp(unsigned int mask, uint64_t value, unsigned int delta, int width) {
  return Shuffle("__shfl_up_sync", mask, value, width, [delta](int lane, int w) {
    const int src = lane - static_cast<int>(delta);
    return (src >= 0 && src / w == lane / w) ? src : lane;
  });
}

unsigned int MatchAny(unsigned int mask, uint64_t value) {
  return WarpCollective<uint64_t, unsigned int>("__match_any_sync", mask, value,
                                                [](WarpState& w, int buf) {
                                                  uint64_t v[32];
                                                  for (int lane = 0; lane < 32; ++lane) {
                                                    if (w.expected >> lane & 1u)
                                                      v[lane] = SlotIn<uint64_t>(w, buf, lane);
                                                  }
                                                  unsigned int assigned = ~w.expected;
                                                  for (int lane = 0; lane < 32; ++lane) {
                                                    if (assigned >> lane & 1u) continue;
                                                    unsigned int peers = 0;
                                                    for (int j = lane; j < 32; ++j) {
                                                      if (!(assigned >> j & 1u) && v[j] == v[lane])
                                                        peers |= 1u << j;
                                                    }
                                                    assigned |= peers;
                                                    for (int j = lane; j < 32; ++j) {
                                                      if (peers >> j & 1u)
                                                        SlotOut(w, buf, j, peers);
                                                    }
                                                  }
                                                });
}

unsigned int Ballot(unsigned int mask, bool predicate) {
  return WarpCollective<bool, unsigned int>(
      "__ballot_sync", mask, predicate, [](WarpState& w, int buf) {
        unsigned int bits = 0;
        for (int j = 0; j < 32; ++j) {
          if ((w.expected >> j & 1u) && SlotIn<bool>(w, buf, j)) bits |= 1u << j;
        }
        for (int lane = 0; lane < 32; ++lane) SlotOut(w, buf, lane, bits);
      });
}

void CpAsync(void* smem_dst, const void* gmem_src, int cp_size, int src_bytes) {
  Fiber& f = Current();
  if (cp_size != 4 && cp_size != 8 && cp_size != 16) Fault("cp.async size must be 4, 8 or 16");
  if (src_bytes < 0 || src_bytes > cp_size) Fault("cp.async src-size outside [0, cp-size]");
  CheckAligned(smem_dst, static_cast<size_t>(cp_size), "cp.async: misaligned shared address");
  if (src_bytes > 0) {
    CheckAligned(gmem_src, static_cast<size_t>(cp_size), "cp.async: misaligned global address");
  }
  f.copies.push_back(PendingCopy{static_cast<unsigned char*>(smem_dst),
                                 static_cast<const unsigned char*>(gmem_src), cp_size, src_bytes,
                                 -1});
}

void CpAsyncCommit() {
  Fiber& f = Current();
  for (PendingCopy& c : f.copies) {
    if (c.group < 0) c.group = f.committed_groups;
  }
  ++f.committed_groups;
}

void CpAsyncWait(int pending_groups) {
  Fiber& f = Current();
  PerformCopies(f, f.committed_groups - pending_groups);
}

void LdMatrixX4(uint32_t (&r)[4], const void* row_ptr, bool trans) {
  CheckAligned(row_ptr, 16, "ldmatrix: row address not 16-byte aligned");
  const auto* p = static_cast<const unsigned char*>(row_ptr);
  struct Out {
    uint32_t r[4];
  };
  const Out out = WarpCollective<const unsigned char*, Out>(
      trans ? "ldmatrix.trans" : "ldmatrix", 0xffffffffu, p, [trans](WarpState& w, int buf) {
        if (w.expected != 0xffffffffu) Fault("ldmatrix needs all 32 lanes");
        uint16_t m[4][8][8];  // matrix, row, column
        for (int lane = 0; lane < 32; ++lane) {
          const auto* row = SlotIn<const unsigned char*>(w, buf, lane);
          for (int c = 0; c < 8; ++c) m[lane / 8][lane % 8][c] = LoadB16(row + 2 * c);
        }
        for (int lane = 0; lane < 32; ++lane) {
          Out o;
          const int g = lane / 4, t = 2 * (lane % 4);
          for (int i = 0; i < 4; ++i) {
            const uint16_t lo = trans ? m[i][t][g] : m[i][g][t];
            const uint16_t hi = trans ? m[i][t + 1][g] : m[i][g][t + 1];
            o.r[i] = static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
          }
          SlotOut(w, buf, lane, o);
        }
      });
  for (int i = 0; i < 4; ++i) r[i] = out.r[i];
}

void MmaBf16M16N8K16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  struct In {
    uint32_t a[4];
    uint32_t b[2];
    float c[4];
  };
  struct Out {
    float d[4];
  };
  In in;
  for (int i = 0; i < 4; ++i) {
    in.a[i] = a[i];
    in.c[i] = d[i];
  }
  in.b[0] = b0;
  in.b[1] = b1;
  const Out out =
      WarpCollective<In, Out>("mma.m16n8k16", 0xffffffffu, in, [](WarpState& w, int buf) {
        if (w.expected != 0xffffffffu) Fault("mma.sync needs all 32 lanes");
        float A[16][16], B[16][8], C[16][8];
        auto lo = [](uint32_t v) { return Bf16BitsToFloat(static_cast<uint16_t>(v & 0xffffu)); };
        auto hi = [](uint32_t v) { return Bf16BitsToFloat(static_cast<uint16_t>(v >> 16)); };
        for (int lane = 0; lane < 32; ++lane) {
          const In v = SlotIn<In>(w, buf, lane);
          const int g = lane / 4, t = 2 * (lane % 4);
          A[g][t] = lo(v.a[0]), A[g][t + 1] = hi(v.a[0]);
          A[g + 8][t] = lo(v.a[1]), A[g + 8][t + 1] = hi(v.a[1]);
          A[g][t + 8] = lo(v.a[2]), A[g][t + 9] = hi(v.a[2]);
          A[g + 8][t + 8] = lo(v.a[3]), A[g + 8][t + 9] = hi(v.a[3]);
          B[t][g] = lo(v.b[0]), B[t + 1][g] = hi(v.b[0]);
          B[t + 8][g] = lo(v.b[1]), B[t + 9][g] = hi(v.b[1]);
          C[g][t] = v.c[0], C[g][t + 1] = v.c[1];
          C[g + 8][t] = v.c[2], C[g + 8][t + 1] = v.c[3];
        }
        // D = C + Σ_k A[:, k]·B[k, :], each element summed in k order (j innermost vectorizes
        // without reordering any sum).
        float D[16][8];
        for (int i = 0; i < 16; ++i) {
          for (int j = 0; j < 8; ++j) D[i][j] = C[i][j];
          for (int k = 0; k < 16; ++k) {
            for (int j = 0; j < 8; ++j) D[i][j] += A[i][k] * B[k][j];
          }
        }
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = 2 * (lane % 4);
          SlotOut(w, buf, lane, Out{{D[g][t], D[g][t + 1], D[g + 8][t], D[g + 8][t + 1]}});
        }
      });
  for (int i = 0; i < 4; ++i) d[i] = out.d[i];
}

uint32_t MulBf16x2(uint32_t a, uint32_t b) {
  uint32_t d = 0;
  for (int half = 0; half < 2; ++half) {
    const float x = Bf16BitsToFloat(static_cast<uint16_t>(a >> (16 * half)));
    const float y = Bf16BitsToFloat(static_cast<uint16_t>(b >> (16 * half)));
    d |= static_cast<uint32_t>(FloatToBf16BitsRn(x * y)) << (16 * half);
  }
  return d;
}

// ---- Hopper: named barriers, mbarriers, bulk copies, wgmma ------------------------------------

namespace {

void WakeAll(Status status, const auto& matches) {
  GridRun& run = *t_host.run;
  for (int i = 0; i < run.threads; ++i) {
    Fiber& f = *t_host.fibers[i];
    if (f.status == status && matches(f)) f.status = Status::kRunnable;
  }
}

Mbarrier& BarrierAt(const uint64_t* bar, const char* op) {
  auto it = t_host.run->mbarriers.find(bar);
  if (it == t_host.run->mbarriers.end()) {
    const std::string what =
        std::string(op) + ": the mbarrier was not initialised (mbarrier.init) in this block";
    Fault(what.c_str());
  }
  return it->second;
}

// Threads waiting on `bar` run again and re-check its phase (the data of a bulk copy lands only
// when a waiter runs, so the thread that issued it cannot see it early).
void WakeWaiters(const uint64_t* bar) {
  WakeAll(Status::kWaitingMbar, [bar](const Fiber& f) { return f.wait_bar == bar; });
}

// Once every arrival of the phase is in: performs its bulk copies (the data lands now, not at
// the issue) and, when the transaction count balances, completes the phase and wakes waiters.
void ProgressPhase(Mbarrier& m, const uint64_t* bar) {
  if (m.pending != 0) return;
  for (const BulkCopy& c : m.copies) {
    std::memcpy(c.dst, c.src, c.bytes);
    m.tx -= c.bytes;
  }
  m.copies.clear();
  if (m.tx != 0) return;  // bytes still expected: the phase waits (a GPU would hang too)
  ++m.phase;
  m.pending = m.arrivals;
  WakeWaiters(bar);
}

void Arrive(uint64_t* bar, uint32_t tx_bytes, const char* op) {
  Current();
  Mbarrier& m = BarrierAt(bar, op);
  // An arrival for the next phase: the current one has completed on a GPU by now.
  if (m.pending == 0) ProgressPhase(m, bar);
  if (m.pending == 0) Fault("mbarrier: more arrivals than the phase expects (tx count unbalanced)");
  m.tx += tx_bytes;
  --m.pending;
  if (m.pending == 0) WakeWaiters(bar);
}

// [p, p + bytes) inside the block's dynamic shared memory.
void CheckDynamicShared(const void* p, size_t bytes, const char* what) {
  const GridRun& run = *t_host.run;
  const auto* c = static_cast<const unsigned char*>(p);
  if (run.dynamic_smem == nullptr || c < run.dynamic_smem ||
      c + bytes > run.dynamic_smem + run.dynamic_smem_bytes) {
    Fault(what);
  }
}

// D (this warp's 16 rows × n) = [D +] A · B, B read through the descriptor now.
void PerformWgmma(const WgmmaOp& op) {
  const GridRun& run = *t_host.run;
  if ((op.desc_b >> 62) != 0 || ((op.desc_b >> 49) & 7u) != 0) {
    Fault("wgmma: only the no-swizzle canonical layout with base offset 0 is emulated");
  }
  const size_t start = (op.desc_b & 0x3FFFu) << 4;
  const size_t lbo = ((op.desc_b >> 16) & 0x3FFFu) << 4;
  const size_t sbo = ((op.desc_b >> 32) & 0x3FFFu) << 4;
  // K-major, no swizzle: 8×8 core matrices of 8 rows × 16 contiguous bytes; core matrices
  // adjacent in K are `lbo` bytes apart, in N `sbo` bytes apart.
  std::vector<float> b(static_cast<size_t>(16 * op.n));
  for (int k = 0; k < 16; ++k) {
    for (int j = 0; j < op.n; ++j) {
      const size_t off = start + static_cast<size_t>(j % 8) * 16 +
                         static_cast<size_t>(j / 8) * sbo + static_cast<size_t>(k % 8) * 2 +
                         static_cast<size_t>(k / 8) * lbo;
      if (off + 2 > run.dynamic_smem_bytes) {
        Fault("wgmma: the B descriptor reaches past the dynamic shared memory");
      }
      b[static_cast<size_t>(k * op.n + j)] = Bf16BitsToFloat(LoadB16(run.dynamic_smem + off));
    }
  }
  float a[16][16];
  auto lo = [](uint32_t v) { return Bf16BitsToFloat(static_cast<uint16_t>(v & 0xffffu)); };
  auto hi = [](uint32_t v) { return Bf16BitsToFloat(static_cast<uint16_t>(v >> 16)); };
  for (int lane = 0; lane < 32; ++lane) {
    const uint32_t* r = op.a[lane];
    const int g = lane / 4, t = 2 * (lane % 4);
    a[g][t] = lo(r[0]), a[g][t + 1] = hi(r[0]);
    a[g + 8][t] = lo(r[1]), a[g + 8][t + 1] = hi(r[1]);
    a[g][t + 8] = lo(r[2]), a[g][t + 9] = hi(r[2]);
    a[g + 8][t + 8] = lo(r[3]), a[g + 8][t + 9] = hi(r[3]);
  }
  // Accumulator layout: d[4j + i] of lane (g, t) is row g (+8 for i ≥ 2), column 8j + t (+1
  // for odd i); each element summed from its old value in k order, as the mma emulation does.
  for (int lane = 0; lane < 32; ++lane) {
    float* d = op.d[lane];
    const int g = lane / 4, t = 2 * (lane % 4);
    for (int j = 0; j < op.n / 8; ++j) {
      for (int i = 0; i < 4; ++i) {
        const int row = g + (i >= 2 ? 8 : 0), col = 8 * j + t + (i & 1);
        float sum = op.accumulate ? d[4 * j + i] : 0.0f;
        for (int k = 0; k < 16; ++k) sum += a[row][k] * b[static_cast<size_t>(k * op.n + col)];
        d[4 * j + i] = sum;
      }
    }
  }
}

}  // namespace

void NamedBarrierSync(int id, int thread_count) {
  Fiber& f = Current();
  GridRun& run = *t_host.run;
  if (id < 1 || id > 15) Fault("bar.sync: barrier id outside 1..15 (0 is __syncthreads)");
  if (thread_count <= 0 || thread_count % 32 != 0 || thread_count > run.threads) {
    Fault("bar.sync: thread count must be a positive multiple of 32 within the block");
  }
  if (++run.named_arrived[id] == thread_count) {
    run.named_arrived[id] = 0;
    WakeAll(Status::kWaitingNamed, [id](const Fiber& w) { return w.wait_id == id; });
    return;
  }
  f.status = Status::kWaitingNamed;
  f.wait_id = id;
  SwitchToScheduler();
}

void MbarrierInit(uint64_t* bar, int arrivals) {
  Current();
  CheckAligned(bar, 8, "mbarrier.init: the mbarrier is not 8-byte aligned");
  if (arrivals < 1) Fault("mbarrier.init: the arrival count must be ≥ 1");
  Mbarrier& m = t_host.run->mbarriers[bar];
  m = Mbarrier{};
  m.arrivals = m.pending = arrivals;
  *bar = 0;  // the object's bits are opaque; kernels never read them
}

void MbarrierArrive(uint64_t* bar) { Arrive(bar, 0, "mbarrier.arrive"); }

void MbarrierArriveExpectTx(uint64_t* bar, uint32_t tx_bytes) {
  Arrive(bar, tx_bytes, "mbarrier.arrive.expect_tx");
}

void MbarrierWait(uint64_t* bar, int parity) {
  Fiber& f = Current();
  if (parity != 0 && parity != 1) Fault("mbarrier.try_wait.parity: parity must be 0 or 1");
  while (true) {
    Mbarrier& m = BarrierAt(bar, "mbarrier.try_wait.parity");
    ProgressPhase(m, bar);
    // Waiting on parity p returns once the phase of that parity has completed.
    if (static_cast<int>(m.phase & 1u) != parity) return;
    f.status = Status::kWaitingMbar;
    f.wait_bar = bar;
    SwitchToScheduler();
  }
}

void CpAsyncBulkToShared(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar) {
  Current();
  Mbarrier& m = BarrierAt(bar, "cp.async.bulk");
  if (bytes == 0 || bytes % 16 != 0) Fault("cp.async.bulk: the size must be a multiple of 16");
  CheckAligned(smem_dst, 16, "cp.async.bulk: shared address not 16-byte aligned");
  CheckAligned(gmem_src, 16, "cp.async.bulk: global address not 16-byte aligned");
  CheckDynamicShared(smem_dst, bytes,
                     "cp.async.bulk: the destination is not inside the dynamic shared memory");
  if (!IsDeviceRange(gmem_src, bytes)) Fault("cp.async.bulk: the source is not device memory");
  std::memset(smem_dst, 0xff, bytes);  // undefined until the phase completes
  m.copies.push_back(BulkCopy{static_cast<unsigned char*>(smem_dst),
                              static_cast<const unsigned char*>(gmem_src), bytes});
  if (m.pending == 0) WakeWaiters(bar);
}

void WgmmaFence() {
  WarpCollective<char, char>("wgmma.fence", 0xffffffffu, char{0}, [](WarpState& w, int) {
    if (w.expected != 0xffffffffu) Fault("wgmma.fence needs all 32 lanes");
  });
}

void WgmmaBf16(float* d, int n, const uint32_t* a, uint64_t desc_b, bool accumulate) {
  struct In {
    float* d;
    const uint32_t* a;
    uint64_t desc_b;
    int n;
    bool accumulate;
  };
  if (t_host.run != nullptr && t_host.run->threads % 128 != 0) {
    Fault("wgmma: the block's threads must form whole warpgroups of 128");
  }
  if (n < 8 || n > 256 || n % 8 != 0) Fault("wgmma: N must be a multiple of 8 in [8, 256]");
  WarpCollective<In, char>(
      "wgmma.mma_async", 0xffffffffu, In{d, a, desc_b, n, accumulate}, [](WarpState& w, int buf) {
        if (w.expected != 0xffffffffu) Fault("wgmma needs all 32 lanes");
        WgmmaOp op{};
        const In first = SlotIn<In>(w, buf, 0);
        op.desc_b = first.desc_b;
        op.n = first.n;
        op.accumulate = first.accumulate;
        for (int lane = 0; lane < 32; ++lane) {
          const In v = SlotIn<In>(w, buf, lane);
          if (v.desc_b != op.desc_b || v.n != op.n || v.accumulate != op.accumulate) {
            Fault("wgmma: lanes of a warp disagree on B, N or scale-d");
          }
          op.a[lane] = v.a;
          op.d[lane] = v.d;
        }
        w.wgmma_open.push_back(op);
      });
}

void WgmmaCommit() {
  WarpCollective<char, char>("wgmma.commit_group", 0xffffffffu, char{0}, [](WarpState& w, int) {
    w.wgmma_groups.push_back(std::move(w.wgmma_open));
    w.wgmma_open.clear();
  });
}

void WgmmaWait(int pending_groups) {
  WarpCollective<int, char>("wgmma.wait_group", 0xffffffffu, pending_groups,
                            [](WarpState& w, int buf) {
                              const int keep = SlotIn<int>(w, buf, 0);
                              while (static_cast<int>(w.wgmma_groups.size()) > keep) {
                                for (const WgmmaOp& op : w.wgmma_groups.front()) PerformWgmma(op);
                                w.wgmma_groups.pop_front();
                              }
                            });
}

}  // namespace strata_emu
