// Fast CPU matrix products: y[m, n] = x[m, k] · W[n, k]ᵀ (PyTorch nn.Linear layout), f32
// activations and outputs, f32 accumulation, weights in f32, bf16 or MXFP4 used in place.
//
// One entry point, Matmul(), picks the kernel from the weight format, m and the CPU (ActiveIsa(),
// read once per call). All kernels are "dot-product" shaped: each output element is the f32 sum
// of x-row · W-row, accumulated in fixed 1024-wide k blocks in a fixed order, so
//   * the result does not depend on the thread count or on m (row i of a batch is bit-identical
//     to the same row computed alone: batching never changes a sequence's logits), and
//   * it depends only on the ISA path (AVX-512 vs AVX2 use different vector widths).
// Weights are never converted to a second copy: bf16 is widened to f32 in registers
// (x << 16 / x & 0xFFFF0000, exact) and MXFP4 is decoded in registers (vpermps over the E2M1
// table, scaled by the block's E8M0 power of two, exact) — or, when m spans several register
// tiles, decoded once per 4-row × 1024 tile into an L1-resident f32 scratch.
//
// Thread-safety: Matmul may be called concurrently from several threads; it parallelises with
// OpenMP over weight-row blocks (and row chunks of x). Steady-state decode calls do not touch
// the heap (per-thread workspaces only grow).
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

enum class WeightFormat { kF32, kBf16, kMxfp4 };

// A weight matrix as it lies in memory (a view; owns nothing).
struct MatmulWeights {
  WeightFormat format = WeightFormat::kF32;
  int64_t n = 0;                    // output features (rows of W)
  int64_t k = 0;                    // input features; MXFP4: a multiple of 32
  const void* data = nullptr;       // f32 / bf16 bits [n, k], or MXFP4 codes [n, k/2] (low nibble
                                    // = even element)
  const uint8_t* scales = nullptr;  // MXFP4 only: E8M0 [n, k/32]
};

// y[m, n] = x[m, k] · Wᵀ (overwrites y; y must not alias x).
void Matmul(const MatmulWeights& w, const float* x, int64_t m, float* y);

// Which implementation to use; kAuto is what Matmul() does. The others exist for tests and
// benchmarks (and to compare the options the choice was made from).
enum class MatmulAlgo {
  kAuto,
  kStreaming,     // our kernels (the default for every m, see README.md for the measurements)
  kOneDnn,        // oneDNN f32 matmul on weights widened to f32 per 256-row tile
  kBf16DotLossy,  // bf16 weights only: vdpbf16ps with x rounded to bf16 (needs AVX512_BF16).
                  // ~3 significant digits: measured for comparison, never chosen by kAuto.
};
void MatmulWithAlgo(MatmulAlgo algo, const MatmulWeights& w, const float* x, int64_t m, float* y);

// True when `algo` can run on this CPU with this weight format at the current ISA cap.
bool MatmulAlgoSupported(MatmulAlgo algo, WeightFormat format);

}  // namespace strata::kernels::cpu
