// Embedding gather on the GPU vs a host gather (bf16 → f32 is exact, so the rows must match
// bit for bit), odd shapes, and out-of-range ids: counted, zero rows, never read.
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "kernels/cuda/embedding.h"
#include "kernels/cuda/testing.h"

namespace strata::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::TestSeed;
using testing::ToBf16InPlace;
using testing::Uniform;

struct Shape {
  int64_t vocab, dim, count;
};

// Bitwise comparison (NaN poison left in an unwritten element fails it).
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CudaEmbeddingTest, GathersRowsLikeTheHost) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 21);
  for (const Shape& s : std::vector<Shape>{{1, 1, 1},
                                           {97, 61, 13},
                                           {1031, 257, 37},
                                           {163840, 61, 3},
                                           {1031, 7168, 5},
                                           {50, 4096, 131}}) {
    std::vector<float> table = Uniform(rng, s.vocab * s.dim, -2, 2);
    const std::vector<uint16_t> table_bf16 = ToBf16InPlace(table);  // table = bf16 values
    std::vector<int32_t> ids(s.count);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(s.vocab - 1));
    for (int32_t& id : ids) id = pick(rng);
    ids[0] = static_cast<int32_t>(s.vocab - 1);  // the last row
    std::vector<float> expected(s.count * s.dim);
    for (int64_t i = 0; i < s.count; ++i) {
      std::memcpy(&expected[i * s.dim], &table[ids[i] * s.dim], s.dim * sizeof(float));
    }
    DeviceArray<uint16_t> d_bf16(table_bf16);
    DeviceArray<float> d_f32(table), d_out(s.count * s.dim);
    DeviceArray<int32_t> d_ids(ids), d_invalid(std::vector<int32_t>{0});
    const std::string name = absl::StrCat("V", s.vocab, "_d", s.dim, "_n", s.count);
    d_out.Poison();
    STRATA_ASSERT_OK(EmbeddingGather(d_bf16.get(), s.vocab, s.dim, d_ids.get(), s.count,
                                     d_out.get(), d_invalid.get(), nullptr));
    EXPECT_TRUE(SameBits(d_out.Download(), expected)) << "bf16 " << name;
    d_out.Poison();
    STRATA_ASSERT_OK(EmbeddingGather(d_f32.get(), s.vocab, s.dim, d_ids.get(), s.count, d_out.get(),
                                     d_invalid.get(), nullptr));
    EXPECT_TRUE(SameBits(d_out.Download(), expected)) << "f32 " << name;
    EXPECT_EQ(d_invalid.Download(), std::vector<int32_t>{0}) << name;
  }
}

TEST(CudaEmbeddingTest, FlagsOutOfRangeIdsAndZerosTheirRows) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 22);
  const int64_t vocab = 29, dim = 67;
  std::vector<float> table = Uniform(rng, vocab * dim, -1, 1);
  const std::vector<uint16_t> table_bf16 = ToBf16InPlace(table);
  const std::vector<int32_t> ids = {3, -1, 29, 28, 0x7fffffff, 0, -2147483647 - 1};
  const int64_t count = static_cast<int64_t>(ids.size());
  std::vector<float> expected(count * dim, 0.0f);
  int bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      ++bad;
      continue;
    }
    std::memcpy(&expected[i * dim], &table[ids[i] * dim], dim * sizeof(float));
  }
  // The table alone in its allocation: a read at row INT_MAX or INT_MIN (~288 GB away) would be
  // an illegal address, reported by the Download's synchronize.
  DeviceArray<uint16_t> d_table(table_bf16);
  DeviceArray<float> d_out(count * dim);
  DeviceArray<int32_t> d_ids(ids), d_invalid(std::vector<int32_t>{0});
  d_out.Poison();
  STRATA_ASSERT_OK(EmbeddingGather(d_table.get(), vocab, dim, d_ids.get(), count, d_out.get(),
                                   d_invalid.get(), nullptr));
  EXPECT_TRUE(SameBits(d_out.Download(), expected));
  EXPECT_EQ(d_invalid.Download(), std::vector<int32_t>{bad});
  EXPECT_EQ(bad, 4);
}

