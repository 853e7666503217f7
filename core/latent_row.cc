#include "core/latent_row.h"

#include "core/check.h"

namespace strata {

std::string_view LatentDTypeName(LatentDType dtype) {
  switch (dtype) {
    case LatentDType::kF32:
      return "f32";
    case LatentDType::kBF16:
      return "bf16";
    case LatentDType::kFP8:
      return "fp8";
  }
  return "?";
}

std::optional<LatentDType> LatentDTypeFromName(std::string_view name) {
  if (name == "f32" || name == "float32") return LatentDType::kF32;
  if (name == "bf16" || name == "bfloat16") return LatentDType::kBF16;
  if (name == "fp8" || name == "fp8_e4m3" || name == "fp8_ds_mla") return LatentDType::kFP8;
  return std::nullopt;
}

bool LatentDimSupported(LatentDType dtype, int32_t latent_dim, int32_t rope_dim) {
  (void)dtype;  // every format splits the row the same way
  return latent_dim > 0 && rope_dim >= 0 && rope_dim < latent_dim;
}

int64_t LatentBytesPerToken(LatentDType dtype, int32_t latent_dim, int32_t rope_dim) {
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
