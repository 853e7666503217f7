// cuda_gpu_bench: times every kernel of strata_cuda_ops at K3 and Kimi-Linear shapes against
// the ceilings measured at the start of the same run (docs/performance.md): a 1 GiB
// device-to-device copy (bytes read + written) and an 8192³ cuBLAS bf16 GEMM on random data. Prints
// one markdown table, last: kernel, shape, median time, achieved GB/s or TFLOP/s, % of the ceiling,
// target.
//
// Usage: cuda_gpu_bench [--quick] [--once] [--filter=SUBSTRING]
//   --quick   fewer repetitions and only the first shape of each kernel
//   --once    each row's kernels launched once, untimed warm-up none: for a profiler (ncu) to
//             see one launch per row (the times printed are then single cold launches)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cuda/ceilings.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_random.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/grouped_gemm.h"
#include "kernels/cuda/int8_gemm.h"
#include "kernels/cuda/kda_chunk.h"
#include "kernels/cuda/kda_decode.h"
#include "kernels/cuda/mla_decode.h"
#include "kernels/cuda/mla_prefill.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/mxfp4.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/router.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/vit.h"
#include "kernels/cuda/wgmma.h"

namespace strata::kernels::cuda {
namespace {

// Untyped device allocation freed on scope exit; ok() is false when cudaMalloc failed.
class Buf {
 public:
  explicit Buf(int64_t bytes) {
    if (bytes > 0 && cudaMalloc(&ptr_, static_cast<size_t>(bytes)) != cudaSuccess) {
      cudaGetLastError();
      ptr_ = nullptr;
      failed_ = true;
    }
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  bool ok() const { return !failed_; }

 private:
  void* ptr_ = nullptr;
  bool failed_ = false;
};

struct Row {
  std::string kernel, shape;
  double us = 0.0;
  double achieved = 0.0;  // GB/s or TFLOP/s
  bool flop_bound = false;
  double pct = 0.0;
  std::string target;
  std::string note;  // secondary rate (e.g. the TFLOP/s of a bandwidth-bound kernel)
  std::string error;
};

absl::Status CudaCopy(void* dst, const void* src, int64_t bytes) {
  return CudaStatus(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice),
                    "gpu_bench cudaMemcpy");
}

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// One table row in markdown; also printed as each kernel finishes ("row: | ... |"), so a run
// cut short by its time limit still shows what it measured.
std::string FormatRow(const Row& r) {
  char buf[512];
  if (!r.error.empty()) {
    std::snprintf(buf, sizeof(buf), "| %s | %s | ERROR | %s | | %s | |", r.kernel.c_str(),
                  r.shape.c_str(), r.error.c_str(), r.target.c_str());
  } else {
    std::snprintf(buf, sizeof(buf), "| %s | %s | %.1f | %.0f %s | %.0f%% %s | %s | %s |",
                  r.kernel.c_str(), r.shape.c_str(), r.us, r.achieved,
                  r.flop_bound ? "TFLOP/s" : "GB/s", r.pct, r.flop_bound ? "GEMM" : "copy",
                  r.target.c_str(), r.note.c_str());
  }
  return buf;
}

struct Bench {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  double copy_gbps = 0.0;
  double gemm_tflops = 0.0;
  bool quick = false;
  bool once = false;
  std::string filter;
  std::vector<Row> rows;
  uint64_t seed = 1;

  void Report(const Row& row) {
    std::printf("row: %s\n", FormatRow(row).c_str());
    std::fflush(stdout);
    rows.push_back(row);
  }

  bool Wants(const std::string& kernel) const {
    return filter.empty() || kernel.find(filter) != std::string::npos;
  }
  int Warmups() const { return once ? 0 : 3; }
  int Reps() const { return once ? 1 : quick ? 5 : 20; }

  absl::Status Fill(float* p, int64_t n, float lo, float hi) {
    return FillUniform(p, n, seed++, lo, hi, stream);
  }
  absl::Status Fill(uint16_t* p, int64_t n, float lo, float hi) {
    return FillUniform(p, n, seed++, lo, hi, stream);
  }

