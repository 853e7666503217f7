// Collectives between the ranks of one serving group (docs/architecture.md, "Parallelism").
//
// A Communicator connects `world_size` ranks (processes, or engine threads of one process) that
// call the same collectives in the same order. Three real backends: shared memory for CPU ranks
// on one host (dist/shm_communicator.h), Gloo over TCP for CPU ranks anywhere
// (dist/gloo_communicator.h) and NCCL for GPU ranks (dist/nccl_communicator.h; buffers are then
// device pointers). Every call either completes on all ranks or returns an error on every rank
// that can still run: a peer that exited or stopped answering yields, within `timeout` of the
// call, a Status whose message names the collective and the rank(s) that failed, e.g.
//   "all-to-all-v (step collective #812): rank 2 did not answer within 60 s"
// After an error the communicator is unusable; the caller exits non-zero so the orchestrator
// restarts the group (never a silent hang).
//
// Thread-safety: one thread calls a given communicator at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::dist {

enum class ReduceOp { kSum, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "shm", "gloo" or "nccl" (for logs and metrics).
  virtual std::string backend() const = 0;

  // Every rank sends send_bytes[r] bytes to rank r, taken from `send` in rank order (rank r's
  // part starts at the sum of send_bytes[0..r)), and receives recv_bytes[r] bytes from rank r
  // into `recv`, also in rank order. Counts must agree pairwise (a rank's send_bytes[r] is r's
  // recv_bytes[rank]); exchange them first with AllToAll of the counts when they are not known.
  // Arrays have world_size entries; zero-byte parts are allowed.
  virtual absl::Status AllToAllV(const void* send, const int64_t* send_bytes, void* recv,
                                 const int64_t* recv_bytes) = 0;
  // Fixed-size all-to-all: `bytes_per_rank` bytes to every rank (send and recv hold
  // world_size · bytes_per_rank bytes).
  virtual absl::Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank) = 0;

  // In-place element-wise reduction over all ranks.
  virtual absl::Status AllReduce(int64_t* data, int64_t count, ReduceOp op) = 0;
  virtual absl::Status AllReduce(float* data, int64_t count, ReduceOp op) = 0;

  // recv[r · bytes .. (r+1) · bytes) = rank r's `send` (recv holds world_size · bytes bytes).
  virtual absl::Status AllGather(const void* send, int64_t bytes, void* recv) = 0;
  // Rank `root`'s bytes copied into every rank's `data`.
  virtual absl::Status Broadcast(void* data, int64_t bytes, int root) = 0;
  virtual absl::Status Barrier() = 0;
};

// How a rank finds its group. Rank 0 listens on `coordinator` ("host:port"); the others connect
// to it (retrying until `connect_timeout`) and all exchange their own listening addresses.
struct RendezvousOptions {
  int world_size = 1;
  int rank = 0;
  std::string coordinator;  // host:port of rank 0's rendezvous listener
  // Distinguishes several groups (e.g. one per MoE exchange or per test) on one coordinator.
  std::string group = "strata";
  // Whether this group's rank 0 serves the rendezvous store on the coordinator's port. False for
  // a sub-group of a larger group (a tensor-parallel group among data-parallel ones) whose rank
  // 0 is not the larger group's: the larger group's rank 0 serves the store for every group
  // (its communicator keeps it up), and all ranks of the sub-group connect to it as clients.
  bool rank0_serves_store = true;
  std::chrono::milliseconds connect_timeout{60000};
  // Limit for every collective (issue: default 60 s).
  std::chrono::milliseconds timeout{60000};
  // Address this rank's Gloo connections listen on; empty: the local interface that routes to
  // the coordinator's host ("127.0.0.1" when the coordinator is on loopback).
  std::string local_address;
};

}  // namespace strata::dist
