#include "engine/cuda/device_collectives.h"

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "kernels/cuda/cuda_status.h"

namespace strata::engine::cuda {

absl::Status HostFunctionCollectives::AllReduceSum(float* data, int64_t count,
                                                   cudaStream_t stream) {
  return Enqueue({this, Kind::kAllReduce, data, data, count}, stream);
}

absl::Status HostFunctionCollectives::AllGather(const void* send, int64_t bytes, void* recv,
                                                cudaStream_t stream) {
  CHECK(bytes % 4 == 0) << "the group moves 4-byte words: " << bytes << " bytes";
  return Enqueue({this, Kind::kAllGather, send, recv, bytes / 4}, stream);
}

absl::Status HostFunctionCollectives::AllToAll(const void* send, void* recv, int64_t bytes_per_rank,
                                               cudaStream_t stream) {
  CHECK(bytes_per_rank % 4 == 0) << "the group moves 4-byte words: " << bytes_per_rank
                                 << " bytes per rank";
  return Enqueue({this, Kind::kAllToAll, send, recv, bytes_per_rank / 4}, stream);
}

absl::Status HostFunctionCollectives::Enqueue(const Op& op, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture),
                              "cudaStreamIsCapturing (tensor-parallel collective)");
  Op* record = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) {
      record = &ops_.emplace_back();
    } else {
      record = free_.back();
      free_.pop_back();
    }
    *record = op;
    // A captured record belongs to the graph: every replay runs it again.
    record->captured = capture != cudaStreamCaptureStatusNone;
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaLaunchHostFunc(stream, &HostFunctionCollectives::Run, record),
                              "cudaLaunchHostFunc (tensor-parallel collective)");
  return absl::OkStatus();
}

void HostFunctionCollectives::Run(void* data) {
  Op* op = static_cast<Op*>(data);
  TensorParallelGroup* group = op->self->group_;
  switch (op->kind) {
    case Kind::kAllReduce:
      group->AllReduceSum(static_cast<float*>(op->recv), op->floats);
      break;
    case Kind::kAllGather:
      group->AllGather(static_cast<const float*>(op->send), op->floats,
                       static_cast<float*>(op->recv));
      break;
    case Kind::kAllToAll:
      group->AllToAll(static_cast<const float*>(op->send), static_cast<float*>(op->recv),
                      op->floats);
      break;
  }
  if (!op->captured) {
    std::lock_guard<std::mutex> lock(op->self->mu_);
    op->self->free_.push_back(op);
  }
}

absl::Status HostFunctionCollectives::Synchronize(cudaStream_t stream) {
  // The group's own timeout bounds each collective (and ends the process on failure).
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return absl::OkStatus();
}

int64_t HostFunctionCollectives::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(ops_.size() - free_.size());
}

}  // namespace strata::engine::cuda
