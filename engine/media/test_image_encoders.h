// Test-only: small image files written with each codec library's own encoder, so the decoder
// tests (engine/media/*_test.cc) start from files no part of DecodeImage produced. Every
// function CHECK-fails on an encoder error (a broken test, not input).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::media::testing {

// A PNG with libpng. `rows` holds the raw samples in the file's own layout (packed for bit
// depths < 8, big-endian for 16), height × rowbytes. palette: RGB triplets for PNG_COLOR_TYPE_
// PALETTE; trns: alpha per palette entry, or for gray / RGB the transparent color as 1 or 3
// 16-bit values (png_color_16 fields gray / red, green, blue).
struct PngSpec {
  int width = 0;
  int height = 0;
  int color_type = 0;  // PNG_COLOR_TYPE_*
  int bit_depth = 8;
  bool interlaced = false;
  std::vector<uint8_t> rows;
  std::vector<uint8_t> palette;
  std::vector<uint8_t> trns;
  std::vector<uint16_t> trns_color;
};
std::string EncodePng(const PngSpec& spec);

// A JPEG with libjpeg-turbo from interleaved 8-bit samples: components 1 (gray), 3 (RGB) or 4
// (CMYK, written with an Adobe marker and inverted samples, as Photoshop and Pillow write it).
std::string EncodeJpeg(const std::vector<uint8_t>& pixels, int width, int height, int components,
                       int quality, bool progressive);

// WebP with libwebp: lossless or lossy, from RGB (3) or RGBA (4) pixels.
std::string EncodeWebp(const std::vector<uint8_t>& pixels, int width, int height, int channels,
                       bool lossless);
// An animated WebP (libwebpmux) of RGBA frames, each width × height.
std::string EncodeAnimatedWebp(const std::vector<std::vector<uint8_t>>& rgba_frames, int width,
                               int height);

// A GIF89a with giflib: a global palette (RGB triplets, 2..256 entries, a power of two), and
// frames of palette indices covering the whole screen; a Graphic Control Extension with the
// transparent index before each frame when transparent_index >= 0.
struct GifSpec {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> palette;
  std::vector<std::vector<uint8_t>> frames;
  int transparent_index = -1;
  bool interlaced = false;
};
std::string EncodeGif(const GifSpec& spec);

}  // namespace strata::media::testing
