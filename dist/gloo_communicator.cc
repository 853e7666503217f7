#include "dist/gloo_communicator.h"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "core/status.h"
#include "dist/collective_kind.h"
#include "dist/rendezvous.h"
#include "gloo/context.h"
#include "gloo/transport/address.h"
#include "gloo/transport/context.h"
#include "gloo/transport/device.h"
#include "gloo/transport/pair.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"

namespace strata::dist {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using UnboundBuffer = gloo::transport::UnboundBuffer;

// All-reduces of at most this many bytes all-gather the inputs (one phase, n-1 copies per
// rank); larger ones reduce-scatter + all-gather (two phases, 2·(n-1)/n of the data).
constexpr size_t kSmallAllReduceBytes = 64 << 10;
constexpr uint32_t kHeaderMagic = 0x53544443;  // "STDC"

using collective::Describe;
using collective::Kind;
using collective::KindName;
using collective::kTypeFloat;
using collective::kTypeInt64;
using collective::ReduceArg;

// First message of every peer-to-peer transfer; lets the receiver check that both ranks are in
// the same collective and agree on the payload size before any payload moves.
struct WireHeader {
  uint32_t magic = 0;
  uint16_t kind = 0;
  uint16_t phase = 0;
  uint32_t arg = 0;
  uint32_t reserved = 0;
  uint64_t seq = 0;
  uint64_t bytes = 0;   // payload bytes the sender sends to the receiver in this phase
  uint64_t expect = 0;  // payload bytes the sender expects from the receiver in this phase
};
static_assert(sizeof(WireHeader) == 40);

// What this rank exchanges with one peer in one phase (self: a local copy send → recv).
struct Part {
  const void* send = nullptr;
  size_t send_bytes = 0;
  void* recv = nullptr;
  size_t recv_bytes = 0;
};

// Gloo prefixes messages with "[file:line] "; keep the part after it.
absl::string_view GlooDetail(absl::string_view what) {
  if (!what.empty() && what.front() == '[') {
    const size_t end = what.find("] ");
    if (end != absl::string_view::npos) what.remove_prefix(end + 2);
  }
  return what;
}

// What went wrong with one peer during a collective.
struct PeerFault {
  // kUnfinished: not complete when this rank stopped waiting early (after another fault).
  enum Type { kNone, kUnfinished, kTimeout, kClosed, kMismatch } type = kNone;
  std::string detail;
};

// gloo::Context whose full mesh is connected through our Rendezvous (Gloo's own
// connectFullMesh needs a gloo::rendezvous::Store, whose interface can only fail by throwing).
class MeshContext : public gloo::Context {
 public:
  MeshContext(int rank, int size) : gloo::Context(rank, size) {}

