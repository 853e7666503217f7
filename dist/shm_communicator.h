// Shared-memory backend of Communicator: ranks on ONE host (engine threads of one process and/or
// separate processes) exchange data through one POSIX shared-memory segment instead of TCP.
//
// Bootstrap: rendezvous through options.coordinator (dist/rendezvous.h). Rank 0 creates the
// segment (shm_open O_EXCL, mode 0600, name "/strata-shm-<group>-<64 random bits>"), publishes
// its name under "shm/name"; the others open and map it. After a rendezvous barrier proves that
// every rank has mapped it, the name is unlinked: from then on nothing is left in /dev/shm even
// after a crash (the memory lives while a mapping does); only a crash inside
// ConnectSharedMemory, before that barrier, can leave a name. world_size 1 creates no segment.
//
// Segment layout (every part starts on a 64-byte cache line):
//
//   +---------------------+  header: magic, sizes, the shared abort record (first failure:
//   | Header              |          rank, code, message) that makes waiting peers fail fast
//   +---------------------+
//   | Slot[0..W)          |  per rank: arrival counter (its own cache line), pid, "closed"
//   |                     |  flag, two collective descriptors (kind, arg, seq, sizes)
//   +---------------------+
//   | Area[0..W)          |  per rank: buffer_bytes_per_rank, split into two halves; step s
//   |  [half 0 | half 1]  |  writes half s % 2
//   +---------------------+
//
// Every collective is a sequence of steps numbered globally (the same on all ranks). In a step a
// rank writes its own area's half (step % 2), publishes its arrival counter = step (release),
// waits until every rank's counter reaches step (acquire), then reads the peers' halves. One
// barrier per step suffices: a half is written again two steps later, after every rank has
// arrived at the step in between, i.e. after everyone finished reading it. Messages larger than
// a half go in rounds (one step each). All-reduce: each round writes the input chunk (step 1),
// rank r reduces the r-th 1/W slice of the chunk over ranks 0..W-1 in rank order into its
// other half (step 2), and every rank copies all slices out; results are bitwise identical on
// all ranks and equal to the Gloo backend's.
//
// The first step of every collective also publishes a descriptor (kind, root/op/type, sequence
// number, sizes; all-to-all-v: all counts); after it every rank checks every descriptor, so
// ranks that call different collectives or disagree on sizes all get INVALID_ARGUMENT naming the
// disagreement, and no garbage is exchanged.
//
// Failures follow dist/communicator.h: a rank that does not arrive within options.timeout is
// named ("all-reduce (shm collective #12): rank 1 did not answer within 5 s",
// DEADLINE_EXCEEDED); a rank whose process exited or that closed its communicator is named at
// once (UNAVAILABLE). The first rank to fail records its error in the segment's abort record;
// peers waiting in any collective return it instead of waiting out their timeout. After an
// error the communicator refuses every further call. Invalid arguments (negative counts, null
// buffers with nonzero sizes, a root out of range) are INVALID_ARGUMENT and also fail the group.
//
// Waiting spins briefly (pause instruction, ~30 µs), then yields (to ~200 µs), then sleeps in a
// futex wait on a shared word that every arrival bumps, waking at least every 10 ms to check
// the deadline, the abort record and peers' liveness (a process that exited is noticed within
// about 10 ms; a closed communicator at once).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "dist/communicator.h"

namespace strata::dist {

// The most ranks one segment serves.
inline constexpr int kMaxSharedMemoryRanks = 64;

// Rendezvous through options.coordinator, then creates (rank 0) or maps (others) the segment
// within options.connect_timeout. Collectives use options.timeout. Every rank must pass the same
// buffer_bytes_per_rank (at least 4 KiB and 128 · world_size, at most 1 GiB).
absl::StatusOr<std::unique_ptr<Communicator>> ConnectSharedMemory(
    const RendezvousOptions& options, int64_t buffer_bytes_per_rank = 8 << 20);

}  // namespace strata::dist
