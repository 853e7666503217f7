// GemmInt8 (int8 weights, groups of 32 with bf16 scales) vs kernels/reference: the GEMV path
// (m ≤ 16) against MatmulInt8Reference (exact weights; f32 errors relative to |x|·|w|ᵀ, bf16
// out = its f32 out rounded, bit for bit), the skinny path (m ≤ 16, in-register decode; also a
// row's bits independent of m) and the tensor-core tiles against MatmulBf16Reference on
// F32ToBf16(DecodeInt8) weights and, looser, against the exact one; odd shapes (n 1, primes; k
// one group, not a multiple of the 512-code step; 33,800 outputs); f32 and bf16 out;
// DequantInt8ToBf16 bit for bit against the host decode; host argument checks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/int8_quantize.h"
#include "kernels/cuda/int8_gemm.h"
#include "kernels/cuda/testing.h"
#include "kernels/reference/matmul.h"

namespace strata::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::FromBf16;
using testing::TestSeed;
using testing::ToBf16InPlace;
using testing::Uniform;

// Weights [n, k] drawn Gaussian-ish (rows of different sizes) and quantised by the quantiser
// `--quantization int8` uses; a few all-zero groups.
struct Int8Weights {
  int64_t n = 0, k = 0;
  std::vector<int8_t> codes;
  std::vector<uint16_t> scales;

  std::vector<uint16_t> DecodedBf16() const { return testing::Int8AsBf16(codes, scales); }
};

Int8Weights MakeWeights(std::mt19937& rng, int64_t n, int64_t k) {
  Int8Weights w;
  w.n = n;
  w.k = k;
  w.codes.resize(static_cast<size_t>(n * k));
  w.scales.resize(static_cast<size_t>(n * k / 32));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> row_scale(0.001f, 0.1f);
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    const float s = row_scale(rng);
    for (float& v : row) v = s * normal(rng);
    if (r % 5 == 2) std::fill(row.begin(), row.begin() + 32, 0.0f);
    EXPECT_TRUE(QuantizeInt8Row(DType::kF32, row.data(), k, w.codes.data() + r * k,
                                w.scales.data() + r * k / 32));
  }
  return w;
}

struct Shape {
  int64_t n, k;
};
const Shape kShapes[] = {{1, 32}, {3, 96}, {37, 544}, {129, 2080}, {250, 4096}, {7, 7168}};
const Shape kWide = {33800, 64};  // 2,113 skinny CTAs, 265 tensor-core column tiles

const char* PathName(GemmInt8Path path) {
  return path == GemmInt8Path::kGemv ? "gemv" : path == GemmInt8Path::kSkinny ? "skinny" : "tc";
}

