// Anthropic's Messages API: the request's translation to chat (messages_request.h) and the
// Message object and stream events (messages_render.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/frontend/api_error.h"
#include "server/frontend/messages_render.h"
#include "server/frontend/messages_request.h"

namespace strata::frontend {
namespace {

using ::testing::HasSubstr;

RequestLimits Limits() {
  RequestLimits limits;
  limits.vocab_size = 320;
  return limits;
}

absl::StatusOr<ChatCompletionRequest> Parse(std::string_view body, bool count = false) {
  absl::StatusOr<Json> json = ParseJsonBody(body);
  if (!json.ok()) return json.status();
  return ParseMessagesRequest(*json, Limits(), count);
}

TEST(MessagesRequestTest, BlocksBecomeTheChatMessagesTheyMean) {
  absl::StatusOr<ChatCompletionRequest> req = Parse(R"({
    "model": "m", "max_tokens": 7, "temperature": 0.5, "top_k": 3,
    "stop_sequences": ["END"],
    "system": [{"type": "text", "text": "Be terse."}, {"type": "text", "text": "No lists."}],
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "call the tool", "signature": "s"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "sunny"}]},
        {"type": "text", "text": "And tomorrow?"}]}],
    "tools": [{"name": "get_weather", "description": "Weather of a city",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "thinking": {"type": "enabled", "budget_tokens": 1024}})");
  ASSERT_TRUE(req.ok()) << req.status().ToString();
  EXPECT_EQ(req->gen.model, "m");
  EXPECT_EQ(req->gen.max_tokens, 7);
  EXPECT_FLOAT_EQ(req->gen.sampling.temperature, 0.5f);
  EXPECT_EQ(req->gen.sampling.top_k, 3);
  EXPECT_EQ(req->gen.stop, std::vector<std::string>{"END"});
  const Json& m = req->messages;
  ASSERT_EQ(m.size(), 5u) << m.dump();
  EXPECT_EQ(m[0], (Json{{"role", "system"}, {"content", "Be terse.\n\nNo lists."}}));
  EXPECT_EQ(m[1]["role"], "user");
  EXPECT_EQ(m[2]["role"], "assistant");  // the thinking block is not shown again
  EXPECT_EQ(m[2]["content"], (Json::array({{{"type", "text"}, {"text", "Checking."}}})));
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "t1");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(m[2]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            (Json{{"city", "Paris"}}));
  // The tool result comes first, then the user's other blocks.
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(m[3]["tool_call_id"], "t1");
  EXPECT_EQ(m[4],
            (Json{{"role", "user"},
                  {"content", Json::array({{{"type", "text"}, {"text", "And tomorrow?"}}})}}));
  EXPECT_EQ(req->tool_choice, ToolChoice::kRequired);
  EXPECT_FALSE(req->parallel_tool_calls);
  EXPECT_EQ(req->tools[0]["function"]["parameters"]["type"], "object");
  EXPECT_EQ(req->chat_template_kwargs["thinking"], true);
}

TEST(MessagesRequestTest, ImageBlocksBecomeChatImageParts) {
  // The image is decoded when the prompt is built; here only its URL is formed.
  absl::StatusOr<ChatCompletionRequest> req = Parse(R"({"max_tokens": 4, "messages": [
      {"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                     "data": "/9j/AAAA"}},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
        {"type": "text", "text": "Same?"}]},
      {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "snap", "input": {}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBO"}}]}]}]})");
  ASSERT_TRUE(req.ok()) << req.status();
  const Json& m = req->messages;
  ASSERT_EQ(m.size(), 3u) << m.dump();
  ASSERT_EQ(m[0]["content"].size(), 3u) << m.dump();
  EXPECT_EQ(
      m[0]["content"][0],
      (Json{{"type", "image_url"}, {"image_url", {{"url", "data:image/jpeg;base64,/9j/AAAA"}}}}));
  EXPECT_EQ(m[0]["content"][1]["image_url"]["url"], "https://x/y.png");
  EXPECT_EQ(m[0]["content"][2]["text"], "Same?");
  EXPECT_EQ(m[2]["role"], "tool");
  EXPECT_EQ(m[2]["content"][0]["image_url"]["url"], "data:image/png;base64,iVBO");
}

