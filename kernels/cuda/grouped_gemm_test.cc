// GroupedGemm / GroupedGemmGlu (Strata's tensor-core grouped GEMM, offsets on the device) vs
// kernels/reference (MatmulBf16Reference, MatmulMxfp4Reference, GluReference, DecodeMxfp4,
// DecodeInt8) and vs the cuBLAS MoeGroupedGemm path, over odd shapes, empty experts, both tiles,
// the three weight formats, both activations; one expert without an offsets table; a CUDA-graph
// replay with new offsets; host argument checks.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/int8_quantize.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/grouped_gemm.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/mxfp4.h"
#include "kernels/cuda/testing.h"
#include "kernels/cuda/wgmma.h"
#include "kernels/reference/glu.h"
#include "kernels/reference/matmul.h"

namespace strata::kernels::cuda {
namespace {

using testing::DeviceArray;
using testing::FromBf16;
using testing::TestSeed;
using testing::ToBf16InPlace;
using testing::Uniform;

enum class Fmt { kBf16, kMxfp4, kInt8 };
constexpr Fmt kFormats[] = {Fmt::kBf16, Fmt::kMxfp4, Fmt::kInt8};

// Routed rows of `experts` experts (group sizes given) and their weights [E, n_w, k].
struct Problem {
  int experts = 0;
  std::vector<int32_t> offsets;  // [E+1]
  int64_t rows = 0, n_w = 0, k = 0;
  Fmt fmt = Fmt::kBf16;
  std::vector<float> x;  // bf16-exact values
  // w_bits: the bf16 weights, or for int8 what the kernel multiplies by: F32ToBf16(DecodeInt8).
  std::vector<uint16_t> x_bits, w_bits;
  std::vector<uint8_t> packed, scales;  // MXFP4
  std::vector<int8_t> codes;            // int8
  std::vector<uint16_t> int8_scales;

