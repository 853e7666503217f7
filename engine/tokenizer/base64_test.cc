#include "engine/tokenizer/base64.h"

#include <gtest/gtest.h>

namespace strata::engine {
namespace {

TEST(Base64Test, EncodesRfc4648Vectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode(std::string("\xFF\xFE", 2)), "//4=");
}

TEST(Base64Test, DecodesAndRejectsMalformedInput) {
  EXPECT_EQ(Base64Decode("Zm9vYg=="), "foob");
  EXPECT_EQ(Base64Decode("IHRoZQ=="), " the");
  EXPECT_FALSE(Base64Decode("Zm9").has_value());
  EXPECT_FALSE(Base64Decode("Zm9*").has_value());
  EXPECT_FALSE(Base64Decode("Z=9v").has_value());
}

}  // namespace
}  // namespace strata::engine
