// Test helper: runs the ranks of a group as real processes on this machine.
//
// ForkRanks forks `world_size` children from the (single-threaded) test process; child `rank`
// runs body(rank) and reports its result through a pipe: an empty string means success,
// anything else is a failure description. The parent collects every child's report, killing
// children that outlive `limit`. Call it only while the test process has no other threads
// (fork copies only the calling thread), i.e. never create communicators in the parent.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/communicator.h"

namespace strata::dist::testing {

struct RankReport {
  int rank = 0;
  bool ok = false;
  std::string message;  // the child's failure description, or how it died
};

// Rank `rank` of a `world_size` group whose coordinator is 127.0.0.1:`port`; timeouts are the
// RendezvousOptions defaults unless the caller changes them.
inline RendezvousOptions LoopbackOptions(int world_size, int rank, int port, std::string group) {
  RendezvousOptions options;
  options.world_size = world_size;
  options.rank = rank;
  options.coordinator = absl::StrCat("127.0.0.1:", port);
  options.group = std::move(group);
  return options;
}

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close).
inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

inline std::vector<RankReport> ForkRanks(int world_size,
                                         const std::function<std::string(int rank)>& body,
                                         std::chrono::seconds limit = std::chrono::seconds(30)) {
  std::vector<pid_t> pids(world_size, -1);
  std::vector<int> pipes(world_size, -1);
  for (int rank = 0; rank < world_size; ++rank) {
    int fds[2];
    if (::pipe(fds) != 0) return {};
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      const std::string result = body(rank);
      size_t written = 0;
      while (written < result.size()) {
        const ssize_t n = ::write(fds[1], result.data() + written, result.size() - written);
        if (n <= 0) break;
        written += static_cast<size_t>(n);
      }
      ::_exit(result.empty() ? 0 : 1);
    }
    ::close(fds[1]);
    pids[rank] = pid;
    pipes[rank] = fds[0];
  }
  std::vector<std::string> outputs(world_size);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int open = world_size;
  while (open > 0 && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> fds;
    std::vector<int> ranks;
    for (int rank = 0; rank < world_size; ++rank) {
      if (pipes[rank] >= 0) {
        fds.push_back({pipes[rank], POLLIN, 0});
        ranks.push_back(rank);
      }
    }
    if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        outputs[ranks[i]].append(buffer, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        pipes[ranks[i]] = -1;
        --open;
      }
    }
  }
  std::vector<RankReport> reports(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    if (pipes[rank] >= 0) {
      ::kill(pids[rank], SIGKILL);
      ::close(pipes[rank]);
    }
    int status = 0;
    ::waitpid(pids[rank], &status, 0);
    RankReport& report = reports[rank];
    report.rank = rank;
    report.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && outputs[rank].empty();
    report.message = outputs[rank];
    if (WIFSIGNALED(status)) {
      absl::StrAppend(&report.message, " [killed by signal ", WTERMSIG(status),
                      pipes[rank] >= 0 ? " after the time limit]" : "]");
    }
  }
  return reports;
}

}  // namespace strata::dist::testing
