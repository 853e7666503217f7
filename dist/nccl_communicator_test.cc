// NCCL communicator tests: the NCCL path must produce what the Gloo path produces for the same
// inputs. One rank process per GPU (world size 1 on a one-GPU machine, up to 4 with more);
// skipped without a GPU. The test process itself never touches CUDA, so forking stays safe:
// even the GPU count is probed in a child.
#include "dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dist/fork_ranks_test_util.h"
#include "dist/gloo_communicator.h"

namespace strata::dist {
namespace {

using std::chrono::milliseconds;
using testing::ForkRanks;
using testing::FreePort;

int GpuCount() {
  const auto reports = ForkRanks(1, [](int) -> std::string {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    return absl::StrCat(count);
  });
  return reports.empty() ? 0 : std::atoi(reports[0].message.c_str());
}

RendezvousOptions Options(int world_size, int rank, int port, const std::string& group) {
  RendezvousOptions options = testing::LoopbackOptions(world_size, rank, port, group);
  options.connect_timeout = milliseconds(30000);
  options.timeout = milliseconds(30000);
  return options;
}

// Host buffer mirrored on the device: Run copies in, runs `op` on the device copy, copies out.
template <typename T>
class DeviceCopy {
 public:
  explicit DeviceCopy(const std::vector<T>& host) : size_(host.size()) {
    cudaMalloc(&ptr_, std::max<size_t>(1, size_) * sizeof(T));
    cudaMemcpy(ptr_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceCopy() { cudaFree(ptr_); }
  T* get() { return ptr_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    cudaMemcpy(host.data(), ptr_, size_ * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  size_t size_;
  T* ptr_ = nullptr;
};

std::string Mismatch(const char* what) { return absl::StrCat(what, ": NCCL differs from Gloo\n"); }

std::string CompareBackends(Communicator& gloo, Communicator& nccl) {
  const int n = gloo.world_size();
  const int self = gloo.rank();
  std::string errors;
  auto check = [&](const absl::Status& status) {
    if (!status.ok()) errors += status.ToString() + "\n";
  };
  // all-to-all-v with uneven and zero parts.
  std::vector<int64_t> send_bytes(n), recv_bytes(n);
  std::vector<char> send;
  for (int p = 0; p < n; ++p) {
    send_bytes[p] = (self + p) % 3 == 1 ? 0 : 1 + (self * 37 + p * 11) % 53;
    recv_bytes[p] = (p + self) % 3 == 1 ? 0 : 1 + (p * 37 + self * 11) % 53;
    for (int64_t i = 0; i < send_bytes[p]; ++i) send.push_back(static_cast<char>(self + p + i));
  }
  int64_t total = 0;
  for (int64_t b : recv_bytes) total += b;
  std::vector<char> host_recv(total);
  DeviceCopy<char> device_send(send);
  DeviceCopy<char> device_recv{std::vector<char>(total)};
  check(gloo.AllToAllV(send.data(), send_bytes.data(), host_recv.data(), recv_bytes.data()));
  check(nccl.AllToAllV(device_send.get(), send_bytes.data(), device_recv.get(), recv_bytes.data()));
  if (device_recv.ToHost() != host_recv) errors += Mismatch("all-to-all-v");

  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    std::vector<int64_t> ints(1000);
    std::vector<float> floats(40009);
    for (size_t i = 0; i < ints.size(); ++i)
      ints[i] = (self + 1) * 1000003 + (self % 2 ? -1 : 3) * i;
    for (size_t i = 0; i < floats.size(); ++i) floats[i] = ((self * 131 + i * 7) % 1000) / 7.0f;
    DeviceCopy<int64_t> device_ints(ints);
    DeviceCopy<float> device_floats(floats);
    check(gloo.AllReduce(ints.data(), ints.size(), op));
    check(nccl.AllReduce(device_ints.get(), ints.size(), op));
    if (device_ints.ToHost() != ints) errors += Mismatch("all-reduce int64");
    check(gloo.AllReduce(floats.data(), floats.size(), op));
    check(nccl.AllReduce(device_floats.get(), floats.size(), op));
    // NCCL may sum in another order: allow rounding, nothing more.
    const std::vector<float> got = device_floats.ToHost();
    for (size_t i = 0; i < floats.size(); ++i) {
      if (std::fabs(got[i] - floats[i]) > 1e-5f * std::max(1.0f, std::fabs(floats[i]))) {
        errors += Mismatch("all-reduce f32");
        break;
      }
    }
  }

  std::vector<char> mine(29, static_cast<char>(self * 3 + 1)), gathered(29 * n);
  DeviceCopy<char> device_mine(mine), device_gathered(gathered);
  check(gloo.AllGather(mine.data(), 29, gathered.data()));
  check(nccl.AllGather(device_mine.get(), 29, device_gathered.get()));
  if (device_gathered.ToHost() != gathered) errors += Mismatch("all-gather");

  for (int root = 0; root < n; ++root) {
    std::vector<char> data(1000, static_cast<char>(self == root ? root + 7 : 0));
    DeviceCopy<char> device_data(data);
    check(gloo.Broadcast(data.data(), 1000, root));
    check(nccl.Broadcast(device_data.get(), 1000, root));
    if (device_data.ToHost() != data) errors += Mismatch("broadcast");
  }
  check(gloo.Barrier());
  check(nccl.Barrier());
  return errors;
}

TEST(NcclCommunicatorTest, MatchesGlooOnEveryCollective) {
  const int gpus = GpuCount();
  if (gpus == 0) GTEST_SKIP() << "no CUDA device";
  const int world_size = std::min(gpus, 4);
  const int port = FreePort();
  const auto reports = ForkRanks(
      world_size,
      [&](int rank) -> std::string {
        // Both groups share rank 0's coordinator (one store server, two key namespaces).
        auto gloo = ConnectGloo(Options(world_size, rank, port, "gloo"));
        if (!gloo.ok()) return gloo.status().ToString();
        auto nccl = ConnectNccl(Options(world_size, rank, port, "nccl"), rank);
        if (!nccl.ok()) return nccl.status().ToString();
        if ((*nccl)->backend() != "nccl" || (*nccl)->world_size() != world_size) {
          return "wrong backend or world size";
        }
        return CompareBackends(**gloo, **nccl);
      },
      std::chrono::seconds(90));
  for (const auto& report : reports) {
    EXPECT_TRUE(report.ok) << "rank " << report.rank << ": " << report.message;
  }
}

}  // namespace
}  // namespace strata::dist