  absl::Status Connect(Rendezvous& rendezvous, const std::string& local_address,
                       milliseconds connect_timeout);
  // Destroys the pairs: an orderly close (peers read what was sent, then end-of-stream). No
  // transfer may be posted afterwards.
  void Close() { transportContext_.reset(); }
};

absl::Status MeshContext::Connect(Rendezvous& rendezvous, const std::string& local_address,
                                  milliseconds connect_timeout) {
  std::shared_ptr<gloo::transport::Context> transport;
  std::string blob;  // for each peer p != rank: u32 length | pair address bytes
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = local_address;
    attr.ai_family = AF_INET;
    device_ = gloo::transport::tcp::CreateDevice(attr);
    transport = device_->createContext(rank, size);
    transport->setTimeout(connect_timeout);
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      const std::vector<char> address = transport->createPair(p)->address().bytes();
      const uint32_t length = static_cast<uint32_t>(address.size());
      blob.append(reinterpret_cast<const char*>(&length), sizeof(length));
      blob.append(address.data(), address.size());
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rank ", rank, ": cannot listen on ", local_address,
                                               ": ", GlooDetail(e.what())));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> blobs,
                   rendezvous.AllGather("gloo/pairs", blob, connect_timeout));
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    // Rank p's blob lists its pairs for q = 0..size-1, q != p; find the one for us.
    absl::string_view rest = blobs[p];
    std::vector<char> address;
    for (int q = 0; q < size; ++q) {
      if (q == p) continue;
      uint32_t length = 0;
      CHECK_GE(rest.size(), sizeof(length)) << "malformed pair list from rank " << p;
      std::memcpy(&length, rest.data(), sizeof(length));
      rest.remove_prefix(sizeof(length));
      CHECK_GE(rest.size(), length) << "malformed pair list from rank " << p;
      if (q == rank) address.assign(rest.data(), rest.data() + length);
      rest.remove_prefix(length);
    }
    try {
      transport->getPair(p)->connect(address);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("rank ", rank, " could not connect to rank ", p,
                                                 " within ", FormatDuration(connect_timeout), ": ",
                                                 GlooDetail(e.what())));
    }
  }
  transportContext_ = std::move(transport);
  return absl::OkStatus();
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const RendezvousOptions& options, std::unique_ptr<Rendezvous> rendezvous,
                   std::shared_ptr<MeshContext> context)
      : options_(options), rendezvous_(std::move(rendezvous)), context_(std::move(context)) {}

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  std::string backend() const override { return "gloo"; }

  absl::Status AllToAllV(const void* send, const int64_t* send_bytes, void* recv,
                         const int64_t* recv_bytes) override;
  absl::Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank) override;
  absl::Status AllReduce(int64_t* data, int64_t count, ReduceOp op) override;
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override;
  absl::Status AllGather(const void* send, int64_t bytes, void* recv) override;
  absl::Status Broadcast(void* data, int64_t bytes, int root) override;
  absl::Status Barrier() override;

  // The first exchange after connecting (sequence number 0), bounded by connect_timeout.
  absl::Status ConnectCheck();

 private:
  struct Call {
    Kind kind = Kind::kBarrier;
    uint32_t arg = 0;
    uint64_t seq = 0;
    Clock::time_point deadline;
  };

  // Starts a collective: refuses after an earlier error, numbers the call, sets its deadline.
  absl::Status Begin(Kind kind, uint32_t arg, milliseconds timeout);
  // One full-mesh phase: parts[p] with every rank p (self: a local copy). On a fault, closes
  // every connection and returns the error.
  absl::Status Exchange(uint16_t phase, std::span<const Part> parts);
  // Posts and completes the peer transfers of one phase; records what failed per peer.
  void Transfer(uint16_t phase, std::span<const Part> parts, std::vector<PeerFault>& faults);
  // Waits for one posted transfer until the call's deadline, or, with `check_only`, just
  // checks whether it completed (the collective has already failed).
  PeerFault Wait(UnboundBuffer* buffer, bool is_recv, bool check_only);
  // Checks a received header against this rank's view of the call.
  void Validate(const WireHeader& header, const Part& part, int peer, uint16_t phase,
                PeerFault& fault) const;
  // Turns the faults into one Status, closes every connection and refuses later calls.
  absl::Status Fail(const std::vector<PeerFault>& faults);
  absl::Status Fail(absl::Status status);
  template <typename T>
  absl::Status AllReduceImpl(T* data, int64_t count, ReduceOp op, uint32_t type);

  RendezvousOptions options_;
  std::unique_ptr<Rendezvous> rendezvous_;  // keeps rank 0's store server up for the group
  std::shared_ptr<MeshContext> context_;    // null when world_size == 1
  Call call_;
  uint64_t next_seq_ = 1;
  absl::Status broken_;
  std::vector<char> scratch_;  // all-reduce contributions
  std::vector<Part> parts_;    // reused per phase
};

