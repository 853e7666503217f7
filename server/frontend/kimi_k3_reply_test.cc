// A Kimi K3 model end to end without sockets: OpenAiService over the scripted engine with a
// K3-shaped tokenizer (XTML control tokens, no chat template) and the XTML prompt; its XTML
// replies come back as reasoning_content, content and tool_calls on chat completions (whole and
// streamed), Anthropic Messages and Responses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "server/frontend/openai_service.h"
#include "server/frontend/testing/pending_response.h"
#include "server/frontend/testing/scripted_executor.h"

namespace strata::frontend {
namespace {

using testing::kK3EndOfMessage;  // <|end_of_msg|>, also the EOS here
using testing::kK3Open;
using testing::kK3Sep;

// Drives a request to its end the way the HTTP server does (Start, Poll on every wake).
std::pair<int, std::string> PostForReply(OpenAiService& service, const std::string& path,
                                         const std::string& body) {
  http::HttpRequest request;
  request.method = "POST";
  request.target = path;
  request.path = path;
  request.body = body;
  http::HandlerResult result = service.Handle(std::move(request));
  const http::HttpResponse out = testing::DrivePending(&result);
  return {out.status, out.body};
}

// The `data:` payloads of an SSE body ([DONE] left out).
std::vector<Json> DataEvents(const std::string& body) {
  std::vector<Json> events;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    const size_t data = event.find("data: ");
    if (data == absl::string_view::npos) continue;
    event.remove_prefix(data + 6);
    if (event != "[DONE]") events.push_back(Json::parse(std::string(event)));
  }
  return events;
}

class KimiK3ReplyTest : public ::testing::Test {
 protected:
  // XTML prompts with tools take hundreds of byte-sized tokens here: a longer context.
  KimiK3ReplyTest()
      : fixture_(testing::FixtureOptions{.max_model_len = 4096, .kimi_k3 = true}),
        service_(ServiceOptions{"", {}, 3}) {
    service_.SetModel(&fixture_.served());
  }
  // Every request generates `text`, then <|end_of_msg|>; records the prompts it saw.
  void Script(const std::string& text) {
    std::vector<int32_t> ids = fixture_.Ids(text);
    ids.push_back(kK3EndOfMessage);
    fixture_.executor().SetScript([this, ids](const std::vector<int32_t>& prompt) {
      std::lock_guard<std::mutex> lock(mu_);
      prompts_.push_back(prompt);
      return ids;
    });
  }
  std::vector<int32_t> LastPrompt() {
    std::lock_guard<std::mutex> lock(mu_);
    return prompts_.empty() ? std::vector<int32_t>() : prompts_.back();
  }

  testing::Fixture fixture_;
  OpenAiService service_;
  std::mutex mu_;
  std::vector<std::vector<int32_t>> prompts_;
};

const char kTools[] =
    R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters":)"
    R"( {"type": "object", "properties": {"city": {"type": "string"}}}}}])";

const char kCallReply[] =
    "Weather first.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>"
    "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
    "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>"
    "<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|>"
    "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>";

constexpr char kArguments[] = R"({"city": "Paris", "days": 3})";

TEST_F(KimiK3ReplyTest, ChatCompletionSplitsReasoningContentAndToolCalls) {
  Script(kCallReply);
  const std::string body =
      std::string(R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], )") + kTools +
      "}";
  auto [status, text] = PostForReply(service_, "/v1/chat/completions", body);
  ASSERT_EQ(status, 200) << text;
  // Thinking is on by default: the prompt ends by opening the think channel.
  const std::vector<int32_t> prompt = LastPrompt();
  ASSERT_GE(prompt.size(), 3u);
  EXPECT_EQ(prompt[prompt.size() - 3], kK3Open);
  EXPECT_EQ(prompt.back(), kK3Sep);

  const Json j = Json::parse(text);
  const Json& message = j["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "Weather first.");
  EXPECT_EQ(message["content"], "Checking.");
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  const Json& call = message["tool_calls"][0];
  EXPECT_TRUE(absl::StartsWith(call["id"].get<std::string>(), "chatcmpl-tool-"));
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], kArguments);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");

  // Streamed: the same text, and the call in one chunk with id, name and all its arguments.
  auto [stream_status, stream] = PostForReply(
      service_, "/v1/chat/completions", body.substr(0, body.size() - 1) + R"(, "stream": true})");
  ASSERT_EQ(stream_status, 200) << stream;
  std::string reasoning, content;
  std::vector<Json> calls;
  std::string finish;
  for (const Json& e : DataEvents(stream)) {
    if (e["choices"].empty()) continue;
    const Json& delta = e["choices"][0]["delta"];
    reasoning += delta.value("reasoning_content", "");
    if (delta.contains("content") && delta["content"].is_string()) content += delta["content"];
    if (delta.contains("tool_calls")) {
      for (const Json& c : delta["tool_calls"]) calls.push_back(c);
    }
    if (e["choices"][0]["finish_reason"].is_string()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(reasoning, "Weather first.");
  EXPECT_EQ(content, "Checking.");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_TRUE(calls[0]["id"].is_string());
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], kArguments);
  EXPECT_EQ(finish, "tool_calls");
}

TEST_F(KimiK3ReplyTest, ThinkingOffReadsTheResponseChannel) {
  Script("Bonjour !<|close|>response<|sep|><|close|>message<|sep|>");
  auto [status, text] = PostForReply(
      service_, "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": {"thinking": false}})");
  ASSERT_EQ(status, 200) << text;
  const Json j = Json::parse(text);
  EXPECT_FALSE(j["choices"][0]["message"].contains("reasoning_content")) << text;
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Bonjour !");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST_F(KimiK3ReplyTest, AnthropicMessagesGetThinkingAndToolUseBlocks) {
  Script(kCallReply);
  auto [status, text] = PostForReply(
      service_, "/v1/messages",
      R"({"model": "test-model", "max_tokens": 200, "messages": [{"role": "user", "content": "Weather?"}],)"
      R"( "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]})");
  ASSERT_EQ(status, 200) << text;
  const Json j = Json::parse(text);
  ASSERT_EQ(j["content"].size(), 3u) << text;
  EXPECT_EQ(j["content"][0]["type"], "thinking");
  EXPECT_EQ(j["content"][0]["thinking"], "Weather first.");
  EXPECT_EQ(j["content"][1]["type"], "text");
  EXPECT_EQ(j["content"][1]["text"], "Checking.");
  EXPECT_EQ(j["content"][2]["type"], "tool_use");
  EXPECT_EQ(j["content"][2]["name"], "get_weather");
  EXPECT_EQ(j["content"][2]["input"], Json::parse(kArguments));
  EXPECT_EQ(j["stop_reason"], "tool_use");
}

TEST_F(KimiK3ReplyTest, ResponsesGetReasoningMessageAndFunctionCallItems) {
  Script(kCallReply);
  auto [status, text] =
      PostForReply(service_, "/v1/responses",
                   R"({"model": "test-model", "input": "Weather?", "tools": [{"type": "function",)"
                   R"( "name": "get_weather", "parameters": {"type": "object"}}]})");
  ASSERT_EQ(status, 200) << text;
  const Json j = Json::parse(text);
  std::vector<std::string> types;
  for (const Json& item : j["output"]) types.push_back(item["type"]);
  EXPECT_THAT(types, ::testing::ElementsAre("reasoning", "message", "function_call")) << text;
  const Json& call = j["output"][2];
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["arguments"], kArguments);
}

}  // namespace
}  // namespace strata::frontend
