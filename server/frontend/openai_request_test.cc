// Validation of OpenAI request bodies: every error names its field (param), has a string code
// and a message with the limit; valid bodies map onto the engine's fields.
#include "server/frontend/openai_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/types/span.h"

#include "server/frontend/api_error.h"

namespace strata::frontend {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

RequestLimits TestLimits() {
  RequestLimits limits;
  limits.vocab_size = 320;
  return limits;
}

struct ErrorCase {
  const char* body;
  const char* code;
  const char* param;  // nullptr: JSON null
  const char* message_part;
};

ApiError ChatError(std::string_view body) {
  absl::StatusOr<Json> json = ParseJsonBody(body);
  if (!json.ok()) return ToApiError(json.status());
  absl::StatusOr<ChatCompletionRequest> req = ParseChatCompletionRequest(*json, TestLimits());
  EXPECT_FALSE(req.ok()) << body;
  return req.ok() ? ApiError{} : ToApiError(req.status());
}

ApiError CompletionError(std::string_view body) {
  absl::StatusOr<Json> json = ParseJsonBody(body);
  if (!json.ok()) return ToApiError(json.status());
  absl::StatusOr<CompletionRequest> req = ParseCompletionRequest(*json, TestLimits());
  EXPECT_FALSE(req.ok()) << body;
  return req.ok() ? ApiError{} : ToApiError(req.status());
}

void ExpectError(const ApiError& e, const ErrorCase& c) {
  SCOPED_TRACE(c.body);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.code, c.code);
  if (c.param == nullptr) {
    EXPECT_FALSE(e.param.has_value()) << *e.param;
  } else {
    EXPECT_EQ(e.param.value_or("<null>"), c.param);
  }
  EXPECT_THAT(e.message, HasSubstr(c.message_part));
}

constexpr char kMsg[] = R"("messages": [{"role": "user", "content": "hi"}])";

std::string Chat(const std::string& fields) {
  return std::string("{") + kMsg + (fields.empty() ? "" : ", " + fields) + "}";
}

// Each case: the chat body with `fields` is refused as the case says.
void ExpectChatErrors(absl::Span<const std::pair<std::string, ErrorCase>> cases) {
  for (const auto& [fields, c] : cases) {
    ErrorCase with_body = c;
    const std::string body = Chat(fields);
    with_body.body = body.c_str();
    ExpectError(ChatError(body), with_body);
  }
}

TEST(ChatRequestTest, BodyLevelErrorsHaveNoParam) {
  ExpectError(ChatError(R"({"messages": [)"), {"", "invalid_json", nullptr, "not valid JSON"});
  ExpectError(ChatError("[1, 2]"), {"", "invalid_type", nullptr, "JSON object"});
  ExpectError(ChatError("{\"messages\": \"\xff\"}"), {"", "invalid_utf8", nullptr, "offset 14"});
  ExpectError(ChatError(R"({"n": 1e999})"), {"", "invalid_json", nullptr, "not valid JSON"});
}

TEST(ChatRequestTest, MessageErrorsNameTheMessageField) {
  const ErrorCase cases[] = {
      {"{}", "missing_required_parameter", "messages", "'messages' is required"},
      {R"({"messages": {}})", "invalid_type", "messages", "array"},
      {R"({"messages": []})", "invalid_value", "messages", "at least one message"},
      {R"({"messages": [3]})", "invalid_type", "messages[0]", "object"},
      {R"({"messages": [{"content": "x"}]})", "missing_required_parameter", "messages[0].role",
       "required"},
      {R"({"messages": [{"role": "robot", "content": "x"}]})", "invalid_value", "messages[0].role",
       "unknown role 'robot'"},
      {R"({"messages": [{"role": "user"}]})", "missing_required_parameter", "messages[0].content",
       "required"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "invalid_type", "messages[0].content",
       "content parts"},
      {R"({"messages": [{"role": "user", "content": [7]}]})", "invalid_type",
       "messages[0].content[0]", "object"},
      {R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})", "invalid_value",
       "messages[0].content[0].type", "unknown content part type 'audio'"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "invalid_type",
       "messages[0].content[0].text", "string"},
      // The image itself is checked when the prompt is built (tests/http/vision_serve_test.py); the
      // parser refuses only a part that holds no URL string.
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url",
          "image_url": {"url": 5}}]}]})",
       "invalid_type", "messages[0].content[0].image_url.url", "must be a string"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"},
          {"type": "image_url", "image_url": "data:image/png;base64,AAAA"}]}]})",
       "invalid_type", "messages[0].content[1].image_url.url", "must be a string"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "invalid_type",
       "messages[0].content[0].image_url.url", "must be a string"},
      {R"({"messages": [{"role": "tool", "content": "42"}]})", "missing_required_parameter",
       "messages[0].tool_call_id", "required"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "a",
          "function": {"name": "f"}}]}]})",
       "missing_required_parameter", "messages[0].tool_calls[0].function.arguments", "required"},
      {R"({"messages": [{"role": "user", "content": "x", "name": 3}]})", "invalid_type",
       "messages[0].name", "string"},
  };
  for (const ErrorCase& c : cases) ExpectError(ChatError(c.body), c);
}

