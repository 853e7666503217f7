// Strata's CUDA emulator: this header stands in for the toolkit's cuda_runtime.h when
// kernels/cuda and engine/cuda are compiled as host C++ (STRATA_CUDA_EMU, tests/cuda_emu). It
// declares the subset of the runtime API Strata uses and the device-side language: qualifiers,
// built-in variables, barriers, warp intrinsics and atomics. Kernels run on the CPU, one block at
// a time, each CUDA thread a fiber (block_executor.cc); see README.md for what is faithful and
// what is not.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#define STRATA_CUDA_EMU 1

// ---- language: qualifiers -------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// One block runs at a time per host thread, all of its CUDA threads as fibers of that host
// thread: a function-local static per host thread is exactly one block's shared memory.
#define __shared__ static thread_local
#define __constant__

// ---- vector types ---------------------------------------------------------------------------
struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}  // NOLINT: implicit as in CUDA
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned int x, y;
};
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint2 make_uint2(unsigned int x, unsigned int y) { return uint2{x, y}; }
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) {
  return uint4{x, y, z, w};
}

// ---- runtime API types ----------------------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorNotSupported = 801,
  cudaErrorNoDevice = 100,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorLaunchFailure = 719,
  cudaErrorUnknown = 999,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
inline constexpr unsigned int cudaStreamDefault = 0;
inline constexpr unsigned int cudaStreamNonBlocking = 1;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major;
  int minor;
  int multiProcessorCount;
  int l2CacheSize;
  int memoryBusWidth;
  int clockRate;
  int memoryClockRate;
};

struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
using cudaGraph_t = CUgraph_st*;
using cudaGraphExec_t = CUgraphExec_st*;
struct CUgraphNode_st;
using cudaGraphNode_t = CUgraphNode_st*;

// ---- runtime API ----------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);

cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);

cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
template <typename T>
cudaError_t cudaMallocHost(T** ptr, size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(ptr), bytes);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = nullptr);
// `height` rows of `width` bytes, rows `dpitch` / `spitch` bytes apart (one cudaMemcpyAsync per
// row here; the same rules per row).
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
// `fn(user_data)` in stream order (recorded in a capture as a host node). As in CUDA, a host
// function must not call the CUDA API: here such a call aborts with a device fault. It may
// block (a collective waiting for its peers); the host thread that synchronizes runs it.
using cudaHostFn_t = void (*)(void* user_data);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
// The number of captured operations (kernels, copies, memsets) in *num_nodes; node handles are
// not emulated (nodes must be null).
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* num_nodes);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
// Later work on `stream` runs after `event`'s stream has run up to (in the emulator: all of)
// what it had when the event was recorded. flags must be 0.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags = 0);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaFuncSetAttributeImpl(const void* func, cudaFuncAttribute attr, int value);
template <typename F>
cudaError_t cudaFuncSetAttribute(F* func, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttributeImpl(reinterpret_cast<const void*>(func), attr, value);
}

