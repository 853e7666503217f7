// NCCL backend of Communicator: GPU ranks (one device per rank), intra- and inter-node.
//
// Buffers passed to the collectives are device pointers on the communicator's device. Every
// call is synchronous for the caller: it enqueues the NCCL operation on the communicator's own
// stream and returns once the stream has finished it (so it orders against other streams only
// through that wait). All-to-all-v is a group of ncclSend/ncclRecv (zero-byte parts are
// skipped); barrier is a one-element all-reduce.
//
// Failure contract (dist/README.md): the communicator is non-blocking (ncclConfig_t::blocking
// = 0); each call polls ncclCommGetAsyncError and the stream until options.timeout, then
// aborts the communicator (ncclCommAbort) and returns an error naming the collective and its
// sequence number, e.g. "all-reduce #12: did not complete within 60 s". NCCL cannot say which
// peer is missing, so, unlike Gloo, the message names no rank. After an error the communicator
// refuses every further call.
//
// Bootstrap: rank 0 creates the ncclUniqueId and publishes it through the rendezvous store
// (dist/rendezvous.h) under "<group>/nccl/id"; the others fetch it within connect_timeout.
//
// Only built where CUDA is found (STRATA_HAVE_CUDA, cmake/StrataCuda.cmake).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "dist/communicator.h"
#include "engine/cuda/device_collectives.h"

namespace strata::dist {

// `device`: the CUDA device index this rank uses (cudaSetDevice is called on every call).
absl::StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const RendezvousOptions& options,
                                                          int device);

// The collectives of a communicator ConnectNccl made, enqueued on the caller's stream (the
// tensor-parallel model's all-reduces and gathers: CUDA graphs capture them as NCCL kernels).
// Enqueue errors and Synchronize past options.timeout break the communicator as its own calls
// do (ncclCommAbort, every later call refused). `comm` must outlive the result, and the caller
// must not mix these with `comm`'s own synchronous calls while collectives are queued.
std::unique_ptr<engine::cuda::DeviceCollectives> NcclDeviceCollectives(Communicator* comm);

}  // namespace strata::dist
