#include "kernels/cuda/cuda_status.h"

#include <string>

namespace strata::kernels::cuda {

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                             cudaGetErrorString(err) + ")");
}

absl::Status CublasStatus(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(std::string(what) + ": " + cublasGetStatusName(status) + " (" +
                             cublasGetStatusString(status) + ")");
}

}  // namespace strata::kernels::cuda
