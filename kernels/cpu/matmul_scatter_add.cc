// MatmulScatterAddGrouped: x packed per group, then one task per block of y columns; a task runs
// every group's tiles for its columns into a buffer and adds the weighted rows into y (groups on
// AMX: their tiles add into y themselves, internal::AmxScatterAddColumns).
#include "kernels/cpu/matmul_scatter_add.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/cpu_features.h"
#include "kernels/cpu/internal/amx_tiles.h"
#include "kernels/cpu/internal/matmul_driver.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::kernels::cpu {
namespace {

using internal::KernelSet;
using internal::PackedX;
using internal::ScratchSlot;

constexpr int64_t kMaxBlockColumns = 512;

struct GroupPlan {
  bool amx = false;  // bf16 products on AMX tiles: x packed by PackXForAmxInto
  KernelSet kernels;
  PackedX x;
  size_t x_offset = 0;  // bytes into the packed-x scratch
  bool decode_to_scratch = false;
  int64_t chunk_rows = 0;
};

std::vector<GroupPlan>& PlanStorage(size_t count) {
  thread_local std::vector<GroupPlan> plans;
  if (plans.size() < count) plans.resize(count);
  return plans;
}

bool Active(const ScatterAddGroup& g) { return g.m > 0 && g.w.k > 0; }

// y[rows[i], :width] += scale[i] · block[i, :width], one fused multiply-add per element (the
// documented rounding: tests and callers can reproduce it exactly).
void AddRows(const ScatterAddGroup& g, int64_t i0, int64_t i1, const float* block, int64_t width,
             int64_t j0, int64_t n, float* y) {
  for (int64_t i = i0; i < i1; ++i) {
    const float s = g.scale != nullptr ? g.scale[i] : 1.0f;
    float* dst = y + (g.rows != nullptr ? g.rows[i] : i) * n + j0;
    const float* src = block + (i - i0) * width;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) dst[c] = std::fma(s, src[c], dst[c]);
  }
}

// Columns [j0, j1) of every group, in group order.
void RunColumns(const ScatterAddGroup* groups, int64_t num_groups, const GroupPlan* plans,
                int64_t j0, int64_t j1, int64_t n, float* y) {
  const int64_t width = j1 - j0;
  bool prefetched = false;  // this group's AMX rows, by the previous group's call
  for (int64_t gi = 0; gi < num_groups; ++gi) {
    const ScatterAddGroup& g = groups[gi];
    if (!Active(g)) continue;
    const GroupPlan& p = plans[gi];
    if (p.amx) {
      // The next group this task runs, if on AMX too: its rows and x are prefetched meanwhile.
      internal::AmxPrefetchNext next;
      int64_t ni = gi + 1;
      while (ni < num_groups && !Active(groups[ni])) ++ni;
      if (ni < num_groups && plans[ni].amx) {
        next = {&groups[ni].w, static_cast<const uint32_t*>(plans[ni].x.data),
                internal::PackedXForAmxWords(groups[ni].w.k, groups[ni].m)};
      }
      internal::AmxScatterAddColumns(g.w, static_cast<const uint32_t*>(p.x.data), g.m, g.rows,
                                     g.scale, j0, j1, n, y, prefetched, next);
      prefetched = next.w != nullptr;
      continue;
    }
    float* block = static_cast<float*>(internal::ThreadScratch(
        ScratchSlot::kBlockOut,
        static_cast<size_t>(std::min(g.m, p.chunk_rows) * width) * sizeof(float)));
    for (int64_t i0 = 0; i0 < g.m; i0 += p.chunk_rows) {
      const int64_t i1 = std::min(g.m, i0 + p.chunk_rows);
      internal::RunBlock(p.kernels, p.decode_to_scratch, g.w, nullptr, p.x, i0, i1, j0, j1, block,
                         width);
      AddRows(g, i0, i1, block, width, j0, n, y);
    }
  }
}

// Scalar ISA: Matmul (the reference there) into a temporary, then the weighted adds.
void ScatterAddReference(const ScatterAddGroup* groups, int64_t num_groups, int64_t n, float* y) {
  for (int64_t gi = 0; gi < num_groups; ++gi) {
    const ScatterAddGroup& g = groups[gi];
    if (!Active(g)) continue;
    std::vector<float> out(static_cast<size_t>(g.m * n));
    Matmul(g.w, g.x, g.m, out.data());
    AddRows(g, 0, g.m, out.data(), n, 0, n, y);
  }
}

}  // namespace

