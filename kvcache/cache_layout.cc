#include "kvcache/cache_layout.h"

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace strata::kvcache {

int64_t CacheLayout::MlaLayerOffset(int32_t mla_layer) const {
  CHECK(mla_layer >= 0 && mla_layer < num_mla_layers) << "MLA layer " << mla_layer;
  return AlignRegion(mla_layer_bytes()) * mla_layer;
}

int64_t CacheLayout::KdaStateOffset(int32_t kda_layer) const {
  CHECK(kda_layer >= 0 && kda_layer < num_kda_layers) << "KDA layer " << kda_layer;
  int64_t kda_begin = AlignRegion(mla_layer_bytes()) * num_mla_layers;
  int64_t per_layer = AlignRegion(kda_state_bytes_per_layer * num_state_rows()) +
                      AlignRegion(kda_conv_bytes_per_layer * num_state_rows());
  return kda_begin + per_layer * kda_layer;
}

int64_t CacheLayout::KdaConvOffset(int32_t kda_layer) const {
  return KdaStateOffset(kda_layer) + AlignRegion(kda_state_bytes_per_layer * num_state_rows());
}

void CacheLayout::BlockSpans(BlockId block, std::vector<CacheSpan>* spans) const {
  CHECK(block >= 0 && block < num_blocks) << "block " << block << " of " << num_blocks;
  spans->clear();
  for (int32_t j = 0; j < num_mla_layers; ++j) {
    spans->push_back({MlaLayerOffset(j) + page_bytes() * block, page_bytes()});
  }
}

void CacheLayout::StateRowSpans(int32_t row, std::vector<CacheSpan>* spans) const {
  CHECK(row >= 0 && row < num_state_rows()) << "state row " << row << " of " << num_state_rows();
  spans->clear();
  for (int32_t j = 0; j < num_kda_layers; ++j) {
    spans->push_back(
        {KdaStateOffset(j) + kda_state_bytes_per_layer * row, kda_state_bytes_per_layer});
    spans->push_back({KdaConvOffset(j) + kda_conv_bytes_per_layer * row, kda_conv_bytes_per_layer});
  }
}

int64_t CacheLayout::TotalBytes() const {
  int64_t per_kda_layer = AlignRegion(kda_state_bytes_per_layer * num_state_rows()) +
                          AlignRegion(kda_conv_bytes_per_layer * num_state_rows());
  return AlignRegion(mla_layer_bytes()) * num_mla_layers + per_kda_layer * num_kda_layers;
}

absl::Status CacheLayout::Validate() const {
  if (num_mla_layers < 0 || num_blocks < 0 || num_kda_layers < 0 || num_slots < 0 ||
      num_checkpoints < 0 || kda_state_bytes_per_layer < 0 || kda_conv_bytes_per_layer < 0) {
    return absl::InvalidArgumentError("cache layout: counts and sizes must be >= 0");
  }
  if (block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("cache layout: block_size ", block_size));
  }
  if (!LatentDimSupported(latent_dtype, latent_dim, rope_dim)) {
    return absl::InvalidArgumentError(absl::StrCat("cache layout: latent_dim ", latent_dim,
                                                   " and rope_dim ", rope_dim,
                                                   " need 0 <= rope_dim < latent_dim"));
  }
  if (num_kda_layers > 0 && kda_state_bytes_per_layer <= 0) {
    return absl::InvalidArgumentError("cache layout: KDA layers need kda_state_bytes_per_layer");
  }
  return absl::OkStatus();
}

}  // namespace strata::kvcache
