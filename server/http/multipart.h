// multipart/form-data bodies (RFC 7578): how clients upload files (OpenAI's POST /v1/files, as
// the openai SDKs and curl -F send it).
//
//   --BOUNDARY\r\n
//   Content-Disposition: form-data; name="purpose"\r\n\r\n
//   batch\r\n
//   --BOUNDARY\r\n
//   Content-Disposition: form-data; name="file"; filename="in.jsonl"\r\n
//   Content-Type: application/octet-stream\r\n\r\n
//   …bytes…\r\n
//   --BOUNDARY--\r\n
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::http {

struct FormPart {
  std::string name;
  std::string filename;      // empty when the part is not a file
  std::string content_type;  // as sent; empty when absent
  std::string_view data;     // into the body
};

// The parts of `body` given its Content-Type header value. InvalidArgument naming what is
// wrong: not multipart/form-data, no boundary, a part without a name, a missing closing
// delimiter.
absl::StatusOr<std::vector<FormPart>> ParseMultipartForm(std::string_view content_type,
                                                         std::string_view body);

}  // namespace strata::http
