#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "core/status.h"

namespace strata::dist {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Wire format (integers big-endian):
//   request:  op u8 ('S' set, 'G' get) | key_bytes u32 | value_bytes u64 | wait_ms u32 | key |
//   value response: status u8 ('+' found/ok, '-' not set within wait_ms) | value_bytes u64 | value
constexpr char kOpSet = 'S';
constexpr char kOpGet = 'G';
constexpr size_t kRequestHeaderBytes = 1 + 4 + 8 + 4;
constexpr size_t kResponseHeaderBytes = 1 + 8;
constexpr uint32_t kMaxKeyBytes = 4096;
constexpr uint64_t kMaxValueBytes = 64ull << 20;

void PutU32(char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (24 - 8 * i));
}
void PutU64(char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (56 - 8 * i));
}
uint32_t GetU32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}
uint64_t GetU64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

milliseconds Remaining(Clock::time_point deadline) {
  return std::max(milliseconds(0),
                  std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

// Waits until `fd` is ready for `events` or the deadline passes. Returns false on timeout.
bool PollUntil(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int wait_ms = static_cast<int>(std::min<int64_t>(Remaining(deadline).count(), 1 << 30));
    const int rv = ::poll(&p, 1, wait_ms);
    if (rv > 0) return true;
    if (rv == 0) return false;
    if (errno != EINTR) return true;  // let the following read/write report the error
  }
}

// Non-blocking-socket I/O bounded by a deadline. Errors are plain descriptions.
absl::Status SendAll(int fd, const char* data, size_t bytes, Clock::time_point deadline) {
  while (bytes > 0) {
    const ssize_t n = ::send(fd, data, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      data += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!PollUntil(fd, POLLOUT, deadline)) return absl::DeadlineExceededError("send timed out");
      continue;
    }
    return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, char* data, size_t bytes, Clock::time_point deadline) {
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, data, bytes, 0);
    if (n > 0) {
      data += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return absl::UnavailableError("coordinator closed the connection (rank 0 exited?)");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!PollUntil(fd, POLLIN, deadline)) {
        return absl::DeadlineExceededError("no answer from the coordinator in time");
      }
      continue;
    }
    return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Repeats `io(data, bytes)` (a recv or send) until every byte moved; false on EOF, error or
// shutdown. EINTR is retried.
template <typename Ptr, typename Io>
bool TransferFully(Ptr data, size_t bytes, Io io) {
  while (bytes > 0) {
    const ssize_t n = io(data, bytes);
    if (n > 0) {
      data += n;
      bytes -= static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return false;
    }
  }
  return true;
}

// Blocking read for the server side; false on EOF, error or shutdown.
bool ReadFully(int fd, char* data, size_t bytes) {
  return TransferFully(data, bytes, [fd](char* p, size_t n) { return ::recv(fd, p, n, 0); });
}

bool WriteFully(int fd, const char* data, size_t bytes) {
  return TransferFully(data, bytes,
                       [fd](const char* p, size_t n) { return ::send(fd, p, n, MSG_NOSIGNAL); });
}

// Resolves `host` to an IPv4 socket address with `port`.
absl::StatusOr<sockaddr_in> Resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rv = ::getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rv != 0 || result == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rv)));
  }
  sockaddr_in addr{};
  std::memcpy(&addr, result->ai_addr, sizeof(addr));
  ::freeaddrinfo(result);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

