// Thin wrappers over the sm_80+ PTX the tensor-core kernels use (internal; .cu files only):
// cp.async (16-, 8- and 4-byte global → shared copies, zero-fill), ldmatrix, mma.sync m16n8k16 bf16
// and mul.bf16x2. Under STRATA_CUDA_EMU the same functions call the host emulator.
//
// Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 and c = 2·(lane % 4):
//   A (16×16, row-major) regs a[0..3]: (row g, cols c..c+1), (row g+8, cols c..c+1),
//                                      (row g, cols c+8..c+9), (row g+8, cols c+8..c+9)
//   B (16×8, "col")      regs b[0..1]: (rows c..c+1, col g), (rows c+8..c+9, col g)
//   C/D (16×8, f32)      d[0..3]:      (row g, cols c, c+1), (row g+8, cols c, c+1)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::kernels::cuda::internal {

#if defined(STRATA_CUDA_EMU)
// Host emulation (tests/cuda_emu): the same operations, PTX semantics, on the CPU.
__device__ __forceinline__ void CpAsync16(void* smem_dst, const void* gmem_src, bool valid) {
  ::strata_emu::CpAsync(smem_dst, gmem_src, 16, valid ? 16 : 0);
}
__device__ __forceinline__ void CpAsync4(void* smem_dst, const void* gmem_src, int src_bytes) {
  ::strata_emu::CpAsync(smem_dst, gmem_src, 4, src_bytes);
}
__device__ __forceinline__ void CpAsync8(void* smem_dst, const void* gmem_src) {
  ::strata_emu::CpAsync(smem_dst, gmem_src, 8, 8);
}
__device__ __forceinline__ void CpAsyncCommit() { ::strata_emu::CpAsyncCommit(); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  ::strata_emu::CpAsyncWait(kPending);
}
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* row_ptr) {
  ::strata_emu::LdMatrixX4(r, row_ptr, /*trans=*/false);
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row_ptr) {
  ::strata_emu::LdMatrixX4(r, row_ptr, /*trans=*/true);
}
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  ::strata_emu::MmaBf16M16N8K16(d, a, b0, b1);
}
__device__ __forceinline__ uint32_t MulBf16x2(uint32_t a, uint32_t b) {
  return ::strata_emu::MulBf16x2(a, b);
}
#else
__device__ __forceinline__ uint32_t SharedAddress(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// Copies 16 bytes global → shared asynchronously; when `valid` is false the 16 shared bytes are
// zero-filled and nothing is read (src must still be a valid address expression).
__device__ __forceinline__ void CpAsync16(void* smem_dst, const void* gmem_src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(smem_dst)),
               "l"(gmem_src), "r"(src_bytes)
               : "memory");
}
// 4-byte cp.async of the first `src_bytes` (0..4) bytes at the 4-byte aligned `gmem_src`; the
// rest of the 4 shared bytes is zero-filled and never read from global memory.
__device__ __forceinline__ void CpAsync4(void* smem_dst, const void* gmem_src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(SharedAddress(smem_dst)),
               "l"(gmem_src), "r"(src_bytes)
               : "memory");
}
// 8-byte cp.async of the 8-byte aligned `gmem_src` (through L1: .cg takes 16 bytes only).
__device__ __forceinline__ void CpAsync8(void* smem_dst, const void* gmem_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(SharedAddress(smem_dst)),
               "l"(gmem_src)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most `kPending` committed groups of this thread are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8×8 b16 matrices; lane l supplies the row address of row (l % 8) of matrix (l / 8).
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row_ptr)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row_ptr)));
}

// d += A·B for one m16n8k16 tile, bf16 operands, f32 accumulators.
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// bf16×2 product, round to nearest.
__device__ __forceinline__ uint32_t MulBf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
#endif  // STRATA_CUDA_EMU

// One group of 32 k of an m16n8 tile with the k permutation of the in-register weight decoders
// (grouped_gemm.cu ComputeStageDecoded, int8_gemm.cu Int8SkinnyKernel): lane (g = lane / 4,
// q = lane % 4) holds elements 8q … 8q + 7 of A rows g (`lo`) and g + 8 (`hi`) and of its B
// column (`b`) as four bf16 pairs each. In step st, fragment k pair (2q, 2q+1) is element pair
// 2·st and (2q+8, 2q+9) pair 2·st + 1, in A and B alike: a bijection of the group's k onto the
// two steps' fragment k that every lane of a fragment column shares.
__device__ __forceinline__ void MmaBf16Group32(float (&d)[4], const uint32_t (&lo)[4],
                                               const uint32_t (&hi)[4], const uint32_t (&b)[4]) {
#pragma unroll
  for (int st = 0; st < 2; ++st) {
    const uint32_t a[4] = {lo[2 * st], hi[2 * st], lo[2 * st + 1], hi[2 * st + 1]};
    MmaBf16(d, a, b[2 * st], b[2 * st + 1]);
  }
}

}  // namespace strata::kernels::cuda::internal
