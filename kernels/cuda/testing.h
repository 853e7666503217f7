// Test helpers for the GPU tests in kernels/cuda (test-only; include from *_test.cc files):
// skip without a GPU, fresh seeds, RAII device arrays with poisoning, bf16 rounding, and the
// relative-error report bench/gpu_check.sh tabulates, the MoE permutation's invariants.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/int8_quantize.h"

namespace strata::kernels::cuda::testing {

// True when the kernels run on Strata's CUDA emulator (tests/cuda_emu) rather than a GPU: the
// few tests whose full sweep would take minutes there run a smaller one.
#if defined(STRATA_CUDA_EMU)
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif

inline bool HasCudaDevice() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return count > 0;
}

// A fresh seed per test binary run (docs/performance.md: fresh random inputs every run), printed so
// a failure can be replayed with STRATA_TEST_SEED=<seed>.
inline uint32_t TestSeed() {
  static const uint32_t seed = [] {
    const char* env = std::getenv("STRATA_TEST_SEED");
    const uint32_t s = env != nullptr ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10))
                                      : std::random_device{}();
    std::printf("[seed] STRATA_TEST_SEED=%u\n", s);
    return s;
  }();
  return seed;
}

// Device buffer of T; poisoned (all bytes 0xFF: NaN for f32/bf16, −1 for int32) on request.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    if (count_ > 0 && cudaMalloc(&ptr_, count_ * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { Upload(host); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  bool ok() const { return count_ == 0 || ptr_ != nullptr; }
  void Upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), count_);
    if (count_ == 0) return;
    ASSERT_EQ(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<T> Download() const {
    std::vector<T> host(count_);
    if (count_ > 0) {
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return host;
  }
  void Poison() {
    if (count_ > 0) {
      ASSERT_EQ(cudaMemset(ptr_, 0xff, count_ * sizeof(T)), cudaSuccess);
    }
  }

 private:
  size_t count_ = 0;
  T* ptr_ = nullptr;
};

inline std::vector<float> Uniform(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

// bf16 bits of `values`; `values` is rounded in place to what the bits hold, so host
// references see exactly the device operands.
inline std::vector<uint16_t> ToBf16InPlace(std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = F32ToBf16(values[i]);
    values[i] = Bf16ToF32(bits[i]);
  }
  return bits;
}

// int8 codes and their bf16 scales (core/int8_quantize.h) as the bf16 weights the kernels'
// tensor-core paths multiply by: F32ToBf16(DecodeInt8).
inline std::vector<uint16_t> Int8AsBf16(const std::vector<int8_t>& codes,
                                        const std::vector<uint16_t>& scales) {
  std::vector<float> w(codes.size());
  DecodeInt8(codes.data(), scales.data(), w.size(), w.data());
  std::vector<uint16_t> bits(w.size());
  for (size_t i = 0; i < w.size(); ++i) bits[i] = F32ToBf16(w[i]);
  return bits;
}

inline std::vector<float> FromBf16(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = Bf16ToF32(bits[i]);
  return out;
}

// ‖actual − expected‖₂ / ‖magnitude‖₂ in f64, where magnitude is the same product over the
// operands' absolute values (|X|·|W|ᵀ). A sum of products carries rounding error in proportion to
// the sizes of its terms, not to the sum, which cancellation can bring near zero: a one-element
// output of 32 terms drew 2.6e-5 against RelErr's 1e-5 at about one seed in 400. magnitude ≥
// |expected| element by element, so this is never above RelErr and tolerances keep their meaning;
// +inf when any actual element is not finite.
inline double RelErrOverMagnitude(const std::vector<float>& actual,
                                  const std::vector<float>& expected,
                                  const std::vector<float>& magnitude) {
  if (actual.size() != expected.size() || magnitude.size() != expected.size()) return INFINITY;
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(actual[i])) return INFINITY;
    const double d = static_cast<double>(actual[i]) - expected[i];
    diff += d * d;
    ref += static_cast<double>(magnitude[i]) * magnitude[i];
  }
  if (ref == 0.0) return diff == 0.0 ? 0.0 : INFINITY;
  return std::sqrt(diff / ref);
}

