// MLA decode and prefill kernels against the f64 references (kernels/reference/mla.h), on paged
// caches with shuffled block tables, on every ISA path this CPU has; plus the bit-exact
// invariances the engine relies on (batch composition, thread count, prompt chunking).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/cpu/internal/random_testing.h"
#include "kernels/cpu/latent_codec.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/mla_decode.h"
#include "kernels/cpu/mla_prefill.h"
#include "kernels/reference/latent_codec.h"
#include "kernels/reference/mla.h"

namespace strata::kernels::cpu {
namespace {

// Tolerance: |o − o_ref| ≤ kRelTol · max|o_ref| over a sequence's outputs. The kernels run in
// f32 (ε = 6e-8): scores and absorbed queries are dot products of ≤ 576 terms, the softmax a
// sum of ≤ 1000 terms, the output dots of ≤ 512 terms; the observed error is ≤ 1.1e-6 of the
// output scale on these shapes, so 1e-5 leaves ~10× headroom. One context row dropped or
// counted twice changes the output by ~p_j ≥ 1e-3 of its scale at these lengths, 100× more.
constexpr double kRelTol = 1e-5;

const MlaDims kSmallDims{1, 24, 8, 20, 40};      // lat_w 48: whole vectors
const MlaDims kOddDims{1, 7, 5, 9, 37};          // lat_w 42, r 37: masked tails everywhere
const MlaDims kModelDims{1, 128, 64, 128, 512};  // K3 / Kimi-Linear head shapes

MlaDims WithHeads(MlaDims d, int heads) {
  d.num_heads = heads;
  return d;
}
int LatW(const MlaDims& d) { return d.kv_lora_rank + d.qk_rope_head_dim; }

using internal::Normal;

// A page pool holding several sequences' contexts under shuffled block tables. Rows no
// sequence owns are NaN, so a read outside the table poisons the output.
struct PagedPool {
  int block_size = 0;
  int lat_w = 0;
  std::vector<float> pages;
  std::vector<std::vector<int32_t>> tables;
  std::vector<std::vector<float>> contexts;  // contiguous copies, for the reference
  // EncodePool: the same rows in a compressed format, and whether View shows them.
  std::vector<std::byte> encoded;
  LatentDType dtype = LatentDType::kF32;
  int rope_dim = 0;
  bool use_encoded = false;

  PagedLatent View(size_t seq) const {
    const int64_t len = static_cast<int64_t>(contexts[seq].size() / lat_w);
    if (use_encoded) return {encoded.data(), tables[seq].data(), block_size, len, dtype, rope_dim};
    return {pages.data(), tables[seq].data(), block_size, len};
  }
};

// Adds a copy of every sequence's rows encoded in `dtype` (rows no sequence owns are 0xFF bytes:
// NaN codes, scales and bf16 values) and replaces the f32 rows and the reference contexts by the
// values the encoded rows read back as (the reference decoder).
void EncodePool(PagedPool& pool, LatentDType dtype, int rope_dim) {
  const int64_t row_bytes = LatentBytesPerToken(dtype, pool.lat_w, rope_dim);
  pool.encoded.assign(pool.pages.size() / pool.lat_w * row_bytes, std::byte{0xFF});
  pool.dtype = dtype;
  pool.rope_dim = rope_dim;
  for (size_t s = 0; s < pool.contexts.size(); ++s) {
    pool.use_encoded = false;
    const PagedLatent f32 = pool.View(s);
    pool.use_encoded = true;
    const PagedLatent enc = pool.View(s);
    for (int64_t t = 0; t < f32.num_tokens; ++t) {
      auto* row = const_cast<float*>(f32.Row(t, pool.lat_w));
      auto* bytes = const_cast<std::byte*>(enc.RawRow(t, pool.lat_w));
      EncodeLatentRow(dtype, row, pool.lat_w, rope_dim, bytes);
      DecodeLatentRowReference(dtype, bytes, pool.lat_w, rope_dim, row);
      std::memcpy(pool.contexts[s].data() + t * pool.lat_w, row, sizeof(float) * pool.lat_w);
    }
  }
  pool.use_encoded = false;
}

PagedPool MakePool(const std::vector<int64_t>& lengths, int block_size, int lat_w,
                   std::mt19937& rng) {
  PagedPool pool;
  pool.block_size = block_size;
  pool.lat_w = lat_w;
  int64_t num_blocks = 3;  // spare blocks stay NaN
  for (int64_t len : lengths) num_blocks += (len + block_size - 1) / block_size;
  pool.pages.assign(static_cast<size_t>(num_blocks * block_size * lat_w),
                    std::numeric_limits<float>::quiet_NaN());
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (int64_t len : lengths) {
    std::vector<int32_t> table;
    for (int64_t b = 0; b < (len + block_size - 1) / block_size; ++b) table.push_back(ids[next++]);
    std::vector<float> context = Normal(rng, len * lat_w, 1.0f);
    pool.tables.push_back(table);
    pool.contexts.push_back(context);
    const PagedLatent view = pool.View(pool.contexts.size() - 1);
    for (int64_t t = 0; t < len; ++t) {
      std::memcpy(const_cast<float*>(view.Row(t, lat_w)), context.data() + t * lat_w,
                  sizeof(float) * lat_w);
    }
  }
  return pool;
}

// kv_b_proj with entries ~ N(0, 1/fan_in), so q̃ and o have unit-scale entries, rounded to bf16
// values: the same matrix exists exactly as f32 and as bf16 bits (as a bf16 checkpoint's).
struct Kvb {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;

