// The oneDNN path: f32 × f32 → f32 dnnl::matmul. bf16 and MXFP4 weights are widened to f32 one
// tile of kTileRows rows at a time (a per-thread buffer, no second copy of the model); f32
// weights are used in place. oneDNN 2.6 has no f32-activation × bf16-weight matmul, and a
// bf16 × bf16 one would round the activations (see README.md), so this is the accurate option.
//
// Primitives are built once per (m, tile rows, k, y stride) and kept (oneDNN primitives are
// immutable and may run concurrently; the scratchpad is ours, per thread).
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "core/check.h"
#include "core/convert_simd.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cpu/internal/matmul_tiles.h"
#include "kernels/cpu/thread_pool.h"

namespace strata::kernels::cpu::internal {
namespace {

constexpr int64_t kTileRows = 256;

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;  // m, n, k, ldy

struct Primitive {
  dnnl::matmul matmul;
  size_t scratchpad_bytes = 0;
};

class PrimitiveCache {
 public:
  PrimitiveCache() : engine_(dnnl::engine::kind::cpu, 0) {}

  const dnnl::engine& engine() const { return engine_; }

  // y[m, n] (row stride ldy) = x[m, k] · W[n, k]ᵀ as one matmul.
  const Primitive& Get(int64_t m, int64_t n, int64_t k, int64_t ldy) {
    std::lock_guard<std::mutex> lock(mu_);
    const Key key{m, n, k, ldy};
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc src({m, k}, dt::f32, dnnl::memory::dims{k, 1});
    const dnnl::memory::desc weights({k, n}, dt::f32, dnnl::memory::dims{1, k});
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

void RunOneDnn(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
               int64_t ldy) {
  thread_local AlignedBuffer scratchpad;
  PrimitiveCache& cache = Cache();
  try {
    const Primitive& p = cache.Get(m, n, k, ldy);
    using dt = dnnl::memory::data_type;
    const dnnl::engine& engine = cache.engine();
    dnnl::memory src({{m, k}, dt::f32, dnnl::memory::dims{k, 1}}, engine, const_cast<float*>(x));
    dnnl::memory weights({{k, n}, dt::f32, dnnl::memory::dims{1, k}}, engine,
                         const_cast<float*>(w));
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
    RunOneDnn(x, m, w.k, static_cast<const float*>(w.data), w.n, y, w.n);
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
    } else {
      const auto* packed = static_cast<const uint8_t*>(w.data);
      ParallelFor(rows, rows * w.k >= (1 << 16), [&](int64_t r) {
        DecodeMxfp4(packed + (j0 + r) * (w.k / 2), w.scales + (j0 + r) * (w.k / kMxfp4BlockSize),
                    static_cast<size_t>(w.k), tile + r * w.k);
      });
    }
    RunOneDnn(x, m, w.k, tile, rows, y + j0, w.n);
  }
}

}  // namespace strata::kernels::cpu::internal
