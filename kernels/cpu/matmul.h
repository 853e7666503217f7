// Fast CPU matrix products: y[m, n] = x[m, k] · W[n, k]ᵀ (PyTorch nn.Linear layout), f32
// activations and outputs, f32 accumulation, weights in f32, bf16, MXFP4 or int8 groups used in
// place.
//
// One entry point, Matmul(), picks the kernel from the weight format, m and the CPU (ActiveIsa(),
// read once per call). All kernels are "dot-product" shaped: each output element is the f32 sum
// of x-row · W-row, accumulated in fixed 1024-wide k blocks in a fixed order, so
//   * the result does not depend on the thread count or on m (row i of a batch is bit-identical
//     to the same row computed alone: batching never changes a sequence's logits), and
//   * it depends only on the ISA path (AVX-512 vs AVX2 use different vector widths)
// — at the default MatmulPrecision::kF32. With kBf16 (below, opt-in) calls of many rows round x
// to bf16, so a row's result depends on how many rows its call had.
// Weights are never converted to a second copy: bf16 is widened to f32 in registers
// (x << 16 / x & 0xFFFF0000, exact) and MXFP4 is decoded in registers (vpermps over the E2M1
// table, scaled by the block's E8M0 power of two, exact) and int8 codes are widened and scaled by
// their group's bf16 scale (exact) — or, when m spans several register tiles, decoded once per
// 4-row × 1024 tile into an L1-resident f32 scratch.
//
// Thread-safety: Matmul may be called concurrently from several threads; it parallelises with
// OpenMP over weight-row blocks (and row chunks of x). Steady-state decode calls do not touch
// the heap (per-thread workspaces only grow).
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

enum class WeightFormat { kF32, kBf16, kMxfp4, kInt8 };

// "f32", "bf16", "mxfp4", "int8".
const char* WeightFormatName(WeightFormat format);

// A weight matrix as it lies in memory (a view; owns nothing).
struct MatmulWeights {
  WeightFormat format = WeightFormat::kF32;
  int64_t n = 0;                    // output features (rows of W)
  int64_t k = 0;                    // input features; MXFP4 and int8: a multiple of 32
  const void* data = nullptr;       // f32 / bf16 bits [n, k], MXFP4 codes [n, k/2] (low nibble
                                    // = even element), or int8 codes [n, k]
  const uint8_t* scales = nullptr;  // MXFP4: E8M0 [n, k/32]; int8: bf16 bits [n, k/32] (2-byte
                                    // aligned; core/int8_quantize.h)
};

// y[m, n] = x[m, k] · Wᵀ (overwrites y; y must not alias x).
void Matmul(const MatmulWeights& w, const float* x, int64_t m, float* y);

// Several products over the same m rows, e.g. a layer's q, k, v and gate projections of one
// input: y_p[m, w_p.n] = x_p[m, w_p.k] · W_pᵀ for every p < count, run as one parallel loop
// (one fork/join for all of them; an x shared by several products is packed once). Each y_p
// equals Matmul(w_p, x_p, m, y_p) bit for bit. No y_p may alias any x_q or another y_q.
struct MatmulProduct {
  MatmulWeights w;
  const float* x = nullptr;
  float* y = nullptr;
};
void MatmulProducts(const MatmulProduct* products, int64_t count, int64_t m);

