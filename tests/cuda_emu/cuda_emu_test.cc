// The emulator's own tests: the tensor-core fragment layouts agree with each other and with a
// plain matrix product, barriers and warp collectives behave as on a GPU, device work runs only
// when the host synchronizes (device synchronization on the current device only), graphs replay
// what was captured (host functions too), and the API refuses what CUDA refuses.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/internal/hopper.cuh"
#include "kernels/cuda/internal/launch.cuh"
#include "kernels/cuda/internal/mma.cuh"
#include "tests/cuda_emu/emu_internal.h"

namespace {

using strata::kernels::cuda::internal::AwaitPriorGrids;
using strata::kernels::cuda::internal::LaunchKernel;
namespace ki = strata::kernels::cuda::internal;

uint16_t ToBf16(float v) { return strata_emu::FloatToBf16BitsRn(v); }
float FromBf16(uint16_t b) { return strata_emu::Bf16BitsToFloat(b); }

// C[16×8] = A[16×16] · B[16×8], A and B row-major bf16 in global memory, through shared memory,
// ldmatrix (A plain, B transposed) and one mma: the pattern the tensor-core kernels use.
__global__ void MmaTileKernel(const uint16_t* a, const uint16_t* b, float* c) {
  AwaitPriorGrids();
  alignas(16) __shared__ uint16_t a_s[16][16];
  alignas(16) __shared__ uint16_t b_s[16][8];
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) a_s[i / 16][i % 16] = a[i];
  for (int i = lane; i < 128; i += 32) b_s[i / 8][i % 8] = b[i];
  __syncwarp();
  uint32_t af[4], bf[4];
  // x4 over A: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k
  // 8-15).
  ki::LdMatrixX4(af, &a_s[(lane % 8) + 8 * ((lane / 8) % 2)][8 * (lane / 16)]);
  // x4.trans over B (k × n): matrices (k 0-7), (k 8-15), and the same again.
  ki::LdMatrixX4Trans(bf, &b_s[(lane % 8) + 8 * ((lane / 8) % 2)][0]);
  float d[4] = {0, 0, 0, 0};
  ki::MmaBf16(d, af, bf[0], bf[1]);
  const int g = lane / 4, t = 2 * (lane % 4);
  c[g * 8 + t] = d[0];
  c[g * 8 + t + 1] = d[1];
  c[(g + 8) * 8 + t] = d[2];
  c[(g + 8) * 8 + t + 1] = d[3];
}