// m rows of shape s on `path` (kAuto resolved as GemmInt8 resolves it) against the reference of
// that path: the GEMV's exact weights, the others' bf16-rounded ones.
void Check(std::mt19937& rng, int64_t m, const Shape& s, GemmInt8Path path) {
  if (path == GemmInt8Path::kAuto) path = GemmInt8PathFor(m);
  const Int8Weights w = MakeWeights(rng, s.n, s.k);
  std::vector<float> x = Uniform(rng, static_cast<size_t>(m * s.k), -1, 1);
  const std::vector<uint16_t> x_bits = ToBf16InPlace(x);
  std::vector<float> exact(static_cast<size_t>(m * s.n)), rounded(exact.size());
  MatmulInt8Reference(x.data(), m, s.k, w.codes.data(), w.scales.data(), s.n, exact.data());
  const std::vector<uint16_t> w_bf16 = w.DecodedBf16();
  MatmulBf16Reference(x.data(), m, s.k, w_bf16.data(), s.n, rounded.data());
  // |x|·|w|ᵀ: errors are measured against it (testing::RelErrOverMagnitude), since an output of
  // one 32-term sum can cancel to near zero.
  std::vector<float> abs_x(x.size()), magnitude(exact.size());
  std::vector<int8_t> abs_codes(w.codes.size());
  for (size_t i = 0; i < x.size(); ++i) abs_x[i] = std::fabs(x[i]);
  for (size_t i = 0; i < w.codes.size(); ++i) {
    abs_codes[i] = static_cast<int8_t>(std::abs(w.codes[i]));  // codes are within ±127
  }
  MatmulInt8Reference(abs_x.data(), m, s.k, abs_codes.data(), w.scales.data(), s.n,
                      magnitude.data());

  DeviceArray<uint16_t> d_x(x_bits), d_scales(w.scales);
  DeviceArray<int8_t> d_codes(w.codes);
  const int64_t ws_bytes = GemmInt8WorkspaceBytes(m, path);
  DeviceArray<unsigned char> ws(static_cast<size_t>(std::max<int64_t>(ws_bytes, 16)));
  DeviceArray<float> y32(exact.size());
  DeviceArray<uint16_t> y16(exact.size());
  y32.Poison();
  y16.Poison();
  STRATA_ASSERT_OK(GemmInt8(d_x.get(), m, s.k, d_codes.get(), d_scales.get(), s.n, y32.get(),
                            ws.get(), ws_bytes, nullptr, path));
  STRATA_ASSERT_OK(GemmInt8(d_x.get(), m, s.k, d_codes.get(), d_scales.get(), s.n, y16.get(),
                            ws.get(), ws_bytes, nullptr, path));
  const std::string name = absl::StrCat("m", m, "_n", s.n, "_k", s.k);
  const std::string kernel = absl::StrCat("GemmInt8_", PathName(path));
  const std::vector<float> got = y32.Download();
  if (path == GemmInt8Path::kGemv) {
    STRATA_EXPECT_RELERR_OVER_MAGNITUDE(kernel + "_f32", name, got, exact, magnitude, 1e-5);
  } else {
    STRATA_EXPECT_RELERR_OVER_MAGNITUDE(kernel + "_f32", name, got, rounded, magnitude, 5e-5);
    // The bf16 rounding of the weights only: ≤ 2^-8 of each (measured up to 3.0e-3 where k is
    // one group and nothing averages out).
    STRATA_EXPECT_RELERR_OVER_MAGNITUDE(kernel + "_vs_exact", name, got, exact, magnitude, 5e-3);
  }
  if (path != GemmInt8Path::kTensorCores) {
    // The same sums stored as bf16: each the f32 one rounded to nearest even, bit for bit.
    std::vector<float> got_rounded = got;
    const std::vector<uint16_t> expected_bits = ToBf16InPlace(got_rounded);
    const std::vector<uint16_t> got_bits = y16.Download();
    int64_t mismatches = 0;
    for (size_t i = 0; i < got_bits.size(); ++i) mismatches += got_bits[i] != expected_bits[i];
    EXPECT_TRUE(testing::ReportRelErr(
        kernel + "_bf16", name,
        static_cast<double>(mismatches) / static_cast<double>(got_bits.size()), 0.0));
  } else {
    STRATA_EXPECT_RELERR_OVER_MAGNITUDE(kernel + "_bf16", name, FromBf16(y16.Download()), rounded,
                                        magnitude, 4e-3);
  }
  if (path == GemmInt8Path::kSkinny && m > 1) {
    // A row's result does not depend on the other rows: the last row alone gives its bits.
    DeviceArray<float> one(static_cast<size_t>(s.n));
    one.Poison();
    STRATA_ASSERT_OK(GemmInt8(d_x.get() + (m - 1) * s.k, 1, s.k, d_codes.get(), d_scales.get(), s.n,
                              one.get(), nullptr, 0, nullptr, path));
    const std::vector<float> alone = one.Download();
    int64_t differ = 0;
    for (int64_t j = 0; j < s.n; ++j) {
      differ += std::memcmp(&alone[j], &got[(m - 1) * s.n + j], sizeof(float)) != 0;
    }
    EXPECT_EQ(differ, 0) << name << ": the last row alone differs in " << differ << " outputs";
  }
}

TEST(CudaInt8GemmTest, GemvMatchesExactWeightsOnOddShapes) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 41);
  for (int64_t m : {1, 2, 3, 5, 8, 11, 16}) {
    for (const Shape& s : kShapes) Check(rng, m, s, GemmInt8Path::kGemv);
  }
}

TEST(CudaInt8GemmTest, SkinnyPathMatchesRoundedWeightsOnOddShapes) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 44);
  for (int64_t m : {1, 2, 3, 8, 9, 16}) {
    for (const Shape& s : kShapes) Check(rng, m, s, GemmInt8Path::kSkinny);
  }
  for (int64_t m : {5, 16}) Check(rng, m, kWide, GemmInt8Path::kSkinny);
}

TEST(CudaInt8GemmTest, TensorCorePathMatchesRoundedWeightsOnOddShapes) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 42);
  for (int64_t m : {17, 67, 200}) {
    for (const Shape& s : kShapes) Check(rng, m, s, GemmInt8Path::kAuto);
  }
  for (int64_t m : {1, 9, 16}) Check(rng, m, kWide, GemmInt8Path::kTensorCores);
}

