// Dense bf16 matrix products through cuBLAS (projections, LatentMoE W_down/W_up, LM head), in the
// nn.Linear layout the rest of Strata uses: y[m, n] = x[m, k] · W[n, k]ᵀ, row-major, bf16 operands
// (raw bits), f32 accumulation, f32 or bf16 (round to nearest even) output.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::kernels::cuda {

// Owns one cuBLAS handle (bound to the current device at creation). Not thread-safe: one per
// stream-owning thread.
class CublasHandle {
 public:
  static absl::StatusOr<CublasHandle> Create();
  CublasHandle(CublasHandle&& other) noexcept;
  CublasHandle& operator=(CublasHandle&& other) noexcept;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle();

  cublasHandle_t get() const { return handle_; }

 private:
  explicit CublasHandle(cublasHandle_t handle) : handle_(handle) {}
  cublasHandle_t handle_ = nullptr;
};

// y = x · Wᵀ; x [m, k] (row stride ldx ≥ k), W [n, k] (row stride k), y [m, n] (row stride
// ldy ≥ n). m == 0 is a no-op. Runs on `stream` (the handle is re-bound to it).
absl::Status GemmBf16(cublasHandle_t handle, const uint16_t* x, int64_t m, int64_t k, int64_t ldx,
                      const uint16_t* w, int64_t n, float* y, int64_t ldy, cudaStream_t stream);
absl::Status GemmBf16(cublasHandle_t handle, const uint16_t* x, int64_t m, int64_t k, int64_t ldx,
                      const uint16_t* w, int64_t n, uint16_t* y, int64_t ldy, cudaStream_t stream);

// y += x · Wᵀ (f32 y, added in the GEMM's epilogue: one launch instead of a product and an add;
// the f32 sum of the product and y, as the add would give).
absl::Status GemmBf16Accumulate(cublasHandle_t handle, const uint16_t* x, int64_t m, int64_t k,
                                int64_t ldx, const uint16_t* w, int64_t n, float* y, int64_t ldy,
                                cudaStream_t stream);

}  // namespace strata::kernels::cuda
