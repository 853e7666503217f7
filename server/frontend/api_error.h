// OpenAI's error object and how Strata's statuses map onto it (docs/api.md, "Errors"):
//
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens",
//              "code": "invalid_value"}}
//
// Validation code returns absl::Status; the field (`param`) and the machine-readable `code`
// travel as payloads of the status (ApiErrorStatus), so one Status type crosses every layer
// and the HTTP layer turns it into the right status line, type, code and param.
//
//   absl::Status          HTTP  type                   default code
//   InvalidArgument       400   invalid_request_error  invalid_value
//   Unauthenticated       401   invalid_request_error  invalid_api_key
//   NotFound              404   invalid_request_error  not_found
//   FailedPrecondition    405   invalid_request_error  method_not_allowed   (wrong method)
//   OutOfRange            413   invalid_request_error  request_too_large
//   ResourceExhausted     429   rate_limit_error       rate_limit_exceeded  (+ Retry-After)
//   Unavailable           503   server_error           service_unavailable
//   anything else         500   server_error           internal_error
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"

namespace strata::frontend {

struct ApiError {
  int http_status = 500;
  std::string message;
  std::string type;                  // "invalid_request_error", "rate_limit_error", "server_error"
  std::optional<std::string> param;  // the request field at fault (JSON null when absent)
  std::string code;  // always a string ("invalid_value", "context_length_exceeded", ...)

  // {"error": {...}} as OpenAI sends it.
  nlohmann::json ToJson() const;
  // Bytes that are not UTF-8 (a message quoting a request cut short) become U+FFFD rather than
  // an exception.
  std::string ToJsonString() const {
    return ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
};

// A status carrying `param` and `code` payloads. `code` empty: the default of `status_code`.
absl::Status ApiErrorStatus(absl::StatusCode status_code, std::string_view message,
                            std::string_view param = {}, std::string_view code = {});

// Shorthands for the common 400s.
absl::Status InvalidField(std::string_view param, std::string_view message,
                          std::string_view code = "invalid_value");
absl::Status InvalidType(std::string_view param, std::string_view expected);
absl::Status MissingField(std::string_view param);

// The error object for `status` (must not be ok).
ApiError ToApiError(const absl::Status& status);

// `status` with its param renamed (an endpoint that translates its request into another's:
// errors name the fields the client sent). Statuses without a param pass unchanged.
absl::Status WithParamRenamed(const absl::Status& status,
                              const std::function<std::string(const std::string&)>& rename);

// HTTP status of a Status code (table above).
int HttpStatusFor(absl::StatusCode code);

}  // namespace strata::frontend
