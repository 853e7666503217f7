#include "dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/status.h"
#include "dist/rendezvous.h"

namespace strata::dist {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

absl::Status CudaError(cudaError_t error, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

ncclRedOp_t ToNccl(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

// Waits until a non-blocking communicator has no operation in progress (ncclInProgress) or
// `deadline` passes. Returns the communicator's state (ncclInProgress on timeout).
ncclResult_t WaitUntilIdle(ncclComm_t comm, Clock::time_point deadline) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rv = ncclCommGetAsyncError(comm, &state);
    if (rv != ncclSuccess) return rv;
    if (state != ncclInProgress || Clock::now() >= deadline) return state;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const RendezvousOptions& options, int device,
                   std::unique_ptr<Rendezvous> rendezvous, ncclComm_t comm, cudaStream_t stream,
                   float* barrier)
      : options_(options),
        device_(device),
        rendezvous_(std::move(rendezvous)),
        comm_(comm),
        stream_(stream),
        barrier_(barrier) {}
  ~NcclCommunicator() override;

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  std::string backend() const override { return "nccl"; }

  absl::Status AllToAllV(const void* send, const int64_t* send_bytes, void* recv,
                         const int64_t* recv_bytes) override;
  absl::Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank) override;
  absl::Status AllReduce(int64_t* data, int64_t count, ReduceOp op) override;
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override;
  absl::Status AllGather(const void* send, int64_t bytes, void* recv) override;
  absl::Status Broadcast(void* data, int64_t bytes, int root) override;
  absl::Status Barrier() override;

  // Stream-ordered collectives (NcclDeviceCollectives): the operation enqueued on `stream`;
  // completion is Synchronize's to wait for.
  absl::Status EnqueueAllReduce(float* data, int64_t count, cudaStream_t stream);
  absl::Status EnqueueAllGather(const void* send, int64_t bytes, void* recv, cudaStream_t stream);
  absl::Status EnqueueAllToAll(const void* send, void* recv, int64_t bytes_per_rank,
                               cudaStream_t stream);
  // Waits for `stream` (the collectives enqueued on it included) until the timeout, watching
  // the communicator's asynchronous errors; on failure aborts the communicator.
  absl::Status Synchronize(cudaStream_t stream);

 private:
  // Refuses after an earlier error; numbers the call and selects the device.
  absl::Status Begin(const char* name);
  // Completes the call whose enqueue returned `enqueued`: waits for NCCL and the stream until
  // the deadline; on failure aborts the communicator.
  absl::Status Finish(ncclResult_t enqueued);
  // An error when the enqueue failed; a non-blocking enqueue still in progress is waited for.
  absl::Status CheckEnqueued(ncclResult_t enqueued);
  // Waits until `stream` has run everything enqueued on it, or the deadline passes.
  absl::Status WaitForStream(cudaStream_t stream);
  absl::Status Fail(absl::StatusCode code, absl::string_view what);

  RendezvousOptions options_;
  int device_;
  std::unique_ptr<Rendezvous> rendezvous_;  // keeps rank 0's store server up for the group
  ncclComm_t comm_;
  cudaStream_t stream_;
  float* barrier_;  // one device float for Barrier()
  const char* name_ = "";
  uint64_t seq_ = 0;
  Clock::time_point deadline_;
  absl::Status broken_;
};

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    // A healthy communicator is destroyed collectively; a failed one is only aborted.
    if (broken_.ok()) {
      ncclCommFinalize(comm_);
      WaitUntilIdle(comm_, Clock::now() + options_.timeout);
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  cudaFree(barrier_);
  cudaStreamDestroy(stream_);
}