  bool quantized() const { return fmt != Fmt::kBf16; }
};

Problem MakeProblem(std::mt19937& rng, const std::vector<int>& groups, int64_t n_w, int64_t k,
                    Fmt fmt) {
  Problem p;
  p.experts = static_cast<int>(groups.size());
  p.offsets.assign(groups.size() + 1, 0);
  for (size_t e = 0; e < groups.size(); ++e) p.offsets[e + 1] = p.offsets[e] + groups[e];
  p.rows = p.offsets.back();
  p.n_w = n_w;
  p.k = k;
  p.fmt = fmt;
  p.x = Uniform(rng, static_cast<size_t>(p.rows * k), -1, 1);
  p.x_bits = ToBf16InPlace(p.x);
  const size_t elems = static_cast<size_t>(p.experts * n_w * k);
  if (fmt == Fmt::kInt8) {
    // Codes over the whole range, scales of ~0.2 / 127 with several exponents, some groups 0.
    std::uniform_int_distribution<int> code(-127, 127), zero(0, 15);
    std::uniform_real_distribution<float> scale(0.0004f, 0.004f);
    p.codes.resize(elems);
    p.int8_scales.resize(elems / 32);
    for (int8_t& c : p.codes) c = static_cast<int8_t>(code(rng));
    for (uint16_t& s : p.int8_scales) s = zero(rng) == 0 ? 0 : F32ToBf16(scale(rng));
    p.w_bits = testing::Int8AsBf16(p.codes, p.int8_scales);
  } else if (fmt == Fmt::kMxfp4) {
    std::uniform_int_distribution<int> byte(0, 255), scale(119, 123);
    p.packed.resize(elems / 2);
    p.scales.resize(elems / 32);
    for (uint8_t& b : p.packed) b = static_cast<uint8_t>(byte(rng));
    for (uint8_t& s : p.scales) s = static_cast<uint8_t>(scale(rng));
  } else {
    std::vector<float> w = Uniform(rng, elems, -0.2f, 0.2f);
    p.w_bits = ToBf16InPlace(w);
  }
  return p;
}

// [rows, n_w] f32: each expert's rows times its weights (f64-accumulating reference).
std::vector<float> ReferenceGemm(const Problem& p) {
  std::vector<float> y(static_cast<size_t>(p.rows * p.n_w), 0.0f);
  for (int e = 0; e < p.experts; ++e) {
    const int64_t r0 = p.offsets[e], m = p.offsets[e + 1] - r0;
    if (m == 0) continue;
    const float* x = p.x.data() + r0 * p.k;
    float* out = y.data() + r0 * p.n_w;
    if (p.fmt == Fmt::kMxfp4) {
      MatmulMxfp4Reference(x, m, p.k, p.packed.data() + e * p.n_w * p.k / 2,
                           p.scales.data() + e * p.n_w * p.k / 32, p.n_w, out);
    } else {
      MatmulBf16Reference(x, m, p.k, p.w_bits.data() + e * p.n_w * p.k, p.n_w, out);
    }
  }
  return y;
}

// h [rows, inter] = GLU(gate, up) of the reference gate|up product.
std::vector<float> ReferenceGlu(const Problem& p, const GluParams& glu) {
  const std::vector<float> gu = ReferenceGemm(p);
  const int64_t inter = p.n_w / 2;
  std::vector<float> h(static_cast<size_t>(p.rows * inter));
  for (int64_t r = 0; r < p.rows; ++r) {
    GluReference(gu.data() + r * p.n_w, gu.data() + r * p.n_w + inter, inter, glu,
                 h.data() + r * inter);
  }
  return h;
}

// The problem's operands on the device.
struct DeviceProblem {
  explicit DeviceProblem(const Problem& p)
      : x(p.x_bits),
        w(p.w_bits),
        packed(p.packed),
        scales(p.scales),
        codes(p.codes),
        int8_scales(p.int8_scales),
        offsets(p.offsets),
        workspace(static_cast<size_t>(GroupedGemmWorkspaceBytes(p.experts, p.rows))) {}
  GroupedWeights weights(const Problem& p) const {
    switch (p.fmt) {
      case Fmt::kMxfp4:
        return GroupedWeights::Mxfp4(packed.get(), scales.get());
      case Fmt::kInt8:
        return GroupedWeights::Int8(codes.get(), int8_scales.get());
      case Fmt::kBf16:
        break;
    }
    return GroupedWeights::Bf16(w.get());
  }
  int64_t ws_bytes() const { return static_cast<int64_t>(workspace.size()); }
  DeviceArray<uint16_t> x, w;
  DeviceArray<uint8_t> packed, scales;
  DeviceArray<int8_t> codes;
  DeviceArray<uint16_t> int8_scales;
  DeviceArray<int32_t> offsets;
  DeviceArray<unsigned char> workspace;
};

const char* TileName(GroupedGemmTile tile) {
  return tile == GroupedGemmTile::kLarge        ? "large"
         : tile == GroupedGemmTile::kSmall      ? "small"
         : tile == GroupedGemmTile::kLargeWgmma ? "large_wgmma"
                                                : "auto";
}

// The explicit tiles a weight format runs on this device (the wgmma tile: bf16 weights on sm_90,
// the emulator's devices included), then kAuto when asked.
std::vector<GroupedGemmTile> TilesFor(Fmt fmt, bool with_auto = false) {
  std::vector<GroupedGemmTile> tiles = {GroupedGemmTile::kLarge, GroupedGemmTile::kSmall};
  if (fmt == Fmt::kBf16 && WgmmaAvailable()) tiles.push_back(GroupedGemmTile::kLargeWgmma);
  if (with_auto) tiles.push_back(GroupedGemmTile::kAuto);
  return tiles;
}

const char* FmtName(Fmt f) {
  return f == Fmt::kMxfp4 ? "mxfp4" : f == Fmt::kInt8 ? "int8" : "bf16";
}

std::string CaseName(const Problem& p, GroupedGemmTile tile) {
  return absl::StrCat(FmtName(p.fmt), "_", TileName(tile), "_E", p.experts, "_rows", p.rows, "_nw",
                      p.n_w, "_k", p.k);
}

void CheckPlain(const Problem& p, GroupedGemmTile tile) {
  const std::vector<float> expected = ReferenceGemm(p);
  DeviceProblem d(p);
  DeviceArray<float> y32(expected.size());
  DeviceArray<uint16_t> y16(expected.size());
  y32.Poison();
  y16.Poison();
  STRATA_ASSERT_OK(GroupedGemm(d.x.get(), d.offsets.get(), p.experts, p.rows, d.weights(p), p.n_w,
                               p.k, y32.get(), tile, d.workspace.get(), d.ws_bytes(), nullptr));
  STRATA_ASSERT_OK(GroupedGemm(d.x.get(), d.offsets.get(), p.experts, p.rows, d.weights(p), p.n_w,
                               p.k, y16.get(), tile, d.workspace.get(), d.ws_bytes(), nullptr));
  const std::string name = CaseName(p, tile);
  STRATA_EXPECT_RELERR("GroupedGemm_f32", name, y32.Download(), expected, 5e-5);
  STRATA_EXPECT_RELERR("GroupedGemm_bf16", name, FromBf16(y16.Download()), expected, 4e-3);
}

void CheckGlu(const Problem& p, const GluParams& glu, GroupedGemmTile tile) {
  const std::vector<float> expected = ReferenceGlu(p, glu);
  DeviceProblem d(p);
  DeviceArray<uint16_t> h(expected.size());
  h.Poison();
  STRATA_ASSERT_OK(GroupedGemmGlu(d.x.get(), d.offsets.get(), p.experts, p.rows, d.weights(p),
                                  p.n_w / 2, p.k, glu, h.get(), tile, d.workspace.get(),
                                  d.ws_bytes(), nullptr));
  const std::string kernel =
      glu.kind == GluKind::kSwiGlu ? "GroupedGemmGlu_swiglu" : "GroupedGemmGlu_situ";
  STRATA_EXPECT_RELERR(kernel, CaseName(p, tile), FromBf16(h.Download()), expected, 4e-3);
}

struct Shape {
  std::vector<int> groups;
  int64_t n, inter, k;
};

std::vector<Shape> OddShapes(std::mt19937& rng) {
  std::vector<int> many(67);
  std::uniform_int_distribution<int> pick(0, 6);
  const int sizes[7] = {0, 0, 1, 2, 5, 7, 9};
  for (int& g : many) g = sizes[pick(rng)];
  many[13] = 129;
  return {
      {{129}, 200, 100, 96},
      {{7, 0, 129}, 72, 37, 160},
      {{1, 0, 7, 129, 0, 16, 17, 3}, 136, 68, 64},
      {many, 40, 21, 32},
      {{1, 7, 129}, 130, 65, 40},  // k % 32 != 0: bf16 weights only
  };
}

TEST(CudaGroupedGemmTest, PlainMatchesReferenceOnOddShapes) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 21);
  for (const Shape& s : OddShapes(rng)) {
    for (Fmt fmt : kFormats) {
      if (fmt != Fmt::kBf16 && s.k % 32 != 0) continue;
      const Problem p = MakeProblem(rng, s.groups, s.n, s.k, fmt);
      for (GroupedGemmTile tile : TilesFor(fmt, /*with_auto=*/true)) {
        CheckPlain(p, tile);
      }
    }
  }
}

