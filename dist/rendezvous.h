// Rendezvous: how the ranks of a group find each other before any collective runs.
//
// Rank 0 serves a small key-value store over TCP on the coordinator's port (RendezvousOptions::
// coordinator, "host:port"); every rank, rank 0 included, connects to it as a client, retrying
// until `connect_timeout`. Backends publish what their peers need under keys (Gloo: each rank's
// pair addresses; NCCL: rank 0's ncclUniqueId) and wait for the keys of the others.
//
//   rank 0 process                          rank r process
//   +-----------------------------+          +------------+
//   | StoreServer 0.0.0.0:port    |<---------| Rendezvous |  Set / Get / AllGather / Barrier
//   | Rendezvous (via 127.0.0.1)  |          +------------+
//   +-----------------------------+
//
// Keys are namespaced by RendezvousOptions::group, so several groups (one per communicator)
// can share one coordinator as long as the same process is rank 0 of all of them: the server
// is shared per port within a process and lives while any Rendezvous of that process uses it.
// A sub-group whose rank 0 lives elsewhere (RendezvousOptions::rank0_serves_store false) only
// connects: the process serving the port must keep a Rendezvous open meanwhile.
// A group name is meant to be used once per server lifetime (the orchestrator restarts the
// whole group after a failure, which starts a fresh server).
//
// Errors name the address, the rank and the limit, e.g.
//   "rank 1 could not reach coordinator 127.0.0.1:29500 within 60 s (Connection refused)"
//   "rank 0: rendezvous 'strata' at 127.0.0.1:29500: ranks 2, 3 did not arrive at 'gloo/pairs'
//    within 60 s"
// IPv4 only (host names are resolved to IPv4 addresses).
//
// Thread-safety: one thread uses a given Rendezvous at a time.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dist/communicator.h"

namespace strata::dist {

struct HostPort {
  std::string host;
  int port = 0;
};

// Parses "host:port" (port 1..65535). The host may be a name or a dotted IPv4 address.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address);

// "60 s", "2.5 s", "250 ms": the spelling of limits in error messages.
std::string FormatDuration(std::chrono::milliseconds duration);

// The local IPv4 address this host uses to reach `host` (no packet is sent: a UDP socket is
// connected and its source address read). "127.0.0.1" when `host` is a loopback address.
absl::StatusOr<std::string> LocalAddressToward(const std::string& host);

class StoreServer;  // rendezvous.cc

// A coordinator for a group whose ranks all run in this process: the store listens on an
// ephemeral port of 127.0.0.1 (no fixed port another server on the host could hold), and
// stays up while `store` lives. Rank 0's Rendezvous::Connect to `address` joins it.
struct LocalCoordinator {
  std::string address;  // "127.0.0.1:<port>"
  std::shared_ptr<StoreServer> store;
};
absl::StatusOr<LocalCoordinator> StartLocalCoordinator();

class Rendezvous {
 public:
  // Rank 0 starts (or joins, when this process already serves the port) the store server;
  // then every rank connects to the coordinator within options.connect_timeout.
  static absl::StatusOr<std::unique_ptr<Rendezvous>> Connect(const RendezvousOptions& options);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  const RendezvousOptions& options() const { return options_; }

  // Sets `key` (within the group) to `value`; a later Set of the same key replaces it.
  absl::Status Set(absl::string_view key, absl::string_view value);
  // Waits until `key` exists (at most `timeout`) and returns its value.
  absl::StatusOr<std::string> Get(absl::string_view key, std::chrono::milliseconds timeout);
  // Every rank publishes `value` under "<name>/<rank>"; returns all ranks' values in rank
  // order once every rank has published. The error names the ranks that did not arrive.
  absl::StatusOr<std::vector<std::string>> AllGather(absl::string_view name,
                                                     absl::string_view value,
                                                     std::chrono::milliseconds timeout);
  // AllGather of an empty value: returns once every rank reached the barrier `name`. (Other
  // ranks may still be reading the barrier's keys when rank 0 returns: rank 0 must keep its
  // Rendezvous until a later exchange, e.g. over the backend's own connections, proves that
  // everyone is done with the store.)
  absl::Status Barrier(absl::string_view name, std::chrono::milliseconds timeout);

  // Closes this rank's connection to the coordinator. On rank 0 the server keeps running
  // while this object lives (late clients of other groups may still need it).
  void Disconnect();

 private:
  Rendezvous(const RendezvousOptions& options, std::shared_ptr<StoreServer> server, int fd);
  // "rank 0: rendezvous 'strata' at 127.0.0.1:29500: " + what.
  absl::Status Error(absl::StatusCode code, absl::string_view what) const;
  // One request/response round trip; `deadline` bounds the whole exchange.
  absl::StatusOr<std::string> Request(char op, absl::string_view key, absl::string_view value,
                                      std::chrono::milliseconds wait,
                                      std::chrono::steady_clock::time_point deadline);

  RendezvousOptions options_;
  std::shared_ptr<StoreServer> server_;  // rank 0 only
  int fd_ = -1;                          // connection to the coordinator, -1 once closed
};

}  // namespace strata::dist
