// The emulator's runtime API: device memory (host allocations with bounds checks on every
// copy), streams whose work runs when the host synchronizes with them (so a missing
// synchronization shows up as stale data, as on a GPU), graph capture and replay with CUDA's
// capture rules, events, launch validation and per-thread last errors.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tests/cuda_emu/emu_internal.h"

struct CUstream_st {
  unsigned int flags = 0;
  int device = 0;                             // the device current when it was created
  std::mutex run_mu;                          // one flush at a time
  std::deque<std::function<void()>> pending;  // guarded by Runtime::mu
  bool capturing = false;
  bool capture_invalid = false;
  cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
  std::thread::id capture_thread;
  std::vector<std::function<void()>> captured;
};
struct CUgraph_st {
  std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> ops;
};
struct CUevent_st {
  CUstream_st* stream = nullptr;
  bool done = false;
  std::chrono::steady_clock::time_point time;
};

namespace strata_emu {
namespace {

constexpr size_t kDefaultSmemBytes = 48 << 10;
constexpr size_t kMaxSmemOptinBytes = 232448;  // sm_90
constexpr size_t kPoisonLimitBytes = size_t{256} << 20;

struct Allocation {
  size_t bytes;
  bool device;  // false: page-locked host memory (cudaMallocHost)
  int device_id;
};

struct Runtime {
  std::mutex mu;
  std::map<uintptr_t, Allocation> allocations;
  std::vector<size_t> used_bytes;
  std::set<CUstream_st*> streams;
  std::unordered_map<const void*, int> max_dynamic_smem;
  CUstream_st legacy;
  int device_count = 8;  // an 8-GPU node: the ranks of a group each get their own
  size_t memory_bytes = size_t{4} << 30;
  bool eager = false;  // STRATA_CUDA_EMU_EAGER=1: run work at once (to tell a missing sync)
};

Runtime& R() {
  static Runtime* runtime = [] {
    auto* r = new Runtime();
    if (const char* env = std::getenv("STRATA_CUDA_EMU_DEVICES")) {
      r->device_count = std::max(0, std::atoi(env));
    }
    if (const char* env = std::getenv("STRATA_CUDA_EMU_MEMORY_MIB")) {
      r->memory_bytes = static_cast<size_t>(std::max(1L, std::atol(env))) << 20;
    }
    if (const char* env = std::getenv("STRATA_CUDA_EMU_EAGER")) r->eager = env[0] == '1';
    r->used_bytes.assign(static_cast<size_t>(r->device_count), 0);
    return r;
  }();
  return *runtime;
}

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local bool t_in_host_function = false;  // cudaLaunchHostFunc's function is running

// CUDA forbids CUDA calls from a host function (they may deadlock): a fault here.
void CheckNotInHostFunction() {
  if (t_in_host_function) DeviceFault("a CUDA call inside a cudaLaunchHostFunc host function");
}

cudaError_t Fail(cudaError_t error, const std::string& why = "") {
  if (!why.empty()) std::fprintf(stderr, "strata cuda emulator: %s\n", why.c_str());
  t_last_error = error;
  return error;
}

CUstream_st* Resolve(cudaStream_t stream) { return stream == nullptr ? &R().legacy : stream; }
bool IsLegacy(const CUstream_st* s) { return s == &R().legacy; }
bool Blocking(const CUstream_st* s) { return (s->flags & cudaStreamNonBlocking) == 0; }

// The allocation holding `p` (mu held), or nullptr.
const Allocation* Find(const void* p, uintptr_t* base) {
  auto& allocs = R().allocations;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = allocs.upper_bound(addr);
  if (it == allocs.begin()) return nullptr;
  --it;
  if (addr >= it->first + std::max<size_t>(it->second.bytes, 1)) return nullptr;
  *base = it->first;
  return &it->second;
}

void Flush(CUstream_st* s) {
  CheckNotInHostFunction();
  std::lock_guard<std::mutex> run(s->run_mu);
  for (;;) {
    std::function<void()> op;
    {
      std::lock_guard<std::mutex> lock(R().mu);
      if (s->pending.empty()) return;
      op = std::move(s->pending.front());
      s->pending.pop_front();
    }
    op();
  }
}

// The current device's streams (device synchronisation, cudaFree): another device's work may
// wait for this thread's (a collective's host function), so it is not run here.
void FlushAll() {
  std::vector<CUstream_st*> all;
  {
    std::lock_guard<std::mutex> lock(R().mu);
    for (CUstream_st* s : R().streams) {
      if (s->device == t_device) all.push_back(s);
    }
  }
  for (CUstream_st* s : all) Flush(s);
  Flush(&R().legacy);
}

void FlushBlockingStreams() {
  std::vector<CUstream_st*> blocking;
  {
    std::lock_guard<std::mutex> lock(R().mu);
    for (CUstream_st* s : R().streams) {
      if (Blocking(s)) blocking.push_back(s);
    }
  }
  for (CUstream_st* s : blocking) Flush(s);
}

// CUDA's rule for "potentially unsafe" calls (allocation, synchronous copies, device sync)
// while a stream captures: refused in global mode, and in thread-local mode on the capturing
// thread; the capture is invalidated. Relaxed mode allows them.
cudaError_t CheckUnsafeCall(const char* call) {
  std::lock_guard<std::mutex> lock(R().mu);
  for (CUstream_st* s : R().streams) {
    if (!s->capturing || s->capture_mode == cudaStreamCaptureModeRelaxed) continue;
    if (s->capture_mode == cudaStreamCaptureModeThreadLocal &&
        s->capture_thread != std::this_thread::get_id()) {
      continue;
    }
    s->capture_invalid = true;
    return Fail(cudaErrorStreamCaptureUnsupported,
                std::string(call) + " while a stream captures a graph (not permitted)");
  }
  return cudaSuccess;
}

void Poison(void* p, size_t bytes) {
  if (bytes <= kPoisonLimitBytes) std::memset(p, 0xff, bytes);
}

enum class Where { kPageable, kPinned, kDevice };

// Classifies [p, p + bytes); a range that starts inside an allocation but runs past its end is
// an error (a GPU copy would fault or corrupt the neighbour).
cudaError_t Classify(const void* p, size_t bytes, const char* role, Where* where) {
  std::lock_guard<std::mutex> lock(R().mu);
  uintptr_t base = 0;
  const Allocation* a = Find(p, &base);
  if (a == nullptr) {
    *where = Where::kPageable;
    return cudaSuccess;
  }
  if (reinterpret_cast<uintptr_t>(p) + bytes > base + a->bytes) {
    return Fail(cudaErrorInvalidValue,
                std::string("copy ") + role + " range of " + std::to_string(bytes) +
                    " bytes runs " +
                    std::to_string(reinterpret_cast<uintptr_t>(p) + bytes - base - a->bytes) +
                    " bytes past the end of its " + std::to_string(a->bytes) + "-byte allocation");
  }
  *where = a->device ? Where::kDevice : Where::kPinned;
  return cudaSuccess;
}

cudaError_t CheckKind(cudaMemcpyKind kind, Where dst, Where src) {
  const bool dst_dev = dst == Where::kDevice, src_dev = src == Where::kDevice;
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      ok = dst_dev && !src_dev;
      break;
    case cudaMemcpyDeviceToHost:
      ok = !dst_dev && src_dev;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = dst_dev && src_dev;
      break;
    case cudaMemcpyHostToHost:
      ok = !dst_dev && !src_dev;
      break;
    case cudaMemcpyDefault:
      break;
  }
  if (!ok) {
    return Fail(cudaErrorInvalidValue, "cudaMemcpy kind " + std::to_string(static_cast<int>(kind)) +
                                           " does not match the pointers (dst " +
                                           (dst_dev ? "device" : "host") + ", src " +
                                           (src_dev ? "device" : "host") + ")");
  }
  return cudaSuccess;
}

bool IsCapturing(CUstream_st* s) {
  std::lock_guard<std::mutex> lock(R().mu);
  return s->capturing;
}

}  // namespace

