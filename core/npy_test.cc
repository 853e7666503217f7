#include "core/npy.h"

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace strata {
namespace {

std::string TempPath(const char* name) { return testing::TempDir() + "/" + name; }

TEST(NpyTest, WritesTheVersion1HeaderNumpyReads) {
  const float data[6] = {1, 2, 3, 4, 5, -6.5f};
  const std::string path = TempPath("a.npy");
  ASSERT_TRUE(WriteNpyF32(path, data, {2, 3}).ok());
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);  // data starts 64-byte aligned
  const std::string header = bytes.substr(10, header_len);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos);
  EXPECT_NE(header.find("'shape': (2, 3)"), std::string::npos);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(bytes.size(), 10 + header_len + 24);
}

TEST(NpyTest, RoundTripsOneAndTwoDimensionalArrays) {
  const float data[3] = {0.5f, -1.0f, 3.25f};
  const std::string path = TempPath("b.npy");
  ASSERT_TRUE(WriteNpyF32(path, data, {3}).ok());
  auto array = ReadNpyF32(path);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(array->data, (std::vector<float>{0.5f, -1.0f, 3.25f}));
  ASSERT_TRUE(WriteNpyF32(path, data, {1, 3}).ok());
  array = ReadNpyF32(path);
  ASSERT_TRUE(array.ok());
  EXPECT_EQ(array->shape, (std::vector<int64_t>{1, 3}));
}

TEST(NpyTest, RejectsFilesThatAreNotFloat32Npy) {
  const std::string path = TempPath("c.npy");
  std::ofstream(path) << "not numpy";
  EXPECT_FALSE(ReadNpyF32(path).ok());
  EXPECT_FALSE(ReadNpyF32(TempPath("missing.npy")).ok());
}

}  // namespace
}  // namespace strata
