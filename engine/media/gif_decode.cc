// GIF with giflib: the first frame only, composed on the logical screen (the canvas outside the
// frame holds the frame's transparent index when it has one, else palette index 0, as Pillow
// fills it), interlacing undone, palette expanded to RGB, or RGBA when the first frame's Graphic
// Control Extension names a transparent index (that entry gets alpha 0). A file without any
// color table is grayscale (index i is gray level i), as Pillow reads it. Frames are read
// record by record, never slurped, so a file's later frames cost nothing. giflib reports
// errors by return codes; nothing here longjmps.
#include <gif_lib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/media/image_codecs.h"

namespace strata::media {
namespace {

struct GifSource {
  const GifByteType* data;
  size_t size;
  size_t offset;
};

int ReadFromMemory(GifFileType* gif, GifByteType* out, int length) {
  auto* source = static_cast<GifSource*>(gif->UserData);
  const size_t n =
      std::min(static_cast<size_t>(std::max(length, 0)), source->size - source->offset);
  std::memcpy(out, source->data + source->offset, n);
  source->offset += n;
  return static_cast<int>(n);
}

absl::Status GifError(int code) {
  const char* reason =
      code == D_GIF_ERR_READ_FAILED ? "the file is truncated" : GifErrorString(code);
  return absl::InvalidArgumentError(
      absl::StrCat("invalid gif image: ", reason != nullptr ? reason : "unknown giflib error"));
}

struct GifGuard {
  GifFileType* gif = nullptr;
  ~GifGuard() {
    int error = 0;
    if (gif != nullptr) DGifCloseFile(gif, &error);
  }
};

// Reads one extension record (all its sub-blocks); a Graphic Control Extension sets
// `transparent_index` (-1 when it names none).
absl::Status ReadExtension(GifFileType* gif, int* transparent_index) {
  int code = 0;
  GifByteType* block = nullptr;
  if (DGifGetExtension(gif, &code, &block) == GIF_ERROR) return GifError(gif->Error);
  if (code == GRAPHICS_EXT_FUNC_CODE && block != nullptr) {
    GraphicsControlBlock gcb;
    if (DGifExtensionToGCB(block[0], block + 1, &gcb) == GIF_ERROR) {
      return absl::InvalidArgumentError("invalid gif image: bad graphic control extension");
    }
    *transparent_index = gcb.TransparentColor;
  }
  while (block != nullptr) {
    if (DGifGetExtensionNext(gif, &block) == GIF_ERROR) return GifError(gif->Error);
  }
  return absl::OkStatus();
}

// Decodes the frame whose descriptor was just read into `indices` (the canvas, row-major),
// clipping it to the canvas and undoing the interlaced row order.
absl::Status ReadFrameIndices(GifFileType* gif, std::vector<GifByteType>& indices) {
  const GifImageDesc& frame = gif->Image;
  std::vector<GifByteType> line(frame.Width);
  constexpr int kPassStart[] = {0, 4, 2, 1};
  constexpr int kPassStep[] = {8, 8, 4, 2};
  const int num_passes = frame.Interlace ? 4 : 1;
  for (int pass = 0; pass < num_passes; ++pass) {
    const int start = frame.Interlace ? kPassStart[pass] : 0;
    const int step = frame.Interlace ? kPassStep[pass] : 1;
    for (int y = start; y < frame.Height; y += step) {
      if (DGifGetLine(gif, line.data(), frame.Width) == GIF_ERROR) return GifError(gif->Error);
      const int64_t canvas_y = int64_t{frame.Top} + y;
      if (canvas_y >= gif->SHeight) continue;
      for (int x = 0; x < frame.Width; ++x) {
        const int64_t canvas_x = int64_t{frame.Left} + x;
        if (canvas_x < gif->SWidth) indices[canvas_y * gif->SWidth + canvas_x] = line[x];
      }
    }
  }
  return absl::OkStatus();
}

// Palette indices → RGB, or RGBA with alpha 0 at `transparent_index` (when it is >= 0).
DecodedImage ExpandPalette(const std::vector<GifByteType>& indices, const ColorMapObject* colors,
                           int width, int height, int transparent_index) {
  DecodedImage image;
  image.width = width;
  image.height = height;
  image.has_alpha = transparent_index >= 0;
  image.format = "gif";
  const int channels = image.has_alpha ? 4 : 3;
  image.pixels.resize(indices.size() * channels);
  for (size_t i = 0; i < indices.size(); ++i) {
    const int index = indices[i];
    uint8_t* out = &image.pixels[i * channels];
    if (colors == nullptr) {
      out[0] = out[1] = out[2] = static_cast<uint8_t>(index);
    } else if (index < colors->ColorCount) {
      out[0] = colors->Colors[index].Red;
      out[1] = colors->Colors[index].Green;
      out[2] = colors->Colors[index].Blue;
    } else {
      out[0] = out[1] = out[2] = 0;
    }
    if (image.has_alpha) out[3] = index == transparent_index ? 0 : 255;
  }
  return image;
}

}  // namespace

absl::StatusOr<DecodedImage> DecodeGif(std::string_view bytes, const ImageDecodeLimits& limits) {
  GifSource source{reinterpret_cast<const GifByteType*>(bytes.data()), bytes.size(), 0};
  int open_error = 0;
  GifGuard guard;
  guard.gif = DGifOpen(&source, ReadFromMemory, &open_error);
  if (guard.gif == nullptr) return GifError(open_error);
  GifFileType* gif = guard.gif;
  absl::Status size_ok = CheckImageDimensions("gif", "image", gif->SWidth, gif->SHeight, limits);
  if (!size_ok.ok()) return size_ok;

  int transparent_index = NO_TRANSPARENT_COLOR;
  while (true) {
    GifRecordType record = UNDEFINED_RECORD_TYPE;
    if (DGifGetRecordType(gif, &record) == GIF_ERROR) return GifError(gif->Error);
    if (record == EXTENSION_RECORD_TYPE) {
      absl::Status extension_ok = ReadExtension(gif, &transparent_index);
      if (!extension_ok.ok()) return extension_ok;
      continue;
    }
    if (record != IMAGE_DESC_RECORD_TYPE) {
      return absl::InvalidArgumentError("invalid gif image: the file has no image");
    }
    if (DGifGetImageDesc(gif) == GIF_ERROR) return GifError(gif->Error);
    absl::Status frame_ok =
        CheckImageDimensions("gif", "first frame", gif->Image.Width, gif->Image.Height, limits);
    if (!frame_ok.ok()) return frame_ok;
    const int fill = transparent_index >= 0 ? transparent_index : 0;
    std::vector<GifByteType> indices(size_t{static_cast<size_t>(gif->SWidth)} * gif->SHeight,
                                     static_cast<GifByteType>(fill));
    absl::Status frame_read = ReadFrameIndices(gif, indices);
    if (!frame_read.ok()) return frame_read;
    const ColorMapObject* colors =
        gif->Image.ColorMap != nullptr ? gif->Image.ColorMap : gif->SColorMap;
    return ExpandPalette(indices, colors, gif->SWidth, gif->SHeight, transparent_index);
  }
}

}  // namespace strata::media
