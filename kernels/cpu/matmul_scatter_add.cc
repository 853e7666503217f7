// MatmulScatterAddGrouped: x packed per group, then one task per block of y columns; a task runs
// every group's tiles for its columns into a buffer and adds the weighted rows into y.
#include "kernels/cpu/matmul_scatter_add.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/cpu_features.h"
#include "kernels/cpu/internal/matmul_driver.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::kernels::cpu {
namespace {

using internal::KernelSet;
using internal::PackedX;
using internal::ScratchSlot;

constexpr int64_t kMaxBlockColumns = 512;

struct GroupPlan {
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
  for (int64_t gi = 0; gi < num_groups; ++gi) {
    const ScatterAddGroup& g = groups[gi];
    if (!Active(g)) continue;
    const GroupPlan& p = plans[gi];
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

// True for a group whose bf16 products run on AMX tiles (matmul_driver.h).
bool OnAmx(const ScatterAddGroup& g, Isa isa) {
  return g.m > 0 && g.w.k > 0 && internal::UseAmxProducts(isa, g.w.format, g.m);
}

// The products of the groups on AMX, all in one parallel loop: the q-th such group's (in order)
// at products[q].y.
const std::vector<internal::AmxProduct>& AmxProducts(const ScatterAddGroup* groups,
                                                     int64_t num_groups, Isa isa) {
  thread_local std::vector<internal::AmxGroup> specs;
  specs.clear();
  for (int64_t gi = 0; gi < num_groups; ++gi) {
    const ScatterAddGroup& g = groups[gi];
    if (OnAmx(g, isa)) specs.push_back({g.x, g.w.k, nullptr, g.m, {g.w, {}}, 1});
  }
  return internal::MatmulAmxBf16Groups(specs.data(), static_cast<int64_t>(specs.size()));
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
  // Bf16 products on AMX (--cpu-matmul-precision bf16): those groups' products first, together on
  // the AMX tiles; then, in the given order, each added and the runs of groups between them added
  // together below (each element still sees the groups in that order).
  bool any_on_amx = false;
  for (int64_t gi = 0; gi < num_groups; ++gi) any_on_amx = any_on_amx || OnAmx(groups[gi], isa);
  if (any_on_amx) {
    const std::vector<internal::AmxProduct>& products = AmxProducts(groups, num_groups, isa);
    size_t q = 0;
    int64_t start = 0;  // the first group not added yet
    for (int64_t gi = 0; gi < num_groups; ++gi) {
      if (!OnAmx(groups[gi], isa)) continue;
      MatmulScatterAddGrouped(groups + start, gi - start, n, y);
      AddRows(groups[gi], 0, groups[gi].m, products[q++].y, n, 0, n, y);
      start = gi + 1;
    }
    groups += start;
    num_groups -= start;
    if (num_groups == 0) return;
  }
  GroupPlan* plans = PlanStorage(static_cast<size_t>(num_groups)).data();
  size_t packed_bytes = 0;
  int64_t weight_bytes = 0, macs = 0;
  for (int64_t gi = 0; gi < num_groups; ++gi) {
    const ScatterAddGroup& g = groups[gi];
    GroupPlan& p = plans[gi];
    p = GroupPlan{};
    if (!Active(g)) continue;
    p.kernels =
        internal::SelectKernels(isa, g.w.format, internal::UseBf16Tiles(isa, g.w.format, g.m));
    p.x.ldx = internal::PackedRowElements(*p.kernels.tiles, g.w.k);
    p.x_offset = packed_bytes;
    packed_bytes +=
        static_cast<size_t>(g.m * p.x.ldx) * internal::PackedElementBytes(*p.kernels.tiles);
    packed_bytes = (packed_bytes + 63) / 64 * 64;
    p.chunk_rows = internal::ChunkRows(*p.kernels.tiles, p.x.ldx);
    p.decode_to_scratch = internal::DecodeToScratch(p.kernels, std::min(g.m, p.chunk_rows));
    weight_bytes += n * internal::WeightRowBytes(g.w);
    macs += g.m * n * g.w.k;
  }
  if (weight_bytes == 0) return;
  char* packed = static_cast<char*>(internal::ThreadScratch(ScratchSlot::kPackedX, packed_bytes));
  ParallelFor(num_groups, num_groups > 1 && macs >= (int64_t{1} << 24), [&](int64_t gi) {
    const ScatterAddGroup& g = groups[gi];
    if (!Active(g)) return;
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
  const int64_t num_blocks = (n + block_cols - 1) / block_cols;
  ParallelFor(num_blocks, internal::WorthParallel(weight_bytes, macs), [&](int64_t b) {
    RunColumns(groups, num_groups, plans, b * block_cols, std::min(n, (b + 1) * block_cols), n, y);
  });
}

}  // namespace strata::kernels::cpu