  Kvb(const MlaDims& d, std::mt19937& rng)
      : f32(Normal(rng, int64_t{d.num_heads} * (d.qk_nope_head_dim + d.v_head_dim) * d.kv_lora_rank,
                   1.0f / std::sqrt(static_cast<float>(d.kv_lora_rank)))),
        bf16(f32.size()) {
    ConvertF32ToBf16(f32.data(), f32.size(), bf16.data());
    for (size_t i = 0; i < f32.size(); ++i) f32[i] = Bf16ToF32(bf16[i]);
  }
  // The kernels' view: the f32 copy, or the bf16 bits read in place.
  MatmulWeights View(const MlaDims& d, bool in_bf16) const {
    const int64_t rows = static_cast<int64_t>(f32.size()) / d.kv_lora_rank;
    if (in_bf16) return {WeightFormat::kBf16, rows, d.kv_lora_rank, bf16.data(), nullptr};
    return {WeightFormat::kF32, rows, d.kv_lora_rank, f32.data(), nullptr};
  }
};

float Scale(const MlaDims& d) {
  return 1.0f / std::sqrt(static_cast<float>(d.qk_nope_head_dim + d.qk_rope_head_dim));
}

// o ← o ⊙ sigmoid(gate) in f64 (the reference for the fused gate).
void GateReference(const std::vector<float>& gate, std::vector<float>& o) {
  for (size_t c = 0; c < o.size(); ++c) {
    o[c] = static_cast<float>(o[c] / (1.0 + std::exp(-static_cast<double>(gate[c]))));
  }
}

::testing::AssertionResult Close(const std::vector<float>& got, const std::vector<float>& want,
                                 double rel_tol = kRelTol) {
  double scale = 0, worst = 0;
  size_t at = 0;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= worst)) {  // NaN-propagating
      worst = err;
      at = i;
    }
  }
  if (worst <= rel_tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max error " << worst << " at " << at << " (got "
                                       << got[at] << ", want " << want[at] << "), scale " << scale;
}

// One batch of decode sequences over one pool: inputs, outputs and the call.
struct DecodeCase {
  MlaDims dims;
  PagedPool pool;
  Kvb w_kvb;
  bool bf16_weights = false;  // run over the bf16 bits of w_kvb instead of its f32 copy
  std::vector<std::vector<float>> q, gate, o;

  DecodeCase(const MlaDims& d, const std::vector<int64_t>& lengths, int block_size, bool gated,
             std::mt19937& rng)
      : dims(d), pool(MakePool(lengths, block_size, LatW(d), rng)), w_kvb(d, rng) {
    const int64_t qw = int64_t{d.num_heads} * (d.qk_nope_head_dim + d.qk_rope_head_dim);
    const int64_t ow = int64_t{d.num_heads} * d.v_head_dim;
    for (size_t s = 0; s < lengths.size(); ++s) {
      q.push_back(Normal(rng, qw, 1.0f));
      gate.push_back(gated ? Normal(rng, ow, 2.0f) : std::vector<float>());
      o.push_back(std::vector<float>(static_cast<size_t>(ow), -1.0f));
    }
  }

  MlaDecodeSequence Seq(size_t s) {
    return {pool.View(s), q[s].data(), gate[s].empty() ? nullptr : gate[s].data(), o[s].data()};
  }

  // Runs the sequences `which` in one MlaDecode call.
  void Run(const std::vector<size_t>& which) {
    std::vector<MlaDecodeSequence> seqs;
    for (size_t s : which) seqs.push_back(Seq(s));
    std::vector<char> scratch(MlaDecodeScratchBytes(dims, seqs) + 64);
    void* aligned =
        reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
    MlaDecode(dims, Scale(dims), w_kvb.View(dims, bf16_weights), seqs, aligned);
  }
  void RunAll() {
    std::vector<size_t> all(q.size());
    std::iota(all.begin(), all.end(), 0);
    Run(all);
  }

  std::vector<float> Reference(size_t s) const {
    std::vector<float> ref(o[s].size());
    const int64_t len = static_cast<int64_t>(pool.contexts[s].size() / LatW(dims));
    MlaAttentionAbsorbedReference(q[s].data(), pool.contexts[s].data(), len, 1, w_kvb.f32.data(),
                                  dims, Scale(dims), ref.data());
    if (!gate[s].empty()) GateReference(gate[s], ref);
    return ref;
  }
};

// Prefill: sequence s has chunk[s].second new tokens after chunk[s].first cached ones.
struct PrefillCase {
  MlaDims dims;
  PagedPool pool;
  Kvb w_kvb;
  bool bf16_weights = false;  // as in DecodeCase
  std::vector<int64_t> num_new;
  std::vector<std::vector<float>> q, gate, o;

  PrefillCase(const MlaDims& d, const std::vector<std::pair<int64_t, int64_t>>& chunks,
              int block_size, bool gated, std::mt19937& rng)
      : dims(d), pool(MakePool(Totals(chunks), block_size, LatW(d), rng)), w_kvb(d, rng) {
    const int64_t qw = int64_t{d.num_heads} * (d.qk_nope_head_dim + d.qk_rope_head_dim);
    const int64_t ow = int64_t{d.num_heads} * d.v_head_dim;
    for (const auto& [cached, fresh] : chunks) {
      num_new.push_back(fresh);
      q.push_back(Normal(rng, fresh * qw, 1.0f));
      gate.push_back(gated ? Normal(rng, fresh * ow, 2.0f) : std::vector<float>());
      o.push_back(std::vector<float>(static_cast<size_t>(fresh * ow), -1.0f));
    }
  }
  static std::vector<int64_t> Totals(const std::vector<std::pair<int64_t, int64_t>>& chunks) {
    std::vector<int64_t> t;
    for (const auto& [cached, fresh] : chunks) t.push_back(cached + fresh);
    return t;
  }

  void RunAll(MlaPrefillForm form = MlaPrefillForm::kAuto) {
    std::vector<MlaPrefillSequence> seqs;
    for (size_t s = 0; s < q.size(); ++s) {
      seqs.push_back({pool.View(s), num_new[s], q[s].data(),
                      gate[s].empty() ? nullptr : gate[s].data(), o[s].data()});
    }
    std::vector<int64_t> scratch(MlaPrefillScratchBytes(dims, seqs) / sizeof(int64_t) + 1);
    MlaPrefill(dims, Scale(dims), w_kvb.View(dims, bf16_weights), seqs, scratch.data(), form);
  }

  // The non-absorbed ("MHA mode") reference: an independent formulation of the same attention.
  std::vector<float> Reference(size_t s) const {
    std::vector<float> ref(o[s].size());
    const int64_t len = static_cast<int64_t>(pool.contexts[s].size() / LatW(dims));
    MlaAttentionReference(q[s].data(), pool.contexts[s].data(), len, num_new[s], w_kvb.f32.data(),
                          dims, Scale(dims), ref.data());
    if (!gate[s].empty()) GateReference(gate[s], ref);
    return ref;
  }
};

// The case of `whole` (one prompt of T tokens) split: sequence 0 is `other` (its own random
// inputs), sequence 1 the same prompt as `cached` cached tokens + T − cached new ones — same
// rows, weights, queries and gates.
PrefillCase SplitOf(const PrefillCase& whole, std::pair<int64_t, int64_t> other, int64_t cached,
                    std::mt19937& rng) {
  const MlaDims& d = whole.dims;
  const int64_t len = whole.num_new[0];
  const int64_t qw = d.num_heads * (d.qk_nope_head_dim + d.qk_rope_head_dim);
  const int64_t ow = d.num_heads * d.v_head_dim;
  PrefillCase split(d, {other, {cached, len - cached}}, whole.pool.block_size, true, rng);
  split.pool.contexts[1] = whole.pool.contexts[0];
  for (int64_t t = 0; t < len; ++t) {
    std::memcpy(const_cast<float*>(split.pool.View(1).Row(t, LatW(d))),
                whole.pool.contexts[0].data() + t * LatW(d), sizeof(float) * LatW(d));
  }
  split.w_kvb = whole.w_kvb;
  split.q[1].assign(whole.q[0].begin() + cached * qw, whole.q[0].end());
  split.gate[1].assign(whole.gate[0].begin() + cached * ow, whole.gate[0].end());
  return split;
}

std::vector<Isa> SupportedIsas() {
  ClearIsaOverride();
  const Isa best = ActiveIsa();
  std::vector<Isa> isas;
  if (best >= Isa::kAvx2) isas.push_back(Isa::kAvx2);
  if (best >= Isa::kAvx512) isas.push_back(Isa::kAvx512);
  if (best >= Isa::kAvx512Bf16) isas.push_back(Isa::kAvx512Bf16);
  return isas;
}

// Runs each test on one ISA path (STRATA_ISA-style cap), restoring the default afterwards.
class MlaKernelTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    SetIsaOverride(GetParam());
    ASSERT_EQ(ActiveIsa(), GetParam());
  }
  void TearDown() override { ClearIsaOverride(); }
};

