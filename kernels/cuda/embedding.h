// Embedding row gather on the GPU (docs/model.md: the token embedding, the first op of the
// forward):
//   out[i, :] = f32(table[ids[i], :])   for i < count, table [vocab, dim] bf16 bits or f32.
// Token ids are validated on the device: an id outside [0, vocab) is never read; its output row
// is zero-filled and 1 is added to *invalid_count (device int32; the caller zeroes it before the
// launch and reads it after, e.g. to fail the batch). Asynchronous on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace strata::kernels::cuda {

// A vocabulary shard (tensor parallelism, engine/tensor_parallel.h): the table holds rows
// [first_id, first_id + rows) of a vocab_size-token vocabulary. An id of [0, vocab_size) outside
// the shard gives a zero row (another rank's share: the group sums the rows); only ids outside
// [0, vocab_size) count as invalid. The whole table: {0, vocab, vocab}.
struct VocabShard {
  int64_t first_id = 0;
  int64_t rows = 0;
  int64_t vocab_size = 0;
};
absl::Status EmbeddingGather(const uint16_t* table_bf16, VocabShard shard, int64_t dim,
                             const int32_t* ids, int64_t count, float* out, int32_t* invalid_count,
                             cudaStream_t stream);

absl::Status EmbeddingGather(const uint16_t* table_bf16, int64_t vocab, int64_t dim,
                             const int32_t* ids, int64_t count, float* out, int32_t* invalid_count,
                             cudaStream_t stream);
absl::Status EmbeddingGather(const float* table, int64_t vocab, int64_t dim, const int32_t* ids,
                             int64_t count, float* out, int32_t* invalid_count,
                             cudaStream_t stream);

}  // namespace strata::kernels::cuda
