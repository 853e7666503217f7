// libFuzzer target: lines of a batch input file and of the output files a batch resumes from
// (built by tests/fuzz/run_fuzz.sh). Input: one line. A line that parses names one of
// kBatchUrls and carries a body, which then goes through that endpoint's parser (see
// request_fuzz.h for what is checked); refused lines carry a message.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/batch/batch_line.h"
#include "tests/fuzz/request_fuzz.h"

namespace sf = strata::frontend;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<std::string> custom_id;
  absl::StatusOr<strata::batch::BatchRequestLine> line =
      strata::batch::ParseBatchLine(text, 1, &custom_id);
  if (!line.ok()) {
    CHECK(!line.status().message().empty());
  } else if (line->url == "/v1/chat/completions") {
    strata::fuzz::FuzzBody(line->body, [](const sf::Json& body) {
      return sf::ParseChatCompletionRequest(body, strata::fuzz::FuzzLimits());
    });
  } else if (line->url == "/v1/completions") {
    strata::fuzz::FuzzBody(line->body, [](const sf::Json& body) {
      return sf::ParseCompletionRequest(body, strata::fuzz::FuzzLimits());
    });
  } else {
    CHECK(line->url == "/v1/responses");
    strata::fuzz::FuzzBody(line->body, [](const sf::Json& body) {
      return sf::ParseResponsesRequest(body, strata::fuzz::FuzzLimits());
    });
  }
  // The same text as a line of an output file a batch carries on from.
  const std::vector<std::optional<std::string>> ids = strata::batch::RequestCustomIds(text);
  for (bool answered : {true, false}) {
    absl::StatusOr<int64_t> index = strata::batch::CheckOutputLine(text, "x", ids, answered);
    if (index.ok()) {
      CHECK_GE(*index, 0);
      CHECK_LT(*index, static_cast<int64_t>(ids.size()));
    }
  }
  return 0;
}