  // Times `launch`; bytes and flops are the minimum traffic and work of one launch.
  void Time(const std::string& kernel, const std::string& shape, double bytes, double flops,
            bool flop_bound, const std::string& target,
            const std::function<absl::Status()>& launch) {
    Row row{kernel, shape};
    row.flop_bound = flop_bound;
    row.target = target;
    absl::StatusOr<double> ms = MedianDeviceMs(launch, Warmups(), Reps(), stream);
    if (!ms.ok()) {
      row.error = ms.status().ToString();
      cudaGetLastError();
    } else {
      row.us = *ms * 1e3;
      row.achieved = flop_bound ? flops / (*ms * 1e-3) / 1e12 : bytes / (*ms * 1e-3) / 1e9;
      row.pct = 100.0 * row.achieved / (flop_bound ? gemm_tflops : copy_gbps);
      if (!flop_bound && flops > 0.0) row.note = Fmt("%.1f TFLOP/s", flops / (*ms * 1e-3) / 1e12);
      if (flop_bound && bytes > 0.0) row.note = Fmt("%.0f GB/s", bytes / (*ms * 1e-3) / 1e9);
    }
    Report(row);
  }
  void Fail(const std::string& kernel, const std::string& shape, const absl::Status& status) {
    Row row{kernel, shape};
    row.error = status.ToString();
    Report(row);
    cudaGetLastError();
  }
};

#define BENCH_CHECK(bench, kernel, shape, expr) \
  do {                                          \
    const absl::Status st_ = (expr);            \
    if (!st_.ok()) {                            \
      (bench).Fail(kernel, shape, st_);         \
      return;                                   \
    }                                           \
  } while (0)

std::string Ctx(int tokens) {
  return tokens % 1024 == 0 ? std::to_string(tokens / 1024) + "K" : std::to_string(tokens);
}

// `blocks` pages of valid fp8 latent rows (core/latent_row.h): one page of random codes (never
// the NaN code), scales and bf16 rope values built on the host, then doubled on the device.
absl::Status FillFp8Pages(uint8_t* cache, int64_t blocks) {
  constexpr int64_t kRowBytes = 656, kPageBytes = kMlaPageSize * kRowBytes;
  std::vector<uint8_t> page(kPageBytes);
  std::mt19937 rng(11);
  for (int64_t r = 0; r < kMlaPageSize; ++r) {
    uint8_t* row = page.data() + r * kRowBytes;
    for (int i = 0; i < 512; ++i) row[i] = static_cast<uint8_t>(rng() % 0x7F) | (rng() & 0x80);
    const float scale = 1.0f / 448.0f;
    for (int g = 0; g < 4; ++g) std::memcpy(row + 512 + 4 * g, &scale, 4);
    for (int i = 0; i < 64; ++i) {
      const uint16_t bits = F32ToBf16(static_cast<float>(rng() % 2001) / 1000.0f - 1.0f);
      std::memcpy(row + 528 + 2 * i, &bits, 2);
    }
  }
  RETURN_IF_ERROR(CudaCopy(cache, page.data(), kPageBytes));
  for (int64_t done = 1; done < blocks; done *= 2) {
    const int64_t n = std::min(done, blocks - done);
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(cache + done * kPageBytes, cache, n * kPageBytes, cudaMemcpyDeviceToDevice),
        "FillFp8Pages cudaMemcpy");
  }
  return absl::OkStatus();
}

// MLA paged decode: `batch` sequences of `ctx` tokens each, pages scattered over the pool;
// bf16 cache rows (1,152 bytes), or fp8 (656 bytes, --kv-cache-dtype fp8). `partial`: the
// context-parallel form (MlaPagedPartial: [ō ; LSE] rows for the ranks' merge).
// `which`: the tensor-core kernel (named MlaPagedDecode / MlaPagedPartial for mma.sync, with
// "Wgmma" appended for the warpgroup-MMA kernel).
void BenchMlaKernel(Bench& bench, const char* model, int heads, int batch, int ctx, bool simple,
                    bool fp8, bool partial, MlaDecodeKernel which) {
  const std::string kernel = std::string(simple    ? "MlaPagedDecodeSimple"
                                         : partial ? "MlaPagedPartial"
                                                   : "MlaPagedDecode") +
                             (which == MlaDecodeKernel::kWgmma ? "Wgmma" : "") +
                             (fp8 ? "_fp8" : "");
  if (!bench.Wants(kernel)) return;
  const std::string shape = std::string(model) + " H" + std::to_string(heads) + " B" +
                            std::to_string(batch) + " ctx" + Ctx(ctx);
  const int pages = (ctx + kMlaPageSize - 1) / kMlaPageSize;
  const int64_t blocks = static_cast<int64_t>(batch) * pages;
  const int64_t row_bytes = fp8 ? 656 : kMlaLatentDim * 2;
  Buf cache(blocks * kMlaPageSize * row_bytes), q(int64_t{batch} * heads * kMlaLatentDim * 2),
      table(blocks * 4), lens(int64_t{batch} * 4),
      out(int64_t{batch} * heads * (kMlaValueDim + 1) * 4);
  if (!cache.ok() || !q.ok() || !table.ok() || !out.ok()) {
    return bench.Fail(kernel, shape, absl::ResourceExhaustedError("cudaMalloc"));
  }
  std::vector<int32_t> host_table(static_cast<size_t>(blocks));
  std::iota(host_table.begin(), host_table.end(), 0);
  std::shuffle(host_table.begin(), host_table.end(), std::mt19937(7));
  const std::vector<int32_t> host_lens(batch, ctx);
  if (fp8) {
    BENCH_CHECK(bench, kernel, shape, FillFp8Pages(cache.as<uint8_t>(), blocks));
  } else {
    BENCH_CHECK(bench, kernel, shape,
                bench.Fill(cache.as<uint16_t>(), blocks * kMlaPageSize * kMlaLatentDim, -1, 1));
  }
  BENCH_CHECK(bench, kernel, shape,
              bench.Fill(q.as<uint16_t>(), int64_t{batch} * heads * kMlaLatentDim, -1, 1));
  BENCH_CHECK(bench, kernel, shape, CudaCopy(table.as<int32_t>(), host_table.data(), blocks * 4));
  BENCH_CHECK(bench, kernel, shape, CudaCopy(lens.as<int32_t>(), host_lens.data(), batch * 4));
  MlaDecodeParams p;
  p.batch = batch;
  p.num_heads = heads;
  p.max_blocks_per_seq = pages;
  p.max_context = ctx;
  p.scale = 0.0721688f;
  p.cache_dtype = fp8 ? LatentDType::kFP8 : LatentDType::kBF16;
  p.kernel = which;
  Buf ws(MlaDecodeWorkspaceBytes(p));
  const double bytes = static_cast<double>(batch) * ctx * row_bytes +
                       static_cast<double>(batch) * heads * (kMlaLatentDim + kMlaValueDim) * 2;
  const double flops =
      2.0 * batch * heads * static_cast<double>(ctx) * (kMlaLatentDim + kMlaValueDim);
  const std::string full_shape =
      shape + (simple ? "" : " splits" + std::to_string(MlaDecodeNumSplits(p)));
  bench.Time(kernel, full_shape, bytes, flops, false, simple ? "-" : ">=80% copy", [&] {
    if (simple) {
      return MlaPagedDecodeSimple(q.as<uint16_t>(), cache.as<void>(), table.as<int32_t>(),
                                  lens.as<int32_t>(), p, out.as<float>(), bench.stream);
    }
    if (partial) {
      return MlaPagedPartial(q.as<uint16_t>(), cache.as<void>(), table.as<int32_t>(), nullptr,
                             lens.as<int32_t>(), p, ws.as<void>(), MlaDecodeWorkspaceBytes(p),
                             out.as<float>(), bench.stream);
    }
    return MlaPagedDecode(q.as<uint16_t>(), cache.as<void>(), table.as<int32_t>(),
                          lens.as<int32_t>(), p, ws.as<void>(), MlaDecodeWorkspaceBytes(p),
                          reinterpret_cast<uint16_t*>(out.as<float>()), bench.stream);
  });
}

// Each tensor-core kernel the device runs (wgmma on sm_90) on the shape, or the CUDA-core one.
void BenchMla(Bench& bench, const char* model, int heads, int batch, int ctx, bool simple,
              bool fp8 = false, bool partial = false) {
  BenchMlaKernel(bench, model, heads, batch, ctx, simple, fp8, partial, MlaDecodeKernel::kMmaSync);
  if (simple) return;
  if (WgmmaAvailable()) {
    BenchMlaKernel(bench, model, heads, batch, ctx, simple, fp8, partial, MlaDecodeKernel::kWgmma);
  }
}

// KDA decode step: `batch` sequences × `heads` heads, state f32 or bf16, bf16 output.
void BenchKda(Bench& bench, const char* model, int heads, int batch, bool bf16_state,
              bool k3_gate) {
  const std::string kernel = bf16_state ? "KdaDecodeStep_bf16state" : "KdaDecodeStep_f32state";
  if (!bench.Wants(kernel)) return;
  const std::string shape =
      std::string(model) + " H" + std::to_string(heads) + " B" + std::to_string(batch);
  const int64_t hd = int64_t{heads} * kKdaHeadDim, channels = 3 * hd;
  const int64_t state_elems = int64_t{batch} * heads * kKdaHeadDim * kKdaHeadDim;
  const int64_t state_bytes = state_elems * (bf16_state ? 2 : 4);
  Buf state(state_bytes), conv(int64_t{batch} * 3 * channels * 4), qkv(batch * channels * 4),
      f(batch * hd * 4), b(int64_t{batch} * heads * 4), g(batch * hd * 4), w(channels * 4 * 4),
      a_log(int64_t{heads} * 4), dt(hd * 4), onw(kKdaHeadDim * 4), slots(int64_t{batch} * 4),
      y(batch * hd * 2);
  if (!state.ok() || !conv.ok()) {
    return bench.Fail(kernel, shape, absl::ResourceExhaustedError("cudaMalloc"));
  }
  if (bf16_state) {
    BENCH_CHECK(bench, kernel, shape, bench.Fill(state.as<uint16_t>(), state_elems, -0.1f, 0.1f));
  } else {
    BENCH_CHECK(bench, kernel, shape, bench.Fill(state.as<float>(), state_elems, -0.1f, 0.1f));
  }
  BENCH_CHECK(bench, kernel, shape, bench.Fill(conv.as<float>(), batch * 3 * channels, -1, 1));
  BENCH_CHECK(bench, kernel, shape, bench.Fill(qkv.as<float>(), batch * channels, -1, 1));
  BENCH_CHECK(bench, kernel, shape, bench.Fill(f.as<float>(), batch * hd, -1, 1));
  BENCH_CHECK(bench, kernel, shape, bench.Fill(b.as<float>(), int64_t{batch} * heads, -1, 1));
  BENCH_CHECK(bench, kernel, shape, bench.Fill(g.as<float>(), batch * hd, -1, 1));
  BENCH_CHECK(bench, kernel, shape, bench.Fill(w.as<float>(), channels * 4, -0.5f, 0.5f));
  BENCH_CHECK(bench, kernel, shape, bench.Fill(a_log.as<float>(), heads, -1, 0));
  BENCH_CHECK(bench, kernel, shape, bench.Fill(dt.as<float>(), hd, -1, 1));
  BENCH_CHECK(bench, kernel, shape, bench.Fill(onw.as<float>(), kKdaHeadDim, 0.5f, 1.5f));
  std::vector<int32_t> host_slots(batch);
  std::iota(host_slots.begin(), host_slots.end(), 0);
  BENCH_CHECK(bench, kernel, shape, CudaCopy(slots.as<int32_t>(), host_slots.data(), batch * 4));
  KdaDecodeInputs in;
  in.qkv_raw = qkv.as<float>();
  in.f = f.as<float>();
  in.b_raw = b.as<float>();
  in.g_raw = g.as<float>();
  in.conv_w = w.as<float>();
  in.a_log = a_log.as<float>();
  in.dt_bias = dt.as<float>();
  in.o_norm_w = onw.as<float>();
  in.slots = slots.as<int32_t>();
  KdaDecodeParams p;
  p.batch = batch;
  p.num_heads = heads;
  p.has_lower_bound = k3_gate;
  // State read + write, conv cache read + write, per-token inputs, bf16 output.
  const double bytes = 2.0 * state_bytes + 2.0 * batch * 3 * channels * 4 +
                       batch * (channels + 2 * hd + heads) * 4.0 + batch * hd * 2.0;
  const double flops = 7.0 * state_elems;
  bench.Time(kernel, shape, bytes, flops, false, ">=70% copy", [&] {
    if (bf16_state) {
      return KdaDecodeStepBf16State(in, state.as<uint16_t>(), conv.as<float>(), p, y.as<uint16_t>(),
                                    bench.stream);
    }
    return KdaDecodeStep(in, state.as<float>(), conv.as<float>(), p, y.as<uint16_t>(),
                         bench.stream);
  });
}

// Inputs and state of a KDA varlen prefill of `seqs` sequences of `len` tokens (f32 state,
// bf16 y), shared by the recurrent and chunked benchmarks.
struct KdaPrefillBuffers {
  KdaPrefillBuffers(int heads, int seqs, int len)
      : heads(heads),
        seqs(seqs),
        hd(int64_t{heads} * kKdaHeadDim),
        channels(3 * hd),
        tokens(int64_t{seqs} * len),
        state_elems(int64_t{seqs} * heads * kKdaHeadDim * kKdaHeadDim),
        state(state_elems * 4),
        conv(int64_t{seqs} * 3 * channels * 4),
        qkv(tokens * channels * 4),
        f(tokens * hd * 4),
        b(tokens * heads * 4),
        g(tokens * hd * 4),
        w(channels * 4 * 4),
        a_log(int64_t{heads} * 4),
        dt(hd * 4),
        onw(kKdaHeadDim * 4),
        slots(int64_t{seqs} * 4),
        cu(int64_t{seqs + 1} * 4),
        y(tokens * hd * 2),
        len(len) {}