TEST(ChatRequestTest, ImagePartsAreKeptForThePromptBuilder) {
  // Any URL string parses (data:, remote, garbage): the prompt builder decodes or refuses it
  // where the served model's vision tower and limits are known. `detail` is accepted.
  absl::StatusOr<ChatCompletionRequest> req =
      ParseChatCompletionRequest(*ParseJsonBody(R"({"messages": [{"role": "user", "content": [
          {"type": "text", "text": "What is it?"},
          {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA",
                                              "detail": "low"}},
          {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]})"),
                                 TestLimits());
  ASSERT_TRUE(req.ok()) << req.status();
  const Json& content = req->messages[0]["content"];
  ASSERT_EQ(content.size(), 3u) << content.dump();
  EXPECT_EQ(content[1]["type"], "image_url");
  EXPECT_EQ(content[1]["image_url"]["url"], "data:image/png;base64,AAAA");
  EXPECT_EQ(content[2]["image_url"]["url"], "https://x/y.png");
}

TEST(ChatRequestTest, SamplingErrorsNameFieldAndLimit) {
  const std::pair<std::string, ErrorCase> cases[] = {
      {R"("temperature": "hot")", {"", "invalid_type", "temperature", "number in [0, 2]"}},
      {R"("temperature": 3)", {"", "invalid_value", "temperature", "in [0, 2]; got 3"}},
      {R"("top_p": 0)", {"", "invalid_value", "top_p", "(0, 1]"}},
      {R"("top_k": -2)", {"", "invalid_value", "top_k", "[-1, 2147483647]"}},
      {R"("min_p": 1.5)", {"", "invalid_value", "min_p", "[0, 1]"}},
      {R"("presence_penalty": -3)", {"", "invalid_value", "presence_penalty", "[-2, 2]"}},
      {R"("frequency_penalty": 2.5)", {"", "invalid_value", "frequency_penalty", "[-2, 2]"}},
      {R"("repetition_penalty": 0)", {"", "invalid_value", "repetition_penalty", "(0, 2]"}},
      {R"("max_tokens": 0)", {"", "invalid_value", "max_tokens", "[1, 2147483648]; got 0"}},
      {R"("max_tokens": 1.5)", {"", "invalid_type", "max_tokens", "integer"}},
      {R"("max_completion_tokens": -1)", {"", "invalid_value", "max_completion_tokens", "got -1"}},
      {R"("n": 0)", {"", "invalid_value", "n", "[1, 128]"}},
      {R"("n": 129)", {"", "invalid_value", "n", "got 129"}},
      {R"("seed": "x")", {"", "invalid_type", "seed", "integer"}},
      {R"("stop": 5)", {"", "invalid_type", "stop", "a string or an array of strings"}},
      {R"("stop": ["a", 1])", {"", "invalid_type", "stop[1]", "string"}},
      {R"("stop_token_ids": [1, 320])",
       {"", "invalid_value", "stop_token_ids[1]", "outside the vocabulary [0, 320)"}},
      {R"("stop_token_ids": "1")", {"", "invalid_type", "stop_token_ids", "array"}},
      {R"("logprobs": "yes")", {"", "invalid_type", "logprobs", "boolean"}},
      {R"("logprobs": true, "top_logprobs": 21)",
       {"", "invalid_value", "top_logprobs", "[0, 20]; got 21"}},
      {R"("top_logprobs": 2)", {"", "invalid_value", "top_logprobs", "requires 'logprobs'"}},
      {R"("logit_bias": {"x": 1})", {"", "invalid_value", "logit_bias", "not a token id"}},
      {R"("logit_bias": {"5": 101})", {"", "invalid_value", "logit_bias", "[-100, 100]"}},
      {R"("logit_bias": {"5": "a"})", {"", "invalid_type", "logit_bias.5", "number"}},
      {R"("stream": 1)", {"", "invalid_type", "stream", "boolean"}},
      {R"("stream_options": {"include_usage": true})",
       {"", "invalid_value", "stream_options", "only allowed with stream: true"}},
      {R"("stream": true, "stream_options": {"include_usage": 1})",
       {"", "invalid_type", "stream_options.include_usage", "boolean"}},
      {R"("priority": "high")", {"", "invalid_type", "priority", "integer"}},
      {R"("model": 5)", {"", "invalid_type", "model", "string"}},
  };
  ExpectChatErrors(cases);
}

