// absl::Status from CUDA runtime and cuBLAS results, named for the kernel or call that failed.
// Every host wrapper in kernels/cuda returns absl::Status built with these, so an error reads
// "MlaPagedDecode: cudaErrorInvalidConfiguration (invalid configuration argument)".
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"

namespace strata::kernels::cuda {

// OK for cudaSuccess, else an internal error "<what>: <name> (<description>)".
absl::Status CudaStatus(cudaError_t err, const char* what);
// OK for CUBLAS_STATUS_SUCCESS, else an internal error "<what>: <cuBLAS status name>".
absl::Status CublasStatus(cublasStatus_t status, const char* what);
// The launch error of the kernel just launched (cudaGetLastError), named `kernel`.
inline absl::Status LaunchStatus(const char* kernel) {
  return CudaStatus(cudaGetLastError(), kernel);
}

}  // namespace strata::kernels::cuda

// Returns from the enclosing absl::Status function when a CUDA runtime call fails.
#define STRATA_CUDA_RETURN_IF_ERROR(expr, what)                                           \
  do {                                                                                    \
    ::absl::Status strata_cuda_status_ = ::strata::kernels::cuda::CudaStatus(expr, what); \
    if (!strata_cuda_status_.ok()) return strata_cuda_status_;                            \
  } while (0)

#define STRATA_CUBLAS_RETURN_IF_ERROR(expr, what)                                           \
  do {                                                                                      \
    ::absl::Status strata_cuda_status_ = ::strata::kernels::cuda::CublasStatus(expr, what); \
    if (!strata_cuda_status_.ok()) return strata_cuda_status_;                              \
  } while (0)