  bool ok() const { return state.ok() && qkv.ok() && f.ok() && g.ok() && y.ok(); }
  // Random inputs (gate input f in ±f_range), slots 0..seqs−1, equal-length sequences.
  absl::Status Fill(Bench& bench, float f_range) {
    RETURN_IF_ERROR(bench.Fill(state.as<float>(), state_elems, -0.1f, 0.1f));
    RETURN_IF_ERROR(bench.Fill(conv.as<float>(), seqs * 3 * channels, -1, 1));
    RETURN_IF_ERROR(bench.Fill(qkv.as<float>(), tokens * channels, -1, 1));
    RETURN_IF_ERROR(bench.Fill(f.as<float>(), tokens * hd, -f_range, f_range));
    RETURN_IF_ERROR(bench.Fill(b.as<float>(), tokens * heads, -1, 1));
    RETURN_IF_ERROR(bench.Fill(g.as<float>(), tokens * hd, -1, 1));
    RETURN_IF_ERROR(bench.Fill(w.as<float>(), channels * 4, -0.5f, 0.5f));
    RETURN_IF_ERROR(bench.Fill(a_log.as<float>(), heads, -1, 0));
    RETURN_IF_ERROR(bench.Fill(dt.as<float>(), hd, -1, 1));
    RETURN_IF_ERROR(bench.Fill(onw.as<float>(), kKdaHeadDim, 0.5f, 1.5f));
    std::vector<int32_t> host_slots(seqs), host_cu(seqs + 1);
    std::iota(host_slots.begin(), host_slots.end(), 0);
    for (int i = 0; i <= seqs; ++i) host_cu[i] = i * len;
    RETURN_IF_ERROR(CudaCopy(slots.as<int32_t>(), host_slots.data(), seqs * 4));
    return CudaCopy(cu.as<int32_t>(), host_cu.data(), (seqs + 1) * 4);
  }
  KdaDecodeInputs Inputs() const {
    KdaDecodeInputs in;
    in.qkv_raw = qkv.as<float>();
    in.f = f.as<float>();
    in.b_raw = b.as<float>();
    in.g_raw = g.as<float>();
    in.conv_w = w.as<float>();
    in.a_log = a_log.as<float>();
    in.dt_bias = dt.as<float>();
    in.o_norm_w = onw.as<float>();
    in.slots = slots.as<int32_t>();
    return in;
  }
  // Bytes a prefill must move: the token inputs, y, and the state read and written once.
  double Bytes() const {
    return tokens * (channels + 2 * hd + heads) * 4.0 + tokens * hd * 2.0 + 2.0 * state_elems * 4;
  }

