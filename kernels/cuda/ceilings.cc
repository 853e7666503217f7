#include "kernels/cuda/ceilings.h"

#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_random.h"
#include "kernels/cuda/gemm.h"

namespace strata::kernels::cuda {
namespace {

// Frees device allocations on scope exit.
class DeviceAllocs {
 public:
  DeviceAllocs() = default;
  DeviceAllocs(const DeviceAllocs&) = delete;
  DeviceAllocs& operator=(const DeviceAllocs&) = delete;
  ~DeviceAllocs() {
    for (void* p : ptrs_) cudaFree(p);
  }
  absl::Status Alloc(void** out, int64_t bytes, const char* what) {
    *out = nullptr;
    STRATA_CUDA_RETURN_IF_ERROR(cudaMalloc(out, static_cast<size_t>(bytes)), what);
    ptrs_.push_back(*out);
    return absl::OkStatus();
  }

 private:
  std::vector<void*> ptrs_;
};

}  // namespace

absl::StatusOr<double> MedianDeviceMs(const std::function<absl::Status()>& launch, int warmup,
                                      int reps, cudaStream_t stream) {
  for (int i = 0; i < warmup; ++i) {
    absl::Status status = launch();
    if (!status.ok()) return status;
  }
  reps = std::max(reps, 1);
  std::vector<cudaEvent_t> events(static_cast<size_t>(2 * reps), nullptr);
  absl::Status status = absl::OkStatus();
  for (auto& e : events) {
    status = CudaStatus(cudaEventCreate(&e), "MedianDeviceMs cudaEventCreate");
    if (!status.ok()) break;
  }
  for (int i = 0; i < reps && status.ok(); ++i) {
    status = CudaStatus(cudaEventRecord(events[2 * i], stream), "MedianDeviceMs cudaEventRecord");
    if (status.ok()) status = launch();
    if (status.ok()) {
      status =
          CudaStatus(cudaEventRecord(events[2 * i + 1], stream), "MedianDeviceMs cudaEventRecord");
    }
  }
  if (status.ok()) {
    status = CudaStatus(cudaStreamSynchronize(stream), "MedianDeviceMs cudaStreamSynchronize");
  }
  std::vector<double> ms;
  for (int i = 0; i < reps && status.ok(); ++i) {
    float t = 0.0f;
    status = CudaStatus(cudaEventElapsedTime(&t, events[2 * i], events[2 * i + 1]),
                        "MedianDeviceMs cudaEventElapsedTime");
    ms.push_back(t);
  }
  for (auto& e : events) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (!status.ok()) return status;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

absl::StatusOr<double> MeasureCopyBandwidthGBps(int64_t bytes, int reps, cudaStream_t stream) {
  DeviceAllocs allocs;
  void* src = nullptr;
  void* dst = nullptr;
  absl::Status status = allocs.Alloc(&src, bytes, "MeasureCopyBandwidth cudaMalloc");
  if (status.ok()) status = allocs.Alloc(&dst, bytes, "MeasureCopyBandwidth cudaMalloc");
  if (status.ok()) {
    status = FillUniform(static_cast<float*>(src), bytes / 4, 1, -1.0f, 1.0f, stream);
  }
  if (!status.ok()) return status;
  absl::StatusOr<double> ms = MedianDeviceMs(
      [&] {
        return CudaStatus(
            cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream),
            "MeasureCopyBandwidth cudaMemcpyAsync");
      },
      2, reps, stream);
  if (!ms.ok()) return ms.status();
  return 2.0 * static_cast<double>(bytes) / (*ms * 1e-3) / 1e9;
}

absl::StatusOr<double> MeasureBf16GemmTflops(cublasHandle_t handle, int n, int reps,
                                             cudaStream_t stream) {
  DeviceAllocs allocs;
  const int64_t elems = static_cast<int64_t>(n) * n;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  absl::Status status = allocs.Alloc(&a, elems * 2, "MeasureBf16Gemm cudaMalloc");
  if (status.ok()) status = allocs.Alloc(&b, elems * 2, "MeasureBf16Gemm cudaMalloc");
  if (status.ok()) status = allocs.Alloc(&c, elems * 2, "MeasureBf16Gemm cudaMalloc");
  if (status.ok()) status = FillUniform(static_cast<uint16_t*>(a), elems, 2, -1.0f, 1.0f, stream);
  if (status.ok()) status = FillUniform(static_cast<uint16_t*>(b), elems, 3, -1.0f, 1.0f, stream);
  if (!status.ok()) return status;
  absl::StatusOr<double> ms = MedianDeviceMs(
      [&] {
        return GemmBf16(handle, static_cast<const uint16_t*>(a), n, n, n,
                        static_cast<const uint16_t*>(b), n, static_cast<uint16_t*>(c), n, stream);
      },
      3, reps, stream);
  if (!ms.ok()) return ms.status();
  return 2.0 * static_cast<double>(n) * n * n / (*ms * 1e-3) / 1e12;
}

}  // namespace strata::kernels::cuda
