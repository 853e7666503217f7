// Element conversion kernels (device memory in, device memory out).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::kernels::cuda {

// dst[i] = f32(src[i]) for bf16 bits src; exact. Asynchronous on `stream`.
cudaError_t ConvertBf16ToF32(const uint16_t* src, int64_t count, float* dst, cudaStream_t stream);

}  // namespace strata::kernels::cuda