TEST(CudaGroupedGemmTest, FusedGluMatchesReferenceOnOddShapes) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 22);
  const GluParams swiglu{GluKind::kSwiGlu, 4.0f, 0.0f};
  const GluParams situ{GluKind::kSitu, 4.0f, 25.0f};
  const GluParams situ_uncapped{GluKind::kSitu, 3.0f, 0.0f};
  for (const Shape& s : OddShapes(rng)) {
    for (Fmt fmt : kFormats) {
      if (fmt != Fmt::kBf16 && s.k % 32 != 0) continue;
      const Problem p = MakeProblem(rng, s.groups, 2 * s.inter, s.k, fmt);
      for (GroupedGemmTile tile : TilesFor(fmt)) {
        for (const GluParams& glu : {swiglu, situ, situ_uncapped}) CheckGlu(p, glu, tile);
      }
    }
  }
}

// The MoE path as the CUDA model runs it: the gate|up product gathers its rows from the
// unpermuted activations (x_rows = MoePermute's permuted_token; rows naming no token read zeros)
// and builds the work list; the next product reuses it. Reuse is checked to build nothing: with
// the list's count cleared, a reusing call writes no output row.
TEST(CudaGroupedGemmTest, GathersRowsInTheLoadPathAndReusesTheWorkList) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 26);
  const GluParams situ{GluKind::kSitu, 4.0f, 25.0f};
  for (Fmt fmt : kFormats) {
    for (GroupedGemmTile tile : TilesFor(fmt)) {
      Problem p = MakeProblem(rng, {3, 0, 17, 1, 40}, 2 * 72, 96, fmt);
      const int64_t tokens = 23;
      std::vector<float> source = Uniform(rng, static_cast<size_t>(tokens * p.k), -1, 1);
      const std::vector<uint16_t> source_bits = ToBf16InPlace(source);
      std::uniform_int_distribution<int32_t> pick(-1, static_cast<int32_t>(tokens));
      std::vector<int32_t> x_rows(static_cast<size_t>(p.rows));
      for (int64_t r = 0; r < p.rows; ++r) {  // the problem's rows become the gathered ones
        const int32_t t = x_rows[r] = pick(rng);
        for (int64_t c = 0; c < p.k; ++c) {
          p.x[r * p.k + c] = t >= 0 && t < tokens ? source[t * p.k + c] : 0.0f;
        }
      }
      p.x_bits = ToBf16InPlace(p.x);
      DeviceProblem d(p);
      DeviceArray<uint16_t> d_source(source_bits), h(static_cast<size_t>(p.rows * p.n_w / 2));
      DeviceArray<int32_t> d_rows(x_rows);
      DeviceArray<float> y(static_cast<size_t>(p.rows * p.n_w));
      h.Poison();
      y.Poison();
      GroupedGemmOptions gather;
      gather.x_rows = d_rows.get();
      gather.x_row_count = tokens;
      STRATA_ASSERT_OK(GroupedGemmGlu(d_source.get(), d.offsets.get(), p.experts, p.rows,
                                      d.weights(p), p.n_w / 2, p.k, situ, h.get(), tile,
                                      d.workspace.get(), d.ws_bytes(), nullptr, gather));
      GroupedGemmOptions reuse;
      reuse.reuse_work_list = true;
      STRATA_ASSERT_OK(GroupedGemm(d.x.get(), d.offsets.get(), p.experts, p.rows, d.weights(p),
                                   p.n_w, p.k, y.get(), tile, d.workspace.get(), d.ws_bytes(),
                                   nullptr, reuse));
      const std::string name = CaseName(p, tile);
      STRATA_EXPECT_RELERR("GroupedGemmGlu_gathered", name, FromBf16(h.Download()),
                           ReferenceGlu(p, situ), 4e-3);
      STRATA_EXPECT_RELERR("GroupedGemm_reused_list", name, y.Download(), ReferenceGemm(p), 5e-5);

      ASSERT_EQ(cudaMemset(d.workspace.get(), 0, 4), cudaSuccess);  // the list's entry count
      y.Poison();
      const std::vector<float> poisoned = y.Download();
      STRATA_ASSERT_OK(GroupedGemm(d.x.get(), d.offsets.get(), p.experts, p.rows, d.weights(p),
                                   p.n_w, p.k, y.get(), tile, d.workspace.get(), d.ws_bytes(),
                                   nullptr, reuse));
      const std::vector<float> after = y.Download();
      EXPECT_EQ(0, std::memcmp(after.data(), poisoned.data(), after.size() * sizeof(float)))
          << name << ": a reusing call built a work list";
    }
  }
  GroupedGemmOptions no_count;
  no_count.x_rows = reinterpret_cast<const int32_t*>(16);
  EXPECT_FALSE(GroupedGemm(reinterpret_cast<const uint16_t*>(16), nullptr, 1, 4,
                           GroupedWeights::Bf16(reinterpret_cast<const uint16_t*>(16)), 8, 8,
                           reinterpret_cast<float*>(16), GroupedGemmTile::kAuto,
                           reinterpret_cast<void*>(16), 1 << 20, nullptr, no_count)
                   .ok());
}

