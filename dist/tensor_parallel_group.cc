#include "dist/tensor_parallel_group.h"

#include <chrono>

#include "dist/moe_dispatch.h"

namespace strata::dist {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

CommunicatorTensorParallelGroup::CommunicatorTensorParallelGroup(Communicator* comm)
    : comm_(comm) {}

int CommunicatorTensorParallelGroup::rank() const { return comm_->rank(); }
int CommunicatorTensorParallelGroup::size() const { return comm_->world_size(); }

void CommunicatorTensorParallelGroup::AllReduceSum(float* data, int64_t count) {
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = comm_->AllReduce(data, count, ReduceOp::kSum);
  if (!status.ok()) ExitOnCollectiveFailure(*comm_, "tensor-parallel all-reduce", status);
  ++stats_.all_reduces;
  stats_.all_reduce_bytes += count * static_cast<int64_t>(sizeof(float));
  stats_.seconds += SecondsSince(start);
}

void CommunicatorTensorParallelGroup::AllGather(const float* send, int64_t count, float* recv) {
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status =
      comm_->AllGather(send, count * static_cast<int64_t>(sizeof(float)), recv);
  if (!status.ok()) ExitOnCollectiveFailure(*comm_, "tensor-parallel all-gather", status);
  ++stats_.all_gathers;
  stats_.all_gather_bytes += count * static_cast<int64_t>(sizeof(float));
  stats_.seconds += SecondsSince(start);
}

void CommunicatorTensorParallelGroup::BroadcastFromLead(void* data, int64_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = comm_->Broadcast(data, bytes, /*root=*/0);
  if (!status.ok()) ExitOnCollectiveFailure(*comm_, "tensor-parallel step broadcast", status);
  ++stats_.broadcasts;
  stats_.broadcast_bytes += bytes;
  stats_.seconds += SecondsSince(start);
}

void CommunicatorTensorParallelGroup::AllToAll(const float* send, float* recv,
                                               int64_t count_per_rank) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t bytes = count_per_rank * static_cast<int64_t>(sizeof(float));
  const absl::Status status = comm_->AllToAll(send, recv, bytes);
  if (!status.ok()) ExitOnCollectiveFailure(*comm_, "context-parallel all-to-all", status);
  ++stats_.all_to_alls;
  stats_.all_to_all_bytes += bytes * size();
  stats_.seconds += SecondsSince(start);
}

}  // namespace strata::dist
