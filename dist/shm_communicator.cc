#include "dist/shm_communicator.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/check.h"
#include "core/status.h"
#include "dist/collective_kind.h"
#include "dist/rendezvous.h"

namespace strata::dist {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr uint64_t kMagic = 0x314d485353525453;  // "STRSSHM1"
constexpr size_t kCacheLineBytes = 64;
constexpr int64_t kMinBufferBytes = 4096;
constexpr int64_t kMaxBufferBytes = int64_t{1} << 30;
constexpr size_t kAbortMessageBytes = 448;
// Waiting: pause instructions for kSpinTime, then yields until kYieldTime, then a futex wait
// (woken by every arrival, at most kLivenessPeriod long so that peers' liveness and the
// deadline are checked).
constexpr microseconds kSpinTime(30);
constexpr microseconds kYieldTime(200);
constexpr milliseconds kLivenessPeriod(10);

static_assert(std::atomic<uint64_t>::is_always_lock_free, "cross-process atomics need lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "cross-process atomics need lock-free");
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex words are 32-bit");

using collective::Describe;
using collective::Kind;
using collective::KindName;
using collective::kTypeFloat;
using collective::kTypeInt64;
using collective::ReduceArg;

// What a size in a descriptor counts.
const char* SizeUnit(Kind kind) {
  if (kind == Kind::kAllReduce) return "elements";
  if (kind == Kind::kAllToAll) return "bytes per rank";
  return "bytes";
}

// What a rank is calling; published with the first step of every collective.
struct Descriptor {
  uint64_t seq = 0;
  uint32_t kind = 0;
  uint32_t arg = 0;
  int64_t size = 0;                                // in SizeUnit(kind)
  int64_t send_bytes[kMaxSharedMemoryRanks] = {};  // all-to-all-v only
  int64_t recv_bytes[kMaxSharedMemoryRanks] = {};
};

struct alignas(kCacheLineBytes) Header {
  uint64_t magic = 0;
  int64_t world_size = 0;
  int64_t buffer_bytes_per_rank = 0;
  int64_t total_bytes = 0;
  // The first failure of any rank: 0 none, 1 being written, 2 published (fields valid).
  // Bumped by every arrival, abort and close; sleeping waiters futex-wait on it.
  alignas(kCacheLineBytes) std::atomic<uint32_t> wake_epoch{0};
  std::atomic<uint32_t> sleepers{0};  // waiters in (or about to enter) a futex wait
  alignas(kCacheLineBytes) std::atomic<uint32_t> abort_state{0};
  int32_t abort_rank = 0;
  int32_t abort_code = 0;
  char abort_message[kAbortMessageBytes] = {};
};

struct alignas(kCacheLineBytes) Slot {
  std::atomic<uint64_t> arrived{0};                          // the last step this rank reached
  alignas(kCacheLineBytes) std::atomic<uint32_t> closed{0};  // 1 once its communicator is gone
  int32_t pid = 0;
  uint64_t pid_namespace = 0;  // inode of /proc/self/ns/pid: pids compare only within one
  Descriptor descriptor[2];    // by parity of the collective's first step
};

// Byte offsets inside the segment.
struct Layout {
  size_t slots = 0;
  size_t areas = 0;
  size_t area_bytes = 0;  // per rank
  size_t half_bytes = 0;  // per step
  size_t total = 0;
};

size_t RoundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

Layout ComputeLayout(int world_size, int64_t buffer_bytes_per_rank) {
  Layout layout;
  layout.slots = RoundUp(sizeof(Header), kCacheLineBytes);
  layout.areas = layout.slots + world_size * sizeof(Slot);
  layout.area_bytes = RoundUp(static_cast<size_t>(buffer_bytes_per_rank), kCacheLineBytes);
  layout.half_bytes = layout.area_bytes / 2 / kCacheLineBytes * kCacheLineBytes;
  layout.total = layout.areas + world_size * layout.area_bytes;
  return layout;
}

void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#else
  std::this_thread::yield();
#endif
}

// Shared (not FUTEX_PRIVATE) operations: the word lives in memory mapped by several processes.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, microseconds timeout) {
  timespec relative{};
  relative.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
  relative.tv_nsec = static_cast<long>(timeout.count() % 1000000 * 1000);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &relative, nullptr,
            0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Wakes every sleeping waiter of the segment (after an arrival, an abort or a close).
void WakeWaiters(Header& header) {
  header.wake_epoch.fetch_add(1, std::memory_order_seq_cst);
  if (header.sleepers.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&header.wake_epoch);
}

uint64_t PidNamespace() {
  struct stat info {};
  return ::stat("/proc/self/ns/pid", &info) == 0 ? static_cast<uint64_t>(info.st_ino) : 0;
}

// True when process `pid` (same pid namespace) no longer runs: gone, or a zombie.
bool ProcessGone(int pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* file = std::fopen(path, "re");
  if (file == nullptr) return errno == ENOENT;
  char buffer[512];
  const size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, file);
  std::fclose(file);
  buffer[n] = '\0';
  // "pid (comm) S ...": the state follows the last ')'.
  const char* paren = std::strrchr(buffer, ')');
  if (paren == nullptr || paren[1] == '\0' || paren[2] == '\0') return false;
  return paren[2] == 'Z' || paren[2] == 'X';
}