TEST(CudaEmuTest, LdMatrixAndMmaComputeTheMatrixProduct) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<uint16_t> a(256), b(128);
  for (auto& v : a) v = ToBf16(u(rng));
  for (auto& v : b) v = ToBf16(u(rng));
  uint16_t *da, *db;
  float* dc;
  ASSERT_EQ(cudaMalloc(&da, 512), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, 256), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, 512), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(da, a.data(), 512, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), 256, cudaMemcpyHostToDevice), cudaSuccess);
  LaunchKernel(MmaTileKernel, 1, 32, 0, nullptr, da, db, dc);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> c(128);
  ASSERT_EQ(cudaMemcpy(c.data(), dc, 512, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      double want = 0;
      for (int k = 0; k < 16; ++k) want += double{FromBf16(a[i * 16 + k])} * FromBf16(b[k * 8 + j]);
      EXPECT_NEAR(c[i * 8 + j], want, 1e-4) << "row " << i << " col " << j;
    }
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

// D[64×24] = C + A[64×16] · B[16×24] by one wgmma over a warpgroup: A fragments straight from
// global memory into registers, B written into shared memory in the no-swizzle K-major layout
// with core matrices spread apart (lbo 384 B between the two K halves, sbo 128 B between the
// three 8-column groups, so a mix-up of the two offsets reads the wrong bytes). `before`
// receives the accumulators between the issue and the wait: still C, as the hardware may
// leave them until wgmma.wait_group.
constexpr int kWgN = 24;
__global__ void WgmmaTileKernel(const uint16_t* a, const uint16_t* b, const float* c, float* d_out,
                                float* before) {
  AwaitPriorGrids();
  STRATA_DYNAMIC_SHARED(smem);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  constexpr uint32_t kLbo = 384, kSbo = 128;
  for (int i = tid; i < 16 * kWgN; i += 128) {
    const int k = i / kWgN, n = i % kWgN;
    *reinterpret_cast<uint16_t*>(smem + (n % 8) * 16 + (n / 8) * kSbo + (k % 8) * 2 +
                                 (k / 8) * kLbo) = b[i];
  }
  ki::FenceProxyAsync();
  __syncthreads();
  const int g = lane / 4, t = 2 * (lane % 4), r0 = 16 * warp + g;
  auto pair = [&](int row, int col) {
    return static_cast<uint32_t>(a[row * 16 + col]) | static_cast<uint32_t>(a[row * 16 + col + 1])
                                                          << 16;
  };
  uint32_t af[4] = {pair(r0, t), pair(r0 + 8, t), pair(r0, t + 8), pair(r0 + 8, t + 8)};
  float d[kWgN / 2];
  auto index = [&](int j, int i) { return (r0 + (i >= 2 ? 8 : 0)) * kWgN + 8 * j + t + (i & 1); };
  for (int j = 0; j < kWgN / 8; ++j) {
    for (int i = 0; i < 4; ++i) d[4 * j + i] = c[index(j, i)];
  }
  ki::WgmmaFence();
  ki::WgmmaBf16<kWgN>(d, af, ki::WgmmaDescriptor(smem, kLbo, kSbo), true);
  ki::WgmmaCommit();
  for (int j = 0; j < kWgN / 8; ++j) {
    for (int i = 0; i < 4; ++i) before[index(j, i)] = d[4 * j + i];
  }
  ki::WgmmaWait<0>();
  for (int j = 0; j < kWgN / 8; ++j) {
    for (int i = 0; i < 4; ++i) d_out[index(j, i)] = d[4 * j + i];
  }
}

TEST(CudaEmuTest, WgmmaComputesTheProductThroughItsDescriptorAtTheWait) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<uint16_t> a(64 * 16), b(16 * kWgN);
  std::vector<float> c(64 * kWgN);
  for (auto& v : a) v = ToBf16(u(rng));
  for (auto& v : b) v = ToBf16(u(rng));
  for (auto& v : c) v = u(rng);
  uint16_t *da, *db;
  float *dc, *dd, *dbefore;
  ASSERT_EQ(cudaMalloc(&da, a.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, b.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, c.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dd, c.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dbefore, c.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  LaunchKernel(WgmmaTileKernel, 1, 128, 1024, nullptr, da, db, dc, dd, dbefore);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> d(c.size()), before(c.size());
  ASSERT_EQ(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(before.data(), dbefore, d.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 64; ++i) {
    for (int j = 0; j < kWgN; ++j) {
      double want = c[i * kWgN + j];
      for (int k = 0; k < 16; ++k) {
        want += double{FromBf16(a[i * 16 + k])} * FromBf16(b[k * kWgN + j]);
      }
      EXPECT_NEAR(d[i * kWgN + j], want, 1e-4) << "row " << i << " col " << j;
      EXPECT_EQ(before[i * kWgN + j], c[i * kWgN + j]) << "row " << i << " col " << j;
    }
  }
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dc),
                  static_cast<void*>(dd), static_cast<void*>(dbefore)}) {
    cudaFree(p);
  }
}

// Two phases of one mbarrier, each a bulk copy of 64 words that thread 0 expects: every thread
// waits for the phase's parity and then reads the copy; a word read right after the issue (before
// the wait) is still undefined (the emulator's poison).
__global__ void BulkCopyKernel(const uint32_t* src, uint32_t* out, uint32_t* early) {
  AwaitPriorGrids();
  STRATA_DYNAMIC_SHARED(smem);
  __shared__ uint64_t bar;
  auto* words = reinterpret_cast<uint32_t*>(smem);
  const int tid = threadIdx.x;
  if (tid == 0) {
    ki::MbarrierInit(&bar, 1);
    ki::FenceMbarrierInit();
  }
  __syncthreads();
  for (int phase = 0; phase < 2; ++phase) {
    if (tid == 0) {
      ki::MbarrierArriveExpectTx(&bar, 256);
      ki::CpAsyncBulkToShared(words, src + 64 * phase, 256, &bar);
      early[phase] = words[5];
    }
    ki::MbarrierWait(&bar, phase);
    out[64 * phase + tid] = words[tid];
    __syncthreads();  // everyone has read before the next copy overwrites
  }
}

