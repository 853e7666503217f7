// Hopper (sm_90a) asynchronous PTX the wgmma kernels use (internal; .cu files only): named
// barriers, mbarriers, bulk copies by the TMA engine (cp.async.bulk), proxy fences and
// warpgroup MMA (wgmma.mma_async m64nNk16, bf16 operands, f32 accumulators, A from registers,
// B from shared memory). Under STRATA_CUDA_EMU the same functions call the host emulator
// (tests/cuda_emu), which performs bulk copies when a wait completes their phase and wgmma
// operations when wgmma.wait_group retires them.
//
// wgmma fragments (PTX ISA, "Register Fragments and Shared Memory Matrix Layouts" for
// .m64nNk16): warp w of the warpgroup owns rows 16w .. 16w + 15 of the m64 tile. Its A registers
// a[0..3] are mma.m16n8k16's A layout over those rows (mma.cuh); accumulator d[4j + i] of lane
// (g = lane / 4, t = 2·(lane % 4)) is row 16w + g (+8 for i ≥ 2), column 8j + t (+1 for odd i).
// B (16 × N) is read through a matrix descriptor; WgmmaDescriptor builds the no-swizzle K-major
// ("interleaved") form: 8 × 8 core matrices of 8 N-rows × 16 contiguous bytes (8 k values),
// element (k, n) at start + (n % 8)·16 + (n / 8)·sbo + (k % 8)·2 + (k / 8)·lbo bytes.
//
// The register A operand and the accumulators belong to the hardware from the issue until
// WgmmaWait retires the group: they must stay alive and untouched in between (the emulator
// reads and writes them at the wait, so a kernel that breaks this fails its tests).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/internal/launch.cuh"
#include "kernels/cuda/internal/mma.cuh"

// wgmma exists on sm_90a only (not on sm_100): other device targets trap if they reach it.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define STRATA_WGMMA_ASM(...) __trap()
#else
#define STRATA_WGMMA_ASM(...) asm volatile(__VA_ARGS__)
#endif

namespace strata::kernels::cuda::internal {

// Byte offset of `smem` in the shared window, as matrix descriptors encode it. The emulator
// addresses wgmma operands relative to the block's dynamic shared memory.
__device__ __forceinline__ uint32_t SharedWindowAddress(const void* smem) {
#if defined(STRATA_CUDA_EMU)
  return static_cast<uint32_t>(static_cast<const unsigned char*>(smem) -
                               ::strata_emu::DynamicShared());
#else
  return SharedAddress(smem);
#endif
}

// No-swizzle K-major matrix descriptor (layout above); offsets in bytes, multiples of 16.
__device__ __forceinline__ uint64_t WgmmaDescriptor(const void* smem, uint32_t lbo_bytes,
                                                    uint32_t sbo_bytes) {
  return static_cast<uint64_t>((SharedWindowAddress(smem) >> 4) & 0x3FFFu) |
         static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFFu) << 16 |
         static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFFu) << 32;
}

