// MHA-form MLA prefill (MlaPrefillMha / MlaPrefillExpand + MlaPrefillAttention) on the GPU vs
// kernels/reference/mla (MlaAttentionReference, non-absorbed, causal) with the output gate
// applied on the host, unchunked and over context windows (max_context_chunk); MlaOutputGate vs
// a host f64 sigmoid; host-side argument checks.
#include "kernels/cuda/mla_prefill.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/mla_decode.h"
#include "kernels/cuda/testing.h"
#include "kernels/reference/latent_codec.h"
#include "kernels/reference/mla.h"

namespace strata::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::FromBf16;
using testing::kEmulated;
using testing::TestSeed;
using testing::ToBf16InPlace;
using testing::Uniform;

constexpr float kScale = 0.0721688f;  // 192^-1/2 (Kimi NoPE)
constexpr int kDn = kMlaQkNopeDim, kDr = kMlaRopeDim, kDv = kMlaVHeadDim, kR = kMlaValueDim;

// One varlen batch: per sequence `prefix` cached tokens plus `num_new` new ones, all of whose
// latent rows sit in a shuffled page pool. Unused blocks and page tails hold NaN bits.
struct Batch {
  std::vector<int> prefix, num_new;
  std::vector<float> latent_rows;   // per sequence, contiguous [C_b, 576] (bf16-rounded values)
  std::vector<int64_t> seq_offset;  // first row of each sequence in latent_rows
  std::vector<uint16_t> pool;       // [num_blocks, 64, 576] bf16 bits
  std::vector<int32_t> block_table;
  std::vector<int32_t> cu_q, cu_k;
  int max_blocks_per_seq = 1;
};

