#include "kernels/reference/latent_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"

namespace strata::kernels {
namespace {

// Rows lie at any byte offset: every multi-byte value goes through memcpy.
void PutBf16(float value, std::byte* at) {
  const uint16_t bits = F32ToBf16(value);
  std::memcpy(at, &bits, 2);
}

float GetBf16(const std::byte* at) {
  uint16_t bits;
  std::memcpy(&bits, at, 2);
  return Bf16ToF32(bits);
}

}  // namespace

float Fp8GroupScaleReference(const float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
}

void EncodeLatentRowReference(LatentDType dtype, const float* row, int32_t latent_dim,
                              int32_t rope_dim, void* dst) {
  CHECK(LatentDimSupported(dtype, latent_dim, rope_dim)) << "latent_dim " << latent_dim;
  auto* out = static_cast<std::byte*>(dst);
  switch (dtype) {
    case LatentDType::kF32:
      std::memcpy(out, row, sizeof(float) * latent_dim);
      return;
    case LatentDType::kBF16:
      for (int32_t i = 0; i < latent_dim; ++i) PutBf16(row[i], out + 2 * i);
      return;
    case LatentDType::kFP8: {
      const int32_t nope = latent_dim - rope_dim, groups = Fp8NumGroups(latent_dim, rope_dim);
      std::byte* scales = out + nope;
      std::byte* rope = scales + 4 * groups;
      for (int32_t g = 0; g < groups; ++g) {
        const int32_t begin = g * kFp8GroupSize, end = std::min(nope, begin + kFp8GroupSize);
        const float scale = Fp8GroupScaleReference(row + begin, end - begin);
        std::memcpy(scales + 4 * g, &scale, 4);
        for (int32_t i = begin; i < end; ++i) {
          out[i] = static_cast<std::byte>(F32ToF8E4M3(row[i] / scale));
        }
      }
      for (int32_t i = 0; i < rope_dim; ++i) PutBf16(row[nope + i], rope + 2 * i);
      return;
    }
  }
}

void DecodeLatentRowReference(LatentDType dtype, const void* src, int32_t latent_dim,
                              int32_t rope_dim, float* row) {
  CHECK(LatentDimSupported(dtype, latent_dim, rope_dim)) << "latent_dim " << latent_dim;
  const auto* in = static_cast<const std::byte*>(src);
  switch (dtype) {
    case LatentDType::kF32:
      std::memcpy(row, in, sizeof(float) * latent_dim);
      return;
    case LatentDType::kBF16:
      for (int32_t i = 0; i < latent_dim; ++i) row[i] = GetBf16(in + 2 * i);
      return;
    case LatentDType::kFP8: {
      const int32_t nope = latent_dim - rope_dim, groups = Fp8NumGroups(latent_dim, rope_dim);
      const std::byte* scales = in + nope;
      const std::byte* rope = scales + 4 * groups;
      for (int32_t i = 0; i < nope; ++i) {
        float scale;
        std::memcpy(&scale, scales + 4 * (i / kFp8GroupSize), 4);
        row[i] = F8E4M3ToF32(static_cast<uint8_t>(in[i])) * scale;
      }
      for (int32_t i = 0; i < rope_dim; ++i) row[nope + i] = GetBf16(rope + 2 * i);
      return;
    }
  }
}

}  // namespace strata::kernels
