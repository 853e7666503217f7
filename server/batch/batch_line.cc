// OpenAI Batch file lines (batch_line.h).
#include "server/batch/batch_line.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace strata::batch {
namespace {

using Json = nlohmann::ordered_json;

absl::Status LineError(int64_t line_number, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": ", message));
}

// Text of `json`; invalid UTF-8 in a string is replaced, never thrown.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

int64_t CountOf(const Json& usage, const char* key) {
  const auto it = usage.find(key);
  return it != usage.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

}  // namespace

absl::StatusOr<BatchRequestLine> ParseBatchLine(std::string_view text, int64_t line_number,
                                                std::optional<std::string>* custom_id) {
  custom_id->reset();
  Json line = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (line.is_discarded()) return LineError(line_number, "not valid JSON");
  if (!line.is_object()) return LineError(line_number, "must be a JSON object");
  BatchRequestLine out;
  const auto id = line.find("custom_id");
  if (id == line.end() || !id->is_string() || id->get_ref<const std::string&>().empty()) {
    return LineError(line_number, "custom_id must be a non-empty string");
  }
  out.custom_id = id->get<std::string>();
  *custom_id = out.custom_id;
  const auto method = line.find("method");
  if (method == line.end() || *method != "POST") {
    return LineError(line_number, "method must be \"POST\"");
  }
  const auto url = line.find("url");
  const bool known = url != line.end() && url->is_string() &&
                     std::find(std::begin(kBatchUrls), std::end(kBatchUrls),
                               url->get<std::string>()) != std::end(kBatchUrls);
  if (!known) {
    return LineError(line_number,
                     "url must be /v1/chat/completions, /v1/completions or /v1/responses");
  }
  out.url = url->get<std::string>();
  const auto body = line.find("body");
  if (body == line.end() || !body->is_object()) {
    return LineError(line_number, "body must be a JSON object (the request)");
  }
  const auto stream = body->find("stream");
  if (stream != body->end() && stream->is_boolean() && stream->get<bool>()) {
    return LineError(line_number, "body.stream: a batch request cannot stream; leave it out");
  }
  out.body = Dump(*body);
  return out;
}

std::string BatchResponseLine(std::string_view id, std::string_view custom_id, int status_code,
                              std::string_view body, BatchUsage* usage) {
  Json parsed = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) parsed = std::string(body);
  Json request_id = nullptr;
  if (parsed.is_object()) {
    if (const auto it = parsed.find("id"); it != parsed.end() && it->is_string()) request_id = *it;
    if (const auto it = parsed.find("usage"); it != parsed.end() && it->is_object()) {
      usage->prompt_tokens += CountOf(*it, "prompt_tokens") + CountOf(*it, "input_tokens");
      usage->completion_tokens += CountOf(*it, "completion_tokens") + CountOf(*it, "output_tokens");
    }
  }
  Json line = {{"id", id},
               {"custom_id", custom_id},
               {"response",
                {{"status_code", status_code},
                 {"request_id", std::move(request_id)},
                 {"body", std::move(parsed)}}},
               {"error", nullptr}};
  return Dump(line);
}

std::string BatchErrorLine(std::string_view id, const std::optional<std::string>& custom_id,
                           std::string_view code, std::string_view message) {
  Json line = {{"id", id},
               {"custom_id", custom_id ? Json(*custom_id) : Json(nullptr)},
               {"response", nullptr},
               {"error", {{"code", code}, {"message", message}}}};
  return Dump(line);
}

}  // namespace strata::batch
