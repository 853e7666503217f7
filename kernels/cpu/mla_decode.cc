#include "kernels/cpu/mla_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/cpu/mla_tiles.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::kernels::cpu {
namespace {

using mla::kMaxQueries;
using mla::kTileRows;

// Splits: at least 256 rows each (a split's softmax state for 96 heads is ~200 KB, written
// once and merged once; below ~256 rows that overhead stops being small), at most 32 per
// sequence (bounds the partials at 32 · H · (r + 2) floats), whole tiles.
constexpr int64_t kMinSplitRows = 256;
constexpr int64_t kMaxSplits = 32;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t Align64(size_t bytes) { return (bytes + 63) / 64 * 64; }

int64_t NumSplits(int64_t num_tokens) {
  return CeilDiv(num_tokens, MlaDecodeSplitRows(num_tokens));
}

// Scratch regions (each 64-byte aligned):
//   item_begin [B + 1]            first work item of each sequence (prefix sums of splits)
//   q_abs      [B, H, lat_w]      absorbed queries; after attention, the merged ō (r wide)
//   q_bf16     [B, H, lat_w]      the absorbed queries rounded to bf16 (bf16 caches only)
//   acc        [items, H, r]      per split: unnormalised Σ p_j c_j
//   max, sum   [items, H]         per split: running max and Σ exp(s − max)
struct Scratch {
  int64_t* item_begin = nullptr;
  float* q_abs = nullptr;
  uint16_t* q_bf16 = nullptr;
  float* acc = nullptr;
  float* max = nullptr;
  float* sum = nullptr;
  size_t bytes = 0;
};

Scratch LayOut(const MlaDims& d, absl::Span<const MlaDecodeSequence> seqs, void* base) {
  const int64_t batch = static_cast<int64_t>(seqs.size()), heads = d.num_heads;
  int64_t items = 0;
  for (const MlaDecodeSequence& s : seqs) items += NumSplits(s.context.num_tokens);
  const int64_t lat_w = d.kv_lora_rank + d.qk_rope_head_dim;
  char* p = static_cast<char*>(base);
  size_t offset = 0;
  auto take = [&](size_t bytes) {
    char* at = p == nullptr ? nullptr : p + offset;
    offset += Align64(bytes);
    return at;
  };
  Scratch s;
  s.item_begin = reinterpret_cast<int64_t*>(take(sizeof(int64_t) * (batch + 1)));
  s.q_abs = reinterpret_cast<float*>(take(sizeof(float) * batch * heads * lat_w));
  s.q_bf16 = reinterpret_cast<uint16_t*>(take(sizeof(uint16_t) * batch * heads * lat_w));
  s.acc = reinterpret_cast<float*>(take(sizeof(float) * items * heads * d.kv_lora_rank));
  s.max = reinterpret_cast<float*>(take(sizeof(float) * items * heads));
  s.sum = reinterpret_cast<float*>(take(sizeof(float) * items * heads));
  s.bytes = offset;
  return s;
}

// Phase 1: q̃ for every (sequence, head); each thread reads W_UK,h once for the whole batch.
void AbsorbAll(const mla::TileKernels& k, const MlaDims& d, const MatmulWeights& w_kvb,
               absl::Span<const MlaDecodeSequence> seqs, float* q_abs) {
  const int heads = d.num_heads, batch = static_cast<int>(seqs.size());
  const int64_t lat_w = d.kv_lora_rank + d.qk_rope_head_dim,
                q_w = d.qk_nope_head_dim + d.qk_rope_head_dim;
  ParallelFor(heads, true, [&](int64_t h) {
    const float* q[kMaxQueries];
    float* out[kMaxQueries];
    for (int b0 = 0; b0 < batch; b0 += kMaxQueries) {
      const int n = std::min(kMaxQueries, batch - b0);
      for (int i = 0; i < n; ++i) {
        q[i] = seqs[b0 + i].q + h * q_w;
        out[i] = q_abs + ((b0 + i) * int64_t{heads} + h) * lat_w;
      }
      mla::Absorb(k, w_kvb, static_cast<int>(h), d, q, n, out);
    }
  });
}

// Phase 2: one (sequence, split) work item — online softmax of all heads over its rows. With
// `q_bf16` (a bf16 cache and an AVX512-BF16 CPU) the rows are read in place as bf16 pairs.
void AttendSplit(const mla::TileKernels& k, const MlaDims& d, float scale,
                 const MlaDecodeSequence& seq, int64_t split, const float* q_abs,
                 const uint16_t* q_bf16, float* acc, float* max, float* sum) {
  const int heads = d.num_heads, r = d.kv_lora_rank, lat_w = r + d.qk_rope_head_dim;
  const int64_t len = seq.context.num_tokens, split_rows = MlaDecodeSplitRows(len);
  const int64_t begin = split * split_rows, end = std::min(len, begin + split_rows);
  std::fill(acc, acc + int64_t{heads} * r, 0.0f);
  std::fill(max, max + heads, -std::numeric_limits<float>::infinity());
  std::fill(sum, sum + heads, 0.0f);
  // Head blocks of equal size ≤ kMaxQueries; every row tile is used by all of them while hot.
  const int num_blocks = static_cast<int>(CeilDiv(heads, kMaxQueries));
  const int block = static_cast<int>(CeilDiv(heads, num_blocks));
  const float* rows[kTileRows];
  const uint16_t* rows_bf16[kTileRows];
  const int64_t row_bytes = seq.context.RowBytes(lat_w);
  for (int64_t row0 = begin; row0 < end; row0 += kTileRows) {
    const int num_rows = static_cast<int>(std::min<int64_t>(kTileRows, end - row0));
    if (q_bf16 != nullptr) {
      for (int j = 0; j < num_rows; ++j) {
        rows_bf16[j] = reinterpret_cast<const uint16_t*>(seq.context.RowAt(row0 + j, row_bytes));
      }
    } else {
      GatherRows(seq.context, row0, num_rows, lat_w, rows);
    }
    for (int h0 = 0; h0 < heads; h0 += block) {
      mla::QueryBlock qb;
      qb.q = q_abs + int64_t{h0} * lat_w;
      qb.q_stride = lat_w;
      qb.acc = acc + int64_t{h0} * r;
      qb.acc_stride = r;
      qb.max = max + h0;
      qb.sum = sum + h0;
      qb.n = std::min(block, heads - h0);
      if (q_bf16 != nullptr) {
        qb.q_bf16 = q_bf16 + int64_t{h0} * lat_w;
        k.attend_tile_bf16(qb, rows_bf16, num_rows, row0, lat_w, 0, r, scale);
      } else {
        k.attend_tile(qb, rows, num_rows, row0, lat_w, 0, r, scale);
      }
    }
  }
}

// Phase 3 for one (sequence, head): ō = Σ_s w_s acc_s / Σ_s w_s l_s, w_s = exp(m_s − max_s m_s).
void MergeSplits(const mla::TileKernels& k, const MlaDims& d, const Scratch& s, int64_t first_item,
                 int64_t num_splits, int h, float* out) {
  const int64_t heads = d.num_heads, r = d.kv_lora_rank;
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < num_splits; ++i) m = std::max(m, s.max[(first_item + i) * heads + h]);
  float weight[mla::kMaxSources], total = 0.0f;
  const float* src[mla::kMaxSources];
  for (int64_t i = 0; i < num_splits; ++i) {
    const int64_t item = first_item + i;
    weight[i] = std::exp(s.max[item * heads + h] - m);
    total += weight[i] * s.sum[item * heads + h];
    src[i] = s.acc + (item * heads + h) * r;
  }
  const float inv_total = 1.0f / total;
  for (int64_t i = 0; i < num_splits; ++i) weight[i] *= inv_total;
  const float* coef = weight;
  k.axpy(&out, 1, nullptr, &coef, src, static_cast<int>(num_splits), static_cast<int>(r));
}