TEST(ChatRequestTest, ToolsAndFormatErrors) {
  const std::pair<std::string, ErrorCase> cases[] = {
      {R"("response_format": {"type": "json_schema"})",
       {"", "missing_required_parameter", "response_format.json_schema", "json_schema"}},
      {R"("response_format": {"type": "json_schema", "json_schema": []})",
       {"", "invalid_type", "response_format.json_schema", "object"}},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": 1}})",
       {"", "invalid_type", "response_format.json_schema.name", "string"}},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema":
          {"type": "object", "properties": {"age": {"type": "integer", "not": {"const": 2}}}}}})",
       {"", "invalid_value", "response_format.json_schema.schema",
        "schema at '#/properties/age': keyword 'not' is not supported"}},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {"$ref": "#/x"}}})",
       {"", "invalid_value", "response_format.json_schema.schema", "does not resolve"}},
      {R"("response_format": {"type": "xml"})",
       {"", "invalid_value", "response_format.type", "unknown response_format type"}},
      {R"("tools": {})", {"", "invalid_type", "tools", "array"}},
      {R"("tools": [{"type": "function", "function": {"name": "bad name"}}])",
       {"", "invalid_value", "tools[0].function.name", "1-64 characters"}},
      {R"("tools": [{"type": "function"}])", {"", "invalid_type", "tools[0].function", "object"}},
      {R"("tools": [{"type": "web"}])", {"", "invalid_value", "tools[0].type", "'web'"}},
      {R"("tools": [{"function": {"name": "f", "parameters": 3}}])",
       {"", "invalid_type", "tools[0].function.parameters", "JSON Schema"}},
      {R"("tool_choice": "required")", {"", "invalid_value", "tool_choice", "requires 'tools'"}},
      {R"("tools": [{"function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "g"}})",
       {"", "invalid_value", "tool_choice.function.name", "'g', which is not in 'tools'"}},
      {R"("tools": [{"function": {"name": "f"}}], "tool_choice": {"type": "function"})",
       {"", "invalid_type", "tool_choice.function", "object"}},
      {R"("tools": [{"function": {"name": "f", "parameters": {"type": "object",
          "properties": {"x": {"type": "string", "patternProperties": {}}}}}}], "tool_choice": "required")",
       {"", "invalid_value", "tools[0].function.parameters",
        "keyword 'patternProperties' is not supported"}},
      {R"("tools": [{"function": {"name": "f"}}], "tool_choice": "required",
          "response_format": {"type": "json_object"})",
       {"", "unsupported_value", "response_format", "forced tool_choice"}},
      {R"("tool_choice": "auto")", {"", "invalid_value", "tool_choice", "requires 'tools'"}},
      {R"("tool_choice": "sometimes")", {"", "invalid_value", "tool_choice", "sometimes"}},
      {R"("chat_template_kwargs": [1])", {"", "invalid_type", "chat_template_kwargs", "object"}},
  };
  ExpectChatErrors(cases);
}

TEST(ChatRequestTest, ResponseFormatCompilesTheOutputGrammar) {
  auto grammar_of =
      [](const std::string& fields) -> std::shared_ptr<const structured::JsonGrammar> {
    absl::StatusOr<ChatCompletionRequest> req =
        ParseChatCompletionRequest(*ParseJsonBody(Chat(fields)), TestLimits());
    EXPECT_TRUE(req.ok()) << req.status();
    return req.ok() ? req->gen.json_grammar : nullptr;
  };
  EXPECT_EQ(grammar_of(R"("response_format": {"type": "text"})"), nullptr);
  auto object = grammar_of(R"("response_format": {"type": "json_object"})");
  ASSERT_NE(object, nullptr);
  EXPECT_EQ(object->nodes[static_cast<size_t>(object->root)].kind, structured::NodeKind::kObject);
  auto schema = grammar_of(R"("response_format": {"type": "json_schema", "json_schema":
      {"name": "person", "strict": true, "schema": {"type": "object",
       "properties": {"name": {"type": "string"}}, "required": ["name"],
       "additionalProperties": false}}})");
  ASSERT_NE(schema, nullptr);
  const structured::SchemaNode& root = schema->nodes[static_cast<size_t>(schema->root)];
  ASSERT_EQ(root.properties.size(), 1u);
  EXPECT_EQ(root.properties[0].key_text, "name\"");
  EXPECT_TRUE(root.properties[0].required);
  // Without a schema: any JSON value.
  auto any =
      grammar_of(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})");
  ASSERT_NE(any, nullptr);
  EXPECT_EQ(any->nodes[static_cast<size_t>(any->root)].kind, structured::NodeKind::kAny);
}