const std::vector<int64_t> kLengths = {1, 2, 63, 64, 65, 257, 1000};

TEST_P(MlaKernelTest, DecodeOfABatchOfLengthsMatchesReference) {
  std::mt19937 rng(1);
  for (const MlaDims& base : {kSmallDims, kOddDims}) {
    for (int heads : {1, 3, 5}) {
      for (int block_size : {1, 16, 64}) {
        const bool gated = heads != 3;
        DecodeCase c(WithHeads(base, heads), kLengths, block_size, gated, rng);
        c.RunAll();
        for (size_t s = 0; s < kLengths.size(); ++s) {
          EXPECT_TRUE(Close(c.o[s], c.Reference(s)))
              << "r=" << base.kv_lora_rank << " heads=" << heads << " block=" << block_size
              << " len=" << kLengths[s];
        }
      }
    }
  }
}

TEST_P(MlaKernelTest, DecodeAtModelHeadShapesMatchesReference) {
  std::mt19937 rng(2);
  DecodeCase c(WithHeads(kModelDims, 5), {1, 65, 1000, 2100}, 64, true, rng);
  c.RunAll();
  for (size_t s = 0; s < c.q.size(); ++s) EXPECT_TRUE(Close(c.o[s], c.Reference(s))) << s;
}

const char* FormName(MlaPrefillForm form) {
  return form == MlaPrefillForm::kAbsorbed ? "absorbed" : "expanded";
}

