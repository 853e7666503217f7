// DecodeImage on files written by each library's own encoder (engine/media/
// test_image_encoders.h): exact pixels for the lossless formats, every bad-input class refused
// by name.
#include "engine/media/image_decode.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <png.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/media/test_image_encoders.h"

namespace strata::media {
namespace {

using testing::EncodeAnimatedWebp;
using testing::EncodeGif;
using testing::EncodeJpeg;
using testing::EncodePng;
using testing::EncodeWebp;
using testing::GifSpec;
using ::testing::HasSubstr;
using testing::PngSpec;

// A deterministic pattern: channel c of pixel (x, y), all 256 levels reached on larger images.
std::vector<uint8_t> Pattern(int width, int height, int channels, int seed = 0) {
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        pixels[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>(x * 37 + y * 11 + c * 101 + seed * 7 + (x * y) % 13);
      }
    }
  }
  return pixels;
}

// A smooth pattern lossy codecs reproduce closely.
std::vector<uint8_t> Gradient(int width, int height, int channels) {
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        pixels[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>(c == 0   ? x * 255 / (width - 1)
                                 : c == 1 ? y * 255 / (height - 1)
                                          : 128 + c * 20);
      }
    }
  }
  return pixels;
}

int MaxAbsDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  int worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

DecodedImage DecodeOk(const std::string& bytes, const ImageDecodeLimits& limits = {}) {
  absl::StatusOr<DecodedImage> image = DecodeImage(bytes, limits);
  EXPECT_TRUE(image.ok()) << image.status();
  return image.ok() ? *std::move(image) : DecodedImage{};
}

std::string DecodeError(const std::string& bytes, const ImageDecodeLimits& limits = {}) {
  absl::StatusOr<DecodedImage> image = DecodeImage(bytes, limits);
  EXPECT_FALSE(image.ok());
  if (image.ok()) return "";
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument) << image.status();
  return std::string(image.status().message());
}

// ---- PNG -----------------------------------------------------------------------------------

PngSpec Png8(const std::vector<uint8_t>& pixels, int width, int height, int color_type) {
  PngSpec spec;
  spec.width = width;
  spec.height = height;
  spec.color_type = color_type;
  spec.rows = pixels;
  return spec;
}

TEST(ImageDecodeTest, PngRgbIsExact) {
  const std::vector<uint8_t> pixels = Pattern(13, 7, 3);
  const DecodedImage image = DecodeOk(EncodePng(Png8(pixels, 13, 7, PNG_COLOR_TYPE_RGB)));
  EXPECT_EQ(image.format, "png");
  EXPECT_EQ(image.width, 13);
  EXPECT_EQ(image.height, 7);
  EXPECT_FALSE(image.has_alpha);
  EXPECT_EQ(image.pixels, pixels);
}

TEST(ImageDecodeTest, PngRgbaIsExactStraightAlpha) {
  const std::vector<uint8_t> pixels = Pattern(9, 11, 4);
  const DecodedImage image = DecodeOk(EncodePng(Png8(pixels, 9, 11, PNG_COLOR_TYPE_RGBA)));
  EXPECT_TRUE(image.has_alpha);
  EXPECT_EQ(image.pixels, pixels);
}

TEST(ImageDecodeTest, PngInterlacedRgbaIsExact) {
  const std::vector<uint8_t> pixels = Pattern(19, 17, 4, 3);
  PngSpec spec = Png8(pixels, 19, 17, PNG_COLOR_TYPE_RGBA);
  spec.interlaced = true;
  EXPECT_EQ(DecodeOk(EncodePng(spec)).pixels, pixels);
}

