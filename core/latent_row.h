// One token's MLA latent row as the paged caches store it (kvcache/cache_layout.h places the
// rows; the kernels read and write them). latent_dim = kv_lora_rank + rope_dim (576 = 512 + 64 in
// the releases); the first kv_lora_rank values are the normalised latent c_kv ("nope" part), the
// last rope_dim the shared rope key k_pe:
//
//   kF32, kBF16  [latent_dim] values — latent_dim * 4 or * 2 bytes
//   kFP8         FlashMLA's fp8 layout: [nope] e4m3 codes | [ceil(nope / 128)] f32 scales, one
//                per group of 128 codes (the last group may be shorter) | [rope_dim] bf16
//                = 512 + 16 + 128 = 656 bytes at 576 = 512 + 64
//
// fp8 group g holds round_to_nearest_even(c / scale_g) saturated to ±448, scale_g =
// max|c over the group| / 448 (1 for an all-zero group); a value reads back as code · scale_g.
// The rope part stays bf16: the position signal must not lose bits (FlashMLA's choice). Rows
// lie at any byte offset (row bytes need not be a multiple of 4): read scales with memcpy.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/check.h"

namespace strata {

enum class LatentDType : uint8_t { kF32, kBF16, kFP8 };

inline constexpr int32_t kFp8GroupSize = 128;  // codes per f32 scale
inline constexpr float kFp8E4M3Max = 448.0f;   // the largest finite e4m3 value

// "f32", "bf16", "fp8".
std::string_view LatentDTypeName(LatentDType dtype);
// The names above and vLLM's `--kv-cache-dtype` spellings: "float32", "bfloat16", "fp8_e4m3",
// "fp8_ds_mla" (FlashMLA's layout, which kFP8 is). nullopt for anything else ("auto" included:
// that one is the caller's to resolve).
std::optional<LatentDType> LatentDTypeFromName(std::string_view name);
// Whether a row of latent_dim values ending in rope_dim rope values has a layout in `dtype`
// (0 ≤ rope_dim < latent_dim).
inline bool LatentDimSupported(LatentDType /*dtype*/, int32_t latent_dim, int32_t rope_dim) {
  return latent_dim > 0 && rope_dim >= 0 && rope_dim < latent_dim;  // the same for every format
}
// fp8: number of scales of a row (ceil((latent_dim - rope_dim) / 128)).
inline int32_t Fp8NumGroups(int32_t latent_dim, int32_t rope_dim) {
  return (latent_dim - rope_dim + kFp8GroupSize - 1) / kFp8GroupSize;
}
// Bytes of one token's row in one MLA layer (the table above). CHECKs LatentDimSupported.
// Inline: the kernels compute row addresses with it.
inline int64_t LatentBytesPerToken(LatentDType dtype, int32_t latent_dim, int32_t rope_dim) {
  CHECK(LatentDimSupported(dtype, latent_dim, rope_dim))
      << "latent rows need 0 <= rope_dim < latent_dim, got rope_dim " << rope_dim << ", latent_dim "
      << latent_dim;
  switch (dtype) {
    case LatentDType::kF32:
      return int64_t{4} * latent_dim;
    case LatentDType::kBF16:
      return int64_t{2} * latent_dim;
    case LatentDType::kFP8:
      return int64_t{latent_dim - rope_dim} + int64_t{4} * Fp8NumGroups(latent_dim, rope_dim) +
             int64_t{2} * rope_dim;
  }
  return 0;
}

}  // namespace strata
