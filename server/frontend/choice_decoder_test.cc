#include "server/frontend/choice_decoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/frontend/engine_request.h"
#include "server/frontend/testing/scripted_executor.h"

namespace strata::frontend {
namespace {

using testing::kImEnd;

server::StreamEvent Token(int32_t id, std::optional<server::FinishReason> finish = std::nullopt) {
  server::StreamEvent e;
  e.token_ids = {id};
  e.logprobs = {-0.5f};
  e.top_logprobs = {{{id, -0.5f}, {7, -1.5f}}};
  e.finish = finish;
  e.num_prompt_tokens = 10;
  e.num_output_tokens = 1;
  return e;
}

std::vector<int32_t> Ids(const engine::Tokenizer& tok, const std::string& text) {
  return tok.Encode(text, {.add_special_tokens = false, .parse_special = true});
}

// Feeds `ids` one event each, the last with `finish`; returns the concatenated deltas.
ChoiceDelta Feed(ChoiceDecoder& d, const std::vector<int32_t>& ids,
                 server::FinishReason finish = server::FinishReason::kStop) {
  ChoiceDelta all;
  for (size_t i = 0; i < ids.size(); ++i) {
    ChoiceDelta x =
        d.Apply(Token(ids[i], i + 1 == ids.size() ? std::optional(finish) : std::nullopt));
    all.text += x.text;
    for (auto& c : x.tool_calls) all.tool_calls.push_back(c);
    for (auto& l : x.logprobs) all.logprobs.push_back(l);
    if (x.finish_reason) all.finish_reason = x.finish_reason;
    all.stop_string_matched = all.stop_string_matched || x.stop_string_matched;
  }
  return all;
}

TEST(ChoiceDecoderTest, EndingEosIsCountedButNotShown) {
  auto tok = testing::MakeTestTokenizer();
  ChoiceOptions o;
  o.hidden_stop_ids = {kImEnd};
  o.detokenizer.skip_special_tokens = false;  // even when specials are shown
  ChoiceDecoder d(*tok, o);
  std::vector<int32_t> ids = Ids(*tok, "hello world");
  ids.push_back(kImEnd);
  ChoiceDelta all = Feed(d, ids);
  EXPECT_EQ(all.text, "hello world");
  EXPECT_EQ(all.finish_reason, "stop");
  EXPECT_TRUE(d.finished());
  // Later events are ignored.
  EXPECT_TRUE(d.Apply(Token('x')).empty());
}

TEST(ChoiceDecoderTest, AnIncompleteCharacterBeforeTheEndOfReasoningStaysInTheReasoning) {
  auto tok = testing::MakeTestTokenizer();
  ChoiceOptions o;
  o.reasoning_open = true;
  o.think_end_id = testing::kThinkEnd;
  ChoiceDecoder d(*tok, o);
  // 0xC3 opens a two-byte character that </think> cuts off.
  const std::vector<int32_t> ids = {'h', 'i', 0xC3, testing::kThinkEnd, '{', '}'};
  std::string reasoning;
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    ChoiceDelta x = d.Apply(Token(
        ids[i], i + 1 == ids.size() ? std::optional(server::FinishReason::kStop) : std::nullopt));
    reasoning += x.reasoning;
    text += x.text;
  }
  EXPECT_EQ(reasoning, "hi\xEF\xBF\xBD");  // U+FFFD
  EXPECT_EQ(text, "{}");
}

TEST(ChoiceDecoderTest, StopStringAcrossTokensEndsTheChoice) {
  auto tok = testing::MakeTestTokenizer();
  ChoiceOptions o;
  o.detokenizer.stop = {"o w"};
  ChoiceDecoder d(*tok, o);
  ChoiceDelta all = Feed(d, Ids(*tok, "hello world and more"), server::FinishReason::kLength);
  EXPECT_EQ(all.text, "hell");
  EXPECT_EQ(all.finish_reason, "stop");
  EXPECT_TRUE(all.stop_string_matched);
}

TEST(ChoiceDecoderTest, LengthAndAbortFlushHeldBackText) {
  auto tok = testing::MakeTestTokenizer();
  ChoiceOptions o;
  o.detokenizer.stop = {"world!"};
  ChoiceDecoder length(*tok, o);
  ChoiceDelta all = Feed(length, Ids(*tok, "hello world"), server::FinishReason::kLength);
  EXPECT_EQ(all.text, "hello world");  // "world" was held back, then flushed
  EXPECT_EQ(all.finish_reason, "length");

  ChoiceDecoder aborted(*tok, o);
  ChoiceDelta first = aborted.Apply(Token(Ids(*tok, " w")[0]));
  EXPECT_EQ(first.text, " ");  // "w" could start "world!": held back
  ChoiceDelta end = aborted.Abort();
  EXPECT_EQ(end.text, "w");
  EXPECT_EQ(end.finish_reason, "abort");
}

TEST(ChoiceDecoderTest, ToolCallsAreParsedAndSetFinishReason) {
  auto tok = testing::MakeTestTokenizer();
  ChoiceOptions o;
  o.parse_tool_calls = true;
  o.detokenizer.skip_special_tokens = false;
  o.hidden_stop_ids = {kImEnd};
  ChoiceDecoder d(*tok, o);
  std::vector<int32_t> ids =
      Ids(*tok,
          "hi<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
          "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
          "<|tool_calls_section_end|>");
  ids.push_back(kImEnd);
  ChoiceDelta all = Feed(d, ids);
  EXPECT_EQ(all.text, "hi");
  EXPECT_EQ(all.finish_reason, "tool_calls");
  ASSERT_FALSE(all.tool_calls.empty());
  EXPECT_EQ(all.tool_calls[0].index, 0);
  EXPECT_EQ(all.tool_calls[0].id, "functions.get_weather:0");
  EXPECT_EQ(all.tool_calls[0].name, "get_weather");
  std::string arguments;
  for (const auto& c : all.tool_calls) arguments += c.arguments;
  EXPECT_EQ(arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(d.num_tool_calls(), 1);
}

TEST(ChoiceDecoderTest, LogprobsFollowTokensAndErrorsEndTheChoice) {
  auto tok = testing::MakeTestTokenizer();
  ChoiceOptions o;
  o.logprobs = true;
  ChoiceDecoder d(*tok, o);
  ChoiceDelta x = d.Apply(Token('a'));
  ASSERT_EQ(x.logprobs.size(), 1u);
  EXPECT_EQ(x.logprobs[0].token_id, 'a');
  EXPECT_FLOAT_EQ(x.logprobs[0].logprob, -0.5f);
  ASSERT_EQ(x.logprobs[0].top.size(), 2u);
  EXPECT_EQ(x.logprobs[0].top[1].token_id, 7);
  EXPECT_EQ(d.num_prompt_tokens(), 10);

  server::StreamEvent failed;
  failed.error = absl::InternalError("boom");
  ChoiceDelta e = d.Apply(failed);
  EXPECT_EQ(e.error.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(d.finished());
}

TEST(ChoiceDecoderTest, IdsWithoutTextShowNothing) {
  auto tok = testing::MakeTestTokenizer();
  ChoiceDecoder d(*tok, ChoiceOptions{});
  ChoiceDelta all = Feed(d, {'a', 315, 'b'}, server::FinishReason::kLength);
  EXPECT_EQ(all.text, "ab");
}

// ---- Kimi K3 (XTML) ------------------------------------------------------------------------
// K3's test tokenizer (testing::MakeK3TestTokenizer), its EOS a separate [EOS]: K3's end is a
// stop id whatever the config says.
using testing::kK3EndOfMessage;
using testing::kK3SeparateEos;

std::unique_ptr<engine::Tokenizer> MakeK3Tokenizer() {
  return testing::MakeK3TestTokenizer(testing::K3TestEos::kSeparate);
}

struct K3Choice {
  scheduler::Request request;
  ChoiceOptions options;
};

// The chat path's request and options (OptionsFor + ApplyReasoning) for a K3 prompt.
K3Choice K3ChoiceFor(const engine::Tokenizer& tok, const std::string& prompt_text, bool tools) {
  ServedModel model;
  model.tokenizer = &tok;
  model.eos_token_id = kK3SeparateEos;
  GenerationFields gen;
  K3Choice c;
  c.request.prompt = Ids(tok, prompt_text);
  c.request.eos_token_id = kK3SeparateEos;
  c.options = OptionsFor(gen, c.request, tools);
  ApplyReasoning(model, c.request.prompt, &c.request, &c.options);
  return c;
}

// Feeds `ids` one event each (the last ends the choice with kStop); the concatenated deltas.
ChoiceDelta FeedAll(ChoiceDecoder& d, const std::vector<int32_t>& ids) {
  ChoiceDelta all;
  for (size_t i = 0; i < ids.size(); ++i) {
    ChoiceDelta x = d.Apply(Token(
        ids[i], i + 1 == ids.size() ? std::optional(server::FinishReason::kStop) : std::nullopt));
    all.text += x.text;
    all.reasoning += x.reasoning;
    for (auto& c : x.tool_calls) all.tool_calls.push_back(c);
    if (x.finish_reason) all.finish_reason = x.finish_reason;
  }
  return all;
}

TEST(ChoiceDecoderTest, KimiK3ReplyIsSplitIntoReasoningContentAndWholeToolCalls) {
  auto tok = MakeK3Tokenizer();
  K3Choice c =
      K3ChoiceFor(*tok,
                  "<|open|>message role=\"user\"<|sep|>hi<|close|>message<|sep|><|end_of_msg|>"
                  "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>",
                  /*tools=*/true);
  EXPECT_TRUE(c.options.xtml);
  EXPECT_TRUE(c.options.xtml_thinking);
  EXPECT_FALSE(c.options.detokenizer.skip_special_tokens);
  EXPECT_THAT(c.request.stop_token_ids, ::testing::Contains(kK3EndOfMessage));
  EXPECT_THAT(c.options.hidden_stop_ids, ::testing::Contains(kK3EndOfMessage));

  ChoiceDecoder d(*tok, c.options);
  std::vector<int32_t> ids = Ids(
      *tok,
      "Weather first.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>"
      "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
      "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>"
      "<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|>"
      "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>");
  ids.push_back(kK3EndOfMessage);
  // The call arrives whole, in the delta of the token that closes it.
  ChoiceDelta all;
  for (size_t i = 0; i < ids.size(); ++i) {
    ChoiceDelta x = d.Apply(Token(
        ids[i], i + 1 == ids.size() ? std::optional(server::FinishReason::kStop) : std::nullopt));
    EXPECT_EQ(x.text.find('<'), std::string::npos) << x.text;
    all.text += x.text;
    all.reasoning += x.reasoning;
    for (auto& call : x.tool_calls) all.tool_calls.push_back(call);
    if (x.finish_reason) all.finish_reason = x.finish_reason;
  }
  EXPECT_EQ(all.reasoning, "Weather first.");
  EXPECT_EQ(all.text, "Checking.");
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(all.tool_calls[0].index, 0);
  ASSERT_TRUE(all.tool_calls[0].id.has_value());
  EXPECT_EQ(all.tool_calls[0].id->rfind("chatcmpl-tool-", 0), 0u);
  EXPECT_EQ(all.tool_calls[0].name, "get_weather");
  EXPECT_EQ(all.tool_calls[0].arguments, R"({"city": "Paris", "days": 3})");
  EXPECT_EQ(all.finish_reason, "tool_calls");
  EXPECT_EQ(d.num_tool_calls(), 1);
}

TEST(ChoiceDecoderTest, KimiK3WithThinkingOffAndNoToolsKeepsOnlyTheResponse) {
  auto tok = MakeK3Tokenizer();
  K3Choice c = K3ChoiceFor(*tok, "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>",
                           /*tools=*/false);
  EXPECT_TRUE(c.options.xtml);
  EXPECT_FALSE(c.options.xtml_thinking);
  ChoiceDecoder d(*tok, c.options);
  std::vector<int32_t> ids = Ids(*tok,
                                 "Hello <b>there</b>.<|close|>response<|sep|><|open|>tools<|sep|>"
                                 "<|open|>call tool=\"f\"<|sep|><|close|>call<|sep|>"
                                 "<|close|>tools<|sep|><|close|>message<|sep|>");
  ids.push_back(kK3EndOfMessage);
  ChoiceDelta all = FeedAll(d, ids);
  EXPECT_EQ(all.reasoning, "");
  EXPECT_EQ(all.text, "Hello <b>there</b>.");
  EXPECT_TRUE(all.tool_calls.empty());
  EXPECT_EQ(all.finish_reason, "stop");
}

TEST(ChoiceDecoderTest, KimiK3ReasoningCutByLengthIsKeptAndItsCutMarkerDropped) {
  auto tok = MakeK3Tokenizer();
  K3Choice c = K3ChoiceFor(*tok, "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>",
                           /*tools=*/true);
  ChoiceDecoder d(*tok, c.options);
  const std::vector<int32_t> ids = Ids(*tok, "Still thinking<|close|>think");
  ChoiceDelta all;
  for (size_t i = 0; i < ids.size(); ++i) {
    ChoiceDelta x = d.Apply(Token(
        ids[i], i + 1 == ids.size() ? std::optional(server::FinishReason::kLength) : std::nullopt));
    all.reasoning += x.reasoning;
    all.text += x.text;
    if (x.finish_reason) all.finish_reason = x.finish_reason;
  }
  EXPECT_EQ(all.reasoning, "Still thinking");
  EXPECT_EQ(all.text, "");
  EXPECT_EQ(all.finish_reason, "length");
}

TEST(ChoiceDecoderTest, AModelWithoutXtmlTokensIsNotReadAsXtml) {
  auto tok = testing::MakeTestTokenizer();
  ServedModel model;
  model.tokenizer = tok.get();
  GenerationFields gen;
  scheduler::Request r;
  ChoiceOptions o = OptionsFor(gen, r, /*parse_tool_calls=*/false);
  ApplyReasoning(model, Ids(*tok, "<|im_assistant|>"), &r, &o);
  EXPECT_FALSE(o.xtml);
}

}  // namespace
}  // namespace strata::frontend
