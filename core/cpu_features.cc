#include "core/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace strata {
namespace {

#if defined(__x86_64__)
// CPUID.(7, 0):EDX bits 22 (AMX-BF16) and 24 (AMX-TILE), then Linux's permission for the tile
// data (XFEATURE_XTILEDATA = 18); GCC 12's __builtin_cpu_supports does not report AMX.
bool DetectAmxBf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  if (((edx >> 22) & 1) == 0 || ((edx >> 24) & 1) == 0) return false;
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#endif

CpuFeatures Detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = true;  // every AVX2 CPU has F16C; the baseline build requires it anyway
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
#if defined(__GNUC__) && __GNUC__ >= 12
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
  f.amx_bf16 = f.avx512bf16 && DetectAmxBf16();
#endif
  return f;
}

Isa Best(const CpuFeatures& f) {
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) {
    return f.avx512bf16 ? Isa::kAvx512Bf16 : Isa::kAvx512;
  }
  if (f.avx2 && f.fma) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa EnvCap() {
  const char* env = std::getenv("STRATA_ISA");
  if (env == nullptr) return Isa::kAvx512Bf16;
  if (std::strcmp(env, "scalar") == 0) return Isa::kScalar;
  if (std::strcmp(env, "avx2") == 0) return Isa::kAvx2;
  if (std::strcmp(env, "avx512") == 0) return Isa::kAvx512;
  return Isa::kAvx512Bf16;
}

std::atomic<int> g_override{-1};

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

Isa ActiveIsa() {
  static const Isa detected = [] {
    Isa best = Best(GetCpuFeatures());
    Isa cap = EnvCap();
    return static_cast<int>(cap) < static_cast<int>(best) ? cap : best;
  }();
  int cap = g_override.load(std::memory_order_relaxed);
  if (cap >= 0 && cap < static_cast<int>(detected)) return static_cast<Isa>(cap);
  return detected;
}

void SetIsaOverride(Isa cap) { g_override.store(static_cast<int>(cap)); }
void ClearIsaOverride() { g_override.store(-1); }

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "?";
}

std::string DescribeCpu() {
  const CpuFeatures& f = GetCpuFeatures();
  std::string out = IsaName(ActiveIsa());
  out += " (";
  const std::pair<const char*, bool> flags[] = {{"avx2", f.avx2},
                                                {"fma", f.fma},
                                                {"f16c", f.f16c},
                                                {"avx512f", f.avx512f},
                                                {"avx512bw", f.avx512bw},
                                                {"avx512vl", f.avx512vl},
                                                {"avx512bf16", f.avx512bf16},
                                                {"avx512vnni", f.avx512vnni},
                                                {"amx-bf16", f.amx_bf16}};
  bool first = true;
  for (auto [name, on] : flags) {
    if (!on) continue;
    if (!first) out += " ";
    out += name;
    first = false;
  }
  return out + ")";
}

}  // namespace strata