// Bytes of a `total`-byte message that round `round` moves in chunks of `chunk` bytes.
size_t ChunkBytes(int64_t total, int64_t round, size_t chunk) {
  const int64_t left = total - round * static_cast<int64_t>(chunk);
  return left <= 0 ? 0 : std::min(static_cast<size_t>(left), chunk);
}

// Rounds needed to move `bytes` in chunks of `chunk` (at least one: every collective also
// synchronises and checks the descriptors).
int64_t Rounds(int64_t bytes, size_t chunk) {
  const int64_t c = static_cast<int64_t>(chunk);
  return std::max<int64_t>(1, (bytes + c - 1) / c);
}

void Copy(void* to, const void* from, size_t bytes) {
  if (bytes > 0) std::memcpy(to, from, bytes);
}

// acc op v, folded in rank order by the caller; integer sums wrap (two's complement).
template <typename T>
T Combine(T acc, T v, ReduceOp op) {
  if (op == ReduceOp::kMax) return v > acc ? v : acc;
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(acc) +
                          static_cast<std::make_unsigned_t<T>>(v));
  } else {
    return acc + v;
  }
}

class ShmCommunicator final : public Communicator {
 public:
  // `base` maps `layout.total` bytes (null when world_size == 1).
  ShmCommunicator(const RendezvousOptions& options, std::unique_ptr<Rendezvous> rendezvous,
                  char* base, const Layout& layout)
      : options_(options),
        rendezvous_(std::move(rendezvous)),
        base_(base),
        layout_(layout),
        rows_(options.world_size) {}
  ~ShmCommunicator() override;

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  std::string backend() const override { return "shm"; }

  absl::Status AllToAllV(const void* send, const int64_t* send_bytes, void* recv,
                         const int64_t* recv_bytes) override;
  absl::Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank) override;
  absl::Status AllReduce(int64_t* data, int64_t count, ReduceOp op) override;
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override;
  absl::Status AllGather(const void* send, int64_t bytes, void* recv) override;
  absl::Status Broadcast(void* data, int64_t bytes, int root) override;
  absl::Status Barrier() override;

  // The first collective after mapping (sequence number 0), bounded by connect_timeout.
  absl::Status ConnectCheck();

 private:
  struct Call {
    Kind kind = Kind::kBarrier;
    uint32_t arg = 0;
    uint64_t seq = 0;
    Clock::time_point deadline;
  };

  Header* header() const { return reinterpret_cast<Header*>(base_); }
  Slot* slot(int r) const { return reinterpret_cast<Slot*>(base_ + layout_.slots) + r; }
  // Rank r's half for step `step`.
  char* Half(int r, uint64_t step) const {
    return base_ + layout_.areas + r * layout_.area_bytes + (step % 2) * layout_.half_bytes;
  }
  char* NextHalf() const { return Half(rank(), step_ + 1); }

  // Starts a collective: refuses after an earlier error, numbers the call, sets its deadline.
  absl::Status Begin(Kind kind, uint32_t arg, milliseconds timeout);
  // "all-reduce (shm collective #12): ".
  std::string Prefix() const;
  absl::Status Invalid(absl::string_view what);
  // Publishes this rank's descriptor for the next step (the collective's first).
  void Publish(int64_t size, const int64_t* send_bytes = nullptr,
               const int64_t* recv_bytes = nullptr);
  // One step: publishes this rank's arrival, waits for every rank's.
  absl::Status Sync();
  // After the first step: every rank's descriptor must match (all-to-all-v: counts pairwise).
  absl::Status CheckDescriptors();
  // A rank that has not reached `step` and closed its communicator or exited: UNAVAILABLE.
  absl::Status PeerFailure(uint64_t step) const;
  absl::Status Timeout(uint64_t step);
  // Records the error (and, first among the ranks, in the segment) and refuses later calls.
  absl::Status Fail(absl::Status status);
  absl::Status FailFromAbortRecord();
  absl::Status ExchangeParts(const void* send, const int64_t* send_bytes, void* recv,
                             const int64_t* recv_bytes);
  template <typename T>
  absl::Status AllReduceImpl(T* data, int64_t count, ReduceOp op, uint32_t type);

  RendezvousOptions options_;
  std::unique_ptr<Rendezvous> rendezvous_;  // keeps rank 0's store server up for the group
  char* base_;                              // null when world_size == 1
  Layout layout_;
  Call call_;
  uint64_t next_seq_ = 1;
  uint64_t step_ = 0;  // the last step this rank arrived at
  absl::Status broken_;
  std::vector<int64_t> counts_;    // all-to-all: bytes per rank, world_size entries
  std::vector<const char*> rows_;  // all-reduce: every rank's input half
};