// Tensor parallelism: each rank's shard gathers its own rows and zeros the rest, so the ranks'
// rows sum to the whole table's gather; only ids outside the vocabulary count as invalid.
TEST(CudaEmbeddingTest, VocabShardsGatherTheirRowsAndSumToTheWholeTable) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 23);
  const int64_t vocab = 37, dim = 45;
  std::vector<float> table = Uniform(rng, vocab * dim, -1, 1);
  const std::vector<uint16_t> table_bf16 = ToBf16InPlace(table);
  std::vector<int32_t> ids = {-1, 37, 0x7fffffff};
  for (int32_t id = 0; id < vocab; ++id) ids.push_back(id);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int64_t count = static_cast<int64_t>(ids.size());
  for (int ranks : {1, 2, 3, 5}) {
    const int64_t stride = (vocab + ranks - 1) / ranks;
    std::vector<float> sum(count * dim, 0.0f);
    for (int r = 0; r < ranks; ++r) {
      const int64_t first = std::min<int64_t>(vocab, r * stride);
      const int64_t rows = std::min<int64_t>(vocab, first + stride) - first;
      const std::vector<uint16_t> part(table_bf16.begin() + first * dim,
                                       table_bf16.begin() + (first + rows) * dim);
      DeviceArray<uint16_t> d_table(part.empty() ? std::vector<uint16_t>{0} : part);
      DeviceArray<float> d_out(count * dim);
      DeviceArray<int32_t> d_ids(ids), d_invalid(std::vector<int32_t>{0});
      d_out.Poison();
      STRATA_ASSERT_OK(EmbeddingGather(d_table.get(), VocabShard{first, rows, vocab}, dim,
                                       d_ids.get(), count, d_out.get(), d_invalid.get(), nullptr));
      const std::vector<float> out = d_out.Download();
      for (int64_t i = 0; i < count; ++i) {
        const bool mine = ids[i] >= first && ids[i] < first + rows;
        for (int64_t c = 0; c < dim; ++c) {
          const float want = mine ? table[ids[i] * dim + c] : 0.0f;
          ASSERT_EQ(out[i * dim + c], want) << ranks << " ranks, rank " << r << ", id " << ids[i];
          sum[i * dim + c] += out[i * dim + c];
        }
      }
      EXPECT_EQ(d_invalid.Download(), std::vector<int32_t>{3}) << ranks << " ranks, rank " << r;
    }
    for (int64_t i = 0; i < count; ++i) {
      const bool valid = ids[i] >= 0 && ids[i] < vocab;
      for (int64_t c = 0; c < dim; ++c) {
        ASSERT_EQ(sum[i * dim + c], valid ? table[ids[i] * dim + c] : 0.0f) << ranks << " ranks";
      }
    }
  }
  int32_t dummy = 0;  // a shard reaching past the vocabulary
  EXPECT_FALSE(EmbeddingGather(static_cast<const uint16_t*>(nullptr), VocabShard{30, 8, 37}, 4,
                               nullptr, 1, nullptr, &dummy, nullptr)
                   .ok());
}

TEST(CudaEmbeddingTest, RejectsBadArguments) {
  EXPECT_FALSE(EmbeddingGather(static_cast<const float*>(nullptr), 4, 4, nullptr, 1, nullptr,
                               nullptr, nullptr)
                   .ok());  // null invalid_count
  int32_t dummy = 0;
  EXPECT_FALSE(EmbeddingGather(static_cast<const float*>(nullptr), 4, -1, nullptr, 1, nullptr,
                               &dummy, nullptr)
                   .ok());
}

}  // namespace
}  // namespace strata::kernels::cuda
