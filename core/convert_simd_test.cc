#include "core/convert_simd.h"

#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"

namespace strata {
namespace {

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> isas = {Isa::kScalar};
  const Isa best = ActiveIsa();
  if (best >= Isa::kAvx2) isas.push_back(Isa::kAvx2);
  if (best >= Isa::kAvx512) isas.push_back(Isa::kAvx512);
  return isas;
}

TEST(ConvertSimdTest, EveryIsaPathMatchesTheScalarConversionOnOddLengths) {
  std::mt19937 rng(5);
  for (Isa isa : SupportedIsas()) {
    for (size_t count : {0, 1, 7, 8, 15, 16, 17, 31, 97, 1024, 1031}) {
      std::vector<uint16_t> src(count);
      for (auto& b : src) b = static_cast<uint16_t>(rng());
      // a guard element after the end must not be written
      std::vector<float> dst(count + 1, 12345.0f);
      Bf16ToF32RowsIsa(isa, src.data(), count, dst.data());
      for (size_t i = 0; i < count; ++i) {
        const float expected = Bf16ToF32(src[i]);
        ASSERT_EQ(std::memcmp(&dst[i], &expected, 4), 0)
            << IsaName(isa) << " count " << count << " index " << i;
      }
      EXPECT_EQ(dst[count], 12345.0f) << IsaName(isa);
    }
  }
}

TEST(ConvertSimdTest, EveryIsaPathRoundsToBf16AsTheScalarConversionOnOddLengths) {
  std::mt19937 rng(6);
  // Ties (both parities), carries into the exponent, subnormals, infinities, NaNs of both kinds
  // and signs, then random bits.
  const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f7fffffu, 0x7f7fffffu, 0x00000001u,
                              0x00008000u, 0x00018000u, 0x807fffffu, 0x7f800000u, 0xff800000u,
                              0x7f800001u, 0x7fc00000u, 0xffbfffffu, 0x80000000u, 0x00000000u};
  for (Isa isa : SupportedIsas()) {
    for (size_t count : {0, 1, 7, 8, 15, 16, 17, 31, 97, 1024, 1031}) {
      std::vector<float> src(count);
      for (size_t i = 0; i < count; ++i) {
        const uint32_t bits = i < std::size(special) ? special[i] : static_cast<uint32_t>(rng());
        std::memcpy(&src[i], &bits, 4);
      }
      // a guard element after the end must not be written
      std::vector<uint16_t> dst(count + 1, 0xabcd);
      F32ToBf16RowsIsa(isa, src.data(), count, dst.data());
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(dst[i], F32ToBf16(src[i]))
            << IsaName(isa) << " count " << count << " index " << i << " value " << src[i];
      }
      EXPECT_EQ(dst[count], 0xabcd) << IsaName(isa);
    }
  }
}

}  // namespace
}  // namespace strata