TEST(ImageDecodeTest, PngGrayAndGrayAlphaExpandToRgb) {
  const std::vector<uint8_t> gray = Pattern(5, 4, 1);
  const DecodedImage rgb = DecodeOk(EncodePng(Png8(gray, 5, 4, PNG_COLOR_TYPE_GRAY)));
  ASSERT_FALSE(rgb.has_alpha);
  ASSERT_EQ(rgb.pixels.size(), gray.size() * 3);
  for (size_t i = 0; i < gray.size(); ++i) {
    EXPECT_EQ(rgb.pixels[i * 3], gray[i]);
    EXPECT_EQ(rgb.pixels[i * 3 + 1], gray[i]);
    EXPECT_EQ(rgb.pixels[i * 3 + 2], gray[i]);
  }
  const std::vector<uint8_t> gray_alpha = Pattern(5, 4, 2);
  const DecodedImage rgba = DecodeOk(EncodePng(Png8(gray_alpha, 5, 4, PNG_COLOR_TYPE_GRAY_ALPHA)));
  ASSERT_TRUE(rgba.has_alpha);
  for (size_t i = 0; i < gray_alpha.size() / 2; ++i) {
    EXPECT_EQ(rgba.pixels[i * 4], gray_alpha[i * 2]);
    EXPECT_EQ(rgba.pixels[i * 4 + 2], gray_alpha[i * 2]);
    EXPECT_EQ(rgba.pixels[i * 4 + 3], gray_alpha[i * 2 + 1]);
  }
}

TEST(ImageDecodeTest, PngOneBitGrayExpandsToBlackAndWhite) {
  PngSpec spec;
  spec.width = 10;
  spec.height = 2;
  spec.color_type = PNG_COLOR_TYPE_GRAY;
  spec.bit_depth = 1;
  spec.rows = {0b10110000, 0b01000000, 0b00000000, 0b11000000};  // 2 bytes per row
  const DecodedImage image = DecodeOk(EncodePng(spec));
  const std::vector<int> expected_row0 = {255, 0, 255, 255, 0, 0, 0, 0, 0, 255};
  for (int x = 0; x < 10; ++x) EXPECT_EQ(image.pixels[x * 3], expected_row0[x]) << x;
  EXPECT_EQ(image.pixels[(10 + 8) * 3], 255);
  EXPECT_EQ(image.pixels[(10 + 7) * 3], 0);
}

TEST(ImageDecodeTest, PngPaletteWithTransparencyBecomesRgba) {
  PngSpec spec;
  spec.width = 4;
  spec.height = 2;
  spec.color_type = PNG_COLOR_TYPE_PALETTE;
  spec.bit_depth = 4;
  spec.palette = {10, 20, 30, 200, 100, 50, 0, 255, 0};
  spec.trns = {255, 128, 0};  // entry 2 fully transparent, entry 1 half
  spec.rows = {0x01, 0x21, 0x22, 0x10};
  const DecodedImage image = DecodeOk(EncodePng(spec));
  ASSERT_TRUE(image.has_alpha);
  const std::vector<uint8_t> expected = {10, 20,  30,  255, 200, 100, 50,  128, 0,  255, 0,
                                         0,  200, 100, 50,  128, 0,   255, 0,   0,  0,   255,
                                         0,  0,   200, 100, 50,  128, 10,  20,  30, 255};
  EXPECT_EQ(image.pixels, expected);
}

TEST(ImageDecodeTest, PngRgbColorKeyBecomesAlpha) {
  PngSpec spec = Png8({1, 2, 3, 9, 9, 9, 1, 2, 3}, 3, 1, PNG_COLOR_TYPE_RGB);
  spec.trns_color = {9, 9, 9};
  const DecodedImage image = DecodeOk(EncodePng(spec));
  ASSERT_TRUE(image.has_alpha);
  EXPECT_EQ(image.pixels, (std::vector<uint8_t>{1, 2, 3, 255, 9, 9, 9, 0, 1, 2, 3, 255}));
}

TEST(ImageDecodeTest, Png16BitKeepsTheHighByte) {
  PngSpec spec;
  spec.width = 2;
  spec.height = 1;
  spec.color_type = PNG_COLOR_TYPE_RGB;
  spec.bit_depth = 16;
  spec.rows = {0x12, 0xff, 0x34, 0x80, 0xff, 0xff, 0x00, 0x7f, 0x01, 0x00, 0xab, 0xcd};
  EXPECT_EQ(DecodeOk(EncodePng(spec)).pixels,
            (std::vector<uint8_t>{0x12, 0x34, 0xff, 0x00, 0x01, 0xab}));
  spec.color_type = PNG_COLOR_TYPE_GRAY;
  spec.width = 6;
  EXPECT_EQ(DecodeOk(EncodePng(spec)).pixels[3 * 3], 0x00);
  EXPECT_EQ(DecodeOk(EncodePng(spec)).pixels[5 * 3 + 2], 0xab);
}

