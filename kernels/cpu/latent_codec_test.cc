// The CPU latent codec against the reference codec (kernels/reference/latent_codec.h): the same
// bytes and the same decoded bits for every format, at odd shapes (short fp8 groups, rope parts
// that are not a multiple of the vector width) and unaligned rows; the bit-arithmetic e4m3
// encoder against core's exhaustive nearest-value search at every rounding boundary.
#include "kernels/cpu/latent_codec.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/reference/latent_codec.h"

namespace strata::kernels::cpu {
namespace {

void ExpectSameCode(float x) {
  ASSERT_EQ(F32ToE4M3Fast(x), F32ToF8E4M3(x))
      << "x = " << x << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(x) << ")";
}

TEST(LatentCodec, E4M3EncoderRoundsEveryBoundaryLikeTheNearestValueSearch) {
  // Every code's value, the midpoint to the next code (a tie: the even code wins) and the floats
  // just either side of it, in both signs.
  for (int code = 0; code < 0x7E; ++code) {
    const float lo = F8E4M3ToF32(static_cast<uint8_t>(code));
    const float hi = F8E4M3ToF32(static_cast<uint8_t>(code + 1));
    const float mid = (lo + hi) / 2.0f;  // exact: e4m3 values have 4 significant bits
    for (float x : {lo, hi, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)}) {
      ExpectSameCode(x);
      ExpectSameCode(-x);
    }
  }
  // Saturation, the largest values below it, specials.
  for (float x : {447.9f, 448.0f, 455.9f, 464.0f, 1e6f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), 1e-30f, 0.0f, -0.0f}) {
    ExpectSameCode(x);
    ExpectSameCode(-x);
  }
  EXPECT_EQ(F32ToE4M3Fast(std::nanf("")), 0x7F);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> exponent(-14.0f, 9.5f);
  for (int i = 0; i < 200000; ++i) ExpectSameCode(std::exp2(exponent(rng)) * (i % 2 ? 1 : -1));
}

struct Shape {
  int32_t latent_dim, rope_dim;
};

TEST(LatentCodec, RowsEncodeAndDecodeExactlyAsTheReference) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Kimi shapes (512 + 64), the demo (128 + 32) and tiny (32 + 8) models, odd widths.
  const Shape shapes[] = {{576, 64}, {160, 32}, {40, 8}, {42, 5}, {300, 64}, {1, 0}, {131, 2}};
  for (LatentDType dtype : {LatentDType::kF32, LatentDType::kBF16, LatentDType::kFP8}) {
    for (const Shape& s : shapes) {
      for (float magnitude : {1.0f, 1e-30f, 3e4f}) {
        std::vector<float> row(static_cast<size_t>(s.latent_dim));
        for (float& v : row) v = normal(rng) * magnitude;
        if (s.latent_dim > 3) row[2] = 0.0f;
        const size_t bytes =
            static_cast<size_t>(LatentBytesPerToken(dtype, s.latent_dim, s.rope_dim));
        for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {  // rows at any byte offset
          std::vector<std::byte> fast(bytes + offset, std::byte{0x5A}), ref = fast;
          EncodeLatentRow(dtype, row.data(), s.latent_dim, s.rope_dim, fast.data() + offset);
          EncodeLatentRowReference(dtype, row.data(), s.latent_dim, s.rope_dim,
                                   ref.data() + offset);
          ASSERT_EQ(fast, ref) << LatentDTypeName(dtype) << " " << s.latent_dim << "+" << s.rope_dim
                               << " x" << magnitude << " offset " << offset;
          std::vector<float> got(row.size(), -1.0f), want(row.size(), -2.0f);
          DecodeLatentRow(dtype, fast.data() + offset, s.latent_dim, s.rope_dim, got.data());
          DecodeLatentRowReference(dtype, ref.data() + offset, s.latent_dim, s.rope_dim,
                                   want.data());
          for (size_t i = 0; i < row.size(); ++i) {
            ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
                << LatentDTypeName(dtype) << " " << s.latent_dim << "+" << s.rope_dim << " value "
                << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cpu
