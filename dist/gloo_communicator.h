// Gloo backend of Communicator: CPU ranks over TCP (loopback or any interface).
//
// Every collective is built from full-mesh exchange phases on Gloo's TCP pairs: in each phase
// every rank sends exactly one message to and receives exactly one message from every other
// rank (a 40-byte header naming the collective, its sequence number and the payload sizes,
// then the payload when it is not empty). Consequences:
//  - a rank that never calls a collective is named by every other rank ("all-reduce #12: rank
//    2 did not answer within 5 s"); a rank that exited is named as soon as its connection
//    closes ("all-to-all-v #3: connection to rank 1 closed (peer exited?)");
//  - ranks that call different collectives, or disagree on counts, get an error saying so
//    instead of exchanging garbage;
//  - every rank computes all-reduce results in rank order (deterministic, bitwise identical on
//    all ranks). Small all-reduces all-gather the inputs (one phase); large ones reduce-scatter
//    then all-gather (two phases, 2·(n-1)/n of the data per rank, like a ring).
// After an error the communicator closes its connections (so the peers fail fast too) and
// refuses every further call. world_size 1 opens no socket at all.
//
// ConnectGloo sets SIGPIPE to "ignore" when it is at its default (writes to a peer that exited
// would otherwise kill the process).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "dist/communicator.h"

namespace strata::dist {

// Rendezvous through options.coordinator (dist/rendezvous.h), then connects a full mesh of
// TCP pairs within options.connect_timeout. Collectives use options.timeout.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const RendezvousOptions& options);

}  // namespace strata::dist