  const int heads, seqs;
  const int64_t hd, channels, tokens, state_elems;
  Buf state, conv, qkv, f, b, g, w, a_log, dt, onw, slots, cu, y;
  const int len;
};

std::string KdaPrefillShape(const char* model, int heads, int seqs, int len) {
  return std::string(model) + " H" + std::to_string(heads) + " " + std::to_string(seqs) + "x" +
         std::to_string(len) + " tokens";
}

// KDA varlen prefill on the recurrent kernel: `seqs` sequences of `len` tokens, f32 state.
void BenchKdaPrefill(Bench& bench, const char* model, int heads, int seqs, int len) {
  const std::string kernel = "KdaPrefillRecurrent";
  if (!bench.Wants(kernel)) return;
  const std::string shape = KdaPrefillShape(model, heads, seqs, len);
  KdaPrefillBuffers buffers(heads, seqs, len);
  if (!buffers.ok()) return bench.Fail(kernel, shape, absl::ResourceExhaustedError("cudaMalloc"));
  BENCH_CHECK(bench, kernel, shape, buffers.Fill(bench, 1.0f));
  const KdaDecodeInputs in = buffers.Inputs();
  KdaDecodeParams p;
  p.batch = seqs;
  p.num_heads = heads;
  const double flops =
      7.0 * kKdaHeadDim * kKdaHeadDim * heads * static_cast<double>(buffers.tokens);
  bench.Time(kernel, shape, buffers.Bytes(), flops, false, "-", [&] {
    return KdaPrefillRecurrent(in, buffers.cu.as<int32_t>(), buffers.state.as<float>(),
                               buffers.conv.as<float>(), p, buffers.y.as<uint16_t>(), bench.stream);
  });
}

// KDA varlen prefill at the K3 gate: the chunked tensor-core kernel and, on the same inputs,
// the recurrent one. Both rows count the chunked form's products, 6·D·(D + C) FLOPs per token
// and head (Kp·S, Qp·S, Kendᵀ·U: 3·2·D²; L, A: 2·2·C·D; A·U: 2·C·D), so their TFLOP/s compare
// directly (the ratio is the speed-up) and the chunked one reads against the GEMM ceiling.
void BenchKdaPrefillChunked(Bench& bench, const char* model, int heads, int seqs, int len) {
  const bool chunked = bench.Wants("KdaPrefillChunked");
  const bool recurrent = bench.Wants("KdaPrefillRecurrent");
  if (!chunked && !recurrent) return;
  const std::string kernel = "KdaPrefillChunked";
  const std::string shape = KdaPrefillShape(model, heads, seqs, len);
  KdaPrefillBuffers buffers(heads, seqs, len);
  if (!buffers.ok()) return bench.Fail(kernel, shape, absl::ResourceExhaustedError("cudaMalloc"));
  BENCH_CHECK(bench, kernel, shape, buffers.Fill(bench, 3.0f));
  const KdaDecodeInputs in = buffers.Inputs();
  KdaDecodeParams p;
  p.batch = seqs;
  p.num_heads = heads;
  p.has_lower_bound = true;
  p.lower_bound = -5.0f;
  const double flops = 6.0 * kKdaHeadDim * (kKdaHeadDim + kKdaPrefillChunk) * heads *
                       static_cast<double>(buffers.tokens);
  int32_t* cu = buffers.cu.as<int32_t>();
  float* state = buffers.state.as<float>();
  float* conv = buffers.conv.as<float>();
  uint16_t* y = buffers.y.as<uint16_t>();
  if (chunked) {
    bench.Time(kernel, shape, buffers.Bytes(), flops, true, "-",
               [&] { return KdaPrefillChunked(in, cu, state, conv, p, y, bench.stream); });
  }
  if (recurrent) {
    bench.Time("KdaPrefillRecurrent", shape + " (K3 gate)", buffers.Bytes(), flops, true, "-",
               [&] { return KdaPrefillRecurrent(in, cu, state, conv, p, y, bench.stream); });
  }
}

// MLA causal prefill of one `len`-token prompt through MlaPagedPrefill (absorbed form).
void BenchMlaPrefill(Bench& bench, const char* model, int heads, int len) {
  const std::string kernel = "MlaPagedPrefill";
  if (!bench.Wants(kernel)) return;
  const std::string shape =
      std::string(model) + " H" + std::to_string(heads) + " T" + std::to_string(len);
  const int pages = (len + kMlaPageSize - 1) / kMlaPageSize;
  Buf cache(int64_t{pages} * kMlaPageSize * kMlaLatentDim * 2),
      q(int64_t{len} * heads * kMlaLatentDim * 2), table(int64_t{pages} * 4),
      query_seq(int64_t{len} * 4), lens(int64_t{len} * 4),
      out(int64_t{len} * heads * kMlaValueDim * 2);
  BENCH_CHECK(
      bench, kernel, shape,
      bench.Fill(cache.as<uint16_t>(), int64_t{pages} * kMlaPageSize * kMlaLatentDim, -1, 1));
  BENCH_CHECK(bench, kernel, shape,
              bench.Fill(q.as<uint16_t>(), int64_t{len} * heads * kMlaLatentDim, -1, 1));
  std::vector<int32_t> host_table(pages), host_seq(len, 0), host_lens(len);
  std::iota(host_table.begin(), host_table.end(), 0);
  std::iota(host_lens.begin(), host_lens.end(), 1);
  BENCH_CHECK(bench, kernel, shape, CudaCopy(table.as<int32_t>(), host_table.data(), pages * 4));
  BENCH_CHECK(bench, kernel, shape, CudaCopy(query_seq.as<int32_t>(), host_seq.data(), len * 4));
  BENCH_CHECK(bench, kernel, shape, CudaCopy(lens.as<int32_t>(), host_lens.data(), len * 4));
  MlaDecodeParams p;
  p.batch = len;
  p.num_heads = heads;
  p.max_blocks_per_seq = pages;
  p.max_context = len;
  p.scale = 0.0721688f;
  Buf ws(MlaDecodeWorkspaceBytes(p));
  const double pairs = 0.5 * len * (len + 1.0);  // causal (query, key) pairs
  const double flops = 2.0 * heads * pairs * (kMlaLatentDim + kMlaValueDim);
  bench.Time(kernel, shape + " splits" + std::to_string(MlaDecodeNumSplits(p)), 0.0, flops, true,
             "-", [&] {
               return MlaPagedPrefill(q.as<uint16_t>(), cache.as<uint16_t>(), table.as<int32_t>(),
                                      query_seq.as<int32_t>(), lens.as<int32_t>(), p, ws.as<void>(),
                                      MlaDecodeWorkspaceBytes(p), out.as<uint16_t>(), bench.stream);
             });
}

// MLA causal prefill of `len` new tokens after a `prefix`-token cached context in the MHA form,
// gated: MlaPrefillMha (page gather + cuBLAS expansion through kv_b_proj + flash attention; in
// context windows of `chunk` rows when chunk > 0) and, unchunked, its attention stage alone.
// FLOPs count the MHA-form work (expansion 2·ctx·H·256·512, attention 2·H·pairs·(192 + 128)),
// so its time compares directly with the absorbed MlaPagedPrefill row above.
void BenchMlaPrefillMha(Bench& bench, const char* model, int heads, int len, int prefix = 0,
                        int64_t chunk = 0) {
  const std::string kernel = "MlaPrefillMha";
  if (!bench.Wants(kernel) && !bench.Wants("MlaPrefillAttention")) return;
  std::string shape =
      std::string(model) + " H" + std::to_string(heads) + " T" + std::to_string(len);
  if (prefix > 0) shape += " prefix" + std::to_string(prefix);
  if (chunk > 0) shape += " W" + std::to_string(chunk);
  const int ctx = prefix + len;
  const int pages = (ctx + kMlaPageSize - 1) / kMlaPageSize;
  const int64_t width = int64_t{heads} * kMlaVHeadDim;
  MlaPrefillParams p;
  p.num_seqs = 1;
  p.num_heads = heads;
  p.max_blocks_per_seq = pages;
  p.max_context = ctx;
  p.max_new = len;
  p.total_context = ctx;
  p.total_new = len;
  p.scale = 0.0721688f;
  p.max_context_chunk = chunk;
  const int64_t ws_bytes = MlaPrefillWorkspaceBytes(p);
  Buf cache(int64_t{pages} * kMlaPageSize * kMlaLatentDim * 2),
      q(int64_t{len} * heads * kMlaQkHeadDim * 2),
      w(int64_t{heads} * kMlaKvbRowsPerHead * kMlaValueDim * 2), table(int64_t{pages} * 4),
      cu(2 * 4), cu_k(2 * 4), gate(len * width * 4), out(len * width * 2), ws(ws_bytes);
  if (!cache.ok() || !q.ok() || !w.ok() || !gate.ok() || !out.ok() || !ws.ok()) {
    return bench.Fail(kernel, shape, absl::ResourceExhaustedError("cudaMalloc"));
  }
  BENCH_CHECK(
      bench, kernel, shape,
      bench.Fill(cache.as<uint16_t>(), int64_t{pages} * kMlaPageSize * kMlaLatentDim, -1, 1));
  BENCH_CHECK(bench, kernel, shape,
              bench.Fill(q.as<uint16_t>(), int64_t{len} * heads * kMlaQkHeadDim, -1, 1));
  BENCH_CHECK(bench, kernel, shape,
              bench.Fill(w.as<uint16_t>(), int64_t{heads} * kMlaKvbRowsPerHead * kMlaValueDim,
                         -0.05f, 0.05f));
  BENCH_CHECK(bench, kernel, shape, bench.Fill(gate.as<float>(), len * width, -4, 4));
  std::vector<int32_t> host_table(pages), host_cu = {0, len}, host_cu_k = {0, ctx};
  std::iota(host_table.begin(), host_table.end(), 0);
  BENCH_CHECK(bench, kernel, shape, CudaCopy(table.as<int32_t>(), host_table.data(), pages * 4));
  BENCH_CHECK(bench, kernel, shape, CudaCopy(cu.as<int32_t>(), host_cu.data(), 2 * 4));
  BENCH_CHECK(bench, kernel, shape, CudaCopy(cu_k.as<int32_t>(), host_cu_k.data(), 2 * 4));
  // Causal (query, key) pairs: every new token sees the prefix and the new tokens up to itself.
  const double pairs = static_cast<double>(len) * prefix + 0.5 * len * (len + 1.0);
  const double attn_flops = 2.0 * heads * pairs * (kMlaQkHeadDim + kMlaVHeadDim);
  const double expand_flops = 2.0 * ctx * heads * kMlaKvbRowsPerHead * kMlaValueDim;
  bench.Time(kernel, shape + " gated", 0.0, attn_flops + expand_flops, true, "-", [&] {
    return MlaPrefillMha(bench.cublas, q.as<uint16_t>(), cache.as<uint16_t>(), table.as<int32_t>(),
                         cu.as<int32_t>(), cu_k.as<int32_t>(), w.as<uint16_t>(), gate.as<float>(),
                         p, ws.as<void>(), ws_bytes, out.as<uint16_t>(), bench.stream);
  });
  if (chunk > 0 || prefix > 0) return;  // the stages alone: whole-context, prompt-only rows
  BENCH_CHECK(
      bench, "MlaPrefillAttention", shape,
      MlaPrefillExpand(bench.cublas, cache.as<uint16_t>(), table.as<int32_t>(), cu.as<int32_t>(),
                       w.as<uint16_t>(), p, ws.as<void>(), ws_bytes, bench.stream));
  bench.Time("MlaPrefillAttention", shape + " gated", 0.0, attn_flops, true, "-", [&] {
    return MlaPrefillAttention(q.as<uint16_t>(), cu.as<int32_t>(), cu.as<int32_t>(),
                               gate.as<float>(), p, ws.as<void>(), ws_bytes, out.as<uint16_t>(),
                               bench.stream);
  });
}

void BenchRouter(Bench& bench, const char* model, int64_t tokens, RouterParams p) {
  const std::string kernel = "Route", fused = "RouteAndPermute";
  if (!bench.Wants(kernel) && !bench.Wants(fused)) return;
  const std::string shape = std::string(model) + " T" + std::to_string(tokens) + " E" +
                            std::to_string(p.num_experts) + " k" + std::to_string(p.top_k);
  Buf logits(tokens * p.num_experts * 4), bias(int64_t{p.num_experts} * 4),
      ids(tokens * p.top_k * 4), weights(tokens * p.top_k * 4);
  BENCH_CHECK(bench, kernel, shape, bench.Fill(logits.as<float>(), tokens * p.num_experts, -4, 4));
  BENCH_CHECK(bench, kernel, shape, bench.Fill(bias.as<float>(), p.num_experts, -0.5f, 0.5f));
  const double bytes = tokens * p.num_experts * 4.0 + tokens * p.top_k * 8.0;
  if (bench.Wants(kernel)) {
    bench.Time(kernel, shape, bytes, 0.0, false, "-", [&] {
      return Route(logits.as<float>(), tokens, bias.as<float>(), p, ids.as<int32_t>(),
                   weights.as<float>(), bench.stream);
    });
  }
  // The decode step's form: routing and the permutation in one launch (the last CTA groups the
  // pairs), bytes of the permutation added (16 a pair: ids read, row and token written).
  if (!bench.Wants(fused) || tokens * p.top_k > kMoePermuteOneLaunchPairs) return;
  Buf offsets(int64_t{p.num_experts} * 4 + 4), token(tokens * p.top_k * 4),
      pair_row(tokens * p.top_k * 4), done(4), ws(MoePermuteWorkspaceBytes(p.num_experts));
  BENCH_CHECK(bench, fused, shape, CudaStatus(cudaMemset(done.as<void>(), 0, 4), "done memset"));
  RoutePermutation route;
  route.num_experts = p.num_experts;
  route.expert_offsets = offsets.as<int32_t>();
  route.permuted_token = token.as<int32_t>();
  route.pair_row = pair_row.as<int32_t>();
  route.done_counter = done.as<int32_t>();
  route.workspace = ws.as<void>();
  route.workspace_bytes = MoePermuteWorkspaceBytes(p.num_experts);
  bench.Time(fused, shape, bytes + tokens * p.top_k * 16.0, 0.0, false, "-", [&] {
    return RouteAndPermute(logits.as<float>(), tokens, bias.as<float>(), p, ids.as<int32_t>(),
                           weights.as<float>(), route, bench.stream);
  });
}

// RmsNorm, AddRmsNorm (f32 in, bf16 out), SiTU-GLU and a 9-source AttnRes mix.
void BenchElementwise(Bench& bench, int64_t tokens, int64_t dim, int64_t inter) {
  const std::string shape = "T" + std::to_string(tokens) + " d" + std::to_string(dim);
  Buf x(tokens * dim * 4), res(tokens * dim * 4), w(dim * 4), y(tokens * dim * 2);
  BENCH_CHECK(bench, "RmsNorm", shape, bench.Fill(x.as<float>(), tokens * dim, -2, 2));
  BENCH_CHECK(bench, "RmsNorm", shape, bench.Fill(res.as<float>(), tokens * dim, -2, 2));
  BENCH_CHECK(bench, "RmsNorm", shape, bench.Fill(w.as<float>(), dim, 0.5f, 1.5f));
  if (bench.Wants("RmsNorm")) {
    bench.Time("RmsNorm", shape, tokens * dim * 6.0, 0.0, false, "-", [&] {
      return RmsNorm(x.as<float>(), tokens, dim, w.as<float>(), 1e-5f, y.as<uint16_t>(),
                     bench.stream);
    });
  }
  if (bench.Wants("AddRmsNorm")) {
    bench.Time("AddRmsNorm", shape, tokens * dim * 14.0, 0.0, false, "-", [&] {
      return AddRmsNorm(res.as<float>(), x.as<float>(), tokens, dim, w.as<float>(), 1e-5f,
                        y.as<uint16_t>(), bench.stream);
    });
  }
  if (bench.Wants("Glu")) {
    const std::string glu_shape = "SiTU T" + std::to_string(tokens) + " I" + std::to_string(inter);
    Buf gu(tokens * 2 * inter * 4), h(tokens * inter * 2);
    BENCH_CHECK(bench, "Glu", glu_shape, bench.Fill(gu.as<float>(), tokens * 2 * inter, -8, 8));
    const GluParams glu{GluKind::kSitu, 4.0f, 25.0f};
    bench.Time("Glu", glu_shape, tokens * inter * 10.0, 0.0, false, "-", [&] {
      return Glu(gu.as<float>(), gu.as<float>() + inter, tokens, inter, 2 * inter, glu,
                 h.as<uint16_t>(), bench.stream);
    });
  }
  if (bench.Wants("AttnResMix")) {
    constexpr int kSources = 9;
    Buf src(kSources * tokens * dim * 4), out(tokens * dim * 4);
    BENCH_CHECK(bench, "AttnResMix", shape,
                bench.Fill(src.as<float>(), kSources * tokens * dim, -2, 2));
    AttnResSources sources;
    sources.count = kSources;
    for (int i = 0; i < kSources; ++i) sources.ptr[i] = src.as<float>() + i * tokens * dim;
    bench.Time("AttnResMix", "9 sources " + shape, tokens * dim * (kSources * 4.0 + 6.0), 0.0,
               false, "-", [&] {
                 return AttnResMix(sources, tokens, dim, w.as<float>(), w.as<float>(), 1e-5f,
                                   out.as<float>(), w.as<float>(), 1e-5f, y.as<uint16_t>(),
                                   bench.stream);
               });
  }
}

// The vision tower's own kernels at K3's MoonViT-V2 shapes (d 1152, 16 heads of 72) on one image
// of `patches` patches (4096: a 896×896 image): the attention against the bf16 GEMM ceiling
// (it runs f32 FMAs on CUDA cores, so that ceiling is out of its reach by design: it shows how far
// a tensor-core attention would go), the element-wise passes against the copy ceiling.
void BenchVit(Bench& bench, int64_t patches) {
  constexpr int64_t kD = 1152, kHeads = 16, kHeadDim = 72, kInter = 4304;
  const int side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(patches))));
  const std::string shape = "K3 tower " + std::to_string(side) + "x" + std::to_string(side);
  Buf qkv(patches * 3 * kD * 4), out(patches * kD * 4), hidden(patches * kInter * 4),
      table(64 * 64 * kD * 4);
  BENCH_CHECK(bench, "VitAttention", shape, bench.Fill(qkv.as<float>(), patches * 3 * kD, -1, 1));
  BENCH_CHECK(bench, "GeluTanh", shape, bench.Fill(hidden.as<float>(), patches * kInter, -4, 4));
  BENCH_CHECK(bench, "VitAddBilinearPositions", shape,
              bench.Fill(table.as<float>(), 64 * 64 * kD, -1, 1));
  if (bench.Wants("VitAttention")) {
    const double flops = 4.0 * patches * patches * kHeadDim * kHeads;
    bench.Time("VitAttention", shape + " H16 d72", 0.0, flops, true, "-", [&] {
      return VitAttention(qkv.as<float>(), qkv.as<float>() + kD, qkv.as<float>() + 2 * kD, 3 * kD,
                          patches, kHeads, kHeadDim, 0.1178511f, out.as<float>(), bench.stream);
    });
  }
  if (bench.Wants("VitRope2d")) {
    bench.Time("VitRope2d", shape + " q", patches * kD * 8.0, 0.0, false, "-", [&] {
      return VitRope2d(qkv.as<float>(), 3 * kD, side, side, kHeads, kHeadDim, 10000.0f,
                       bench.stream);
    });
  }
  if (bench.Wants("VitAddBilinearPositions")) {
    bench.Time("VitAddBilinearPositions", shape, patches * kD * 8.0, 0.0, false, "-", [&] {
      return VitAddBilinearPositions(table.as<float>(), 64, 64, kD, side, side, out.as<float>(),
                                     bench.stream);
    });
  }
  if (bench.Wants("GeluTanh")) {
    bench.Time("GeluTanh", shape + " fc0", patches * kInter * 8.0, 0.0, false, "-",
               [&] { return GeluTanh(hidden.as<float>(), patches * kInter, bench.stream); });
  }
}

