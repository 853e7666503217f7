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

namespace strata::dist {

// `device`: the CUDA device index this rank uses (cudaSetDevice is called on every call).
absl::StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const RendezvousOptions& options,
                                                          int device);

}  // namespace strata::dist