TEST(ChatRequestTest, VllmGuidedFieldsAndStructuredOutputsConstrainTheOutputToo) {
  auto root_of = [](const std::string& fields) {
    absl::StatusOr<ChatCompletionRequest> req =
        ParseChatCompletionRequest(*ParseJsonBody(Chat(fields)), TestLimits());
    EXPECT_TRUE(req.ok()) << fields << ": " << req.status();
    EXPECT_TRUE(req.ok() && req->gen.json_grammar) << fields;
    return req.ok() && req->gen.json_grammar
               ? req->gen.json_grammar->nodes[static_cast<size_t>(req->gen.json_grammar->root)]
               : structured::SchemaNode();
  };
  const structured::SchemaNode choice = root_of(R"("guided_choice": ["yes", "no"])");
  EXPECT_EQ(choice.kind, structured::NodeKind::kLiterals);
  EXPECT_EQ(choice.literals, (std::vector<std::string>{"no", "yes"}));  // raw text, sorted
  EXPECT_EQ(root_of(R"("structured_outputs": {"choice": ["a"]})").literals,
            std::vector<std::string>{"a"});
  EXPECT_EQ(root_of(R"("guided_json": {"type": "integer"})").kind, structured::NodeKind::kInteger);
  EXPECT_EQ(root_of(R"("guided_json": "{\"type\": \"string\"}")").kind,
            structured::NodeKind::kString);
  EXPECT_EQ(root_of(R"("structured_outputs": {"json": {"type": "array"}})").kind,
            structured::NodeKind::kArray);
  EXPECT_EQ(root_of(R"("structured_outputs": {"json_object": true})").kind,
            structured::NodeKind::kObject);
  EXPECT_EQ(root_of(R"("guided_regex": "(yes|no)!")").kind, structured::NodeKind::kText);
  EXPECT_EQ(root_of(R"("structured_outputs": {"regex": "\\d+"})").kind,
            structured::NodeKind::kText);
  // GBNF grammars under vLLM's, llama.cpp's and SGLang's names.
  for (const char* fields :
       {R"("guided_grammar": "root ::= \"yes\" | \"no\"")",
        R"("structured_outputs": {"grammar": "root ::= [a-z]+"})",
        R"("grammar": "root ::= x\nx ::= \"x\"")", R"("ebnf": "root ::= \"a\"*")"}) {
    absl::StatusOr<ChatCompletionRequest> req =
        ParseChatCompletionRequest(*ParseJsonBody(Chat(fields)), TestLimits());
    ASSERT_TRUE(req.ok()) << fields << ": " << req.status();
    EXPECT_TRUE(req->gen.cfg_grammar != nullptr && req->gen.json_grammar == nullptr) << fields;
    EXPECT_TRUE(req->gen.constrained());
  }
  // llama.cpp's and SGLang's top-level json_schema, SGLang's regex.
  EXPECT_EQ(root_of(R"("json_schema": {"type": "boolean"})").kind, structured::NodeKind::kLiterals);
  EXPECT_EQ(root_of(R"("regex": "[ab]+")").kind, structured::NodeKind::kText);
  const std::pair<std::string, ErrorCase> errors[] = {
      {R"("json_schema": {"type": "integer", "uniqueItems": true})",
       {"", "invalid_value", "json_schema", "uniqueItems"}},
      {R"("regex": "a(")", {"", "invalid_value", "regex", "regex: "}},
      {R"("guided_choice": [])", {"", "invalid_type", "guided_choice", "non-empty array"}},
      {R"("guided_choice": ["a", ""])", {"", "invalid_type", "guided_choice[1]", "non-empty"}},
      {R"("guided_json": "{")", {"", "invalid_value", "guided_json", "not valid JSON"}},
      {R"js("guided_regex": "a(?=b)")js",
       {"", "invalid_value", "guided_regex", "guided_regex: pattern at byte 1: lookaround"}},
      {R"("guided_regex": 7)", {"", "invalid_type", "guided_regex", "a regular expression"}},
      {R"("structured_outputs": {"regex": "a{2000}"})",
       {"", "invalid_value", "structured_outputs.regex", "above 1000"}},
      {R"("guided_grammar": "root ::= x")",
       {"", "invalid_value", "guided_grammar",
        "guided_grammar: grammar line 1, column 10: rule 'x' is used but not defined"}},
      {R"("grammar": "root ::= root \"a\" | \"a\"")",
       {"", "invalid_value", "grammar", "grammar: the grammar is left-recursive"}},
      {R"("ebnf": "")", {"", "invalid_type", "ebnf", "a non-empty string (a GBNF grammar)"}},
      {R"("structured_outputs": {"grammar": ["root ::= \"a\""]})",
       {"", "invalid_type", "structured_outputs.grammar", "a GBNF grammar"}},
      {R"("structured_outputs": {"grammar": "root ::= \"a\"", "regex": "a"})",
       {"", "invalid_value", "structured_outputs",
        "one of json, json_object, choice, regex or grammar"}},
      {R"("guided_regex": "a", "grammar": "root ::= \"a\"")",
       {"", "invalid_value", "grammar", "'guided_regex' and 'grammar' both constrain"}},
      {R"("guided_grammar": "root ::= \"a\"", "min_tokens": 2)",
       {"", "unsupported_value", "min_tokens", "guided_grammar"}},
      {R"("guided_json": {"type": "integer", "not": {"const": 3}})",
       {"", "invalid_value", "guided_json", "'not' is not supported"}},
      {R"("structured_outputs": {"json": {}, "choice": ["a"]})",
       {"", "invalid_value", "structured_outputs", "one of"}},
      {R"("response_format": {"type": "json_object"}, "guided_choice": ["a"])",
       {"", "invalid_value", "guided_choice", "'response_format' and 'guided_choice'"}},
  };
  ExpectChatErrors(errors);
}

