// libFuzzer target: ParseModelConfig then Validate on arbitrary text (built by
// tests/fuzz/run_fuzz.sh). A config that validates must be safe to walk layer by layer.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "engine/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = strata::engine::ParseModelConfig(text, "config.json");
  if (!config.ok()) {
    CHECK(!config.status().message().empty());
    return 0;
  }
  if (!config->Validate().ok()) return 0;
  CHECK_EQ(config->layer_mixer.size(), static_cast<size_t>(config->num_layers));
  CHECK_EQ(config->NumKdaLayers() + config->NumMlaLayers(), config->num_layers);
  int num_moe = 0;
  for (int layer = 0; layer < config->num_layers; ++layer) num_moe += config->IsMoe(layer);
  CHECK_GE(config->kda.projection_size(), 1);
  CHECK_GE(config->mla.num_heads * config->mla.qk_head_dim(), 1);
  CHECK_GE(config->mla.latent_dim(), 1);
  CHECK_LE(num_moe, config->num_layers);
  return 0;
}
