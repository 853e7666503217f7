#include "engine/linear.h"

#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/int8_quantize.h"
#include "core/status.h"
#include "kernels/cpu/matmul.h"

namespace strata::engine {

int64_t Linear::data_bytes() const {
  switch (format) {
    case WeightFormat::kF32:
      return out_features * in_features * 4;
    case WeightFormat::kBf16:
      return out_features * in_features * 2;
    case WeightFormat::kMxfp4:
      return out_features * (in_features / 2);
    case WeightFormat::kInt8:
      return out_features * in_features;
  }
  return 0;
}

int64_t Linear::scale_bytes() const {
  switch (format) {
    case WeightFormat::kMxfp4:
      return out_features * (in_features / kMxfp4BlockSize);
    case WeightFormat::kInt8:
      return 2 * out_features * (in_features / kInt8GroupSize);
    default:
      return 0;
  }
}

kernels::cpu::WeightFormat KernelFormat(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return kernels::cpu::WeightFormat::kF32;
    case WeightFormat::kBf16:
      return kernels::cpu::WeightFormat::kBf16;
    case WeightFormat::kMxfp4:
      return kernels::cpu::WeightFormat::kMxfp4;
    case WeightFormat::kInt8:
      return kernels::cpu::WeightFormat::kInt8;
  }
  return kernels::cpu::WeightFormat::kF32;
}

kernels::cpu::MatmulWeights KernelWeights(const Linear& w) {
  return {KernelFormat(w.format), w.out_features, w.in_features, w.data, w.scales};
}

void LinearForward(const Linear& w, const float* x, int64_t m, float* y) {
  CHECK(!w.empty());
  kernels::cpu::Matmul(KernelWeights(w), x, m, y);
}

void LinearForwardAll(absl::Span<const LinearProduct> products, int64_t m) {
  constexpr size_t kMaxProducts = 8;
  CHECK_LE(products.size(), kMaxProducts);
  kernels::cpu::MatmulProduct kernel_products[kMaxProducts];
  for (size_t p = 0; p < products.size(); ++p) {
    CHECK(!products[p].w->empty());
    kernel_products[p] = {KernelWeights(*products[p].w), products[p].x, products[p].y};
  }
  kernels::cpu::MatmulProducts(kernel_products, static_cast<int64_t>(products.size()), m);
}

absl::StatusOr<Linear> LoadLinear(const Checkpoint& ckpt, const std::string& name, int64_t out,
                                  int64_t in) {
  return LoadLinear(ckpt, name, Shape{out, in}, out, in);
}

absl::StatusOr<Linear> LoadLinear(const Checkpoint& ckpt, const std::string& name,
                                  const Shape& shape, int64_t out, int64_t in) {
  CHECK_EQ(NumElements(shape), out * in) << name;
  ASSIGN_OR_RETURN(
      const TensorInfo* t,
      ckpt.Get(name, shape, {DType::kBF16, DType::kF32, DType::kF16, DType::kF64, DType::kI8}));
  Linear w;
  w.out_features = out;
  w.in_features = in;
  if (t->dtype == DType::kI8) {  // int8 groups as `strata quantize --quantization int8` writes
    if (in % kInt8GroupSize != 0 || !absl::EndsWith(name, ".weight")) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "' in ", t->file, ": int8 weights need a name ending in ",
                       "'.weight' and an input width that is a multiple of 32, found ", in));
    }
    const std::string scale_name = name + "_scale";  // "<module>.weight_scale"
    ASSIGN_OR_RETURN(const TensorInfo* scales,
                     ckpt.Get(scale_name, Shape{out, in / kInt8GroupSize}, {DType::kBF16}));
    w.format = WeightFormat::kInt8;
    w.data = t->data;
    w.scales = scales->data;
  } else if (t->dtype == DType::kBF16) {
    w.format = WeightFormat::kBf16;
    w.data = t->data;
  } else if (t->dtype == DType::kF32 && reinterpret_cast<uintptr_t>(t->data) % 4 == 0) {
    w.format = WeightFormat::kF32;
    w.data = t->data;
  } else {
    w.format = WeightFormat::kF32;
    w.owned = AlignedBuffer(static_cast<size_t>(out * in) * sizeof(float));
    if (t->dtype == DType::kF32) {
      std::memcpy(w.owned.data(), t->data, t->num_bytes);
    } else {
      ConvertToF32(t->dtype, t->data, static_cast<size_t>(out * in), w.owned.as<float>());
    }
    w.data = w.owned.data();
  }
  return w;
}

absl::StatusOr<Linear> LoadLinearMxfp4(const Checkpoint& ckpt, const std::string& base, int64_t out,
                                       int64_t in) {
  if (in % kMxfp4BlockSize != 0) {
    return absl::InvalidArgumentError(base + ": MXFP4 input width " + std::to_string(in) +
                                      " is not a multiple of 32");
  }
  ASSIGN_OR_RETURN(const TensorInfo* packed,
                   ckpt.Get(base + ".weight_packed", Shape{out, in / 2}, {DType::kU8}));
  ASSIGN_OR_RETURN(
      const TensorInfo* scales,
      ckpt.Get(base + ".weight_scale", Shape{out, in / kMxfp4BlockSize}, {DType::kU8}));
  Linear w;
  w.format = WeightFormat::kMxfp4;
  w.out_features = out;
  w.in_features = in;
  w.data = packed->data;
  w.scales = scales->data;
  return w;
}

absl::StatusOr<std::vector<float>> LoadVector(const Checkpoint& ckpt, const std::string& name,
                                              const Shape& shape) {
  ASSIGN_OR_RETURN(const TensorInfo* t,
                   ckpt.Get(name, shape, {DType::kBF16, DType::kF32, DType::kF16, DType::kF64}));
  std::vector<float> values(static_cast<size_t>(NumElements(shape)));
  ConvertToF32(t->dtype, t->data, values.size(), values.data());
  return values;
}

}  // namespace strata::engine