TEST(ResponsesRequestTest, InputItemsBecomeChatMessages) {
  absl::StatusOr<Json> body = ParseJsonBody(R"({"instructions": "Be brief", "input": [
      {"role": "developer", "content": "Use metric units"},
      {"type": "message", "role": "user", "content": [
          {"type": "input_text", "text": "Two cities?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": []},
      {"role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
      {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
      {"type": "function_call", "call_id": "c2", "name": "w", "arguments": "{\"x\": 1}"},
      {"type": "function_call_output", "call_id": "c1", "output": "rain"},
      {"type": "function_call_output", "call_id": "c2", "output": [
          {"type": "input_text", "text": "sun"}]}],
    "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}}],
    "tool_choice": {"type": "function", "name": "w"}, "max_output_tokens": 7,
    "reasoning": {"effort": "high"}, "store": true, "include": []})");
  ASSERT_TRUE(body.ok());
  absl::StatusOr<ResponsesRequest> req = ParseResponsesRequest(*body, TestLimits());
  ASSERT_TRUE(req.ok()) << req.status();
  const Json& m = req->chat.messages;
  ASSERT_EQ(m.size(), 6u) << m.dump();
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "Be brief");
  EXPECT_EQ(m[1]["role"], "system");  // developer
  EXPECT_EQ(m[2]["content"][0]["text"], "Two cities?");
  EXPECT_EQ(m[3]["role"], "assistant");      // the reasoning item is dropped
  EXPECT_EQ(m[3]["tool_calls"].size(), 2u);  // the calls join the assistant's turn
  EXPECT_EQ(m[3]["tool_calls"][1]["function"]["arguments"], "{\"x\": 1}");
  EXPECT_EQ(m[4]["role"], "tool");
  EXPECT_EQ(m[4]["tool_call_id"], "c1");
  EXPECT_EQ(m[5]["content"][0]["text"], "sun");
  EXPECT_EQ(req->chat.tools[0]["function"]["name"], "w");
  EXPECT_EQ(req->chat.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(req->chat.gen.max_tokens, 7);
  EXPECT_EQ(req->chat.chat_template_kwargs["thinking"], true);
  EXPECT_TRUE(req->store);
  EXPECT_EQ(req->echo["store"], false);  // until the service stored it
  EXPECT_EQ(req->echo["max_output_tokens"], 7);
  // An input_image becomes a chat image_url part (decoded when the prompt is built); one
  // without a URL string is refused naming the Responses field.
  absl::StatusOr<ResponsesRequest> image =
      ParseResponsesRequest(*ParseJsonBody(R"({"input": [{"role": "user", "content": [
          {"type": "input_text", "text": "What is it?"},
          {"type": "input_image", "image_url": "data:image/png;base64,AAAA",
           "detail": "auto"}]}]})"),
                            TestLimits());
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->chat.messages[0]["content"][1],
            (Json{{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AAAA"}}}}));
  absl::StatusOr<ResponsesRequest> no_url =
      ParseResponsesRequest(*ParseJsonBody(R"({"input": [{"role": "user", "content": [
          {"type": "input_image", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]})"),
                            TestLimits());
  ASSERT_FALSE(no_url.ok());
  EXPECT_EQ(ToApiError(no_url.status()).code, "invalid_type");
  EXPECT_EQ(ToApiError(no_url.status()).param.value_or(""), "input[0].content[0].image_url");
}

TEST(ChatRequestTest, MinTokensIsReadAndChecked) {
  absl::StatusOr<ChatCompletionRequest> req = ParseChatCompletionRequest(
      *ParseJsonBody(Chat(R"("min_tokens": 5, "max_tokens": 5)")), TestLimits());
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->gen.min_tokens, 5);
  const std::pair<std::string, ErrorCase> errors[] = {
      {R"("min_tokens": -1)", {"", "invalid_value", "min_tokens", "[0, 2147483648]; got -1"}},
      {R"("min_tokens": 6, "max_tokens": 5)",
       {"", "invalid_value", "min_tokens", "at most max_tokens (5)"}},
      {R"("min_tokens": 2, "guided_choice": ["a"])",
       {"", "unsupported_value", "min_tokens", "constrained output"}},
  };
  ExpectChatErrors(errors);
}

TEST(ChatRequestTest, ThinkingTokenBudgetIsReadAndChecked) {
  absl::StatusOr<ChatCompletionRequest> req = ParseChatCompletionRequest(
      *ParseJsonBody(Chat(R"("thinking_token_budget": 0)")), TestLimits());
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->thinking_token_budget, 0);
  req = ParseChatCompletionRequest(*ParseJsonBody(Chat("")), TestLimits());
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_FALSE(req->thinking_token_budget.has_value());
  const std::pair<std::string, ErrorCase> errors[] = {
      {R"("thinking_token_budget": -1)",
       {"", "invalid_value", "thinking_token_budget", "[0, 2147483648]; got -1"}},
      {R"("thinking_token_budget": "8")", {"", "invalid_type", "thinking_token_budget", ""}},
  };
  ExpectChatErrors(errors);
}

