// OpenAI Batch file lines (batch_line.h).
#include "server/batch/batch_line.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/json_limits.h"

namespace strata::batch {
namespace {

using Json = nlohmann::ordered_json;

// This absl's string_view is its own type.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

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

// The response or error part of a line as the file it is in holds it (CheckOutputLine).
absl::Status CheckOutcome(const Json& line, bool answered) {
  const auto response = line.find("response");
  const auto error = line.find("error");
  if (response == line.end() || error == line.end()) {
    return absl::InvalidArgumentError("it lacks \"response\" or \"error\"");
  }
  if (response->is_object()) {
    const auto status = response->find("status_code");
    if (status == response->end() || !status->is_number_integer() || !response->contains("body")) {
      return absl::InvalidArgumentError("its response has no integer status_code and body");
    }
    if (!error->is_null()) return absl::InvalidArgumentError("it has a response and an error");
    const bool ok = status->get<int64_t>() / 100 == 2;
    if (ok != answered) {
      return absl::InvalidArgumentError(absl::StrCat("a status ", status->get<int64_t>(),
                                                     " answer does not belong in the ",
                                                     answered ? "output" : "error", " file"));
    }
    return absl::OkStatus();
  }
  const bool error_ok = error->is_object() && error->contains("code") &&
                        (*error)["code"].is_string() && error->contains("message") &&
                        (*error)["message"].is_string();
  if (answered || !response->is_null() || !error_ok) {
    return absl::InvalidArgumentError(answered ? "the output file holds answers only"
                                               : "its error has no string code and message");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BatchRequestLine> ParseBatchLine(std::string_view text, int64_t line_number,
                                                std::optional<std::string>* custom_id) {
  custom_id->reset();
  absl::StatusOr<Json> parsed = ParseBoundedJson(text);
  if (!parsed.ok()) {
    return LineError(line_number, IsJsonLimitError(parsed.status())
                                      ? std::string(parsed.status().message())
                                      : "not valid JSON");
  }
  Json line = *std::move(parsed);
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
  // The body is our own server's answer; bounded all the same, and kept as text otherwise.
  absl::StatusOr<Json> bounded = ParseBoundedJson(body);
  Json parsed = bounded.ok() ? *std::move(bounded) : Json(std::string(body));
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

std::vector<std::optional<std::string>> RequestCustomIds(std::string_view input) {
  std::vector<std::optional<std::string>> ids;
  int64_t line_number = 0;
  for (absl::string_view text : absl::StrSplit(Av(input), '\n')) {
    ++line_number;
    if (absl::StripAsciiWhitespace(text).empty()) continue;
    std::optional<std::string> custom_id;
    // Only its custom_id counts.
    ParseBatchLine(std::string_view(text.data(), text.size()), line_number, &custom_id)
        .IgnoreError();
    ids.push_back(std::move(custom_id));
  }
  return ids;
}

absl::StatusOr<int64_t> CheckOutputLine(std::string_view text, std::string_view id_prefix,
                                        const std::vector<std::optional<std::string>>& custom_ids,
                                        bool answered) {
  absl::StatusOr<Json> parsed = ParseBoundedJson(text);
  if (!parsed.ok() || !parsed->is_object()) {
    return absl::InvalidArgumentError("not a JSON object");
  }
  const Json& line = *parsed;
  const auto id = line.find("id");
  const std::string prefix = absl::StrCat("batch_req_", std::string(id_prefix));
  int64_t index = -1;
  if (id == line.end() || !id->is_string() ||
      !absl::StartsWith(id->get_ref<const std::string&>(), prefix) ||
      !absl::SimpleAtoi(Av(id->get_ref<const std::string&>()).substr(prefix.size()), &index) ||
      index < 0 || index >= static_cast<int64_t>(custom_ids.size())) {
    return absl::InvalidArgumentError(absl::StrCat("its \"id\" names no request of the input (",
                                                   custom_ids.size(), " requests)"));
  }
  const auto custom_id = line.find("custom_id");
  const std::optional<std::string>& expected = custom_ids[static_cast<size_t>(index)];
  const bool matches = expected ? custom_id != line.end() && *custom_id == *expected
                                : custom_id == line.end() || custom_id->is_null();
  if (!matches) {
    return absl::InvalidArgumentError(
        absl::StrCat("its custom_id is not request ", index, "'s (",
                     expected ? absl::StrCat("'", *expected, "'") : "none", ")"));
  }
  if (absl::Status outcome = CheckOutcome(line, answered); !outcome.ok()) return outcome;
  return index;
}

}  // namespace strata::batch
