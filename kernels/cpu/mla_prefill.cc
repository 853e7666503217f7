#include "kernels/cpu/mla_prefill.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/cpu_features.h"
#include "core/tensor.h"
#include "kernels/cpu/internal/mla_prefill_bf16.h"
#include "kernels/cpu/mla_tiles.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::kernels::cpu {
namespace {

using mla::kLaneQueries;
using mla::kLaneTileRows;
using mla::kMaxQueries;
using mla::kTileRows;

// Absorbed form: heads per work item (the rest of the 64 queries are tokens). 4 heads × 16
// tokens reuse each W_UK,h / W_UV,h read over 16 tokens; 16 × 4 was 2.2× slower on a
// 128-token prompt (K3 shapes), bound by reading the weights.
constexpr int kMaxHeadsPerItem = 4;
// Expanded form: context rows expanded at a time (320 floats each at model shapes: 320 KB, L2).
constexpr int kExpandRows = 256;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct ItemShape {
  int heads_per_item;
  int tokens_per_item;
  int num_head_blocks;
};

ItemShape ShapeFor(const MlaDims& d) {
  ItemShape s;
  s.heads_per_item = std::min(d.num_heads, kMaxHeadsPerItem);
  s.tokens_per_item = kMaxQueries / s.heads_per_item;
  s.num_head_blocks = static_cast<int>(CeilDiv(d.num_heads, s.heads_per_item));
  return s;
}

int64_t NumItems(const MlaPrefillSequence& seq, MlaPrefillForm form, const ItemShape& shape,
                 int heads) {
  if (form == MlaPrefillForm::kExpanded) return heads;
  return CeilDiv(seq.num_new_tokens, shape.tokens_per_item) * shape.num_head_blocks;
}

// A per-thread buffer that only grows (no allocation once warm).
char* ThreadBuffer(size_t bytes) {
  thread_local AlignedBuffer buffer;
  if (buffer.size() < bytes) buffer = AlignedBuffer(bytes + bytes / 4);
  return buffer.as<char>();
}

// Per-thread tile state of an absorbed work item.
struct ItemBuffers {
  float* q_abs;    // [kMaxQueries, lat_w]  q̃, then the normalised ō (r wide)
  float* acc;      // [kMaxQueries, r]
  float* max;      // [kMaxQueries]
  float* sum;      // [kMaxQueries]
  int64_t* limit;  // [kMaxQueries]
};

ItemBuffers ThreadBuffers(int lat_w, int r) {
  const size_t floats = static_cast<size_t>(kMaxQueries) * (lat_w + r + 2);
  float* f = reinterpret_cast<float*>(
      ThreadBuffer(floats * sizeof(float) + kMaxQueries * sizeof(int64_t)));
  ItemBuffers b;
  b.q_abs = f;
  b.acc = b.q_abs + kMaxQueries * lat_w;
  b.max = b.acc + kMaxQueries * r;
  b.sum = b.max + kMaxQueries;
  b.limit = reinterpret_cast<int64_t*>(b.sum + kMaxQueries);
  return b;
}

// Absorbed work item: tokens [t0, t1) × heads [h0, h1) of `seq`; query i = (t − t0)·nh + h − h0.
void RunAbsorbedItem(const mla::TileKernels& k, const MlaDims& d, float scale,
                     const MatmulWeights& w_kvb, const MlaPrefillSequence& seq, int64_t t0,
                     int64_t t1, int h0, int h1) {
  const int heads = d.num_heads, r = d.kv_lora_rank, lat_w = r + d.qk_rope_head_dim;
  const int64_t q_w = d.qk_nope_head_dim + d.qk_rope_head_dim, dv = d.v_head_dim;
  const int nt = static_cast<int>(t1 - t0), nh = h1 - h0, n = nt * nh;
  const int64_t first_pos = seq.context.num_tokens - seq.num_new_tokens;  // C
  const ItemBuffers buf = ThreadBuffers(lat_w, r);
  const float* q[kMaxQueries];
  float* out[kMaxQueries];
  for (int h = h0; h < h1; ++h) {
    for (int t = 0; t < nt; ++t) {
      q[t] = seq.q + ((t0 + t) * heads + h) * q_w;
      out[t] = buf.q_abs + (int64_t{t} * nh + h - h0) * lat_w;
    }
    mla::Absorb(k, w_kvb, h, d, q, nt, out);
  }
  std::fill(buf.acc, buf.acc + int64_t{n} * r, 0.0f);
  std::fill(buf.max, buf.max + n, -std::numeric_limits<float>::infinity());
  std::fill(buf.sum, buf.sum + n, 0.0f);
  for (int i = 0; i < n; ++i) buf.limit[i] = first_pos + t0 + i / nh + 1;
  const mla::QueryBlock qb{buf.q_abs, lat_w, buf.acc, r, buf.max, buf.sum, buf.limit, n};
  const float* rows[kTileRows];
  const int64_t end = first_pos + t1;  // the last token's causal limit
  for (int64_t row0 = 0; row0 < end; row0 += kTileRows) {
    const int num_rows = static_cast<int>(std::min<int64_t>(kTileRows, end - row0));
    GatherRows(seq.context, row0, num_rows, lat_w, rows);
    k.attend_tile(qb, rows, num_rows, row0, lat_w, 0, r, scale);
  }
  // ō = acc / l into the q̃ rows, then o = W_UV,h ō (⊙ gate) per head.
  for (int i = 0; i < n; ++i) {
    const float inv = 1.0f / buf.sum[i];
    const float* coef = &inv;
    const float* src = buf.acc + int64_t{i} * r;
    float* dst = buf.q_abs + int64_t{i} * lat_w;
    k.axpy(&dst, 1, nullptr, &coef, &src, 1, r);
  }
  const float* x[kMaxQueries];
  const float* gate[kMaxQueries];
  float* o[kMaxQueries];
  for (int h = h0; h < h1; ++h) {
    for (int t = 0; t < nt; ++t) {
      x[t] = buf.q_abs + (int64_t{t} * nh + h - h0) * lat_w;
      const int64_t col = (t0 + t) * heads * dv + h * dv;
      gate[t] = seq.gate != nullptr ? seq.gate + col : nullptr;
      o[t] = seq.o + col;
    }
    mla::UpProject(k, w_kvb, h, d, x, nt, gate, o);
  }
}

// [k_nope (dn) ; k_pe (dr) ; v (dv)] of context rows [row0, row0 + n) for one head into kv
// [n, dn + dr + dv]: k_nope = W_UK,h c, v = W_UV,h c (dot tiles over r), k_pe copied.
void ExpandRows(const mla::TileKernels& k, const MlaDims& d, const PagedLatent& ctx, int64_t row0,
                int n, const MatmulWeights& w_kvb, int h, float* kv) {
  const int dn = d.qk_nope_head_dim, dr = d.qk_rope_head_dim, dv = d.v_head_dim;
  const int r = d.kv_lora_rank, lat_w = r + dr, width = dn + dr + dv;
  const float* latent[kExpandRows];
  float* out[kExpandRows];
  static_assert(kExpandRows <= kMaxGatherRows);
  GatherRows(ctx, row0, n, lat_w, latent);
  for (int i = 0; i < n; ++i) {
    std::memcpy(kv + int64_t{i} * width + dn, latent[i] + r, sizeof(float) * dr);
  }
  const int64_t first_row = int64_t{h} * (dn + dv);
  for (int c0 = 0; c0 < dn + dv; c0 += mla::kMaxSources) {
    const int nc = std::min(mla::kMaxSources, dn + dv - c0);
    // Weight rows [0, dn) are W_UK (→ column c), [dn, dn + dv) W_UV (→ column dr + c).
    for (int c = 0; c < nc;) {
      const int col = c0 + c, split = col < dn ? std::min(nc, dn - c0) : nc;
      const int out_col = col < dn ? col : col + dr;
      for (int i = 0; i < n; ++i) out[i] = kv + int64_t{i} * width + out_col;
      mla::DotsWeightRows(k, latent, n, w_kvb, first_row + col, split - c, out);
      c = split;
    }
  }
}

// The expanded form's queries of one head, kLaneQueries tokens to a group (mla_tiles.h
// LaneBlock): group g holds tokens [g·kLaneQueries, +kLaneQueries) of the chunk, one per lane;
// lanes past the last token are padding (zero queries, never written back).
struct LaneGroups {
  int64_t count = 0;
  int key_w = 0, dv = 0;
  float* base = nullptr;  // count × GroupFloats(key_w, dv)

