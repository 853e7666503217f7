#include "core/tensor.h"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

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

// The "THPeligible:" line of the /proc/self/smaps entry holding p ("" when none).
std::string ThpEligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto a = reinterpret_cast<uintptr_t>(p);
  while (std::getline(smaps, line)) {
    const size_t dash = line.find('-'), space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos && dash < space &&
        std::isxdigit(static_cast<unsigned char>(line[0]))) {
      const uintptr_t begin = std::stoull(line.substr(0, dash), nullptr, 16);
      const uintptr_t end = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
      inside = a >= begin && a < end;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(TensorTest, LargeAlignedBuffersSitOnHugePageBoundariesAndAreAdvised) {
  const size_t bytes = 3 * AlignedBuffer::kHugePageBytes + 100;
  AlignedBuffer buffer(bytes);
  ASSERT_NE(buffer.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % AlignedBuffer::kHugePageBytes, 0u);
  for (size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(buffer.as<uint8_t>()[i], 0) << i;
  AlignedBuffer raw(bytes, AlignedBuffer::Fill::kUninitialized);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(raw.data()) % AlignedBuffer::kHugePageBytes, 0u);
  std::memset(raw.data(), 7, bytes);  // all of it is writable

  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  if (mode.empty() || mode.find("[never]") != std::string::npos) {
    GTEST_SKIP() << "transparent huge pages are off here ('" << mode << "')";
  }
  const std::string eligible = ThpEligible(buffer.as<char>() + AlignedBuffer::kHugePageBytes);
  if (eligible.empty()) GTEST_SKIP() << "this kernel's smaps has no THPeligible line";
  EXPECT_EQ(eligible.substr(eligible.find_last_of(' ') + 1), "1") << eligible;
}

TEST(TensorDeathTest, WrongTypedAccessIsAnInvariantFailure) {
  uint16_t data[4] = {};
  TensorView view = TensorView::Contiguous(data, DType::kBF16, {4});
  EXPECT_DEATH(view.data_as<float>(), "CHECK failed");
}

}  // namespace
}  // namespace strata
