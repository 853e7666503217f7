// MXFP4 → bf16 dequantisation on the GPU vs the host decode (DecodeMxfp4, then F32ToBf16):
// every output bit equal, over all 16 codes and all 256 scale bytes (0 = 2^-127 subnormal,
// 0xff = NaN) and odd row counts.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "core/dtype.h"
#include "kernels/cuda/mxfp4.h"
#include "kernels/cuda/testing.h"

namespace strata::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::TestSeed;

std::vector<uint16_t> HostDequant(const std::vector<uint8_t>& packed,
                                  const std::vector<uint8_t>& scales, int64_t rows, int64_t cols) {
  std::vector<float> row(cols);
  std::vector<uint16_t> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    DecodeMxfp4(&packed[r * cols / 2], &scales[r * cols / 32], cols, row.data());
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = F32ToBf16(row[c]);
  }
  return out;
}

TEST(CudaMxfp4Test, DequantMatchesTheHostDecodeBitForBit) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 31);
  struct Shape {
    int64_t rows, cols;
  };
  for (const Shape& s :
       std::vector<Shape>{{1, 32}, {3, 96}, {37, 2048}, {257, 7168}, {512, 32}, {7, 8192}}) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::vector<uint8_t> packed(s.rows * s.cols / 2), scales(s.rows * s.cols / 32);
    for (uint8_t& b : packed) b = static_cast<uint8_t>(byte(rng));
    // Realistic scales mostly (2^-10 .. 2^5), with every byte value appearing somewhere.
    std::uniform_int_distribution<int> usual(117, 132);
    for (size_t i = 0; i < scales.size(); ++i) {
      scales[i] = static_cast<uint8_t>(i % 7 == 3 ? byte(rng) : usual(rng));
    }
    for (size_t i = 0; i < scales.size() && i < 256; ++i) {
      scales[(i * 7919) % scales.size()] = static_cast<uint8_t>(i);
    }
    const std::vector<uint16_t> expected = HostDequant(packed, scales, s.rows, s.cols);
    DeviceArray<uint8_t> d_packed(packed), d_scales(scales);
    DeviceArray<uint16_t> d_out(s.rows * s.cols);
    d_out.Poison();
    STRATA_ASSERT_OK(
        DequantMxfp4ToBf16(d_packed.get(), d_scales.get(), s.rows, s.cols, d_out.get(), nullptr));
    const std::vector<uint16_t> got = d_out.Download();
    int64_t mismatches = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != expected[i]) {
        if (first < 0) first = static_cast<int64_t>(i);
        ++mismatches;
      }
    }
    EXPECT_EQ(mismatches, 0) << "rows=" << s.rows << " cols=" << s.cols << " first=" << first
                             << (first >= 0
                                     ? absl::StrCat(" got=", got[first], " want=", expected[first])
                                     : std::string());
    std::printf("[relerr] kernel=DequantMxfp4ToBf16 case=r%lld_c%lld relerr=%.3e tol=0.0e+00 %s\n",
                static_cast<long long>(s.rows), static_cast<long long>(s.cols),
                mismatches == 0 ? 0.0 : 1.0, mismatches == 0 ? "ok" : "FAIL");
  }
}

TEST(CudaMxfp4Test, RejectsColumnsThatAreNotWholeBlocks) {
  EXPECT_FALSE(DequantMxfp4ToBf16(nullptr, nullptr, 1, 48, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace strata::kernels::cuda