// Multi-tile shapes (several k tiles past the pipeline depth, several column tiles) against
// cuBLAS: MoeGroupedGemm on bf16 weights, and on DequantMxfp4ToBf16's scratch for MXFP4.
TEST(CudaGroupedGemmTest, MatchesCublasGroupedGemm) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 23);
  absl::StatusOr<CublasHandle> handle = CublasHandle::Create();
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::uniform_int_distribution<int> size(0, 300);
  std::vector<int> groups(8);
  for (int& g : groups) g = size(rng);
  groups[2] = 0;
  for (Fmt fmt : kFormats) {
    const bool mxfp4 = fmt == Fmt::kMxfp4;
    const Problem p = MakeProblem(rng, groups, 384, 512, fmt);
    DeviceProblem d(p);  // int8: cuBLAS runs on w_bits, the decoded bf16 weights
    const std::vector<float> expected = ReferenceGemm(p);
    DeviceArray<uint16_t> w_bf16(mxfp4 ? static_cast<size_t>(p.experts * p.n_w * p.k) : 0);
    if (mxfp4) {
      STRATA_ASSERT_OK(DequantMxfp4ToBf16(d.packed.get(), d.scales.get(), p.experts * p.n_w, p.k,
                                          w_bf16.get(), nullptr));
    }
    DeviceArray<float> y_cublas(expected.size()), y_own(expected.size());
    DeviceArray<unsigned char> ws(MoeGroupedGemmWorkspaceBytes(p.experts));
    y_cublas.Poison();
    STRATA_ASSERT_OK(MoeGroupedGemm(handle->get(), d.x.get(), p.offsets.data(), p.experts,
                                    mxfp4 ? w_bf16.get() : d.w.get(), p.n_w, p.k, y_cublas.get(),
                                    GroupedGemmMode::kAuto, ws.get(),
                                    static_cast<int64_t>(ws.size()), nullptr, nullptr));
    const std::vector<float> cublas = y_cublas.Download();
    for (GroupedGemmTile tile : TilesFor(fmt)) {
      y_own.Poison();
      STRATA_ASSERT_OK(GroupedGemm(d.x.get(), d.offsets.get(), p.experts, p.rows, d.weights(p),
                                   p.n_w, p.k, y_own.get(), tile, d.workspace.get(), d.ws_bytes(),
                                   nullptr));
      const std::vector<float> own = y_own.Download();
      STRATA_EXPECT_RELERR("GroupedGemm_vs_cublas", CaseName(p, tile), own, cublas, 2e-5);
      STRATA_EXPECT_RELERR("GroupedGemm_f32", CaseName(p, tile), own, expected, 5e-5);
    }
  }
}

