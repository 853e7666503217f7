// PNG with libpng: every color type and bit depth to 8-bit RGB or RGBA (palette, gray and tRNS
// expanded, 16-bit channels reduced to their high byte as Pillow does, Adam7 deinterlaced; no
// gamma or color-profile conversion, as Pillow). The first image only (an APNG's default image).
//
// libpng reports errors by longjmp. Each call into libpng runs in a small function that holds
// the setjmp and no C++ object with a destructor, so a longjmp skips nothing but libpng's own C
// frames and our POD callbacks; the png structs are freed by the caller's guard.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/media/image_codecs.h"

namespace strata::media {
namespace {

// Ancillary chunks (text, ICC profiles) are read into memory and zTXt/iCCP inflated: bound both
// so a small file cannot expand into a large allocation before the image is reached.
constexpr png_alloc_size_t kMaxChunkBytes = png_alloc_size_t{8} << 20;
constexpr png_uint_32 kMaxCachedChunks = 128;

// What libpng's callbacks see (through png_get_io_ptr / png_get_error_ptr): plain data only.
struct PngSource {
  const unsigned char* data;
  size_t size;
  size_t offset;
  char message[256];
};

void ReadFromMemory(png_structp png, png_bytep out, size_t length) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (length > source->size - source->offset) {
    png_error(png, "the file is truncated (it ends before the image data does)");
  }
  std::memcpy(out, source->data + source->offset, length);
  source->offset += length;
}

[[noreturn]] void OnPngError(png_structp png, png_const_charp message) {
  auto* source = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(source->message, sizeof(source->message), "%s", message);
  png_longjmp(png, 1);
}

void OnPngWarning(png_structp, png_const_charp) {}

// Reads the chunks up to the first IDAT (IHDR, PLTE, tRNS, ...). False after a libpng error.
bool ReadPngInfo(png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_chunk_malloc_max(png, kMaxChunkBytes);
  png_set_chunk_cache_max(png, kMaxCachedChunks);
  png_read_info(png, info);
  return true;
}

// Asks libpng for 8-bit RGB(A) rows. False after a libpng error.
bool SetPngTransforms(png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_strip_16(png);
  png_set_packing(png);
  png_set_palette_to_rgb(png);
  png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  return true;
}

bool ReadPngRows(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  return true;
}

absl::Status PngError(const PngSource& source) {
  return absl::InvalidArgumentError(absl::StrCat("invalid png image: ", source.message));
}

// Frees the png structs on every path (a longjmp never crosses it: see the file comment).
struct PngReadGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngReadGuard() { png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr); }
};

}  // namespace

absl::StatusOr<DecodedImage> DecodePng(std::string_view bytes, const ImageDecodeLimits& limits) {
  PngSource source{reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), 0, {}};
  PngReadGuard guard;
  guard.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &source, OnPngError, OnPngWarning);
  if (guard.png == nullptr) return absl::InternalError("png: png_create_read_struct failed");
  guard.info = png_create_info_struct(guard.png);
  if (guard.info == nullptr) return absl::InternalError("png: png_create_info_struct failed");
  png_set_read_fn(guard.png, &source, ReadFromMemory);

  if (!ReadPngInfo(guard.png, guard.info)) return PngError(source);
  const png_uint_32 width = png_get_image_width(guard.png, guard.info);
  const png_uint_32 height = png_get_image_height(guard.png, guard.info);
  absl::Status size_ok = CheckImageDimensions("png", "image", width, height, limits);
  if (!size_ok.ok()) return size_ok;

  const int color_type = png_get_color_type(guard.png, guard.info);
  const bool has_alpha = (color_type & PNG_COLOR_MASK_ALPHA) != 0 ||
                         png_get_valid(guard.png, guard.info, PNG_INFO_tRNS) != 0;
  if (!SetPngTransforms(guard.png, guard.info)) return PngError(source);
  const int channels = has_alpha ? 4 : 3;
  if (png_get_channels(guard.png, guard.info) != channels ||
      png_get_rowbytes(guard.png, guard.info) != size_t{width} * channels) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid png image: unsupported color type ", color_type, " with bit depth ",
                     static_cast<int>(png_get_bit_depth(guard.png, guard.info))));
  }

  DecodedImage image;
  image.width = static_cast<int>(width);
  image.height = static_cast<int>(height);
  image.has_alpha = has_alpha;
  image.format = "png";
  image.pixels.resize(size_t{width} * height * channels);
  std::vector<png_bytep> rows(height);
  for (png_uint_32 y = 0; y < height; ++y) {
    rows[y] = image.pixels.data() + size_t{y} * width * channels;
  }
  if (!ReadPngRows(guard.png, rows.data())) return PngError(source);
  return image;
}

}  // namespace strata::media
