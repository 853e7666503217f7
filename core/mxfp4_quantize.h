// Quantising float weights to the MXFP4 layout of K3's routed experts (docs/checkpoint.md §6):
// compressed-tensors `mxfp4-pack-quantized`, groups of 32 along the input (last) dimension.
//
//   packed [rows, cols/2]  U8: two E2M1 codes per byte, LOW nibble = even input index
//   scales [rows, cols/32] U8: E8M0 exponent byte e, multiplier 2^(e-127)
//
// Each group's exponent is, of the smallest one whose 6·2^(e-127) covers the group's largest
// |w| (nothing saturates) and the one below it (the largest values saturate at ±6·2^(e-128),
// the rest get twice the resolution), the one whose codes have the smaller squared error (the
// covering one on a tie); every value rounds to the nearest E2M1 value at that scale (ties to
// the even code). On Gaussian / Laplace / Student-t(3) groups the choice lowers the RMS error
// 3 / 7 / 9 % below the covering exponent alone. The inverse is strata::DecodeMxfp4. Used by the
// checkpoint generator, by `--quantization mxfp4` at load and by `strata quantize`.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace strata {

// The E2M1 code (0..15) nearest to `scaled`; |scaled| > 6 saturates to ±6, NaN gives 0, and −0
// (or a negative value that rounds to 0) is stored as +0.
inline uint8_t NearestE2M1Code(float scaled) {
  const float m = scaled < 0.0f ? -scaled : scaled;
  // The midpoints between neighbouring E2M1 magnitudes; a tie goes to the even code, hence
  // `>` where the lower neighbour's code is even and `>=` where the upper one's is.
  const int code = (m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) +
                   (m >= 3.5f) + (m > 5.0f);
  return static_cast<uint8_t>(code != 0 && scaled < 0.0f ? code | 8 : code);
}

// The covering E8M0 byte (e + 127) of a group whose largest magnitude is `amax` (finite, ≥ 0):
// the smallest e in [−127, 127] with 6·2^e ≥ amax; 127 (scale 1) for an all-zero group.
uint8_t Mxfp4ScaleByte(float amax);

// Quantises one row of `cols` values (a multiple of 32) of dtype kF32 or kBF16 (`values` need
// not be aligned) into cols/2 packed bytes and cols/32 scale bytes. Returns false, with the
// outputs unspecified, when a value is infinite or NaN (MXFP4 has neither).
bool QuantizeMxfp4Row(DType dtype, const void* values, int64_t cols, uint8_t* packed,
                      uint8_t* scales);

struct Mxfp4Weights {
  std::vector<uint8_t> packed;  // [rows, cols/2]
  std::vector<uint8_t> scales;  // [rows, cols/32]
};

// `values` is row-major [rows, cols], finite; cols must be a multiple of 32 (CHECKed).
Mxfp4Weights QuantizeMxfp4(const std::vector<float>& values, int64_t rows, int64_t cols);

}  // namespace strata