// Embedding gather: `tokens` random ids into a [vocab, dim] bf16 table, f32 rows out.
void BenchEmbedding(Bench& bench, int64_t vocab, int64_t dim, int64_t tokens) {
  const std::string kernel = "EmbeddingGather";
  if (!bench.Wants(kernel)) return;
  const std::string shape =
      "V" + std::to_string(vocab) + " d" + std::to_string(dim) + " T" + std::to_string(tokens);
  Buf table(vocab * dim * 2), ids(tokens * 4), out(tokens * dim * 4), invalid(4);
  if (!table.ok() || !out.ok()) {
    return bench.Fail(kernel, shape, absl::ResourceExhaustedError("cudaMalloc"));
  }
  BENCH_CHECK(bench, kernel, shape, bench.Fill(table.as<uint16_t>(), vocab * dim, -1, 1));
  std::vector<int32_t> host_ids(tokens);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  for (int32_t& id : host_ids) id = pick(rng);
  BENCH_CHECK(bench, kernel, shape, CudaCopy(ids.as<void>(), host_ids.data(), tokens * 4));
  BENCH_CHECK(bench, kernel, shape,
              CudaStatus(cudaMemset(invalid.as<void>(), 0, 4), "gpu_bench cudaMemset"));
  bench.Time(kernel, shape, tokens * dim * 6.0, 0.0, false, "-", [&] {
    return EmbeddingGather(table.as<uint16_t>(), vocab, dim, ids.as<int32_t>(), tokens,
                           out.as<float>(), invalid.as<int32_t>(), bench.stream);
  });
}

// Tensor parallelism's per-rank passes: one rank's vocabulary share of the embedding (the other
// rows zero-filled), and the routed pairs grouped by the rank's own experts (MoePermute with the
// id mapping and a padding count folded in: one launch at decode sizes). Both bound by the bytes
// they move; the permutation at decode sizes by its one launch's latency.
void BenchTensorParallelShares(Bench& bench, int64_t vocab, int64_t dim, int64_t tokens, int ranks,
                               int num_experts, int top_k) {
  const std::string embed = "EmbeddingGather(VocabShard)", map = "MoePermute";
  const std::string shape = "V" + std::to_string(vocab) + " d" + std::to_string(dim) + " T" +
                            std::to_string(tokens) + " TP" + std::to_string(ranks);
  const int64_t rows = (vocab + ranks - 1) / ranks, pairs = tokens * top_k;
  Buf table(rows * dim * 2), ids(tokens * 4), out(tokens * dim * 4), invalid(4);
  Buf expert_ids(pairs * 4), local_of(int64_t{num_experts} * 4),
      offsets(int64_t{num_experts} * 4 + 4);
  Buf permuted(pairs * 4), pair_row(pairs * 4), live(4),
      permute_ws(MoePermuteWorkspaceBytes(num_experts));
  if (!table.ok() || !out.ok() || !expert_ids.ok() || !permuted.ok() || !pair_row.ok()) {
    return bench.Fail(embed, shape, absl::ResourceExhaustedError("cudaMalloc"));
  }
  std::mt19937 rng(6);
  std::vector<int32_t> host_ids(static_cast<size_t>(tokens));
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  for (int32_t& id : host_ids) id = pick(rng);
  std::vector<int32_t> host_experts(static_cast<size_t>(pairs)), host_local(num_experts);
  std::uniform_int_distribution<int32_t> pick_expert(0, num_experts - 1);
  for (int32_t& e : host_experts) e = pick_expert(rng);
  for (int e = 0; e < num_experts; ++e) host_local[e] = e % ranks == 0 ? e / ranks : -1;
  BENCH_CHECK(bench, embed, shape, bench.Fill(table.as<uint16_t>(), rows * dim, -1, 1));
  BENCH_CHECK(bench, embed, shape, CudaCopy(ids.as<void>(), host_ids.data(), tokens * 4));
  BENCH_CHECK(bench, map, shape,
              CudaCopy(local_of.as<void>(), host_local.data(), int64_t{num_experts} * 4));
  BENCH_CHECK(bench, embed, shape,
              CudaStatus(cudaMemset(invalid.as<void>(), 0, 4), "gpu_bench cudaMemset"));
  if (bench.Wants(embed)) {
    // Every output row written (4 bytes a value), 1/ranks of them read from the table (2 bytes).
    bench.Time(embed, shape, tokens * dim * (4.0 + 2.0 / ranks), 0.0, false, "-", [&] {
      return EmbeddingGather(table.as<uint16_t>(), VocabShard{0, rows, vocab}, dim,
                             ids.as<int32_t>(), tokens, out.as<float>(), invalid.as<int32_t>(),
                             bench.stream);
    });
  }
  if (bench.Wants(map)) {
    // Every pair's id and mapping read, its row and token written (16 bytes a pair).
    const int32_t live_tokens = static_cast<int32_t>(tokens);
    BENCH_CHECK(bench, map, shape, CudaCopy(expert_ids.as<void>(), host_experts.data(), pairs * 4));
    BENCH_CHECK(bench, map, shape, CudaCopy(live.as<void>(), &live_tokens, 4));
    MoePermuteOptions options;
    options.live_tokens = live.as<int32_t>();
    options.local_of = local_of.as<int32_t>();
    options.id_space = num_experts;
    const int local_experts = (num_experts + ranks - 1) / ranks;
    bench.Time(map, "E" + std::to_string(num_experts) + " " + shape, pairs * 16.0, 0.0, false, "-",
               [&] {
                 return MoePermute(expert_ids.as<int32_t>(), tokens, top_k, local_experts,
                                   permute_ws.as<void>(), MoePermuteWorkspaceBytes(num_experts),
                                   offsets.as<int32_t>(), permuted.as<int32_t>(),
                                   pair_row.as<int32_t>(), bench.stream, options);
               });
  }
}

