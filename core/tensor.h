// Non-owning tensor views and aligned host buffers.
//
// A TensorView is (data pointer, dtype, shape, strides in elements). It never owns memory; the
// owner (a mapped checkpoint file, an AlignedBuffer, a cache pool) must outlive it. Row-major
// contiguous views are the common case: strides[i] = prod(shape[i+1:]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "core/check.h"
#include "core/dtype.h"

namespace strata {

using Shape = absl::InlinedVector<int64_t, 4>;

int64_t NumElements(const Shape& shape);
Shape ContiguousStrides(const Shape& shape);
std::string ShapeToString(const Shape& shape);  // "[2, 3, 4]"

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  Shape strides;  // in elements

  static TensorView Contiguous(void* data, DType dtype, Shape shape) {
    TensorView view{data, dtype, shape, ContiguousStrides(shape)};
    return view;
  }

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t dim(int i) const { return shape[i < 0 ? i + rank() : i]; }
  int64_t num_elements() const { return NumElements(shape); }
  size_t num_bytes() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype); }
  bool is_contiguous() const { return strides == ContiguousStrides(shape); }

  // Typed access; CHECKs that T matches the dtype's size class.
  template <typename T>
  T* data_as() const {
    CHECK_EQ(sizeof(T), DTypeSize(dtype)) << "dtype " << DTypeName(dtype);
    return static_cast<T*>(data);
  }

  // The sub-view at index i of the first dimension.
  TensorView Slice0(int64_t i) const {
    CHECK(rank() >= 1 && i >= 0 && i < shape[0]);
    TensorView sub{static_cast<char*>(data) + i * strides[0] * DTypeSize(dtype), dtype,
                   Shape(shape.begin() + 1, shape.end()),
                   Shape(strides.begin() + 1, strides.end())};
    return sub;
  }
};

// An owning, zero-initialised (unless kUninitialized), 64-byte aligned host allocation
// (move-only). Buffers of kHugePageBytes or more are 2 MiB aligned and advised to transparent
// huge pages (MADV_HUGEPAGE): the weight and cache streams of a decode step then cross one TLB
// entry per 2 MiB instead of per 4 KiB (engine/weight_copy.h has the measured gain).
class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHugePageBytes = size_t{2} << 20;
  enum class Fill { kZero, kUninitialized };

  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t num_bytes, Fill fill = Fill::kZero);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace strata
