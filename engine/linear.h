// A linear layer's weight as the model uses it: y[m, out] = x[m, in] · Wᵀ.
//
// Weights stay where the checkpoint put them when the format is usable directly (bf16 and f32
// point into the memory-mapped file, MXFP4 experts stay packed); other float formats are
// widened to f32 once at load. `--quantization` may turn them into MXFP4 or int8 at load
// (engine/weight_quantize.h). The view never owns the mapped bytes: the Checkpoint must
// outlive the model.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "engine/checkpoint.h"
#include "kernels/cpu/matmul.h"

namespace strata::engine {

enum class WeightFormat { kF32, kBf16, kMxfp4, kInt8 };

struct Linear {
  WeightFormat format = WeightFormat::kF32;
  int64_t out_features = 0;
  int64_t in_features = 0;
  const void* data = nullptr;  // f32 / bf16 [out, in], MXFP4 packed [out, in/2], int8 [out, in]
  const uint8_t* scales = nullptr;  // MXFP4: E8M0 [out, in/32]; int8: bf16 bits [out, in/32]
  AlignedBuffer owned;              // set when the checkpoint's dtype had to be converted

  bool empty() const { return data == nullptr; }
  int64_t data_bytes() const;   // the bytes `data` points to
  int64_t scale_bytes() const;  // `scales` (MXFP4, int8), else 0
  int64_t num_bytes() const { return data_bytes() + scale_bytes(); }
};

// The kernels' name for a format (the same four).
kernels::cpu::WeightFormat KernelFormat(WeightFormat format);

// The kernels' view of the weight (no copy), for kernels beyond LinearForward (fused GLU,
// grouped experts).
kernels::cpu::MatmulWeights KernelWeights(const Linear& w);

// y[m, out] = x[m, in] · Wᵀ (overwrites y).
void LinearForward(const Linear& w, const float* x, int64_t m, float* y);

// Several layers over the same m rows in one kernel call (one fork/join; an x shared by several
// is packed once), each y exactly as LinearForward gives it: a layer's projections of its input.
struct LinearProduct {
  const Linear* w = nullptr;
  const float* x = nullptr;
  float* y = nullptr;
};
void LinearForwardAll(absl::Span<const LinearProduct> products, int64_t m);

// Loads `name` with shape [out, in] (bf16/f32 used in place; f16/f64 widened; int8 codes used in
// place with their bf16 scales from `<name>_scale` [out, in/32], as `strata quantize
// --quantization int8` writes them).
absl::StatusOr<Linear> LoadLinear(const Checkpoint& ckpt, const std::string& name, int64_t out,
                                  int64_t in);
// The same for a tensor stored with another shape of out × in elements, read as [out, in]
// row-major (a convolution [out, c, kh, kw] as [out, c·kh·kw]).
absl::StatusOr<Linear> LoadLinear(const Checkpoint& ckpt, const std::string& name,
                                  const Shape& shape, int64_t out, int64_t in);
// Loads an MXFP4 weight from `<base>.weight_packed` [out, in/2] and `<base>.weight_scale`
// [out, in/32].
absl::StatusOr<Linear> LoadLinearMxfp4(const Checkpoint& ckpt, const std::string& base, int64_t out,
                                       int64_t in);

// Loads a small float tensor (norm weights, biases, conv weights) of exactly `count`
// elements, any float dtype, as f32. `shape` is the expected on-disk shape.
absl::StatusOr<std::vector<float>> LoadVector(const Checkpoint& ckpt, const std::string& name,
                                              const Shape& shape);

}  // namespace strata::engine