  static int64_t GroupFloats(int key_w, int dv) { return int64_t{kLaneQueries} * (key_w + dv + 3); }
  static int64_t Count(int64_t num_new) { return CeilDiv(num_new, kLaneQueries); }
  static size_t Bytes(int64_t num_new, int key_w, int dv) {
    return sizeof(float) * static_cast<size_t>(Count(num_new) * GroupFloats(key_w, dv));
  }
  // Per group: qt [key_w][L] | acc [dv][L] | max [L] | sum [L] | limit [L].
  float* Group(int64_t g) const { return base + g * GroupFloats(key_w, dv); }
  mla::LaneBlock Block(int64_t g, int64_t first_pos) const {
    float* f = Group(g);
    mla::LaneBlock lb;
    lb.qt = f;
    lb.acc = f + kLaneQueries * key_w;
    lb.max = lb.acc + kLaneQueries * dv;
    lb.sum = lb.max + kLaneQueries;
    lb.limit = lb.sum + kLaneQueries;
    lb.min_limit = first_pos + g * kLaneQueries + 1;  // the group's first token's limit
    return lb;
  }
};

// Group g of head h: the queries transposed, empty softmax state, limits (padding lanes take the
// last token's, so they never extend the rows the group visits).
void InitLaneGroup(const MlaDims& d, const MlaPrefillSequence& seq, int h, const LaneGroups& groups,
                   int64_t g) {
  const int key_w = groups.key_w, heads = d.num_heads;
  const int64_t first_pos = seq.context.num_tokens - seq.num_new_tokens;
  const mla::LaneBlock lb = groups.Block(g, first_pos);
  float* qt = groups.Group(g);
  float* limit = lb.sum + kLaneQueries;
  const int64_t t0 = g * kLaneQueries;
  for (int lane = 0; lane < kLaneQueries; ++lane) {
    const int64_t t = std::min(t0 + lane, seq.num_new_tokens - 1);
    const float* q = seq.q + (t * heads + h) * key_w;
    const bool real = t0 + lane < seq.num_new_tokens;
    for (int c = 0; c < key_w; ++c) qt[c * kLaneQueries + lane] = real ? q[c] : 0.0f;
    limit[lane] = static_cast<float>(t - t0);  // first_pos + t + 1 − lb.min_limit
  }
  std::fill(lb.acc, lb.acc + int64_t{kLaneQueries} * groups.dv, 0.0f);
  std::fill(lb.max, lb.max + kLaneQueries, -std::numeric_limits<float>::infinity());
  std::fill(lb.sum, lb.sum + kLaneQueries, 0.0f);
}

// Group g attends the expanded rows [row_begin, row_end) (row_begin a multiple of
// kLaneTileRows; kv holds rows from kv_row0), in kLaneTileRows tiles, up to its last token.
void AttendLaneGroup(const mla::TileKernels& k, float scale, const MlaPrefillSequence& seq,
                     const LaneGroups& groups, int64_t g, const float* kv, int64_t kv_row0,
                     int64_t row_begin, int64_t row_end) {
  const int key_w = groups.key_w, width = key_w + groups.dv;
  const int64_t first_pos = seq.context.num_tokens - seq.num_new_tokens;
  const int64_t last = std::min(seq.num_new_tokens, (g + 1) * kLaneQueries);
  const int64_t end = std::min(row_end, first_pos + last);
  const mla::LaneBlock lb = groups.Block(g, first_pos);
  const float* rows[kLaneTileRows];
  for (int64_t row0 = row_begin; row0 < end; row0 += kLaneTileRows) {
    const int n = static_cast<int>(std::min<int64_t>(kLaneTileRows, end - row0));
    for (int j = 0; j < n; ++j) rows[j] = kv + (row0 - kv_row0 + j) * width;
    k.attend_lanes(lb, rows, n, row0, key_w, key_w, groups.dv, scale);
  }
}

// o = acc / sum (⊙ sigmoid(gate)) for the group's tokens, head h.
void FinishLaneGroup(const mla::TileKernels& k, const MlaDims& d, const MlaPrefillSequence& seq,
                     int h, const LaneGroups& groups, int64_t g) {
  const int dv = groups.dv, heads = d.num_heads;
  const mla::LaneBlock lb = groups.Block(g, 0);
  const int64_t t0 = g * kLaneQueries;
  const int lanes = static_cast<int>(std::min<int64_t>(kLaneQueries, seq.num_new_tokens - t0));
  for (int lane = 0; lane < lanes; ++lane) {
    const float inv = 1.0f / lb.sum[lane];
    float* o = seq.o + ((t0 + lane) * heads + h) * dv;
    for (int c = 0; c < dv; ++c) o[c] = lb.acc[c * kLaneQueries + lane] * inv;
    if (seq.gate != nullptr) k.gate(o, seq.gate + ((t0 + lane) * heads + h) * dv, dv);
  }
}

// Expanded work item: every new token of `seq` for head h, on one thread: expand kExpandRows
// context rows at a time, every lane group attends them.
void RunExpandedItem(const mla::TileKernels& k, const MlaDims& d, float scale,
                     const MatmulWeights& w_kvb, const MlaPrefillSequence& seq, int h) {
  const int key_w = d.qk_nope_head_dim + d.qk_rope_head_dim, dv = d.v_head_dim;
  const int width = key_w + dv;
  const int64_t len = seq.context.num_tokens;
  // Thread buffer: kv [kExpandRows, width] | lane groups.
  const size_t kv_bytes = sizeof(float) * kExpandRows * width;
  char* buf = ThreadBuffer(kv_bytes + LaneGroups::Bytes(seq.num_new_tokens, key_w, dv));
  float* kv = reinterpret_cast<float*>(buf);
  const LaneGroups groups{LaneGroups::Count(seq.num_new_tokens), key_w, dv,
                          reinterpret_cast<float*>(buf + kv_bytes)};
  for (int64_t g = 0; g < groups.count; ++g) InitLaneGroup(d, seq, h, groups, g);
  for (int64_t block = 0; block < len; block += kExpandRows) {
    const int n = static_cast<int>(std::min<int64_t>(kExpandRows, len - block));
    ExpandRows(k, d, seq.context, block, n, w_kvb, h, kv);
    for (int64_t g = 0; g < groups.count; ++g) {
      AttendLaneGroup(k, scale, seq, groups, g, kv, block, block, block + n);
    }
  }
  for (int64_t g = 0; g < groups.count; ++g) FinishLaneGroup(k, d, seq, h, groups, g);
}

// The expanded form of one sequence with the threads working inside each head (for when the
// sequences' heads are too few to occupy them — the long-context model's one head): per head,
// super-blocks of context rows (~1 MB expanded, L2-sized) expanded by all threads, then
// attended by all threads, a lane group each. Every query sees the same tiles in the same order
// as in RunExpandedItem, so both give identical outputs.
void RunExpandedSplit(const mla::TileKernels& k, const MlaDims& d, float scale,
                      const MatmulWeights& w_kvb, const MlaPrefillSequence& seq) {
  const int key_w = d.qk_nope_head_dim + d.qk_rope_head_dim, dv = d.v_head_dim;
  const int width = key_w + dv;
  const int64_t len = seq.context.num_tokens, first_pos = len - seq.num_new_tokens;
  constexpr int64_t kSuperBytes = int64_t{1} << 20;
  const int64_t super_rows = std::max<int64_t>(
      kExpandRows, kSuperBytes / (int64_t{width} * 4) / kExpandRows * kExpandRows);
  const int expand_rows = static_cast<int>(std::clamp<int64_t>(
      super_rows / 8 / kLaneTileRows * kLaneTileRows, kLaneTileRows, kExpandRows));
  thread_local AlignedBuffer buffer;  // the caller's; items use ThreadBuffer
  const size_t kv_bytes = sizeof(float) * static_cast<size_t>(super_rows * width);
  const size_t bytes = kv_bytes + LaneGroups::Bytes(seq.num_new_tokens, key_w, dv);
  if (buffer.size() < bytes) buffer = AlignedBuffer(bytes + bytes / 4);
  float* kv = buffer.as<float>();
  const LaneGroups groups{LaneGroups::Count(seq.num_new_tokens), key_w, dv,
                          reinterpret_cast<float*>(buffer.as<char>() + kv_bytes)};
  for (int h = 0; h < d.num_heads; ++h) {
    ParallelFor(groups.count, true, [&](int64_t g) { InitLaneGroup(d, seq, h, groups, g); });
    for (int64_t sb = 0; sb < len; sb += super_rows) {
      const int64_t n = std::min(super_rows, len - sb);
      ParallelFor(CeilDiv(n, expand_rows), true, [&](int64_t task) {
        const int64_t row0 = sb + task * expand_rows;
        const int rows = static_cast<int>(std::min<int64_t>(expand_rows, sb + n - row0));
        ExpandRows(k, d, seq.context, row0, rows, w_kvb, h, kv + (row0 - sb) * width);
      });
      // Groups whose last token sees row sb: those from the one holding position sb on; the
      // last groups (the most rows) first.
      const int64_t first_group = std::max<int64_t>(0, sb - first_pos) / kLaneQueries;
      ParallelFor(groups.count - first_group, true, [&](int64_t i) {
        const int64_t g = groups.count - 1 - i;
        AttendLaneGroup(k, scale, seq, groups, g, kv, sb, sb, sb + n);
      });
    }
    ParallelFor(groups.count, true, [&](int64_t g) { FinishLaneGroup(k, d, seq, h, groups, g); });
  }
}

// STRATA_ISA=scalar: the f64 reference on a gathered copy of the context.
void PrefillWithReference(const MlaDims& d, float scale, const MatmulWeights& w_kvb,
                          absl::Span<const MlaPrefillSequence> seqs) {
  const int lat_w = d.kv_lora_rank + d.qk_rope_head_dim;
  const std::vector<float> w = mla::KvbAsF32(w_kvb);
  std::vector<float> context;
  for (const MlaPrefillSequence& s : seqs) {
    const int64_t len = s.context.num_tokens;
    context.resize(static_cast<size_t>(len * lat_w));
    CopyRowsF32(s.context, lat_w, context.data());
    MlaAttentionReference(s.q, context.data(), len, s.num_new_tokens, w.data(), d, scale, s.o);
    if (s.gate == nullptr) continue;
    for (int64_t c = 0; c < s.num_new_tokens * d.num_heads * d.v_head_dim; ++c) {
      s.o[c] = static_cast<float>(s.o[c] / (1.0 + std::exp(-static_cast<double>(s.gate[c]))));
    }
  }
}

}  // namespace

