// ParseDataUrl (engine/media/image_decode.h): RFC 2397 `data:` URLs with base64 payloads.
//
// The payload is standard base64 (RFC 4648 alphabet, '=' padding required, as Python's
// base64.b64decode requires it). ASCII whitespace (space, tab, CR, LF, FF) anywhere in the
// payload is skipped, as browsers' forgiving base64 and Python's decoder skip it (clients that
// wrap at 76 columns work); any other character outside the alphabet is an error naming its
// offset in the URL. The decoded size is computed from the character count and refused over
// max_bytes before anything is decoded. Percent-encoded payloads are not accepted.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/check.h"
#include "engine/media/image_decode.h"
#include "engine/tokenizer/base64.h"

namespace strata::media {
namespace {

constexpr absl::string_view kScheme = "data:";

bool IsBase64Whitespace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f';
}

bool IsBase64Alphabet(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/';
}

std::string Printable(char c) {
  const auto byte = static_cast<unsigned char>(c);
  if (absl::ascii_isprint(byte)) return absl::StrCat("'", absl::string_view(&c, 1), "'");
  constexpr char kHex[] = "0123456789abcdef";
  return absl::StrCat("byte 0x", std::string{kHex[byte >> 4], kHex[byte & 15]});
}

absl::Status NotADataUrl(absl::string_view url) {
  const size_t colon = url.find(':');
  const bool has_scheme = colon != absl::string_view::npos && colon > 0 &&
                          url.substr(0, colon).find_first_of("/?#") == absl::string_view::npos;
  return absl::InvalidArgumentError(absl::StrCat(
      "not a data URL (",
      has_scheme ? absl::StrCat("scheme \"", absl::AsciiStrToLower(url.substr(0, colon)), "\"")
                 : std::string("no scheme"),
      "): only data:<mime type>;base64,<payload> URLs are accepted here"));
}

// The significant (non-whitespace) characters of a base64 payload and its padding, after
// checking every character; `payload_offset` is where the payload starts in the URL (for the
// error's position).
struct Base64Shape {
  int64_t num_chars = 0;
  int num_padding = 0;
  bool has_whitespace = false;
};

absl::StatusOr<Base64Shape> ScanBase64(absl::string_view payload, size_t payload_offset) {
  Base64Shape shape;
  for (size_t i = 0; i < payload.size(); ++i) {
    const char c = payload[i];
    if (IsBase64Whitespace(c)) {
      shape.has_whitespace = true;
      continue;
    }
    const bool padding = c == '=';
    if ((!padding && !IsBase64Alphabet(c)) || (!padding && shape.num_padding > 0) ||
        (padding && shape.num_padding == 2)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid base64 in data URL: ", Printable(c), " at offset ", payload_offset + i,
          !padding && shape.num_padding > 0 ? " follows the '=' padding"
                                            : " is not in the base64 alphabet (A-Z a-z 0-9 + /)"));
    }
    shape.num_padding += padding;
    ++shape.num_chars;
  }
  if (shape.num_chars % 4 != 0 || (shape.num_padding > 0 && shape.num_chars == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid base64 in data URL: the payload has ", shape.num_chars,
        " base64 characters, not a multiple of 4 (truncated, or missing '=' padding)"));
  }
  return shape;
}

}  // namespace

absl::StatusOr<DataUrl> ParseDataUrl(std::string_view url_text, int64_t max_bytes) {
  const absl::string_view url(url_text.data(), url_text.size());
  if (!absl::StartsWithIgnoreCase(url, kScheme)) return NotADataUrl(url);
  const size_t comma = url.find(',');
  if (comma == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        "invalid data URL: no ',' separates the header from the data");
  }
  const absl::string_view header = url.substr(kScheme.size(), comma - kScheme.size());
  const std::vector<absl::string_view> parts = absl::StrSplit(header, ';');
  if (parts.size() < 2 ||
      !absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(parts.back()), "base64")) {
    return absl::InvalidArgumentError(
        absl::StrCat("data URL is not base64-encoded (its header is \"", header,
                     "\"; only data:<mime type>;base64,<payload> is accepted)"));
  }
  const absl::string_view payload = url.substr(comma + 1);
  absl::StatusOr<Base64Shape> shape = ScanBase64(payload, comma + 1);
  if (!shape.ok()) return shape.status();
  const int64_t num_bytes = shape->num_chars / 4 * 3 - shape->num_padding;
  if (num_bytes > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data URL payload is ", num_bytes, " bytes: over the limit of ", max_bytes, " bytes"));
  }

  DataUrl result;
  result.mime_type = absl::AsciiStrToLower(absl::StripAsciiWhitespace(parts.front()));
  std::string compact;
  if (shape->has_whitespace) {
    compact.reserve(shape->num_chars);
    for (const char c : payload) {
      if (!IsBase64Whitespace(c)) compact.push_back(c);
    }
  }
  const absl::string_view base64 = shape->has_whitespace ? absl::string_view(compact) : payload;
  std::optional<std::string> bytes =
      engine::Base64Decode(std::string_view(base64.data(), base64.size()));
  CHECK(bytes.has_value()) << "base64 payload passed the scan but not the decoder";
  result.bytes = std::move(*bytes);
  return result;
}

}  // namespace strata::media
