// MLA paged decode (absorbed form) on the GPU vs host f64 attention and vs
// kernels/reference/mla (MlaAttentionAbsorbedReference) through the cuBLAS projections.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "core/dtype.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/mla_decode.h"
#include "kernels/cuda/testing.h"
#include "kernels/cuda/wgmma.h"
#include "kernels/reference/latent_codec.h"
#include "kernels/reference/mla.h"

namespace strata::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::FromBf16;
using testing::TestSeed;
using testing::ToBf16InPlace;
using testing::Uniform;

constexpr float kScale = 0.0721688f;  // 192^-1/2 (Kimi NoPE)

// A paged cache for `lens` sequences: pages are scattered over a pool with extra unused blocks;
// unused blocks and the tail of each last page hold NaN bits (the kernel must never read them
// into the result).
struct PagedCache {
  std::vector<float> latent_rows;   // per sequence, contiguous [len, 576] (bf16-rounded values)
  std::vector<int64_t> seq_offset;  // first row of each sequence in latent_rows
  std::vector<uint16_t> pool;       // [num_blocks, 64, 576] bf16 bits
  std::vector<int32_t> block_table;
  int max_blocks_per_seq = 0;
};

// Pages holding `rows` (per sequence, [len, 576] values already rounded to bf16), scattered
// over the pool in a random order.
PagedCache PageRows(std::mt19937& rng, const std::vector<std::vector<float>>& rows) {
  PagedCache c;
  int total_pages = 0;
  std::vector<int> lens;
  for (const std::vector<float>& seq : rows) {
    lens.push_back(static_cast<int>(seq.size() / kMlaLatentDim));
    const int pages = (lens.back() + kMlaPageSize - 1) / kMlaPageSize;
    c.max_blocks_per_seq = std::max(c.max_blocks_per_seq, pages);
    total_pages += pages;
  }
  c.max_blocks_per_seq = std::max(c.max_blocks_per_seq, 1);
  const int num_blocks = total_pages + 3;  // spare blocks nobody references
  std::vector<int32_t> order(num_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  c.pool.assign(static_cast<size_t>(num_blocks) * kMlaPageSize * kMlaLatentDim, 0xffff);
  c.block_table.assign(lens.size() * c.max_blocks_per_seq, -1);
  int next = 0;
  int64_t offset = 0;
  for (size_t b = 0; b < lens.size(); ++b) {
    c.seq_offset.push_back(offset);
    c.latent_rows.insert(c.latent_rows.end(), rows[b].begin(), rows[b].end());
    offset += lens[b];
    std::vector<float> values = rows[b];
    const std::vector<uint16_t> bits = ToBf16InPlace(values);
    const int pages = (lens[b] + kMlaPageSize - 1) / kMlaPageSize;
    for (int p = 0; p < pages; ++p) {
      const int block = order[next++];
      c.block_table[b * c.max_blocks_per_seq + p] = block;
      for (int t = 0; t < kMlaPageSize && p * kMlaPageSize + t < lens[b]; ++t) {
        std::copy_n(
            bits.begin() + static_cast<int64_t>(p * kMlaPageSize + t) * kMlaLatentDim,
            kMlaLatentDim,
            c.pool.begin() + (static_cast<int64_t>(block) * kMlaPageSize + t) * kMlaLatentDim);
      }
    }
  }
  return c;
}

PagedCache MakeCache(std::mt19937& rng, const std::vector<int>& lens) {
  std::vector<std::vector<float>> rows;
  for (int len : lens) {
    rows.push_back(Uniform(rng, static_cast<size_t>(len) * kMlaLatentDim, -1, 1));
    ToBf16InPlace(rows.back());
  }
  return PageRows(rng, rows);
}

// ō[b, h, :] = Σ_j softmax_j(scale · q̃·κ_j) c_j in f64 (an independent host computation).
std::vector<float> HostAttention(const std::vector<float>& q_abs, const PagedCache& c,
                                 const std::vector<int>& lens, int heads) {
  std::vector<float> out(lens.size() * heads * kMlaValueDim);
  for (size_t b = 0; b < lens.size(); ++b) {
    const float* rows = c.latent_rows.data() + c.seq_offset[b] * kMlaLatentDim;
    for (int h = 0; h < heads; ++h) {
      const float* q = q_abs.data() + (b * heads + h) * kMlaLatentDim;
      std::vector<double> s(lens[b]);
      for (int j = 0; j < lens[b]; ++j) {
        double dot = 0.0;
        for (int d = 0; d < kMlaLatentDim; ++d) dot += double{q[d]} * rows[j * kMlaLatentDim + d];
        s[j] = dot * kScale;
      }
      const double m = *std::max_element(s.begin(), s.end());
      double sum = 0.0;
      for (double& v : s) sum += (v = std::exp(v - m));
      for (int d = 0; d < kMlaValueDim; ++d) {
        double acc = 0.0;
        for (int j = 0; j < lens[b]; ++j) acc += s[j] * rows[j * kMlaLatentDim + d];
        out[(b * heads + h) * kMlaValueDim + d] = static_cast<float>(acc / sum);
      }
    }
  }
  return out;
}

struct CoreCase {
  int heads;
  std::vector<int> lens;
  int forced_splits;  // 0: automatic
};

std::string Name(const CoreCase& c) {
  std::string s = absl::StrCat("H", c.heads, "_lens");
  for (int len : c.lens) absl::StrAppend(&s, "_", len);
  if (c.forced_splits > 0) absl::StrAppend(&s, "_forced", c.forced_splits);
  return s;
}

MlaDecodeParams ParamsFor(const CoreCase& tc, const PagedCache& cache) {
  MlaDecodeParams params;
  params.batch = static_cast<int>(tc.lens.size());
  params.num_heads = tc.heads;
  params.max_blocks_per_seq = cache.max_blocks_per_seq;
  params.max_context = *std::max_element(tc.lens.begin(), tc.lens.end());
  params.scale = kScale;
  params.num_splits = tc.forced_splits;
  return params;
}

// The tensor-core kernels a test runs: mma.sync everywhere, wgmma on sm_90 (the emulator's
// devices and H100/H200), each under the kernel name the results table prints.
struct TensorCoreKernel {
  MlaDecodeKernel kernel;
  const char* name;
};
std::vector<TensorCoreKernel> TensorCoreKernels() {
  std::vector<TensorCoreKernel> kernels = {{MlaDecodeKernel::kMmaSync, "MlaPagedDecode"}};
  if (WgmmaAvailable()) {
    kernels.push_back({MlaDecodeKernel::kWgmma, "MlaPagedDecodeWgmma"});
  }
  return kernels;
}

TEST(CudaMlaDecodeTest, AllKernelsMatchHostAttentionOnOddShapes) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed());
  const std::vector<CoreCase> cases = {
      {1, {1}, 0},
      {5, {63}, 0},
      {32, {64, 65}, 0},
      {33, {1000, 7, 129}, 0},
      {40, {4099, 2000}, 0},
      {17, {3001}, 7},
      {12, {1, 64, 640, 333}, 1},
      {3, {200}, 64},     // more splits than pages: empty splits
      {96, {130, 1}, 0},  // K3's heads: two wgmma tiles of 48
      {64, {70}, 2},      // two tiles of 32
  };
  for (const CoreCase& tc : cases) {
    const int batch = static_cast<int>(tc.lens.size());
    PagedCache cache = MakeCache(rng, tc.lens);
    std::vector<float> q =
        Uniform(rng, static_cast<size_t>(batch) * tc.heads * kMlaLatentDim, -2, 2);
    const std::vector<uint16_t> q_bits = ToBf16InPlace(q);
    const std::vector<float> expected = HostAttention(q, cache, tc.lens, tc.heads);

    MlaDecodeParams params = ParamsFor(tc, cache);

    DeviceArray<uint16_t> d_q(q_bits), d_pool(cache.pool);
    DeviceArray<int32_t> d_table(cache.block_table), d_lens(tc.lens);
    DeviceArray<float> d_out(expected.size()), d_simple(expected.size());
    DeviceArray<uint16_t> d_out_bf16(expected.size());
    for (const TensorCoreKernel& k : TensorCoreKernels()) {
      params.kernel = k.kernel;
      DeviceArray<unsigned char> d_ws(static_cast<size_t>(MlaDecodeWorkspaceBytes(params)));
      d_out.Poison();
      d_out_bf16.Poison();
      d_ws.Poison();
      STRATA_ASSERT_OK(MlaPagedDecode(d_q.get(), d_pool.get(), d_table.get(), d_lens.get(), params,
                                      d_ws.get(), static_cast<int64_t>(d_ws.size()), d_out.get(),
                                      nullptr));
      STRATA_ASSERT_OK(MlaPagedDecode(d_q.get(), d_pool.get(), d_table.get(), d_lens.get(), params,
                                      d_ws.get(), static_cast<int64_t>(d_ws.size()),
                                      d_out_bf16.get(), nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::string name = absl::StrCat(Name(tc), "_splits", MlaDecodeNumSplits(params));
      // Tensor-core paths: P is rounded to bf16 (≤ 2^-9 relative per weight).
      STRATA_EXPECT_RELERR(absl::StrCat(k.name, "_f32"), name, d_out.Download(), expected, 5e-3);
      STRATA_EXPECT_RELERR(absl::StrCat(k.name, "_bf16"), name, FromBf16(d_out_bf16.Download()),
                           expected, 8e-3);
    }
    d_simple.Poison();
    STRATA_ASSERT_OK(MlaPagedDecodeSimple(d_q.get(), d_pool.get(), d_table.get(), d_lens.get(),
                                          params, d_simple.get(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::string name = Name(tc);
    // CUDA-core path: f32 throughout.
    STRATA_EXPECT_RELERR("MlaPagedDecodeSimple", name, d_simple.Download(), expected, 1e-4);
  }
}

// q → MlaAbsorbQuery → MlaPagedDecode (bf16 ō) → MlaApplyValueProjection equals the absorbed
// reference; bf16 intermediates (q̃, P, ō) bound the error.
TEST(CudaMlaDecodeTest, AbsorbedPipelineMatchesReference) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 1);
  absl::StatusOr<CublasHandle> handle = CublasHandle::Create();
  ASSERT_TRUE(handle.ok()) << handle.status();
  const int dn = 128, dv = 128, dr = kMlaRopeDim, r = kMlaValueDim;
  for (int heads : {1, 3, 20}) {
    const std::vector<int> lens = {1, 130, 777};
    const int batch = static_cast<int>(lens.size());
    PagedCache cache = MakeCache(rng, lens);
    std::vector<float> q = Uniform(rng, static_cast<size_t>(batch) * heads * (dn + dr), -1, 1);
    std::vector<float> w = Uniform(rng, static_cast<size_t>(heads) * (dn + dv) * r, -0.1f, 0.1f);
    const std::vector<uint16_t> q_bits = ToBf16InPlace(q);
    const std::vector<uint16_t> w_bits = ToBf16InPlace(w);

    MlaDims dims{heads, dn, dr, dv, r};
    std::vector<float> expected(static_cast<size_t>(batch) * heads * dv);
    for (int b = 0; b < batch; ++b) {
      MlaAttentionAbsorbedReference(q.data() + static_cast<size_t>(b) * heads * (dn + dr),
                                    cache.latent_rows.data() + cache.seq_offset[b] * kMlaLatentDim,
                                    lens[b], 1, w.data(), dims, kScale,
                                    expected.data() + static_cast<size_t>(b) * heads * dv);
    }

    MlaDecodeParams params;
    params.batch = batch;
    params.num_heads = heads;
    params.max_blocks_per_seq = cache.max_blocks_per_seq;
    params.max_context = *std::max_element(lens.begin(), lens.end());
    params.scale = kScale;
    DeviceArray<uint16_t> d_q(q_bits), d_w(w_bits), d_pool(cache.pool);
    DeviceArray<int32_t> d_table(cache.block_table), d_lens(lens);
    DeviceArray<uint16_t> d_q_abs(static_cast<size_t>(batch) * heads * kMlaLatentDim);
    DeviceArray<uint16_t> d_o_lat(static_cast<size_t>(batch) * heads * kMlaValueDim);
    DeviceArray<float> d_o(expected.size());
    DeviceArray<unsigned char> d_ws(static_cast<size_t>(MlaDecodeWorkspaceBytes(params)));
    d_q_abs.Poison();
    d_o_lat.Poison();
    d_o.Poison();
    const MlaHeadDims head_dims{heads, dn, dv};
    STRATA_ASSERT_OK(MlaAbsorbQuery(handle->get(), d_q.get(), batch, d_w.get(), head_dims,
                                    d_q_abs.get(), nullptr));
    STRATA_ASSERT_OK(MlaPagedDecode(d_q_abs.get(), d_pool.get(), d_table.get(), d_lens.get(),
                                    params, d_ws.get(), static_cast<int64_t>(d_ws.size()),
                                    d_o_lat.get(), nullptr));
    STRATA_ASSERT_OK(MlaApplyValueProjection(handle->get(), d_o_lat.get(), batch, d_w.get(),
                                             head_dims, d_o.get(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    STRATA_EXPECT_RELERR("MlaDecodePipeline", absl::StrCat("H", heads), d_o.Download(), expected,
                         2e-2);
  }
}

// Causal varlen prefill through MlaPagedPrefill equals the NON-absorbed reference
// (MlaAttentionReference): one fresh prompt and one chunked-prefill continuation in one batch.
TEST(CudaMlaDecodeTest, PagedPrefillMatchesNonAbsorbedReference) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 11);
  absl::StatusOr<CublasHandle> handle = CublasHandle::Create();
  ASSERT_TRUE(handle.ok()) << handle.status();
  const int dn = 128, dv = 128, dr = kMlaRopeDim, r = kMlaValueDim, heads = 7;
  const std::vector<int> ctx = {150, 300, 1};  // context incl. the new tokens
  const std::vector<int> num_new = {150, 41, 1};
  PagedCache cache = MakeCache(rng, ctx);
  std::vector<int32_t> query_seq, lens;
  for (size_t s = 0; s < ctx.size(); ++s) {
    for (int t = 0; t < num_new[s]; ++t) {
      query_seq.push_back(static_cast<int32_t>(s));
      lens.push_back(ctx[s] - num_new[s] + t + 1);  // causal: up to and including itself
    }
  }
  const int tokens = static_cast<int>(query_seq.size());
  std::vector<float> q = Uniform(rng, static_cast<size_t>(tokens) * heads * (dn + dr), -1, 1);
  std::vector<float> w = Uniform(rng, static_cast<size_t>(heads) * (dn + dv) * r, -0.1f, 0.1f);
  const std::vector<uint16_t> q_bits = ToBf16InPlace(q);
  const std::vector<uint16_t> w_bits = ToBf16InPlace(w);
  const MlaDims dims{heads, dn, dr, dv, r};
  std::vector<float> expected(static_cast<size_t>(tokens) * heads * dv);
  int first = 0;
  for (size_t s = 0; s < ctx.size(); ++s) {
    MlaAttentionReference(q.data() + static_cast<size_t>(first) * heads * (dn + dr),
                          cache.latent_rows.data() + cache.seq_offset[s] * kMlaLatentDim, ctx[s],
                          num_new[s], w.data(), dims, kScale,
                          expected.data() + static_cast<size_t>(first) * heads * dv);
    first += num_new[s];
  }

  MlaDecodeParams params;
  params.batch = tokens;
  params.num_heads = heads;
  params.max_blocks_per_seq = cache.max_blocks_per_seq;
  params.max_context = *std::max_element(ctx.begin(), ctx.end());
  params.scale = kScale;
  DeviceArray<uint16_t> d_q(q_bits), d_w(w_bits), d_pool(cache.pool);
  DeviceArray<int32_t> d_table(cache.block_table), d_query_seq(query_seq), d_lens(lens);
  DeviceArray<uint16_t> d_q_abs(static_cast<size_t>(tokens) * heads * kMlaLatentDim);
  DeviceArray<uint16_t> d_o_lat(static_cast<size_t>(tokens) * heads * kMlaValueDim);
  DeviceArray<float> d_o(expected.size());
  DeviceArray<unsigned char> d_ws(static_cast<size_t>(MlaDecodeWorkspaceBytes(params)));
  d_o_lat.Poison();
  d_o.Poison();
  const MlaHeadDims head_dims{heads, dn, dv};
  STRATA_ASSERT_OK(MlaAbsorbQuery(handle->get(), d_q.get(), tokens, d_w.get(), head_dims,
                                  d_q_abs.get(), nullptr));
  STRATA_ASSERT_OK(MlaPagedPrefill(d_q_abs.get(), d_pool.get(), d_table.get(), d_query_seq.get(),
                                   d_lens.get(), params, d_ws.get(),
                                   static_cast<int64_t>(d_ws.size()), d_o_lat.get(), nullptr));
  STRATA_ASSERT_OK(MlaApplyValueProjection(handle->get(), d_o_lat.get(), tokens, d_w.get(),
                                           head_dims, d_o.get(), nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  STRATA_EXPECT_RELERR("MlaPagedPrefill", absl::StrCat("H", heads, "_T", tokens), d_o.Download(),
                       expected, 2e-2);
}

// Decode context parallelism: each of C ranks holds the positions ≡ d (mod C) of every
// sequence; MlaPagedPartial over each rank's rows (causal queries of prefill chunks and decode
// rows, some seeing none of a rank's rows) then MlaMergePartials equals the attention over the
// whole context (f64 host computation), and each partial's LSE is the f64 log-sum-exp of its rows.
TEST(CudaMlaDecodeTest, ContextParallelPartialsMergeToWholeContextAttention) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 21);
  const std::vector<int> lens = {1, 70, 203};  // whole contexts
  std::vector<std::vector<float>> full;
  for (int len : lens) {
    full.push_back(Uniform(rng, static_cast<size_t>(len) * kMlaLatentDim, -1, 1));
    ToBf16InPlace(full.back());
  }
  // Queries: every position of the 70-token sequence (a prefill chunk from 0), the last 9 of
  // the 203-token one (a continuation), and position 0 of the first (sees only rank 0's row).
  std::vector<int32_t> query_seq, query_pos;
  for (int t = 0; t < 70; ++t) query_seq.push_back(1), query_pos.push_back(t);
  for (int t = 194; t < 203; ++t) query_seq.push_back(2), query_pos.push_back(t);
  query_seq.push_back(0), query_pos.push_back(0);
  const int queries = static_cast<int>(query_seq.size());
  for (int heads : {1, 5, 33}) {
    std::vector<float> q =
        Uniform(rng, static_cast<size_t>(queries) * heads * kMlaLatentDim, -2, 2);
    const std::vector<uint16_t> q_bits = ToBf16InPlace(q);
    std::vector<float> expected(static_cast<size_t>(queries) * heads * kMlaValueDim);
    for (int i = 0; i < queries; ++i) {  // whole causal context of each query
      const int s = query_seq[i];
      PagedCache one;  // HostAttention reads only the rows
      one.latent_rows.assign(
          full[s].begin(),
          full[s].begin() + static_cast<int64_t>(query_pos[i] + 1) * kMlaLatentDim);
      one.seq_offset = {0};
      const std::vector<float> qi(q.begin() + static_cast<int64_t>(i) * heads * kMlaLatentDim,
                                  q.begin() + static_cast<int64_t>(i + 1) * heads * kMlaLatentDim);
      const std::vector<float> o = HostAttention(qi, one, {query_pos[i] + 1}, heads);
      std::copy(o.begin(), o.end(),
                expected.begin() + static_cast<int64_t>(i) * heads * kMlaValueDim);
    }
    for (int parts : {1, 2, 3}) {
      const int64_t items = static_cast<int64_t>(queries) * heads;
      std::vector<float> partials;
      for (int d = 0; d < parts; ++d) {
        std::vector<std::vector<float>> local(lens.size());
        for (size_t s = 0; s < lens.size(); ++s) {
          for (int p = d; p < lens[s]; p += parts) {
            local[s].insert(local[s].end(),
                            full[s].begin() + static_cast<int64_t>(p) * kMlaLatentDim,
                            full[s].begin() + static_cast<int64_t>(p + 1) * kMlaLatentDim);
          }
        }
        PagedCache cache = PageRows(rng, local);
        std::vector<int32_t> local_lens;
        for (int pos : query_pos) local_lens.push_back(pos >= d ? (pos - d) / parts + 1 : 0);
        MlaDecodeParams params;
        params.batch = queries;
        params.num_heads = heads;
        params.max_blocks_per_seq = cache.max_blocks_per_seq;
        params.max_context = *std::max_element(local_lens.begin(), local_lens.end());
        params.scale = kScale;
        DeviceArray<uint16_t> d_q(q_bits), d_pool(cache.pool);
        DeviceArray<int32_t> d_table(cache.block_table), d_seq(query_seq), d_lens(local_lens);
        DeviceArray<float> d_part(static_cast<size_t>(items) * (kMlaValueDim + 1));
        DeviceArray<unsigned char> d_ws(static_cast<size_t>(MlaDecodeWorkspaceBytes(params)));
        d_part.Poison();
        STRATA_ASSERT_OK(MlaPagedPartial(d_q.get(), d_pool.get(), d_table.get(), d_seq.get(),
                                         d_lens.get(), params, d_ws.get(),
                                         static_cast<int64_t>(d_ws.size()), d_part.get(), nullptr));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<float> part = d_part.Download();
        // The LSE of each (query, head) over this rank's rows, in f64.
        for (int i = 0; i < queries; ++i) {
          const float* rows =
              cache.latent_rows.data() + cache.seq_offset[query_seq[i]] * kMlaLatentDim;
          for (int h = 0; h < heads; ++h) {
            const float got =
                part[(static_cast<int64_t>(i) * heads + h) * (kMlaValueDim + 1) + kMlaValueDim];
            if (local_lens[i] == 0) {
              EXPECT_TRUE(std::isinf(got) && got < 0) << "rank " << d << " query " << i;
              continue;
            }
            const float* qh = q.data() + (static_cast<int64_t>(i) * heads + h) * kMlaLatentDim;
            double m = -INFINITY, sum = 0.0;
            std::vector<double> s(local_lens[i]);
            for (int j = 0; j < local_lens[i]; ++j) {
              double dot = 0.0;
              for (int k = 0; k < kMlaLatentDim; ++k)
                dot += double{qh[k]} * rows[j * kMlaLatentDim + k];
              m = std::max(m, s[j] = dot * kScale);
            }
            for (double v : s) sum += std::exp(v - m);
            EXPECT_NEAR(got, m + std::log(sum), 2e-3 * (1.0 + std::abs(m)))
                << "parts " << parts << " rank " << d << " query " << i << " head " << h;
          }
        }
        partials.insert(partials.end(), part.begin(), part.end());
      }
      DeviceArray<float> d_partials(partials);
      DeviceArray<uint16_t> d_out(static_cast<size_t>(items) * kMlaValueDim);
      d_out.Poison();
      STRATA_ASSERT_OK(MlaMergePartials(d_partials.get(), parts, items, d_out.get(), nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      STRATA_EXPECT_RELERR("MlaPagedPartial+MlaMergePartials",
                           absl::StrCat("H", heads, "_parts", parts), FromBf16(d_out.Download()),
                           expected, 8e-3);
    }
  }
  EXPECT_FALSE(MlaMergePartials(nullptr, 0, 1, nullptr, nullptr).ok());
}

// An fp8 cache (core/latent_row.h) of the same pages: rows encoded by the reference codec, and
// the bf16 cache those rows read as (bf16 of each decoded value). Unused fp8 blocks are 0xFF
// bytes (NaN codes and scales), as unused bf16 blocks are NaN.
struct Fp8Pages {
  std::vector<uint8_t> fp8;       // [num_blocks, 64, 656]
  std::vector<uint16_t> as_bf16;  // [num_blocks, 64, 576]
  std::vector<float> decoded;     // per sequence [len, 576], f32 decoded values
};

Fp8Pages EncodeFp8(const PagedCache& c, const std::vector<int>& lens) {
  const int64_t kRowBytes = LatentBytesPerToken(LatentDType::kFP8, kMlaLatentDim, kMlaRopeDim);
  Fp8Pages f;
  const size_t rows = c.pool.size() / kMlaLatentDim;
  f.fp8.assign(rows * kRowBytes, 0xFF);
  f.as_bf16 = c.pool;
  f.decoded = c.latent_rows;
  for (size_t b = 0; b < lens.size(); ++b) {
    for (int t = 0; t < lens[b]; ++t) {
      const int64_t block = c.block_table[b * c.max_blocks_per_seq + t / kMlaPageSize];
      const int64_t row = block * kMlaPageSize + t % kMlaPageSize;
      float* values = f.decoded.data() + (c.seq_offset[b] + t) * kMlaLatentDim;
      uint8_t* bytes = f.fp8.data() + row * kRowBytes;
      EncodeLatentRowReference(LatentDType::kFP8, values, kMlaLatentDim, kMlaRopeDim, bytes);
      DecodeLatentRowReference(LatentDType::kFP8, bytes, kMlaLatentDim, kMlaRopeDim, values);
      for (int d = 0; d < kMlaLatentDim; ++d) {
        f.as_bf16[row * kMlaLatentDim + d] = F32ToBf16(values[d]);
      }
    }
  }
  return f;
}

// Both decode kernels read an fp8 cache: the tensor-core kernel exactly as the bf16 cache of its
// dequantized values (bit-identical outputs: the dequantization is the only difference), the
// f32 kernel within f32 rounding of host attention over the decoded values.
TEST(CudaMlaDecodeTest, Fp8CacheReadsAsItsDequantizedValues) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 5);
  const std::vector<CoreCase> cases = {{5, {63}, 0}, {33, {1000, 7, 129}, 0}, {12, {1, 640}, 3}};
  for (const CoreCase& tc : cases) {
    const int batch = static_cast<int>(tc.lens.size());
    const PagedCache cache = MakeCache(rng, tc.lens);
    const Fp8Pages fp8 = EncodeFp8(cache, tc.lens);
    PagedCache decoded = cache;
    decoded.latent_rows = fp8.decoded;
    std::vector<float> q =
        Uniform(rng, static_cast<size_t>(batch) * tc.heads * kMlaLatentDim, -2, 2);
    const std::vector<uint16_t> q_bits = ToBf16InPlace(q);
    const std::vector<float> expected = HostAttention(q, decoded, tc.lens, tc.heads);

    MlaDecodeParams params = ParamsFor(tc, cache);
    DeviceArray<uint16_t> d_q(q_bits), d_bf16(fp8.as_bf16);
    DeviceArray<uint8_t> d_fp8(fp8.fp8);
    DeviceArray<int32_t> d_table(cache.block_table), d_lens(tc.lens);
    DeviceArray<float> d_ref(expected.size()), d_out(expected.size()), d_simple(expected.size());
    const std::string name = Name(tc);
    for (const TensorCoreKernel& k : TensorCoreKernels()) {
      params.kernel = k.kernel;
      params.cache_dtype = LatentDType::kBF16;
      DeviceArray<unsigned char> d_ws(static_cast<size_t>(MlaDecodeWorkspaceBytes(params)));
      d_out.Poison();
      STRATA_ASSERT_OK(MlaPagedDecode(d_q.get(), d_bf16.get(), d_table.get(), d_lens.get(), params,
                                      d_ws.get(), static_cast<int64_t>(d_ws.size()), d_ref.get(),
                                      nullptr));
      params.cache_dtype = LatentDType::kFP8;
      STRATA_ASSERT_OK(MlaPagedDecode(d_q.get(), d_fp8.get(), d_table.get(), d_lens.get(), params,
                                      d_ws.get(), static_cast<int64_t>(d_ws.size()), d_out.get(),
                                      nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(d_out.Download(), d_ref.Download()) << k.name << " " << name;
      STRATA_EXPECT_RELERR(absl::StrCat(k.name, "_fp8"), name, d_out.Download(), expected, 5e-3);
    }
    d_simple.Poison();
    STRATA_ASSERT_OK(MlaPagedDecodeSimple(d_q.get(), d_fp8.get(), d_table.get(), d_lens.get(),
                                          params, d_simple.get(), nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    STRATA_EXPECT_RELERR("MlaPagedDecodeSimple_fp8", name, d_simple.Download(), expected, 1e-4);
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
