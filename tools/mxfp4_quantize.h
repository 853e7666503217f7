// Quantising float weights to the MXFP4 layout of K3's routed experts (CHECKPOINT.md §6):
// compressed-tensors `mxfp4-pack-quantized`, groups of 32 along the input (last) dimension.
//
//   packed [rows, cols/2]  U8: two E2M1 codes per byte, LOW nibble = even input index
//   scales [rows, cols/32] U8: E8M0 exponent byte e, multiplier 2^(e-127)
//
// Each group's exponent is the smallest one whose 6·2^(e-127) covers the group's largest |w|,
// so nothing saturates; every value then rounds to the nearest E2M1 value (ties to the even
// code). The inverse is strata::DecodeMxfp4 (core/dtype.h).
#pragma once

#include <cstdint>
#include <vector>

namespace strata::tools {

struct Mxfp4Weights {
  std::vector<uint8_t> packed;  // [rows, cols/2]
  std::vector<uint8_t> scales;  // [rows, cols/32]
};

// `values` is row-major [rows, cols]; cols must be a multiple of 32 (CHECKed).
Mxfp4Weights QuantizeMxfp4(const std::vector<float>& values, int64_t rows, int64_t cols);

// The E2M1 code (0..15) nearest to `scaled` (|scaled| ≤ 6 expected; larger values saturate).
uint8_t NearestE2M1Code(float scaled);

}  // namespace strata::tools