absl::Status GlooCommunicator::Begin(Kind kind, uint32_t arg, milliseconds timeout) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("gloo communicator (rank ", rank(), " of ", world_size(),
                     ") is unusable after an earlier error: ", broken_.message()));
  }
  call_.kind = kind;
  call_.arg = arg;
  call_.seq = kind == Kind::kConnectCheck ? 0 : next_seq_++;
  call_.deadline = Clock::now() + timeout;
  parts_.assign(world_size(), Part{});
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Exchange(uint16_t phase, std::span<const Part> parts) {
  const int self = rank();
  const Part& local = parts[self];
  if (local.send_bytes != local.recv_bytes) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat(Describe(call_.kind, call_.arg), " #", call_.seq, ": rank ", self, " sends ",
                     local.send_bytes, " bytes to itself but expects ", local.recv_bytes)));
  }
  if (local.send_bytes > 0 && local.send != local.recv) {
    std::memmove(local.recv, local.send, local.send_bytes);
  }
  if (world_size() == 1) return absl::OkStatus();
  std::vector<PeerFault> faults(world_size());
  Transfer(phase, parts, faults);  // its Gloo buffers are gone when it returns
  for (const PeerFault& fault : faults) {
    if (fault.type != PeerFault::kNone && fault.type != PeerFault::kUnfinished) {
      return Fail(faults);
    }
  }
  return absl::OkStatus();
}

void GlooCommunicator::Transfer(uint16_t phase, std::span<const Part> parts,
                                std::vector<PeerFault>& faults) {
  const int n = world_size();
  const int self = rank();
  const uint64_t header_slot = (call_.seq << 4) | (uint64_t{phase} << 1);
  const uint64_t payload_slot = header_slot | 1;
  // Declared before the buffers: Gloo may reference them until the buffers are destroyed.
  std::vector<WireHeader> out(n), in(n);
  std::vector<std::unique_ptr<UnboundBuffer>> header_recv(n), header_send(n), payload_recv(n),
      payload_send(n);
  bool any_fault = false;  // once set, later waits only check (the collective has failed)
  bool io_fault = false;   // a timeout or a lost connection (not just a disagreement)
  auto note = [&](int p, PeerFault fault) {
    if (fault.type == PeerFault::kNone || fault.type == PeerFault::kUnfinished) return;
    if (faults[p].type == PeerFault::kNone) faults[p] = std::move(fault);
    any_fault = true;
    io_fault = io_fault || faults[p].type != PeerFault::kMismatch;
  };
  auto post = [&](int p, std::unique_ptr<UnboundBuffer>& buffer, void* data, size_t bytes,
                  uint64_t slot, bool is_recv) {
    try {
      buffer = context_->createUnboundBuffer(data, bytes);
      is_recv ? buffer->recv(p, slot) : buffer->send(p, slot);
    } catch (const std::exception& e) {
      buffer.reset();
      note(p, {PeerFault::kClosed, std::string(GlooDetail(e.what()))});
    }
  };
  for (int p = 0; p < n; ++p) {
    if (p == self) continue;
    out[p] = {kHeaderMagic,
              static_cast<uint16_t>(call_.kind),
              phase,
              call_.arg,
              0,
              call_.seq,
              parts[p].send_bytes,
              parts[p].recv_bytes};
    post(p, header_recv[p], &in[p], sizeof(WireHeader), header_slot, true);
    post(p, header_send[p], &out[p], sizeof(WireHeader), header_slot, false);
    if (parts[p].send_bytes > 0) {
      post(p, payload_send[p], const_cast<void*>(parts[p].send), parts[p].send_bytes, payload_slot,
           false);
    }
  }
  // Headers in rank order; a peer's payload is accepted only after its header checked out.
  for (int p = 0; p < n; ++p) {
    if (header_recv[p] == nullptr || faults[p].type != PeerFault::kNone) continue;
    const PeerFault fault = Wait(header_recv[p].get(), true, any_fault);
    note(p, fault);
    if (fault.type != PeerFault::kNone) continue;
    PeerFault mismatch;
    Validate(in[p], parts[p], p, phase, mismatch);
    note(p, mismatch);
    if (mismatch.type == PeerFault::kNone && parts[p].recv_bytes > 0) {
      post(p, payload_recv[p], parts[p].recv, parts[p].recv_bytes, payload_slot, true);
    }
  }
  for (int p = 0; p < n; ++p) {
    if (payload_recv[p] != nullptr && faults[p].type == PeerFault::kNone) {
      note(p, Wait(payload_recv[p].get(), true, any_fault));
    }
  }
  for (int p = 0; p < n; ++p) {
    // When ranks merely disagree, let this rank's header reach each peer before the
    // connections close, so that the peer can report the disagreement too.
    if (header_send[p] != nullptr && faults[p].type != PeerFault::kTimeout &&
        faults[p].type != PeerFault::kClosed) {
      note(p, Wait(header_send[p].get(), false, io_fault));
    }
    if (payload_send[p] != nullptr && faults[p].type == PeerFault::kNone) {
      note(p, Wait(payload_send[p].get(), false, any_fault));
    }
  }
}