MlaPrefillForm MlaPrefillChooseForm(const MlaDims& d, int64_t num_cached, int64_t num_new,
                                    double expanded_speedup) {
  // FLOPs per head / 2. Both forms run on the same dot and axpy tiles at similar efficiency
  // (README: measured), so fewer FLOPs is faster.
  const double pairs = static_cast<double>(num_new) * num_cached + num_new * (num_new + 1) / 2.0;
  const double r = d.kv_lora_rank, dn = d.qk_nope_head_dim, dr = d.qk_rope_head_dim;
  const double dv = d.v_head_dim;
  const double absorbed = pairs * (2 * r + dr) + num_new * (dn + dv) * r;
  const double expanded =
      static_cast<double>(num_cached + num_new) * (dn + dv) * r + pairs * (dn + dr + dv);
  return expanded / expanded_speedup < absorbed ? MlaPrefillForm::kExpanded
                                                : MlaPrefillForm::kAbsorbed;
}

size_t MlaPrefillScratchBytes(const MlaDims& /*dims*/, absl::Span<const MlaPrefillSequence> seqs) {
  return sizeof(int64_t) * (seqs.size() + 1) + sizeof(MlaPrefillForm) * seqs.size() + 64;
}

void MlaPrefill(const MlaDims& dims, float scale, const MatmulWeights& w_kvb,
                absl::Span<const MlaPrefillSequence> seqs, void* scratch, MlaPrefillForm form) {
  if (seqs.empty()) return;
  for (const MlaPrefillSequence& s : seqs) {
    CHECK(s.num_new_tokens >= 1 && s.num_new_tokens <= s.context.num_tokens)
        << "num_new_tokens " << s.num_new_tokens << " context " << s.context.num_tokens;
  }
  const Isa isa = ActiveIsa();
  if (isa == Isa::kScalar) {
    PrefillWithReference(dims, scale, w_kvb, seqs);
    return;
  }
  const mla::TileKernels& k = mla::TileKernelsFor(isa);
  const ItemShape shape = ShapeFor(dims);
  const bool bf16 = internal::MlaPrefillUsesBf16(dims);
  // bf16 products speed up the expanded form only (README: measured on vdpbf16ps; AMX more).
  const double expanded_speedup = bf16 ? 2.0 : 1.0;
  const int64_t batch = static_cast<int64_t>(seqs.size());
  // Scratch: item_begin [B + 1] (first work item of each sequence), forms [B].
  int64_t* item_begin = static_cast<int64_t*>(scratch);
  auto* forms = reinterpret_cast<MlaPrefillForm*>(item_begin + batch + 1);
  int64_t expanded_items = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const MlaPrefillSequence& s = seqs[b];
    forms[b] = form != MlaPrefillForm::kAuto
                   ? form
                   : MlaPrefillChooseForm(dims, s.context.num_tokens - s.num_new_tokens,
                                          s.num_new_tokens, expanded_speedup);
    if (forms[b] == MlaPrefillForm::kExpanded) expanded_items += dims.num_heads;
  }
  // Too few (sequence, head) items for the threads: the expanded sequences with more than one
  // query group run split inside each head first (identical outputs, see RunExpandedSplit).
  const bool split = expanded_items < 2 * int64_t{MaxThreads()};
  item_begin[0] = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const MlaPrefillSequence& s = seqs[b];
    int64_t items = NumItems(s, forms[b], shape, dims.num_heads);
    if (split && forms[b] == MlaPrefillForm::kExpanded) {
      if (bf16 && internal::MlaBf16QueryBlocks(s.num_new_tokens) > 1) {
        internal::RunExpandedSplitBf16(dims, scale, w_kvb, s);
        items = 0;
      } else if (!bf16 && LaneGroups::Count(s.num_new_tokens) > 1) {
        RunExpandedSplit(k, dims, scale, w_kvb, s);
        items = 0;
      }
    }
    item_begin[b + 1] = item_begin[b] + items;
  }
  ParallelFor(item_begin[batch], true, [&](int64_t item) {
    const int64_t b = std::upper_bound(item_begin, item_begin + batch + 1, item) - item_begin - 1;
    const MlaPrefillSequence& seq = seqs[b];
    const int64_t local = item - item_begin[b];
    if (forms[b] == MlaPrefillForm::kExpanded) {
      if (bf16) {
        internal::RunExpandedItemBf16(dims, scale, w_kvb, seq, static_cast<int>(local));
      } else {
        RunExpandedItem(k, dims, scale, w_kvb, seq, static_cast<int>(local));
      }
      return;
    }
    // Last token tiles first: they attend the most rows (better load balance).
    const int64_t tiles = CeilDiv(seq.num_new_tokens, shape.tokens_per_item);
    const int64_t tile = tiles - 1 - local / shape.num_head_blocks;
    const int block = static_cast<int>(local % shape.num_head_blocks);
    const int64_t t0 = tile * shape.tokens_per_item;
    const int64_t t1 = std::min(seq.num_new_tokens, t0 + shape.tokens_per_item);
    const int h0 = block * shape.heads_per_item;
    const int h1 = std::min(dims.num_heads, h0 + shape.heads_per_item);
    RunAbsorbedItem(k, dims, scale, w_kvb, seq, t0, t1, h0, h1);
  });
}

}  // namespace strata::kernels::cpu
