#include "core/cpu_features.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(CpuFeaturesTest, OverrideCapsButNeverRaisesTheIsa) {
  Isa best = ActiveIsa();
  SetIsaOverride(Isa::kAvx2);
  EXPECT_LE(static_cast<int>(ActiveIsa()), static_cast<int>(Isa::kAvx2));
  SetIsaOverride(Isa::kAvx512Bf16);
  EXPECT_EQ(ActiveIsa(), best);
  ClearIsaOverride();
  EXPECT_EQ(ActiveIsa(), best);
  EXPECT_FALSE(DescribeCpu().empty());
}

TEST(CpuFeaturesTest, Avx512ImpliesAvx2) {
  const CpuFeatures& f = GetCpuFeatures();
  if (f.avx512f) {
    EXPECT_TRUE(f.avx2);
  }
  if (ActiveIsa() >= Isa::kAvx2) {
    EXPECT_TRUE(f.fma);
  }
}

}  // namespace
}  // namespace strata