ShmCommunicator::~ShmCommunicator() {
  if (base_ == nullptr) return;
  slot(rank())->closed.store(1, std::memory_order_release);
  WakeWaiters(*header());
  ::munmap(base_, layout_.total);
}

absl::Status ShmCommunicator::Begin(Kind kind, uint32_t arg, milliseconds timeout) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shm communicator (rank ", rank(), " of ", world_size(),
                     ") is unusable after an earlier error: ", broken_.message()));
  }
  call_.kind = kind;
  call_.arg = arg;
  call_.seq = kind == Kind::kConnectCheck ? 0 : next_seq_++;
  call_.deadline = Clock::now() + timeout;
  return absl::OkStatus();
}

std::string ShmCommunicator::Prefix() const {
  return absl::StrCat(KindName(call_.kind), " (shm collective #", call_.seq, "): ");
}

absl::Status ShmCommunicator::Invalid(absl::string_view what) {
  return Fail(absl::InvalidArgumentError(absl::StrCat(Prefix(), "rank ", rank(), ": ", what)));
}

void ShmCommunicator::Publish(int64_t size, const int64_t* send_bytes, const int64_t* recv_bytes) {
  Descriptor& d = slot(rank())->descriptor[(step_ + 1) % 2];
  d.seq = call_.seq;
  d.kind = static_cast<uint32_t>(call_.kind);
  d.arg = call_.arg;
  d.size = size;
  for (int p = 0; p < world_size(); ++p) {
    d.send_bytes[p] = send_bytes == nullptr ? 0 : send_bytes[p];
    d.recv_bytes[p] = recv_bytes == nullptr ? 0 : recv_bytes[p];
  }
}

absl::Status ShmCommunicator::Sync() {
  const uint64_t step = ++step_;
  Header& h = *header();
  slot(rank())->arrived.store(step, std::memory_order_release);
  WakeWaiters(h);
  const int n = world_size();
  int next = 0;  // ranks below it have arrived
  auto all_arrived = [&] {
    while (next < n && slot(next)->arrived.load(std::memory_order_acquire) >= step) ++next;
    return next == n;
  };
  const Clock::time_point start = Clock::now();
  Clock::time_point next_liveness_check = start + kLivenessPeriod;
  for (int64_t iteration = 0;; ++iteration) {
    if (all_arrived()) return absl::OkStatus();
    if (h.abort_state.load(std::memory_order_acquire) == 2) return FailFromAbortRecord();
    if (iteration % 64 != 0) {
      Pause();
      continue;
    }
    const Clock::time_point now = Clock::now();
    if (now >= call_.deadline) return Timeout(step);
    if (now >= next_liveness_check) {
      absl::Status gone = PeerFailure(step);
      if (!gone.ok()) return Fail(gone);
      next_liveness_check = now + kLivenessPeriod;
    }
    if (now - start < kSpinTime) {
      Pause();
    } else if (now - start < kYieldTime) {
      std::this_thread::yield();
    } else {
      // Announce the sleep before re-checking: an arrival after the check bumps the epoch, so
      // the wait returns at once; an arrival before it is seen by the check.
      h.sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t epoch = h.wake_epoch.load(std::memory_order_seq_cst);
      if (!all_arrived() && h.abort_state.load(std::memory_order_acquire) != 2) {
        const auto until = std::min(call_.deadline, next_liveness_check);
        const auto wait = std::chrono::duration_cast<microseconds>(until - now);
        FutexWait(&h.wake_epoch, epoch, std::max(wait, microseconds(1)));
      }
      h.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    }
  }
}

