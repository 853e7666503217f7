#include "core/convert_simd.h"

#include <cstring>
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

}  // namespace
}  // namespace strata
