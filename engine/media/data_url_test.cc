#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "engine/media/image_decode.h"
#include "engine/tokenizer/base64.h"

namespace strata::media {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const std::string& url, int64_t max_bytes = 1 << 20) {
  absl::StatusOr<DataUrl> parsed = ParseDataUrl(url, max_bytes);
  EXPECT_FALSE(parsed.ok());
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

TEST(DataUrlTest, DecodesBase64AndLowerCasesTheMimeType) {
  const std::string bytes("\x89PNG\r\n\x1a\n\0\xff", 10);
  absl::StatusOr<DataUrl> parsed =
      ParseDataUrl("data:Image/PNG;base64," + engine::Base64Encode(bytes), 100);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->mime_type, "image/png");
  EXPECT_EQ(parsed->bytes, bytes);
}

TEST(DataUrlTest, SchemeAndBase64MarkerAreCaseInsensitiveAndParametersAreSkipped) {
  absl::StatusOr<DataUrl> parsed = ParseDataUrl("DATA:image/jpeg;name=x.jpg;BASE64,QUJD", 100);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->mime_type, "image/jpeg");
  EXPECT_EQ(parsed->bytes, "ABC");
}

TEST(DataUrlTest, WhitespaceInThePayloadIsSkipped) {
  absl::StatusOr<DataUrl> parsed = ParseDataUrl("data:image/png;base64,QUJD\r\nREVG Rw =\t=", 100);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->bytes, "ABCDEFG");
}

TEST(DataUrlTest, PaddingVariants) {
  EXPECT_EQ(ParseDataUrl("data:x;base64,QQ==", 10)->bytes, "A");
  EXPECT_EQ(ParseDataUrl("data:x;base64,QUI=", 10)->bytes, "AB");
  EXPECT_EQ(ParseDataUrl("data:x;base64,", 10)->bytes, "");
  EXPECT_THAT(ErrorOf("data:x;base64,QQ"), HasSubstr("not a multiple of 4"));
  EXPECT_THAT(ErrorOf("data:x;base64,Q==="), HasSubstr("'=' at offset 17"));
  EXPECT_THAT(ErrorOf("data:x;base64,QQ==QUJD"),
              HasSubstr("'Q' at offset 18 follows the '=' padding"));
}

TEST(DataUrlTest, InvalidBase64NamesTheCharacterAndItsOffset) {
  const std::string message = ErrorOf("data:image/png;base64,QUJD*EVG");
  EXPECT_THAT(message, HasSubstr("invalid base64"));
  EXPECT_THAT(message, HasSubstr("'*' at offset 26"));
  EXPECT_THAT(ErrorOf("data:image/png;base64,QUJD-_FG"), HasSubstr("'-' at offset 26"));
  EXPECT_THAT(ErrorOf(std::string("data:image/png;base64,QU\0D", 26)),
              HasSubstr("byte 0x00 at offset 24"));
  EXPECT_THAT(ErrorOf("data:image/png;base64,QUJD%3D"), HasSubstr("'%' at offset 26"));
}

TEST(DataUrlTest, OverMaxBytesIsRefusedByLengthBeforeDecoding) {
  const std::string payload = engine::Base64Encode(std::string(300, 'x'));  // 400 characters
  const std::string message = ErrorOf("data:image/png;base64," + payload, 299);
  EXPECT_THAT(message, HasSubstr("300 bytes: over the limit of 299 bytes"));
  EXPECT_TRUE(ParseDataUrl("data:image/png;base64," + payload, 300).ok());
}

TEST(DataUrlTest, NonBase64DataUrlsAreRefused) {
  EXPECT_THAT(ErrorOf("data:image/svg+xml,<svg/>"), HasSubstr("not base64-encoded"));
  EXPECT_THAT(ErrorOf("data:image/png;charset=utf-8,abc"), HasSubstr("not base64-encoded"));
  EXPECT_THAT(ErrorOf("data:image/png;base64"), HasSubstr("no ','"));
}

TEST(DataUrlTest, OtherSchemesAreNotDataUrls) {
  EXPECT_THAT(ErrorOf("https://example.com/cat.png"),
              HasSubstr("not a data URL (scheme \"https\")"));
  EXPECT_THAT(ErrorOf("FILE:///etc/passwd"), HasSubstr("scheme \"file\""));
  EXPECT_THAT(ErrorOf("iVBORw0KGgo="), HasSubstr("not a data URL (no scheme)"));
  EXPECT_THAT(ErrorOf(""), HasSubstr("not a data URL"));
}

}  // namespace
}  // namespace strata::media