// One non-blocking connect attempt bounded by `deadline`; returns the connected fd.
absl::StatusOr<int> ConnectOnce(const sockaddr_in& addr, Clock::time_point deadline) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  int rv = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  if (rv != 0 && errno == EINPROGRESS) {
    if (!PollUntil(fd, POLLOUT, deadline)) {
      ::close(fd);
      return absl::DeadlineExceededError("connect timed out");
    }
    int error = 0;
    socklen_t len = sizeof(error);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
    rv = error == 0 ? 0 : -1;
    errno = error;
  }
  if (rv != 0) {
    const std::string what = std::strerror(errno);
    ::close(fd);
    return absl::UnavailableError(what);
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

// The coordinator's key-value store: one accept thread, one thread per client connection
// (a group has at most a few hundred ranks, each connected only during rendezvous).
class StoreServer {
 public:
  // Binds 0.0.0.0:port, or joins this process's running server for that port. Port 0 binds an
  // ephemeral port on 127.0.0.1 (a new server; `port` returns it), which later Acquires of that
  // port join.
  static absl::StatusOr<std::shared_ptr<StoreServer>> Acquire(int port, int* bound_port = nullptr);
  ~StoreServer();

 private:
  explicit StoreServer(int listen_fd) : listen_fd_(listen_fd) {}
  void AcceptLoop();
  void Serve(int fd);
  // Handles one request; false when the connection should close.
  bool HandleRequest(int fd);

  const int listen_fd_;
  int wake_pipe_[2] = {-1, -1};
  std::thread accept_thread_;

  std::mutex mu_;
  std::condition_variable changed_;
  bool stopping_ = false;
  std::map<std::string, std::string, std::less<>> values_;
  std::vector<int> connections_;
  std::vector<std::thread> connection_threads_;
};

absl::StatusOr<std::shared_ptr<StoreServer>> StoreServer::Acquire(int port, int* bound_port) {
  static std::mutex registry_mu;
  static std::map<int, std::weak_ptr<StoreServer>> registry;
  std::lock_guard<std::mutex> lock(registry_mu);
  if (port != 0) {
    if (auto running = registry[port].lock()) return running;
  }

  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(port == 0 ? INADDR_LOOPBACK : INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 512) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string what = std::strerror(errno);
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("rank 0 could not listen on coordinator port ", port, ": ", what));
  }
  port = ntohs(addr.sin_port);
  if (bound_port != nullptr) *bound_port = port;
  std::shared_ptr<StoreServer> server(new StoreServer(fd));
  CHECK_EQ(::pipe2(server->wake_pipe_, O_CLOEXEC), 0);
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  registry[port] = server;
  return server;
}

absl::StatusOr<LocalCoordinator> StartLocalCoordinator() {
  int port = 0;
  ASSIGN_OR_RETURN(std::shared_ptr<StoreServer> server, StoreServer::Acquire(0, &port));
  return LocalCoordinator{absl::StrCat("127.0.0.1:", port), std::move(server)};
}

StoreServer::~StoreServer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (int fd : connections_) ::shutdown(fd, SHUT_RDWR);
  }
  changed_.notify_all();
  const char byte = 0;
  (void)!::write(wake_pipe_[1], &byte, 1);
  accept_thread_.join();
  // The accept thread has exited, so connection_threads_ no longer grows.
  for (std::thread& t : connection_threads_) t.join();
  for (int fd : connections_) ::close(fd);
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

void StoreServer::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      ::close(fd);
      return;
    }
    connections_.push_back(fd);
    connection_threads_.emplace_back([this, fd] { Serve(fd); });
  }
}

void StoreServer::Serve(int fd) {
  while (HandleRequest(fd)) {
  }
  ::shutdown(fd, SHUT_RDWR);  // the fd itself is closed by the destructor
}