// ---- JPEG ----------------------------------------------------------------------------------

TEST(ImageDecodeTest, JpegRgbIsCloseAndProgressiveDecodesTheSame) {
  const std::vector<uint8_t> pixels = Gradient(40, 24, 3);
  const DecodedImage baseline = DecodeOk(EncodeJpeg(pixels, 40, 24, 3, 95, false));
  EXPECT_EQ(baseline.format, "jpeg");
  EXPECT_FALSE(baseline.has_alpha);
  EXPECT_LE(MaxAbsDiff(baseline.pixels, pixels), 12);
  const DecodedImage progressive = DecodeOk(EncodeJpeg(pixels, 40, 24, 3, 95, true));
  EXPECT_EQ(progressive.pixels, baseline.pixels);
}

TEST(ImageDecodeTest, JpegGrayscaleBecomesGrayRgb) {
  const std::vector<uint8_t> gray = Gradient(16, 16, 1);
  const DecodedImage image = DecodeOk(EncodeJpeg(gray, 16, 16, 1, 95, false));
  ASSERT_EQ(image.pixels.size(), gray.size() * 3);
  std::vector<uint8_t> red(gray.size());
  for (size_t i = 0; i < gray.size(); ++i) {
    EXPECT_EQ(image.pixels[i * 3], image.pixels[i * 3 + 1]);
    EXPECT_EQ(image.pixels[i * 3], image.pixels[i * 3 + 2]);
    red[i] = image.pixels[i * 3];
  }
  EXPECT_LE(MaxAbsDiff(red, gray), 6);
}

TEST(ImageDecodeTest, JpegCmykConvertsToRgbAsPillow) {
  // Solid colors: C, M, Y, K → R = (255 − C)(255 − K) / 255 (rounded as Pillow does).
  std::vector<uint8_t> cmyk;
  for (int i = 0; i < 16 * 16; ++i) cmyk.insert(cmyk.end(), {0, 255, 128, 64});
  const DecodedImage image = DecodeOk(EncodeJpeg(cmyk, 16, 16, 4, 100, false));
  ASSERT_FALSE(image.has_alpha);
  ASSERT_EQ(image.pixels.size(), size_t{16 * 16 * 3});
  EXPECT_NEAR(image.pixels[0], 191, 2);  // (255 − 0) · 191 / 255
  EXPECT_NEAR(image.pixels[1], 0, 2);
  EXPECT_NEAR(image.pixels[2], 95, 2);  // 127 · 191 / 255
}

// ---- WebP ----------------------------------------------------------------------------------

TEST(ImageDecodeTest, WebpLosslessIsExact) {
  const std::vector<uint8_t> rgb = Pattern(23, 9, 3);
  DecodedImage image = DecodeOk(EncodeWebp(rgb, 23, 9, 3, true));
  EXPECT_EQ(image.format, "webp");
  EXPECT_FALSE(image.has_alpha);
  EXPECT_EQ(image.pixels, rgb);
  // Alpha in 1..255: the encoder may rewrite the color under alpha 0 (it is invisible).
  std::vector<uint8_t> rgba = Pattern(23, 9, 4, 5);
  for (size_t i = 3; i < rgba.size(); i += 4) rgba[i] = std::max<uint8_t>(rgba[i], 1);
  image = DecodeOk(EncodeWebp(rgba, 23, 9, 4, true));
  EXPECT_TRUE(image.has_alpha);
  EXPECT_EQ(image.pixels, rgba);
}