PeerFault GlooCommunicator::Wait(UnboundBuffer* buffer, bool is_recv, bool check_only) {
  const auto left = std::chrono::duration_cast<milliseconds>(call_.deadline - Clock::now());
  const milliseconds timeout = check_only ? milliseconds(1) : std::max(left, milliseconds(1));
  try {
    if (is_recv) {
      buffer->waitRecv(nullptr, timeout);
    } else {
      buffer->waitSend(nullptr, timeout);
    }
    return {};
  } catch (const std::exception& e) {
    const absl::string_view what = e.what();
    // Gloo closes every pair of the context when one wait times out ("Application timeout
    // caused pair closure" on the others): past the deadline, all of them count as silent.
    if (absl::StrContains(what, "Timed out waiting") ||
        absl::StrContains(what, "Application timeout")) {
      if (Clock::now() >= call_.deadline) return {PeerFault::kTimeout, ""};
      return {PeerFault::kUnfinished, ""};  // only this rank's quick check gave up
    }
    return {PeerFault::kClosed, std::string(GlooDetail(what))};
  }
}

void GlooCommunicator::Validate(const WireHeader& header, const Part& part, int peer,
                                uint16_t phase, PeerFault& fault) const {
  const std::string mine = absl::StrCat(Describe(call_.kind, call_.arg), " #", call_.seq);
  if (header.magic != kHeaderMagic) {
    fault = {PeerFault::kMismatch, absl::StrCat("rank ", peer, " sent a malformed header")};
  } else if (header.kind != static_cast<uint16_t>(call_.kind) || header.arg != call_.arg ||
             header.seq != call_.seq || header.phase != phase) {
    fault = {PeerFault::kMismatch,
             absl::StrCat("rank ", peer, " is in ",
                          Describe(static_cast<Kind>(header.kind), header.arg), " #", header.seq,
                          " (ranks must call the same collectives in the same "
                          "order)")};
  } else if (header.bytes != part.recv_bytes) {
    fault = {PeerFault::kMismatch,
             absl::StrCat("rank ", peer, " sends ", header.bytes, " bytes but this rank expects ",
                          part.recv_bytes, " (send and receive counts disagree)")};
  } else if (header.expect != part.send_bytes) {
    fault = {PeerFault::kMismatch,
             absl::StrCat("rank ", peer, " expects ", header.expect, " bytes but this rank sends ",
                          part.send_bytes, " (send and receive counts disagree)")};
  }
}

absl::Status GlooCommunicator::Fail(const std::vector<PeerFault>& faults) {
  std::vector<int> silent;
  std::vector<std::string> messages;
  absl::StatusCode code = absl::StatusCode::kDeadlineExceeded;
  for (int p = 0; p < static_cast<int>(faults.size()); ++p) {
    const PeerFault& fault = faults[p];
    if (fault.type == PeerFault::kTimeout) silent.push_back(p);
    if (fault.type == PeerFault::kClosed) {
      messages.push_back(
          absl::StrCat("connection to rank ", p, " closed (peer exited?) [", fault.detail, "]"));
      if (code != absl::StatusCode::kFailedPrecondition) code = absl::StatusCode::kUnavailable;
    }
    if (fault.type == PeerFault::kMismatch) {
      messages.push_back(fault.detail);
      code = absl::StatusCode::kFailedPrecondition;
    }
  }
  if (!silent.empty()) {
    const milliseconds limit =
        call_.kind == Kind::kConnectCheck ? options_.connect_timeout : options_.timeout;
    messages.insert(
        messages.begin(),
        absl::StrCat(silent.size() == 1 ? "rank " : "ranks ", absl::StrJoin(silent, ", "),
                     " did not answer within ", FormatDuration(limit)));
  }
  return Fail(absl::Status(code, absl::StrCat(KindName(call_.kind), " #", call_.seq, ": ",
                                              absl::StrJoin(messages, "; "))));
}

