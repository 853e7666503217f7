#include "engine/media/test_image_encoders.h"

#include <gif_lib.h>
#include <png.h>
#include <webp/encode.h>
#include <webp/mux.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

// After <cstdio>: jpeglib.h uses size_t and FILE without including their headers.
#include <jpeglib.h>

#include "core/check.h"

namespace strata::media::testing {
namespace {

void AppendPng(png_structp png, png_bytep data, size_t length) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<char*>(data), length);
}

void FlushPng(png_structp) {}

// The whole write in one setjmp frame; `rows` and `palette` are prepared by the caller.
bool WritePng(png_structp png, png_infop info, const PngSpec& spec, png_bytepp rows,
              png_colorp palette, int num_palette, png_color_16* trns_color) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_IHDR(png, info, spec.width, spec.height, spec.bit_depth, spec.color_type,
               spec.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (num_palette > 0) png_set_PLTE(png, info, palette, num_palette);
  if (!spec.trns.empty()) {
    png_set_tRNS(png, info, spec.trns.data(), static_cast<int>(spec.trns.size()), nullptr);
  } else if (trns_color != nullptr) {
    png_set_tRNS(png, info, nullptr, 0, trns_color);
  }
  png_set_rows(png, info, rows);
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  return true;
}

}  // namespace

std::string EncodePng(const PngSpec& spec) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  CHECK(png != nullptr);
  png_infop info = png_create_info_struct(png);
  CHECK(info != nullptr);
  png_set_write_fn(png, &out, AppendPng, FlushPng);
  const size_t row_bytes = spec.rows.size() / spec.height;
  CHECK_EQ(row_bytes * spec.height, spec.rows.size());
  std::vector<png_bytep> rows(spec.height);
  for (int y = 0; y < spec.height; ++y) {
    rows[y] = const_cast<png_bytep>(spec.rows.data()) + y * row_bytes;
  }
  std::vector<png_color> palette(spec.palette.size() / 3);
  for (size_t i = 0; i < palette.size(); ++i) {
    palette[i] = {spec.palette[i * 3], spec.palette[i * 3 + 1], spec.palette[i * 3 + 2]};
  }
  png_color_16 trns_color{};
  if (spec.trns_color.size() == 1) trns_color.gray = spec.trns_color[0];
  if (spec.trns_color.size() == 3) {
    trns_color.red = spec.trns_color[0];
    trns_color.green = spec.trns_color[1];
    trns_color.blue = spec.trns_color[2];
  }
  const bool ok =
      WritePng(png, info, spec, rows.data(), palette.data(), static_cast<int>(palette.size()),
               spec.trns_color.empty() ? nullptr : &trns_color);
  png_destroy_write_struct(&png, &info);
  CHECK(ok) << "libpng failed to write the test image";
  return out;
}

std::string EncodeJpeg(const std::vector<uint8_t>& pixels, int width, int height, int components,
                       int quality, bool progressive) {
  CHECK_EQ(pixels.size(), static_cast<size_t>(width) * height * components);
  jpeg_compress_struct cinfo;
  jpeg_error_mgr error;
  cinfo.err = jpeg_std_error(&error);  // test inputs are valid: the default exit() is fine here
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  if (components == 4) cinfo.write_Adobe_marker = TRUE;
  jpeg_set_quality(&cinfo, quality, TRUE);
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(width) * components);
  while (cinfo.next_scanline < cinfo.image_height) {
    const uint8_t* src = &pixels[static_cast<size_t>(cinfo.next_scanline) * width * components];
    for (size_t i = 0; i < row.size(); ++i) row[i] = components == 4 ? 255 - src[i] : src[i];
    JSAMPROW rows[1] = {row.data()};
    jpeg_write_scanlines(&cinfo, rows, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buffer), size);
  std::free(buffer);
  return out;
}

std::string EncodeWebp(const std::vector<uint8_t>& pixels, int width, int height, int channels,
                       bool lossless) {
  CHECK_EQ(pixels.size(), static_cast<size_t>(width) * height * channels);
  uint8_t* output = nullptr;
  const int stride = width * channels;
  size_t size = 0;
  if (lossless) {
    size = channels == 4 ? WebPEncodeLosslessRGBA(pixels.data(), width, height, stride, &output)
                         : WebPEncodeLosslessRGB(pixels.data(), width, height, stride, &output);
  } else {
    size = channels == 4 ? WebPEncodeRGBA(pixels.data(), width, height, stride, 90, &output)
                         : WebPEncodeRGB(pixels.data(), width, height, stride, 90, &output);
  }
  CHECK_GT(size, 0u) << "libwebp failed to encode the test image";
  std::string out(reinterpret_cast<char*>(output), size);
  WebPFree(output);
  return out;
}

