// Strata's own MoE grouped GEMM for Hopper (sm_90a, mma.sync tensor cores), docs/model.md §6.2:
//
//   y_perm[r] = x_perm[r] · W_eᵀ        for r in expert e's rows [offsets[e], offsets[e+1])
//
// Unlike MoeGroupedGemm (moe.h, cuBLAS) the expert offsets stay on the DEVICE: a one-CTA kernel
// turns them into a work list of (expert, 128- or 16-row tile) entries in `workspace`, and the
// GEMM grid is sized from host-known bounds (total rows, E), so a whole MoE layer can be captured
// in a CUDA graph. Tiles past a group's rows exit at once; empty experts cost nothing.
//
// Operands (all device pointers, row-major, nn.Linear layout):
//   x_perm   [rows, k] bf16 bits (the permuted activations, MoeGatherRows), or the unpermuted
//            rows [x_row_count, k] read through GroupedGemmOptions::x_rows
//   offsets  [E+1] int32 on the device, ascending, offsets[0] = 0, offsets[E] ≤ rows. Entries
//            are clamped to [0, rows] (a bad table never reads or writes out of bounds); rows
//            that no expert covers are left unwritten. Null with E = 1: the one "expert" takes
//            every row (a dense product through the same kernel, int8_gemm.h).
//   weights  GroupedWeights: bf16 [E, n_w, k], or MXFP4 packed exactly as mxfp4.h / core/dtype.h
//            document (packed [E, n_w, k/2]: E2M1 codes, low nibble = even element; scales
//            [E, n_w, k/32] E8M0), decoded to bf16 in registers (bit-identical to
//            DecodeMxfp4 + F32ToBf16, incl. the 2^-127 scale and NaN scale 0xff → 0x7fc0), or
//            int8 groups of 32 as core/int8_quantize.h documents (codes [E, n_w, k] int8, scales
//            [E, n_w, k/32] bf16 bits), each weight decoded to bf16(f32(code · scale)) in
//            registers (F32ToBf16 of DecodeInt8: the product is exact in f32, rounded once to
//            bf16; finite scales, as the quantiser writes them).
//            Scales need no alignment beyond their type's (each is fetched through the aligned
//            32-bit word holding it, cut at the array's end: no byte outside the array is read).
//   n_w      weight rows per expert: n (plain) or 2·I (GLU, gate rows first, then up rows)
// Math: bf16 operands, f32 accumulation (mma.sync m16n8k16), order of the k sum unspecified.
//
// Requirements (InvalidArgument naming the limit otherwise): k % 8 == 0 (bf16) or k % 32 == 0
// (MXFP4, int8); x_perm, bf16 weights, MXFP4 packed weights and int8 codes 16-byte aligned, int8
// scales 2-byte aligned; y 16-byte aligned;
// rows < 2^31; k < 2^24; one expert's matrix n_w·k < 2^31 elements; E ≥ 1. n, I, k need not be
// tile multiples.
//
// Tiles: kLarge = 128×128×32 CTA tile, 8 warps (64×32 each), 4-stage cp.async pipeline, two
// CTAs per SM (prefill-sized groups); kSmall = 16×128×64, 4 warps, 4 stages: weight streaming for
// decode groups of 1–16 rows; kLargeWgmma = the large tile's shape on wgmma (sm_90, bf16
// weights): two warpgroups of m64 × 128 (m64n128k16, A from registers by ldmatrix, the stage's B
// tile in wgmma's no-swizzle layout, placed by the cp.async copies themselves), same work list
// and epilogue. kAuto picks a large tile when rows ≥ 64·E (the average group fills half a large
// tile) — kLargeWgmma for bf16 weights where wgmma.h's WgmmaChosen says so, else kLarge — and
// kSmall otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/reference/glu.h"

