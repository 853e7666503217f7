// MatmulGlu / MatmulGluGrouped: tasks = (group, chunk of x rows, block of W1/W3 rows); a task
// runs the paired tiles into its buffer, then applies the activation row by row into h.
#include "kernels/cpu/matmul_glu.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/cpu_features.h"
#include "kernels/cpu/internal/glu_act.h"
#include "kernels/cpu/internal/matmul_driver.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/reference/matmul.h"

namespace strata::kernels::cpu {
namespace {

using internal::KernelSet;
using internal::PackedX;
using internal::ScratchSlot;

constexpr int64_t kMaxBlockColumns = 512;  // bounds a task's buffer (64 rows × 2 × 512 floats)
constexpr int64_t kPackRowsPerTask = 16;

struct GroupPlan {
  KernelSet kernels;
  PackedX x;
  size_t x_offset = 0;  // bytes into the packed-x scratch
  bool decode_to_scratch = false;
  int64_t chunk_rows = 0, num_chunks = 0, block_cols = 0, num_blocks = 0;
  int64_t first_task = 0, first_pack_task = 0;
};

// Per calling thread, only grows: no allocation in steady state.
std::vector<GroupPlan>& PlanStorage(size_t count) {
  thread_local std::vector<GroupPlan> plans;
  if (plans.size() < count) plans.resize(count);
  return plans;
}

bool Active(const GluGroup& g) { return g.m > 0 && g.gate.n > 0 && g.gate.k > 0; }

// Scalar ISA: the reference products and activation.
void GluReferenceFallback(const GluGroup& g, const GluParams& act) {
  std::vector<float> x(static_cast<size_t>(g.m * g.gate.k));
  for (int64_t i = 0; i < g.m; ++i) {
    std::copy_n(g.x + (g.rows != nullptr ? g.rows[i] : i) * g.gate.k, g.gate.k,
                x.begin() + i * g.gate.k);
  }
  std::vector<float> gate(static_cast<size_t>(g.m * g.gate.n)), up(gate.size());
  MatmulWithAlgo(MatmulAlgo::kAuto, g.gate, x.data(), g.m, gate.data());
  MatmulWithAlgo(MatmulAlgo::kAuto, g.up, x.data(), g.m, up.data());
  GluReference(gate.data(), up.data(), static_cast<int64_t>(gate.size()), act, g.h);
}

// Plans every active group; returns the total (pack tasks, product tasks) and packed bytes.
struct Totals {
  int64_t pack_tasks = 0, tasks = 0, weight_bytes = 0, macs = 0;
  size_t packed_bytes = 0;
};
Totals PlanGroups(const GluGroup* groups, int64_t num_groups, Isa isa, GroupPlan* plans) {
  Totals t;
  int64_t active = 0;
  for (int64_t gi = 0; gi < num_groups; ++gi) active += Active(groups[gi]) ? 1 : 0;
  const int64_t min_tasks =
      (4 * int64_t{MaxThreads()} + std::max<int64_t>(active, 1) - 1) / std::max<int64_t>(active, 1);
  for (int64_t gi = 0; gi < num_groups; ++gi) {
    const GluGroup& g = groups[gi];
    GroupPlan& p = plans[gi];
    p = GroupPlan{};
    p.first_task = t.tasks;
    p.first_pack_task = t.pack_tasks;
    if (!Active(g)) continue;
    p.kernels = internal::KernelsFor(isa, g.gate.format, g.m);
    const internal::TileKernels& own = *p.kernels.tiles;
    p.x.ldx = internal::PackedRowElements(own, g.gate.k);
    p.x_offset = t.packed_bytes;
    t.packed_bytes += static_cast<size_t>(g.m * p.x.ldx) * internal::PackedElementBytes(own);
    t.packed_bytes = (t.packed_bytes + 63) / 64 * 64;
    p.chunk_rows = internal::ChunkRows(own, p.x.ldx);
    p.decode_to_scratch = internal::DecodeToScratch(p.kernels, std::min(g.m, p.chunk_rows));
    p.num_chunks = (g.m + p.chunk_rows - 1) / p.chunk_rows;
    const int64_t row_bytes = internal::WeightRowBytes(g.gate);
    p.block_cols = std::min(
        kMaxBlockColumns,
        internal::BlockColumns(g.gate.n, 2 * row_bytes, p.num_chunks, min_tasks, own.nr_max / 2));
    p.num_blocks = (g.gate.n + p.block_cols - 1) / p.block_cols;
    t.tasks += p.num_chunks * p.num_blocks;
    t.pack_tasks += (g.m + kPackRowsPerTask - 1) / kPackRowsPerTask;
    t.weight_bytes += 2 * g.gate.n * row_bytes;
    t.macs += 2 * g.m * g.gate.n * g.gate.k;
  }
  return t;
}

// One task: rows [i0, i1) × columns [j0, j1) of group g.
void RunGluTask(const GluGroup& g, const GroupPlan& p, int64_t local_task, const GluParams& act,
                internal::GluActFn act_fn) {
  const int64_t c = local_task % p.num_chunks, b = local_task / p.num_chunks;
  const int64_t i0 = c * p.chunk_rows, i1 = std::min(g.m, i0 + p.chunk_rows);
  const int64_t j0 = b * p.block_cols, j1 = std::min(g.gate.n, j0 + p.block_cols);
  const int64_t width = j1 - j0;
  float* buffer = static_cast<float*>(internal::ThreadScratch(
      ScratchSlot::kBlockOut, static_cast<size_t>((i1 - i0 + 1) * 2 * width) * sizeof(float)));
  internal::RunBlock(p.kernels, p.decode_to_scratch, g.gate, &g.up, p.x, i0, i1, j0, j1, buffer,
                     2 * width);
  float* gate = buffer + (i1 - i0) * 2 * width;
  float* up = gate + width;
  const int nr_max = p.kernels.tiles->nr_max;
  for (int64_t i = i0; i < i1; ++i) {
    const float* row = buffer + (i - i0) * 2 * width;
    for (int64_t col = 0; col < width; ++col) {
      const internal::PairedOffsets o = internal::PairedColumn(col, width, nr_max);
      gate[col] = row[o.a];
      up[col] = row[o.b];
    }
    act_fn(gate, up, width, act, g.h + i * g.gate.n + j0);
  }
}

void CheckGroup(const GluGroup& g) {
  internal::CheckWeights(g.gate);
  internal::CheckWeights(g.up);
  CHECK(g.gate.format == g.up.format && g.gate.n == g.up.n && g.gate.k == g.up.k)
      << "gate and up must have the same format and shape";
  CHECK_GE(g.m, 0);
  CHECK(g.m == 0 || g.gate.n == 0 || g.h != nullptr);
}

// True for a group whose bf16 products run on AMX tiles (matmul_driver.h).
bool OnAmx(const GluGroup& g, Isa isa) {
  return Active(g) && internal::UseAmxProducts(isa, g.gate.format, g.m);
}

// The groups on AMX together (internal::MatmulAmxBf16Glu): one parallel loop packs their rows,
// one runs every group's gate and up products with the activation in the tasks.
void RunGroupsOnAmx(const GluGroup* groups, int64_t num_groups, Isa isa, const GluParams& act) {
  thread_local std::vector<GluGroup> on_amx;
  on_amx.clear();
  for (int64_t gi = 0; gi < num_groups; ++gi) {
    if (OnAmx(groups[gi], isa)) on_amx.push_back(groups[gi]);
  }
  internal::MatmulAmxBf16Glu(on_amx.data(), static_cast<int64_t>(on_amx.size()), act);
}

}  // namespace

void MatmulGluGrouped(const GluGroup* groups, int64_t num_groups, const GluParams& act) {
  const Isa isa = ActiveIsa();
  for (int64_t gi = 0; gi < num_groups; ++gi) {
    const GluGroup& g = groups[gi];
    CheckGroup(g);
    // k = 0: g = u = 0 and act(0) = 0. Scalar ISA: the reference, group by group.
    if (g.m > 0 && g.gate.n > 0 && g.gate.k == 0) std::fill_n(g.h, g.m * g.gate.n, 0.0f);
    if (isa == Isa::kScalar && Active(g)) GluReferenceFallback(g, act);
  }
  if (isa == Isa::kScalar || num_groups == 0) return;
  const bool avx512 = isa >= Isa::kAvx512;
  const internal::GluActFn act_fn = avx512 ? &internal::GluActAvx512 : &internal::GluActAvx2;
  // Groups of bf16 products on AMX (--cpu-matmul-precision bf16) run together on the AMX tiles;
  // the others below, together.
  bool any_on_amx = false;
  for (int64_t gi = 0; gi < num_groups; ++gi) any_on_amx = any_on_amx || OnAmx(groups[gi], isa);
  if (any_on_amx) {
    RunGroupsOnAmx(groups, num_groups, isa, act);
    thread_local std::vector<GluGroup> rest;
    rest.clear();
    for (int64_t gi = 0; gi < num_groups; ++gi) {
      if (!OnAmx(groups[gi], isa)) rest.push_back(groups[gi]);
    }
    if (rest.empty()) return;
    groups = rest.data();
    num_groups = static_cast<int64_t>(rest.size());
  }

  GroupPlan* plans = PlanStorage(static_cast<size_t>(num_groups)).data();
  const Totals totals = PlanGroups(groups, num_groups, isa, plans);
  if (totals.tasks == 0) return;
  char* packed =
      static_cast<char*>(internal::ThreadScratch(ScratchSlot::kPackedX, totals.packed_bytes));
  for (int64_t gi = 0; gi < num_groups; ++gi) plans[gi].x.data = packed + plans[gi].x_offset;

  ParallelFor(totals.pack_tasks, totals.pack_tasks > 1 && totals.macs >= (int64_t{1} << 24),
              [&](int64_t task) {
                const int64_t gi = internal::OwnerOf(
                    task, num_groups, [&](int64_t i) { return plans[i].first_pack_task; });
                const GluGroup& g = groups[gi];
                const int64_t i0 = (task - plans[gi].first_pack_task) * kPackRowsPerTask;
                internal::PackRows(*plans[gi].kernels.tiles, g.x, g.gate.k, g.rows, i0,
                                   std::min(g.m, i0 + kPackRowsPerTask),
                                   packed + plans[gi].x_offset);
              });
  ParallelFor(
      totals.tasks, internal::WorthParallel(totals.weight_bytes, totals.macs), [&](int64_t task) {
        const int64_t gi =
            internal::OwnerOf(task, num_groups, [&](int64_t i) { return plans[i].first_task; });
        RunGluTask(groups[gi], plans[gi], task - plans[gi].first_task, act, act_fn);
      });
}

void MatmulGlu(const MatmulWeights& gate, const MatmulWeights& up, const GluParams& act,
               const float* x, int64_t m, float* h) {
  GluGroup g;
  g.gate = gate;
  g.up = up;
  g.x = x;
  g.m = m;
  g.h = h;
  MatmulGluGrouped(&g, 1, act);
}

}  // namespace strata::kernels::cpu
