// One line of an OpenAI Batch file (the format of OpenAI's Batch API and vLLM's run_batch):
//
//   input   {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}
//   output  {"id": "batch_req_…", "custom_id": "r1",
//            "response": {"status_code": 200, "request_id": "chatcmpl-…", "body": {...}},
//            "error": null}
//
// A request the server answered, with any status, is a `response` (an API error's body is the
// error object the HTTP server would have sent). A line that could not be sent at all (not
// JSON, no custom_id, another method or URL, a streamed request) gets `"response": null` and
// `"error": {"code": ..., "message": ...}`, as OpenAI's error file has it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::batch {

// The endpoints a batch line may name (those of OpenAI's Batch API that Strata serves).
inline constexpr std::string_view kBatchUrls[] = {"/v1/chat/completions", "/v1/completions",
                                                  "/v1/responses"};

struct BatchRequestLine {
  std::string custom_id;
  std::string url;   // one of kBatchUrls
  std::string body;  // the request body, a JSON object as text
};

// Parses line `line_number` (1-based, for messages) of an input file. InvalidArgument naming the
// line and the field otherwise. `custom_id` receives the line's custom_id whenever it has a
// string one, also when another field is wrong (so that its error line can carry it).
absl::StatusOr<BatchRequestLine> ParseBatchLine(std::string_view text, int64_t line_number,
                                                std::optional<std::string>* custom_id);

// Tokens a response reports in its usage (chat and completions: prompt_tokens /
// completion_tokens; Responses: input_tokens / output_tokens).
struct BatchUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// The output line for a request the server answered; `body` is the response's JSON text
// (anything else is carried as a JSON string). `request_id` is the response's "id" when the
// body has one. Adds the body's usage to *usage. No trailing newline.
std::string BatchResponseLine(std::string_view id, std::string_view custom_id, int status_code,
                              std::string_view body, BatchUsage* usage);

// The output line for a line that was not sent. No trailing newline.
std::string BatchErrorLine(std::string_view id, const std::optional<std::string>& custom_id,
                           std::string_view code, std::string_view message);

// The custom_id of each request (non-blank line) of an input file, in order; nullopt for a line
// without a non-empty string one (its error line has none either).
std::vector<std::optional<std::string>> RequestCustomIds(std::string_view input);

// Checks one line an earlier run wrote (a batch carrying on trusts no line it has not checked):
// a JSON object whose "id" is "batch_req_" + `id_prefix` + the index of a request of the input
// (`custom_ids`: RequestCustomIds of it), whose "custom_id" is that request's, and that is what
// its file holds — `answered` (the output file): "response" with a 2xx "status_code" and a
// "body", "error" null; else (the error file) a response with another status, or "response"
// null and an "error" with string "code" and "message". The request's index, or
// InvalidArgument naming what is wrong.
absl::StatusOr<int64_t> CheckOutputLine(std::string_view text, std::string_view id_prefix,
                                        const std::vector<std::optional<std::string>>& custom_ids,
                                        bool answered);

}  // namespace strata::batch
