// The per-format decoders behind DecodeImage (engine/media/image_decode.h), one file each
// (png_decode.cc, jpeg_decode.cc, webp_decode.cc, gif_decode.cc), and the size check they all
// make on the header's dimensions before they allocate pixels. Internal to engine/media: callers
// use DecodeImage, which finds the format from the magic bytes and bounds the encoded size first.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/media/image_decode.h"

namespace strata::media {

// InvalidArgument unless 1 <= width, height <= limits.max_side_pixels and width × height <=
// limits.max_pixels; the message names the format, the size and the limit. `what` is "image" or
// e.g. "first frame".
absl::Status CheckImageDimensions(std::string_view format, std::string_view what, int64_t width,
                                  int64_t height, const ImageDecodeLimits& limits);

// Each decoder takes the whole file (its magic already matched) and returns 8-bit RGB, or RGBA
// when the file carries transparency (an alpha channel, PNG tRNS, a GIF transparent index).
absl::StatusOr<DecodedImage> DecodePng(std::string_view bytes, const ImageDecodeLimits& limits);
absl::StatusOr<DecodedImage> DecodeJpeg(std::string_view bytes, const ImageDecodeLimits& limits);
absl::StatusOr<DecodedImage> DecodeWebp(std::string_view bytes, const ImageDecodeLimits& limits);
absl::StatusOr<DecodedImage> DecodeGif(std::string_view bytes, const ImageDecodeLimits& limits);

}  // namespace strata::media
