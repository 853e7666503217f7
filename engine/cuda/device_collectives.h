// The collectives of a tensor-parallel (or context-parallel) group over device memory, enqueued on
// the caller's stream (issue #44): a forward that uses them never waits for the host, so decode
// steps with tensor and decode context parallelism are captured in CUDA graphs and replayed like
// single-rank ones, and the collectives overlap the host's preparation of the next launches.
//
// Two implementations:
//   - NCCL on GPUs (dist/nccl_communicator.h, NcclDeviceCollectives): ncclAllReduce,
//     ncclAllGather and grouped ncclSend/ncclRecv on the compute stream, which CUDA graphs
//     capture as NCCL kernels;
//   - HostFunctionCollectives below: each collective a host function on the stream
//     (cudaLaunchHostFunc, a host node in a capture) that runs a host group's collective on the
//     buffers. Only where device memory is host memory: the CPU emulator, where every test run
//     exercises the stream-ordered, graph-captured path this way.
//
// Every rank enqueues the same collectives in the same order (the lead's plan decides the
// step). A collective that cannot complete (a peer exited or stopped answering) surfaces in
// Synchronize within the group's timeout; the group is unusable afterwards and the executor
// ends the process so the orchestrator restarts the group (dist/README.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "engine/tensor_parallel.h"

namespace strata::engine::cuda {

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: data = Σ over the ranks, f32.
  virtual absl::Status AllReduceSum(float* data, int64_t count, cudaStream_t stream) = 0;
  // recv[r · bytes, (r + 1) · bytes) = rank r's `send`; bytes a multiple of 4.
  virtual absl::Status AllGather(const void* send, int64_t bytes, void* recv,
                                 cudaStream_t stream) = 0;
  // recv[r · bytes, (r + 1) · bytes) = rank r's send[rank · bytes, (rank + 1) · bytes); bytes
  // a multiple of 4.
  virtual absl::Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank,
                                cudaStream_t stream) = 0;
  // Waits until everything enqueued on `stream` so far (the collectives included) has run, at
  // most the group's collective timeout; the error names the collective that did not complete.
  virtual absl::Status Synchronize(cudaStream_t stream) = 0;
};

// Over a host group whose collectives read and write the buffers themselves (engine/
// tensor_parallel.h; its failures end the process, as they do for the CPU executor). `group`
// must outlive this object and no other thread may call it while this object's stream has
// collectives queued (they run on the thread that synchronizes the stream).
class HostFunctionCollectives final : public DeviceCollectives {
 public:
  explicit HostFunctionCollectives(TensorParallelGroup* group) : group_(group) {}

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  absl::Status AllReduceSum(float* data, int64_t count, cudaStream_t stream) override;
  absl::Status AllGather(const void* send, int64_t bytes, void* recv, cudaStream_t stream) override;
  absl::Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank,
                        cudaStream_t stream) override;
  absl::Status Synchronize(cudaStream_t stream) override;

  // Operation records in use: those of captured graphs (kept for their replays) and those
  // queued but not yet run. Eager records are reused once they ran (tests).
  int64_t records() const;

 private:
  enum class Kind { kAllReduce, kAllGather, kAllToAll };
  // What one host function runs; its address is the function's user data, so it stays put
  // (a deque) while queued, and for as long as a graph that captured it may replay it.
  struct Op {
    HostFunctionCollectives* self = nullptr;
    Kind kind = Kind::kAllReduce;
    const void* send = nullptr;
    void* recv = nullptr;
    int64_t floats = 0;  // per rank: the element count of the group's float collectives
    bool captured = false;
  };
  static void Run(void* op);
  absl::Status Enqueue(const Op& op, cudaStream_t stream);

  TensorParallelGroup* group_;
  mutable std::mutex mu_;
  std::deque<Op> ops_;     // guarded by mu_
  std::vector<Op*> free_;  // eager records that ran; guarded by mu_
};

}  // namespace strata::engine::cuda