// MXFP4 → bf16 dequantisation of `experts` expert matrices [n, k] (random codes and scales).
void BenchMxfp4(Bench& bench, const char* model, int64_t experts, int64_t n, int64_t k) {
  const std::string kernel = "DequantMxfp4ToBf16";
  if (!bench.Wants(kernel)) return;
  const std::string shape = std::string(model) + " E" + std::to_string(experts) + " " +
                            std::to_string(n) + "x" + std::to_string(k);
  const int64_t rows = experts * n;
  Buf packed(rows * k / 2), scales(rows * k / 32), out(rows * k * 2);
  if (!packed.ok() || !scales.ok() || !out.ok()) {
    return bench.Fail(kernel, shape, absl::ResourceExhaustedError("cudaMalloc"));
  }
  // Random bytes: the bits of random floats (scale bytes from exponents stay in a sane range).
  BENCH_CHECK(bench, kernel, shape, bench.Fill(packed.as<float>(), rows * k / 8, -1, 1));
  BENCH_CHECK(bench, kernel, shape, bench.Fill(scales.as<float>(), rows * k / 128, -1, 1));
  const double bytes = rows * k * (0.5 + 1.0 / 32 + 2.0);
  bench.Time(kernel, shape, bytes, 0.0, false, "-", [&] {
    return DequantMxfp4ToBf16(packed.as<uint8_t>(), scales.as<uint8_t>(), rows, k,
                              out.as<uint16_t>(), bench.stream);
  });
}

// Sampling `rows` logits rows of `vocab`: GB/s counts one read of the logits (the radix passes
// re-read them from L2, so this is far below the copy ceiling by design). `history` > 0: each
// row carries a penalty history of that many distinct ids (the penalties change the logits,
// which is harmless to the timing: every launch reads the same amount).
void BenchSampling(Bench& bench, const char* what, int64_t rows, int64_t vocab,
                   const SamplingRowParams& p, float spread, int64_t history = 0) {
  const std::string kernel = "SampleTokens";
  if (!bench.Wants(kernel)) return;
  const std::string shape =
      std::string(what) + " B" + std::to_string(rows) + " V" + std::to_string(vocab);
  Buf logits(rows * vocab * 4), params(rows * static_cast<int64_t>(sizeof(SamplingRowParams))),
      uniforms(rows * 8), tokens(rows * 4), history_buf(((rows + 1) + 2 * rows * history) * 4);
  BENCH_CHECK(bench, kernel, shape, bench.Fill(logits.as<float>(), rows * vocab, -spread, spread));
  const std::vector<SamplingRowParams> host_params(rows, p);
  std::vector<double> host_u(rows);
  for (int64_t r = 0; r < rows; ++r) host_u[r] = (r + 0.5) / rows;
  BENCH_CHECK(bench, kernel, shape,
              CudaCopy(params.as<void>(), host_params.data(), rows * sizeof(SamplingRowParams)));
  BENCH_CHECK(bench, kernel, shape, CudaCopy(uniforms.as<void>(), host_u.data(), rows * 8));
  SamplingInputs in;
  in.logits = logits.as<float>();
  in.params = params.as<SamplingRowParams>();
  in.uniforms = uniforms.as<double>();
  if (history > 0) {  // [rows + 1] offsets, then ids (every 37th id), then counts (1)
    std::vector<int32_t> host_history;
    for (int64_t r = 0; r <= rows; ++r) host_history.push_back(static_cast<int32_t>(r * history));
    for (int64_t i = 0; i < rows * history; ++i) {
      host_history.push_back(static_cast<int32_t>(i % history * 37 % vocab));
    }
    host_history.resize(host_history.size() + rows * history, 1);
    BENCH_CHECK(bench, kernel, shape,
                CudaCopy(history_buf.as<void>(), host_history.data(), host_history.size() * 4));
    in.history_offsets = history_buf.as<int32_t>();
    in.history_ids = in.history_offsets + rows + 1;
    in.history_counts = in.history_ids + rows * history;
  }
  bench.Time(kernel, shape, rows * vocab * 4.0, 0.0, false, "-",
             [&] { return SampleTokens(in, rows, vocab, tokens.as<int32_t>(), bench.stream); });
}

// Log-probabilities of `rows` raw rows (top `top`): GB/s counts one read of the logits.
void BenchLogprobs(Bench& bench, int64_t rows, int64_t vocab, int top) {
  const std::string kernel = "RowLogprobs";
  if (!bench.Wants(kernel)) return;
  const std::string shape =
      "top " + std::to_string(top) + " B" + std::to_string(rows) + " V" + std::to_string(vocab);
  Buf logits(rows * vocab * 4), tokens(rows * 4),
      row_buf(rows * static_cast<int64_t>(sizeof(LogprobRow))), token_logprob(rows * 4),
      top_ids(rows * top * 4), top_logprobs(rows * top * 4);
  BENCH_CHECK(bench, kernel, shape, bench.Fill(logits.as<float>(), rows * vocab, -8, 8));
  std::vector<int32_t> host_tokens(rows);
  std::vector<LogprobRow> host_rows(rows);
  for (int64_t r = 0; r < rows; ++r) {
    host_tokens[r] = static_cast<int32_t>(r * 997 % vocab);
    host_rows[r] = {static_cast<int32_t>(r), static_cast<int32_t>(r), top};
  }
  BENCH_CHECK(bench, kernel, shape, CudaCopy(tokens.as<void>(), host_tokens.data(), rows * 4));
  BENCH_CHECK(bench, kernel, shape,
              CudaCopy(row_buf.as<void>(), host_rows.data(), rows * sizeof(LogprobRow)));
  const LogprobInputs in{logits.as<float>(), tokens.as<int32_t>(), row_buf.as<LogprobRow>()};
  const LogprobOutputs out{token_logprob.as<float>(), top_ids.as<int32_t>(),
                           top_logprobs.as<float>()};
  bench.Time(kernel, shape, rows * vocab * 4.0, 0.0, false, "-",
             [&] { return RowLogprobs(in, rows, vocab, top, out, bench.stream); });
}

// `rows` routed rows spread uniformly at random (fixed seed) over `experts` experts: the
// [E + 1] row offsets and how many experts got any.
struct ExpertSplit {
  std::vector<int32_t> offsets;
  int used_experts = 0;
};

ExpertSplit RandomExpertSplit(int experts, int64_t rows) {
  std::vector<int32_t> counts(experts, 0);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> pick(0, experts - 1);
  for (int64_t r = 0; r < rows; ++r) ++counts[pick(rng)];
  ExpertSplit split;
  split.offsets.assign(experts + 1, 0);
  for (int e = 0; e < experts; ++e) {
    split.offsets[e + 1] = split.offsets[e] + counts[e];
    split.used_experts += counts[e] > 0;
  }
  return split;
}

// Expert GEMMs over `rows` routed rows spread uniformly at random over `experts` experts.
void BenchGroupedGemm(Bench& bench, const char* model, int experts, int64_t rows, int64_t n,
                      int64_t k, GroupedGemmMode mode) {
  const std::string kernel =
      mode == GroupedGemmMode::kPerExpertLoop ? "MoeGroupedGemm_loop" : "MoeGroupedGemm_grouped";
  if (!bench.Wants(kernel)) return;
  const std::string shape = std::string(model) + " E" + std::to_string(experts) + " rows" +
                            std::to_string(rows) + " " + std::to_string(n) + "x" +
                            std::to_string(k);
  const ExpertSplit split = RandomExpertSplit(experts, rows);
  const std::vector<int32_t>& offsets = split.offsets;
  const int used_experts = split.used_experts;
  Buf x(rows * k * 2), w(int64_t{experts} * n * k * 2), y(rows * n * 2),
      ws(MoeGroupedGemmWorkspaceBytes(experts));
  if (!x.ok() || !w.ok() || !y.ok()) {
    return bench.Fail(kernel, shape, absl::ResourceExhaustedError("cudaMalloc"));
  }
  BENCH_CHECK(bench, kernel, shape, bench.Fill(x.as<uint16_t>(), rows * k, -1, 1));
  BENCH_CHECK(bench, kernel, shape,
              bench.Fill(w.as<uint16_t>(), int64_t{experts} * n * k, -0.05f, 0.05f));
  const double flops = 2.0 * rows * n * k;
  const double bytes = 2.0 * used_experts * n * k + 2.0 * rows * (n + k);
  const bool flop_bound = rows >= 128LL * experts;
  bench.Time(kernel, shape, bytes, flops, flop_bound, flop_bound ? ">=60% GEMM" : "-", [&] {
    return MoeGroupedGemm(bench.cublas, x.as<uint16_t>(), offsets.data(), experts, w.as<uint16_t>(),
                          n, k, y.as<uint16_t>(), mode, ws.as<void>(),
                          MoeGroupedGemmWorkspaceBytes(experts), nullptr, bench.stream);
  });
}