absl::Status NcclCommunicator::Begin(const char* name) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("nccl communicator (rank ", rank(), " of ", world_size(),
                     ") is unusable after an earlier error: ", broken_.message()));
  }
  const cudaError_t error = cudaSetDevice(device_);
  if (error != cudaSuccess) return CudaError(error, "cudaSetDevice");
  name_ = name;
  ++seq_;
  deadline_ = Clock::now() + options_.timeout;
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Fail(absl::StatusCode code, absl::string_view what) {
  broken_ = absl::Status(code, absl::StrCat(name_, " #", seq_, ": ", what));
  ncclCommAbort(comm_);  // also unblocks kernels waiting for peers
  comm_ = nullptr;
  return broken_;
}

absl::Status NcclCommunicator::Finish(ncclResult_t enqueued) {
  RETURN_IF_ERROR(CheckEnqueued(enqueued));
  return WaitForStream(stream_);
}

absl::Status NcclCommunicator::CheckEnqueued(ncclResult_t enqueued) {
  if (enqueued == ncclInProgress) enqueued = WaitUntilIdle(comm_, deadline_);
  if (enqueued == ncclInProgress) {
    return Fail(absl::StatusCode::kDeadlineExceeded,
                absl::StrCat("was not enqueued within ", FormatDuration(options_.timeout),
                             "; communicator aborted"));
  }
  if (enqueued != ncclSuccess) {
    return Fail(absl::StatusCode::kInternal,
                absl::StrCat("NCCL error: ", ncclGetErrorString(enqueued), " (",
                             ncclGetLastError(comm_), ")"));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::WaitForStream(cudaStream_t stream) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail(absl::StatusCode::kUnavailable,
                  absl::StrCat("NCCL error: ", ncclGetErrorString(state), " (",
                               ncclGetLastError(comm_), ")"));
    }
    if (state == ncclSuccess) {
      const cudaError_t query = cudaStreamQuery(stream);
      if (query == cudaSuccess) return absl::OkStatus();
      if (query != cudaErrorNotReady) {
        return Fail(absl::StatusCode::kInternal,
                    absl::StrCat("CUDA error: ", cudaGetErrorString(query)));
      }
    }
    if (Clock::now() >= deadline_) {
      return Fail(absl::StatusCode::kDeadlineExceeded,
                  absl::StrCat("did not complete within ", FormatDuration(options_.timeout),
                               " (a peer rank is missing, hung or exited; NCCL does not say "
                               "which); communicator aborted"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(10));
  }
}

absl::Status NcclCommunicator::AllToAllV(const void* send, const int64_t* send_bytes, void* recv,
                                         const int64_t* recv_bytes) {
  RETURN_IF_ERROR(Begin("all-to-all-v"));
  ncclResult_t rv = ncclGroupStart();
  int64_t send_offset = 0;
  int64_t recv_offset = 0;
  for (int p = 0; p < world_size() && (rv == ncclSuccess || rv == ncclInProgress); ++p) {
    CHECK_GE(send_bytes[p], 0);
    CHECK_GE(recv_bytes[p], 0);
    if (send_bytes[p] > 0) {
      rv = ncclSend(static_cast<const char*>(send) + send_offset, send_bytes[p], ncclInt8, p, comm_,
                    stream_);
    }
    if (recv_bytes[p] > 0 && (rv == ncclSuccess || rv == ncclInProgress)) {
      rv = ncclRecv(static_cast<char*>(recv) + recv_offset, recv_bytes[p], ncclInt8, p, comm_,
                    stream_);
    }
    send_offset += send_bytes[p];
    recv_offset += recv_bytes[p];
  }
  const ncclResult_t ended = ncclGroupEnd();
  return Finish(rv == ncclSuccess || rv == ncclInProgress ? ended : rv);
}

absl::Status NcclCommunicator::AllToAll(const void* send, void* recv, int64_t bytes_per_rank) {
  CHECK_GE(bytes_per_rank, 0);
  std::vector<int64_t> bytes(world_size(), bytes_per_rank);
  return AllToAllV(send, bytes.data(), recv, bytes.data());
}

absl::Status NcclCommunicator::AllReduce(int64_t* data, int64_t count, ReduceOp op) {
  CHECK_GE(count, 0);
  RETURN_IF_ERROR(Begin("all-reduce"));
  return Finish(ncclAllReduce(data, data, count, ncclInt64, ToNccl(op), comm_, stream_));
}

absl::Status NcclCommunicator::AllReduce(float* data, int64_t count, ReduceOp op) {
  CHECK_GE(count, 0);
  RETURN_IF_ERROR(Begin("all-reduce"));
  return Finish(ncclAllReduce(data, data, count, ncclFloat32, ToNccl(op), comm_, stream_));
}

absl::Status NcclCommunicator::AllGather(const void* send, int64_t bytes, void* recv) {
  CHECK_GE(bytes, 0);
  RETURN_IF_ERROR(Begin("all-gather"));
  return Finish(ncclAllGather(send, recv, bytes, ncclInt8, comm_, stream_));
}

absl::Status NcclCommunicator::Broadcast(void* data, int64_t bytes, int root) {
  CHECK_GE(bytes, 0);
  CHECK(root >= 0 && root < world_size()) << "broadcast root " << root;
  RETURN_IF_ERROR(Begin("broadcast"));
  return Finish(ncclBroadcast(data, data, bytes, ncclInt8, root, comm_, stream_));
}

absl::Status NcclCommunicator::Barrier() {
  RETURN_IF_ERROR(Begin("barrier"));
  return Finish(ncclAllReduce(barrier_, barrier_, 1, ncclFloat32, ncclSum, comm_, stream_));
}

absl::Status NcclCommunicator::EnqueueAllReduce(float* data, int64_t count, cudaStream_t stream) {
  CHECK_GE(count, 0);
  RETURN_IF_ERROR(Begin("all-reduce (on the compute stream)"));
  return CheckEnqueued(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, stream));
}

