// Decoding an image file (PNG, JPEG, WebP, GIF's first frame) into 8-bit RGB or RGBA pixels
// with Debian's codec libraries (libpng, libjpeg-turbo, libwebp, giflib), and data: URLs into
// bytes. Untrusted input: every entry point bounds memory and time before it allocates (the
// header's dimensions are checked against the limits first), and every failure is an
// InvalidArgument naming the reason (and the limit, when one was exceeded).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::media {

struct ImageDecodeLimits {
  int64_t max_encoded_bytes = int64_t{20} << 20;  // the file (after base64)
  int max_side_pixels = 16384;                    // width and height at most
  int64_t max_pixels = int64_t{64} << 20;         // width × height at most
};

struct DecodedImage {
  int width = 0;
  int height = 0;
  bool has_alpha = false;       // pixels are RGBA (straight alpha), else RGB
  std::vector<uint8_t> pixels;  // row-major, 4 (RGBA) or 3 (RGB) bytes per pixel
  std::string format;           // "png" | "jpeg" | "webp" | "gif"
};

// The format is found from the bytes (magic numbers), never from a name or a MIME type.
absl::StatusOr<DecodedImage> DecodeImage(std::string_view bytes,
                                         const ImageDecodeLimits& limits = {});

struct DataUrl {
  std::string mime_type;  // e.g. "image/png" (lower-cased)
  std::string bytes;      // the decoded payload
};

// `data:<mime>;base64,<payload>` (RFC 2397; only base64 payloads). Errors name what is wrong:
// not a data URL, not base64, invalid base64 (at which character), payload over max_bytes.
absl::StatusOr<DataUrl> ParseDataUrl(std::string_view url, int64_t max_bytes);

}  // namespace strata::media