TEST(ImageDecodeTest, WebpLossyIsCloseWithExactAlpha) {
  const std::vector<uint8_t> rgb = Gradient(48, 32, 3);
  EXPECT_LE(MaxAbsDiff(DecodeOk(EncodeWebp(rgb, 48, 32, 3, false)).pixels, rgb), 16);
  std::vector<uint8_t> rgba = Gradient(48, 32, 4);
  for (size_t i = 3; i < rgba.size(); i += 4) rgba[i] = static_cast<uint8_t>(i % 7 == 0 ? 0 : 200);
  const DecodedImage image = DecodeOk(EncodeWebp(rgba, 48, 32, 4, false));
  ASSERT_TRUE(image.has_alpha);
  for (size_t i = 3; i < rgba.size(); i += 4) ASSERT_EQ(image.pixels[i], rgba[i]) << i;
}

TEST(ImageDecodeTest, WebpAnimationGivesTheFirstFrame) {
  std::vector<uint8_t> first = Pattern(12, 10, 4, 1);
  std::vector<uint8_t> second = Pattern(12, 10, 4, 2);
  for (size_t i = 3; i < first.size(); i += 4) first[i] = second[i] = 255;
  const DecodedImage image = DecodeOk(EncodeAnimatedWebp({first, second}, 12, 10));
  ASSERT_EQ(image.width, 12);
  ASSERT_EQ(image.height, 10);
  const int channels = image.has_alpha ? 4 : 3;
  for (int i = 0; i < 12 * 10; ++i) {
    for (int c = 0; c < 3; ++c) ASSERT_EQ(image.pixels[i * channels + c], first[i * 4 + c]) << i;
  }
}

// ---- GIF -----------------------------------------------------------------------------------

GifSpec SmallGif() {
  GifSpec spec;
  spec.width = 19;
  spec.height = 11;
  for (int i = 0; i < 16; ++i) {
    spec.palette.insert(
        spec.palette.end(),
        {static_cast<uint8_t>(i * 16), static_cast<uint8_t>(255 - i), static_cast<uint8_t>(i * 3)});
  }
  std::vector<uint8_t> frame(19 * 11);
  for (size_t i = 0; i < frame.size(); ++i) frame[i] = static_cast<uint8_t>((i * 5) % 16);
  spec.frames = {frame};
  return spec;
}

std::vector<uint8_t> ExpectedGifPixels(const GifSpec& spec, int frame, bool alpha) {
  std::vector<uint8_t> out;
  for (const uint8_t index : spec.frames[frame]) {
    out.insert(out.end(), &spec.palette[index * 3], &spec.palette[index * 3] + 3);
    if (alpha) out.push_back(index == spec.transparent_index ? 0 : 255);
  }
  return out;
}

TEST(ImageDecodeTest, GifPaletteIsExact) {
  const GifSpec spec = SmallGif();
  const DecodedImage image = DecodeOk(EncodeGif(spec));
  EXPECT_EQ(image.format, "gif");
  EXPECT_FALSE(image.has_alpha);
  EXPECT_EQ(image.pixels, ExpectedGifPixels(spec, 0, false));
}

TEST(ImageDecodeTest, GifTransparentIndexBecomesAlphaZero) {
  GifSpec spec = SmallGif();
  spec.transparent_index = 5;
  const DecodedImage image = DecodeOk(EncodeGif(spec));
  ASSERT_TRUE(image.has_alpha);
  EXPECT_EQ(image.pixels, ExpectedGifPixels(spec, 0, true));
}

TEST(ImageDecodeTest, GifInterlacedRowsComeBackInOrder) {
  GifSpec spec = SmallGif();
  spec.interlaced = true;
  EXPECT_EQ(DecodeOk(EncodeGif(spec)).pixels, ExpectedGifPixels(spec, 0, false));
}

TEST(ImageDecodeTest, GifAnimationGivesTheFirstFrame) {
  GifSpec spec = SmallGif();
  std::vector<uint8_t> second = spec.frames[0];
  for (uint8_t& index : second) index = static_cast<uint8_t>(15 - index);
  spec.frames.push_back(second);
  EXPECT_EQ(DecodeOk(EncodeGif(spec)).pixels, ExpectedGifPixels(spec, 0, false));
}

