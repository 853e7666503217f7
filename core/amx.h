// AMX tile configuration shared by the AMX kernels and the AMX ceiling probe. Call only where
// CpuFeatures::amx_bf16 holds (the CPU has AMX and Linux granted this process the tile data).
#pragma once

#include <cstdint>

#include "core/avx512_intrinsics.h"

namespace strata {

// LDTILECFG's 64-byte operand (palette 1).
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Configures this thread's eight tiles as 16 rows × 64 bytes (16 × 32 bf16, or 16 × 16 f32).
// Pair with _tile_release() when the thread is done with them.
__attribute__((target("amx-tile"))) inline void ConfigureAmxTiles16x64() {
  AmxTileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

}  // namespace strata
