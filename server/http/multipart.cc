// multipart.h
#include "server/http/multipart.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace strata::http {
namespace {

// The value of `key=` among the `;`-separated parameters of a header value (quotes removed),
// or empty.
std::string Parameter(std::string_view header, std::string_view key) {
  for (absl::string_view piece :
       absl::StrSplit(absl::string_view(header.data(), header.size()), ';')) {
    piece = absl::StripAsciiWhitespace(piece);
    if (piece.size() <= key.size() || piece[key.size()] != '=' ||
        !absl::EqualsIgnoreCase(piece.substr(0, key.size()),
                                absl::string_view(key.data(), key.size()))) {
      continue;
    }
    absl::string_view value = piece.substr(key.size() + 1);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    return std::string(value);
  }
  return "";
}

}  // namespace

absl::StatusOr<std::vector<FormPart>> ParseMultipartForm(std::string_view content_type,
                                                         std::string_view body) {
  const absl::string_view type(content_type.data(), content_type.size());
  if (!absl::StartsWithIgnoreCase(absl::StripLeadingAsciiWhitespace(type), "multipart/form-data")) {
    return absl::InvalidArgumentError(
        absl::StrCat("the body must be multipart/form-data (got Content-Type '",
                     std::string(content_type), "')"));
  }
  const std::string boundary = Parameter(content_type, "boundary");
  if (boundary.empty() || boundary.size() > 70) {
    return absl::InvalidArgumentError(
        "the multipart/form-data Content-Type needs a boundary of 1 to 70 characters");
  }
  const std::string delimiter = "--" + boundary;
  size_t pos = body.find(delimiter);
  if (pos == std::string_view::npos) {
    return absl::InvalidArgumentError("the body does not contain the multipart boundary");
  }
  std::vector<FormPart> parts;
  while (true) {
    pos += delimiter.size();
    if (body.substr(pos, 2) == "--") return parts;  // the closing delimiter
    if (body.substr(pos, 2) != "\r\n") {
      return absl::InvalidArgumentError("a multipart boundary is not followed by CRLF");
    }
    pos += 2;
    const size_t head_end = body.find("\r\n\r\n", pos);
    if (head_end == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("multipart part ", parts.size() + 1, ": its headers do not end"));
    }
    FormPart part;
    for (absl::string_view line :
         absl::StrSplit(absl::string_view(body.data() + pos, head_end - pos), "\r\n")) {
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos) continue;
      const absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, colon));
      const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
      const std::string_view v(value.data(), value.size());
      if (absl::EqualsIgnoreCase(name, "content-disposition")) {
        part.name = Parameter(v, "name");
        part.filename = Parameter(v, "filename");
      } else if (absl::EqualsIgnoreCase(name, "content-type")) {
        part.content_type = std::string(v);
      }
    }
    if (part.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("multipart part ", parts.size() + 1,
                                                     " has no Content-Disposition form-data name"));
    }
    const size_t data_start = head_end + 4;
    const size_t next = body.find("\r\n" + delimiter, data_start);
    if (next == std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "multipart part '", part.name, "' is not closed by the boundary (a truncated body?)"));
    }
    part.data = body.substr(data_start, next - data_start);
    parts.push_back(std::move(part));
    pos = next + 2;
  }
}

}  // namespace strata::http
