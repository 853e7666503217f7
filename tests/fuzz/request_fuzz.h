// Shared by the fuzz targets of request bodies (chat, completions, responses, messages, batch
// lines, gRPC messages): a body goes through the bounded JSON parser (core/json_limits.h) and
// an endpoint's parser. Whatever the input, an error is a 4xx whose message names what is
// wrong and whose JSON error body can be written (its text is UTF-8); nothing crashes,
// throws, hangs or overflows the stack.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "server/frontend/api_error.h"
#include "server/frontend/messages_request.h"
#include "server/frontend/openai_request.h"

namespace strata::fuzz {

// A served model's limits, its vocabulary small enough that token ids past it are found.
inline frontend::RequestLimits FuzzLimits() {
  frontend::RequestLimits limits;
  limits.vocab_size = 1000;
  return limits;
}

inline void CheckRequestError(const absl::Status& status) {
  CHECK(!status.ok());
  const frontend::ApiError error = frontend::ToApiError(status);
  CHECK_GE(error.http_status, 400);
  CHECK_LT(error.http_status, 500);
  CHECK(!error.message.empty());
  bool utf8 = true;
  try {
    (void)error.ToJson().dump();  // strict: throws on bytes that are not UTF-8
  } catch (const nlohmann::json::exception&) {
    utf8 = false;
  }
  CHECK(utf8);
}

// `body` through ParseJsonBody, then `parse` (a frontend::Parse*Request).
template <typename Parse>
void FuzzBody(std::string_view body, Parse parse) {
  absl::StatusOr<frontend::Json> json = frontend::ParseJsonBody(body);
  if (!json.ok()) {
    CheckRequestError(json.status());
    return;
  }
  const auto request = parse(*json);
  if (!request.ok()) CheckRequestError(request.status());
}

}  // namespace strata::fuzz
