#include "kernels/cuda/embedding.h"

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/launch.cuh"

namespace strata::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);  // bf16 → f32 is exact
}

// One CTA per output row; threads stride over dim (coalesced loads and stores).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    EmbeddingGatherKernel(const T* __restrict__ table, VocabShard shard, int64_t dim,
                          const int32_t* __restrict__ ids, float* __restrict__ out,
                          int32_t* __restrict__ invalid_count) {
  internal::AwaitPriorGrids();  // before any memory access (launch.cuh)
  const int64_t i = blockIdx.x;
  const int64_t id = ids[i];
  float* dst = out + i * dim;
  const int64_t row = id - shard.first_id;
  if (row < 0 || row >= shard.rows) {  // another rank's share, or no token at all
    if (threadIdx.x == 0 && (id < 0 || id >= shard.vocab_size)) atomicAdd(invalid_count, 1);
    for (int64_t c = threadIdx.x; c < dim; c += kThreads) dst[c] = 0.0f;
    return;
  }
  const T* src = table + row * dim;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) dst[c] = ToF32(src[c]);
}

template <typename T>
absl::Status Launch(const T* table, VocabShard shard, int64_t dim, const int32_t* ids,
                    int64_t count, float* out, int32_t* invalid_count, cudaStream_t stream) {
  if (shard.rows < 0 || shard.first_id < 0 || shard.first_id + shard.rows > shard.vocab_size ||
      dim < 0 || count < 0 || count > 0x7fffffff || invalid_count == nullptr) {
    return absl::InvalidArgumentError("EmbeddingGather: bad sizes or null invalid_count");
  }
  if (count == 0 || dim == 0) return absl::OkStatus();
  internal::LaunchKernel(EmbeddingGatherKernel<T>, static_cast<unsigned>(count), kThreads, 0,
                         stream, table, shard, dim, ids, out, invalid_count);
  return LaunchStatus("EmbeddingGatherKernel launch");
}

}  // namespace

absl::Status EmbeddingGather(const uint16_t* table_bf16, VocabShard shard, int64_t dim,
                             const int32_t* ids, int64_t count, float* out, int32_t* invalid_count,
                             cudaStream_t stream) {
  return Launch(table_bf16, shard, dim, ids, count, out, invalid_count, stream);
}

absl::Status EmbeddingGather(const uint16_t* table_bf16, int64_t vocab, int64_t dim,
                             const int32_t* ids, int64_t count, float* out, int32_t* invalid_count,
                             cudaStream_t stream) {
  return Launch(table_bf16, VocabShard{0, vocab, vocab}, dim, ids, count, out, invalid_count,
                stream);
}

absl::Status EmbeddingGather(const float* table, int64_t vocab, int64_t dim, const int32_t* ids,
                             int64_t count, float* out, int32_t* invalid_count,
                             cudaStream_t stream) {
  return Launch(table, VocabShard{0, vocab, vocab}, dim, ids, count, out, invalid_count, stream);
}

}  // namespace strata::kernels::cuda
