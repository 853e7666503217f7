// The image resampler of Kimi K3's preprocessing: Pillow's antialiased bicubic
// (Image.resize(size, Image.BICUBIC), reducing_gap=None, Pillow 9.x's libImaging/Resample.c
// algorithm), written from its description:
//
//   separable, horizontal pass first then vertical, each pass skipped when that side keeps its
//   size; Keys cubic with a = −0.5, support 2 input pixels scaled by the downscale factor
//   (max(1, in/out)), so a downscale averages (antialiases) instead of sampling; output pixel i
//   centred at (i + 0.5) · in/out; taps clipped at the border and renormalised to sum 1; the
//   weights rounded to 22-bit fixed point, sums rounded, clamped to 0..255 and stored as 8-bit
//   between the passes.
//
// Straight-alpha RGBA is resized premultiplied, as Pillow does for mode RGBA (RGBA→RGBa with
// round(c·a/255), resize, RGBa→RGBA with c·255/a truncated and clamped; a = 0 or 255 unchanged).
#pragma once

#include <cstdint>
#include <vector>

namespace strata::media {

// [new_height, new_width, channels] from [height, width, channels] 8-bit interleaved pixels;
// channels 1, 3 or 4, each filtered alike. Sizes >= 1.
std::vector<uint8_t> ResizeBicubic(const std::vector<uint8_t>& pixels, int width, int height,
                                   int channels, int new_width, int new_height);

// The same for straight-alpha RGBA (4 channels), through premultiplied alpha as above.
std::vector<uint8_t> ResizeBicubicStraightAlpha(const std::vector<uint8_t>& rgba, int width,
                                                int height, int new_width, int new_height);

}  // namespace strata::media
