// The two ceilings every GPU benchmark divides by (docs/performance.md), measured in the
// same run: device-to-device copy bandwidth and the cuBLAS bf16 GEMM rate on random data.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::kernels::cuda {

// Median device time in ms of `reps` runs of `launch` (after `warmup` runs), each bracketed by
// events on `stream`. `launch` enqueues work on `stream` and returns its status.
absl::StatusOr<double> MedianDeviceMs(const std::function<absl::Status()>& launch, int warmup,
                                      int reps, cudaStream_t stream);

// Copy bandwidth in GB/s (1e9 B/s), counting bytes read plus bytes written: a cudaMemcpyAsync
// of `bytes` between two device buffers (should be ≫ L2, e.g. 1 GiB).
absl::StatusOr<double> MeasureCopyBandwidthGBps(int64_t bytes, int reps, cudaStream_t stream);

// cuBLAS bf16 GEMM n×n×n (bf16 in, bf16 out, f32 accumulate) on random data, in TFLOP/s.
absl::StatusOr<double> MeasureBf16GemmTflops(cublasHandle_t handle, int n, int reps,
                                             cudaStream_t stream);

}  // namespace strata::kernels::cuda
