// Hopper's warpgroup MMA (wgmma, sm_90a): which device runs it, and the choice between a kernel's
// wgmma and mma.sync variants when the caller leaves it open.
#pragma once

namespace strata::kernels::cuda {

// Whether the current device runs wgmma (sm_90: H100, H200; the emulator's devices).
bool WgmmaAvailable();

// Whether kernels with a wgmma variant (MLA decode, the grouped GEMM's large tile) use it when
// the caller leaves the choice open: STRATA_CUDA_WGMMA=1 / 0 (read once). Unset: yes on the
// emulator, where every test then runs them, and no on a GPU until a GPU run has verified them
// (docs/decisions.md D-19). Never on a device without wgmma.
bool WgmmaChosen();

}  // namespace strata::kernels::cuda
