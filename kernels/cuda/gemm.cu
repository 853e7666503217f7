#include "kernels/cuda/gemm.h"

#include <utility>

#include "kernels/cuda/cuda_status.h"

namespace strata::kernels::cuda {

absl::StatusOr<CublasHandle> CublasHandle::Create() {
  cublasHandle_t handle = nullptr;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle), "cublasCreate");
  return CublasHandle(handle);
}

CublasHandle::CublasHandle(CublasHandle&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)) {}

CublasHandle& CublasHandle::operator=(CublasHandle&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cublasDestroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

namespace {

// Row-major y[m,n] = x[m,k]·W[n,k]ᵀ is column-major yᵀ[n,m] = op_T(W)[n,k] · xᵀ[k,m].
absl::Status Gemm(cublasHandle_t handle, const uint16_t* x, int64_t m, int64_t k, int64_t ldx,
                  const uint16_t* w, int64_t n, void* y, cudaDataType_t y_type, int64_t ldy,
                  float beta, cudaStream_t stream) {
  if (m == 0 || n == 0) return absl::OkStatus();
  if (m < 0 || n < 0 || k <= 0 || ldx < k || ldy < n) {
    return absl::InvalidArgumentError("GemmBf16: bad shape");
  }
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, stream), "GemmBf16 cublasSetStream");
  const float alpha = 1.0f;
  STRATA_CUBLAS_RETURN_IF_ERROR(
      cublasGemmEx_64(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF, k, x,
                      CUDA_R_16BF, ldx, &beta, y, y_type, ldy, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT),
      "GemmBf16 cublasGemmEx");
  return absl::OkStatus();
}

}  // namespace

absl::Status GemmBf16(cublasHandle_t handle, const uint16_t* x, int64_t m, int64_t k, int64_t ldx,
                      const uint16_t* w, int64_t n, float* y, int64_t ldy, cudaStream_t stream) {
  return Gemm(handle, x, m, k, ldx, w, n, y, CUDA_R_32F, ldy, 0.0f, stream);
}

absl::Status GemmBf16(cublasHandle_t handle, const uint16_t* x, int64_t m, int64_t k, int64_t ldx,
                      const uint16_t* w, int64_t n, uint16_t* y, int64_t ldy, cudaStream_t stream) {
  return Gemm(handle, x, m, k, ldx, w, n, y, CUDA_R_16BF, ldy, 0.0f, stream);
}

absl::Status GemmBf16Accumulate(cublasHandle_t handle, const uint16_t* x, int64_t m, int64_t k,
                                int64_t ldx, const uint16_t* w, int64_t n, float* y, int64_t ldy,
                                cudaStream_t stream) {
  return Gemm(handle, x, m, k, ldx, w, n, y, CUDA_R_32F, ldy, 1.0f, stream);
}

}  // namespace strata::kernels::cuda
