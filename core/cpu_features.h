// Runtime CPU feature detection and ISA dispatch.
//
// The build targets x86-64-v3 (AVX2+FMA+F16C). Kernels with AVX-512 variants ask ActiveIsa()
// once at start-up. STRATA_ISA=avx2 (or SetIsaOverride) forces the AVX2 path, so tests can run
// both paths on an AVX-512 machine.
#pragma once

#include <string>

namespace strata {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512bf16 = false;
  bool avx512vnni = false;
  // AMX-BF16 tiles usable: the CPU has AMX-TILE and AMX-BF16 and Linux granted this process the
  // tile data state (asked once, at detection: arch_prctl ARCH_REQ_XCOMP_PERM; the grant covers
  // every thread of the process).
  bool amx_bf16 = false;
};

enum class Isa { kScalar, kAvx2, kAvx512, kAvx512Bf16 };

const CpuFeatures& GetCpuFeatures();
// The best ISA the CPU supports, capped by STRATA_ISA / SetIsaOverride.
Isa ActiveIsa();
// Caps the ISA (never raises it above what the CPU supports). Not thread-safe against
// concurrent kernel calls: call at start-up or between tests.
void SetIsaOverride(Isa cap);
void ClearIsaOverride();
const char* IsaName(Isa isa);
// "avx512bf16 (avx2 fma f16c avx512f avx512bw avx512vl avx512bf16 avx512vnni)"
std::string DescribeCpu();

}  // namespace strata
