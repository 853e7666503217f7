// Helpers of the tests that run several ranks of a CUDA group as threads of one process
// (expert_parallel_test.cc, tensor_parallel_test.cc).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/check.h"
#include "engine/step.h"

namespace strata::engine::cuda::rank_threads {

// The in-process group's copy (dist/testing/fake_communicator.h): bytes move between the ranks'
// device buffers with cudaMemcpy (on the emulator a host copy, on GPUs a device copy through
// unified addressing).
inline void DeviceCopy(void* dst, const void* src, int64_t bytes) {
  CHECK_EQ(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault), cudaSuccess);
}

// The distribution of a sampled token that asked for every log-probability, [vocab].
inline std::vector<double> Probabilities(const SampledToken& t, int64_t vocab) {
  std::vector<double> p(static_cast<size_t>(vocab), 0.0);
  for (const TokenLogprob& l : t.top_logprobs) {
    p[static_cast<size_t>(l.token_id)] = std::exp(l.logprob);
  }
  return p;
}

}  // namespace strata::engine::cuda::rank_threads
