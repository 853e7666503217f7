// multipart/form-data parsing: parts with names, filenames, types and binary data; the refusals.
#include "server/http/multipart.h"

#include <string>

#include <gtest/gtest.h>

namespace strata::http {
namespace {

TEST(Multipart, PartsCarryNamesFilenamesAndBytes) {
  constexpr char kData[] = "line 1\r\n--not-the-boundary\r\n\0\xff";  // a NUL inside
  const std::string data(kData, sizeof(kData) - 1);
  const std::string body =
      "preamble\r\n--XyZ\r\n"
      "Content-Disposition: form-data; name=\"purpose\"\r\n\r\n"
      "batch\r\n--XyZ\r\n"
      "content-disposition: form-data; name=file; filename=\"a b.jsonl\"\r\n"
      "Content-Type: application/jsonl\r\n\r\n" +
      data + "\r\n--XyZ--\r\n";
  absl::StatusOr<std::vector<FormPart>> parts =
      ParseMultipartForm("multipart/form-data; charset=utf-8; boundary=\"XyZ\"", body);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].name, "purpose");
  EXPECT_EQ((*parts)[0].data, "batch");
  EXPECT_EQ((*parts)[0].filename, "");
  EXPECT_EQ((*parts)[1].name, "file");
  EXPECT_EQ((*parts)[1].filename, "a b.jsonl");
  EXPECT_EQ((*parts)[1].content_type, "application/jsonl");
  EXPECT_EQ((*parts)[1].data, data);
}

TEST(Multipart, MalformedBodiesAreRefusedNamingWhy) {
  const std::string ok_part = "--b\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1";
  const std::pair<std::string, std::string> cases[][1] = {
      {{"application/json", "must be multipart/form-data"}},
      {{"multipart/form-data", "needs a boundary"}},
  };
  for (const auto& c : cases) {
    absl::StatusOr<std::vector<FormPart>> r = ParseMultipartForm(c[0].first, ok_part);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(c[0].second), std::string::npos) << r.status();
  }
  const std::pair<std::string, std::string> bodies[] = {
      {"no boundary here", "does not contain the multipart boundary"},
      {ok_part, "is not closed by the boundary"},
      {"--b\r\nContent-Type: text/plain\r\n\r\n1\r\n--b--", "has no Content-Disposition"},
      {"--b\r\nContent-Disposition: form-data; name=\"x\"", "its headers do not end"},
      {"--bX", "not followed by CRLF"},
  };
  for (const auto& [body, message] : bodies) {
    absl::StatusOr<std::vector<FormPart>> r =
        ParseMultipartForm("multipart/form-data; boundary=b", body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace strata::http