bool StoreServer::HandleRequest(int fd) {
  char header[kRequestHeaderBytes];
  if (!ReadFully(fd, header, sizeof(header))) return false;
  const char op = header[0];
  const uint32_t key_bytes = GetU32(header + 1);
  const uint64_t value_bytes = GetU64(header + 5);
  const milliseconds wait(GetU32(header + 13));
  if ((op != kOpSet && op != kOpGet) || key_bytes > kMaxKeyBytes || value_bytes > kMaxValueBytes) {
    return false;  // not our protocol
  }
  std::string key(key_bytes, '\0');
  std::string value(value_bytes, '\0');
  if (!ReadFully(fd, key.data(), key.size()) || !ReadFully(fd, value.data(), value.size())) {
    return false;
  }
  bool found = true;
  std::string reply_value;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (op == kOpSet) {
      values_[key] = std::move(value);
      changed_.notify_all();
    } else {
      found = changed_.wait_for(lock, wait, [&] { return stopping_ || values_.count(key) > 0; });
      if (stopping_) return false;
      if (found) reply_value = values_[key];
    }
  }
  char response[kResponseHeaderBytes];
  response[0] = found ? '+' : '-';
  PutU64(response + 1, reply_value.size());
  return WriteFully(fd, response, sizeof(response)) &&
         WriteFully(fd, reply_value.data(), reply_value.size());
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordinator '", address, "' is not of the form host:port"));
  }
  HostPort result;
  result.host = std::string(address.substr(0, colon));
  const absl::string_view port = address.substr(colon + 1);
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), result.port);
  if (ec != std::errc() || end != port.data() + port.size() || result.port < 1 ||
      result.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordinator '", address, "': port must be 1..65535"));
  }
  return result;
}

std::string FormatDuration(milliseconds duration) {
  const int64_t ms = duration.count();
  if (ms < 1000) return absl::StrCat(ms, " ms");
  if (ms % 1000 == 0) return absl::StrCat(ms / 1000, " s");
  return absl::StrCat(static_cast<double>(ms) / 1000.0, " s");
}

absl::StatusOr<std::string> LocalAddressToward(const std::string& host) {
  ASSIGN_OR_RETURN(sockaddr_in peer, Resolve(host, 9));
  if ((ntohl(peer.sin_addr.s_addr) >> 24) == 127) return std::string("127.0.0.1");
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in self{};
  socklen_t len = sizeof(self);
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&peer), sizeof(peer)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0;
  const std::string what = std::strerror(errno);
  ::close(fd);
  if (!ok) return absl::UnavailableError(absl::StrCat("no route to ", host, ": ", what));
  char text[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &self.sin_addr, text, sizeof(text));
  return std::string(text);
}

absl::StatusOr<std::unique_ptr<Rendezvous>> Rendezvous::Connect(const RendezvousOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside world_size ", options.world_size));
  }
  ASSIGN_OR_RETURN(HostPort coordinator, ParseHostPort(options.coordinator));
  const Clock::time_point deadline = Clock::now() + options.connect_timeout;
  std::shared_ptr<StoreServer> server;
  if (options.rank == 0 && options.rank0_serves_store) {
    ASSIGN_OR_RETURN(server, StoreServer::Acquire(coordinator.port));
    coordinator.host = "127.0.0.1";  // rank 0 reaches its own server over loopback
  }
  std::string last_error;
  for (;;) {
    absl::StatusOr<sockaddr_in> addr = Resolve(coordinator.host, coordinator.port);
    absl::StatusOr<int> fd =
        addr.ok() ? ConnectOnce(*addr, deadline) : absl::StatusOr<int>(addr.status());
    if (fd.ok()) return std::unique_ptr<Rendezvous>(new Rendezvous(options, server, *fd));
    last_error = std::string(fd.status().message());
    const Clock::duration left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(left, milliseconds(100)));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("rank ", options.rank, " could not reach coordinator ", options.coordinator,
                   " within ", FormatDuration(options.connect_timeout), " (", last_error, ")"));
}

Rendezvous::Rendezvous(const RendezvousOptions& options, std::shared_ptr<StoreServer> server,
                       int fd)
    : options_(options), server_(std::move(server)), fd_(fd) {}

Rendezvous::~Rendezvous() { Disconnect(); }

void Rendezvous::Disconnect() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::Status Rendezvous::Error(absl::StatusCode code, absl::string_view what) const {
  return absl::Status(code, absl::StrCat("rank ", options_.rank, ": rendezvous '", options_.group,
                                         "' at ", options_.coordinator, ": ", what));
}

