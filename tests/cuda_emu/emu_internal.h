// Internal interfaces between the emulator's parts (tests/cuda_emu): the block executor, the
// runtime (memory, streams, graphs) and cuBLAS.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

namespace strata_emu {

// Runs every block of a launch now, on the calling host thread (block_executor.cc).
void RunGrid(const void* func, const LaunchConfig& config, void (*invoke)(void*), void* args);

// Enqueues `op` on `stream`: recorded when the stream captures a graph, otherwise run when the
// host next synchronizes with the stream (runtime.cc). Returns the error a capture rule raised.
cudaError_t Enqueue(cudaStream_t stream, std::function<void()> op);

// True when [ptr, ptr + bytes) lies inside one cudaMalloc allocation.
bool IsDeviceRange(const void* ptr, size_t bytes);

// Overrides STRATA_CUDA_EMU_SCHEDULE for launches run on this host thread ("forward",
// "reverse", "shuffle[:seed]"; nullptr: back to the environment's).
void SetScheduleForTesting(const char* schedule);

// Aborts with a diagnostic (an illegal access on a GPU kills the context the same way).
[[noreturn]] void DeviceFault(const char* what);

}  // namespace strata_emu