bool IsDeviceRange(const void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(R().mu);
  uintptr_t base = 0;
  const Allocation* a = Find(ptr, &base);
  return a != nullptr && a->device && reinterpret_cast<uintptr_t>(ptr) + bytes <= base + a->bytes;
}

void DeviceFault(const char* what) {
  std::fprintf(stderr, "strata cuda emulator: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

cudaError_t Enqueue(cudaStream_t stream, std::function<void()> op) {
  CheckNotInHostFunction();
  CUstream_st* s = Resolve(stream);
  {
    std::lock_guard<std::mutex> lock(R().mu);
    if (s->capturing) {
      if (s->capture_invalid) return Fail(cudaErrorStreamCaptureInvalidated);
      s->captured.push_back(std::move(op));
      return cudaSuccess;
    }
    if (IsLegacy(s)) {
      // The legacy stream waits for every blocking stream: not while one of them captures.
      for (CUstream_st* other : R().streams) {
        if (other->capturing && Blocking(other)) {
          other->capture_invalid = true;
          return Fail(cudaErrorStreamCaptureImplicit,
                      "work on the legacy default stream while a blocking stream captures");
        }
      }
    }
  }
  if (IsLegacy(s)) {
    FlushBlockingStreams();
  } else if (Blocking(s)) {
    Flush(&R().legacy);
  }
  {
    std::lock_guard<std::mutex> lock(R().mu);
    s->pending.push_back(std::move(op));
  }
  if (R().eager) Flush(s);
  return cudaSuccess;
}

void LaunchErased(const void* func, const LaunchConfig& config, void* args,
                  void (*invoke)(void* args), void (*destroy)(void* args)) {
  std::shared_ptr<void> bound(args, destroy);
  const dim3 g = config.grid, b = config.block;
  const uint64_t threads = uint64_t{b.x} * b.y * b.z;
  if (g.x == 0 || g.y == 0 || g.z == 0 || threads == 0 || threads > 1024 || b.z > 64 ||
      g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
    Fail(cudaErrorInvalidConfiguration,
         "invalid launch configuration: grid (" + std::to_string(g.x) + "," + std::to_string(g.y) +
             "," + std::to_string(g.z) + "), block (" + std::to_string(b.x) + "," +
             std::to_string(b.y) + "," + std::to_string(b.z) + ")");
    return;
  }
  size_t smem_limit = kDefaultSmemBytes;
  {
    std::lock_guard<std::mutex> lock(R().mu);
    auto it = R().max_dynamic_smem.find(func);
    if (it != R().max_dynamic_smem.end()) smem_limit = static_cast<size_t>(it->second);
  }
  if (config.dynamic_smem_bytes > smem_limit) {
    Fail(cudaErrorInvalidValue,
         "launch asks for " + std::to_string(config.dynamic_smem_bytes) +
             " bytes of dynamic shared memory; the kernel's limit is " +
             std::to_string(smem_limit) +
             " (raise it with cudaFuncSetAttribute(MaxDynamicSharedMemorySize))");
    return;
  }
  const cudaError_t queued = Enqueue(
      config.stream, [func, config, invoke, bound] { RunGrid(func, config, invoke, bound.get()); });
  if (queued != cudaSuccess) t_last_error = queued;
}

}  // namespace strata_emu

using strata_emu::Fail;
using strata_emu::R;

// ---- devices ----------------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count) {
  *count = R().device_count;
  if (R().device_count == 0) return Fail(cudaErrorNoDevice);
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= R().device_count) return Fail(cudaErrorInvalidDevice);
  strata_emu::t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = strata_emu::t_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= R().device_count) return Fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "Strata CUDA emulator (sm_90 rules, on the CPU)");
  prop->totalGlobalMem = R().memory_bytes;
  prop->sharedMemPerBlock = strata_emu::kDefaultSmemBytes;
  prop->sharedMemPerBlockOptin = strata_emu::kMaxSmemOptinBytes;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024, prop->maxThreadsDim[1] = 1024, prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff, prop->maxGridSize[1] = 65535, prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->l2CacheSize = 50 << 20;
  prop->memoryBusWidth = 6144;
  prop->clockRate = 1980000;
  prop->memoryClockRate = 2619000;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp prop;
  if (const cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) return e;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = prop.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(prop.sharedMemPerBlock);
      break;
    case cudaDevAttrWarpSize:
      *value = 32;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = prop.multiProcessorCount;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = prop.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = prop.minor;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(prop.sharedMemPerBlockOptin);
      break;
    default:
      return Fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t e = strata_emu::CheckUnsafeCall("cudaDeviceSynchronize");
      e != cudaSuccess) {
    return e;
  }
  strata_emu::FlushAll();
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::mutex> lock(R().mu);
  *total_bytes = R().memory_bytes;
  *free_bytes = R().memory_bytes - R().used_bytes[static_cast<size_t>(strata_emu::t_device)];
  return cudaSuccess;
}