TEST_P(MlaKernelTest, PrefillChunksOnCachedContextMatchReferenceInBothForms) {
  std::mt19937 rng(3);
  // (cached, new): every chunk size in {1, 2, 17, 64}, on empty and non-empty contexts,
  // including contexts of 63/64/65/257/1000 tokens, all in one batch.
  const std::vector<std::pair<int64_t, int64_t>> chunks = {
      {0, 1},  {0, 2},  {0, 17},  {0, 64},   {1, 1},    {46, 17},
      {62, 2}, {1, 63}, {48, 17}, {193, 64}, {936, 64}, {999, 1}};
  for (MlaPrefillForm form : {MlaPrefillForm::kAbsorbed, MlaPrefillForm::kExpanded}) {
    for (const MlaDims& base : {kSmallDims, kOddDims}) {
      for (int heads : {1, 3, 5}) {
        for (int block_size : {1, 16, 64}) {
          PrefillCase c(WithHeads(base, heads), chunks, block_size, heads != 5, rng);
          c.RunAll(form);
          for (size_t s = 0; s < chunks.size(); ++s) {
            EXPECT_TRUE(Close(c.o[s], c.Reference(s)))
                << FormName(form) << " r=" << base.kv_lora_rank << " heads=" << heads
                << " block=" << block_size << " cached=" << chunks[s].first
                << " new=" << chunks[s].second;
          }
        }
      }
    }
  }
}

TEST_P(MlaKernelTest, PrefillAtModelHeadShapesMatchesReferenceInBothForms) {
  std::mt19937 rng(4);
  for (MlaPrefillForm form : {MlaPrefillForm::kAbsorbed, MlaPrefillForm::kExpanded}) {
    PrefillCase c(WithHeads(kModelDims, 3), {{0, 64}, {200, 17}, {0, 300}}, 16, true, rng);
    c.RunAll(form);
    for (size_t s = 0; s < c.q.size(); ++s) {
      EXPECT_TRUE(Close(c.o[s], c.Reference(s))) << FormName(form) << " sequence " << s;
    }
  }
}

