// DecodeImage: bounds the encoded size, finds the format from the magic bytes and hands the file
// to that format's decoder (engine/media/image_codecs.h).
#include "engine/media/image_decode.h"

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/media/image_codecs.h"

namespace strata::media {
namespace {

enum class ImageFormat { kUnknown, kPng, kJpeg, kWebp, kGif };

ImageFormat SniffFormat(std::string_view bytes) {
  if (bytes.starts_with(std::string_view("\x89PNG\r\n\x1a\n", 8))) return ImageFormat::kPng;
  if (bytes.starts_with("\xff\xd8\xff")) return ImageFormat::kJpeg;
  if (bytes.starts_with("GIF87a") || bytes.starts_with("GIF89a")) return ImageFormat::kGif;
  if (bytes.size() >= 12 && bytes.starts_with("RIFF") && bytes.substr(8, 4) == "WEBP") {
    return ImageFormat::kWebp;
  }
  return ImageFormat::kUnknown;
}

// The first bytes of an unrecognised file, printable ones as text and the rest as \xNN, so a
// message shows what was sent (an HTML page, a base64 text decoded twice, ...).
std::string DescribeStart(std::string_view bytes) {
  constexpr size_t kShownBytes = 8;
  std::string out;
  for (const char c : bytes.substr(0, kShownBytes)) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isprint(byte) && byte != '\\') {
      out.push_back(c);
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[byte >> 4], kHex[byte & 15]};
    }
  }
  return out;
}

}  // namespace

absl::Status CheckImageDimensions(std::string_view format_name, std::string_view what_name,
                                  int64_t width, int64_t height, const ImageDecodeLimits& limits) {
  const absl::string_view format(format_name.data(), format_name.size());
  const absl::string_view what(what_name.data(), what_name.size());
  if (width < 1 || height < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid ", format, " ", what, ": its header says ", width, "x", height, " pixels"));
  }
  if (width > limits.max_side_pixels || height > limits.max_side_pixels) {
    return absl::InvalidArgumentError(absl::StrCat(format, " ", what, " is ", width, "x", height,
                                                   " pixels: over the limit of ",
                                                   limits.max_side_pixels, " pixels per side"));
  }
  if (width * height > limits.max_pixels) {
    return absl::InvalidArgumentError(
        absl::StrCat(format, " ", what, " is ", width, "x", height, " = ", width * height,
                     " pixels: over the limit of ", limits.max_pixels, " pixels"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DecodedImage> DecodeImage(std::string_view bytes, const ImageDecodeLimits& limits) {
  if (bytes.empty()) return absl::InvalidArgumentError("not an image: the data is empty (0 bytes)");
  if (static_cast<int64_t>(bytes.size()) > limits.max_encoded_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("image file is ", bytes.size(),
                                                   " bytes: over the limit of ",
                                                   limits.max_encoded_bytes, " bytes"));
  }
  switch (SniffFormat(bytes)) {
    case ImageFormat::kPng:
      return DecodePng(bytes, limits);
    case ImageFormat::kJpeg:
      return DecodeJpeg(bytes, limits);
    case ImageFormat::kWebp:
      return DecodeWebp(bytes, limits);
    case ImageFormat::kGif:
      return DecodeGif(bytes, limits);
    case ImageFormat::kUnknown:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("not an image: the data is none of PNG, JPEG, WebP or GIF (it starts with \"",
                   DescribeStart(bytes), "\", ", bytes.size(), " bytes)"));
}

}  // namespace strata::media
