// Kernel launches and dynamic shared memory, spelled once so the same kernels also build as
// host C++ under Strata's CUDA emulator (tests/cuda_emu, STRATA_CUDA_EMU) and run on a CPU in
// CI. Internal; include from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

#if defined(STRATA_CUDA_EMU)
// The emulator hands each block its dynamic shared memory (16-byte aligned).
#define STRATA_DYNAMIC_SHARED(name) unsigned char* const name = ::strata_emu::DynamicShared()
#else
#define STRATA_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace strata::kernels::cuda::internal {

// The current device's multiprocessor count, for sizing grids (132, an H100/H200's, when the
// query fails).
inline int NumSms() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      sms <= 0) {
    cudaGetLastError();
    return 132;
  }
  return sms;
}

// Programmatic dependent launch (PDL, sm_90): every kernel is launched with
// cudaLaunchAttributeProgrammaticStreamSerialization, so on a GPU its CTAs may be scheduled while
// the previous kernel on the stream (or graph edge) still runs — the launch latency between the
// many small kernels of a decode step hides behind their neighbours. The contract that makes it
// safe: EVERY kernel's first statement is AwaitPriorGrids(), in every thread, before any load or
// store. griddepcontrol.wait returns once the prior grids have completed and their memory is
// visible, so each kernel still sees everything earlier kernels wrote and nothing it writes can
// race their reads. It then triggers its own dependents at once (launch_dependents): they may
// occupy free slots early but wait the same way. Kernels after cuBLAS calls, copies or host
// functions serialise as before. The emulator faults on a thread of such a launch that exits
// without the wait (tests/cuda_emu). STRATA_CUDA_PDL=0 launches without the attribute (for
// timing the difference; the wait is then a no-op).
__device__ __forceinline__ void AwaitPriorGrids() {
#if defined(STRATA_CUDA_EMU)
  ::strata_emu::GridDependencyWait();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Whether launches carry the PDL attribute (STRATA_CUDA_PDL, read once; default on).
inline bool ProgrammaticLaunch() {
  static const bool enabled = [] {
    const char* env = std::getenv("STRATA_CUDA_PDL");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return enabled;
}

// kernel<<<grid, block, dynamic_smem_bytes, stream>>>(args...) with programmatic dependent launch
// (above: the kernel must begin with AwaitPriorGrids()). Launch errors surface through
// cudaGetLastError() as with the triple-chevron form.
template <typename... Params, typename... Args>
void LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_smem_bytes,
                  cudaStream_t stream, Args&&... args) {
#if defined(STRATA_CUDA_EMU)
  ::strata_emu::Launch(
      kernel,
      ::strata_emu::LaunchConfig{grid, block, dynamic_smem_bytes, stream, ProgrammaticLaunch()},
      std::forward<Args>(args)...);
#else
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = ProgrammaticLaunch() ? 1 : 0;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = dynamic_smem_bytes;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  // Arguments convert to the parameter types here, as a <<<>>> call converts them.
  if (cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...) != cudaSuccess &&
      config.attrs[0].val.programmaticStreamSerializationAllowed != 0) {
    // Where the attribute itself is refused, launch without it; an error the attribute did not
    // cause repeats and stays for cudaGetLastError.
    cudaGetLastError();
    config.numAttrs = 0;
    cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
  }
#endif
}

}  // namespace strata::kernels::cuda::internal
