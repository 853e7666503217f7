// Test helpers: the ISA paths this CPU (and STRATA_ISA) allows among those kernels/cpu has
// code for, and a scoped cap on ActiveIsa(). For *_test.cc files only.
#pragma once

#include <vector>

#include "core/cpu_features.h"

namespace strata::kernels::cpu::internal {

inline std::vector<Isa> SupportedIsas() {
  ClearIsaOverride();
  const Isa best = ActiveIsa();
  std::vector<Isa> isas;
  if (best >= Isa::kAvx2) isas.push_back(Isa::kAvx2);
  if (best >= Isa::kAvx512) isas.push_back(Isa::kAvx512);
  return isas;
}

class IsaCap {
 public:
  explicit IsaCap(Isa isa) { SetIsaOverride(isa); }
  ~IsaCap() { ClearIsaOverride(); }
  IsaCap(const IsaCap&) = delete;
  IsaCap& operator=(const IsaCap&) = delete;
};

}  // namespace strata::kernels::cpu::internal
