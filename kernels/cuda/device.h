// CUDA device discovery shared by the CUDA kernels' tests and the engine.
#pragma once

#include <string>

namespace strata::kernels::cuda {

// Number of visible CUDA devices; 0 when there is no GPU or no driver (never fails).
int VisibleDeviceCount();
// "NVIDIA H200 (sm_90, 139 GiB)" for device `index`, or the error text.
std::string DescribeDevice(int index);
// NCCL's version as an integer (e.g. 22809); works without a GPU.
int NcclVersion();

}  // namespace strata::kernels::cuda