// Phase 3: merge, up-project and gate; each thread reads W_UV,h once for the whole batch.
void MergeAndProject(const mla::TileKernels& k, const MlaDims& d, const MatmulWeights& w_kvb,
                     absl::Span<const MlaDecodeSequence> seqs, const Scratch& s) {
  const int heads = d.num_heads, batch = static_cast<int>(seqs.size());
  const int64_t lat_w = d.kv_lora_rank + d.qk_rope_head_dim, dv = d.v_head_dim;
  ParallelFor(heads, true, [&](int64_t h64) {
    const int h = static_cast<int>(h64);
    const float* x[kMaxQueries];
    const float* gate[kMaxQueries];
    float* o[kMaxQueries];
    for (int b0 = 0; b0 < batch; b0 += kMaxQueries) {
      const int n = std::min(kMaxQueries, batch - b0);
      for (int i = 0; i < n; ++i) {
        const int b = b0 + i;
        float* merged = s.q_abs + (int64_t{b} * heads + h) * lat_w;  // q̃ is no longer needed
        MergeSplits(k, d, s, s.item_begin[b], s.item_begin[b + 1] - s.item_begin[b], h, merged);
        x[i] = merged;
        gate[i] = seqs[b].gate != nullptr ? seqs[b].gate + h * dv : nullptr;
        o[i] = seqs[b].o + h * dv;
      }
      mla::UpProject(k, w_kvb, h, d, x, n, gate, o);
    }
  });
}