TEST(MlaPrefillFormTest, AbsorbedOnlyForShortChunksAfterALongContext) {
  // Per head: absorbed costs (2r + dr) per (query, row) + (dn + dv)·r per query; expanded
  // (dn + dr + dv) per (query, row) + (dn + dv)·r per context row. Without a cached context
  // the rows are the queries, so expanded is never more work.
  const MlaDims d = WithHeads(kModelDims, 96);
  for (int64_t t : {1, 2, 17, 64, 128}) {
    EXPECT_EQ(MlaPrefillChooseForm(d, 32768, t), MlaPrefillForm::kAbsorbed) << t;
    EXPECT_EQ(MlaPrefillChooseForm(d, 0, t), MlaPrefillForm::kExpanded) << t;
  }
  EXPECT_EQ(MlaPrefillChooseForm(d, 32768, 512), MlaPrefillForm::kExpanded);
  EXPECT_EQ(MlaPrefillChooseForm(d, 0, 4096), MlaPrefillForm::kExpanded);
  // With the expanded form twice as fast (bf16 products), from shorter chunks on.
  EXPECT_EQ(MlaPrefillChooseForm(d, 32768, 128), MlaPrefillForm::kAbsorbed);
  EXPECT_EQ(MlaPrefillChooseForm(d, 32768, 128, 2.0), MlaPrefillForm::kExpanded);
  EXPECT_EQ(MlaPrefillChooseForm(d, 32768, 32, 2.0), MlaPrefillForm::kAbsorbed);
}

TEST_P(MlaKernelTest, DecodeOfASequenceIsBitIdenticalAloneInABatchAndOnAnyThreadCount) {
  std::mt19937 rng(5);
  DecodeCase c(WithHeads(kSmallDims, 5), {1000, 3, 257, 64}, 16, true, rng);
  c.RunAll();
  const auto batched = c.o;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    for (size_t s = 0; s < c.q.size(); ++s) {
      std::fill(c.o[s].begin(), c.o[s].end(), 0.0f);
      c.Run({s});
      EXPECT_EQ(c.o[s], batched[s]) << "sequence " << s << " threads " << threads;
    }
  }
  omp_set_num_threads(saved);
}

TEST_P(MlaKernelTest, PrefillIsBitIdenticalWhateverTheChunkingAndTheBatch) {
  // The same 96-token prompt: one chunk, or 40 cached + 56 new, next to another sequence.
  std::mt19937 rng(6);
  const MlaDims d = WithHeads(kOddDims, 3);
  const int64_t ow = d.num_heads * d.v_head_dim;
  for (MlaPrefillForm form : {MlaPrefillForm::kAbsorbed, MlaPrefillForm::kExpanded}) {
    PrefillCase whole(d, {{0, 96}}, 16, true, rng);
    whole.RunAll(form);
    PrefillCase split = SplitOf(whole, {7, 9}, 40, rng);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(3);
    split.RunAll(form);
    omp_set_num_threads(saved);
    const std::vector<float> tail(whole.o[0].begin() + 40 * ow, whole.o[0].end());
    EXPECT_EQ(split.o[1], tail) << FormName(form);
  }
}

// One head (the long-context model's): alone, its sequence runs split inside the head (the
// threads sharing its rows and query groups); next to another sequence on one thread it runs as
// one work item. The prompt of `len` tokens in one chunk (split, on 1 and 3 threads) and as
// `cached` + the rest next to another sequence (items) give the same outputs bit for bit, both
// within `tol` of the reference.
namespace {
void ExpectOneHeadSplitEqualsItems(const MlaDims& d, int64_t len, int64_t cached, double tol,
                                   uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t ow = d.v_head_dim;
  PrefillCase whole(d, {{0, len}}, 64, true, rng);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    std::fill(whole.o[0].begin(), whole.o[0].end(), 0.0f);
    whole.RunAll(MlaPrefillForm::kExpanded);  // split inside the head
    omp_set_num_threads(1);
    PrefillCase split = SplitOf(whole, {5, 40}, cached, rng);
    split.RunAll(MlaPrefillForm::kExpanded);  // two items on one thread
    const std::vector<float> tail(whole.o[0].begin() + cached * ow, whole.o[0].end());
    EXPECT_EQ(split.o[1], tail) << "threads " << threads;
    EXPECT_TRUE(Close(split.o[1], split.Reference(1), tol));
    EXPECT_TRUE(Close(split.o[0], split.Reference(0), tol));
  }
  omp_set_num_threads(saved);
}
}  // namespace

