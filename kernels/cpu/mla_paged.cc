#include "kernels/cpu/mla_paged.h"

#include <cstring>

#include "core/check.h"
#include "core/tensor.h"
#include "kernels/cpu/latent_codec.h"

namespace strata::kernels::cpu {

void GatherRows(const PagedLatent& ctx, int64_t row0, int n, int lat_w, const float** rows) {
  DCHECK(n >= 0 && n <= kMaxGatherRows);
  const int64_t row_bytes = ctx.RowBytes(lat_w);
  if (ctx.dtype == LatentDType::kF32) {
    for (int j = 0; j < n; ++j) {
      rows[j] = reinterpret_cast<const float*>(ctx.RowAt(row0 + j, row_bytes));
    }
    return;
  }
  thread_local AlignedBuffer buffer;
  const size_t bytes = sizeof(float) * kMaxGatherRows * static_cast<size_t>(lat_w);
  if (buffer.size() < bytes) buffer = AlignedBuffer(bytes);
  float* decoded = buffer.as<float>();
  for (int j = 0; j < n; ++j) {
    float* row = decoded + int64_t{j} * lat_w;
    DecodeLatentRow(ctx.dtype, ctx.RowAt(row0 + j, row_bytes), lat_w, ctx.rope_dim, row);
    rows[j] = row;
  }
}

void CopyRowsF32(const PagedLatent& ctx, int lat_w, float* out) {
  const int64_t row_bytes = ctx.RowBytes(lat_w);
  for (int64_t t = 0; t < ctx.num_tokens; ++t) {
    DecodeLatentRow(ctx.dtype, ctx.RowAt(t, row_bytes), lat_w, ctx.rope_dim, out + t * lat_w);
  }
}

}  // namespace strata::kernels::cpu
