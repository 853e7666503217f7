// A conformance suite for dist::Communicator backends (the Gloo and shared-memory tests run it):
// each rank checks every collective against results it computes itself from the known inputs of
// all ranks. The checks return "" when fine, else a failure description for the rank's report.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "dist/communicator.h"

namespace strata::dist::testing {

// Failure description for a rank's report ("" when fine).
std::string Describe(const absl::Status& status, const char* what);

// All-to-all-v with uneven parts (zero for some pairs, self pairs included) scaled by `scale`.
std::string CheckAllToAllV(Communicator& comm, int64_t scale);
std::string CheckAllToAll(Communicator& comm, int64_t bytes);
std::string CheckAllReduceInt(Communicator& comm, int64_t count, ReduceOp op);
// Float results must equal the sum folded in rank order 0..n-1 exactly and be bitwise identical
// on every rank (checked with an all-gather).
std::string CheckAllReduceFloat(Communicator& comm, int64_t count, ReduceOp op);
std::string CheckAllGather(Communicator& comm, int64_t bytes);
std::string CheckBroadcast(Communicator& comm, int root, int64_t bytes);
// Many short collectives back to back (a backend reusing a buffer too early corrupts them).
std::string CheckBackToBack(Communicator& comm);

// Every check above with sizes from empty to several KiB (several rounds through a 4 KiB
// shared-memory buffer), every broadcast root, a barrier, then the back-to-back run.
std::string CheckEveryCollective(Communicator& comm);

}  // namespace strata::dist::testing