TEST_P(MlaKernelTest, OneHeadPrefillIsTheSameSplitOverThreadsAndAsOneItem) {
  // 13,100 tokens cross a super-block of the f32 split (12,288 rows at these widths).
  ExpectOneHeadSplitEqualsItems(WithHeads(kOddDims, 1), 13100, 13000, kRelTol, 9);
}

// kv_b_proj kept in the checkpoint's bf16 (read in place, half the bytes per decode step) gives
// the outputs of its f32 copy bit for bit — decode and both prefill forms, at odd widths (the
// partial-vector loads), one to five heads and the model's shape.
TEST_P(MlaKernelTest, Bf16KvbGivesTheF32KvbResultsBitForBit) {
  std::mt19937 rng(8);
  for (const MlaDims& base : {kOddDims, kSmallDims, kModelDims}) {
    for (int heads : {1, 5}) {
      const MlaDims d = WithHeads(base, heads);
      DecodeCase dc(d, {1, 17, 300}, 16, heads != 1, rng);
      dc.RunAll();
      const auto f32_out = dc.o;
      dc.bf16_weights = true;
      for (auto& o : dc.o) std::fill(o.begin(), o.end(), -1.0f);
      dc.RunAll();
      EXPECT_EQ(dc.o, f32_out) << "decode r=" << d.kv_lora_rank << " heads=" << heads;
      for (MlaPrefillForm form : {MlaPrefillForm::kAbsorbed, MlaPrefillForm::kExpanded}) {
        PrefillCase pc(d, {{0, 1}, {0, 33}, {70, 9}}, 16, heads != 1, rng);
        pc.RunAll(form);
        const auto f32_prefill = pc.o;
        pc.bf16_weights = true;
        for (auto& o : pc.o) std::fill(o.begin(), o.end(), -1.0f);
        pc.RunAll(form);
        EXPECT_EQ(pc.o, f32_prefill)
            << FormName(form) << " r=" << d.kv_lora_rank << " heads=" << heads;
      }
    }
  }
}

