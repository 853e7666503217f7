// JPEG with libjpeg-turbo: baseline and progressive, YCbCr and grayscale to RGB, CMYK and YCCK
// to RGB the way Pillow converts them (Adobe's inverted CMYK assumed, as Pillow does). Default
// decoding settings (ISLOW IDCT, fancy upsampling), as Pillow. No EXIF orientation is applied
// (Pillow does not either unless asked).
//
// libjpeg's default error_exit calls exit(): ours records the message and longjmps back to a
// setjmp in a small function that holds no C++ object with a destructor (the same discipline as
// png_decode.cc). Warnings that mean the data is truncated or corrupt are errors here (libjpeg
// would otherwise fill the missing part with gray); benign ones (extraneous bytes before a
// marker, an unknown JFIF revision) are ignored.
#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

// After <cstdio>: libjpeg's headers use size_t and FILE without including their headers.
#include <jpeglib.h>
// After jpeglib.h, which it extends.
#include <jerror.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/media/image_codecs.h"

namespace strata::media {
namespace {

// A progressive file may carry any number of scans, each a pass over the whole coefficient
// buffer: bound them (encoders write about 10; libjpeg-turbo's own fuzzers stop at 500).
constexpr int kMaxJpegScans = 256;

// libjpeg sees `error` (first member) through cinfo->err and `progress` through cinfo->progress.
struct JpegState {
  jpeg_error_mgr error;
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
};

JpegState* StateOf(j_common_ptr cinfo) { return reinterpret_cast<JpegState*>(cinfo->err); }

[[noreturn]] void OnJpegError(j_common_ptr cinfo) {
  JpegState* state = StateOf(cinfo);
  cinfo->err->format_message(cinfo, state->message);
  std::longjmp(state->jump, 1);
}

bool IsCorruptDataWarning(int code) {
  return code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE ||
         code == JWRN_MUST_RESYNC;
}

void OnJpegMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0 || !IsCorruptDataWarning(cinfo->err->msg_code)) return;
  JpegState* state = StateOf(cinfo);
  char text[JMSG_LENGTH_MAX];
  cinfo->err->format_message(cinfo, text);
  std::snprintf(state->message, sizeof(state->message), "%s%s", text,
                cinfo->err->msg_code == JWRN_JPEG_EOF ? " (the file is truncated)" : "");
  std::longjmp(state->jump, 1);
}

void OnJpegOutput(j_common_ptr) {}

void OnJpegProgress(j_common_ptr cinfo) {
  auto* decompress = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (decompress->input_scan_number <= kMaxJpegScans) return;
  JpegState* state = StateOf(cinfo);
  std::snprintf(state->message, sizeof(state->message),
                "the file has more than %d progressive scans", kMaxJpegScans);
  std::longjmp(state->jump, 1);
}

// Creates the decompressor over the bytes and reads the header (no pixel memory yet).
bool ReadJpegHeader(jpeg_decompress_struct* cinfo, JpegState* state, const unsigned char* data,
                    size_t size, bool* created) {
  if (setjmp(state->jump)) return false;
  jpeg_create_decompress(cinfo);
  *created = true;
  cinfo->progress = &state->progress;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  return true;
}

bool StartJpeg(jpeg_decompress_struct* cinfo, JpegState* state) {
  if (setjmp(state->jump)) return false;
  jpeg_start_decompress(cinfo);
  return true;
}

bool ReadJpegRows(jpeg_decompress_struct* cinfo, JpegState* state, JSAMPROW* rows) {
  if (setjmp(state->jump)) return false;
  while (cinfo->output_scanline < cinfo->output_height) {
    const JDIMENSION done = cinfo->output_scanline;
    jpeg_read_scanlines(cinfo, rows + done, cinfo->output_height - done);
  }
  return true;
}

absl::Status JpegError(const JpegState& state) {
  return absl::InvalidArgumentError(absl::StrCat("invalid jpeg image: ", state.message));
}

struct JpegGuard {
  jpeg_decompress_struct cinfo{};
  bool created = false;
  ~JpegGuard() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

// Pillow's CMYK→RGB on Adobe-inverted samples s: with C = 255 − s_c and nk = 255 − K = s_k,
// R = nk − round(C · nk / 255) (and likewise G, B); in place, 4 bytes in, 3 out.
void CmykToRgb(std::vector<uint8_t>& pixels, int64_t num_pixels) {
  for (int64_t i = 0; i < num_pixels; ++i) {
    const uint8_t* in = &pixels[i * 4];
    const int nk = in[3];
    int rgb[3];
    for (int c = 0; c < 3; ++c) {
      const int tmp = (255 - in[c]) * nk + 128;
      rgb[c] = nk - (((tmp >> 8) + tmp) >> 8);
    }
    for (int c = 0; c < 3; ++c) pixels[i * 3 + c] = static_cast<uint8_t>(rgb[c]);
  }
  pixels.resize(num_pixels * 3);
}

}  // namespace

absl::StatusOr<DecodedImage> DecodeJpeg(std::string_view bytes, const ImageDecodeLimits& limits) {
  JpegState state{};
  JpegGuard guard;
  guard.cinfo.err = jpeg_std_error(&state.error);
  state.error.error_exit = OnJpegError;
  state.error.emit_message = OnJpegMessage;
  state.error.output_message = OnJpegOutput;
  state.progress.progress_monitor = OnJpegProgress;
  jpeg_decompress_struct* cinfo = &guard.cinfo;
  if (!ReadJpegHeader(cinfo, &state, reinterpret_cast<const unsigned char*>(bytes.data()),
                      bytes.size(), &guard.created)) {
    return JpegError(state);
  }
  absl::Status size_ok =
      CheckImageDimensions("jpeg", "image", cinfo->image_width, cinfo->image_height, limits);
  if (!size_ok.ok()) return size_ok;

  const bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  // A backstop on libjpeg's own memory (a progressive file buffers every coefficient: at most
  // 4 components × 2 bytes per pixel); over it libjpeg fails with "Backing store not supported".
  const int64_t num_pixels = int64_t{cinfo->image_width} * cinfo->image_height;
  cinfo->mem->max_memory_to_use = static_cast<long>(num_pixels * 10 + (int64_t{32} << 20));
  if (!StartJpeg(cinfo, &state)) return JpegError(state);
  const int components = cinfo->output_components;
  if (cinfo->output_width != cinfo->image_width || cinfo->output_height != cinfo->image_height ||
      components != (cmyk ? 4 : 3)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid jpeg image: unsupported layout (",
                                                   cinfo->num_components, " components decoded to ",
                                                   components, ")"));
  }

  DecodedImage image;
  image.width = static_cast<int>(cinfo->output_width);
  image.height = static_cast<int>(cinfo->output_height);
  image.format = "jpeg";
  image.pixels.resize(static_cast<size_t>(num_pixels) * components);
  std::vector<JSAMPROW> rows(image.height);
  for (int y = 0; y < image.height; ++y) {
    rows[y] = image.pixels.data() + size_t{static_cast<size_t>(y)} * image.width * components;
  }
  if (!ReadJpegRows(cinfo, &state, rows.data())) return JpegError(state);
  if (cmyk) CmykToRgb(image.pixels, num_pixels);
  return image;
}

}  // namespace strata::media
