// Forced tool calls and structured output on a Kimi K3 model, end to end without sockets: the
// scripted engine's noise logits (a random model) go through the real sampler under the XTML
// reply constraint, and the reply, parsed by the server's K3 parser, is a call of the named tool
// with schema-valid arguments, or schema-valid JSON content, for every seed.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/matcher_testing.h"
#include "server/frontend/openai_service.h"
#include "server/frontend/testing/pending_response.h"
#include "server/frontend/testing/scripted_executor.h"

namespace strata::frontend {
namespace {

using testing::kK3EndOfMessage;

std::pair<int, std::string> Post(OpenAiService& service, const std::string& body) {
  http::HttpRequest request;
  request.method = "POST";
  request.target = "/v1/chat/completions";
  request.path = request.target;
  request.body = body;
  http::HandlerResult result = service.Handle(std::move(request));
  const http::HttpResponse out = testing::DrivePending(&result);
  return {out.status, out.body};
}

// True when `text` is JSON matching `schema`.
bool FitsSchema(const std::string& schema, const std::string& text) {
  absl::StatusOr<structured::JsonGrammar> g = structured::CompileJsonSchema(Json::parse(schema));
  CHECK(g.ok()) << g.status();
  return structured::testing::Accepts(*g, text);
}

constexpr char kParameters[] =
    R"({"type": "object", "properties": {"city": {"enum": ["Paris", "Tokyo"]},)"
    R"( "days": {"type": "integer", "minimum": 1, "maximum": 14}, "metric": {"type": "boolean"}},)"
    R"( "required": ["city", "days"], "additionalProperties": false})";

std::string Tools() {
  return absl::StrCat(
      R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": )",
      kParameters,
      R"(}}, {"type": "function", "function": {"name": "search", "parameters": {"type": "object",)"
      R"( "properties": {"q": {"type": "string"}}}}}])");
}

class KimiK3ConstrainedTest : public ::testing::Test {
 protected:
  KimiK3ConstrainedTest()
      : fixture_(testing::FixtureOptions{.max_model_len = 8192}),
        tokenizer_(testing::MakeK3TestTokenizer(testing::K3TestEos::kEndOfMessage)),
        service_(ServiceOptions{"", {}, 3}) {
    ServedModel& served = fixture_.mutable_served();
    served.tokenizer = tokenizer_.get();
    served.chat_template = &xtml_;
    served.chat_template_tools = &xtml_;
    served.eos_token_id = kK3EndOfMessage;
    served.token_vocab = ConstraintVocab(*tokenizer_);
    served.tool_call_tokens = std::nullopt;
    served.think_begin_id = -1;
    served.think_end_id = -1;
    service_.SetModel(&fixture_.served());
  }
  // The reply starts with `text` (the scripted model writes it), then is noise.
  void Script(const std::string& text) {
    std::vector<int32_t> ids =
        tokenizer_->Encode(text, {.add_special_tokens = false, .parse_special = true});
    fixture_.executor().SetScript([ids](const std::vector<int32_t>&) { return ids; });
  }

  testing::Fixture fixture_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  engine::ChatTemplate xtml_ = engine::ChatTemplate::Xtml();
  OpenAiService service_;
};

TEST_F(KimiK3ConstrainedTest, NamedToolChoiceAlwaysParsesAsACallWithSchemaValidArguments) {
  for (int seed = 1; seed <= 6; ++seed) {
    auto [status, text] =
        Post(service_,
             absl::StrCat(
                 R"({"messages": [{"role": "user", "content": "Weather?"}], )", Tools(),
                 R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},)"
                 R"( "chat_template_kwargs": {"thinking": false}, "max_tokens": 2000,)"
                 R"( "temperature": 1.0, "seed": )",
                 seed, "}"));
    ASSERT_EQ(status, 200) << text;
    const Json j = Json::parse(text);
    const Json& message = j["choices"][0]["message"];
    ASSERT_EQ(message["tool_calls"].size(), 1u) << text;
    EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
    const std::string arguments = message["tool_calls"][0]["function"]["arguments"];
    EXPECT_TRUE(FitsSchema(kParameters, arguments)) << arguments;
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls") << text;
  }
}

TEST_F(KimiK3ConstrainedTest, RequiredToolChoiceCallsAfterTheReasoning) {
  // The model reasons, then closes the think channel; the constraint takes over from there.
  Script("Let me check.<|close|>think<|sep|>");
  for (int seed = 1; seed <= 4; ++seed) {
    auto [status, text] =
        Post(service_,
             absl::StrCat(R"({"messages": [{"role": "user", "content": "Weather?"}], )", Tools(),
                          R"(, "tool_choice": "required", "max_tokens": 4000,)"
                          R"( "parallel_tool_calls": false, "seed": )",
                          seed, "}"));
    ASSERT_EQ(status, 200) << text;
    const Json j = Json::parse(text);
    const Json& message = j["choices"][0]["message"];
    EXPECT_EQ(message["reasoning_content"], "Let me check.") << text;
    ASSERT_EQ(message["tool_calls"].size(), 1u) << text;
    const std::string name = message["tool_calls"][0]["function"]["name"];
    const std::string arguments = message["tool_calls"][0]["function"]["arguments"];
    ASSERT_TRUE(name == "get_weather" || name == "search") << name;
    if (name == "get_weather") {
      EXPECT_TRUE(FitsSchema(kParameters, arguments)) << arguments;
    } else {
      // Any text for the optional "q", and nothing else.
      EXPECT_TRUE(FitsSchema(
          R"({"type": "object", "properties": {"q": {"type": "string"}}, "additionalProperties": false})",
          arguments))
          << arguments;
    }
  }
}

TEST_F(KimiK3ConstrainedTest, ResponseFormatMakesTheContentSchemaValidJson) {
  const std::string schema =
      R"({"type": "object", "properties": {"answer": {"type": "string", "maxLength": 6},)"
      R"( "n": {"type": "integer"}}, "required": ["answer", "n"], "additionalProperties": false})";
  for (bool thinking : {false, true}) {
    Script(thinking ? "Hmm.<|close|>think<|sep|>" : "");
    for (int seed = 1; seed <= 4; ++seed) {
      auto [status, text] =
          Post(service_,
               absl::StrCat(
                   R"({"messages": [{"role": "user", "content": "Answer in JSON."}],)",
                   R"( "response_format": {"type": "json_schema", "json_schema": {"name": "a",)",
                   R"( "schema": )", schema, R"(}}, "chat_template_kwargs": {"thinking": )",
                   thinking ? "true" : "false", R"(}, "max_tokens": 2000, "seed": )", seed, "}"));
      ASSERT_EQ(status, 200) << text;
      const Json j = Json::parse(text);
      const Json& message = j["choices"][0]["message"];
      ASSERT_TRUE(message["content"].is_string()) << text;
      EXPECT_TRUE(FitsSchema(schema, message["content"])) << text;
      if (thinking) {
        EXPECT_EQ(message["reasoning_content"], "Hmm.") << text;
      }
      EXPECT_EQ(j["choices"][0]["finish_reason"], "stop") << text;
    }
  }
}

TEST_F(KimiK3ConstrainedTest, ForcedToolWhoseParametersAreNotAnObjectIsA400) {
  auto [status, text] = Post(
      service_,
      R"({"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function",)"
      R"( "function": {"name": "f", "parameters": {"type": "array"}}}], "tool_choice": "required"})");
  EXPECT_EQ(status, 400) << text;
  EXPECT_NE(text.find("tool 'f': a forced Kimi K3 tool call needs `parameters` to be an object"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace strata::frontend