// ---- errors -----------------------------------------------------------------------------------
cudaError_t cudaGetLastError() {
  const cudaError_t e = strata_emu::t_last_error;
  strata_emu::t_last_error = cudaSuccess;
  return e;
}
const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError:
      return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched:
      return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureImplicit:
      return "cudaErrorStreamCaptureImplicit";
    case cudaErrorUnknown:
      return "cudaErrorUnknown";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    default:
      return cudaGetErrorName(error);
  }
}

// ---- memory -----------------------------------------------------------------------------------
namespace {
cudaError_t Allocate(void** ptr, size_t bytes, bool device, const char* call) {
  if (ptr == nullptr) return Fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (const cudaError_t e = strata_emu::CheckUnsafeCall(call); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  const size_t rounded = (bytes + 255) / 256 * 256;
  {
    std::lock_guard<std::mutex> lock(R().mu);
    size_t& used = R().used_bytes[static_cast<size_t>(strata_emu::t_device)];
    if (device && used + rounded > R().memory_bytes) {
      return Fail(cudaErrorMemoryAllocation,
                  std::string(call) + " of " + std::to_string(bytes) +
                      " bytes: " + std::to_string(R().memory_bytes - used) +
                      " bytes free (STRATA_CUDA_EMU_MEMORY_MIB sets the emulated size)");
    }
    if (device) used += rounded;
  }
  // Exactly `bytes` (256-byte aligned, as cudaMalloc): under AddressSanitizer a kernel reading
  // one element past its buffer faults even where cudaMalloc's rounding would hide it.
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) return Fail(cudaErrorMemoryAllocation);
  if (device) strata_emu::Poison(p, bytes);  // fresh device memory is not zero on a GPU
  std::lock_guard<std::mutex> lock(R().mu);
  R().allocations[reinterpret_cast<uintptr_t>(p)] =
      strata_emu::Allocation{bytes, device, strata_emu::t_device};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t Release(void* ptr, bool device) {
  if (ptr == nullptr) return cudaSuccess;
  strata_emu::FlushAll();  // cudaFree synchronizes the device
  std::lock_guard<std::mutex> lock(R().mu);
  auto it = R().allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == R().allocations.end() || it->second.device != device) {
    return Fail(cudaErrorInvalidValue, device ? "cudaFree of a pointer cudaMalloc did not return"
                                              : "cudaFreeHost of a pointer cudaMallocHost did "
                                                "not return");
  }
  if (device) {
    R().used_bytes[static_cast<size_t>(it->second.device_id)] -=
        (it->second.bytes + 255) / 256 * 256;
  }
  R().allocations.erase(it);
  std::free(ptr);
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  return Allocate(ptr, bytes, true, "cudaMalloc");
}
cudaError_t cudaFree(void* ptr) { return Release(ptr, true); }
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  return Allocate(ptr, bytes, false, "cudaMallocHost");
}
cudaError_t cudaFreeHost(void* ptr) { return Release(ptr, false); }

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  using strata_emu::Where;
  if (bytes == 0) return cudaSuccess;
  Where dst_where, src_where;
  if (cudaError_t e = strata_emu::Classify(dst, bytes, "destination", &dst_where);
      e != cudaSuccess) {
    return e;
  }
  if (cudaError_t e = strata_emu::Classify(src, bytes, "source", &src_where); e != cudaSuccess) {
    return e;
  }
  if (cudaError_t e = strata_emu::CheckKind(kind, dst_where, src_where); e != cudaSuccess) return e;
  CUstream_st* s = strata_emu::Resolve(stream);
  const bool capturing = strata_emu::IsCapturing(s);
  if (dst_where != Where::kDevice && src_where != Where::kDevice) {
    // Host to host: synchronous with respect to the host.
    if (capturing) {
      return Fail(cudaErrorStreamCaptureUnsupported, "host-to-host cudaMemcpyAsync in a capture");
    }
    strata_emu::Flush(s);
    std::memmove(dst, src, bytes);
    return cudaSuccess;
  }
  if (src_where == Where::kPageable) {
    if (capturing) {
      return Fail(cudaErrorStreamCaptureUnsupported,
                  "cudaMemcpyAsync from pageable host memory in a graph capture (use "
                  "cudaMallocHost memory)");
    }
    // Staged: the caller may reuse the source as soon as the call returns.
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
    return strata_emu::Enqueue(stream,
                               [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  }
  if (dst_where == Where::kPageable) {
    if (capturing) {
      return Fail(cudaErrorStreamCaptureUnsupported,
                  "cudaMemcpyAsync to pageable host memory in a graph capture (use "
                  "cudaMallocHost memory)");
    }
    // Device to pageable memory returns only once the copy is done.
    if (cudaError_t e =
            strata_emu::Enqueue(stream, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
        e != cudaSuccess) {
      return e;
    }
    strata_emu::Flush(s);
    return cudaSuccess;
  }
  return strata_emu::Enqueue(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t e = strata_emu::CheckUnsafeCall("cudaMemcpy"); e != cudaSuccess) return e;
  if (const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr); e != cudaSuccess) {
    return e;
  }
  strata_emu::Flush(&R().legacy);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!strata_emu::IsDeviceRange(dst, bytes)) {
    return Fail(cudaErrorInvalidValue,
                "cudaMemset of " + std::to_string(bytes) + " bytes outside any device allocation");
  }
  return strata_emu::Enqueue(stream, [dst, value, bytes] { std::memset(dst, value, bytes); });
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  if (width > dpitch || width > spitch) {
    return Fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync: width " + std::to_string(width) +
                                           " exceeds a pitch (" + std::to_string(dpitch) + ", " +
                                           std::to_string(spitch) + ")");
  }
  for (size_t row = 0; row < height; ++row) {
    if (const cudaError_t e =
            cudaMemcpyAsync(static_cast<char*>(dst) + row * dpitch,
                            static_cast<const char*>(src) + row * spitch, width, kind, stream);
        e != cudaSuccess) {
      return e;
    }
  }
  return cudaSuccess;
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  if (const cudaError_t e = strata_emu::CheckUnsafeCall("cudaMemset"); e != cudaSuccess) return e;
  if (const cudaError_t e = cudaMemsetAsync(dst, value, bytes, nullptr); e != cudaSuccess) return e;
  strata_emu::Flush(&R().legacy);
  return cudaSuccess;
}