// x = the k × k identity makes y[r, j] = W[j, r] exactly (one product by 1.0, the rest +0): runs
// one expert of p (rows = k) with `tile` and returns y [k, n_w].
std::vector<float> IdentityProduct(Problem p, GroupedGemmTile tile) {
  std::fill(p.x.begin(), p.x.end(), 0.0f);
  for (int64_t r = 0; r < p.k; ++r) p.x[r * p.k + r] = 1.0f;
  p.x_bits = ToBf16InPlace(p.x);
  DeviceProblem d(p);
  DeviceArray<float> y(static_cast<size_t>(p.k * p.n_w));
  y.Poison();
  const absl::Status st = GroupedGemm(d.x.get(), d.offsets.get(), 1, p.k, d.weights(p), p.n_w, p.k,
                                      y.get(), tile, d.workspace.get(), d.ws_bytes(), nullptr);
  EXPECT_TRUE(st.ok()) << st;
  return y.Download();
}

// x = identity (rows = k) makes y[r, j] = W[j, r] exactly (one product by 1.0, the rest +0), so
// the in-kernel MXFP4 decode is checked bit for bit against DecodeMxfp4 + F32ToBf16 over scale
// bytes 0..252 (253+ would overflow to ±inf and turn 0·inf into NaN elsewhere in the row; the
// NaN scale 0xff is therefore not covered here). Scales < 4 (subnormal products, decoded on the
// exact f32 path) are reported separately: they also depend on the tensor cores keeping
// subnormal bf16 operands.
TEST(CudaGroupedGemmTest, Mxfp4DecodeIsBitExact) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 24);
  const int64_t n = 72, k = 256;
  Problem p = MakeProblem(rng, {static_cast<int>(k)}, n, k, Fmt::kMxfp4);
  for (size_t b = 0; b < p.scales.size(); ++b) p.scales[b] = static_cast<uint8_t>(b % 253);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j) {
    DecodeMxfp4(p.packed.data() + j * k / 2, p.scales.data() + j * k / 32, k, w.data() + j * k);
  }
  for (GroupedGemmTile tile : {GroupedGemmTile::kLarge, GroupedGemmTile::kSmall}) {
    const std::vector<float> got = IdentityProduct(p, tile);
    int64_t normal = 0, normal_bad = 0, tiny = 0, tiny_bad = 0;
    for (int64_t r = 0; r < k; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        const uint16_t want = F32ToBf16(w[j * k + r]);
        // Values compare equal (±0 alike: the sum 1·(−0) + 0·w + … is +0 in any order).
        const bool bad = !(got[r * n + j] == Bf16ToF32(want));
        const bool is_tiny = p.scales[(j * k + r) / 32] < 4;
        (is_tiny ? tiny : normal) += 1;
        (is_tiny ? tiny_bad : normal_bad) += bad;
      }
    }
    EXPECT_TRUE(testing::ReportRelErr("GroupedGemm_mxfp4_decode",
                                      absl::StrCat(TileName(tile), "_scales_4_252"),
                                      static_cast<double>(normal_bad) / normal, 0.0));
    EXPECT_TRUE(testing::ReportRelErr("GroupedGemm_mxfp4_decode",
                                      absl::StrCat(TileName(tile), "_scales_0_3"),
                                      static_cast<double>(tiny_bad) / tiny, 0.0));
  }
}

