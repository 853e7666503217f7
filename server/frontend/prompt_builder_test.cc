// The chat prompt path for a Kimi K3 model (XTML, docs/k3-format.md): request fields into the
// renderer, segment-wise ids, 400s for bad switches. Expected prompts are written by hand.
#include "server/frontend/prompt_builder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/bpe_vocab.h"
#include "engine/tokenizer/chat_template.h"
#include "server/frontend/api_error.h"

namespace strata::frontend {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kEnd = 256, kOpen = 257, kClose = 258, kSep = 259;

std::unique_ptr<engine::Tokenizer> K3TestTokenizer() {
  std::vector<std::string> tokens;  // ids 0..255: the bytes, no merges
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  engine::TokenizerSpec spec;
  spec.vocab = *engine::BpeVocab::FromTokens(tokens);
  spec.pattern = R"( ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  spec.special_tokens[kEnd] = {"<|end_of_msg|>", true};
  spec.special_tokens[kOpen] = {"<|open|>", true};
  spec.special_tokens[kClose] = {"<|close|>", true};
  spec.special_tokens[kSep] = {"<|sep|>", true};
  auto tokenizer = engine::Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return std::move(*tokenizer);
}

class K3PromptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = K3TestTokenizer();
    auto chosen = engine::ChatTemplate::ForTokenizer(*tokenizer_, false);
    ASSERT_TRUE(chosen.ok()) << chosen.status();
    ASSERT_TRUE(chosen->is_xtml());  // control tokens and no template: K3's format
    template_ = std::move(*chosen);
    model_.max_model_len = 4096;
    model_.vocab_size = 260;
    model_.tokenizer = tokenizer_.get();
    model_.chat_template = &*template_;
    model_.chat_template_tools = &*template_;
  }
  ChatCompletionRequest Request(std::string_view body) {
    RequestLimits limits;
    limits.vocab_size = 260;
    absl::StatusOr<ChatCompletionRequest> req =
        ParseChatCompletionRequest(*ParseJsonBody(body), limits);
    EXPECT_TRUE(req.ok()) << req.status();
    return req.ok() ? *std::move(req) : ChatCompletionRequest{};
  }
  std::string Text(std::string_view body) {
    absl::StatusOr<std::string> text = RenderChat(model_, Request(body));
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? *text : "";
  }
  ApiError Error(std::string_view body) {
    absl::StatusOr<std::vector<int32_t>> ids = ChatPromptIds(model_, Request(body));
    EXPECT_FALSE(ids.ok());
    return ids.ok() ? ApiError{} : ToApiError(ids.status());
  }

  std::unique_ptr<engine::Tokenizer> tokenizer_;
  std::optional<engine::ChatTemplate> template_;
  ServedModel model_;
};

const char kUserHi[] =
    R"(<|open|>message role="user"<|sep|>hi<|close|>message<|sep|><|end_of_msg|>)";
const char kGenResponse[] = R"(<|open|>message role="assistant"<|sep|><|open|>response<|sep|>)";
const char kTool[] =
    R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])";

TEST_F(K3PromptTest, ToolChoiceAndResponseFormatComeFromTheRequest) {
  EXPECT_EQ(Text(std::string(R"({"messages": [{"role": "user", "content": "hi"}],
                   "reasoning_effort": "none", "tool_choice": "required", "tools": )") +
                 kTool + "}"),
            "<|open|>message role=\"system\" type=\"tool-declare\"<|sep|># Tools\nHere are the "
            "available tools, described in JSONSchema.\n\n```json\n"
            R"([{"function":{"name":"f","parameters":{"type":"object"}},"type":"function"}])"
            "\n```<|close|>message<|sep|><|end_of_msg|>" +
                std::string(kUserHi) +
                "<|open|>message role=\"system\" type=\"tool-choice\"<|sep|>The system is invoked "
                "with `tool_choice=required`.\nYou MUST call tools in the next message."
                "<|close|>message<|sep|><|end_of_msg|>" +
                kGenResponse);
  // A named choice renders nothing, even over a kwarg.
  EXPECT_EQ(Text(std::string(R"({"messages": [{"role": "user", "content": "hi"}],
                   "chat_template_kwargs": {"thinking": false, "tool_choice": "required"},
                   "tool_choice": {"type": "function", "function": {"name": "f"}}, "tools": )") +
                 kTool + "}"),
            std::string("<|open|>message role=\"system\" type=\"tool-declare\"<|sep|># Tools\n"
                        "Here are the available tools, described in JSONSchema.\n\n```json\n"
                        R"([{"function":{"name":"f","parameters":{"type":"object"}},)"
                        R"("type":"function"}])"
                        "\n```<|close|>message<|sep|><|end_of_msg|>") +
                kUserHi + kGenResponse);
  EXPECT_EQ(Text(R"({"messages": [{"role": "user", "content": "hi"}],
                   "chat_template_kwargs": {"thinking": false},
                   "response_format": {"type": "json_object"}})"),
            std::string(kUserHi) +
                "<|open|>message role=\"system\" type=\"response-format\"<|sep|>The system is "
                "invoked with `response_format=json_object`.\nYour response must be raw JSON data "
                "without markdown code blocks (```json) or any additional formatting."
                "<|close|>message<|sep|><|end_of_msg|>" +
                kGenResponse);
}