TEST(CudaEmuTest, BulkCopiesLandWhenTheirBarrierPhaseCompletes) {
  std::vector<uint32_t> src(128);
  std::iota(src.begin(), src.end(), 1000u);
  uint32_t *dsrc, *dout, *dearly;
  ASSERT_EQ(cudaMalloc(&dsrc, 512), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, 512), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dearly, 8), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dsrc, src.data(), 512, cudaMemcpyHostToDevice), cudaSuccess);
  for (const char* schedule : {"forward", "reverse", "shuffle:3"}) {
    strata_emu::SetScheduleForTesting(schedule);
    LaunchKernel(BulkCopyKernel, 1, 64, 256, nullptr, dsrc, dout, dearly);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<uint32_t> out(128), early(2);
    ASSERT_EQ(cudaMemcpy(out.data(), dout, 512, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(early.data(), dearly, 8, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(out, src) << schedule;
    EXPECT_EQ(early, (std::vector<uint32_t>{0xffffffffu, 0xffffffffu})) << schedule;
  }
  strata_emu::SetScheduleForTesting(nullptr);
  cudaFree(dsrc);
  cudaFree(dout);
  cudaFree(dearly);
}

// A phase that expects more bytes than its copies bring never completes: a hang on a GPU, an
// abort naming the waiting threads here.
__global__ void ShortBulkCopyKernel(const uint32_t* src) {
  AwaitPriorGrids();
  STRATA_DYNAMIC_SHARED(smem);
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    ki::MbarrierInit(&bar, 1);
    ki::MbarrierArriveExpectTx(&bar, 512);
    ki::CpAsyncBulkToShared(smem, src, 256, &bar);
  }
  __syncthreads();
  ki::MbarrierWait(&bar, 0);
}

TEST(CudaEmuDeathTest, ABarrierPhaseMissingBytesDeadlocks) {
  EXPECT_DEATH(
      {
        uint32_t* d = nullptr;
        cudaMalloc(&d, 256);
        LaunchKernel(ShortBulkCopyKernel, 1, 32, 256, nullptr, d);
        cudaDeviceSynchronize();
      },
      "deadlock.*mbarrier.wait");
}

// Two warpgroups, each passing values among its own threads through its own named barrier while
// the other group never reaches it.
__global__ void NamedBarrierKernel(int* out) {
  AwaitPriorGrids();
  __shared__ int value[2];
  const int group = threadIdx.x / 128;
  if (threadIdx.x % 128 == 0) value[group] = 10 + group;
  ki::NamedBarrierSync(1 + group, 128);
  out[threadIdx.x] = value[group];
}

TEST(CudaEmuTest, NamedBarriersSynchronizeTheirOwnThreads) {
  int* d;
  ASSERT_EQ(cudaMalloc(&d, 256 * sizeof(int)), cudaSuccess);
  for (const char* schedule : {"forward", "reverse"}) {
    strata_emu::SetScheduleForTesting(schedule);
    LaunchKernel(NamedBarrierKernel, 1, 256, 0, nullptr, d);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<int> out(256);
    ASSERT_EQ(cudaMemcpy(out.data(), d, 256 * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 256; ++i) EXPECT_EQ(out[i], 10 + i / 128) << schedule << " thread " << i;
  }
  strata_emu::SetScheduleForTesting(nullptr);
  cudaFree(d);
}

// Block-wide sum through shared memory; threads past `n` return before the barrier (exited
// threads no longer count at __syncthreads, as on a GPU).
__global__ void BlockSumKernel(const int* in, int n, int* out) {
  AwaitPriorGrids();
  __shared__ int partial[1024];
  const int tid = static_cast<int>(threadIdx.x + threadIdx.y * blockDim.x);
  if (tid >= n) return;
  partial[tid] = in[blockIdx.x * n + tid];
  __syncthreads();
  if (tid == 0) {
    int sum = 0;
    for (int i = 0; i < n; ++i) sum += partial[i];
    out[blockIdx.x] = sum;
  }
}

TEST(CudaEmuTest, SyncThreadsOrdersSharedMemoryAcrossThreadsAndBlocks) {
  const int n = 997, blocks = 3;  // 2-D blocks of 25 × 40 = 1000 threads: three exit early
  std::vector<int> in(static_cast<size_t>(n * blocks));
  std::iota(in.begin(), in.end(), 1);
  int *din, *dout;
  ASSERT_EQ(cudaMalloc(&din, in.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, blocks * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(din, in.data(), in.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  LaunchKernel(BlockSumKernel, blocks, dim3(25, 40), 0, nullptr, din, n, dout);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> out(blocks);
  ASSERT_EQ(cudaMemcpy(out.data(), dout, blocks * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int b = 0; b < blocks; ++b) {
    const int first = b * n + 1, last = (b + 1) * n;
    EXPECT_EQ(out[b], (first + last) * n / 2) << "block " << b;
  }
  cudaFree(din);
  cudaFree(dout);
}

// Each lane records what the warp intrinsics give it.
__global__ void WarpOpsKernel(int* out) {
  AwaitPriorGrids();
  const int lane = static_cast<int>(threadIdx.x % 32);
  int* o = out + (threadIdx.x / 32 * 32 + lane) * 6;
  o[0] = __shfl_xor_sync(0xffffffffu, lane * 10, 5);
  o[1] = __shfl_sync(0xffffffffu, lane * 10, 3, 16);
  o[2] = __shfl_down_sync(0xffffffffu, lane * 10, 4, 8);
  o[3] = __shfl_up_sync(0xffffffffu, lane * 10, 1);
  o[4] = static_cast<int>(__match_any_sync(0xffffffffu, lane % 3));
  o[5] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 5 == 0));
}

TEST(CudaEmuTest, WarpIntrinsicsFollowTheirDefinitions) {
  int* d;
  ASSERT_EQ(cudaMalloc(&d, 64 * 6 * 4), cudaSuccess);
  LaunchKernel(WarpOpsKernel, 1, 64, 0, nullptr, d);
  std::vector<int> out(64 * 6);
  ASSERT_EQ(cudaMemcpy(out.data(), d, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  unsigned int mod3[3] = {0, 0, 0}, mult5 = 0;
  for (int l = 0; l < 32; ++l) {
    mod3[l % 3] |= 1u << l;
    if (l % 5 == 0) mult5 |= 1u << l;
  }
  for (int t = 0; t < 64; ++t) {
    const int l = t % 32;
    const int* o = &out[static_cast<size_t>(t) * 6];
    EXPECT_EQ(o[0], (l ^ 5) * 10);
    EXPECT_EQ(o[1], (l / 16 * 16 + 3) * 10);
    EXPECT_EQ(o[2], (l % 8 + 4 < 8 ? l + 4 : l) * 10);  // outside the 8-lane segment: own value
    EXPECT_EQ(o[3], (l >= 1 ? l - 1 : l) * 10);
    EXPECT_EQ(static_cast<unsigned int>(o[4]), mod3[l % 3]);
    EXPECT_EQ(static_cast<unsigned int>(o[5]), mult5);
  }
  cudaFree(d);
}

__global__ void AddOneKernel(int* p, int n) {
  AwaitPriorGrids();
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] += 1;
}

// Device work runs when the host synchronizes: reading an async copy's destination early sees
// the old contents (on a GPU: a race), so a missing synchronization fails tests here too.
TEST(CudaEmuTest, AsyncWorkLandsOnlyAfterSynchronization) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  int *dev, *pinned;
  ASSERT_EQ(cudaMalloc(&dev, 16 * 4), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned, 16 * 4), cudaSuccess);
  std::vector<int> host(16, 7);
  ASSERT_EQ(cudaMemcpyAsync(dev, host.data(), 64, cudaMemcpyHostToDevice, stream), cudaSuccess);
  host.assign(16, -1);  // pageable sources are staged at the call: this does not reach `dev`
  LaunchKernel(AddOneKernel, 1, 32, 0, stream, dev, 16);
  for (int i = 0; i < 16; ++i) pinned[i] = 0;
  ASSERT_EQ(cudaMemcpyAsync(pinned, dev, 64, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  EXPECT_EQ(pinned[0], 0) << "the copy into pinned memory ran before any synchronization";
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(pinned[i], 8);
  // A copy into pageable memory returns only when done (CUDA's rule for pageable D2H).
  ASSERT_EQ(cudaMemcpyAsync(host.data(), dev, 64, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  EXPECT_EQ(host[5], 8);
  cudaFree(dev);
  cudaFreeHost(pinned);
  cudaStreamDestroy(stream);
}

// A graph replays the captured kernels and copies with the arguments of the capture; pinned
// sources are read at each replay.
TEST(CudaEmuTest, GraphsReplayCapturedWorkAndRefuseSynchronizationWhileCapturing) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  int *dev, *pinned;
  ASSERT_EQ(cudaMalloc(&dev, 4), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned, 8), cudaSuccess);
  pinned[0] = 100;
  pinned[1] = 0;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dev, pinned, 4, cudaMemcpyHostToDevice, stream), cudaSuccess);
  LaunchKernel(AddOneKernel, 1, 1, 0, stream, dev, 1);
  ASSERT_EQ(cudaMemcpyAsync(pinned + 1, dev, 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  std::vector<int> pageable(1);
  EXPECT_EQ(cudaMemcpyAsync(pageable.data(), dev, 4, cudaMemcpyDeviceToHost, stream),
            cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ(pinned[1], 0) << "captured work must not run at capture";
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 3u) << "two copies and a kernel";
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    pinned[0] = 10 * replay;
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(pinned[1], 10 * replay + 1);
  }
  // Synchronizing with a capturing stream invalidates the capture, as in CUDA.
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t invalid;
  EXPECT_EQ(cudaStreamEndCapture(stream, &invalid), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(invalid, nullptr);
  cudaGetLastError();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(dev);
  cudaFreeHost(pinned);
  cudaStreamDestroy(stream);
}

// Host functions run in stream order, are captured as graph nodes and replayed; a CUDA call from
// inside one is a fault, as CUDA forbids it.
void AppendNextValue(void* data) {
  auto* log = static_cast<std::vector<int>*>(data);
  log->push_back(log->empty() ? 1 : log->back() + 1);
}

TEST(CudaEmuTest, HostFunctionsRunInStreamOrderAndReplayInGraphs) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  int* dev;
  ASSERT_EQ(cudaMalloc(&dev, 4), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(dev, 0, 4, stream), cudaSuccess);
  std::vector<int> log;
  LaunchKernel(AddOneKernel, 1, 1, 0, stream, dev, 1);
  ASSERT_EQ(cudaLaunchHostFunc(stream, AppendNextValue, &log), cudaSuccess);
  EXPECT_TRUE(log.empty()) << "a host function runs in stream order, not at the call";
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(log, std::vector<int>{1});
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  ASSERT_EQ(cudaStreamIsCapturing(stream, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaStreamIsCapturing(stream, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  ASSERT_EQ(cudaLaunchHostFunc(stream, AppendNextValue, &log), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(log.size(), 1u) << "captured host functions do not run at capture";
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(log, (std::vector<int>{1, 2, 3}));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(dev);
  cudaStreamDestroy(stream);
}

void CopyInsideHostFunction(void* data) {
  cudaMemsetAsync(data, 0, 4, nullptr);  // forbidden: a CUDA call from a host function
}

TEST(CudaEmuDeathTest, CudaCallsInsideHostFunctionsFault) {
  EXPECT_DEATH(
      {
        int* dev = nullptr;
        cudaMalloc(&dev, 4);
        cudaStream_t stream;
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        cudaLaunchHostFunc(stream, CopyInsideHostFunction, dev);
        cudaStreamSynchronize(stream);
      },
      "inside a cudaLaunchHostFunc host function");
}

// cudaDeviceSynchronize and cudaFree wait for the current device only: another device's stream
// keeps its work (a rank thread's collective waiting for this thread must not run here).
TEST(CudaEmuTest, DeviceSynchronizationStaysOnTheCurrentDevice) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  ASSERT_GE(devices, 2) << "the emulator models an 8-GPU node by default";
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  cudaStream_t other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  std::vector<int> log;
  ASSERT_EQ(cudaLaunchHostFunc(other, AppendNextValue, &log), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(log.empty()) << "device 0's synchronization ran device 1's work";
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(log, std::vector<int>{1});
  ASSERT_EQ(cudaStreamDestroy(other), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

__global__ void TouchDynamicShared(int* out) {
  AwaitPriorGrids();
  STRATA_DYNAMIC_SHARED(smem);
  smem[threadIdx.x] = 1;
  __syncthreads();
  if (threadIdx.x == 0) *out = smem[0] + smem[blockDim.x - 1];
}

TEST(CudaEmuTest, LaunchesAndCopiesOutsideTheLimitsFailLikeCuda) {
  int* d;
  ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
  // More than 48 KiB of dynamic shared memory needs the kernel's attribute raised first.
  LaunchKernel(TouchDynamicShared, 1, 32, 64 << 10, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(TouchDynamicShared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 64 << 10),
            cudaSuccess);
  LaunchKernel(TouchDynamicShared, 1, 32, 64 << 10, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  int out = 0;
  ASSERT_EQ(cudaMemcpy(&out, d, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(out, 2);
  EXPECT_EQ(cudaFuncSetAttribute(TouchDynamicShared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 300 << 10),
            cudaErrorInvalidValue);
  cudaGetLastError();
  LaunchKernel(AddOneKernel, 1, 1025, 0, nullptr, d, 1);  // > 1024 threads per block
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  LaunchKernel(AddOneKernel, 0, 32, 0, nullptr, d, 1);  // an empty grid
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  // A copy running past the end of its allocation, and a kind that does not match the pointers.
  std::vector<int> host(32);
  EXPECT_EQ(cudaMemcpy(d + 8, host.data(), 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), d, 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(host.data(), 0, 4), cudaErrorInvalidValue);
  cudaGetLastError();
  cudaFree(d);
}

__global__ void DivergentBarrierKernel() {
  AwaitPriorGrids();
  if (threadIdx.x < 16) __syncthreads();
  __syncwarp();
}

TEST(CudaEmuDeathTest, DivergentBarriersAbortNamingTheDeadlock) {
  EXPECT_DEATH(
      {
        LaunchKernel(DivergentBarrierKernel, 1, 64, 0, nullptr);
        cudaDeviceSynchronize();
      },
      "deadlock");
}

// Every launch is a programmatic dependent launch (launch.cuh): on a GPU a kernel whose threads
// touch memory before griddepcontrol.wait could race the previous kernel, so a thread that exits
// without the wait aborts here; without the attribute (STRATA_CUDA_PDL=0) the same kernel runs.
__global__ void NoWaitKernel(int* p) {
  if (threadIdx.x == 0) *p = 7;
}

TEST(CudaEmuDeathTest, AProgrammaticLaunchWithoutTheWaitAborts) {
  EXPECT_DEATH(
      {
        int* d = nullptr;
        cudaMalloc(&d, sizeof(int));
        LaunchKernel(NoWaitKernel, 1, 32, 0, nullptr, d);
        cudaDeviceSynchronize();
      },
      "exited without waiting for the prior grids");
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(int)), cudaSuccess);
  strata_emu::Launch(NoWaitKernel, strata_emu::LaunchConfig{1, 32, 0, nullptr, false}, d);
  int got = 0;
  ASSERT_EQ(cudaMemcpy(&got, d, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, 7);
  cudaFree(d);
}

// cuBLAS's column-major contract: C[m×n] = op(A)·op(B), every transpose combination, bf16 and
// f32 operands, f32 or bf16 output, against a direct product.
TEST(CudaEmuTest, CublasGemmFollowsTheColumnMajorContract) {
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int m = 5, n = 3, k = 7;
  for (const cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    for (const cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      const int lda = (ta == CUBLAS_OP_N ? m : k) + 2, ldb = (tb == CUBLAS_OP_N ? k : n) + 1;
      std::vector<uint16_t> a(static_cast<size_t>(lda * (ta == CUBLAS_OP_N ? k : m)));
      std::vector<float> b(static_cast<size_t>(ldb * (tb == CUBLAS_OP_N ? n : k)));
      for (auto& v : a) v = ToBf16(u(rng));
      for (auto& v : b) v = FromBf16(ToBf16(u(rng)));
      uint16_t* da;
      float *db, *dc;
      ASSERT_EQ(cudaMalloc(&da, a.size() * 2), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&db, b.size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dc, m * n * 4), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      const float alpha = 1.0f, beta = 0.0f;
      ASSERT_EQ(
          cublasGemmEx(handle, ta, tb, m, n, k, &alpha, da, CUDA_R_16BF, lda, db, CUDA_R_32F, ldb,
                       &beta, dc, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          CUBLAS_STATUS_SUCCESS);
      std::vector<float> c(static_cast<size_t>(m * n));
      ASSERT_EQ(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double want = 0;
          for (int p = 0; p < k; ++p) {
            const float av = FromBf16(a[ta == CUBLAS_OP_N ? i + p * lda : p + i * lda]);
            const float bv = b[tb == CUBLAS_OP_N ? p + j * ldb : j + p * ldb];
            want += double{av} * bv;
          }
          EXPECT_NEAR(c[i + j * m], want, 1e-5) << "ta " << ta << " tb " << tb;
        }
      }
      // lda smaller than op(A)'s rows is refused before anything runs.
      EXPECT_EQ(
          cublasGemmEx(handle, ta, tb, m, n, k, &alpha, da, CUDA_R_16BF, 1, db, CUDA_R_32F, ldb,
                       &beta, dc, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          CUBLAS_STATUS_INVALID_VALUE);
      cudaFree(da);
      cudaFree(db);
      cudaFree(dc);
    }
  }
  cublasDestroy(handle);
}

// Thread t reads what thread t + 1 wrote, with the barrier left out: a race on a GPU.
__global__ void MissingBarrierKernel(int* out) {
  AwaitPriorGrids();
  __shared__ int v[64];
  const int t = static_cast<int>(threadIdx.x);
  v[t] = t + 1;
  // __syncthreads() belongs here.
  out[t] = t + 1 < 64 ? v[t + 1] : 0;
}

// Run in two thread orders, a missing barrier gives two different answers: CI runs the kernel
// tests in the default order, and STRATA_CUDA_EMU_SCHEDULE=reverse / shuffle repeat them.
TEST(CudaEmuTest, ThreadOrdersExposeAMissingBarrier) {
  int* d;
  ASSERT_EQ(cudaMalloc(&d, 64 * 4), cudaSuccess);
  auto run = [&](const char* schedule) {
    strata_emu::SetScheduleForTesting(schedule);
    LaunchKernel(MissingBarrierKernel, 1, 64, 0, nullptr, d);
    std::vector<int> out(64);
    EXPECT_EQ(cudaMemcpy(out.data(), d, 64 * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    strata_emu::SetScheduleForTesting(nullptr);
    return out;
  };
  const std::vector<int> forward = run("forward"), reverse = run("reverse");
  EXPECT_NE(forward, reverse);
  EXPECT_EQ(reverse[0], 2);  // every writer ran before its reader
  cudaFree(d);
}

}  // namespace