TEST(ResponsesRequestTest, ReasoningEffortMapsOntoTheThinkingSwitchAndTheEffort) {
  auto parse = [](const std::string& reasoning) {
    return ParseResponsesRequest(
        *ParseJsonBody(R"({"input": "x", "reasoning": )" + reasoning + "}"), TestLimits());
  };
  for (const char* off : {R"({"effort": "none"})", R"({"effort": "minimal"})", "{}"}) {
    absl::StatusOr<ResponsesRequest> req = parse(off);
    ASSERT_TRUE(req.ok()) << req.status();
    EXPECT_EQ(req->chat.chat_template_kwargs["thinking"], false) << off;
    EXPECT_FALSE(req->chat.reasoning_effort.has_value()) << off;
  }
  absl::StatusOr<ResponsesRequest> high = parse(R"({"effort": "high"})");
  ASSERT_TRUE(high.ok()) << high.status();
  EXPECT_EQ(high->chat.chat_template_kwargs["thinking"], true);
  EXPECT_EQ(high->chat.reasoning_effort, "high");
  EXPECT_EQ(high->chat.chat_template_kwargs["reasoning_effort"], "high");
}

TEST(ChatRequestTest, ForcedToolChoicesCompileTheToolsTheyAllow) {
  const std::string tools = R"("tools": [
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
       "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "now"}}])";
  auto parse = [&](const std::string& fields) {
    absl::StatusOr<ChatCompletionRequest> req =
        ParseChatCompletionRequest(*ParseJsonBody(Chat(tools + ", " + fields)), TestLimits());
    EXPECT_TRUE(req.ok()) << req.status();
    return req.ok() ? *std::move(req) : ChatCompletionRequest();
  };
  ChatCompletionRequest required = parse(R"("tool_choice": "required")");
  EXPECT_EQ(required.tool_choice, ToolChoice::kRequired);
  EXPECT_TRUE(required.parallel_tool_calls);
  ASSERT_EQ(required.forced_tools.size(), 2u);
  EXPECT_EQ(required.forced_tools[0].name, "get_weather");
  EXPECT_EQ(required.forced_tools[1].name, "now");
  // No parameters: any object.
  const structured::JsonGrammar& any = *required.forced_tools[1].arguments;
  EXPECT_EQ(any.nodes[static_cast<size_t>(any.root)].kind, structured::NodeKind::kObject);
  ChatCompletionRequest named = parse(
      R"("tool_choice": {"type": "function", "function": {"name": "now"}},
         "parallel_tool_calls": false)");
  EXPECT_EQ(named.tool_choice, ToolChoice::kNamed);
  EXPECT_FALSE(named.parallel_tool_calls);
  ASSERT_EQ(named.forced_tools.size(), 1u);
  EXPECT_EQ(named.forced_tools[0].name, "now");
  EXPECT_TRUE(parse(R"("tool_choice": "auto")").forced_tools.empty());
}