TEST_F(K3PromptTest, TopLevelReasoningEffortSetsTheEffort) {
  EXPECT_THAT(Text(R"({"messages": [{"role": "user", "content": "hi"}],
                     "reasoning_effort": "low"})"),
              HasSubstr("Now the system is invoked with `thinking_effort=low`."));
}

TEST_F(K3PromptTest, BadSwitchesAre400sNamingTheValues) {
  ApiError e = Error(R"({"messages": [{"role": "user", "content": "hi"}],
                        "reasoning_effort": "medium"})");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "reasoning_effort");
  EXPECT_THAT(e.message, HasSubstr("none, low, high, max"));
  e = Error(R"({"messages": [{"role": "user", "content": "hi"}],
               "chat_template_kwargs": {"thinking_effort": "xhigh"}})");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "chat_template_kwargs");
  EXPECT_THAT(e.message, HasSubstr("low, high, max"));
  // A tool result whose tool cannot be named.
  e = Error(R"({"messages": [{"role": "tool", "tool_call_id": "x", "content": "r"}]})");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "messages");
  EXPECT_THAT(e.message, HasSubstr("Kimi K3"));
}

TEST_F(K3PromptTest, IdsAreSegmentWiseAndUserMarkersStayText) {
  ChatCompletionRequest req = Request(R"({"messages": [
      {"role": "user", "content": "<|end_of_msg|><|open|>"}],
      "chat_template_kwargs": {"thinking": false}})");
  absl::StatusOr<std::vector<int32_t>> ids = ChatPromptIds(model_, req);
  ASSERT_TRUE(ids.ok()) << ids.status();
  std::vector<int32_t> expected;
  auto text = [&](std::string_view s) {
    for (unsigned char c : s) expected.push_back(c);
  };
  expected.push_back(kOpen);
  text("message role=\"user\"");
  expected.push_back(kSep);
  text("<|end_of_msg|><|open|>");
  expected.push_back(kClose);
  text("message");
  expected.push_back(kSep);
  expected.push_back(kEnd);
  expected.push_back(kOpen);
  text("message role=\"assistant\"");
  expected.push_back(kSep);
  expected.push_back(kOpen);
  text("response");
  expected.push_back(kSep);
  EXPECT_EQ(*ids, expected);
}

TEST_F(K3PromptTest, ContinueFinalMessageCutsAfterItsContent) {
  ChatCompletionRequest req = Request(R"({"messages": [
      {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure"}],
      "continue_final_message": true, "add_generation_prompt": false,
      "chat_template_kwargs": {"thinking": false}})");
  absl::StatusOr<std::vector<int32_t>> ids = ChatPromptIds(model_, req);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GE(ids->size(), 5u);
  // ... <|open|>response<|sep|>Sure: the reply continues inside the response channel.
  const std::vector<int32_t> tail(ids->end() - 5, ids->end());
  EXPECT_EQ(tail, (std::vector<int32_t>{kSep, 'S', 'u', 'r', 'e'}));
  EXPECT_EQ(*RenderChat(model_, req),
            std::string(kUserHi) +
                R"(<|open|>message role="assistant"<|sep|><|open|>response<|sep|>Sure)");
}

}  // namespace
}  // namespace strata::frontend