// ‖actual − expected‖₂ / ‖expected‖₂ in f64; +inf when any actual element is not finite
// (poisoned outputs that were never written show up here).
inline double RelErr(const std::vector<float>& actual, const std::vector<float>& expected) {
  return RelErrOverMagnitude(actual, expected, expected);
}

// Prints "[relerr] kernel=<k> case=<c> relerr=<e> tol=<t> ok|FAIL" (bench/gpu_check.sh collects
// these lines) and returns whether relerr ≤ tol.
inline bool ReportRelErr(const std::string& kernel, const std::string& case_name, double relerr,
                         double tol) {
  const bool ok = relerr <= tol;
  std::printf("[relerr] kernel=%s case=%s relerr=%.3e tol=%.1e %s\n", kernel.c_str(),
              case_name.c_str(), relerr, tol, ok ? "ok" : "FAIL");
  return ok;
}

// The grouping MoePermute (moe.h) must produce for pairs grouped under `expert` (−1: dropped),
// checked from the host: offsets are the counts' exclusive scan, every kept pair sits in its
// expert's range on a row of its own that names its token, a dropped pair has row −1, and the
// rows past offsets[E] name token 0.
inline void CheckMoePermutation(const std::vector<int32_t>& expert, int top_k, int num_experts,
                                const std::vector<int32_t>& offsets,
                                const std::vector<int32_t>& token,
                                const std::vector<int32_t>& pair_row, const std::string& name) {
  std::vector<int32_t> counts(static_cast<size_t>(num_experts), 0);
  for (int32_t e : expert) {
    if (e >= 0) ++counts[static_cast<size_t>(e)];
  }
  ASSERT_EQ(offsets[0], 0) << name;
  for (int e = 0; e < num_experts; ++e) {
    ASSERT_EQ(offsets[e + 1] - offsets[e], counts[e]) << name << " expert " << e;
  }
  std::vector<int> seen(expert.size(), 0);
  for (size_t p = 0; p < expert.size(); ++p) {
    const int32_t row = pair_row[p], e = expert[p];
    if (e < 0) {
      ASSERT_EQ(row, -1) << name << " dropped pair " << p;
      continue;
    }
    ASSERT_GE(row, offsets[e]) << name;
    ASSERT_LT(row, offsets[e + 1]) << name;
    ASSERT_EQ(token[row], static_cast<int32_t>(p / top_k)) << name;
    ++seen[row];
  }
  for (size_t r = 0; r < expert.size(); ++r) {
    if (static_cast<int32_t>(r) < offsets[num_experts]) {
      ASSERT_EQ(seen[r], 1) << name << " row " << r;
    } else {
      ASSERT_EQ(token[r], 0) << name << " unused row " << r;
    }
  }
}

}  // namespace strata::kernels::cuda::testing

#define STRATA_REQUIRE_GPU()                                  \
  do {                                                        \
    if (!::strata::kernels::cuda::testing::HasCudaDevice()) { \
      GTEST_SKIP() << "no CUDA device";                       \
    }                                                         \
  } while (0)

#define STRATA_ASSERT_OK(expr)                  \
  do {                                          \
    const ::absl::Status strata_st_ = (expr);   \
    ASSERT_TRUE(strata_st_.ok()) << strata_st_; \
  } while (0)

// Checks relerr ≤ tol and reports it (see ReportRelErr).
#define STRATA_EXPECT_RELERR(kernel, case_name, actual, expected, tol)                     \
  EXPECT_TRUE(::strata::kernels::cuda::testing::ReportRelErr(                              \
      kernel, case_name, ::strata::kernels::cuda::testing::RelErr(actual, expected), tol)) \
      << kernel << " " << case_name

// Checks RelErrOverMagnitude ≤ tol and reports it as "[relerr] ..." (see ReportRelErr).
#define STRATA_EXPECT_RELERR_OVER_MAGNITUDE(kernel, case_name, actual, expected, magnitude, tol) \
  EXPECT_TRUE(::strata::kernels::cuda::testing::ReportRelErr(                                    \
      kernel, case_name,                                                                         \
      ::strata::kernels::cuda::testing::RelErrOverMagnitude(actual, expected, magnitude), tol))  \
      << kernel << " " << case_name