// STRATA_ISA=scalar: the f64 reference on a gathered copy of the context (tests, debugging).
void DecodeWithReference(const MlaDims& d, float scale, const MatmulWeights& w_kvb,
                         absl::Span<const MlaDecodeSequence> seqs) {
  const int lat_w = d.kv_lora_rank + d.qk_rope_head_dim;
  const std::vector<float> w = mla::KvbAsF32(w_kvb);
  std::vector<float> context;
  for (const MlaDecodeSequence& s : seqs) {
    const int64_t len = s.context.num_tokens;
    context.resize(static_cast<size_t>(len * lat_w));
    CopyRowsF32(s.context, lat_w, context.data());
    MlaAttentionAbsorbedReference(s.q, context.data(), len, 1, w.data(), d, scale, s.o);
    if (s.gate == nullptr) continue;
    for (int64_t c = 0; c < int64_t{d.num_heads} * d.v_head_dim; ++c) {
      s.o[c] = static_cast<float>(s.o[c] / (1.0 + std::exp(-static_cast<double>(s.gate[c]))));
    }
  }
}

}  // namespace

int64_t MlaDecodeSplitRows(int64_t num_tokens) {
  const int64_t splits = std::clamp(CeilDiv(num_tokens, kMinSplitRows), int64_t{1}, kMaxSplits);
  return CeilDiv(CeilDiv(num_tokens, splits), kTileRows) * kTileRows;
}

size_t MlaDecodeScratchBytes(const MlaDims& dims, absl::Span<const MlaDecodeSequence> seqs) {
  return LayOut(dims, seqs, nullptr).bytes;
}

void MlaDecode(const MlaDims& dims, float scale, const MatmulWeights& w_kvb,
               absl::Span<const MlaDecodeSequence> seqs, void* scratch) {
  static_assert(kMaxSplits <= mla::kMaxSources);
  if (seqs.empty()) return;
  for (const MlaDecodeSequence& s : seqs) CHECK_GE(s.context.num_tokens, 1);
  const Isa isa = ActiveIsa();
  if (isa == Isa::kScalar) {
    DecodeWithReference(dims, scale, w_kvb, seqs);
    return;
  }
  const mla::TileKernels& k = mla::TileKernelsFor(isa);
  const Scratch s = LayOut(dims, seqs, scratch);
  const int64_t batch = static_cast<int64_t>(seqs.size()), heads = dims.num_heads;
  s.item_begin[0] = 0;
  for (int64_t b = 0; b < batch; ++b) {
    s.item_begin[b + 1] = s.item_begin[b] + NumSplits(seqs[b].context.num_tokens);
  }
  AbsorbAll(k, dims, w_kvb, seqs, s.q_abs);
  const int64_t num_items = s.item_begin[batch];
  const int64_t lat_w = dims.kv_lora_rank + dims.qk_rope_head_dim;
  // A bf16 cache (one cache: every sequence's rows share the format) on an AVX512-BF16 CPU:
  // vdpbf16ps straight from the pages, the queries rounded to bf16 once.
  const bool bf16_rows =
      k.attend_tile_bf16 != nullptr && seqs[0].context.dtype == LatentDType::kBF16;
  if (bf16_rows) ConvertF32ToBf16(s.q_abs, static_cast<size_t>(batch * heads * lat_w), s.q_bf16);
  ParallelFor(num_items, true, [&](int64_t item) {
    const int64_t b =
        std::upper_bound(s.item_begin, s.item_begin + batch + 1, item) - s.item_begin - 1;
    AttendSplit(k, dims, scale, seqs[b], item - s.item_begin[b], s.q_abs + b * heads * lat_w,
                bf16_rows ? s.q_bf16 + b * heads * lat_w : nullptr,
                s.acc + item * heads * dims.kv_lora_rank, s.max + item * heads,
                s.sum + item * heads);
  });
  MergeAndProject(k, dims, w_kvb, seqs, s);
}

}  // namespace strata::kernels::cpu
