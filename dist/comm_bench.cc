// comm_bench: MoE-sized all-to-all-v over the Gloo communicator, ranks as processes on
// 127.0.0.1. Not a test; run by hand:
//   build/<dir>/dist/comm_bench [--ranks=2,4] [--tokens=32,256,2048] [--hidden=2304] [--topk=8]
//
// Each rank holds `tokens` tokens; every token is sent to `topk` experts whose ranks are drawn
// uniformly (a fixed seed), so a rank sends about tokens·topk·(n-1)/n rows of hidden f32 to the
// others (the dispatch half of an expert-parallel MoE layer; combine moves the same bytes
// back). Counts are exchanged first with AllToAll, as real dispatch does, outside the timing.
//
// Printed per configuration: latency per call (mean over ranks of the per-rank mean, and the
// slowest rank), bytes each rank sends to other ranks per call, and per-rank send rate. The
// ceiling measured in the same run (docs/performance.md) is one raw TCP stream over loopback
// between two processes: the rate one peer link can carry on this machine right now.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dist/fork_ranks_test_util.h"
#include "dist/gloo_communicator.h"

namespace strata::dist {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchConfig {
  std::vector<int> ranks = {2, 4};
  std::vector<int> tokens = {32, 256, 2048};
  int hidden = 2304;
  int topk = 8;
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Bytes per second of one TCP stream between two processes over 127.0.0.1 (256 MiB sent in
// 4 MiB writes).
double MeasureLoopbackTcp() {
  const int port = testing::FreePort();
  const auto reports = testing::ForkRanks(2, [&](int rank) -> std::string {
    auto comm = ConnectGloo(
        testing::LoopbackOptions(2, rank, port, "tcp-ceiling"));  // only to line both processes up
    if (!comm.ok()) return std::string(comm.status().message());
    constexpr size_t kChunk = 4 << 20;
    constexpr size_t kTotal = 256 << 20;
    std::vector<char> buffer(kChunk, 'x');
    // A plain socket pair through a listener on an ephemeral port, announced via broadcast.
    int64_t listen_port = 0;
    int fd = -1;
    int listener = -1;
    if (rank == 0) {
      listener = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      ::listen(listener, 1);
      socklen_t len = sizeof(addr);
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
      listen_port = ntohs(addr.sin_port);
    }
    if (!(*comm)->Broadcast(&listen_port, sizeof(listen_port), 0).ok()) return "broadcast";
    if (rank == 0) {
      fd = ::accept(listener, nullptr, nullptr);
    } else {
      fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(listen_port));
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return "connect";
    }
    const auto start = Clock::now();
    size_t moved = 0;
    while (moved < kTotal) {
      const ssize_t n =
          rank == 0 ? ::recv(fd, buffer.data(), kChunk, 0) : ::send(fd, buffer.data(), kChunk, 0);
      if (n <= 0) break;
      moved += static_cast<size_t>(n);
    }
    const double rate = moved / Seconds(Clock::now() - start);
    ::close(fd);
    if (listener >= 0) ::close(listener);
    return rank == 0 ? absl::StrCat(rate) : "";
  });
  double rate = 0;
  if (reports.size() == 2 && !absl::SimpleAtod(reports[0].message, &rate)) rate = 0;
  return rate;
}

struct RankResult {
  double mean_s = 0;  // mean latency per call on this rank
  double sent_bytes = 0;
};

// One rank of one configuration: returns "mean_s sent_bytes" or an error.
std::string RunRank(int world_size, int rank, int port, int tokens, const BenchConfig& config) {
  auto connected = ConnectGloo(testing::LoopbackOptions(world_size, rank, port, "bench"));
  if (!connected.ok()) return std::string(connected.status().message());
  Communicator& comm = **connected;

  std::mt19937 rng(1234 + rank);
  std::uniform_int_distribution<int> pick(0, world_size - 1);
  std::vector<int64_t> rows(world_size, 0);
  for (int i = 0; i < tokens * config.topk; ++i) ++rows[pick(rng)];
  const int64_t row_bytes = int64_t{config.hidden} * sizeof(float);
  std::vector<int64_t> send_bytes(world_size), recv_bytes(world_size);
  for (int p = 0; p < world_size; ++p) send_bytes[p] = rows[p] * row_bytes;
  if (!comm.AllToAll(send_bytes.data(), recv_bytes.data(), sizeof(int64_t)).ok()) {
    return "count exchange failed";
  }
  int64_t send_total = 0, recv_total = 0, sent_to_others = 0;
  for (int p = 0; p < world_size; ++p) {
    send_total += send_bytes[p];
    recv_total += recv_bytes[p];
    if (p != rank) sent_to_others += send_bytes[p];
  }
  std::vector<char> send(send_total, 1), recv(recv_total);

  for (int i = 0; i < 2; ++i) {  // warm-up: socket buffers, page faults
    if (!comm.AllToAllV(send.data(), send_bytes.data(), recv.data(), recv_bytes.data()).ok()) {
      return "all-to-all-v failed";
    }
  }
  // Same iteration count on every rank: run for ~1 s, at least 5 calls, as rank 0 decides.
  const auto probe_start = Clock::now();
  if (!comm.AllToAllV(send.data(), send_bytes.data(), recv.data(), recv_bytes.data()).ok()) {
    return "all-to-all-v failed";
  }
  int64_t iterations =
      std::clamp<int64_t>(static_cast<int64_t>(1.0 / Seconds(Clock::now() - probe_start)), 5, 2000);
  if (!comm.Broadcast(&iterations, sizeof(iterations), 0).ok()) return "broadcast failed";
  if (!comm.Barrier().ok()) return "barrier failed";
  const auto start = Clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    if (!comm.AllToAllV(send.data(), send_bytes.data(), recv.data(), recv_bytes.data()).ok()) {
      return "all-to-all-v failed";
    }
  }
  const double mean_s = Seconds(Clock::now() - start) / iterations;
  // The report travels through the pipe as text: every rank "ok" except with the numbers.
  return absl::StrCat("=", mean_s, " ", sent_to_others);
}

void RunConfig(int world_size, int tokens, const BenchConfig& config, double tcp_rate) {
  const int port = testing::FreePort();
  const auto reports = testing::ForkRanks(
      world_size, [&](int rank) { return RunRank(world_size, rank, port, tokens, config); },
      std::chrono::seconds(120));
  double mean_sum = 0, slowest = 0, sent_sum = 0;
  for (const auto& report : reports) {
    RankResult result;
    const std::vector<std::string> fields = absl::StrSplit(report.message, ' ');
    if (report.message.empty() || report.message[0] != '=' || fields.size() != 2 ||
        !absl::SimpleAtod(fields[0].substr(1), &result.mean_s) ||
        !absl::SimpleAtod(fields[1], &result.sent_bytes)) {
      std::printf("ranks=%d tokens=%d: rank %d failed: %s\n", world_size, tokens, report.rank,
                  report.message.c_str());
      return;
    }
    mean_sum += result.mean_s;
    slowest = std::max(slowest, result.mean_s);
    sent_sum += result.sent_bytes;
  }
  const double mean_s = mean_sum / world_size;
  const double sent_per_rank = sent_sum / world_size;
  const double rate = sent_per_rank / mean_s;
  std::printf("%5d %7d %12.3f %12.3f %14.2f %14.3f %10.1f%%\n", world_size, tokens, mean_s * 1e3,
              slowest * 1e3, sent_per_rank / 1e6, rate / 1e9,
              tcp_rate > 0 ? 100.0 * rate / tcp_rate : 0.0);
}

std::vector<int> ParseList(absl::string_view text) {
  std::vector<int> values;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int value = 0;
    if (absl::SimpleAtoi(part, &value) && value > 0) values.push_back(value);
  }
  return values;
}

}  // namespace
}  // namespace strata::dist