absl::Status ShmCommunicator::PeerFailure(uint64_t step) const {
  const uint64_t my_namespace = slot(rank())->pid_namespace;
  const int my_pid = slot(rank())->pid;
  for (int p = 0; p < world_size(); ++p) {
    const Slot& s = *slot(p);
    if (s.arrived.load(std::memory_order_acquire) >= step) continue;
    if (s.closed.load(std::memory_order_acquire) != 0) {
      return absl::UnavailableError(
          absl::StrCat(Prefix(), "rank ", p, " closed its communicator (peer exited?)"));
    }
    if (s.pid != my_pid && s.pid_namespace == my_namespace && my_namespace != 0 &&
        ProcessGone(s.pid)) {
      return absl::UnavailableError(
          absl::StrCat(Prefix(), "rank ", p, " exited (process ", s.pid, " is gone)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Timeout(uint64_t step) {
  std::vector<int> silent;
  for (int p = 0; p < world_size(); ++p) {
    if (slot(p)->arrived.load(std::memory_order_acquire) < step) silent.push_back(p);
  }
  if (silent.empty()) return absl::OkStatus();  // the last one arrived just now
  const milliseconds limit =
      call_.kind == Kind::kConnectCheck ? options_.connect_timeout : options_.timeout;
  return Fail(absl::DeadlineExceededError(
      absl::StrCat(Prefix(), silent.size() == 1 ? "rank " : "ranks ", absl::StrJoin(silent, ", "),
                   " did not answer within ", FormatDuration(limit))));
}

absl::Status ShmCommunicator::Fail(absl::Status status) {
  if (broken_.ok()) broken_ = status;
  if (base_ == nullptr) return status;
  Header& h = *header();
  uint32_t expected = 0;
  if (h.abort_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    h.abort_rank = rank();
    h.abort_code = static_cast<int32_t>(status.code());
    const absl::string_view message = status.message();
    const size_t n = std::min(message.size(), kAbortMessageBytes - 1);
    std::memcpy(h.abort_message, message.data(), n);
    h.abort_message[n] = '\0';
    h.abort_state.store(2, std::memory_order_release);
    WakeWaiters(h);
  }
  return status;
}

absl::Status ShmCommunicator::FailFromAbortRecord() {
  const Header& h = *header();
  return Fail(absl::Status(
      static_cast<absl::StatusCode>(h.abort_code),
      absl::StrCat(Prefix(), "stopped because rank ", h.abort_rank, " failed: ", h.abort_message)));
}

absl::Status ShmCommunicator::CheckDescriptors() {
  const int n = world_size();
  const int self = rank();
  const int parity = static_cast<int>(step_ % 2);
  const Descriptor& mine = slot(self)->descriptor[parity];
  std::vector<std::string> problems;
  for (int p = 0; p < n; ++p) {
    if (p == self) continue;
    const Descriptor& theirs = slot(p)->descriptor[parity];
    if (theirs.seq != mine.seq || theirs.kind != mine.kind || theirs.arg != mine.arg) {
      problems.push_back(absl::StrCat(
          "rank ", p, " is in ", Describe(static_cast<Kind>(theirs.kind), theirs.arg), " #",
          theirs.seq, " (ranks must call the same collectives in the same order)"));
    } else if (theirs.size != mine.size) {
      problems.push_back(absl::StrCat("rank ", p, " passes ", theirs.size, " ",
                                      SizeUnit(call_.kind), " but this rank passes ", mine.size));
    }
  }
  if (problems.empty() && call_.kind == Kind::kAllToAllV) {
    for (int from = 0; from < n; ++from) {
      for (int to = 0; to < n; ++to) {
        const int64_t sends = slot(from)->descriptor[parity].send_bytes[to];
        const int64_t expects = slot(to)->descriptor[parity].recv_bytes[from];
        if (sends != expects) {
          problems.push_back(absl::StrCat("rank ", from, " sends ", sends, " bytes to rank ", to,
                                          ", which expects ", expects,
                                          " (send and receive counts disagree)"));
        }
      }
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return Fail(absl::InvalidArgumentError(absl::StrCat(Prefix(), absl::StrJoin(problems, "; "))));
}

absl::Status ShmCommunicator::ConnectCheck() {
  RETURN_IF_ERROR(Begin(Kind::kConnectCheck, 0, options_.connect_timeout));
  Publish(0);
  RETURN_IF_ERROR(Sync());
  return CheckDescriptors();
}

absl::Status ShmCommunicator::Barrier() {
  RETURN_IF_ERROR(Begin(Kind::kBarrier, 0, options_.timeout));
  if (base_ == nullptr) return absl::OkStatus();
  Publish(0);
  RETURN_IF_ERROR(Sync());
  return CheckDescriptors();
}

absl::Status ShmCommunicator::AllToAllV(const void* send, const int64_t* send_bytes, void* recv,
                                        const int64_t* recv_bytes) {
  RETURN_IF_ERROR(Begin(Kind::kAllToAllV, 0, options_.timeout));
  if (send_bytes == nullptr || recv_bytes == nullptr) {
    return Invalid("send_bytes and recv_bytes must point to world_size counts");
  }
  return ExchangeParts(send, send_bytes, recv, recv_bytes);
}

absl::Status ShmCommunicator::AllToAll(const void* send, void* recv, int64_t bytes_per_rank) {
  RETURN_IF_ERROR(Begin(Kind::kAllToAll, 0, options_.timeout));
  if (bytes_per_rank < 0) {
    return Invalid(absl::StrCat("bytes_per_rank is ", bytes_per_rank, " (must be >= 0)"));
  }
  counts_.assign(world_size(), bytes_per_rank);
  return ExchangeParts(send, counts_.data(), recv, counts_.data());
}

// All-to-all(-v): in round i, rank p's half holds, at offset q · part, bytes
// [i · part, (i+1) · part) of its message to rank q (part = half / world_size, cache-aligned).
absl::Status ShmCommunicator::ExchangeParts(const void* send, const int64_t* send_bytes, void* recv,
                                            const int64_t* recv_bytes) {
  const int n = world_size();
  const int self = rank();
  int64_t total_send = 0;
  int64_t total_recv = 0;
  for (int p = 0; p < n; ++p) {
    if (send_bytes[p] < 0 || recv_bytes[p] < 0) {
      return Invalid(absl::StrCat("send_bytes[", p, "] is ", send_bytes[p], " and recv_bytes[", p,
                                  "] is ", recv_bytes[p], " (counts must be >= 0)"));
    }
    total_send += send_bytes[p];
    total_recv += recv_bytes[p];
  }
  if ((send == nullptr && total_send > 0) || (recv == nullptr && total_recv > 0)) {
    return Invalid(absl::StrCat("null buffer with ", total_send, " bytes to send and ", total_recv,
                                " bytes to receive"));
  }
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (base_ == nullptr) {
    if (send_bytes[0] != recv_bytes[0]) {
      return Invalid(
          absl::StrCat("sends ", send_bytes[0], " bytes to itself but expects ", recv_bytes[0]));
    }
    if (send_bytes[0] > 0 && in != out) std::memmove(out, in, send_bytes[0]);
    return absl::OkStatus();
  }
  const size_t part = layout_.half_bytes / n / kCacheLineBytes * kCacheLineBytes;
  std::vector<int64_t> send_offset(n, 0), recv_offset(n, 0);
  for (int p = 1; p < n; ++p) {
    send_offset[p] = send_offset[p - 1] + send_bytes[p - 1];
    recv_offset[p] = recv_offset[p - 1] + recv_bytes[p - 1];
  }
  auto produce = [&](int64_t round) {
    char* half = NextHalf();
    for (int q = 0; q < n; ++q) {
      Copy(half + q * part, in + send_offset[q] + round * part,
           ChunkBytes(send_bytes[q], round, part));
    }
  };
  auto consume = [&](int64_t round) {
    for (int p = 0; p < n; ++p) {
      Copy(out + recv_offset[p] + round * part, Half(p, step_) + self * part,
           ChunkBytes(recv_bytes[p], round, part));
    }
  };
  Publish(call_.kind == Kind::kAllToAll ? send_bytes[0] : 0, send_bytes, recv_bytes);
  produce(0);
  RETURN_IF_ERROR(Sync());
  RETURN_IF_ERROR(CheckDescriptors());
  // The descriptors agree, so every rank computes the same number of rounds.
  int64_t rounds = 1;
  for (int p = 0; p < n; ++p) {
    const Descriptor& d = slot(p)->descriptor[step_ % 2];
    for (int q = 0; q < n; ++q) rounds = std::max(rounds, Rounds(d.send_bytes[q], part));
  }
  consume(0);
  for (int64_t round = 1; round < rounds; ++round) {
    produce(round);
    RETURN_IF_ERROR(Sync());
    consume(round);
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::AllGather(const void* send, int64_t bytes, void* recv) {
  RETURN_IF_ERROR(Begin(Kind::kAllGather, 0, options_.timeout));
  if (bytes < 0) return Invalid(absl::StrCat("bytes is ", bytes, " (must be >= 0)"));
  if (bytes > 0 && (send == nullptr || recv == nullptr)) {
    return Invalid(absl::StrCat("null buffer with ", bytes, " bytes"));
  }
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (base_ == nullptr) {
    if (bytes > 0 && in != out) std::memmove(out, in, bytes);
    return absl::OkStatus();
  }
  const size_t chunk = layout_.half_bytes;
  const int64_t rounds = Rounds(bytes, chunk);
  for (int64_t round = 0; round < rounds; ++round) {
    const size_t n = ChunkBytes(bytes, round, chunk);
    if (round == 0) Publish(bytes);
    Copy(NextHalf(), in + round * chunk, n);
    RETURN_IF_ERROR(Sync());
    if (round == 0) RETURN_IF_ERROR(CheckDescriptors());
    for (int p = 0; p < world_size(); ++p) {
      Copy(out + p * bytes + round * chunk, Half(p, step_), n);
    }
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Broadcast(void* data, int64_t bytes, int root) {
  RETURN_IF_ERROR(Begin(Kind::kBroadcast, static_cast<uint32_t>(root), options_.timeout));
  if (root < 0 || root >= world_size()) {
    return Invalid(absl::StrCat("root ", root, " is outside world_size ", world_size()));
  }
  if (bytes < 0) return Invalid(absl::StrCat("bytes is ", bytes, " (must be >= 0)"));
  if (bytes > 0 && data == nullptr)
    return Invalid(absl::StrCat("null buffer with ", bytes, " bytes"));
  if (base_ == nullptr) return absl::OkStatus();
  char* buffer = static_cast<char*>(data);
  const size_t chunk = layout_.half_bytes;
  const int64_t rounds = Rounds(bytes, chunk);
  for (int64_t round = 0; round < rounds; ++round) {
    const size_t n = ChunkBytes(bytes, round, chunk);
    if (round == 0) Publish(bytes);
    if (rank() == root) Copy(NextHalf(), buffer + round * chunk, n);
    RETURN_IF_ERROR(Sync());
    if (round == 0) RETURN_IF_ERROR(CheckDescriptors());
    if (rank() != root) Copy(buffer + round * chunk, Half(root, step_), n);
  }
  return absl::OkStatus();
}

absl::Status ShmCommunicator::AllReduce(int64_t* data, int64_t count, ReduceOp op) {
  return AllReduceImpl(data, count, op, kTypeInt64);
}

absl::Status ShmCommunicator::AllReduce(float* data, int64_t count, ReduceOp op) {
  return AllReduceImpl(data, count, op, kTypeFloat);
}

// Per round of up to half / sizeof(T) elements: step 1 publishes the inputs; rank r reduces
// elements [e·r/W, e·(r+1)/W) of the round over ranks 0..W-1 in rank order into its next half;
// step 2 publishes the reduced slices, which every rank copies out.
template <typename T>
absl::Status ShmCommunicator::AllReduceImpl(T* data, int64_t count, ReduceOp op, uint32_t type) {
  RETURN_IF_ERROR(Begin(Kind::kAllReduce, ReduceArg(op, type), options_.timeout));
  if (count < 0) return Invalid(absl::StrCat("count is ", count, " (must be >= 0)"));
  if (count > 0 && data == nullptr) {
    return Invalid(absl::StrCat("null buffer with ", count, " elements"));
  }
  if (base_ == nullptr) return absl::OkStatus();
  const int n = world_size();
  const int self = rank();
  const int64_t chunk = static_cast<int64_t>(layout_.half_bytes / sizeof(T));
  const int64_t rounds = Rounds(count, static_cast<size_t>(chunk));
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t begin = round * chunk;
    const int64_t elements = std::min(chunk, count - begin);
    if (round == 0) Publish(count);
    Copy(NextHalf(), data + begin, elements * sizeof(T));
    RETURN_IF_ERROR(Sync());
    if (round == 0) RETURN_IF_ERROR(CheckDescriptors());
    const uint64_t input_step = step_;
    auto slice_begin = [&](int r) { return elements * r / n; };
    T* reduced = reinterpret_cast<T*>(NextHalf());
    for (int p = 0; p < n; ++p) rows_[p] = Half(p, input_step);
    for (int64_t i = slice_begin(self); i < slice_begin(self + 1); ++i) {
      T acc = reinterpret_cast<const T*>(rows_[0])[i];
      for (int p = 1; p < n; ++p) acc = Combine(acc, reinterpret_cast<const T*>(rows_[p])[i], op);
      reduced[i] = acc;
    }
    RETURN_IF_ERROR(Sync());
    for (int p = 0; p < n; ++p) {
      const int64_t lo = slice_begin(p);
      Copy(data + begin + lo, reinterpret_cast<const T*>(Half(p, step_)) + lo,
           (slice_begin(p + 1) - lo) * sizeof(T));
    }
  }
  return absl::OkStatus();
}

// "/strata-shm-<group>-<16 hex digits>": the group with characters other than [A-Za-z0-9_-]
// replaced, shortened to keep the name well under NAME_MAX.
absl::StatusOr<std::string> SegmentName(const std::string& group) {
  uint64_t random = 0;
  if (::getrandom(&random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
    return absl::InternalError(absl::StrCat("getrandom for the shared-memory segment name failed: ",
                                            std::strerror(errno)));
  }
  std::string name = "/strata-shm-";
  for (char c : group.substr(0, 100)) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_';
    name.push_back(keep ? c : '_');
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(random));
  return absl::StrCat(name, "-", hex);
}

absl::Status Errno(absl::string_view what, const std::string& name) {
  return absl::UnavailableError(
      absl::StrCat(what, " shared-memory segment ", name, ": ", std::strerror(errno)));
}

// Rank 0: creates, sizes and maps the segment and initialises header and slots.
absl::StatusOr<char*> CreateSegment(const std::string& name, const Layout& layout, int world_size,
                                    int64_t buffer_bytes_per_rank) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Errno("cannot create", name);
  const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(layout.total));
  if (error != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot reserve ", layout.total, " bytes for shared-memory segment ", name,
                     " (", world_size, " ranks x ", buffer_bytes_per_rank,
                     " buffer_bytes_per_rank): ", std::strerror(error)));
  }
  void* base = ::mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    absl::Status status = Errno("cannot map", name);
    ::shm_unlink(name.c_str());
    return status;
  }
  char* bytes = static_cast<char*>(base);
  Header* header = new (bytes) Header();
  header->magic = kMagic;
  header->world_size = world_size;
  header->buffer_bytes_per_rank = buffer_bytes_per_rank;
  header->total_bytes = static_cast<int64_t>(layout.total);
  for (int r = 0; r < world_size; ++r) new (bytes + layout.slots + r * sizeof(Slot)) Slot();
  return bytes;
}

// Ranks 1..W-1: opens and maps the segment rank 0 created, checks that it matches.
absl::StatusOr<char*> OpenSegment(const std::string& name, const Layout& layout, int world_size,
                                  int64_t buffer_bytes_per_rank, int rank) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return Errno("cannot open", name);
  struct stat info {};
  if (::fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) < sizeof(Header)) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("shared-memory segment ", name, " is too small"));
  }
  const size_t mapped = static_cast<size_t>(info.st_size);
  void* base = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return Errno("cannot map", name);
  const Header& header = *static_cast<const Header*>(base);
  absl::Status status;
  if (header.magic != kMagic) {
    status = absl::InternalError(absl::StrCat("shared-memory segment ", name, " has no header"));
  } else if (header.world_size != world_size ||
             header.buffer_bytes_per_rank != buffer_bytes_per_rank ||
             static_cast<size_t>(header.total_bytes) != layout.total || mapped != layout.total) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " asked for world_size ", world_size, " and buffer_bytes_per_rank ",
        buffer_bytes_per_rank, ", but rank 0 created the segment for world_size ",
        header.world_size, " and buffer_bytes_per_rank ", header.buffer_bytes_per_rank));
  }
  if (!status.ok()) {
    ::munmap(base, mapped);
    return status;
  }
  return static_cast<char*>(base);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> ConnectSharedMemory(const RendezvousOptions& options,
                                                                  int64_t buffer_bytes_per_rank) {
  const int n = options.world_size;
  if (n < 1 || options.rank < 0 || options.rank >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside world_size ", n));
  }
  if (n > kMaxSharedMemoryRanks) {
    return absl::InvalidArgumentError(absl::StrCat("world_size ", n, " exceeds the limit of ",
                                                   kMaxSharedMemoryRanks, " shared-memory ranks"));
  }
  if (options.timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    return absl::InvalidArgumentError("timeout and connect_timeout must be positive");
  }
  const int64_t min_buffer = std::max<int64_t>(kMinBufferBytes, 128 * int64_t{n});
  if (buffer_bytes_per_rank < min_buffer || buffer_bytes_per_rank > kMaxBufferBytes) {
    return absl::InvalidArgumentError(absl::StrCat("buffer_bytes_per_rank ", buffer_bytes_per_rank,
                                                   " is outside [", min_buffer, ", ",
                                                   kMaxBufferBytes, "] for world_size ", n));
  }
  const Layout layout = ComputeLayout(n, buffer_bytes_per_rank);
  if (n == 1) {
    return std::unique_ptr<Communicator>(new ShmCommunicator(options, nullptr, nullptr, layout));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Rendezvous> rendezvous, Rendezvous::Connect(options));
  std::string name;
  absl::StatusOr<char*> base;
  if (options.rank == 0) {
    ASSIGN_OR_RETURN(name, SegmentName(options.group));
    base = CreateSegment(name, layout, n, buffer_bytes_per_rank);
    if (base.ok()) {
      absl::Status published = rendezvous->Set("shm/name", name);
      if (!published.ok()) {
        ::munmap(*base, layout.total);
        base = published;
      }
    }
  } else {
    ASSIGN_OR_RETURN(name, rendezvous->Get("shm/name", options.connect_timeout));
    base = OpenSegment(name, layout, n, buffer_bytes_per_rank, options.rank);
  }
  if (!base.ok()) {
    if (!name.empty()) ::shm_unlink(name.c_str());
    return base.status();
  }
  Slot& own = *(reinterpret_cast<Slot*>(*base + layout.slots) + options.rank);
  own.pid = static_cast<int32_t>(::getpid());
  own.pid_namespace = PidNamespace();
  // Every rank has mapped the segment once everyone passes the barrier; the name goes then (or
  // on failure), so no segment outlives the group in /dev/shm. Each rank unlinks: the first
  // wins, the others get ENOENT.
  const absl::Status mapped = rendezvous->Barrier("shm/mapped", options.connect_timeout);
  ::shm_unlink(name.c_str());
  if (mapped.ok()) rendezvous->Disconnect();  // rank 0's server stays up while it lives
  auto communicator =
      std::make_unique<ShmCommunicator>(options, std::move(rendezvous), *base, layout);
  RETURN_IF_ERROR(mapped);
  RETURN_IF_ERROR(communicator->ConnectCheck());
  return std::unique_ptr<Communicator>(std::move(communicator));
}

}  // namespace strata::dist