absl::Status NcclCommunicator::EnqueueAllGather(const void* send, int64_t bytes, void* recv,
                                                cudaStream_t stream) {
  CHECK_GE(bytes, 0);
  RETURN_IF_ERROR(Begin("all-gather (on the compute stream)"));
  return CheckEnqueued(ncclAllGather(send, recv, bytes, ncclInt8, comm_, stream));
}

absl::Status NcclCommunicator::EnqueueAllToAll(const void* send, void* recv, int64_t bytes_per_rank,
                                               cudaStream_t stream) {
  CHECK_GE(bytes_per_rank, 0);
  RETURN_IF_ERROR(Begin("all-to-all (on the compute stream)"));
  ncclResult_t rv = ncclGroupStart();
  for (int p = 0; p < world_size() && (rv == ncclSuccess || rv == ncclInProgress); ++p) {
    rv = ncclSend(static_cast<const char*>(send) + p * bytes_per_rank, bytes_per_rank, ncclInt8, p,
                  comm_, stream);
    if (rv == ncclSuccess || rv == ncclInProgress) {
      rv = ncclRecv(static_cast<char*>(recv) + p * bytes_per_rank, bytes_per_rank, ncclInt8, p,
                    comm_, stream);
    }
  }
  const ncclResult_t ended = ncclGroupEnd();
  return CheckEnqueued(rv == ncclSuccess || rv == ncclInProgress ? ended : rv);
}

absl::Status NcclCommunicator::Synchronize(cudaStream_t stream) {
  RETURN_IF_ERROR(Begin("wait for the compute stream's collectives"));
  return WaitForStream(stream);
}