namespace strata::kernels::cuda {

// Expert weights in one of three formats (exactly one of bf16 / mxfp4_packed / int8_codes is
// non-null).
struct GroupedWeights {
  const uint16_t* bf16 = nullptr;         // [E, n_w, k] bf16 bits
  const uint8_t* mxfp4_packed = nullptr;  // [E, n_w, k/2]
  const uint8_t* mxfp4_scales = nullptr;  // [E, n_w, k/32] E8M0
  const int8_t* int8_codes = nullptr;     // [E, n_w, k]
  const uint16_t* int8_scales = nullptr;  // [E, n_w, k/32] bf16 bits

  static GroupedWeights Bf16(const uint16_t* w) { return {w, nullptr, nullptr, nullptr, nullptr}; }
  static GroupedWeights Mxfp4(const uint8_t* packed, const uint8_t* scales) {
    return {nullptr, packed, scales, nullptr, nullptr};
  }
  static GroupedWeights Int8(const int8_t* codes, const uint16_t* scales) {
    return {nullptr, nullptr, nullptr, codes, scales};
  }
};

// kLargeWgmma: the large tile's shape on wgmma (bf16 weights, sm_90; kAuto takes it for bf16
// weights where wgmma.h's WgmmaChosen says so).
enum class GroupedGemmTile { kAuto, kLarge, kSmall, kLargeWgmma };

// How a product reads its rows and its work list (both optional).
struct GroupedGemmOptions {
  // [rows]: row r of the product reads row x_rows[r] of x_perm (then x, with x_row_count rows,
  // not a permuted copy): the MoE gather done in the load path (MoePermute's permuted_token), so
  // no permuted activations are written. Rows outside [0, x_row_count) read zeros. Null: row r
  // reads row r.
  const int32_t* x_rows = nullptr;
  int64_t x_row_count = 0;
  // The workspace already holds the work list a previous call built for the same
  // expert_offsets, num_experts, rows and tile (kAuto resolves from rows and E alike), earlier on
  // the same stream — the down product after the gate|up one: only the GEMM is launched.
  bool reuse_work_list = false;
};

// Device workspace bytes for any tile choice (the work list: ⌈rows/16⌉ + E entries of 16 B).
int64_t GroupedGemmWorkspaceBytes(int num_experts, int64_t rows);

// Plain product: y_perm [rows, n] f32 or bf16 bits (nearest even). `rows` is the row count of
// x_perm / y_perm (host-known; the per-expert split is read on the device).
absl::Status GroupedGemm(const uint16_t* x_perm, const int32_t* expert_offsets, int num_experts,
                         int64_t rows, const GroupedWeights& w, int64_t n, int64_t k, float* y_perm,
                         GroupedGemmTile tile, void* workspace, int64_t workspace_bytes,
                         cudaStream_t stream, const GroupedGemmOptions& options = {});
absl::Status GroupedGemm(const uint16_t* x_perm, const int32_t* expert_offsets, int num_experts,
                         int64_t rows, const GroupedWeights& w, int64_t n, int64_t k,
                         uint16_t* y_perm, GroupedGemmTile tile, void* workspace,
                         int64_t workspace_bytes, cudaStream_t stream,
                         const GroupedGemmOptions& options = {});

// Fused gate|up GEMM + GLU: W_e is [2·inter, k] (rows 0..inter−1 gate, inter..2·inter−1 up) and
// h_perm [rows, inter] bf16 = GLU(x·W_gateᵀ, x·W_upᵀ) per `glu` (SwiGLU or SiTU-GLU, as
// norm.h Glu), computed from the f32 accumulators (gate/up are never rounded to bf16). Each CTA
// holds the gate and up columns of the same 64 outputs (interleaved by 8 in its weight tile).
absl::Status GroupedGemmGlu(const uint16_t* x_perm, const int32_t* expert_offsets, int num_experts,
                            int64_t rows, const GroupedWeights& w_gate_up, int64_t inter, int64_t k,
                            const GluParams& glu, uint16_t* h_perm, GroupedGemmTile tile,
                            void* workspace, int64_t workspace_bytes, cudaStream_t stream,
                            const GroupedGemmOptions& options = {});

}  // namespace strata::kernels::cuda
