// WebP with libwebp: lossy, lossless and alpha to RGB or RGBA; an animation's first frame
// composed on its canvas by libwebpdemux's WebPAnimDecoder (as Pillow shows frame 0). libwebp
// reports errors by return codes; nothing here longjmps.
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/media/image_codecs.h"

namespace strata::media {
namespace {

std::string DescribeStatus(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "the file is truncated";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "corrupt bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature";
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    default:
      return absl::StrCat("libwebp status ", static_cast<int>(status));
  }
}

absl::Status WebpError(const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat("invalid webp image: ", reason));
}

absl::StatusOr<DecodedImage> DecodeStillWebp(std::string_view bytes,
                                             const WebPBitstreamFeatures& features) {
  DecodedImage image;
  image.width = features.width;
  image.height = features.height;
  image.has_alpha = features.has_alpha != 0;
  image.format = "webp";
  const int channels = image.has_alpha ? 4 : 3;
  image.pixels.resize(size_t{static_cast<size_t>(image.width)} * image.height * channels);

  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return absl::InternalError("webp: ABI version mismatch");
  config.output.colorspace = image.has_alpha ? MODE_RGBA : MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = image.pixels.data();
  config.output.u.RGBA.stride = image.width * channels;
  config.output.u.RGBA.size = image.pixels.size();
  const VP8StatusCode status =
      WebPDecode(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &config);
  WebPFreeDecBuffer(&config.output);
  if (status != VP8_STATUS_OK) return WebpError(DescribeStatus(status));
  return image;
}

struct AnimDecoderGuard {
  WebPAnimDecoder* decoder = nullptr;
  ~AnimDecoderGuard() { WebPAnimDecoderDelete(decoder); }
};

absl::StatusOr<DecodedImage> DecodeFirstWebpFrame(std::string_view bytes,
                                                  const WebPBitstreamFeatures& features) {
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) {
    return absl::InternalError("webp: ABI version mismatch");
  }
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  const WebPData data{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
  AnimDecoderGuard guard;
  guard.decoder = WebPAnimDecoderNew(&data, &options);
  if (guard.decoder == nullptr) {
    return WebpError("corrupt or truncated animation (its frames cannot be read)");
  }
  uint8_t* canvas = nullptr;
  int timestamp_ms = 0;
  if (!WebPAnimDecoderGetNext(guard.decoder, &canvas, &timestamp_ms)) {
    return WebpError("the animation's first frame cannot be decoded (truncated or corrupt)");
  }
  DecodedImage image;
  image.width = features.width;
  image.height = features.height;
  image.has_alpha = features.has_alpha != 0;
  image.format = "webp";
  const size_t num_pixels = size_t{static_cast<size_t>(image.width)} * image.height;
  if (image.has_alpha) {
    image.pixels.assign(canvas, canvas + num_pixels * 4);
    return image;
  }
  image.pixels.resize(num_pixels * 3);
  for (size_t i = 0; i < num_pixels; ++i) std::memcpy(&image.pixels[i * 3], &canvas[i * 4], 3);
  return image;
}

}  // namespace

absl::StatusOr<DecodedImage> DecodeWebp(std::string_view bytes, const ImageDecodeLimits& limits) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status =
      WebPGetFeatures(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &features);
  if (status != VP8_STATUS_OK) return WebpError(DescribeStatus(status));
  absl::Status size_ok =
      CheckImageDimensions("webp", "image", features.width, features.height, limits);
  if (!size_ok.ok()) return size_ok;
  if (features.has_animation) return DecodeFirstWebpFrame(bytes, features);
  return DecodeStillWebp(bytes, features);
}

}  // namespace strata::media