TEST(MessagesRequestTest, ThinkingBudgetTokensCapTheReasoning) {
  const std::string base = R"("max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
      "thinking": )";
  absl::StatusOr<ChatCompletionRequest> req =
      Parse("{" + base + R"({"type": "enabled", "budget_tokens": 2048}})");
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->thinking_token_budget, 2048);
  EXPECT_EQ(req->chat_template_kwargs["thinking"], true);
  req = Parse("{" + base + R"({"type": "disabled"}})");
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_FALSE(req->thinking_token_budget.has_value());
  EXPECT_EQ(req->chat_template_kwargs["thinking"], false);
  for (const char* bad : {R"({"type": "enabled", "budget_tokens": 0})",
                          R"({"type": "enabled", "budget_tokens": "many"})"}) {
    absl::StatusOr<ChatCompletionRequest> refused = Parse("{" + base + bad + "}");
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("budget_tokens"), std::string::npos)
        << refused.status();
  }
}

TEST(MessagesRequestTest, ToolChoicesMapOntoChats) {
  const std::string base = R"("max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": )";
  auto choice = [&](const std::string& json) {
    absl::StatusOr<ChatCompletionRequest> req = Parse("{" + base + json + "}");
    EXPECT_TRUE(req.ok()) << req.status();
    return req.ok() ? req->tool_choice : ToolChoice::kAuto;
  };
  EXPECT_EQ(choice(R"({"type": "auto"})"), ToolChoice::kAuto);
  EXPECT_EQ(choice(R"({"type": "none"})"), ToolChoice::kNone);
  EXPECT_EQ(choice(R"({"type": "tool", "name": "f"})"), ToolChoice::kNamed);
}

TEST(MessagesRequestTest, ErrorsNameTheMessagesFields) {
  struct Case {
    const char* body;
    const char* param;
    const char* message_part;
  };
  const Case cases[] = {
      {R"({"messages": [{"role": "user", "content": "x"}]})", "max_tokens", "required"},
      {R"({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]})", "max_tokens",
       ">= 1"},
      {R"({"max_tokens": 4})", "messages", "required"},
      {R"({"max_tokens": 4, "messages": [{"role": "system", "content": "x"}]})", "messages[0].role",
       "'system'"},
      {R"({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_use",
          "id": "a", "name": "f", "input": {}}]}]})",
       "messages[0].content[0].type", "tool_use"},
      {R"({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
          "tools": [{"type": "web_search_20250305", "name": "web_search"}]})",
       "tools[0].type", "server tool"},
      {R"({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
          "tool_choice": {"type": "sometimes"}})",
       "tool_choice.type", "sometimes"},
      {R"({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
          "stop_sequences": "END"})",
       "stop_sequences", "array"},
      {R"({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
          "temperature": "hot"})",
       "temperature", ""},
      // Image blocks become chat image_url parts (ImageBlocksBecomeChatImageParts); a source
      // without its fields is refused by name.
      {R"({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image",
          "source": {"type": "base64", "data": "AAAA"}}]}]})",
       "messages[0].content[0].source.media_type", ""},
      {R"({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image",
          "source": {"type": "base64", "media_type": "image/png", "data": 5}}]}]})",
       "messages[0].content[0].source.data", ""},
      {R"({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]})",
       "messages[0].content[0].source", "object"},
      {R"({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image",
          "source": {"type": "file", "file_id": "f"}}]}]})",
       "messages[0].content[0].source.type", "file"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ChatCompletionRequest> req = Parse(c.body);
    ASSERT_FALSE(req.ok()) << c.body;
    const ApiError e = ToApiError(req.status());
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param.value_or(""), c.param) << c.body;
    EXPECT_THAT(e.message, HasSubstr(c.message_part)) << c.body;
    EXPECT_EQ(AnthropicErrorJson(e)["error"]["type"], "invalid_request_error");
  }
  // count_tokens needs no max_tokens.
  EXPECT_TRUE(Parse(R"({"messages": [{"role": "user", "content": "x"}]})", true).ok());
}

ResponseMeta Meta() { return {"msg-1", 0, "m"}; }

