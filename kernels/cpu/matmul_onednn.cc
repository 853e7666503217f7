// The oneDNN paths.
//   MatmulOneDnn: f32 × f32 → f32 dnnl::matmul. bf16 and MXFP4 weights are widened to f32 one
//     tile of kTileRows rows at a time (a per-thread buffer, no second copy of the model); f32
//     weights are used in place. oneDNN 2.6 has no f32-activation × bf16-weight matmul, so this
//     is the accurate option (kept for comparison).
//   MatmulOneDnnBf16: x rounded to bf16 × the bf16 weights in place → f32, which oneDNN runs on
//     AMX tiles where the CPU has them (brgemm avx512_core_amx); for comparison with our AMX
//     tiles (matmul_amx.cc), which replaced it: oneDNN reorders all of W per call. m is cut into
//     pieces of kBf16PieceRows rows and the last piece padded to a multiple of 16 rows, so a
//     weight shape needs at most 1 + kBf16PieceRows / 16 primitives whatever the prompt lengths.
//
// Primitives are built once per shape and kept (oneDNN primitives are immutable and may run
// concurrently; the scratchpad is ours, per thread).
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "core/check.h"
#include "core/convert_simd.h"
#include "core/dtype.h"
#include "core/int8_quantize.h"
#include "core/tensor.h"
#include "kernels/cpu/internal/matmul_driver.h"
#include "kernels/cpu/internal/matmul_tiles.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::kernels::cpu::internal {
namespace {

constexpr int64_t kTileRows = 256;

constexpr int64_t kBf16PieceRows = 256;

using Key =
    std::tuple<bool, int64_t, int64_t, int64_t, int64_t, int64_t>;  // bf16, m, n, k, ldx, ldy

struct Primitive {
  dnnl::matmul matmul;
  size_t scratchpad_bytes = 0;
};

class PrimitiveCache {
 public:
  PrimitiveCache() : engine_(dnnl::engine::kind::cpu, 0) {}

  const dnnl::engine& engine() const { return engine_; }

  // y[m, n] (row stride ldy) = x[m, k] (row stride ldx) · W[n, k]ᵀ as one matmul; x and W in
  // bf16 when `bf16`, else f32; y f32.
  const Primitive& Get(bool bf16, int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldy) {
    std::lock_guard<std::mutex> lock(mu_);
    const Key key{bf16, m, n, k, ldx, ldy};
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    using dt = dnnl::memory::data_type;
    const dt in = bf16 ? dt::bf16 : dt::f32;
    const dnnl::memory::desc src({m, k}, in, dnnl::memory::dims{ldx, 1});
    const dnnl::memory::desc weights({k, n}, in, dnnl::memory::dims{1, k});
    const dnnl::memory::desc dst({m, n}, dt::f32, dnnl::memory::dims{ldy, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), attr, engine_);
    Primitive p{dnnl::matmul(pd), pd.scratchpad_desc().get_size()};
    return cache_.emplace(key, std::move(p)).first->second;
  }

 private:
  std::mutex mu_;
  dnnl::engine engine_;
  std::map<Key, Primitive> cache_;  // node-based: references stay valid
};

PrimitiveCache& Cache() {
  static auto* cache = new PrimitiveCache();
  return *cache;
}

void* Scratch(AlignedBuffer& buffer, size_t num_bytes) {
  if (buffer.size() < num_bytes) buffer = AlignedBuffer(num_bytes);
  return buffer.data();
}

// One matmul of the cache's primitive for (bf16, m, n, k, ldx, ldy) over raw pointers.
void RunOneDnn(bool bf16, const void* x, int64_t m, int64_t k, int64_t ldx, const void* w,
               int64_t n, float* y, int64_t ldy) {
  thread_local AlignedBuffer scratchpad;
  PrimitiveCache& cache = Cache();
  try {
    const Primitive& p = cache.Get(bf16, m, n, k, ldx, ldy);
    using dt = dnnl::memory::data_type;
    const dt in = bf16 ? dt::bf16 : dt::f32;
    const dnnl::engine& engine = cache.engine();
    dnnl::memory src({{m, k}, in, dnnl::memory::dims{ldx, 1}}, engine, const_cast<void*>(x));
    dnnl::memory weights({{k, n}, in, dnnl::memory::dims{1, k}}, engine, const_cast<void*>(w));
    dnnl::memory dst({{m, n}, dt::f32, dnnl::memory::dims{ldy, 1}}, engine, y);
    dnnl::memory pad({{static_cast<int64_t>(p.scratchpad_bytes)}, dt::u8, dnnl::memory::dims{1}},
                     engine, Scratch(scratchpad, std::max<size_t>(p.scratchpad_bytes, 64)));
    dnnl::stream stream(engine);
    p.matmul.execute(stream, {{DNNL_ARG_SRC, src},
                              {DNNL_ARG_WEIGHTS, weights},
                              {DNNL_ARG_DST, dst},
                              {DNNL_ARG_SCRATCHPAD, pad}});
    stream.wait();
  } catch (const dnnl::error& e) {
    CHECK(false) << "oneDNN matmul m=" << m << " n=" << n << " k=" << k << ": " << e.what();
  }
}

}  // namespace