enum class WeightKind { kBf16, kMxfp4, kInt8 };
constexpr WeightKind kWeightKinds[] = {WeightKind::kBf16, WeightKind::kMxfp4, WeightKind::kInt8};

// Strata's own grouped GEMM (grouped_gemm.h) at BenchGroupedGemm's shapes: offsets on the
// device (the work-list kernel is timed too), bf16, MXFP4 (scale bytes 120: the common decode
// path) or int8 weights (random codes, scales 0x3c3c), bf16 output, or the fused GLU over
// n = 2·I gate|up rows (h [rows, I]).
// `tile`: kAuto, or kLargeWgmma (bf16; rows named GroupedGemm*_bf16_wgmma).
void BenchOwnGroupedGemm(Bench& bench, const char* model, int experts, int64_t rows, int64_t n,
                         int64_t k, WeightKind kind, bool glu,
                         GroupedGemmTile tile = GroupedGemmTile::kAuto) {
  const bool mxfp4 = kind == WeightKind::kMxfp4, int8 = kind == WeightKind::kInt8;
  const std::string kernel = std::string(glu ? "GroupedGemmGlu" : "GroupedGemm") +
                             (mxfp4  ? "_mxfp4"
                              : int8 ? "_int8"
                                     : "_bf16") +
                             (tile == GroupedGemmTile::kLargeWgmma ? "_wgmma" : "");
  if (!bench.Wants(kernel)) return;
  const std::string shape = std::string(model) + " E" + std::to_string(experts) + " rows" +
                            std::to_string(rows) + " " + std::to_string(n) + "x" +
                            std::to_string(k);
  const ExpertSplit split = RandomExpertSplit(experts, rows);
  const std::vector<int32_t>& offsets = split.offsets;
  const int used_experts = split.used_experts;
  const int64_t w_elems = int64_t{experts} * n * k, out_cols = glu ? n / 2 : n;
  const int64_t w_bytes = mxfp4 ? w_elems / 2 : int8 ? w_elems : w_elems * 2;
  const int64_t scale_bytes = mxfp4 ? w_elems / 32 : int8 ? w_elems / 16 : 0;
  Buf x(rows * k * 2), w(w_bytes), scales(scale_bytes), y(rows * out_cols * 2),
      offs(int64_t{experts + 1} * 4), ws(GroupedGemmWorkspaceBytes(experts, rows));
  if (!x.ok() || !w.ok() || !scales.ok() || !y.ok()) {
    return bench.Fail(kernel, shape, absl::ResourceExhaustedError("cudaMalloc"));
  }
  BENCH_CHECK(bench, kernel, shape, bench.Fill(x.as<uint16_t>(), rows * k, -1, 1));
  if (mxfp4 || int8) {  // random codes: the bits of random floats
    BENCH_CHECK(bench, kernel, shape, bench.Fill(w.as<float>(), w_bytes / 4, -1, 1));
    BENCH_CHECK(bench, kernel, shape,
                CudaStatus(cudaMemset(scales.as<void>(), mxfp4 ? 120 : 0x3c,
                                      static_cast<size_t>(scale_bytes)),
                           "gpu_bench cudaMemset"));
  } else {
    BENCH_CHECK(bench, kernel, shape, bench.Fill(w.as<uint16_t>(), w_elems, -0.05f, 0.05f));
  }
  BENCH_CHECK(bench, kernel, shape,
              CudaCopy(offs.as<int32_t>(), offsets.data(), (experts + 1) * 4));
  const GroupedWeights weights =
      mxfp4  ? GroupedWeights::Mxfp4(w.as<uint8_t>(), scales.as<uint8_t>())
      : int8 ? GroupedWeights::Int8(w.as<int8_t>(), scales.as<uint16_t>())
             : GroupedWeights::Bf16(w.as<uint16_t>());
  const double flops = 2.0 * rows * n * k;
  const double bytes = used_experts * n * k *
                           (mxfp4  ? 0.5 + 1.0 / 32
                            : int8 ? 1.0 + 2.0 / 32
                                   : 2.0) +
                       2.0 * rows * (k + out_cols);
  const bool flop_bound = rows >= 128LL * experts;
  const GluParams act{GluKind::kSitu, 4.0f, 25.0f};
  bench.Time(kernel, shape, bytes, flops, flop_bound, flop_bound ? ">=60% GEMM" : "-", [&] {
    if (glu) {
      return GroupedGemmGlu(x.as<uint16_t>(), offs.as<int32_t>(), experts, rows, weights, n / 2, k,
                            act, y.as<uint16_t>(), tile, ws.as<void>(),
                            GroupedGemmWorkspaceBytes(experts, rows), bench.stream);
    }
    return GroupedGemm(x.as<uint16_t>(), offs.as<int32_t>(), experts, rows, weights, n, k,
                       y.as<uint16_t>(), tile, ws.as<void>(),
                       GroupedGemmWorkspaceBytes(experts, rows), bench.stream);
  });
}

void BenchDenseGemm(Bench& bench, const char* what, int64_t m, int64_t n, int64_t k) {
  const std::string kernel = "GemmBf16";
  if (!bench.Wants(kernel)) return;
  const std::string shape = std::string(what) + " " + std::to_string(m) + "x" + std::to_string(n) +
                            "x" + std::to_string(k);
  Buf x(m * k * 2), w(n * k * 2), y(m * n * 4);
  if (!x.ok() || !w.ok() || !y.ok()) {
    return bench.Fail(kernel, shape, absl::ResourceExhaustedError("cudaMalloc"));
  }
  BENCH_CHECK(bench, kernel, shape, bench.Fill(x.as<uint16_t>(), m * k, -1, 1));
  BENCH_CHECK(bench, kernel, shape, bench.Fill(w.as<uint16_t>(), n * k, -0.05f, 0.05f));
  const double flops = 2.0 * m * n * k;
  const double bytes = 2.0 * n * k + 2.0 * m * k + 4.0 * m * n;
  const bool flop_bound = m >= 512;
  bench.Time(kernel, shape, bytes, flops, flop_bound, "-", [&] {
    return GemmBf16(bench.cublas, x.as<uint16_t>(), m, k, k, w.as<uint16_t>(), n, y.as<float>(), n,
                    bench.stream);
  });
}

// GemmInt8 (int8_gemm.h) on a projection, on `path` (kAuto: the one GemmInt8PathFor picks): at
// decode rows (≤ 16) the weight bytes against the copy ceiling, target ≥ 70 % and never slower
// than the same shape in bf16 (BenchDenseGemm's row).
void BenchGemmInt8(Bench& bench, const char* what, int64_t m, int64_t n, int64_t k,
                   GemmInt8Path path = GemmInt8Path::kAuto) {
  if (path == GemmInt8Path::kAuto) path = GemmInt8PathFor(m);
  const std::string kernel = path == GemmInt8Path::kGemv     ? "GemmInt8_gemv"
                             : path == GemmInt8Path::kSkinny ? "GemmInt8_skinny"
                                                             : "GemmInt8_tc";
  const bool decode_rows = m <= kInt8GemvMaxRows;
  if (!bench.Wants("GemmInt8")) return;
  const std::string shape = std::string(what) + " " + std::to_string(m) + "x" + std::to_string(n) +
                            "x" + std::to_string(k);
  const int64_t ws_bytes = GemmInt8WorkspaceBytes(m, path);
  Buf x(m * k * 2), codes(n * k), scales(n * k / 16), y(m * n * 2), ws(ws_bytes);
  if (!x.ok() || !codes.ok() || !scales.ok() || !y.ok() || !ws.ok()) {
    return bench.Fail(kernel, shape, absl::ResourceExhaustedError("cudaMalloc"));
  }
  BENCH_CHECK(bench, kernel, shape, bench.Fill(x.as<uint16_t>(), m * k, -1, 1));
  BENCH_CHECK(bench, kernel, shape, bench.Fill(codes.as<float>(), n * k / 4, -1, 1));
  BENCH_CHECK(bench, kernel, shape,
              CudaStatus(cudaMemset(scales.as<void>(), 0x3c, static_cast<size_t>(n * k / 16)),
                         "gpu_bench cudaMemset"));
  const double flops = 2.0 * m * n * k;
  const double bytes = n * k * (1.0 + 2.0 / 32) + 2.0 * m * (k + n);
  const bool flop_bound = m >= 512;
  bench.Time(kernel, shape, bytes, flops, flop_bound, decode_rows ? ">=70% copy" : "-", [&] {
    return GemmInt8(x.as<uint16_t>(), m, k, codes.as<int8_t>(), scales.as<uint16_t>(), n,
                    y.as<uint16_t>(), ws.as<void>(), ws_bytes, bench.stream, path);
  });
}

void PrintTable(const Bench& bench) {
  std::printf("\n## GPU kernel benchmark (ceilings: copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s)\n\n",
              bench.copy_gbps, bench.gemm_tflops);
  std::printf("| kernel | shape | time (us) | achieved | %% of ceiling | target | also |\n");
  std::printf("|---|---|---:|---:|---:|---|---|\n");
  for (const Row& r : bench.rows) std::printf("%s\n", FormatRow(r).c_str());
  std::fflush(stdout);
}