// A bf16 or fp8 cache is read as exactly the values it stores: the kernels' outputs over it are
// bit-identical to their outputs over an f32 cache holding the decoded rows, in decode and in
// both prefill forms (so every accuracy property above carries over), and close to the
// reference on those rows.
TEST_P(MlaKernelTest, CompressedCachesReadAsTheirDecodedValuesBitForBit) {
  std::mt19937 rng(8);
  for (LatentDType dtype : {LatentDType::kBF16, LatentDType::kFP8}) {
    for (const MlaDims& d : {WithHeads(kOddDims, 3), WithHeads(kModelDims, 2)}) {
      const std::string what =
          absl::StrCat(std::string(LatentDTypeName(dtype)), " r=", d.kv_lora_rank);
      DecodeCase dc(d, {1, 63, 257, 1000}, 16, true, rng);
      EncodePool(dc.pool, dtype, d.qk_rope_head_dim);
      dc.RunAll();
      const auto over_f32 = dc.o;
      dc.pool.use_encoded = true;
      dc.RunAll();
      // The one exception: bf16 rows on an AVX512-BF16 CPU are multiplied as bf16 pairs
      // (BF16PairDecode below checks that path).
      const bool bf16_pairs = dtype == LatentDType::kBF16 && GetParam() >= Isa::kAvx512Bf16;
      for (size_t s = 0; s < dc.q.size() && !bf16_pairs; ++s) {
        EXPECT_EQ(dc.o[s], over_f32[s]) << what << " decode sequence " << s;
        EXPECT_TRUE(Close(dc.o[s], dc.Reference(s))) << what << " decode sequence " << s;
      }
      for (MlaPrefillForm form : {MlaPrefillForm::kAbsorbed, MlaPrefillForm::kExpanded}) {
        PrefillCase pc(d, {{0, 17}, {300, 5}, {46, 64}}, 16, true, rng);
        EncodePool(pc.pool, dtype, d.qk_rope_head_dim);
        pc.RunAll(form);
        const auto prefill_f32 = pc.o;
        pc.pool.use_encoded = true;
        pc.RunAll(form);
        for (size_t s = 0; s < pc.q.size(); ++s) {
          EXPECT_EQ(pc.o[s], prefill_f32[s]) << what << " " << FormName(form) << " sequence " << s;
          EXPECT_TRUE(Close(pc.o[s], pc.Reference(s))) << what << " " << FormName(form);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(mla, MlaKernelTest, ::testing::ValuesIn(SupportedIsas()),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

// Decode over a bf16 cache on an AVX512-BF16 CPU: vdpbf16ps on the rows in place, q̃ and P
// rounded to bf16. Within bf16 rounding of the reference on the cached values (at odd widths:
// masked pair tails, short row tiles, 1 to 5 heads), and still bit-identical alone or in a batch
// and on any thread count.
TEST(MlaBf16PairTest, DecodeIsWithinBf16RoundingAndBatchInvariant) {
  ClearIsaOverride();
  if (ActiveIsa() < Isa::kAvx512Bf16) GTEST_SKIP() << "the bf16-pair path needs AVX512-BF16";
  std::mt19937 rng(9);
  // Measured worst error: 3.4e-3 of the output scale; q̃ and P carry 2^-9 each.
  constexpr double kBf16RelTol = 1e-2;
  for (const MlaDims& d :
       {WithHeads(kOddDims, 5), WithHeads(kSmallDims, 1), WithHeads(kModelDims, 3)}) {
    DecodeCase c(d, {1, 2, 17, 63, 64, 65, 1000}, 16, true, rng);
    EncodePool(c.pool, LatentDType::kBF16, d.qk_rope_head_dim);
    c.pool.use_encoded = true;
    c.RunAll();
    const auto batched = c.o;
    for (size_t s = 0; s < c.q.size(); ++s) {
      EXPECT_TRUE(Close(c.o[s], c.Reference(s), kBf16RelTol))
          << "r=" << d.kv_lora_rank << " heads=" << d.num_heads << " sequence " << s;
    }
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    for (size_t s = 0; s < c.q.size(); ++s) {
      std::fill(c.o[s].begin(), c.o[s].end(), 0.0f);
      c.Run({s});
      EXPECT_EQ(c.o[s], batched[s]) << "sequence " << s << " alone on one thread";
    }
    omp_set_num_threads(saved);
  }
}

// --cpu-matmul-precision bf16: the expanded prefill form runs its products in bf16 (q, k, v and P
// rounded to bf16, f32 sums and softmax; internal/mla_prefill_bf16.h), on AMX tiles where the
// CPU has them, else with vdpbf16ps on the same tiles.
class MlaBf16PrefillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClearIsaOverride();
    SetMatmulPrecision(MatmulPrecision::kBf16);
    if (!Bf16MatmulSupported()) GTEST_SKIP() << "bf16 products need AVX512-BF16";
  }
  void TearDown() override { SetMatmulPrecision(MatmulPrecision::kF32); }
};

// Within bf16 rounding of the f64 reference at odd widths (every width padded to tiles: dn 7,
// dr 5, dv 9, r 37), single tokens, chunks crossing the 256-row expansion groups and the
// 128-row softmax steps, 1 to 3 heads, block sizes 1 and 16, gated or not, over f32 and bf16
// caches.
TEST_F(MlaBf16PrefillTest, ExpandedFormIsWithinBf16RoundingOfTheReference) {
  std::mt19937 rng(11);
  // Measured worst error: 1.0e-2 of the output scale (r = 37, one head: short sums); with one
  // context row (row 40) dropped, every case whose context holds it fails (checked by mutation).
  constexpr double kBf16RelTol = 2.5e-2;
  const std::vector<std::pair<int64_t, int64_t>> chunks = {
      {0, 1}, {0, 2}, {0, 17}, {0, 33}, {1, 1}, {46, 17}, {250, 9}, {130, 129}, {0, 300}};
  for (const MlaDims& base : {kOddDims, kSmallDims, kModelDims}) {
    for (int heads : {1, 3}) {
      for (int block_size : {1, 16}) {
        for (LatentDType dtype : {LatentDType::kF32, LatentDType::kBF16}) {
          PrefillCase c(WithHeads(base, heads), chunks, block_size, heads != 1, rng);
          if (dtype != LatentDType::kF32) {
            EncodePool(c.pool, dtype, base.qk_rope_head_dim);
            c.pool.use_encoded = true;
          }
          c.RunAll(MlaPrefillForm::kExpanded);
          for (size_t s = 0; s < chunks.size(); ++s) {
            EXPECT_TRUE(Close(c.o[s], c.Reference(s), kBf16RelTol))
                << "r=" << base.kv_lora_rank << " heads=" << heads << " block=" << block_size << " "
                << LatentDTypeName(dtype) << " cached=" << chunks[s].first
                << " new=" << chunks[s].second;
          }
        }
      }
    }
  }
}

// A query's result depends only on its sequence: the same 520-token prompt in one chunk, or as
// 200 cached + 320 new next to another sequence, on 1 or 3 threads, is bit-identical.
TEST_F(MlaBf16PrefillTest, ExpandedFormIsBitIdenticalWhateverTheChunkingTheBatchAndTheThreads) {
  std::mt19937 rng(12);
  for (const MlaDims& d : {WithHeads(kOddDims, 3), WithHeads(kModelDims, 2)}) {
    const int64_t ow = d.num_heads * d.v_head_dim;
    PrefillCase whole(d, {{0, 520}}, 16, true, rng);
    whole.RunAll(MlaPrefillForm::kExpanded);
    PrefillCase split = SplitOf(whole, {7, 40}, 200, rng);
    const std::vector<float> tail(whole.o[0].begin() + 200 * ow, whole.o[0].end());
    const int saved = omp_get_max_threads();
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      std::fill(split.o[1].begin(), split.o[1].end(), 0.0f);
      split.RunAll(MlaPrefillForm::kExpanded);
      EXPECT_EQ(split.o[1], tail) << "r=" << d.kv_lora_rank << " threads " << threads;
    }
    omp_set_num_threads(saved);
  }
}

// The bf16 form's split (one head: the threads share each 256-row super-block's query blocks
// while one expands the next) against its work items, over six super-blocks.
TEST_F(MlaBf16PrefillTest, OneHeadIsTheSameSplitOverThreadsAndAsOneItem) {
  constexpr double kBf16RelTol = 2.5e-2;  // as above
  ExpectOneHeadSplitEqualsItems(WithHeads(kOddDims, 1), 1500, 1390, kBf16RelTol, 15);
  ExpectOneHeadSplitEqualsItems(WithHeads(kModelDims, 1), 700, 600, kBf16RelTol, 16);
}

// The bf16 form packs bf16 kv_b_proj rows as they are (the f32 copy is rounded to the same bits).
TEST_F(MlaBf16PrefillTest, Bf16KvbGivesTheF32KvbResultsBitForBit) {
  std::mt19937 rng(14);
  for (const MlaDims& d : {WithHeads(kOddDims, 3), WithHeads(kModelDims, 2)}) {
    PrefillCase c(d, {{0, 40}, {130, 129}}, 16, true, rng);
    c.RunAll(MlaPrefillForm::kExpanded);
    const auto f32_out = c.o;
    c.bf16_weights = true;
    for (auto& o : c.o) std::fill(o.begin(), o.end(), -1.0f);
    c.RunAll(MlaPrefillForm::kExpanded);
    EXPECT_EQ(c.o, f32_out) << "r=" << d.kv_lora_rank;
  }
}

// Keys wider than the bf16 form takes (no released model has them) keep the f32 form, bit for bit.
TEST_F(MlaBf16PrefillTest, WideKeysKeepTheF32Form) {
  std::mt19937 rng(13);
  PrefillCase c(WithHeads(MlaDims{1, 1000, 30, 8, 16}, 2), {{0, 5}, {3, 4}}, 16, true, rng);
  c.RunAll(MlaPrefillForm::kExpanded);
  const auto bf16 = c.o;
  SetMatmulPrecision(MatmulPrecision::kF32);
  c.RunAll(MlaPrefillForm::kExpanded);
  EXPECT_EQ(bf16, c.o);
}

TEST(MlaScalarIsaTest, FallsBackToTheReference) {
  SetIsaOverride(Isa::kScalar);
  std::mt19937 rng(7);
  DecodeCase d(WithHeads(kSmallDims, 3), {5, 70}, 16, true, rng);
  d.RunAll();
  PrefillCase p(WithHeads(kSmallDims, 3), {{3, 5}}, 16, true, rng);
  p.bf16_weights = true;  // widened for the reference
  p.RunAll();
  // The reference path reads a compressed cache through the same decoding.
  DecodeCase fp8(WithHeads(kOddDims, 2), {9, 40}, 16, true, rng);
  EncodePool(fp8.pool, LatentDType::kFP8, kOddDims.qk_rope_head_dim);
  fp8.pool.use_encoded = true;
  fp8.RunAll();
  ClearIsaOverride();
  for (size_t s = 0; s < d.q.size(); ++s) EXPECT_TRUE(Close(d.o[s], d.Reference(s)));
  EXPECT_TRUE(Close(p.o[0], p.Reference(0)));
  for (size_t s = 0; s < fp8.q.size(); ++s) EXPECT_TRUE(Close(fp8.o[s], fp8.Reference(s)));
}

}  // namespace
}  // namespace strata::kernels::cpu