TEST(ChatRequestTest, EveryDocumentedFieldIsRead) {
  const std::string body = Chat(R"(
      "model": "m", "stream": true, "stream_options": {"include_usage": true},
      "max_tokens": 10, "max_completion_tokens": 12, "temperature": 0.5, "top_p": 0.9,
      "top_k": 40, "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.5,
      "repetition_penalty": 1.1, "stop": ["a", "", "bc"], "stop_token_ids": [7, 9],
      "seed": -1, "n": 3, "logprobs": true, "top_logprobs": 4, "logit_bias": {"5": -100},
      "response_format": {"type": "text"}, "user": "u", "priority": -2, "request_id": "r1",
      "cache_salt": "s", "ignore_eos": true, "skip_special_tokens": false,
      "include_stop_str_in_output": true, "add_generation_prompt": false,
      "chat_template_kwargs": {"thinking": true}, "tool_choice": "none",
      "tools": [{"type": "function", "function": {"name": "get_weather",
                 "parameters": {"type": "object"}}}], "some_future_field": 1)");
  absl::StatusOr<ChatCompletionRequest> req =
      ParseChatCompletionRequest(*ParseJsonBody(body), TestLimits());
  ASSERT_TRUE(req.ok()) << req.status();
  const GenerationFields& g = req->gen;
  EXPECT_EQ(g.model, "m");
  EXPECT_TRUE(g.stream);
  EXPECT_TRUE(g.include_usage);
  EXPECT_EQ(g.max_tokens, 12);  // max_completion_tokens wins, as in vLLM
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_EQ(g.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(g.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(g.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(g.sampling.repetition_penalty, 1.1f);
  EXPECT_THAT(g.stop, ElementsAre("a", "bc"));  // empty stop strings are dropped
  EXPECT_THAT(g.stop_token_ids, ElementsAre(7, 9));
  EXPECT_EQ(g.sampling.seed, std::optional<uint64_t>(UINT64_MAX));  // -1 as 64 bits
  EXPECT_EQ(g.n, 3);
  EXPECT_EQ(g.num_logprobs, 4);
  ASSERT_EQ(g.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(g.sampling.logit_bias[0].first, 5);
  EXPECT_FLOAT_EQ(g.sampling.logit_bias[0].second, -100.0f);
  EXPECT_EQ(g.priority, -2);
  EXPECT_EQ(g.request_id, "r1");
  EXPECT_EQ(g.cache_salt, "s");
  EXPECT_TRUE(g.ignore_eos);
  EXPECT_FALSE(g.skip_special_tokens);
  EXPECT_TRUE(g.include_stop_str_in_output);
  EXPECT_FALSE(req->add_generation_prompt);
  EXPECT_EQ(req->chat_template_kwargs["thinking"], true);
  EXPECT_EQ(req->tool_choice, ToolChoice::kNone);
  EXPECT_EQ(req->tools[0]["function"]["name"], "get_weather");
}

// Fields vLLM reads that Strata cannot honour are refused naming them, never silently ignored:
// best_of other than n (vLLM's engine refuses best_of > 1 too), use_beam_search, a chat
// template in the request (vLLM refuses it unless --trust-request-chat-template).
TEST(ChatRequestTest, FieldsStrataCannotHonourAreRefusedNotIgnored) {
  ExpectChatErrors({
      {R"("best_of": 3)", {"", "unsupported_value", "best_of", "other than n (1)"}},
      {R"("best_of": 0)", {"", "invalid_value", "best_of", "[1, 128]"}},
      {R"("use_beam_search": true)", {"", "unsupported_value", "use_beam_search", "not supported"}},
      {R"("chat_template": "{{ messages }}")",
       {"", "unsupported_value", "chat_template", "chat template in the request"}},
      {R"("chat_template_kwargs": {"chat_template": "{{ 1 }}"})",
       {"", "unsupported_value", "chat_template_kwargs.chat_template", "not accepted"}},
  });
  ExpectError(CompletionError(R"({"prompt": "a", "use_beam_search": true})"),
              {"", "unsupported_value", "use_beam_search", "not supported"});
  // What asks for nothing Strata does not do is accepted.
  for (const char* fields : {R"("best_of": 2, "n": 2)", R"("use_beam_search": false)",
                             R"("chat_template": null)", R"("chat_template_kwargs": {"x": 1})"}) {
    absl::StatusOr<ChatCompletionRequest> req =
        ParseChatCompletionRequest(*ParseJsonBody(Chat(fields)), TestLimits());
    EXPECT_TRUE(req.ok()) << fields << ": " << req.status();
  }
}

// vLLM's chat echo: the reply starts with the final message when it has the reply's role.
TEST(ChatRequestTest, EchoRepeatsTheFinalMessageWhenTheReplyContinuesItsRole) {
  auto echo = [](const std::string& body) {
    absl::StatusOr<ChatCompletionRequest> req =
        ParseChatCompletionRequest(*ParseJsonBody(body), TestLimits());
    EXPECT_TRUE(req.ok()) << body << ": " << req.status();
    return req.ok() ? req->echo_text : "<error>";
  };
  const std::string assistant_last =
      R"("messages": [{"role": "user", "content": "hi"},
                      {"role": "assistant", "content": [{"type": "text", "text": "Once "},
                                                        {"type": "text", "text": "upon"}]}])";
  EXPECT_EQ(echo("{" + assistant_last + R"(, "echo": true})"), "Once upon");
  EXPECT_EQ(echo("{" + assistant_last + "}"), "");  // no echo asked
  EXPECT_EQ(echo(Chat(R"("echo": true)")), "");     // a new assistant turn follows the user's
  EXPECT_EQ(echo(Chat(R"("echo": true, "add_generation_prompt": false)")), "hi");
  ExpectChatErrors({{R"("echo": 1)", {"", "invalid_type", "echo", "boolean"}}});
}

TEST(ChatRequestTest, KnownFieldsAreTheSharedOnesThenTheEndpointsOwn) {
  const std::vector<std::string_view> fields = WithGenerationFields({"prompt", "echo"});
  EXPECT_THAT(fields,
              ::testing::IsSupersetOf({"model", "max_tokens", "stop", "n", "best_of",
                                       "response_format", "guided_json", "return_token_ids"}));
  ASSERT_GE(fields.size(), 2u);
  EXPECT_EQ(fields[fields.size() - 2], "prompt");
  EXPECT_EQ(fields.back(), "echo");
}

TEST(ChatRequestTest, DefaultsAreOpenAis) {
  absl::StatusOr<ChatCompletionRequest> req =
      ParseChatCompletionRequest(*ParseJsonBody(Chat(R"("temperature": null)")), TestLimits());
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_FLOAT_EQ(req->gen.sampling.temperature, 1.0f);  // null = default
  EXPECT_FLOAT_EQ(req->gen.sampling.top_p, 1.0f);
  EXPECT_FALSE(req->gen.max_tokens.has_value());
  EXPECT_EQ(req->gen.n, 1);
  EXPECT_EQ(req->gen.num_logprobs, -1);
  EXPECT_FALSE(req->gen.stream);
  EXPECT_TRUE(req->gen.skip_special_tokens);
  EXPECT_TRUE(req->add_generation_prompt);
  EXPECT_TRUE(req->tools.is_null());
}

TEST(CompletionRequestTest, PromptShapesAndErrors) {
  const ErrorCase cases[] = {
      {"{}", "missing_required_parameter", "prompt", "required"},
      {R"({"prompt": 5})", "invalid_type", "prompt", "token-id arrays"},
      {R"({"prompt": []})", "invalid_value", "prompt", "must not be empty"},
      {R"({"prompt": ""})", "invalid_value", "prompt", "must not be empty"},
      {R"({"prompt": [1, 320]})", "invalid_value", "prompt", "outside the vocabulary [0, 320)"},
      {R"({"prompt": [[1, 2], ["a"]]})", "invalid_type", "prompt[1]", "token ids"},
      {R"({"prompt": ["a", ""]})", "invalid_value", "prompt[1]", "must not be empty"},
      {R"({"prompt": "a", "suffix": "b"})", "unsupported_value", "suffix", "not supported"},
      {R"({"prompt": "a", "best_of": 3})", "unsupported_value", "best_of", "not supported"},
      {R"({"prompt": "a", "logprobs": 21})", "invalid_value", "logprobs", "[0, 20]"},
      {R"({"prompt": "a", "logprobs": true})", "invalid_type", "logprobs", "integer"},
      {R"({"prompt": "a", "echo": "yes"})", "invalid_type", "echo", "boolean"},
      {R"({"prompt": ["a", "b", "c"], "n": 100})", "invalid_value", "n", "choices per request"},
  };
  for (const ErrorCase& c : cases) ExpectError(CompletionError(c.body), c);

  auto parse = [](std::string_view body) {
    return ParseCompletionRequest(*ParseJsonBody(body), TestLimits());
  };
  auto text = parse(R"({"prompt": "hello", "echo": true, "logprobs": 2})");
  ASSERT_TRUE(text.ok()) << text.status();
  ASSERT_EQ(text->prompts.size(), 1u);
  EXPECT_EQ(text->prompts[0].text, "hello");
  EXPECT_TRUE(text->echo);
  EXPECT_EQ(text->gen.num_logprobs, 2);
  auto ids = parse(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(ids->prompts[0].token_ids, ElementsAre(1, 2, 3));
  auto lists = parse(R"({"prompt": [[4], "x"]})");
  ASSERT_TRUE(lists.ok()) << lists.status();
  ASSERT_EQ(lists->prompts.size(), 2u);
  EXPECT_THAT(lists->prompts[0].token_ids, ElementsAre(4));
  EXPECT_EQ(lists->prompts[1].text, "x");
}

TEST(ApiErrorTest, StatusCodesMapToHttpTypeAndDefaultCode) {
  struct Row {
    absl::StatusCode code;
    int http;
    const char* type;
    const char* default_code;
  };
  const Row rows[] = {
      {absl::StatusCode::kInvalidArgument, 400, "invalid_request_error", "invalid_value"},
      {absl::StatusCode::kUnauthenticated, 401, "invalid_request_error", "invalid_api_key"},
      {absl::StatusCode::kNotFound, 404, "invalid_request_error", "not_found"},
      {absl::StatusCode::kFailedPrecondition, 405, "invalid_request_error", "method_not_allowed"},
      {absl::StatusCode::kOutOfRange, 413, "invalid_request_error", "request_too_large"},
      {absl::StatusCode::kResourceExhausted, 429, "rate_limit_error", "rate_limit_exceeded"},
      {absl::StatusCode::kUnavailable, 503, "server_error", "service_unavailable"},
      {absl::StatusCode::kInternal, 500, "server_error", "internal_error"},
  };
  for (const Row& row : rows) {
    ApiError e = ToApiError(absl::Status(row.code, "m"));
    EXPECT_EQ(e.http_status, row.http);
    EXPECT_EQ(e.type, row.type);
    EXPECT_EQ(e.code, row.default_code);
    EXPECT_FALSE(e.param.has_value());
  }
  const nlohmann::json j =
      ToApiError(InvalidField("max_tokens", "too many", "context_length_exceeded")).ToJson();
  EXPECT_EQ(j.dump(), R"({"error":{"code":"context_length_exceeded","message":"too many",)"
                      R"("param":"max_tokens","type":"invalid_request_error"}})");
  EXPECT_TRUE(ToApiError(absl::InternalError("x")).ToJson()["error"]["param"].is_null());
}

}  // namespace
}  // namespace strata::frontend