void MatmulScatterAddGrouped(const ScatterAddGroup* groups, int64_t num_groups, int64_t n,
                             float* y) {
  CHECK_GE(n, 0);
  for (int64_t gi = 0; gi < num_groups; ++gi) {
    internal::CheckWeights(groups[gi].w);
    CHECK_EQ(groups[gi].w.n, n) << "every group's W must have n rows";
    CHECK_GE(groups[gi].m, 0);
  }
  if (n == 0 || num_groups == 0) return;
  const Isa isa = ActiveIsa();
  if (isa == Isa::kScalar) {
    ScatterAddReference(groups, num_groups, n, y);
    return;
  }
  GroupPlan* plans = PlanStorage(static_cast<size_t>(num_groups)).data();
  size_t packed_bytes = 0;
  int64_t weight_bytes = 0, macs = 0;
  bool any_amx = false;
  for (int64_t gi = 0; gi < num_groups; ++gi) {
    const ScatterAddGroup& g = groups[gi];
    GroupPlan& p = plans[gi];
    p = GroupPlan{};
    if (!Active(g)) continue;
    p.x_offset = packed_bytes;
    // Bf16 products on AMX (--cpu-matmul-precision bf16) where the group qualifies
    // (matmul_driver.h): x in AMX's operand layout, its columns of each task on the AMX tiles.
    p.amx = internal::UseAmxProducts(isa, g.w.format, g.m);
    any_amx = any_amx || p.amx;
    if (p.amx) {
      packed_bytes +=
          static_cast<size_t>(internal::PackedXForAmxWords(g.w.k, g.m)) * sizeof(uint32_t);
    } else {
      p.kernels = internal::KernelsFor(isa, g.w.format, g.m);
      p.x.ldx = internal::PackedRowElements(*p.kernels.tiles, g.w.k);
      packed_bytes +=
          static_cast<size_t>(g.m * p.x.ldx) * internal::PackedElementBytes(*p.kernels.tiles);
      p.chunk_rows = internal::ChunkRows(*p.kernels.tiles, p.x.ldx);
      p.decode_to_scratch = internal::DecodeToScratch(p.kernels, std::min(g.m, p.chunk_rows));
    }
    packed_bytes = (packed_bytes + 63) / 64 * 64;
    weight_bytes += n * internal::WeightRowBytes(g.w);
    macs += g.m * n * g.w.k;
  }
  if (weight_bytes == 0) return;
  char* packed = static_cast<char*>(internal::ThreadScratch(ScratchSlot::kPackedX, packed_bytes));
  ParallelFor(num_groups, num_groups > 1 && macs >= (int64_t{1} << 24), [&](int64_t gi) {
    const ScatterAddGroup& g = groups[gi];
    if (!Active(g)) return;
    if (plans[gi].amx) {
      internal::PackXForAmxInto(g.x, g.w.k, nullptr, g.m,
                                reinterpret_cast<uint32_t*>(packed + plans[gi].x_offset));
      return;
    }
    internal::PackRows(*plans[gi].kernels.tiles, g.x, g.w.k, nullptr, 0, g.m,
                       packed + plans[gi].x_offset);
  });
  for (int64_t gi = 0; gi < num_groups; ++gi) plans[gi].x.data = packed + plans[gi].x_offset;
  // A task reads block_cols contiguous rows of every group's W, so blocks must stay long enough
  // to stream (a short run per group is latency-bound: each group's first slice is not
  // prefetched): 8 tasks per thread, more only for very large products (≥ 1 MB per task).
  const int64_t tasks =
      std::clamp<int64_t>(weight_bytes / (int64_t{1} << 20), 8 * int64_t{MaxThreads()}, n);
  int64_t block_cols = std::max<int64_t>(1, (n + tasks - 1) / tasks);
  block_cols = std::min(kMaxBlockColumns, (block_cols + 3) / 4 * 4);
  if (any_amx) {
    // AMX blocks are 32 W rows; a task runs up to 4 of them per group, so each group's x rows are
    // read (from L3) by fewer tasks — 4 tasks per thread at least.
    const int64_t per_task = (n + 4 * int64_t{MaxThreads()} - 1) / (4 * int64_t{MaxThreads()});
    block_cols = std::clamp<int64_t>((per_task + 31) / 32 * 32, 32, 128);
  }
  const int64_t num_blocks = (n + block_cols - 1) / block_cols;
  ParallelFor(num_blocks, internal::WorthParallel(weight_bytes, macs), [&](int64_t b) {
    RunColumns(groups, num_groups, plans, b * block_cols, std::min(n, (b + 1) * block_cols), n, y);
  });
}

}  // namespace strata::kernels::cpu