// How products with bf16 or MXFP4 weights over many rows (prefill chunks, big decode batches)
// multiply, process-wide: Matmul, MatmulGluGrouped and MatmulScatterAddGrouped follow it.
//   kF32 (default): x stays f32 and the weights are widened exactly — the results above.
//   kBf16: calls (or expert groups) of at least kBf16MinRows rows round x to bf16 and multiply
//     with f32 sums — as GPU engines and llama.cpp compute bf16 models: on CPUs with AMX (Intel
//     Xeon since Sapphire Rapids) on AMX tiles, our own kernel reading the weights in place
//     (matmul_amx.cc: 1.6–5.6× the exact tiles from 16 rows, measured); elsewhere with vdpbf16ps
//     (~2× the FLOP/s of the f32 tiles on AMD Zen 4/5). x keeps 8 significant bits (relative
//     error ≤ 2⁻⁹ per product). MXFP4 weights are decoded to bf16 (exactly) and multiplied the
//     same way; int8 weights too, code · scale rounded to bf16 (a second ≤ 2⁻⁹ error). Only on
//     CPUs with AVX512_BF16; elsewhere, and for f32 weights, kF32 applies.
//     Fewer rows stay f32: those calls are bandwidth-bound, rounding buys nothing there.
//   kInt8: kBf16's products, and on CPUs with AVX512_VNNI every other product with MXFP4 or int8
//     weights (decode: fewer than kBf16MinRows rows; all rows where kBf16 does not apply) rounds
//     x to int8 per 32-element block, llama.cpp's Q8_0 activations with an f32 scale
//     (kernels/reference/matmul_q8.h: |error| ≤ half the block's largest |x| / 127 per value),
//     and sums 4-element byte products in int32 (vpdpbusd, matmul_vnni.cc): about a third of
//     the instructions per MXFP4 weight of the exact tiles, which are bound by decoding at m = 1.
// Set it before the products run (at start-up); reading it is a relaxed atomic load.
enum class MatmulPrecision { kF32, kBf16, kInt8 };
inline constexpr int64_t kBf16MinRows = 16;
void SetMatmulPrecision(MatmulPrecision precision);
MatmulPrecision GetMatmulPrecision();
// True when kBf16 takes effect on this CPU (AVX512_BF16 at the current ISA cap).
bool Bf16MatmulSupported();
// True when kBf16's products run on AMX tiles here (CpuFeatures::amx_bf16 at the AVX512_BF16 cap).
bool Bf16MatmulUsesAmx();
// True when kInt8's int8-activation products run on this CPU (AVX512_VNNI at an AVX-512 ISA cap).
bool Int8MatmulSupported();
// What the products do now, for reports: "f32", "bf16" (vdpbf16ps tiles), "bf16-amx", and under
// kInt8 "int8", "int8+bf16" or "int8+bf16-amx" (what runs from kBf16MinRows rows).
const char* MatmulPrecisionInEffect();

// Which implementation to use; kAuto is what Matmul() does. The others exist for tests and
// benchmarks (and to compare the options the choice was made from).
enum class MatmulAlgo {
  kAuto,
  kStreaming,     // our kernels (the default for every m, see README.md for the measurements)
  kOneDnn,        // oneDNN f32 matmul on weights widened to f32 per 256-row tile
  kBf16DotLossy,  // bf16 / MXFP4 / int8 weights: vdpbf16ps with x rounded to bf16 (needs
                  // AVX512_BF16). ~3 significant digits: kAuto's bf16 products
                  // (MatmulPrecision::kBf16).
  kOneDnnBf16,    // bf16 weights only: oneDNN with x rounded to bf16 (needs AVX512_BF16).
  kAmxBf16,   // bf16 / MXFP4 / int8 weights: our AMX tiles with x rounded to bf16 (needs AMX-BF16);
              // on AMX CPUs kAuto's bf16 products (MatmulPrecision::kBf16).
  kInt8Vnni,  // MXFP4 / int8 weights: x rounded to int8 per 32-element block, vpdpbusd tiles
              // (needs AVX512_VNNI): kAuto's int8 products (MatmulPrecision::kInt8).
};
void MatmulWithAlgo(MatmulAlgo algo, const MatmulWeights& w, const float* x, int64_t m, float* y);

// True when `algo` can run on this CPU with this weight format at the current ISA cap.
bool MatmulAlgoSupported(MatmulAlgo algo, WeightFormat format);

}  // namespace strata::kernels::cpu
