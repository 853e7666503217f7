#include "core/tensor.h"

#include <cstdint>

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(TensorTest, ContiguousStridesAreRowMajor) {
  Shape shape = {2, 3, 4};
  EXPECT_EQ(ContiguousStrides(shape), (Shape{12, 4, 1}));
  EXPECT_EQ(NumElements(shape), 24);
  EXPECT_EQ(ShapeToString(shape), "[2, 3, 4]");
  EXPECT_EQ(NumElements(Shape{}), 1);  // a scalar
}

TEST(TensorTest, Slice0ViewsTheRightBytes) {
  float data[24];
  for (int i = 0; i < 24; ++i) data[i] = static_cast<float>(i);
  TensorView view = TensorView::Contiguous(data, DType::kF32, {2, 3, 4});
  EXPECT_TRUE(view.is_contiguous());
  EXPECT_EQ(view.num_bytes(), 96u);
  TensorView second = view.Slice0(1);
  EXPECT_EQ(second.shape, (Shape{3, 4}));
  EXPECT_EQ(second.data_as<float>()[0], 12.0f);
  EXPECT_EQ(second.Slice0(2).data_as<float>()[3], 23.0f);
  EXPECT_EQ(view.dim(-1), 4);
}

TEST(TensorTest, AlignedBufferIsAlignedZeroedAndMovable) {
  AlignedBuffer buffer(1000);
  ASSERT_NE(buffer.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % AlignedBuffer::kAlignment, 0u);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(buffer.as<uint8_t>()[i], 0);
  void* before = buffer.data();
  AlignedBuffer moved = std::move(buffer);
  EXPECT_EQ(moved.data(), before);
  EXPECT_EQ(moved.size(), 1000u);
  EXPECT_EQ(buffer.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  AlignedBuffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
}

TEST(TensorDeathTest, WrongTypedAccessIsAnInvariantFailure) {
  uint16_t data[4] = {};
  TensorView view = TensorView::Contiguous(data, DType::kBF16, {4});
  EXPECT_DEATH(view.data_as<float>(), "CHECK failed");
}

}  // namespace
}  // namespace strata