absl::StatusOr<std::string> Rendezvous::Request(char op, absl::string_view key,
                                                absl::string_view value, milliseconds wait,
                                                Clock::time_point deadline) {
  if (fd_ < 0) return Error(absl::StatusCode::kFailedPrecondition, "already disconnected");
  const std::string full_key = absl::StrCat(options_.group, "/", key);
  CHECK_LE(full_key.size(), kMaxKeyBytes);
  CHECK_LE(value.size(), kMaxValueBytes);
  char header[kRequestHeaderBytes];
  header[0] = op;
  PutU32(header + 1, static_cast<uint32_t>(full_key.size()));
  PutU64(header + 5, value.size());
  PutU32(header + 13, static_cast<uint32_t>(std::min<int64_t>(wait.count(), UINT32_MAX)));
  absl::Status status = SendAll(fd_, header, sizeof(header), deadline);
  if (status.ok()) status = SendAll(fd_, full_key.data(), full_key.size(), deadline);
  if (status.ok()) status = SendAll(fd_, value.data(), value.size(), deadline);
  char response[kResponseHeaderBytes];
  if (status.ok()) status = RecvAll(fd_, response, sizeof(response), deadline);
  std::string reply;
  if (status.ok()) {
    const uint64_t reply_bytes = GetU64(response + 1);
    if (reply_bytes > kMaxValueBytes) {
      status = absl::InternalError("malformed reply from the coordinator");
    } else {
      reply.resize(reply_bytes);
      status = RecvAll(fd_, reply.data(), reply.size(), deadline);
    }
  }
  if (!status.ok()) {
    Disconnect();  // the stream is out of step now
    return Error(status.code(), status.message());
  }
  if (response[0] != '+') return absl::NotFoundError(full_key);
  return reply;
}

absl::Status Rendezvous::Set(absl::string_view key, absl::string_view value) {
  const Clock::time_point deadline = Clock::now() + options_.connect_timeout;
  return Request(kOpSet, key, value, milliseconds(0), deadline).status();
}

absl::StatusOr<std::string> Rendezvous::Get(absl::string_view key, milliseconds timeout) {
  // The server answers within `timeout`; the extra second covers the round trip.
  const Clock::time_point deadline = Clock::now() + timeout + std::chrono::seconds(1);
  absl::StatusOr<std::string> value = Request(kOpGet, key, "", timeout, deadline);
  if (absl::IsNotFound(value.status())) {
    return Error(absl::StatusCode::kDeadlineExceeded,
                 absl::StrCat("key '", key, "' was not set within ", FormatDuration(timeout)));
  }
  return value;
}

absl::StatusOr<std::vector<std::string>> Rendezvous::AllGather(absl::string_view name,
                                                               absl::string_view value,
                                                               milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  RETURN_IF_ERROR(Set(absl::StrCat(name, "/", options_.rank), value));
  std::vector<std::string> values(options_.world_size);
  std::vector<int> missing;
  for (int r = 0; r < options_.world_size; ++r) {
    const std::string key = absl::StrCat(name, "/", r);
    // Once one rank is late the deadline has passed: only check whether the others arrived.
    const milliseconds wait = missing.empty() ? Remaining(deadline) : milliseconds(0);
    absl::StatusOr<std::string> got =
        Request(kOpGet, key, "", wait, Clock::now() + wait + std::chrono::seconds(1));
    if (got.ok()) {
      values[r] = *std::move(got);
    } else if (absl::IsNotFound(got.status())) {
      missing.push_back(r);
    } else {
      return got.status();
    }
  }
  if (!missing.empty()) {
    return Error(
        absl::StatusCode::kDeadlineExceeded,
        absl::StrCat(missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "),
                     " did not arrive at '", name, "' within ", FormatDuration(timeout)));
  }
  return values;
}

absl::Status Rendezvous::Barrier(absl::string_view name, milliseconds timeout) {
  return AllGather(name, "", timeout).status();
}

}  // namespace strata::dist