// ---- streams and graphs -----------------------------------------------------------------------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  auto* s = new CUstream_st();
  s->flags = flags;
  s->device = strata_emu::t_device;
  std::lock_guard<std::mutex> lock(R().mu);
  R().streams.insert(s);
  *stream = s;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  strata_emu::Flush(stream);  // work already queued still completes
  std::lock_guard<std::mutex> lock(R().mu);
  if (R().streams.erase(stream) == 0) return Fail(cudaErrorInvalidResourceHandle);
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUstream_st* s = strata_emu::Resolve(stream);
  {
    std::lock_guard<std::mutex> lock(R().mu);
    if (s->capturing) {
      s->capture_invalid = true;
      return Fail(cudaErrorStreamCaptureUnsupported,
                  "cudaStreamSynchronize on a stream that is capturing a graph");
    }
  }
  strata_emu::Flush(s);
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  CUstream_st* s = strata_emu::Resolve(stream);
  std::lock_guard<std::mutex> lock(R().mu);
  *status = !s->capturing        ? cudaStreamCaptureStatusNone
            : s->capture_invalid ? cudaStreamCaptureStatusInvalidated
                                 : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return Fail(cudaErrorInvalidValue, "cudaLaunchHostFunc without a function");
  return strata_emu::Enqueue(stream, [fn, user_data] {
    strata_emu::t_in_host_function = true;
    fn(user_data);
    strata_emu::t_in_host_function = false;
  });
}
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (stream == nullptr) {
    return Fail(cudaErrorStreamCaptureUnsupported, "the legacy default stream cannot capture");
  }
  strata_emu::Flush(stream);
  std::lock_guard<std::mutex> lock(R().mu);
  if (stream->capturing) return Fail(cudaErrorInvalidValue, "stream is already capturing");
  stream->capturing = true;
  stream->capture_invalid = false;
  stream->capture_mode = mode;
  stream->capture_thread = std::this_thread::get_id();
  stream->captured.clear();
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  std::lock_guard<std::mutex> lock(R().mu);
  *graph = nullptr;
  if (stream == nullptr || !stream->capturing) {
    return Fail(cudaErrorStreamCaptureUnmatched, "cudaStreamEndCapture without a capture");
  }
  stream->capturing = false;
  if (stream->capture_invalid) {
    stream->captured.clear();
    return Fail(cudaErrorStreamCaptureInvalidated);
  }
  auto* g = new CUgraph_st();
  g->ops = std::move(stream->captured);
  stream->captured.clear();
  *graph = g;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (graph == nullptr) return Fail(cudaErrorInvalidValue);
  auto* e = new CUgraphExec_st();
  e->ops = graph->ops;
  *exec = e;
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return Fail(cudaErrorInvalidValue);
  for (const auto& op : exec->ops) {
    if (const cudaError_t e = strata_emu::Enqueue(stream, op); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* num_nodes) {
  if (graph == nullptr || num_nodes == nullptr) return Fail(cudaErrorInvalidValue);
  if (nodes != nullptr) return Fail(cudaErrorNotSupported, "graph node handles are not emulated");
  *num_nodes = graph->ops.size();
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

// ---- events -----------------------------------------------------------------------------------
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  event->stream = strata_emu::Resolve(stream);
  event->done = false;
  return strata_emu::Enqueue(stream, [event] {
    event->time = std::chrono::steady_clock::now();
    event->done = true;
  });
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  if (event->stream != nullptr) strata_emu::Flush(event->stream);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  if (flags != 0) return Fail(cudaErrorInvalidValue, "cudaStreamWaitEvent flags must be 0");
  CUstream_st* recorded = event->stream;
  // Never recorded (nothing to wait for), or recorded on this stream (already in order).
  if (recorded == nullptr || recorded == strata_emu::Resolve(stream)) return cudaSuccess;
  // Streams run when synchronised: flushing the recorded stream first runs its work up to the
  // event (and what came after it: more order than CUDA gives, never less).
  return strata_emu::Enqueue(stream, [recorded] { strata_emu::Flush(recorded); });
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  if (!start->done || !end->done) return Fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttributeImpl(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || static_cast<size_t>(value) > strata_emu::kMaxSmemOptinBytes) {
    return Fail(cudaErrorInvalidValue,
                "MaxDynamicSharedMemorySize " + std::to_string(value) + " exceeds the " +
                    std::to_string(strata_emu::kMaxSmemOptinBytes) + "-byte limit of sm_90");
  }
  std::lock_guard<std::mutex> lock(R().mu);
  R().max_dynamic_smem[func] = value;
  return cudaSuccess;
}