#if defined(STRATA_CUDA_EMU)
__device__ __forceinline__ void NamedBarrierSync(int id, int thread_count) {
  ::strata_emu::NamedBarrierSync(id, thread_count);
}
__device__ __forceinline__ void MbarrierInit(uint64_t* bar, int arrivals) {
  ::strata_emu::MbarrierInit(bar, arrivals);
}
__device__ __forceinline__ void FenceMbarrierInit() {}
__device__ __forceinline__ void MbarrierArriveExpectTx(uint64_t* bar, uint32_t tx_bytes) {
  ::strata_emu::MbarrierArriveExpectTx(bar, tx_bytes);
}
__device__ __forceinline__ void MbarrierWait(uint64_t* bar, int parity) {
  ::strata_emu::MbarrierWait(bar, parity);
}
__device__ __forceinline__ void CpAsyncBulkToShared(void* smem_dst, const void* gmem_src,
                                                    uint32_t bytes, uint64_t* bar) {
  ::strata_emu::CpAsyncBulkToShared(smem_dst, gmem_src, bytes, bar);
}
__device__ __forceinline__ void FenceProxyAsync() {}
__device__ __forceinline__ void WgmmaFence() { ::strata_emu::WgmmaFence(); }
template <int kN>
__device__ __forceinline__ void WgmmaBf16(float (&d)[kN / 2], const uint32_t (&a)[4],
                                          uint64_t desc_b, bool accumulate) {
  ::strata_emu::WgmmaBf16(d, kN, a, desc_b, accumulate);
}
__device__ __forceinline__ void WgmmaCommit() { ::strata_emu::WgmmaCommit(); }
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  ::strata_emu::WgmmaWait(kPending);
}
template <int kCount>
__device__ __forceinline__ void WgmmaFenceOperands(float (&)[kCount]) {}
#else
// bar.sync `id` (1..15) over `thread_count` threads (a multiple of 32).
__device__ __forceinline__ void NamedBarrierSync(int id, int thread_count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(thread_count) : "memory");
}
__device__ __forceinline__ void MbarrierInit(uint64_t* bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SharedAddress(bar)), "r"(arrivals)
               : "memory");
}
// Makes initialised mbarriers visible to the async proxy (before the barrier that publishes
// them).
__device__ __forceinline__ void FenceMbarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also expects `tx_bytes` more bytes of transactions in the current phase.
__device__ __forceinline__ void MbarrierArriveExpectTx(uint64_t* bar, uint32_t tx_bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SharedAddress(bar)),
               "r"(tx_bytes)
               : "memory");
}
// Returns once the phase of parity `parity` has completed.
__device__ __forceinline__ void MbarrierWait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(SharedAddress(bar)),
      "r"(parity)
      : "memory");
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) global → shared by the TMA engine,
// completing that many transaction bytes on `bar`.
__device__ __forceinline__ void CpAsyncBulkToShared(void* smem_dst, const void* gmem_src,
                                                    uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(SharedAddress(smem_dst)),
      "l"(gmem_src), "r"(bytes), "r"(SharedAddress(bar))
      : "memory");
}
// Orders this thread's generic-proxy shared-memory accesses before later async-proxy ones
// (wgmma operand reads, bulk copies into the same bytes).
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaFence() {
  STRATA_WGMMA_ASM("wgmma.fence.sync.aligned;\n" ::: "memory");
}
template <int kN>
__device__ __forceinline__ void WgmmaBf16(float (&d)[kN / 2], const uint32_t (&a)[4],
                                          uint64_t desc_b, bool accumulate);
template <>
__device__ __forceinline__ void WgmmaBf16<16>(float (&d)[8], const uint32_t (&a)[4],
                                              uint64_t desc_b, bool accumulate) {
  STRATA_WGMMA_ASM(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, "
      "%9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

template <>
__device__ __forceinline__ void WgmmaBf16<32>(float (&d)[16], const uint32_t (&a)[4],
                                              uint64_t desc_b, bool accumulate) {
  STRATA_WGMMA_ASM(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

template <>
__device__ __forceinline__ void WgmmaBf16<48>(float (&d)[24], const uint32_t (&a)[4],
                                              uint64_t desc_b, bool accumulate) {
  STRATA_WGMMA_ASM(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, {%24, %25, %26, "
      "%27}, %28, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

template <>
__device__ __forceinline__ void WgmmaBf16<128>(float (&d)[64], const uint32_t (&a)[4],
                                               uint64_t desc_b, bool accumulate) {
  STRATA_WGMMA_ASM(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}
__device__ __forceinline__ void WgmmaCommit() {
  STRATA_WGMMA_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  STRATA_WGMMA_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of accumulator registers across the asynchronous
// wgmma statements (call before an issue after writing them, and after a wait).
template <int kCount>
__device__ __forceinline__ void WgmmaFenceOperands(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
#endif  // STRATA_CUDA_EMU

}  // namespace strata::kernels::cuda::internal