// The int8 decode through an identity x, bit for bit against F32ToBf16(DecodeInt8): every code
// −127..127 and scales with exponents from 2^-100 to 2^100 (normal products; both halves of a
// scale word, so odd and even scale indices).
TEST(CudaGroupedGemmTest, Int8DecodeIsBitExact) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 26);
  const int64_t n = 72, k = 256;
  Problem p = MakeProblem(rng, {static_cast<int>(k)}, n, k, Fmt::kInt8);
  std::uniform_int_distribution<int> exponent(-100, 100), mantissa(0, 127);
  for (size_t g = 0; g < p.int8_scales.size(); ++g) {
    const uint32_t biased = static_cast<uint32_t>(exponent(rng) + 127);
    p.int8_scales[g] = static_cast<uint16_t>((biased << 7) | static_cast<uint32_t>(mantissa(rng)));
  }
  for (size_t i = 0; i < p.codes.size(); ++i) p.codes[i] = static_cast<int8_t>(int(i % 255) - 127);
  p.w_bits = testing::Int8AsBf16(p.codes, p.int8_scales);
  for (GroupedGemmTile tile : {GroupedGemmTile::kLarge, GroupedGemmTile::kSmall}) {
    const std::vector<float> got = IdentityProduct(p, tile);
    int64_t bad = 0;
    for (int64_t r = 0; r < k; ++r) {
      for (int64_t j = 0; j < n; ++j) bad += !(got[r * n + j] == Bf16ToF32(p.w_bits[j * k + r]));
    }
    EXPECT_TRUE(testing::ReportRelErr("GroupedGemm_int8_decode", TileName(tile),
                                      static_cast<double>(bad) / static_cast<double>(k * n), 0.0));
  }
}

// One expert and no offsets table: every row is the expert's (the dense use, int8_gemm.h).
TEST(CudaGroupedGemmTest, OneExpertWithoutOffsetsTakesEveryRow) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 27);
  for (Fmt fmt : kFormats) {
    const Problem p = MakeProblem(rng, {37}, 136, 96, fmt);
    const std::vector<float> expected = ReferenceGemm(p);
    DeviceProblem d(p);
    DeviceArray<float> y(expected.size());
    for (GroupedGemmTile tile : TilesFor(fmt)) {
      y.Poison();
      STRATA_ASSERT_OK(GroupedGemm(d.x.get(), nullptr, 1, p.rows, d.weights(p), p.n_w, p.k, y.get(),
                                   tile, d.workspace.get(), d.ws_bytes(), nullptr));
      STRATA_EXPECT_RELERR("GroupedGemm_f32", absl::StrCat("no_offsets_", CaseName(p, tile)),
                           y.Download(), expected, 5e-5);
    }
  }
}

