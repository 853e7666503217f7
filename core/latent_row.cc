#include "core/latent_row.h"

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

}  // namespace strata
