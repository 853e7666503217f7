// Decode context parallelism's attention (mla_context_parallel.h) against the one-rank absorbed
// reference (kernels/reference/mla.h): the context of one sequence spread over C "ranks" by
// position (rank d holds positions ≡ d mod C in its own pages), each rank's partials for every
// head, merged, then W_UV — equal to the reference over the whole context, for odd head counts,
// widths, strides, context lengths, prefill chunks and decode rows, f32 and bf16 caches.
#include "kernels/cpu/mla_context_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/latent_row.h"
#include "kernels/cpu/internal/random_testing.h"
#include "kernels/cpu/latent_codec.h"
#include "kernels/reference/mla.h"

namespace strata::kernels::cpu {
namespace {

struct Case {
  int heads, nope, rope, v, rank;
  int stride;
  int64_t num_ctx, num_new;
  LatentDType dtype;
};

using internal::Normal;

class MlaContextParallelTest : public ::testing::TestWithParam<Case> {};

TEST_P(MlaContextParallelTest, MergedPartialsEqualTheWholeContext) {
  const Case c = GetParam();
  std::mt19937 rng(17);
  const int lat = c.rank + c.rope, qk = c.nope + c.rope;
  const MlaDims dims{c.heads, c.nope, c.rope, c.v, c.rank};
  const float scale = 1.0f / std::sqrt(static_cast<float>(qk));
  std::vector<float> latent = Normal(rng, c.num_ctx * lat, 1.0f);
  // The cache holds rows in its format: the reference reads what the cache gives back.
  std::vector<std::byte> encoded(
      static_cast<size_t>(c.num_ctx * LatentBytesPerToken(c.dtype, lat, c.rope)));
  const int64_t row_bytes = LatentBytesPerToken(c.dtype, lat, c.rope);
  for (int64_t j = 0; j < c.num_ctx; ++j) {
    EncodeLatentRow(c.dtype, latent.data() + j * lat, lat, c.rope, encoded.data() + j * row_bytes);
    DecodeLatentRow(c.dtype, encoded.data() + j * row_bytes, lat, c.rope, latent.data() + j * lat);
  }
  const std::vector<float> q = Normal(rng, c.num_new * c.heads * qk, 1.0f);
  const std::vector<float> kvb = Normal(rng, int64_t{c.heads} * (c.nope + c.v) * c.rank, 0.1f);
  std::vector<float> expected(static_cast<size_t>(c.num_new * c.heads * c.v));
  MlaAttentionAbsorbedReference(q.data(), latent.data(), c.num_ctx, c.num_new, kvb.data(), dims,
                                scale, expected.data());

  // Absorbed queries q̃ = [W_UKᵀ q_nope ; q_pe].
  std::vector<float> qa(static_cast<size_t>(c.num_new * c.heads * lat), 0.0f);
  for (int64_t t = 0; t < c.num_new; ++t) {
    for (int h = 0; h < c.heads; ++h) {
      const float* qh = q.data() + (t * c.heads + h) * qk;
      float* out = qa.data() + (t * c.heads + h) * lat;
      for (int n = 0; n < c.nope; ++n) {
        const float* w = kvb.data() + (int64_t{h} * (c.nope + c.v) + n) * c.rank;
        for (int k = 0; k < c.rank; ++k) out[k] += qh[n] * w[k];
      }
      for (int k = 0; k < c.rope; ++k) out[c.rank + k] = qh[c.nope + k];
    }
  }
  // Each rank's rows in pages of 4 rows, its block table reversed (pages anywhere).
  constexpr int kBlock = 4;
  const int64_t first = c.num_ctx - c.num_new;
  std::vector<float> partials(static_cast<size_t>(c.stride * c.num_new * c.heads * (c.rank + 1)));
  for (int d = 0; d < c.stride; ++d) {
    const int64_t rows = LocalRows(c.num_ctx, c.stride, d);
    const int64_t blocks = (rows + kBlock - 1) / kBlock;
    std::vector<int32_t> table(static_cast<size_t>(std::max<int64_t>(blocks, 1)));
    for (int64_t b = 0; b < blocks; ++b)
      table[static_cast<size_t>(b)] = static_cast<int32_t>(blocks - 1 - b);
    std::vector<std::byte> pages(
        static_cast<size_t>(std::max<int64_t>(blocks, 1) * kBlock * row_bytes));
    for (int64_t j = 0; j < rows; ++j) {
      const int64_t pos = j * c.stride + d;
      std::copy_n(encoded.data() + pos * row_bytes, row_bytes,
                  pages.data() +
                      (table[static_cast<size_t>(j / kBlock)] * kBlock + j % kBlock) * row_bytes);
    }
    const PagedLatent local{pages.data(), table.data(), kBlock, rows, c.dtype, c.rope};
    const MlaPartialSequence seq{local, first, c.num_new, qa.data(),
                                 partials.data() + d * c.num_new * c.heads * (c.rank + 1)};
    MlaPartialAttention(c.heads, lat, c.rank, scale, c.stride, d, {&seq, 1});
  }
  std::vector<float> merged(static_cast<size_t>(c.num_new * c.heads * c.rank));
  MlaMergePartials(partials.data(), c.stride, c.num_new * c.heads, c.rank, merged.data());
  for (int64_t t = 0; t < c.num_new; ++t) {
    for (int h = 0; h < c.heads; ++h) {
      const float* o_bar = merged.data() + (t * c.heads + h) * c.rank;
      for (int e = 0; e < c.v; ++e) {
        const float* w = kvb.data() + (int64_t{h} * (c.nope + c.v) + c.nope + e) * c.rank;
        double o = 0;
        for (int k = 0; k < c.rank; ++k) o += double{o_bar[k]} * w[k];
        const float want = expected[static_cast<size_t>((t * c.heads + h) * c.v + e)];
        ASSERT_NEAR(o, want, 2e-5 * std::max(1.0f, std::fabs(want)))
            << "query " << t << " head " << h << " value " << e;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaContextParallelTest,
    ::testing::Values(Case{1, 16, 8, 16, 32, 2, 1, 1, LatentDType::kF32},     // first token alone
                      Case{3, 16, 8, 16, 32, 2, 37, 1, LatentDType::kF32},    // decode, odd length
                      Case{5, 24, 8, 20, 48, 3, 29, 29, LatentDType::kF32},   // whole prompt
                      Case{4, 16, 16, 16, 64, 4, 50, 13, LatentDType::kF32},  // a chunk
                      Case{2, 16, 8, 16, 32, 4, 3, 3, LatentDType::kF32},     // fewer rows than C
                      Case{3, 16, 8, 16, 32, 2, 41, 7, LatentDType::kBF16}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

}  // namespace
}  // namespace strata::kernels::cpu