absl::Status GlooCommunicator::Fail(absl::Status status) {
  broken_ = status;
  // Closing every connection makes peers still waiting in this collective fail now instead
  // of at their deadline.
  if (context_ != nullptr) context_->Close();
  return status;
}

absl::Status GlooCommunicator::ConnectCheck() {
  RETURN_IF_ERROR(Begin(Kind::kConnectCheck, 0, options_.connect_timeout));
  return Exchange(0, parts_);
}

absl::Status GlooCommunicator::AllToAllV(const void* send, const int64_t* send_bytes, void* recv,
                                         const int64_t* recv_bytes) {
  RETURN_IF_ERROR(Begin(Kind::kAllToAllV, 0, options_.timeout));
  size_t send_offset = 0;
  size_t recv_offset = 0;
  for (int p = 0; p < world_size(); ++p) {
    CHECK_GE(send_bytes[p], 0);
    CHECK_GE(recv_bytes[p], 0);
    parts_[p] = {static_cast<const char*>(send) + send_offset, static_cast<size_t>(send_bytes[p]),
                 static_cast<char*>(recv) + recv_offset, static_cast<size_t>(recv_bytes[p])};
    send_offset += send_bytes[p];
    recv_offset += recv_bytes[p];
  }
  return Exchange(0, parts_);
}

absl::Status GlooCommunicator::AllToAll(const void* send, void* recv, int64_t bytes_per_rank) {
  CHECK_GE(bytes_per_rank, 0);
  RETURN_IF_ERROR(Begin(Kind::kAllToAll, 0, options_.timeout));
  const size_t bytes = static_cast<size_t>(bytes_per_rank);
  for (int p = 0; p < world_size(); ++p) {
    parts_[p] = {static_cast<const char*>(send) + p * bytes, bytes,
                 static_cast<char*>(recv) + p * bytes, bytes};
  }
  return Exchange(0, parts_);
}

absl::Status GlooCommunicator::AllGather(const void* send, int64_t bytes, void* recv) {
  CHECK_GE(bytes, 0);
  RETURN_IF_ERROR(Begin(Kind::kAllGather, 0, options_.timeout));
  const size_t size = static_cast<size_t>(bytes);
  for (int p = 0; p < world_size(); ++p) {
    parts_[p] = {send, size, static_cast<char*>(recv) + p * size, size};
  }
  return Exchange(0, parts_);
}

absl::Status GlooCommunicator::Broadcast(void* data, int64_t bytes, int root) {
  CHECK_GE(bytes, 0);
  CHECK(root >= 0 && root < world_size()) << "broadcast root " << root;
  RETURN_IF_ERROR(Begin(Kind::kBroadcast, static_cast<uint32_t>(root), options_.timeout));
  const size_t size = static_cast<size_t>(bytes);
  // Non-root pairs exchange empty messages: every rank still hears from every other rank.
  parts_[rank()] = {data, size, data, size};
  for (int p = 0; p < world_size(); ++p) {
    if (p == rank()) continue;
    if (rank() == root) parts_[p] = {data, size, nullptr, 0};
    if (p == root) parts_[p] = {nullptr, 0, data, size};
  }
  return Exchange(0, parts_);
}

absl::Status GlooCommunicator::Barrier() {
  RETURN_IF_ERROR(Begin(Kind::kBarrier, 0, options_.timeout));
  return Exchange(0, parts_);
}

absl::Status GlooCommunicator::AllReduce(int64_t* data, int64_t count, ReduceOp op) {
  return AllReduceImpl(data, count, op, kTypeInt64);
}

absl::Status GlooCommunicator::AllReduce(float* data, int64_t count, ReduceOp op) {
  return AllReduceImpl(data, count, op, kTypeFloat);
}