// ---- the emulator's launch path and device-side support -------------------------------------
namespace strata_emu {

// The CUDA thread a fiber is running (valid inside a kernel only).
struct ThreadState {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
ThreadState& CurrentThread();

// Runs `body` as a kernel: every block of `grid`, each thread of `block` a fiber calling
// body(). Enqueued on `stream` (or recorded when it captures); reports launch errors through
// cudaGetLastError like the runtime. `func` identifies the kernel for cudaFuncSetAttribute.
struct LaunchConfig {
  dim3 grid, block;
  size_t dynamic_smem_bytes;
  cudaStream_t stream;
  // Programmatic dependent launch (cudaLaunchAttributeProgrammaticStreamSerialization): the
  // kernel may start before the previous one on its stream ends, so every thread must call
  // GridDependencyWait before it touches memory; a thread that exits without it faults.
  bool programmatic = false;
};
void LaunchErased(const void* func, const LaunchConfig& config, void* args,
                  void (*invoke)(void* args), void (*destroy)(void* args));

template <typename... Params, typename... Args>
void Launch(void (*kernel)(Params...), const LaunchConfig& config, Args&&... args) {
  using Bound = std::tuple<void (*)(Params...), std::decay_t<Params>...>;
  // Arguments convert to the parameter types at the launch, as a kernel call does.
  auto* bound = new Bound(kernel, static_cast<std::decay_t<Params>>(std::forward<Args>(args))...);
  LaunchErased(
      reinterpret_cast<const void*>(kernel), config, bound,
      [](void* p) {
        auto& b = *static_cast<Bound*>(p);
        std::apply([](auto fn, auto... a) { fn(a...); }, b);
      },
      [](void* p) { delete static_cast<Bound*>(p); });
}

// Device-side primitives (block_executor.cc).
void SyncThreads();
void SyncWarp(unsigned int mask);
unsigned char* DynamicShared();
uint64_t ShuffleXor(unsigned int mask, uint64_t value, int lane_mask, int width);
uint64_t ShuffleIdx(unsigned int mask, uint64_t value, int src_lane, int width);
uint64_t ShuffleDown(unsigned int mask, uint64_t value, unsigned int delta, int width);
uint64_t ShuffleUp(unsigned int mask, uint64_t value, unsigned int delta, int width);
unsigned int MatchAny(unsigned int mask, uint64_t value);
unsigned int Ballot(unsigned int mask, bool predicate);
// griddepcontrol.wait / .launch_dependents (kernels/cuda/internal/launch.cuh): the emulator
// runs grids one after another, so the wait only records that the thread made it.
void GridDependencyWait();
// Tensor-core and async-copy PTX (kernels/cuda/internal/mma.cuh).
// cp.async of `cp_size` bytes of which the first `src_bytes` come from global memory, the rest
// zero-filled; performed when a later CpAsyncWait retires its group (not at the call).
void CpAsync(void* smem_dst, const void* gmem_src, int cp_size, int src_bytes);
void CpAsyncCommit();
void CpAsyncWait(int pending_groups);
void LdMatrixX4(uint32_t (&r)[4], const void* row_ptr, bool trans);
void MmaBf16M16N8K16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
uint32_t MulBf16x2(uint32_t a, uint32_t b);
// Hopper's asynchronous machinery (kernels/cuda/internal/hopper.cuh), PTX semantics:
// bar.sync with an id (1..15) over `thread_count` threads;
void NamedBarrierSync(int id, int thread_count);
// mbarrier objects in shared memory (init with the arrivals a phase expects, arrive, arrive
// with an expected transaction count, wait for the phase of a parity to complete);
void MbarrierInit(uint64_t* bar, int arrivals);
void MbarrierArrive(uint64_t* bar);
void MbarrierArriveExpectTx(uint64_t* bar, uint32_t tx_bytes);
void MbarrierWait(uint64_t* bar, int parity);
// cp.async.bulk global → shared completing `bytes` of transactions on `bar`: the destination is
// undefined (poisoned) from the issue until a wait sees the phase complete, when it is written;
void CpAsyncBulkToShared(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar);
// wgmma.mma_async m64nNk16 f32 += bf16 · bf16, A from registers (the warp's 16 rows in
// mma.m16n8k16's A layout), B from a shared-memory descriptor (no swizzle, K-major canonical
// layout, start address relative to the dynamic shared memory): the A registers, the
// accumulators d[N/2] and B are read, and d written, when wgmma.wait_group retires the op.
void WgmmaFence();
void WgmmaBf16(float* d, int n, const uint32_t* a, uint64_t desc_b, bool accumulate);
void WgmmaCommit();
void WgmmaWait(int pending_groups);

template <typename T>
uint64_t ToBits(T value) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}
template <typename T>
T FromBits(uint64_t bits) {
  T value;
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

}  // namespace strata_emu

// ---- device built-ins -----------------------------------------------------------------------
#define threadIdx (::strata_emu::CurrentThread().thread_idx)
#define blockIdx (::strata_emu::CurrentThread().block_idx)
#define blockDim (::strata_emu::CurrentThread().block_dim)
#define gridDim (::strata_emu::CurrentThread().grid_dim)
inline constexpr int warpSize = 32;

inline void __syncthreads() { strata_emu::SyncThreads(); }
inline void __syncwarp(unsigned int mask = 0xffffffffu) { strata_emu::SyncWarp(mask); }
inline void __threadfence() {}
inline void __threadfence_block() {}
// Cache-global load (L2, not L1): host memory is coherent, so a plain load.
template <typename T>
T __ldcg(const T* address) {
  return *address;
}

template <typename T>
T __shfl_xor_sync(unsigned int mask, T value, int lane_mask, int width = 32) {
  return strata_emu::FromBits<T>(
      strata_emu::ShuffleXor(mask, strata_emu::ToBits(value), lane_mask, width));
}
template <typename T>
T __shfl_sync(unsigned int mask, T value, int src_lane, int width = 32) {
  return strata_emu::FromBits<T>(
      strata_emu::ShuffleIdx(mask, strata_emu::ToBits(value), src_lane, width));
}
template <typename T>
T __shfl_down_sync(unsigned int mask, T value, unsigned int delta, int width = 32) {
  return strata_emu::FromBits<T>(
      strata_emu::ShuffleDown(mask, strata_emu::ToBits(value), delta, width));
}
template <typename T>
T __shfl_up_sync(unsigned int mask, T value, unsigned int delta, int width = 32) {
  return strata_emu::FromBits<T>(
      strata_emu::ShuffleUp(mask, strata_emu::ToBits(value), delta, width));
}
template <typename T>
unsigned int __match_any_sync(unsigned int mask, T value) {
  return strata_emu::MatchAny(mask, strata_emu::ToBits(value));
}
inline unsigned int __ballot_sync(unsigned int mask, int predicate) {
  return strata_emu::Ballot(mask, predicate != 0);
}

// Atomics: the fibers of a launch share one host thread, but launches on different host
// threads may run at once, so these are real atomics.
template <typename T>
T atomicAdd(T* address, T value) {
  if constexpr (std::is_floating_point_v<T>) {
    T old = __atomic_load_n(address, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(address, &old, old + value, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
    return old;
  } else {
    return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
  }
}

// ---- device math ----------------------------------------------------------------------------
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline float __uint_as_float(unsigned int x) { return strata_emu::FromBits<float>(x); }
inline unsigned int __float_as_uint(float x) {
  return static_cast<unsigned int>(strata_emu::ToBits(x));
}
inline float __expf(float x) { return std::exp(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline size_t __cvta_generic_to_shared(const void* p) { return reinterpret_cast<size_t>(p); }

// CUDA's global min/max overloads (integer pairs mix as the usual arithmetic conversions do).
template <typename A, typename B>
constexpr auto min(A a, B b) -> std::common_type_t<A, B> {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <typename A, typename B>
constexpr auto max(A a, B b) -> std::common_type_t<A, B> {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}
