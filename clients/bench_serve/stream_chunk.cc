#include "clients/bench_serve/stream_chunk.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace strata::bench_serve {
namespace {

using Json = nlohmann::json;

bool NonEmptyString(const Json& object, const char* key) {
  return object.contains(key) && object[key].is_string() && !object[key].get<std::string>().empty();
}

bool IsStep(const Json& choice) {
  if (!choice.is_object()) return false;
  const bool finishing = choice.contains("finish_reason") && !choice["finish_reason"].is_null();
  if (choice.contains("text") && choice["text"].is_string()) {  // completions
    return NonEmptyString(choice, "text") || !finishing;
  }
  if (!choice.contains("delta") || !choice["delta"].is_object()) return false;
  const Json& delta = choice["delta"];  // chat
  if (NonEmptyString(delta, "content") || NonEmptyString(delta, "reasoning_content") ||
      delta.contains("tool_calls")) {
    return true;
  }
  const bool has_text_field =
      (delta.contains("content") && delta["content"].is_string()) ||
      (delta.contains("reasoning_content") && delta["reasoning_content"].is_string());
  return has_text_field && !finishing && !delta.contains("role");
}

}  // namespace

std::string ErrorMessage(const std::string& body) {
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    return j["error"]["message"].get<std::string>();
  }
  return body.substr(0, 300);
}

StreamChunk ParseStreamChunk(const std::string& data) {
  StreamChunk c;
  const Json j = Json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    c.error = absl::StrCat("an event that is not a JSON object: ", data.substr(0, 200));
    return c;
  }
  if (j.contains("error")) {
    c.error = absl::StrCat("error event: ", ErrorMessage(data));
    return c;
  }
  if (j.contains("choices") && j["choices"].is_array()) {
    for (const Json& choice : j["choices"]) c.step = c.step || IsStep(choice);
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const Json& u = j["usage"];
    if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer()) {
      c.prompt_tokens = u["prompt_tokens"].get<int64_t>();
    }
    if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
      c.completion_tokens = u["completion_tokens"].get<int64_t>();
    }
  }
  return c;
}

}  // namespace strata::bench_serve