// A row's result does not depend on the tile that computed it (nor so on the other rows of the
// call): every weight format feeds the tensor cores the same operands in the same k order in
// both tiles, so the bits agree — a prompt computed in pieces (small tiles) gives what the
// whole prompt (large tiles) gives. k = 96: three 32-wide stages of the large tile, a
// zero-filled half stage of the small one.
TEST(CudaGroupedGemmTest, EveryTileGivesEachRowTheSameBits) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 28);
  for (Fmt fmt : kFormats) {
    const Problem p = MakeProblem(rng, {37, 0, 5, 130}, 136, 96, fmt);
    DeviceProblem d(p);
    std::vector<std::vector<float>> out;
    const std::vector<GroupedGemmTile> tiles = TilesFor(fmt);
    for (GroupedGemmTile tile : tiles) {
      DeviceArray<float> y(static_cast<size_t>(p.rows * p.n_w));
      y.Poison();
      STRATA_ASSERT_OK(GroupedGemm(d.x.get(), d.offsets.get(), p.experts, p.rows, d.weights(p),
                                   p.n_w, p.k, y.get(), tile, d.workspace.get(), d.ws_bytes(),
                                   nullptr));
      out.push_back(y.Download());
    }
    for (size_t t = 1; t < tiles.size(); ++t) {
      int64_t differ = 0;
      for (size_t i = 0; i < out[0].size(); ++i) {
        differ += std::memcmp(&out[0][i], &out[t][i], sizeof(float)) != 0;
      }
      EXPECT_EQ(differ, 0) << FmtName(fmt) << ": " << differ << " of " << out[0].size()
                           << " outputs differ between the large and the " << TileName(tiles[t])
                           << " tile";
    }
  }
}