void MatmulOneDnn(const MatmulWeights& w, const float* x, int64_t m, float* y) {
  if (w.format == WeightFormat::kF32) {
    RunOneDnn(false, x, m, w.k, w.k, w.data, w.n, y, w.n);
    return;
  }
  thread_local AlignedBuffer tile_buffer;
  const int64_t tile_rows = std::min(kTileRows, w.n);
  auto* tile = static_cast<float*>(
      Scratch(tile_buffer, static_cast<size_t>(tile_rows * w.k) * sizeof(float)));
  for (int64_t j0 = 0; j0 < w.n; j0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, w.n - j0);
    if (w.format == WeightFormat::kBf16) {
      Bf16ToF32Rows(static_cast<const uint16_t*>(w.data) + j0 * w.k,
                    static_cast<size_t>(rows * w.k), tile);
    } else if (w.format == WeightFormat::kInt8) {
      const auto* codes = static_cast<const int8_t*>(w.data);
      const auto* scales = reinterpret_cast<const uint16_t*>(w.scales);
      ParallelFor(rows, rows * w.k >= (1 << 16), [&](int64_t r) {
        DecodeInt8(codes + (j0 + r) * w.k, scales + (j0 + r) * (w.k / kInt8GroupSize),
                   static_cast<size_t>(w.k), tile + r * w.k);
      });
    } else {
      const auto* packed = static_cast<const uint8_t*>(w.data);
      ParallelFor(rows, rows * w.k >= (1 << 16), [&](int64_t r) {
        DecodeMxfp4(packed + (j0 + r) * (w.k / 2), w.scales + (j0 + r) * (w.k / kMxfp4BlockSize),
                    static_cast<size_t>(w.k), tile + r * w.k);
      });
    }
    RunOneDnn(false, x, m, w.k, w.k, tile, rows, y + j0, w.n);
  }
}

namespace {

// x rounded to bf16 rows (the lossy tiles' packing) in this thread's buffer, zero rows up to a
// multiple of 16.
const uint16_t* PackBf16ForOneDnn(const float* x, int64_t k, int64_t m) {
  const TileKernels& bf16_rows = Bf16DotLossyTilesAvx512Bf16();  // its packing: x → bf16 rows
  const int64_t ldx = PackedRowElements(bf16_rows, k);
  const int64_t padded = (m + 15) / 16 * 16;
  thread_local AlignedBuffer buffer;
  auto* xb =
      static_cast<uint16_t*>(Scratch(buffer, static_cast<size_t>(padded * ldx) * sizeof(uint16_t)));
  ParallelFor((m + 15) / 16, m * k >= (int64_t{1} << 16), [&](int64_t t) {
    PackRows(bf16_rows, x, k, nullptr, t * 16, std::min(m, (t + 1) * 16), xb);
  });
  std::fill(xb + m * ldx, xb + padded * ldx, uint16_t{0});
  return xb;
}

void MatmulOneDnnBf16Packed(const MatmulWeights& w, const uint16_t* xb, int64_t m, float* y) {
  CHECK(w.format == WeightFormat::kBf16) << "MatmulOneDnnBf16 takes bf16 weights";
  const int64_t ldx = PackedRowElements(Bf16DotLossyTilesAvx512Bf16(), w.k);
  thread_local AlignedBuffer y_buffer;
  for (int64_t i0 = 0; i0 < m; i0 += kBf16PieceRows) {
    const int64_t rows = std::min(kBf16PieceRows, m - i0);
    const int64_t padded = (rows + 15) / 16 * 16;  // the rows past m are the packing's zeros
    if (padded == rows) {
      RunOneDnn(true, xb + i0 * ldx, rows, w.k, ldx, w.data, w.n, y + i0 * w.n, w.n);
      continue;
    }
    auto* yb =
        static_cast<float*>(Scratch(y_buffer, static_cast<size_t>(padded * w.n) * sizeof(float)));
    RunOneDnn(true, xb + i0 * ldx, padded, w.k, ldx, w.data, w.n, yb, w.n);
    std::copy_n(yb, rows * w.n, y + i0 * w.n);
  }
}

}  // namespace

void MatmulOneDnnBf16(const MatmulWeights& w, const float* x, int64_t m, float* y) {
  MatmulOneDnnBf16Packed(w, PackBf16ForOneDnn(x, w.k, m), m, y);
}

}  // namespace strata::kernels::cpu::internal
