#include "server/frontend/api_error.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/frontend/internal/strings.h"

namespace strata::frontend {
namespace {

using internal::Av;

constexpr char kParamPayload[] = "strata.api/param";
constexpr char kCodePayload[] = "strata.api/code";

const char* DefaultCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
      return "invalid_value";
    case absl::StatusCode::kUnauthenticated:
      return "invalid_api_key";
    case absl::StatusCode::kNotFound:
      return "not_found";
    case absl::StatusCode::kFailedPrecondition:
      return "method_not_allowed";
    case absl::StatusCode::kOutOfRange:
      return "request_too_large";
    case absl::StatusCode::kResourceExhausted:
      return "rate_limit_exceeded";
    case absl::StatusCode::kUnavailable:
      return "service_unavailable";
    default:
      return "internal_error";
  }
}

const char* TypeFor(int http_status) {
  if (http_status == 429) return "rate_limit_error";
  if (http_status >= 500) return "server_error";
  return "invalid_request_error";
}

}  // namespace

nlohmann::json ApiError::ToJson() const {
  nlohmann::json error = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}};
  if (param) error["param"] = *param;
  return {{"error", std::move(error)}};
}

absl::Status ApiErrorStatus(absl::StatusCode status_code, std::string_view message,
                            std::string_view param, std::string_view code) {
  absl::Status status(status_code, Av(message));
  if (!param.empty()) status.SetPayload(kParamPayload, absl::Cord(Av(param)));
  if (!code.empty()) status.SetPayload(kCodePayload, absl::Cord(Av(code)));
  return status;
}

absl::Status InvalidField(std::string_view param, std::string_view message, std::string_view code) {
  return ApiErrorStatus(absl::StatusCode::kInvalidArgument, message, param, code);
}

absl::Status InvalidType(std::string_view param, std::string_view expected) {
  return InvalidField(param, absl::StrCat("'", Av(param), "' must be ", Av(expected)),
                      "invalid_type");
}

absl::Status MissingField(std::string_view param) {
  return InvalidField(param, absl::StrCat("'", Av(param), "' is required"),
                      "missing_required_parameter");
}

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kFailedPrecondition:
      return 405;
    case absl::StatusCode::kOutOfRange:
      return 413;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

ApiError ToApiError(const absl::Status& status) {
  ApiError error;
  error.http_status = HttpStatusFor(status.code());
  error.message = std::string(status.message());
  error.type = TypeFor(error.http_status);
  if (auto param = status.GetPayload(kParamPayload)) error.param = std::string(*param);
  auto code = status.GetPayload(kCodePayload);
  error.code = code ? std::string(*code) : DefaultCode(status.code());
  return error;
}

absl::Status WithParamRenamed(const absl::Status& status,
                              const std::function<std::string(const std::string&)>& rename) {
  if (status.ok()) return status;
  const ApiError e = ToApiError(status);
  if (!e.param) return ApiErrorStatus(status.code(), e.message, std::string(), e.code);
  // The message quotes the field as the client sent it, too.
  const std::string renamed = rename(*e.param);
  const std::string message = absl::StrReplaceAll(
      e.message, {{absl::StrCat("'", *e.param, "'"), absl::StrCat("'", renamed, "'")}});
  return ApiErrorStatus(status.code(), message, renamed, e.code);
}

}  // namespace strata::frontend
