#include "kernels/cuda/convert.h"

#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "kernels/cuda/device.h"

namespace strata::kernels::cuda {
namespace {

TEST(CudaDeviceTest, NcclIsLinkedAndReportsAVersion) {
  // Works without a GPU: proves the NCCL wiring.
  EXPECT_GE(NcclVersion(), 22000);
}

TEST(CudaConvertTest, Bf16ToF32MatchesTheCpuConversion) {
  if (VisibleDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  for (int64_t count : {1, 7, 255, 256, 257, 100003}) {
    std::vector<uint16_t> host(count);
    std::mt19937 rng(static_cast<uint32_t>(count));
    for (auto& bits : host) bits = static_cast<uint16_t>(rng());
    uint16_t* src = nullptr;
    float* dst = nullptr;
    ASSERT_EQ(cudaMalloc(&src, count * sizeof(uint16_t)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dst, count * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(src, host.data(), count * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(dst, 0xff, count * sizeof(float)), cudaSuccess);  // poison
    ASSERT_EQ(ConvertBf16ToF32(src, count, dst, nullptr), cudaSuccess);
    std::vector<float> out(count);
    ASSERT_EQ(cudaMemcpy(out.data(), dst, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int64_t i = 0; i < count; ++i) {
      float expected = Bf16ToF32(host[i]);
      if (expected != expected) {
        EXPECT_NE(out[i], out[i]);
      } else {
        ASSERT_EQ(out[i], expected) << "count " << count << " index " << i;
      }
    }
    cudaFree(src);
    cudaFree(dst);
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