// ---- bad input -----------------------------------------------------------------------------

TEST(ImageDecodeTest, EmptyAndNonImagesAreRefused) {
  EXPECT_THAT(DecodeError(""), HasSubstr("empty"));
  const std::string html = DecodeError("<!DOCTYPE html><html>");
  EXPECT_THAT(html, HasSubstr("not an image"));
  EXPECT_THAT(html, HasSubstr("<!DOCTYP"));
  EXPECT_THAT(DecodeError(std::string("\x89PNG", 4)), HasSubstr("not an image"));
  EXPECT_THAT(DecodeError("RIFF\x10\0\0\0WAVEfmt "), HasSubstr("not an image"));
}

TEST(ImageDecodeTest, OverMaxEncodedBytesIsRefusedBeforeDecoding) {
  const std::string png = EncodePng(Png8(Pattern(8, 8, 3), 8, 8, PNG_COLOR_TYPE_RGB));
  ImageDecodeLimits limits;
  limits.max_encoded_bytes = 64;
  const std::string message = DecodeError(png, limits);
  EXPECT_THAT(message, HasSubstr(std::to_string(png.size()) + " bytes"));
  EXPECT_THAT(message, HasSubstr("limit of 64 bytes"));
}

std::vector<std::string> FilesOfEachFormat() {
  GifSpec gif = SmallGif();
  return {EncodePng(Png8(Pattern(32, 32, 3), 32, 32, PNG_COLOR_TYPE_RGB)),
          EncodeJpeg(Gradient(64, 64, 3), 64, 64, 3, 90, false),
          EncodeJpeg(Gradient(64, 64, 3), 64, 64, 3, 90, true),
          EncodeWebp(Pattern(32, 32, 3), 32, 32, 3, true),
          EncodeWebp(Gradient(64, 64, 3), 64, 64, 3, false),
          EncodeGif(gif)};
}

TEST(ImageDecodeTest, TruncatedFilesOfEveryFormatAreRefused) {
  for (const std::string& file : FilesOfEachFormat()) {
    const std::string format = DecodeOk(file).format;
    for (const double fraction : {0.2, 0.5, 0.9}) {
      const std::string cut = file.substr(0, static_cast<size_t>(file.size() * fraction));
      const std::string message = DecodeError(cut);
      EXPECT_THAT(message, HasSubstr("invalid " + format + " image")) << fraction;
    }
  }
}

TEST(ImageDecodeTest, TruncationSaysSo) {
  const std::string png = EncodePng(Png8(Pattern(32, 32, 3), 32, 32, PNG_COLOR_TYPE_RGB));
  EXPECT_THAT(DecodeError(png.substr(0, png.size() / 2)), HasSubstr("truncated"));
  const std::string jpeg = EncodeJpeg(Gradient(64, 64, 3), 64, 64, 3, 90, false);
  EXPECT_THAT(DecodeError(jpeg.substr(0, jpeg.size() / 2)), HasSubstr("truncated"));
  const std::string webp = EncodeWebp(Pattern(32, 32, 3), 32, 32, 3, true);
  EXPECT_THAT(DecodeError(webp.substr(0, webp.size() / 2)), HasSubstr("truncated"));
  const std::string gif = EncodeGif(SmallGif());
  EXPECT_THAT(DecodeError(gif.substr(0, gif.size() / 2)), HasSubstr("truncated"));
}