class NcclStreamCollectives final : public engine::cuda::DeviceCollectives {
 public:
  explicit NcclStreamCollectives(NcclCommunicator* comm) : comm_(comm) {}
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->world_size(); }
  absl::Status AllReduceSum(float* data, int64_t count, cudaStream_t stream) override {
    return comm_->EnqueueAllReduce(data, count, stream);
  }
  absl::Status AllGather(const void* send, int64_t bytes, void* recv,
                         cudaStream_t stream) override {
    return comm_->EnqueueAllGather(send, bytes, recv, stream);
  }
  absl::Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank,
                        cudaStream_t stream) override {
    return comm_->EnqueueAllToAll(send, recv, bytes_per_rank, stream);
  }
  absl::Status Synchronize(cudaStream_t stream) override { return comm_->Synchronize(stream); }

 private:
  NcclCommunicator* comm_;
};

// Rank 0 creates the id and publishes it; the others fetch it. world_size 1 needs no store.
absl::StatusOr<ncclUniqueId> ShareUniqueId(const RendezvousOptions& options,
                                           Rendezvous* rendezvous) {
  ncclUniqueId id;
  if (options.rank == 0) {
    const ncclResult_t rv = ncclGetUniqueId(&id);
    if (rv != ncclSuccess) {
      return absl::InternalError(absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(rv)));
    }
    if (rendezvous != nullptr) {
      RETURN_IF_ERROR(rendezvous->Set("nccl/id", absl::string_view(id.internal, sizeof(id))));
    }
    return id;
  }
  ASSIGN_OR_RETURN(std::string bytes, rendezvous->Get("nccl/id", options.connect_timeout));
  if (bytes.size() != sizeof(id)) return absl::InternalError("malformed ncclUniqueId");
  std::memcpy(id.internal, bytes.data(), sizeof(id));
  return id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const RendezvousOptions& options,
                                                          int device) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside world_size ", options.world_size));
  }
  cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return CudaError(error, absl::StrCat("cudaSetDevice(", device, ")"));
  std::unique_ptr<Rendezvous> rendezvous;
  if (options.world_size > 1) {
    ASSIGN_OR_RETURN(rendezvous, Rendezvous::Connect(options));
  }
  ASSIGN_OR_RETURN(ncclUniqueId id, ShareUniqueId(options, rendezvous.get()));

  const Clock::time_point deadline = Clock::now() + options.connect_timeout;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // lets every wait below be bounded, and ncclCommAbort unblock it
  ncclComm_t comm = nullptr;
  ncclResult_t rv = ncclCommInitRankConfig(&comm, options.world_size, id, options.rank, &config);
  if (rv == ncclSuccess || rv == ncclInProgress) rv = WaitUntilIdle(comm, deadline);
  if (rv != ncclSuccess) {
    const std::string detail =
        rv == ncclInProgress
            ? absl::StrCat("did not complete within ", FormatDuration(options.connect_timeout))
            : absl::StrCat(ncclGetErrorString(rv), " (", ncclGetLastError(comm), ")");
    if (comm != nullptr) ncclCommAbort(comm);
    return absl::UnavailableError(absl::StrCat("rank ", options.rank, ": NCCL init of group '",
                                               options.group, "' on device ", device, ": ",
                                               detail));
  }
  if (rendezvous != nullptr) rendezvous->Disconnect();  // rank 0's server stays up meanwhile

  cudaStream_t stream = nullptr;
  float* barrier = nullptr;
  error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (error == cudaSuccess) error = cudaMalloc(&barrier, sizeof(float));
  if (error == cudaSuccess) error = cudaMemset(barrier, 0, sizeof(float));
  if (error != cudaSuccess) {
    ncclCommAbort(comm);
    return CudaError(error, "NCCL communicator stream/scratch");
  }
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(options, device, std::move(rendezvous), comm, stream, barrier));
}

std::unique_ptr<engine::cuda::DeviceCollectives> NcclDeviceCollectives(Communicator* comm) {
  auto* nccl = dynamic_cast<NcclCommunicator*>(comm);
  CHECK(nccl != nullptr) << "NcclDeviceCollectives takes a communicator ConnectNccl made, not a "
                         << comm->backend() << " one";
  return std::make_unique<NcclStreamCollectives>(nccl);
}

}  // namespace strata::dist
