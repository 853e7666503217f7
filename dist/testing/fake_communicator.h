// An in-process Communicator for tests and benchmarks: `world_size` ranks that are threads of
// one process, exchanging data through shared memory.
//
//   FakeGroup group(3);
//   std::vector<std::thread> threads;
//   for (int r = 0; r < 3; ++r)
//     threads.emplace_back([&, r] { Communicator* comm = group.rank(r); ... });
//
// Every collective is two barriers: each rank publishes its buffers, waits for all, copies what
// it receives straight out of the senders' buffers, and waits again so no sender reuses its
// buffer while a peer still reads it. Semantics follow dist/communicator.h, including the
// checks a real backend would fail on: every rank must call the same collective (kind and
// sizes) in the same order, and AllToAllV counts must agree pairwise; otherwise every rank gets
// the same error. A rank that does not arrive within `timeout` makes the others fail with
// "<collective> (collective #N): rank R did not answer within T ms", after which the group is
// unusable (every later call fails), as with Gloo.
//
// Thread-safety: each rank's Communicator is used by one thread at a time; different ranks from
// different threads (that is the point).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "dist/communicator.h"

namespace strata::dist::testing {

class FakeGroup {
 public:
  // How bytes move between ranks' buffers. Default: memcpy (host buffers). A device copy (e.g.
  // cudaMemcpy with cudaMemcpyDefault) lets all-to-all(-v), all-gather and broadcast take
  // device buffers; all-reduce always reads and writes host memory.
  using CopyFn = void (*)(void* dst, const void* src, int64_t bytes);

  explicit FakeGroup(int world_size,
                     std::chrono::milliseconds timeout = std::chrono::milliseconds(60000),
                     CopyFn copy = nullptr);
  ~FakeGroup();
  FakeGroup(const FakeGroup&) = delete;
  FakeGroup& operator=(const FakeGroup&) = delete;

  int world_size() const { return world_size_; }
  // Rank r's communicator (owned by the group; valid for its lifetime).
  Communicator* rank(int r);

 private:
  class RankCommunicator;
  friend class RankCommunicator;

  // What one rank posted for the current collective (pointers into its own buffers).
  struct Post {
    int kind = 0;
    int64_t bytes = 0;  // AllToAll/AllGather/Broadcast bytes, AllReduce count
    int root = 0;
    int op = 0;
    const void* send = nullptr;
    void* recv = nullptr;
    const int64_t* send_bytes = nullptr;
    const int64_t* recv_bytes = nullptr;
  };

  void CopyBytes(void* dst, const void* src, int64_t bytes) const {
    if (bytes > 0) copy_(dst, src, bytes);
  }
  // Waits until every rank arrived (ok) or the timeout passed (error naming the missing ranks).
  absl::Status Arrive(int rank, const char* collective, int64_t index);
  // After the first barrier: every rank posted a matching collective.
  absl::Status CheckPosts(const char* collective, int64_t index) const;
  // Marks the group unusable with `error`'s message (first error wins); returns `error`.
  absl::Status Break(const absl::Status& error);

  const int world_size_;
  const std::chrono::milliseconds timeout_;
  const CopyFn copy_;
  std::vector<std::unique_ptr<RankCommunicator>> ranks_;
  std::vector<Post> posts_;  // [world_size]; rank r writes posts_[r] before its first barrier

  absl::Mutex mu_;
  absl::CondVar cv_;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<char> arrived_ ABSL_GUARDED_BY(mu_);
  int num_arrived_ ABSL_GUARDED_BY(mu_) = 0;
  std::string broken_ ABSL_GUARDED_BY(mu_);  // non-empty after a timeout: the first error
};

}  // namespace strata::dist::testing