TEST(MessagesRenderTest, MessageObjectShowsBlocksStopReasonAndUsage) {
  FinalChoice c;
  c.reasoning = "hmm";
  c.text = "Sure.";
  c.tool_calls = {{"t1", "get_weather", R"({"city": "Paris"})"}, {"t2", "f", "not json"}};
  c.finish_reason = "tool_calls";
  const Json m = MessageObjectJson(Meta(), c, Usage{10, 4, 6});
  ASSERT_EQ(m["content"].size(), 4u) << m.dump();
  EXPECT_EQ(m["content"][0], (Json{{"type", "thinking"}, {"thinking", "hmm"}, {"signature", ""}}));
  EXPECT_EQ(m["content"][1], (Json{{"type", "text"}, {"text", "Sure."}}));
  EXPECT_EQ(m["content"][2]["input"], (Json{{"city", "Paris"}}));
  EXPECT_EQ(m["content"][3]["input"], (Json{{"arguments", "not json"}}));  // kept, not dropped
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["stop_sequence"], nullptr);
  EXPECT_EQ(m["usage"]["input_tokens"], 4);  // 10 prompt tokens, 6 from the prefix cache
  EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 6);
  EXPECT_EQ(m["usage"]["output_tokens"], 4);

  FinalChoice stop;
  stop.text = "a";
  stop.finish_reason = "stop";
  stop.stop_string = "END";
  EXPECT_EQ(MessageObjectJson(Meta(), stop, {})["stop_reason"], "stop_sequence");
  EXPECT_EQ(MessageObjectJson(Meta(), stop, {})["stop_sequence"], "END");
  stop.stop_string.clear();
  EXPECT_EQ(MessageObjectJson(Meta(), stop, {})["stop_reason"], "end_turn");
  stop.finish_reason = "length";
  EXPECT_EQ(MessageObjectJson(Meta(), stop, {})["stop_reason"], "max_tokens");
  FinalChoice empty;
  empty.finish_reason = "stop";
  EXPECT_EQ(MessageObjectJson(Meta(), empty, {})["content"],
            (Json::array({{{"type", "text"}, {"text", ""}}})));
}

// The events of a stream, as (type, data) pairs.
std::vector<Json> MessageEvents(const std::string& sse) {
  std::vector<Json> out;
  size_t at = 0;
  while ((at = sse.find("data: ", at)) != std::string::npos) {
    const size_t end = sse.find('\n', at);
    out.push_back(Json::parse(sse.substr(at + 6, end - at - 6)));
    at = end;
  }
  return out;
}

TEST(MessagesRenderTest, StreamOpensAndClosesABlockPerKindInOrder) {
  MessagesStreamWriter w(Meta(), 12);
  std::string sse = w.Start();
  ChoiceDelta think;
  think.reasoning = "hm";
  sse += w.Delta(think);
  ChoiceDelta text;
  text.text = "Hi";
  sse += w.Delta(text);
  ChoiceDelta call;
  engine::ToolCallDelta d;
  d.index = 0;
  d.id = "t1";
  d.name = "f";
  d.arguments = R"({"a":)";
  call.tool_calls.push_back(d);
  engine::ToolCallDelta more;
  more.index = 0;
  more.arguments = "1}";
  call.tool_calls.push_back(more);
  sse += w.Delta(call);
  FinalChoice final;
  final.reasoning = "hm";
  final.text = "Hi";
  final.tool_calls = {{"t1", "f", R"({"a":1})"}};
  final.finish_reason = "tool_calls";
  sse += w.Finish(final, Usage{12, 3, 0});
  std::vector<std::string> types;
  for (const Json& e : MessageEvents(sse)) {
    std::string t = e["type"];
    if (e.contains("delta") && e["delta"].contains("type"))
      t += ":" + e["delta"]["type"].get<std::string>();
    if (e.contains("content_block")) t += ":" + e["content_block"]["type"].get<std::string>();
    types.push_back(t);
  }
  EXPECT_EQ(types,
            (std::vector<std::string>{
                "message_start", "ping", "content_block_start:thinking",
                "content_block_delta:thinking_delta", "content_block_delta:signature_delta",
                "content_block_stop", "content_block_start:text", "content_block_delta:text_delta",
                "content_block_stop", "content_block_start:tool_use",
                "content_block_delta:input_json_delta", "content_block_delta:input_json_delta",
                "content_block_stop", "message_delta", "message_stop"}));
  const std::vector<Json> events = MessageEvents(sse);
  EXPECT_EQ(events[0]["message"]["usage"]["input_tokens"], 12);
  EXPECT_EQ(events[9]["index"], 2);  // the tool_use block is the third
  EXPECT_EQ(events[9]["content_block"]["id"], "t1");
  EXPECT_EQ(events[13]["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(events[13]["usage"]["output_tokens"], 3);
  // Every event line names its type.
  EXPECT_THAT(sse, HasSubstr("event: content_block_delta\ndata: "));
  EXPECT_EQ(
      MessageEvents(w.Error(ApiError{503, "busy", "server_error", {}, "x"}))[0]["error"]["type"],
      "overloaded_error");
}

}  // namespace
}  // namespace strata::frontend