Batch MakeBatch(std::mt19937& rng, const std::vector<int>& prefix,
                const std::vector<int>& num_new) {
  Batch c;
  c.prefix = prefix;
  c.num_new = num_new;
  const size_t seqs = prefix.size();
  int total_pages = 0;
  c.cu_q = {0};
  c.cu_k = {0};
  for (size_t b = 0; b < seqs; ++b) {
    const int len = prefix[b] + num_new[b];
    const int pages = (len + kMlaPageSize - 1) / kMlaPageSize;
    c.max_blocks_per_seq = std::max(c.max_blocks_per_seq, pages);
    total_pages += pages;
    c.cu_q.push_back(c.cu_q.back() + num_new[b]);
    c.cu_k.push_back(c.cu_k.back() + len);
  }
  const int num_blocks = total_pages + 3;  // spare blocks nobody references
  std::vector<int32_t> order(num_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  c.pool.assign(static_cast<size_t>(num_blocks) * kMlaPageSize * kMlaLatentDim, 0xffff);
  c.block_table.assign(seqs * c.max_blocks_per_seq, -1);
  int next = 0;
  int64_t rows = 0;
  for (size_t b = 0; b < seqs; ++b) {
    const int len = prefix[b] + num_new[b];
    c.seq_offset.push_back(rows);
    std::vector<float> values = Uniform(rng, static_cast<size_t>(len) * kMlaLatentDim, -1, 1);
    const std::vector<uint16_t> bits = ToBf16InPlace(values);
    c.latent_rows.insert(c.latent_rows.end(), values.begin(), values.end());
    rows += len;
    const int pages = (len + kMlaPageSize - 1) / kMlaPageSize;
    for (int p = 0; p < pages; ++p) {
      const int block = order[next++];
      c.block_table[b * c.max_blocks_per_seq + p] = block;
      for (int t = 0; t < kMlaPageSize && p * kMlaPageSize + t < len; ++t) {
        std::copy_n(
            bits.begin() + static_cast<int64_t>(p * kMlaPageSize + t) * kMlaLatentDim,
            kMlaLatentDim,
            c.pool.begin() + (static_cast<int64_t>(block) * kMlaPageSize + t) * kMlaLatentDim);
      }
    }
  }
  return c;
}

MlaPrefillParams ParamsFor(const Batch& c, int heads) {
  MlaPrefillParams p;
  p.num_seqs = static_cast<int>(c.prefix.size());
  p.num_heads = heads;
  p.max_blocks_per_seq = c.max_blocks_per_seq;
  for (size_t b = 0; b < c.prefix.size(); ++b) {
    p.max_context = std::max(p.max_context, c.prefix[b] + c.num_new[b]);
    p.max_new = std::max(p.max_new, c.num_new[b]);
  }
  p.total_context = c.cu_k.back();
  p.total_new = c.cu_q.back();
  p.scale = kScale;
  return p;
}

// MlaAttentionReference per sequence (f64 inside), then o ← σ(g)·o in f64 when gate != nullptr.
std::vector<float> Reference(const Batch& c, const std::vector<float>& q,
                             const std::vector<float>& w, int heads, const float* gate) {
  const MlaDims dims{heads, kDn, kDr, kDv, kR};
  const int64_t width = static_cast<int64_t>(heads) * kDv;
  std::vector<float> o(static_cast<size_t>(c.cu_q.back()) * width);
  for (size_t b = 0; b < c.prefix.size(); ++b) {
    MlaAttentionReference(q.data() + static_cast<int64_t>(c.cu_q[b]) * heads * (kDn + kDr),
                          c.latent_rows.data() + c.seq_offset[b] * kMlaLatentDim,
                          c.prefix[b] + c.num_new[b], c.num_new[b], w.data(), dims, kScale,
                          o.data() + static_cast<int64_t>(c.cu_q[b]) * width);
  }
  if (gate != nullptr) {
    for (size_t i = 0; i < o.size(); ++i) {
      o[i] = static_cast<float>(o[i] / (1.0 + std::exp(-static_cast<double>(gate[i]))));
    }
  }
  return o;
}

std::string Name(const Batch& c, int heads) {
  std::string s = absl::StrCat("H", heads);
  for (size_t b = 0; b < c.prefix.size(); ++b) {
    absl::StrAppend(&s, "_", c.prefix[b], "+", c.num_new[b]);
  }
  return s;
}

// Every new length in {1, 2, 17, 63, 64, 65, 200} meets every prefix in {0, 5, 64, 130} across
// the three head counts (the pairing rotates with the case); one sequence with no new tokens.
// Random q, W_kvb and gate logits for `batch` (q and W rounded to bf16, as the device sees
// them) and the reference outputs without and with the gate.
struct Operands {
  std::vector<float> gate;
  std::vector<uint16_t> q_bits, w_bits;
  std::vector<float> expected, expected_gated;
};

Operands MakeOperands(std::mt19937& rng, const Batch& batch, int heads, int64_t tokens) {
  const int64_t width = static_cast<int64_t>(heads) * kDv;
  std::vector<float> q = Uniform(rng, static_cast<size_t>(tokens * heads * (kDn + kDr)), -2, 2);
  std::vector<float> w = Uniform(rng, static_cast<size_t>(heads) * (kDn + kDv) * kR, -0.1f, 0.1f);
  Operands o;
  o.gate = Uniform(rng, static_cast<size_t>(tokens * width), -4, 4);
  o.q_bits = ToBf16InPlace(q);
  o.w_bits = ToBf16InPlace(w);
  o.expected = Reference(batch, q, w, heads, nullptr);
  o.expected_gated = Reference(batch, q, w, heads, o.gate.data());
  return o;
}

// A batch's operands on the device, as both varlen sweeps use them.
struct DeviceOperands {
  DeviceOperands(const Batch& batch, const Operands& ops)
      : q(ops.q_bits),
        w(ops.w_bits),
        pool(batch.pool),
        table(batch.block_table),
        cu_q(batch.cu_q),
        cu_k(batch.cu_k),
        gate(ops.gate) {}
  DeviceArray<uint16_t> q, w, pool;
  DeviceArray<int32_t> table, cu_q, cu_k;
  DeviceArray<float> gate;
};

// The sweeps' batch shapes: sequence i gets new_lens[i] new tokens after prefix
// prefixes[(i + rotate) % size]; with `empty_third`, a sequence with nothing new (its context
// is gathered but never queried) sits third.
void VarlenShape(const std::vector<int>& new_lens, const std::vector<int>& prefixes, size_t rotate,
                 bool empty_third, std::vector<int>* prefix, std::vector<int>* num_new) {
  for (size_t i = 0; i < new_lens.size(); ++i) {
    num_new->push_back(new_lens[i]);
    prefix->push_back(prefixes[(i + rotate) % prefixes.size()]);
  }
  if (empty_third) {
    num_new->insert(num_new->begin() + 2, 0);
    prefix->insert(prefix->begin() + 2, 5);
  }
}

TEST(CudaMlaPrefillTest, MatchesNonAbsorbedReferenceOnVarlenChunkedBatches) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 21);
  absl::StatusOr<CublasHandle> handle = CublasHandle::Create();
  ASSERT_TRUE(handle.ok()) << handle.status();
  const std::vector<int> new_lens = {1, 2, 17, 63, 64, 65, 200};
  const std::vector<int> prefixes = {0, 5, 64, 130};
  const std::vector<int> head_counts = {1, 3, 32};
  for (size_t hc = 0; hc < head_counts.size(); ++hc) {
    const int heads = head_counts[hc];
    std::vector<int> prefix, num_new;
    VarlenShape(new_lens, prefixes, hc, hc == 1, &prefix, &num_new);
    const Batch batch = MakeBatch(rng, prefix, num_new);
    const MlaPrefillParams params = ParamsFor(batch, heads);
    const int64_t tokens = params.total_new;
    const Operands ops = MakeOperands(rng, batch, heads, tokens);
    const std::vector<float>& expected = ops.expected;
    const std::vector<float>& expected_gated = ops.expected_gated;

    DeviceOperands d(batch, ops);
    DeviceArray<float> d_out(expected.size()), d_out_gated(expected.size());
    DeviceArray<uint16_t> d_out_bf16(expected.size());
    DeviceArray<unsigned char> d_ws(static_cast<size_t>(MlaPrefillWorkspaceBytes(params)));
    d_out.Poison();
    d_out_gated.Poison();
    d_out_bf16.Poison();
    d_ws.Poison();  // every scratch row the attention reads must have been written
    const int64_t ws_bytes = static_cast<int64_t>(d_ws.size());
    STRATA_ASSERT_OK(MlaPrefillMha(handle->get(), d.q.get(), d.pool.get(), d.table.get(),
                                   d.cu_q.get(), d.cu_k.get(), d.w.get(), nullptr, params,
                                   d_ws.get(), ws_bytes, d_out.get(), nullptr));
    STRATA_ASSERT_OK(MlaPrefillMha(handle->get(), d.q.get(), d.pool.get(), d.table.get(),
                                   d.cu_q.get(), d.cu_k.get(), d.w.get(), d.gate.get(), params,
                                   d_ws.get(), ws_bytes, d_out_bf16.get(), nullptr));
    // Stage 2 alone on the scratch stage 1 left behind.
    STRATA_ASSERT_OK(MlaPrefillAttention(d.q.get(), d.cu_q.get(), d.cu_k.get(), d.gate.get(),
                                         params, d_ws.get(), ws_bytes, d_out_gated.get(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::string name = Name(batch, heads);
    // bf16 K_nope, V and P (≤ 2^-8 relative each); f32 accumulation.
    STRATA_EXPECT_RELERR("MlaPrefillMha_f32", name, d_out.Download(), expected, 1e-2);
    STRATA_EXPECT_RELERR("MlaPrefillMha_bf16_gated", name, FromBf16(d_out_bf16.Download()),
                         expected_gated, 1.2e-2);
    STRATA_EXPECT_RELERR("MlaPrefillAttention_f32_gated", name, d_out_gated.Download(),
                         expected_gated, 1e-2);
  }
}

// An fp8 copy of `batch`'s pages (rows encoded by the reference codec, unused blocks 0xFF) and
// the bf16 pages those rows read as (bf16 of each decoded value).
void EncodeFp8(const Batch& batch, std::vector<uint8_t>* fp8, std::vector<uint16_t>* as_bf16) {
  const int64_t row_bytes = LatentBytesPerToken(LatentDType::kFP8, kMlaLatentDim, kMlaRopeDim);
  fp8->assign(batch.pool.size() / kMlaLatentDim * row_bytes, 0xFF);
  *as_bf16 = batch.pool;
  std::vector<float> values(kMlaLatentDim);
  for (size_t b = 0; b < batch.prefix.size(); ++b) {
    for (int t = 0; t < batch.prefix[b] + batch.num_new[b]; ++t) {
      const int64_t block = batch.block_table[b * batch.max_blocks_per_seq + t / kMlaPageSize];
      const int64_t row = block * kMlaPageSize + t % kMlaPageSize;
      const float* src = batch.latent_rows.data() + (batch.seq_offset[b] + t) * kMlaLatentDim;
      uint8_t* bytes = fp8->data() + row * row_bytes;
      EncodeLatentRowReference(LatentDType::kFP8, src, kMlaLatentDim, kMlaRopeDim, bytes);
      DecodeLatentRowReference(LatentDType::kFP8, bytes, kMlaLatentDim, kMlaRopeDim, values.data());
      for (int d = 0; d < kMlaLatentDim; ++d) {
        (*as_bf16)[row * kMlaLatentDim + d] = F32ToBf16(values[d]);
      }
    }
  }
}

// The MHA prefill gathers fp8 rows as their dequantized bf16 values: outputs bit-identical to
// the same prefill over the bf16 cache of those values, whole-context and in context windows.
TEST(CudaMlaPrefillTest, Fp8CacheGathersAsItsDequantizedValues) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 29);
  absl::StatusOr<CublasHandle> handle = CublasHandle::Create();
  ASSERT_TRUE(handle.ok()) << handle.status();
  const Batch batch = MakeBatch(rng, {0, 130, 5}, {17, 65, 1});
  const int heads = 3;
  MlaPrefillParams params = ParamsFor(batch, heads);
  const Operands ops = MakeOperands(rng, batch, heads, params.total_new);
  std::vector<uint8_t> fp8;
  std::vector<uint16_t> as_bf16;
  EncodeFp8(batch, &fp8, &as_bf16);
  DeviceOperands d(batch, ops);
  DeviceArray<uint8_t> d_fp8(fp8);
  DeviceArray<uint16_t> d_bf16(as_bf16);
  for (int64_t window : {int64_t{0}, int64_t{64}}) {
    params.max_context_chunk = window;
    DeviceArray<unsigned char> d_ws(static_cast<size_t>(MlaPrefillWorkspaceBytes(params)));
    const int64_t ws_bytes = static_cast<int64_t>(d_ws.size());
    DeviceArray<float> d_ref(ops.expected.size()), d_out(ops.expected.size());
    d_out.Poison();
    params.cache_dtype = LatentDType::kBF16;
    STRATA_ASSERT_OK(MlaPrefillMha(handle->get(), d.q.get(), d_bf16.get(), d.table.get(),
                                   d.cu_q.get(), d.cu_k.get(), d.w.get(), d.gate.get(), params,
                                   d_ws.get(), ws_bytes, d_ref.get(), nullptr));
    params.cache_dtype = LatentDType::kFP8;
    STRATA_ASSERT_OK(MlaPrefillMha(handle->get(), d.q.get(), d_fp8.get(), d.table.get(),
                                   d.cu_q.get(), d.cu_k.get(), d.w.get(), d.gate.get(), params,
                                   d_ws.get(), ws_bytes, d_out.get(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_out.Download(), d_ref.Download()) << "window " << window;
    // And close to the reference on the original (unquantized) rows: fp8's rounding.
    STRATA_EXPECT_RELERR("MlaPrefillMha_fp8", absl::StrCat("window", window), d_out.Download(),
                         ops.expected_gated, 0.1);
  }
}

// A prompt split into chunks (each chunk attending to the cached rows before it) gives the
// reference result of the whole prompt.
TEST(CudaMlaPrefillTest, ChunkedPromptMatchesReference) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 22);
  absl::StatusOr<CublasHandle> handle = CublasHandle::Create();
  ASSERT_TRUE(handle.ok()) << handle.status();
  const int heads = 5, len = 333;
  const Batch whole = MakeBatch(rng, {0}, {len});
  std::vector<float> q = Uniform(rng, static_cast<size_t>(len) * heads * (kDn + kDr), -2, 2);
  std::vector<float> w = Uniform(rng, static_cast<size_t>(heads) * (kDn + kDv) * kR, -0.1f, 0.1f);
  const std::vector<uint16_t> q_bits = ToBf16InPlace(q);
  const std::vector<uint16_t> w_bits = ToBf16InPlace(w);
  const std::vector<float> expected = Reference(whole, q, w, heads, nullptr);
  DeviceArray<uint16_t> d_q(q_bits), d_w(w_bits), d_pool(whole.pool);
  DeviceArray<int32_t> d_table(whole.block_table);
  DeviceArray<float> d_out(expected.size());
  d_out.Poison();
  const int64_t width = static_cast<int64_t>(heads) * kDv;
  for (const auto& [start, end] :
       std::vector<std::pair<int, int>>{{0, 100}, {100, 101}, {101, 333}}) {
    Batch chunk = whole;  // same pages; this chunk's view of the sequence
    chunk.prefix = {start};
    chunk.num_new = {end - start};
    chunk.cu_q = {0, end - start};
    chunk.cu_k = {0, end};
    const MlaPrefillParams params = ParamsFor(chunk, heads);
    DeviceArray<int32_t> d_cu_q(chunk.cu_q), d_cu_k(chunk.cu_k);
    DeviceArray<unsigned char> d_ws(static_cast<size_t>(MlaPrefillWorkspaceBytes(params)));
    d_ws.Poison();
    STRATA_ASSERT_OK(MlaPrefillMha(
        handle->get(), d_q.get() + static_cast<int64_t>(start) * heads * (kDn + kDr), d_pool.get(),
        d_table.get(), d_cu_q.get(), d_cu_k.get(), d_w.get(), nullptr, params, d_ws.get(),
        static_cast<int64_t>(d_ws.size()), d_out.get() + start * width, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  STRATA_EXPECT_RELERR("MlaPrefillMha_chunked", absl::StrCat("H", heads, "_T", len),
                       d_out.Download(), expected, 1e-2);
}

// MlaPrefillMha with context windows of each size in `chunks` on one batch: f32 ungated and bf16
// gated vs the reference, f32 vs the unchunked kernel; scratch and outputs NaN-poisoned.
void CheckContextChunks(std::mt19937& rng, cublasHandle_t handle, int heads,
                        const std::vector<int>& prefix, const std::vector<int>& num_new,
                        const std::vector<int64_t>& chunks) {
  const Batch batch = MakeBatch(rng, prefix, num_new);
  const MlaPrefillParams whole = ParamsFor(batch, heads);
  const int64_t tokens = whole.total_new;
  const Operands ops = MakeOperands(rng, batch, heads, tokens);
  const std::vector<float>& expected = ops.expected;
  const std::vector<float>& expected_gated = ops.expected_gated;

  DeviceOperands d(batch, ops);
  DeviceArray<float> d_whole(expected.size());
  DeviceArray<unsigned char> d_ws_whole(static_cast<size_t>(MlaPrefillWorkspaceBytes(whole)));
  d_whole.Poison();
  d_ws_whole.Poison();
  STRATA_ASSERT_OK(MlaPrefillMha(handle, d.q.get(), d.pool.get(), d.table.get(), d.cu_q.get(),
                                 d.cu_k.get(), d.w.get(), nullptr, whole, d_ws_whole.get(),
                                 static_cast<int64_t>(d_ws_whole.size()), d_whole.get(), nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> unchunked = d_whole.Download();
  for (const int64_t chunk : chunks) {
    MlaPrefillParams params = whole;
    params.max_context_chunk = chunk;
    DeviceArray<unsigned char> d_ws(static_cast<size_t>(MlaPrefillWorkspaceBytes(params)));
    DeviceArray<float> d_out(expected.size());
    DeviceArray<uint16_t> d_out_bf16(expected.size());
    d_ws.Poison();  // every window row the attention reads must have been written
    d_out.Poison();
    d_out_bf16.Poison();
    const int64_t ws_bytes = static_cast<int64_t>(d_ws.size());
    STRATA_ASSERT_OK(MlaPrefillMha(handle, d.q.get(), d.pool.get(), d.table.get(), d.cu_q.get(),
                                   d.cu_k.get(), d.w.get(), nullptr, params, d_ws.get(), ws_bytes,
                                   d_out.get(), nullptr));
    STRATA_ASSERT_OK(MlaPrefillMha(handle, d.q.get(), d.pool.get(), d.table.get(), d.cu_q.get(),
                                   d.cu_k.get(), d.w.get(), d.gate.get(), params, d_ws.get(),
                                   ws_bytes, d_out_bf16.get(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::string name = absl::StrCat(Name(batch, heads), "_W", chunk);
    const std::vector<float> out = d_out.Download();
    // As the unchunked kernel (bf16 K_nope, V, P; f32 accumulation and merge).
    STRATA_EXPECT_RELERR("MlaPrefillMha_ctxchunk_f32", name, out, expected, 1e-2);
    STRATA_EXPECT_RELERR("MlaPrefillMha_ctxchunk_bf16_gated", name, FromBf16(d_out_bf16.Download()),
                         expected_gated, 1.2e-2);
    // Only P's bf16 rounding moves with the window's running max.
    STRATA_EXPECT_RELERR("MlaPrefillMha_ctxchunk_vs_unchunked", name, out, unchunked, 5e-3);
  }
}

// Context windows of 1, 64, 100 and 1000 rows (max_context_chunk) over the varlen batches of
// MatchesNonAbsorbedReferenceOnVarlenChunkedBatches (windows split sequences, hold several, or
// hold keys no query of a tile may see) and over a batch with a 3000-token prefix.
TEST(CudaMlaPrefillTest, ContextChunksMatchReferenceAndUnchunked) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 24);
  absl::StatusOr<CublasHandle> handle = CublasHandle::Create();
  ASSERT_TRUE(handle.ok()) << handle.status();
  // On the emulator (one CPU core per test) 32 heads, a 3000-token prefix, one-row windows and
  // the 1000-row window take minutes; 3 heads, 400 tokens and 7-row windows still cross many
  // windows, none of them aligned to the 64-row pages.
  const std::vector<int64_t> chunks =
      kEmulated ? std::vector<int64_t>{7, 64, 100} : std::vector<int64_t>{1, 64, 100, 1000};
  const std::vector<int> new_lens = {1, 2, 17, 63, 64, 65, 200};
  const std::vector<int> prefixes = {0, 5, 64, 130};
  const std::vector<int> head_counts = kEmulated ? std::vector<int>{3} : std::vector<int>{1, 3, 32};
  const int long_prefix = kEmulated ? 400 : 3000;
  for (size_t hc = 0; hc < head_counts.size(); ++hc) {
    std::vector<int> prefix, num_new;
    VarlenShape(new_lens, prefixes, hc, head_counts[hc] == 3, &prefix, &num_new);
    CheckContextChunks(rng, handle->get(), head_counts[hc], prefix, num_new, chunks);
  }
  CheckContextChunks(rng, handle->get(), 4, {long_prefix, 0, 41}, {130, 64, 1}, chunks);
}

// With max_context_chunk the workspace is one window's expansion plus the f32 accumulators,
// whatever the context length (runs without a GPU).
TEST(CudaMlaPrefillTest, ContextChunkBoundsTheWorkspace) {
  MlaPrefillParams p;  // K3: 96 heads, a 100k-token prefix + 2048 new tokens
  p.num_seqs = 1;
  p.num_heads = 96;
  p.max_blocks_per_seq = 1632;
  p.max_context = 1632 * 64;
  p.max_new = 2048;
  p.total_context = p.max_context;
  p.total_new = 2048;
  p.scale = kScale;
  const int64_t unchunked = p.total_context * (576 + 96 * 256) * 2;
  EXPECT_EQ(MlaPrefillWorkspaceBytes(p), unchunked);
  p.max_context_chunk = 8192;
  // L [W, 576] + KV [W, H·256] bf16, O_acc [T, H, 128] + (m, l) [T, H, 2] f32 (all 256-B
  // multiples).
  const int64_t chunked =
      8192 * 576 * 2 + 8192 * 96 * 256 * 2 + 2048 * 96 * 128 * 4 + 2048 * 96 * 8;
  EXPECT_EQ(MlaPrefillWorkspaceBytes(p), chunked);
  EXPECT_LT(chunked, int64_t{1} << 30);
  MlaPrefillParams shorter = p;
  shorter.max_context = shorter.total_context = 20000;
  EXPECT_EQ(MlaPrefillWorkspaceBytes(shorter), chunked);
  MlaPrefillParams one_window = p;
  one_window.max_context_chunk = p.total_context;  // a window covering everything: unchunked
  EXPECT_EQ(MlaPrefillWorkspaceBytes(one_window), unchunked);

  // MlaPrefillContextChunkFor: the largest 64-row multiple within a 1 GiB budget.
  const int64_t budget = int64_t{1} << 30;
  const int64_t w = MlaPrefillContextChunkFor(p, budget);
  ASSERT_GT(w, 0);
  EXPECT_EQ(w % 64, 0);
  MlaPrefillParams fit = p;
  fit.max_context_chunk = w;
  EXPECT_LE(MlaPrefillWorkspaceBytes(fit), budget);
  fit.max_context_chunk = w + 64;
  EXPECT_GT(MlaPrefillWorkspaceBytes(fit), budget);
  EXPECT_EQ(MlaPrefillContextChunkFor(p, unchunked), 0);                   // the whole context fits
  EXPECT_EQ(MlaPrefillContextChunkFor(p, 2048 * 96 * (128 + 2) * 4), -1);  // accumulators only
}

// Chunking is MlaPrefillMha's alone; a negative chunk and a workspace sized without the
// accumulators are rejected, naming the limit (runs without a GPU).
TEST(CudaMlaPrefillTest, RejectsBadContextChunkNamingTheLimit) {
  MlaPrefillParams p;
  p.num_seqs = 2;
  p.num_heads = 4;
  p.max_blocks_per_seq = 3;
  p.max_context = 150;
  p.max_new = 100;
  p.total_context = 200;
  p.total_new = 120;
  p.scale = kScale;
  p.max_context_chunk = 64;
  const int64_t ws = MlaPrefillWorkspaceBytes(p);
  void* fake_ws = reinterpret_cast<void*>(uintptr_t{256});  // never dereferenced: checks fail first
  const absl::Status expand =
      MlaPrefillExpand(nullptr, nullptr, nullptr, nullptr, nullptr, p, fake_ws, ws, nullptr);
  EXPECT_EQ(expand.code(), absl::StatusCode::kInvalidArgument) << expand;
  EXPECT_NE(expand.message().find("max_context_chunk 64 < total_context 200"), std::string::npos)
      << expand;
  const absl::Status attn = MlaPrefillAttention(nullptr, nullptr, nullptr, nullptr, p, fake_ws, ws,
                                                static_cast<float*>(nullptr), nullptr);
  EXPECT_EQ(attn.code(), absl::StatusCode::kInvalidArgument) << attn;
  EXPECT_NE(attn.message().find("MlaPrefillMha"), std::string::npos) << attn;
  struct Bad {
    int64_t chunk, ws_bytes;
    std::string needle;
  };
  for (const Bad& b : std::vector<Bad>{{-1, ws, "max_context_chunk -1"},
                                       {64, ws - 1, "workspace"},
                                       {64, 64 * (576 + 4 * 256) * 2, "workspace"}}) {
    MlaPrefillParams bad = p;
    bad.max_context_chunk = b.chunk;
    const absl::Status mha =
        MlaPrefillMha(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, bad,
                      fake_ws, b.ws_bytes, static_cast<uint16_t*>(nullptr), nullptr);
    EXPECT_EQ(mha.code(), absl::StatusCode::kInvalidArgument) << mha;
    EXPECT_NE(mha.message().find(b.needle), std::string::npos) << mha;
  }
}

TEST(CudaMlaPrefillTest, OutputGateMatchesHostSigmoid) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 23);
  // 7 × 384 takes the float4 path; 3 × 5 (odd element count) the scalar one.
  for (const auto& [rows, width] : std::vector<std::pair<int64_t, int64_t>>{{7, 384}, {3, 5}}) {
    const std::vector<float> o = Uniform(rng, static_cast<size_t>(rows * width), -3, 3);
    const std::vector<float> g = Uniform(rng, static_cast<size_t>(rows * width), -30, 30);
    std::vector<float> expected(o.size());
    for (size_t i = 0; i < o.size(); ++i) {
      expected[i] = static_cast<float>(o[i] / (1.0 + std::exp(-static_cast<double>(g[i]))));
    }
    DeviceArray<float> d_o(o), d_g(g);
    STRATA_ASSERT_OK(MlaOutputGate(d_o.get(), d_g.get(), rows, width, nullptr));
    STRATA_EXPECT_RELERR("MlaOutputGate", absl::StrCat(rows, "x", width), d_o.Download(), expected,
                         1e-6);
  }
}

// The host-side checks reject bad shapes before touching the device (runs without a GPU).
TEST(CudaMlaPrefillTest, RejectsBadParamsNamingTheLimit) {
  MlaPrefillParams good;
  good.num_seqs = 2;
  good.num_heads = 4;
  good.max_blocks_per_seq = 3;
  good.max_context = 150;
  good.max_new = 100;
  good.total_context = 200;
  good.total_new = 120;
  good.scale = kScale;
  // Scratch = rows · (576 + 256·H) · 2 bytes, each part padded to 256 bytes.
  EXPECT_EQ(MlaPrefillWorkspaceBytes(good), 200 * 576 * 2 + 200 * 4 * 256 * 2);
  const int64_t ws = MlaPrefillWorkspaceBytes(good);
  void* fake_ws = reinterpret_cast<void*>(uintptr_t{256});  // never dereferenced: checks fail first
  struct Bad {
    MlaPrefillParams params;
    int64_t ws_bytes;
    std::string needle;
  };
  std::vector<Bad> bad;
  bad.push_back({good, ws - 1, "workspace"});
  MlaPrefillParams p = good;
  p.max_context = 3 * 64 + 1;
  bad.push_back({p, ws, "max_blocks_per_seq"});
  p = good;
  p.num_heads = 0;
  bad.push_back({p, ws, "num_heads"});
  p = good;
  p.max_new = 151;
  bad.push_back({p, ws, "max_new"});
  p = good;
  p.total_new = 201;
  bad.push_back({p, ws, "total_new"});
  p = good;
  p.num_seqs = 70000;
  bad.push_back({p, ws, "65535"});
  p = good;
  p.scale = NAN;
  bad.push_back({p, ws, "scale"});
  for (const Bad& b : bad) {
    const absl::Status expand = MlaPrefillExpand(nullptr, nullptr, nullptr, nullptr, nullptr,
                                                 b.params, fake_ws, b.ws_bytes, nullptr);
    EXPECT_EQ(expand.code(), absl::StatusCode::kInvalidArgument) << expand;
    EXPECT_NE(expand.message().find(b.needle), std::string::npos) << expand;
    const absl::Status attn =
        MlaPrefillAttention(nullptr, nullptr, nullptr, nullptr, b.params, fake_ws, b.ws_bytes,
                            static_cast<float*>(nullptr), nullptr);
    EXPECT_EQ(attn.code(), absl::StatusCode::kInvalidArgument) << attn;
    EXPECT_NE(attn.message().find(b.needle), std::string::npos) << attn;
  }
  const absl::Status gate = MlaOutputGate(nullptr, nullptr, -1, 4, nullptr);
  EXPECT_EQ(gate.code(), absl::StatusCode::kInvalidArgument) << gate;
}

}  // namespace
}  // namespace strata::kernels::cuda