// out[i] = rows[0][i] op rows[1][i] op ... op rows[n-1][i], folded in rank order so that every rank
// (and every chunking) produces bitwise the same result. rows: [n, count].
template <typename T>
void ReduceRows(const T* rows, int n, size_t count, ReduceOp op, T* out) {
  for (size_t i = 0; i < count; ++i) {
    T acc = rows[i];
    for (int r = 1; r < n; ++r) {
      const T v = rows[r * count + i];
      if (op == ReduceOp::kMax) {
        acc = v > acc ? v : acc;
      } else if constexpr (std::is_integral_v<T>) {
        // Two's-complement wrap instead of signed-overflow UB.
        acc = static_cast<T>(static_cast<std::make_unsigned_t<T>>(acc) +
                             static_cast<std::make_unsigned_t<T>>(v));
      } else {
        acc = acc + v;
      }
    }
    out[i] = acc;
  }
}

template <typename T>
absl::Status GlooCommunicator::AllReduceImpl(T* data, int64_t count, ReduceOp op, uint32_t type) {
  CHECK_GE(count, 0);
  RETURN_IF_ERROR(Begin(Kind::kAllReduce, ReduceArg(op, type), options_.timeout));
  const int n = world_size();
  const size_t elements = static_cast<size_t>(count);
  if (n == 1) return absl::OkStatus();
  if (elements * sizeof(T) <= kSmallAllReduceBytes || elements < static_cast<size_t>(n)) {
    // One phase: every rank gathers every contribution, then reduces all of them.
    scratch_.resize(n * elements * sizeof(T));
    T* rows = reinterpret_cast<T*>(scratch_.data());
    for (int p = 0; p < n; ++p) {
      parts_[p] = {data, elements * sizeof(T), rows + p * elements, elements * sizeof(T)};
    }
    RETURN_IF_ERROR(Exchange(0, parts_));
    ReduceRows(rows, n, elements, op, data);
    return absl::OkStatus();
  }
  // Rank c owns elements [begin(c), begin(c+1)): reduce-scatter the chunks, then all-gather.
  auto begin = [&](int c) { return elements * c / n; };
  const size_t mine = begin(rank() + 1) - begin(rank());
  scratch_.resize(n * mine * sizeof(T));
  T* rows = reinterpret_cast<T*>(scratch_.data());
  for (int p = 0; p < n; ++p) {
    const size_t chunk = begin(p + 1) - begin(p);
    parts_[p] = {data + begin(p), chunk * sizeof(T), rows + p * mine, mine * sizeof(T)};
  }
  RETURN_IF_ERROR(Exchange(0, parts_));
  ReduceRows(rows, n, mine, op, data + begin(rank()));
  for (int p = 0; p < n; ++p) {
    const size_t chunk = begin(p + 1) - begin(p);
    parts_[p] = {data + begin(rank()), mine * sizeof(T), data + begin(p), chunk * sizeof(T)};
  }
  return Exchange(1, parts_);
}

void IgnoreSigpipeIfDefault() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    std::signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> ConnectGloo(const RendezvousOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside world_size ", options.world_size));
  }
  if (options.timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    return absl::InvalidArgumentError("timeout and connect_timeout must be positive");
  }
  if (options.world_size == 1) {
    return std::unique_ptr<Communicator>(new GlooCommunicator(options, nullptr, nullptr));
  }
  IgnoreSigpipeIfDefault();
  ASSIGN_OR_RETURN(std::unique_ptr<Rendezvous> rendezvous, Rendezvous::Connect(options));
  std::string local_address = options.local_address;
  if (local_address.empty()) {
    ASSIGN_OR_RETURN(HostPort coordinator, ParseHostPort(options.coordinator));
    ASSIGN_OR_RETURN(local_address, LocalAddressToward(coordinator.host));
  }
  auto context = std::make_shared<MeshContext>(options.rank, options.world_size);
  RETURN_IF_ERROR(context->Connect(*rendezvous, local_address, options.connect_timeout));
  context->setTimeout(options.timeout);
  rendezvous->Disconnect();  // rank 0's server stays up while the communicator lives
  auto communicator = std::make_unique<GlooCommunicator>(options, std::move(rendezvous), context);
  RETURN_IF_ERROR(communicator->ConnectCheck());
  return std::unique_ptr<Communicator>(std::move(communicator));
}

}  // namespace strata::dist