std::string EncodeAnimatedWebp(const std::vector<std::vector<uint8_t>>& rgba_frames, int width,
                               int height) {
  WebPAnimEncoderOptions options;
  CHECK(WebPAnimEncoderOptionsInit(&options));
  WebPAnimEncoder* encoder = WebPAnimEncoderNew(width, height, &options);
  CHECK(encoder != nullptr);
  WebPConfig config;
  CHECK(WebPConfigInit(&config));
  config.lossless = 1;
  int timestamp_ms = 0;
  for (const std::vector<uint8_t>& frame : rgba_frames) {
    WebPPicture picture;
    CHECK(WebPPictureInit(&picture));
    picture.width = width;
    picture.height = height;
    picture.use_argb = 1;
    CHECK(WebPPictureImportRGBA(&picture, frame.data(), width * 4));
    CHECK(WebPAnimEncoderAdd(encoder, &picture, timestamp_ms, &config));
    WebPPictureFree(&picture);
    timestamp_ms += 100;
  }
  CHECK(WebPAnimEncoderAdd(encoder, nullptr, timestamp_ms, nullptr));
  WebPData data;
  WebPDataInit(&data);
  CHECK(WebPAnimEncoderAssemble(encoder, &data));
  std::string out(reinterpret_cast<const char*>(data.bytes), data.size);
  WebPDataClear(&data);
  WebPAnimEncoderDelete(encoder);
  return out;
}

namespace {

int AppendGif(GifFileType* gif, const GifByteType* data, int length) {
  static_cast<std::string*>(gif->UserData)->append(reinterpret_cast<const char*>(data), length);
  return length;
}

void PutGifFrame(GifFileType* gif, const GifSpec& spec, const std::vector<uint8_t>& frame) {
  if (spec.transparent_index >= 0) {
    GraphicsControlBlock gcb{};
    gcb.DisposalMode = DISPOSAL_UNSPECIFIED;
    gcb.DelayTime = 10;
    gcb.TransparentColor = spec.transparent_index;
    GifByteType extension[4];
    const size_t length = EGifGCBToExtension(&gcb, extension);
    CHECK_EQ(EGifPutExtension(gif, GRAPHICS_EXT_FUNC_CODE, static_cast<int>(length), extension),
             GIF_OK);
  }
  CHECK_EQ(EGifPutImageDesc(gif, 0, 0, spec.width, spec.height, spec.interlaced, nullptr), GIF_OK);
  std::vector<int> order;
  if (spec.interlaced) {
    for (const auto& [start, step] : {std::pair{0, 8}, {4, 8}, {2, 4}, {1, 2}}) {
      for (int y = start; y < spec.height; y += step) order.push_back(y);
    }
  } else {
    for (int y = 0; y < spec.height; ++y) order.push_back(y);
  }
  for (const int y : order) {
    auto* line = const_cast<GifPixelType*>(&frame[static_cast<size_t>(y) * spec.width]);
    CHECK_EQ(EGifPutLine(gif, line, spec.width), GIF_OK);
  }
}

}  // namespace

std::string EncodeGif(const GifSpec& spec) {
  std::string out;
  int error = 0;
  GifFileType* gif = EGifOpen(&out, AppendGif, &error);
  CHECK(gif != nullptr) << GifErrorString(error);
  const int num_colors = static_cast<int>(spec.palette.size() / 3);
  ColorMapObject* colors = GifMakeMapObject(num_colors, nullptr);
  CHECK(colors != nullptr) << "palette size " << num_colors << " is not a power of two";
  for (int i = 0; i < num_colors; ++i) {
    colors->Colors[i] = {spec.palette[i * 3], spec.palette[i * 3 + 1], spec.palette[i * 3 + 2]};
  }
  EGifSetGifVersion(gif, true);
  CHECK_EQ(EGifPutScreenDesc(gif, spec.width, spec.height, 8, 0, colors), GIF_OK);
  for (const std::vector<uint8_t>& frame : spec.frames) PutGifFrame(gif, spec, frame);
  CHECK_EQ(EGifCloseFile(gif, &error), GIF_OK);
  GifFreeMapObject(colors);
  return out;
}

}  // namespace strata::media::testing