int Run(Bench& bench) {
  std::printf("measuring ceilings...\n");
  absl::StatusOr<double> copy = MeasureCopyBandwidthGBps(int64_t{1} << 30, 10, bench.stream);
  absl::StatusOr<double> gemm = MeasureBf16GemmTflops(bench.cublas, 8192, 10, bench.stream);
  if (!copy.ok() || !gemm.ok()) {
    std::printf("ceiling measurement failed: %s / %s\n", copy.status().ToString().c_str(),
                gemm.status().ToString().c_str());
    return 1;
  }
  bench.copy_gbps = *copy;
  bench.gemm_tflops = *gemm;
  std::printf("copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s\n", *copy, *gemm);
  const bool all = !bench.quick;
  BenchMla(bench, "K-L", 32, 64, 32768, false);
  BenchMla(bench, "K-L", 32, 64, 32768, false, /*fp8=*/true);
  if (all) {
    BenchMla(bench, "K-L", 32, 8, 131072, false);
    BenchMla(bench, "K3", 96, 32, 32768, false);
    BenchMla(bench, "K3/TP8", 12, 64, 65536, false);
    // DCP 8: every rank attends all 96 gathered heads over its eighth of a 128K context.
    BenchMla(bench, "K3/TP8xDCP8", 96, 32, 16384, false, false, /*partial=*/true);
    BenchMla(bench, "K-L", 32, 128, 2048, false);
  }
  BenchMla(bench, "K-L", 32, 8, 8192, true);
  if (all) BenchMlaPrefill(bench, "K-L", 32, 4096);
  BenchMlaPrefillMha(bench, "K-L", 32, 4096);
  if (all) BenchMlaPrefillMha(bench, "K3", 96, 4096);
  BenchMlaPrefillMha(bench, "K3", 96, 2048, 32768, 8192);     // context windows: ~490 MiB scratch
  if (all) BenchMlaPrefillMha(bench, "K3", 96, 2048, 32768);  // same, unchunked: 1.6 GiB scratch
  BenchKda(bench, "K3", 96, 64, false, true);
  if (all) {
    BenchKda(bench, "K3", 96, 64, true, true);
    BenchKda(bench, "K-L", 32, 256, false, false);
    BenchKda(bench, "K-L", 32, 64, true, false);
    BenchKdaPrefill(bench, "K-L", 32, 8, 1024);
  }
  BenchKdaPrefillChunked(bench, "K3", 96, 8, 1024);
  BenchRouter(bench, "K3", 4096, RouterParams{896, 16, 1, 1, true, 1.0f});
  BenchRouter(bench, "K3 decode", 64, RouterParams{896, 16, 1, 1, true, 1.0f});
  if (all) BenchRouter(bench, "K-L", 4096, RouterParams{256, 8, 1, 1, true, 2.446f});
  BenchElementwise(bench, 4096, 7168, 3072);
  BenchVit(bench, 4096);
  BenchGroupedGemm(bench, "K3 gate|up", 64, 16384, 6144, 3584, GroupedGemmMode::kGroupedBatched);
  for (WeightKind kind : kWeightKinds) {
    for (bool glu : {false, true}) {
      BenchOwnGroupedGemm(bench, "K3 gate|up", 64, 16384, 6144, 3584, kind, glu);
      if (kind == WeightKind::kBf16 && WgmmaAvailable()) {
        BenchOwnGroupedGemm(bench, "K3 gate|up", 64, 16384, 6144, 3584, kind, glu,
                            GroupedGemmTile::kLargeWgmma);
      }
    }
  }
  BenchGroupedGemm(bench, "K3 gate|up", 64, 16384, 6144, 3584, GroupedGemmMode::kPerExpertLoop);
  if (all) {
    BenchGroupedGemm(bench, "K3 down", 64, 16384, 3584, 3072, GroupedGemmMode::kGroupedBatched);
    BenchGroupedGemm(bench, "K-L gate|up", 256, 32768, 2048, 2304,
                     GroupedGemmMode::kGroupedBatched);
    BenchGroupedGemm(bench, "K-L gate|up", 256, 32768, 2048, 2304, GroupedGemmMode::kPerExpertLoop);
    BenchGroupedGemm(bench, "K3 decode B64", 224, 1024, 6144, 3584,
                     GroupedGemmMode::kGroupedBatched);
    for (WeightKind kind : kWeightKinds) {
      for (bool glu : {false, true}) {
        BenchOwnGroupedGemm(bench, "K3 decode B64", 224, 1024, 6144, 3584, kind, glu);
      }
    }
  }
  BenchDenseGemm(bench, "LM head decode", 64, 163840, 7168);
  if (all) BenchDenseGemm(bench, "LM head prefill", 4096, 163840, 7168);
  // int8 projections (--quantization int8) next to the same shapes in bf16: K-L's KDA q|k|v
  // (2304 → 3·4096) at decode batches 1, 2, 4, 8, 16 and 32 on the path kAuto takes (1: GEMV,
  // 2–16: skinny, 32: tensor-core tiles) and at 1, 8 and 16 on the others' decode paths too (what
  // GemmInt8PathFor's choice rests on), K3's o_proj (8192 → 7168), the LM head.
  for (int64_t m : {1, 2, 4, 8, 16, 32}) {
    BenchGemmInt8(bench, "K-L q|k|v", m, 12288, 2304);
    if (m == 1) BenchGemmInt8(bench, "K-L q|k|v", m, 12288, 2304, GemmInt8Path::kSkinny);
    if (m == 8 || m == 16) {
      BenchGemmInt8(bench, "K-L q|k|v", m, 12288, 2304, GemmInt8Path::kGemv);
    }
    BenchDenseGemm(bench, "K-L q|k|v", m, 12288, 2304);
  }
  BenchGemmInt8(bench, "K3 o_proj", 1, 7168, 8192);
  BenchGemmInt8(bench, "K3 o_proj", 8, 7168, 8192);
  BenchDenseGemm(bench, "K3 o_proj", 8, 7168, 8192);
  BenchDenseGemm(bench, "K3 o_proj", 1, 7168, 8192);
  BenchGemmInt8(bench, "LM head decode", 64, 163840, 7168);
  if (all) {
    BenchGemmInt8(bench, "LM head decode", 1, 163840, 7168);
    BenchGemmInt8(bench, "LM head prefill", 4096, 163840, 7168);
  }
  BenchEmbedding(bench, 163840, 7168, 4096);
  BenchTensorParallelShares(bench, 163840, 7168, 4096, 8, 896, 16);  // K3 at TP8
  BenchTensorParallelShares(bench, 163840, 7168, 64, 8, 896, 16);    // a K3 decode step
  BenchMxfp4(bench, "K3 gate|up", 64, 6144, 3584);
  {
    SamplingRowParams greedy;
    greedy.temperature = 0.0f;
    SamplingRowParams nucleus;  // top-k 50, top-p 0.9: one chunk
    nucleus.top_k = 50;
    nucleus.top_p = 0.9f;
    // top-p 0.9 alone. Logits uniform in ±256 put ~320 tokens per logit unit, so the cut lies
    // in the first 1024-token chunk; in ±1 it needs most of the vocabulary (~130 chunks).
    SamplingRowParams wide;
    wide.top_p = 0.9f;
    BenchSampling(bench, "greedy", 64, 163840, greedy, 8.0f);
    BenchSampling(bench, "top-k 50 top-p .9", 64, 163840, nucleus, 8.0f);
    SamplingRowParams penalised = nucleus;
    penalised.repetition_penalty = 1.1f;
    penalised.frequency_penalty = 0.2f;
    BenchSampling(bench, "top-k 50 top-p .9 + 4096-id penalties", 64, 163840, penalised, 8.0f,
                  4096);
    BenchLogprobs(bench, 64, 163840, 20);
    if (all) {
      BenchSampling(bench, "top-p .9 peaked", 64, 163840, wide, 256.0f);
      BenchSampling(bench, "top-p .9 flat (chunk walk)", 8, 163840, wide, 1.0f);
    }
  }
  PrintTable(bench);
  for (const Row& r : bench.rows) {
    if (!r.error.empty()) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace strata::kernels::cuda

int main(int argc, char** argv) {
  using strata::kernels::cuda::Bench;
  Bench bench;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      bench.quick = true;
    } else if (std::strcmp(argv[i], "--once") == 0) {
      bench.once = true;
    } else if (std::strncmp(argv[i], "--filter=", 9) == 0) {
      bench.filter = argv[i] + 9;
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--once] [--filter=SUBSTRING]\n", argv[0]);
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("cuda_gpu_bench: no CUDA device; nothing measured\n");
    return 3;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %d SMs, %.0f GiB, L2 %d MiB\n", prop.name, prop.multiProcessorCount,
              static_cast<double>(prop.totalGlobalMem) / (1 << 30), prop.l2CacheSize >> 20);
  if (cudaStreamCreate(&bench.stream) != cudaSuccess) return 1;
  absl::StatusOr<strata::kernels::cuda::CublasHandle> handle =
      strata::kernels::cuda::CublasHandle::Create();
  if (!handle.ok()) {
    std::printf("%s\n", handle.status().ToString().c_str());
    return 1;
  }
  bench.cublas = handle->get();
  const int rc = strata::kernels::cuda::Run(bench);
  cudaStreamDestroy(bench.stream);
  return rc;
}
