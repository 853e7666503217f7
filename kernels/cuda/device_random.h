// Deterministic pseudo-random fills of device memory (tests and benchmarks: never time or test
// on zeros). Counter-based (a hash of seed and index), so any size fills in one pass.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace strata::kernels::cuda {

// dst[i] = uniform in [lo, hi), as f32 or as bf16 bits.
absl::Status FillUniform(float* dst, int64_t count, uint64_t seed, float lo, float hi,
                         cudaStream_t stream);
absl::Status FillUniform(uint16_t* dst, int64_t count, uint64_t seed, float lo, float hi,
                         cudaStream_t stream);

}  // namespace strata::kernels::cuda
