// AddInPlace / GateToBf16 / MlaWriteLatents on the GPU vs host computations (kernels/reference
// RmsNorm for the latent rows).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/testing.h"
#include "kernels/reference/latent_codec.h"
#include "kernels/reference/rms_norm.h"

namespace strata::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::FromBf16;
using testing::TestSeed;
using testing::Uniform;

TEST(CudaModelOpsTest, AddInPlaceIsExactF32Addition) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 1);
  for (int64_t count : {int64_t{1}, int64_t{31}, int64_t{1000}, int64_t{262147}}) {
    const std::vector<float> y = Uniform(rng, count, -4, 4), x = Uniform(rng, count, -4, 4);
    std::vector<float> expected(count);
    for (int64_t i = 0; i < count; ++i) expected[i] = y[i] + x[i];
    DeviceArray<float> d_y(y), d_x(x);
    STRATA_ASSERT_OK(AddInPlace(d_y.get(), d_x.get(), count, nullptr));
    EXPECT_EQ(d_y.Download(), expected) << count;
  }
}

TEST(CudaModelOpsTest, GateToBf16MatchesHostSigmoidGate) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 2);
  for (int64_t count : {int64_t{1}, int64_t{97}, int64_t{4099}}) {
    const std::vector<float> x = Uniform(rng, count, -3, 3), g = Uniform(rng, count, -30, 30);
    std::vector<float> gated(count), plain(count);
    for (int64_t i = 0; i < count; ++i) {
      gated[i] = static_cast<float>(x[i] / (1.0 + std::exp(-static_cast<double>(g[i]))));
      plain[i] = Bf16ToF32(F32ToBf16(x[i]));
    }
    DeviceArray<float> d_x(x), d_g(g);
    DeviceArray<uint16_t> d_out(count);
    d_out.Poison();
    STRATA_ASSERT_OK(GateToBf16(d_x.get(), d_g.get(), count, d_out.get(), nullptr));
    STRATA_EXPECT_RELERR("GateToBf16", absl::StrCat(count), FromBf16(d_out.Download()), gated,
                         4e-3);
    d_out.Poison();
    STRATA_ASSERT_OK(GateToBf16(d_x.get(), nullptr, count, d_out.get(), nullptr));
    EXPECT_EQ(FromBf16(d_out.Download()), plain) << "plain conversion rounds to nearest even";
  }
}

TEST(CudaModelOpsTest, MlaWriteLatentsNormalisesTheLatentPartIntoItsCacheRow) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 3);
  for (auto [rank, rope] : std::vector<std::pair<int, int>>{{512, 64}, {32, 8}, {7, 0}}) {
    const int width = rank + rope;
    const int64_t rows = 5, cache_rows = 11;
    const std::vector<float> kv = Uniform(rng, rows * width, -2, 2);
    const std::vector<float> w = Uniform(rng, rank, 0.5f, 1.5f);
    const std::vector<int32_t> slots = {9, 0, -1, 4, 10};  // row 2 is skipped
    std::vector<float> expected(cache_rows * width, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      if (slots[r] < 0) continue;
      float* dst = expected.data() + slots[r] * width;
      RmsNormReference(kv.data() + r * width, 1, rank, w.data(), 1e-6f, dst);
      for (int c = rank; c < width; ++c) dst[c] = kv[r * width + c];
    }
    DeviceArray<float> d_kv(kv), d_w(w);
    DeviceArray<int32_t> d_slots(slots);
    DeviceArray<uint16_t> d_pages(cache_rows * width);
    ASSERT_EQ(cudaMemset(d_pages.get(), 0, cache_rows * width * 2), cudaSuccess);
    STRATA_ASSERT_OK(MlaWriteLatents(d_kv.get(), rows, rank, rope, d_w.get(), 1e-6f, d_slots.get(),
                                     d_pages.get(), LatentDType::kBF16, nullptr));
    const std::vector<float> got = FromBf16(d_pages.Download());
    STRATA_EXPECT_RELERR("MlaWriteLatents", absl::StrCat(rank, "+", rope), got, expected, 4e-3);
    for (int64_t row : {1, 2, 3, 5, 6, 7, 8}) {  // rows no token maps to stay untouched
      for (int c = 0; c < width; ++c) ASSERT_EQ(got[row * width + c], 0.0f) << row;
    }
  }
}

// fp8 rows (core/latent_row.h): each group's scale is its largest normalised magnitude / 448 and
// every value reads back (kernels/reference/latent_codec.h) within the format's rounding; rows
// of odd byte lengths (rank 7: 11-byte rows) and short last groups (rank 300) included.
TEST(CudaModelOpsTest, MlaWriteLatentsQuantizesFp8RowsWithinTheFormatsRounding) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 4);
  for (auto [rank, rope] :
       std::vector<std::pair<int, int>>{{512, 64}, {300, 64}, {32, 8}, {7, 0}}) {
    const int width = rank + rope;
    const int64_t row_bytes = LatentBytesPerToken(LatentDType::kFP8, width, rope);
    const int64_t rows = 5, cache_rows = 11;
    const std::vector<float> kv = Uniform(rng, rows * width, -2, 2);
    const std::vector<float> w = Uniform(rng, rank, 0.5f, 1.5f);
    const std::vector<int32_t> slots = {9, 0, -1, 4, 10};
    DeviceArray<float> d_kv(kv), d_w(w);
    DeviceArray<int32_t> d_slots(slots);
    DeviceArray<uint8_t> d_pages(cache_rows * row_bytes);
    ASSERT_EQ(cudaMemset(d_pages.get(), 0, cache_rows * row_bytes), cudaSuccess);
    STRATA_ASSERT_OK(MlaWriteLatents(d_kv.get(), rows, rank, rope, d_w.get(), 1e-6f, d_slots.get(),
                                     d_pages.get(), LatentDType::kFP8, nullptr));
    const std::vector<uint8_t> pages = d_pages.Download();
    const std::string shape = absl::StrCat(rank, "+", rope);
    for (int64_t r = 0; r < rows; ++r) {
      if (slots[r] < 0) continue;
      std::vector<float> want(width), got(width);
      RmsNormReference(kv.data() + r * width, 1, rank, w.data(), 1e-6f, want.data());
      for (int c = rank; c < width; ++c) want[c] = kv[r * width + c];
      const uint8_t* row = pages.data() + slots[r] * row_bytes;
      DecodeLatentRowReference(LatentDType::kFP8, row, width, rope, got.data());
      for (int g = 0; g * 128 < rank; ++g) {
        float amax = 0.0f, scale = 0.0f;
        for (int c = g * 128; c < std::min(rank, g * 128 + 128); ++c) {
          amax = std::max(amax, std::fabs(want[c]));
        }
        std::memcpy(&scale, row + rank + 4 * g, 4);
        EXPECT_NEAR(scale, amax / 448.0f, amax / 448.0f * 1e-5f) << shape << " group " << g;
        for (int c = g * 128; c < std::min(rank, g * 128 + 128); ++c) {
          const float bound = std::max(std::fabs(want[c]) / 16.0f, std::ldexp(scale, -10));
          EXPECT_LE(std::fabs(got[c] - want[c]), bound * 1.001f + 1e-6f) << shape << " " << c;
        }
      }
      for (int c = rank; c < width; ++c) EXPECT_EQ(got[c], Bf16ToF32(F32ToBf16(want[c]))) << c;
    }
    for (int64_t row : {1, 2, 3, 5, 6, 7, 8}) {  // rows no token maps to stay untouched
      for (int64_t b = 0; b < row_bytes; ++b) ASSERT_EQ(pages[row * row_bytes + b], 0) << row;
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
