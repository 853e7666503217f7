// Test helper shared by the KDA GPU tests (kda_test.cc, kda_chunk_test.cc): the kernels'
// input struct from the tests' device arrays.
#pragma once

#include <cstdint>

#include "kernels/cuda/kda_decode.h"
#include "kernels/cuda/testing.h"

namespace strata::kernels::cuda::testing {

inline KdaDecodeInputs KdaDeviceInputs(const DeviceArray<float>& qkv, const DeviceArray<float>& f,
                                       const DeviceArray<float>& b, const DeviceArray<float>& g,
                                       const DeviceArray<float>& conv_w,
                                       const DeviceArray<float>& a_log,
                                       const DeviceArray<float>& dt_bias,
                                       const DeviceArray<float>& o_norm_w,
                                       const DeviceArray<int32_t>& slots) {
  KdaDecodeInputs in;
  in.qkv_raw = qkv.get();
  in.f = f.get();
  in.b_raw = b.get();
  in.g_raw = g.get();
  in.conv_w = conv_w.get();
  in.a_log = a_log.get();
  in.dt_bias = dt_bias.get();
  in.o_norm_w = o_norm_w.get();
  in.slots = slots.get();
  return in;
}

}  // namespace strata::kernels::cuda::testing
