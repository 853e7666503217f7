// MakeTileTable: fills a TileKernels table with Tile<mr, nr>::Run for every mr ≤ MRMax,
// nr ≤ NRMax (the tails of m and n use the smaller tiles).
#pragma once

#include <utility>

#include "kernels/cpu/internal/matmul_tiles.h"

namespace strata::kernels::cpu::internal {

template <template <int, int> class Tile, int NRMax, int... E>
void FillTileTable(TileKernels& k, std::integer_sequence<int, E...>) {
  ((k.tiles[E / NRMax][E % NRMax] = &Tile<E / NRMax + 1, E % NRMax + 1>::Run), ...);
}

template <template <int, int> class Tile, int MRMax, int NRMax>
TileKernels MakeTileTable(XLayout layout, int x_block, PackRowFn pack_row) {
  static_assert(MRMax <= kMaxTileRows && NRMax <= kMaxTileCols);
  TileKernels k;
  k.mr_max = MRMax;
  k.nr_max = NRMax;
  k.x_layout = layout;
  k.x_block = x_block;
  k.pack_row = pack_row;
  FillTileTable<Tile, NRMax>(k, std::make_integer_sequence<int, MRMax * NRMax>{});
  return k;
}

}  // namespace strata::kernels::cpu::internal