TEST(ImageDecodeTest, CorruptFilesOfEveryFormatAreRefused) {
  // PNG: a flipped byte inside IDAT breaks its CRC.
  std::string png = EncodePng(Png8(Pattern(32, 32, 3), 32, 32, PNG_COLOR_TYPE_RGB));
  png[png.find("IDAT") + 10] ^= 0x55;
  EXPECT_THAT(DecodeError(png), HasSubstr("invalid png image"));
  // JPEG: sample precision 8 → 3 in the SOF0 segment.
  std::string jpeg = EncodeJpeg(Gradient(16, 16, 3), 16, 16, 3, 90, false);
  jpeg[jpeg.find("\xff\xc0") + 4] = 3;
  EXPECT_THAT(DecodeError(jpeg), HasSubstr("invalid jpeg image"));
  // WebP: the lossless bitstream's signature byte.
  std::string webp = EncodeWebp(Pattern(8, 8, 3), 8, 8, 3, true);
  webp[webp.find("VP8L") + 8] = 0x00;
  EXPECT_THAT(DecodeError(webp), HasSubstr("invalid webp image"));
  // GIF: the LZW minimum code size (after the 10-byte image descriptor) set out of range.
  std::string gif = EncodeGif(SmallGif());
  gif[gif.find(',') + 10] = 15;
  EXPECT_THAT(DecodeError(gif), HasSubstr("invalid gif image"));
}

uint32_t Crc32(const std::string& bytes) {
  uint32_t crc = 0xffffffff;
  for (const char c : bytes) {
    crc ^= static_cast<uint8_t>(c);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

std::string BigEndian32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string PngChunk(const std::string& type, const std::string& data) {
  return BigEndian32(static_cast<uint32_t>(data.size())) + type + data +
         BigEndian32(Crc32(type + data));
}

TEST(ImageDecodeTest, PngHeaderOverTheSizeLimitIsRefusedByName) {
  // A well-formed file (valid CRCs) whose IHDR claims 100000 × 100000 RGBA: 40 GB of pixels.
  const std::string ihdr =
      BigEndian32(100000) + BigEndian32(100000) + std::string("\x08\x06\0\0\0", 5);
  const std::string idat("\x78\x9c\x03\x00\x00\x00\x00\x01", 8);
  const std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + PngChunk("IHDR", ihdr) +
                          PngChunk("IDAT", idat) + PngChunk("IEND", "");
  const std::string message = DecodeError(png);
  EXPECT_THAT(message, HasSubstr("100000x100000"));
  EXPECT_THAT(message, HasSubstr("16384 pixels per side"));
}

TEST(ImageDecodeTest, HugeJpegGifAndWebpHeadersAreRefusedByName) {
  std::string jpeg = EncodeJpeg(Gradient(16, 16, 3), 16, 16, 3, 90, false);
  const size_t sof = jpeg.find("\xff\xc0");
  jpeg.replace(sof + 5, 4, "\xea\x60\xea\x60");  // height, width = 60000
  EXPECT_THAT(DecodeError(jpeg), HasSubstr("jpeg image is 60000x60000 pixels"));

  std::string gif = EncodeGif(SmallGif());
  gif.replace(6, 4, "\xff\xff\xff\xff");  // logical screen 65535 × 65535
  EXPECT_THAT(DecodeError(gif), HasSubstr("gif image is 65535x65535 pixels"));

  std::string webp = EncodeAnimatedWebp({Pattern(8, 8, 4, 1), Pattern(8, 8, 4, 2)}, 8, 8);
  const size_t vp8x = webp.find("VP8X");
  ASSERT_NE(vp8x, std::string::npos);
  // Canvas 60000 × 60000 (24-bit fields of size − 1; libwebp itself refuses 2^32 pixels).
  webp.replace(vp8x + 12, 6, std::string("\x5f\xea\x00\x5f\xea\x00", 6));
  EXPECT_THAT(DecodeError(webp), HasSubstr("webp image is 60000x60000 pixels"));
}

TEST(ImageDecodeTest, LimitsApplyToEveryFormat) {
  ImageDecodeLimits limits;
  limits.max_side_pixels = 16;
  for (const std::string& file : FilesOfEachFormat()) {
    EXPECT_THAT(DecodeError(file, limits), HasSubstr("over the limit of 16 pixels per side"));
  }
  limits.max_side_pixels = 100;
  limits.max_pixels = 1000;
  EXPECT_THAT(DecodeError(FilesOfEachFormat()[0], limits),
              HasSubstr("32x32 = 1024 pixels: over the limit of 1000 pixels"));
}

}  // namespace
}  // namespace strata::media