TEST(CudaInt8GemmTest, DequantMatchesTheHostDecodeBitForBit) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 43);
  for (const Shape& s : kShapes) {
    Int8Weights w = MakeWeights(rng, s.n, s.k);
    // Scales over the whole normal range too (exponents 2^-120 .. 2^120).
    std::uniform_int_distribution<int> exponent(7, 247), mantissa(0, 127), pick(0, 3);
    for (uint16_t& sc : w.scales) {
      if (pick(rng) == 0) {
        sc = static_cast<uint16_t>((exponent(rng) << 7) | mantissa(rng));
      }
    }
    const std::vector<uint16_t> expected = w.DecodedBf16();
    DeviceArray<int8_t> d_codes(w.codes);
    DeviceArray<uint16_t> d_scales(w.scales), d_out(expected.size());
    d_out.Poison();
    STRATA_ASSERT_OK(
        DequantInt8ToBf16(d_codes.get(), d_scales.get(), s.n, s.k, d_out.get(), nullptr));
    const std::vector<uint16_t> got = d_out.Download();
    int64_t mismatches = 0;
    for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != expected[i];
    EXPECT_TRUE(testing::ReportRelErr(
        "DequantInt8ToBf16", absl::StrCat("n", s.n, "_k", s.k),
        static_cast<double>(mismatches) / static_cast<double>(got.size()), 0.0));
  }
}

// Host-side checks fail before any CUDA call (runs without a GPU; the pointers are never read).
TEST(CudaInt8GemmTest, RejectsArgumentsOutsideTheLimits) {
  const auto* x = reinterpret_cast<const uint16_t*>(uintptr_t{0x10000});
  const auto* codes = reinterpret_cast<const int8_t*>(uintptr_t{0x20000});
  const auto* scales = reinterpret_cast<const uint16_t*>(uintptr_t{0x30000});
  auto* y = reinterpret_cast<float*>(uintptr_t{0x40000});
  auto* ws = reinterpret_cast<void*>(uintptr_t{0x50000});
  auto expect = [](const absl::Status& st, const std::string& needle) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st;
  };
  const int64_t big_ws = GemmInt8WorkspaceBytes(100);
  EXPECT_EQ(GemmInt8PathFor(1), GemmInt8Path::kGemv);
  EXPECT_EQ(GemmInt8PathFor(2), GemmInt8Path::kSkinny);
  EXPECT_EQ(GemmInt8PathFor(kInt8GemvMaxRows), GemmInt8Path::kSkinny);
  EXPECT_EQ(GemmInt8PathFor(kInt8GemvMaxRows + 1), GemmInt8Path::kTensorCores);
  EXPECT_EQ(GemmInt8WorkspaceBytes(kInt8GemvMaxRows), 0);
  EXPECT_GT(GemmInt8WorkspaceBytes(1, GemmInt8Path::kTensorCores), 0);
  EXPECT_GT(big_ws, 0);
  for (GemmInt8Path path : {GemmInt8Path::kGemv, GemmInt8Path::kSkinny}) {
    expect(GemmInt8(x, kInt8GemvMaxRows + 1, 64, codes, scales, 64, y, nullptr, 0, nullptr, path),
           "m <= 16");
  }
  expect(GemmInt8(x, 4, 48, codes, scales, 64, y, nullptr, 0, nullptr), "multiple of 32");
  expect(GemmInt8(x, 4, 0, codes, scales, 64, y, nullptr, 0, nullptr), "multiple of 32");
  expect(GemmInt8(x, 4, 64, codes, scales, 0, y, nullptr, 0, nullptr), "n must be >= 1");
  expect(GemmInt8(x, 4, int64_t{1} << 24, codes, scales, 1, y, nullptr, 0, nullptr), "2^24");
  expect(GemmInt8(x, 4, 1 << 20, codes, scales, 1 << 12, y, nullptr, 0, nullptr), "n·k");
  expect(GemmInt8(x + 1, 4, 64, codes, scales, 64, y, nullptr, 0, nullptr), "16-byte");
  expect(GemmInt8(x, 4, 64, codes + 4, scales, 64, y, nullptr, 0, nullptr), "16-byte");
  expect(GemmInt8(x, 4, 64, codes, reinterpret_cast<const uint16_t*>(uintptr_t{0x30001}), 64, y,
                  nullptr, 0, nullptr),
         "2-byte");
  expect(GemmInt8(x, 4, 64, nullptr, scales, 64, y, nullptr, 0, nullptr), "non-null");
  expect(GemmInt8(x, 100, 64, codes, scales, 64, y, ws, big_ws - 1, nullptr),
         "GemmInt8WorkspaceBytes");
  expect(GemmInt8(x, 100, 64, codes, scales, 64, y, nullptr, big_ws, nullptr),
         "GemmInt8WorkspaceBytes");
  expect(GemmInt8(x, -1, 64, codes, scales, 64, y, nullptr, 0, nullptr), "m must be");
  expect(GemmInt8(x, 4, 64, codes, scales, 64, y, nullptr, 0, nullptr, GemmInt8Path::kTensorCores),
         "GemmInt8WorkspaceBytes");
  auto* dst = reinterpret_cast<uint16_t*>(uintptr_t{0x60002});
  expect(DequantInt8ToBf16(codes, scales, 4, 48, dst, nullptr), "multiple of 32");
  expect(DequantInt8ToBf16(codes, scales, 4, 64, dst, nullptr), "4-byte aligned");
}

}  // namespace
}  // namespace strata::kernels::cuda
