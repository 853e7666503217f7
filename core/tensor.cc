#include "core/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

namespace strata {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Shape ContiguousStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

std::string ShapeToString(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

AlignedBuffer::AlignedBuffer(size_t num_bytes, Fill fill) : size_(num_bytes) {
  if (num_bytes == 0) return;
  const bool huge = num_bytes >= kHugePageBytes;
  const size_t alignment = huge ? kHugePageBytes : kAlignment;
  const size_t rounded = (num_bytes + alignment - 1) / alignment * alignment;
  data_ = std::aligned_alloc(alignment, rounded);
  CHECK(data_ != nullptr) << "out of memory allocating " << num_bytes << " bytes";
  // Before the first touch, so the pages are faulted in huge. Advice only: where transparent
  // huge pages are off (or none is free) the buffer keeps 4 KiB pages.
  if (huge) ::madvise(data_, rounded, MADV_HUGEPAGE);
  if (fill == Fill::kZero) std::memset(data_, 0, rounded);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace strata