int main(int argc, char** argv) {
  strata::dist::BenchConfig config;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    const size_t eq = arg.find('=');
    const absl::string_view key = arg.substr(0, eq);
    const absl::string_view value = eq == absl::string_view::npos ? "" : arg.substr(eq + 1);
    if (key == "--ranks") {
      config.ranks = strata::dist::ParseList(value);
    } else if (key == "--tokens") {
      config.tokens = strata::dist::ParseList(value);
    } else if (key == "--hidden" && absl::SimpleAtoi(value, &config.hidden)) {
    } else if (key == "--topk" && absl::SimpleAtoi(value, &config.topk)) {
    } else {
      std::fprintf(stderr,
                   "usage: %s [--ranks=2,4] [--tokens=32,256,2048] [--hidden=2304] "
                   "[--topk=8]\n",
                   argv[0]);
      return 2;
    }
  }
  const double tcp_rate = strata::dist::MeasureLoopbackTcp();
  std::printf("ceiling: one loopback TCP stream between two processes = %.3f GB/s\n",
              tcp_rate / 1e9);
  std::printf("all-to-all-v, Gloo over 127.0.0.1, hidden %d f32, top-k %d (uniform over ranks)\n",
              config.hidden, config.topk);
  std::printf("%5s %7s %12s %12s %14s %14s %11s\n", "ranks", "tokens", "mean ms", "slowest ms",
              "MB sent/rank", "GB/s per rank", "of TCP");
  for (int world_size : config.ranks) {
    for (int tokens : config.tokens) strata::dist::RunConfig(world_size, tokens, config, tcp_rate);
  }
  return 0;
}