// The offsets are read on the device: a captured graph replayed after the offsets change
// computes the new split.
TEST(CudaGroupedGemmTest, GraphReplayFollowsDeviceOffsets) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(TestSeed() + 25);
  const GluParams glu{GluKind::kSitu, 4.0f, 25.0f};
  Problem p = MakeProblem(rng, {40, 0, 90, 3, 11}, 2 * 70, 96, Fmt::kBf16);
  DeviceProblem d(p);
  DeviceArray<float> y(static_cast<size_t>(p.rows * p.n_w));
  DeviceArray<uint16_t> h(static_cast<size_t>(p.rows * p.n_w / 2));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const absl::Status plain =
      GroupedGemm(d.x.get(), d.offsets.get(), p.experts, p.rows, d.weights(p), p.n_w, p.k, y.get(),
                  GroupedGemmTile::kAuto, d.workspace.get(), d.ws_bytes(), stream);
  const absl::Status fused =
      GroupedGemmGlu(d.x.get(), d.offsets.get(), p.experts, p.rows, d.weights(p), p.n_w / 2, p.k,
                     glu, h.get(), GroupedGemmTile::kAuto, d.workspace.get(), d.ws_bytes(), stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  STRATA_ASSERT_OK(plain);
  STRATA_ASSERT_OK(fused);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (const std::vector<int32_t>& offsets :
       {p.offsets, std::vector<int32_t>{0, 1, 1, 100, 144, 144}}) {
    p.offsets = offsets;
    d.offsets.Upload(offsets);
    y.Poison();
    h.Poison();
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const std::string name = absl::StrCat("graph_split_", offsets[1], "_", offsets[3]);
    STRATA_EXPECT_RELERR("GroupedGemm_f32", name, y.Download(), ReferenceGemm(p), 5e-5);
    STRATA_EXPECT_RELERR("GroupedGemmGlu_situ", name, FromBf16(h.Download()), ReferenceGlu(p, glu),
                         4e-3);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// Host-side checks fail before any CUDA call (runs without a GPU; the pointers are never read).
TEST(CudaGroupedGemmTest, RejectsArgumentsOutsideTheLimits) {
  const auto* x = reinterpret_cast<const uint16_t*>(uintptr_t{0x10000});
  const auto* offsets = reinterpret_cast<const int32_t*>(uintptr_t{0x20000});
  const auto* w = reinterpret_cast<const uint16_t*>(uintptr_t{0x30000});
  const auto* packed = reinterpret_cast<const uint8_t*>(uintptr_t{0x40000});
  const auto* scales = reinterpret_cast<const uint8_t*>(uintptr_t{0x50001});
  auto* y = reinterpret_cast<float*>(uintptr_t{0x60000});
  auto* ws = reinterpret_cast<void*>(uintptr_t{0x70000});
  const int64_t ws_bytes = GroupedGemmWorkspaceBytes(4, 100);
  auto run = [&](const uint16_t* xp, const GroupedWeights& wt, int64_t k, float* yp,
                 int64_t bytes) {
    return GroupedGemm(xp, offsets, 4, 100, wt, 64, k, yp, GroupedGemmTile::kAuto, ws, bytes,
                       nullptr);
  };
  auto expect = [](const absl::Status& st, const std::string& needle) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st;
  };
  expect(run(x, GroupedWeights::Mxfp4(packed, scales), 48, y, ws_bytes), "multiple of 32");
  expect(run(x, GroupedWeights::Bf16(w), 12, y, ws_bytes), "multiple of 8");
  expect(run(x, GroupedWeights::Bf16(w), int64_t{1} << 24, y, ws_bytes), "k must be < 2^24");
  expect(GroupedGemm(x, offsets, 4, 100, GroupedWeights::Bf16(w), int64_t{1} << 20, 4096, y,
                     GroupedGemmTile::kAuto, ws, ws_bytes, nullptr),
         "< 2^31 elements");
  expect(run(x + 1, GroupedWeights::Bf16(w), 64, y, ws_bytes), "16-byte aligned");
  expect(run(x, GroupedWeights::Bf16(w + 4), 64, y, ws_bytes), "16-byte aligned");
  expect(run(x, GroupedWeights::Bf16(w), 64, y + 1, ws_bytes), "16-byte aligned");
  expect(run(x, GroupedWeights::Bf16(w), 64, y, ws_bytes - 1), "GroupedGemmWorkspaceBytes");
  expect(run(x, GroupedWeights{}, 64, y, ws_bytes), "exactly one");
  expect(run(x, GroupedWeights{w, packed, scales}, 64, y, ws_bytes), "exactly one");
  expect(run(x, GroupedWeights::Mxfp4(packed, nullptr), 64, y, ws_bytes), "mxfp4_scales");
  const auto* codes = reinterpret_cast<const int8_t*>(uintptr_t{0x40000});
  const auto* int8_scales = reinterpret_cast<const uint16_t*>(uintptr_t{0x50002});
  expect(run(x, GroupedWeights::Int8(codes, nullptr), 64, y, ws_bytes), "int8_scales");
  expect(run(x, GroupedWeights::Int8(codes, int8_scales + 0), 48, y, ws_bytes), "multiple of 32");
  expect(run(x, GroupedWeights::Int8(codes + 8, int8_scales), 64, y, ws_bytes), "16-byte aligned");
  expect(run(x, GroupedWeights::Int8(codes, reinterpret_cast<const uint16_t*>(uintptr_t{0x50001})),
             64, y, ws_bytes),
         "2-byte aligned");
  expect(GroupedGemm(x, nullptr, 4, 100, GroupedWeights::Bf16(w), 64, 64, y, GroupedGemmTile::kAuto,
                     ws, ws_bytes, nullptr),
         "null only with one expert");
  expect(GroupedGemm(x, offsets, 0, 100, GroupedWeights::Bf16(w), 64, 64, y, GroupedGemmTile::kAuto,
                     ws, ws_bytes, nullptr),
         "num_experts");
  auto* h = reinterpret_cast<uint16_t*>(uintptr_t{0x60000});
  expect(GroupedGemmGlu(x, offsets, 4, 100, GroupedWeights::Bf16(w), 32, 64,
                        GluParams{GluKind::kSitu, 0.0f, 0.0f}, h, GroupedGemmTile::kAuto, ws,
                        ws_bytes, nullptr),
         "beta1");
}

}  // namespace
}  // namespace strata::kernels::cuda
