// libFuzzer target: ParseDataUrl on arbitrary text (built by tests/fuzz/run_fuzz.sh), then
// DecodeImage on the payload it yields. The payload never exceeds the byte limit, and a
// re-encoded payload parses back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/check.h"
#include "engine/media/image_decode.h"
#include "engine/tokenizer/base64.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int64_t kMaxBytes = 4096;
  const std::string_view url(reinterpret_cast<const char*>(data), size);
  auto parsed = strata::media::ParseDataUrl(url, kMaxBytes);
  if (!parsed.ok()) {
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument) << parsed.status();
    CHECK(!parsed.status().message().empty());
    return 0;
  }
  CHECK_LE(static_cast<int64_t>(parsed->bytes.size()), kMaxBytes);
  const std::string again =
      "data:" + parsed->mime_type + ";base64," + strata::engine::Base64Encode(parsed->bytes);
  auto reparsed = strata::media::ParseDataUrl(again, kMaxBytes);
  CHECK(reparsed.ok()) << reparsed.status();
  CHECK(reparsed->bytes == parsed->bytes);

  strata::media::ImageDecodeLimits limits;
  limits.max_side_pixels = 1024;
  limits.max_pixels = 1 << 18;
  auto image = strata::media::DecodeImage(parsed->bytes, limits);
  if (!image.ok()) CHECK(image.status().code() == absl::StatusCode::kInvalidArgument);
  return 0;
}
