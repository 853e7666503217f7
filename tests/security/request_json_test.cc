// Hostile request JSON (issue 50): deep nesting anywhere in a request is a 400 naming the limit
// and the service answers the next request; objects of 100,000 keys are answered promptly;
// deep regexes, grammars and schemas are refused. Driven in process, as the HTTP server drives
// the service (OpenAiService::Handle, then Poll on every wake), and through the gRPC request
// builder.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/json_limits.h"
#include "server/frontend/openai_service.h"
#include "server/frontend/testing/scripted_executor.h"
#include "server/grpc/generate_request.h"

namespace strata::security {
namespace {

using frontend::Json;
using frontend::OpenAiService;
using ::testing::HasSubstr;

// Far past any limit, and past what a recursive walker's stack holds (the server died at
// 60,000 levels before).
constexpr int kDeep = 100000;
// The generous bound the issue sets for a 100,000-key body (this machine: ~0.1 s).
constexpr double kPromptSeconds = 2.0;

std::string Open(int levels) { return std::string(static_cast<size_t>(levels), '['); }
std::string Nested(int levels) {
  return Open(levels) + std::string(static_cast<size_t>(levels), ']');
}

// {"k0": 0, ..., "k<n-1>": n-1} without braces: members to splice into an object.
std::string Members(int n, const std::string& prefix = "k") {
  std::string text;
  for (int i = 0; i < n; ++i) {
    absl::StrAppend(&text, i == 0 ? "" : ", ", "\"", prefix, i, "\": ", i);
  }
  return text;
}

struct Reply {
  int status = 0;
  std::string body;
  Json json() const { return Json::parse(body); }
};

// Drives a request to its end as the HTTP server does.
Reply Post(OpenAiService& service, const std::string& path, std::string body) {
  http::HttpRequest request;
  request.method = "POST";
  request.target = path;
  request.path = path;
  request.body = std::move(body);
  http::HandlerResult result = service.Handle(std::move(request));
  Reply reply{result.response.status, result.response.body};
  if (!result.pending) return reply;
  std::mutex mu;
  std::condition_variable cv;
  bool woke = false;
  result.pending->Start([&] {
    std::lock_guard<std::mutex> lock(mu);
    woke = true;
    cv.notify_all();
  });
  http::HttpResponse out = result.response;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!result.pending->Poll(&out)) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_until(lock, deadline, [&] { return woke; })) {
      ADD_FAILURE() << "no progress on " << path;
      break;
    }
    woke = false;
  }
  result.pending.reset();
  return Reply{out.status, out.body};
}

double SecondsFor(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

frontend::testing::FixtureOptions Options() {
  frontend::testing::FixtureOptions options;
  options.max_model_len = 4096;  // room for a long scripted reply
  return options;
}

class RequestJsonTest : public ::testing::Test {
 protected:
  RequestJsonTest() : fixture_(Options()), service_(frontend::ServiceOptions{}) {
    service_.SetModel(&fixture_.served());
    // Every generation: "hello" then the end of turn.
    std::vector<int32_t> ids = fixture_.Ids("hello");
    ids.push_back(frontend::testing::kImEnd);
    fixture_.executor().SetScript([ids](const std::vector<int32_t>&) { return ids; });
  }

  // A 400 with `code`, `param` (null: none) and a message containing `what` (/v1/messages: its
  // own error shape); then the service still answers.
  void ExpectRefused(const std::string& path, std::string body, const std::string& code,
                     const Json& param, const std::string& what) {
    SCOPED_TRACE(path + " " + body.substr(0, 120));
    const Reply reply = Post(service_, path, std::move(body));
    ASSERT_EQ(reply.status, 400) << reply.body.substr(0, 400);
    const Json error = reply.json()["error"];
    if (path.rfind("/v1/messages", 0) == 0) {  // Anthropic's shape: no code, no param
      EXPECT_EQ(error["type"], "invalid_request_error");
    } else {
      EXPECT_EQ(error["code"], code) << reply.body.substr(0, 400);
      EXPECT_EQ(error["param"], param) << reply.body.substr(0, 400);
    }
    EXPECT_THAT(error["message"].get<std::string>(), HasSubstr(what));
    ExpectAlive();
  }

  void ExpectAlive() {
    const Reply reply = Post(service_, "/tokenize", R"({"prompt": "hello"})");
    EXPECT_EQ(reply.status, 200) << reply.body;
  }

  frontend::testing::Fixture fixture_;
  OpenAiService service_;
};

const char kTooDeep[] = "JSON nesting deeper than 256 levels at byte";

TEST_F(RequestJsonTest, DeepNestingInTheBodyIsA400NamingTheLimit) {
  struct Case {
    std::string path;
    std::string body;
    Json param;
  };
  const std::string user = R"({"role": "user", "content": "hi"})";
  const Case cases[] = {
      {"/tokenize", Open(kDeep), nullptr},  // open, never closed
      {"/tokenize", Nested(kDeep), nullptr},
      {"/tokenize", R"({"prompt": )" + Open(kDeep), "prompt"},
      {"/tokenize", R"({"messages": [{"role": "user", "content": )" + Nested(kDeep) + "}]}",
       "messages"},
      {"/detokenize", R"({"tokens": )" + Nested(kDeep) + "}", "tokens"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": )" + Nested(kDeep) + "}]}", "messages"},
      {"/v1/chat/completions",
       R"({"messages": [)" + user +
           R"(], "tools": [{"type": "function", "function": {"name": "f", "parameters": )" +
           Nested(kDeep) + "}}]}",
       "tools"},
      {"/v1/chat/completions",
       R"({"messages": [)" + user + R"(], "chat_template_kwargs": {"x": )" + Nested(kDeep) + "}}",
       "chat_template_kwargs"},
      {"/v1/chat/completions", R"({"model": )" + Nested(60000) + R"(, "messages": [)" + user + "]}",
       "model"},
      {"/v1/chat/completions",
       R"({"messages": [)" + user + R"(], "logit_bias": )" + Nested(kDeep) + "}", "logit_bias"},
      {"/v1/completions", R"({"prompt": )" + Nested(kDeep) + "}", "prompt"},
      {"/v1/completions", R"({"prompt": "hi", "stop": )" + Nested(kDeep) + "}", "stop"},
      {"/v1/responses", R"({"input": "hi", "metadata": {"a": )" + Nested(kDeep) + "}}", "metadata"},
      {"/v1/responses",
       R"({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": )" +
           Nested(kDeep) + "}}}",
       "text"},
      {"/v1/responses", R"({"input": )" + Nested(kDeep) + "}", "input"},
      {"/v1/messages",
       R"({"max_tokens": 8, "messages": [{"role": "user", "content": )" + Nested(kDeep) + "}]}",
       "messages"},
  };
  for (const Case& c : cases) {
    ExpectRefused(c.path, c.body, "json_limit_exceeded", c.param, kTooDeep);
  }
}

TEST_F(RequestJsonTest, TheLimitNamesWhereTheValueIs) {
  const Reply reply = Post(service_, "/v1/chat/completions",
                           R"({"messages": [{"role": "user", "content": )" + Nested(300) + "}]}");
  ASSERT_EQ(reply.status, 400);
  EXPECT_EQ(reply.json()["error"]["message"],
            "request body: JSON nesting deeper than 256 levels at byte 295 (at "
            "'messages[0].content[0][0][0][0][0]…') (the limit)");
  // At the limit the parser is done: 256 levels in all (the body, messages and the message are
  // 3); such content is then refused as content.
  const Reply at_limit =
      Post(service_, "/v1/chat/completions",
           R"({"messages": [{"role": "user", "content": )" + Nested(253) + "}]}");
  EXPECT_EQ(at_limit.status, 400);
  EXPECT_NE(at_limit.json()["error"]["code"], "json_limit_exceeded") << at_limit.body;
}

// JSON text inside a string field: parsed with the same limits, the 400 names the field.
TEST_F(RequestJsonTest, DeepJsonInsideStringFieldsIsA400NamingTheField) {
  const std::string deep = "\"" + Nested(kDeep) + "\"";
  ExpectRefused("/v1/chat/completions",
                R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant",
                    "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "f",
                    "arguments": )" +
                    deep + R"(}}]}, {"role": "tool", "tool_call_id": "c0", "content": "x"}]})",
                "json_limit_exceeded", "messages[1].tool_calls[0].function.arguments", kTooDeep);
  ExpectRefused("/v1/chat/completions",
                R"({"messages": [{"role": "user", "content": "hi"}], "guided_json": )" + deep + "}",
                "json_limit_exceeded", "guided_json", kTooDeep);
  ExpectRefused("/v1/chat/completions",
                R"({"messages": [{"role": "user", "content": "hi"}], "structured_outputs":
                    {"json": )" +
                    deep + "}}",
                "json_limit_exceeded", "structured_outputs.json", kTooDeep);
}

TEST_F(RequestJsonTest, DeepRegexGrammarAndSchemaAreRefusedByName) {
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], )";
  const std::string parens = std::string(1000, '(') + "a" + std::string(1000, ')');
  ExpectRefused("/v1/chat/completions", chat + R"("guided_regex": ")" + parens + "\"}",
                "invalid_value", "guided_regex", "groups nest deeper than 128");
  ExpectRefused("/v1/chat/completions",
                chat + R"("guided_grammar": "root ::= )" + std::string(30000, '(') + "\\\"a\\\"" +
                    std::string(30000, ')') + "\"}",
                "invalid_value", "guided_grammar", "groups nest deeper than 64");
  // A schema 300 levels deep (past the parser's limit) and one of 130 (the parser takes it, the
  // compiler does not).
  auto items = [](int levels) {
    std::string schema;
    for (int i = 0; i < levels; ++i) schema += R"({"type": "array", "items": )";
    schema += R"({"type": "integer"})";
    for (int i = 0; i < levels; ++i) schema += "}";
    return schema;
  };
  ExpectRefused("/v1/chat/completions", chat + R"("guided_json": )" + items(300) + "}",
                "json_limit_exceeded", "guided_json", kTooDeep);
  ExpectRefused("/v1/chat/completions", chat + R"("guided_json": )" + items(130) + "}",
                "invalid_value", "guided_json", "nests deeper than 128 levels");
  ExpectRefused("/v1/chat/completions",
                chat + R"("guided_json": {"type": "string", "pattern": ")" + parens + "\"}}",
                "invalid_value", "guided_json", "groups nest deeper than 128");
}

TEST_F(RequestJsonTest, WideObjectsAreAnsweredPromptly) {
  const std::string user = R"("messages": [{"role": "user", "content": "hi"}])";
  // 100,000 keys the endpoint does not know (1.3 MB): parsed once, in linear time.
  EXPECT_LT(SecondsFor([&] {
              const Reply r =
                  Post(service_, "/tokenize", R"({"prompt": "hello", )" + Members(100000) + "}");
              EXPECT_EQ(r.status, 200) << r.body.substr(0, 300);
            }),
            kPromptSeconds);
  EXPECT_LT(SecondsFor([&] {
              const Reply r =
                  Post(service_, "/tokenize",
                       "{" + user + R"(, "chat_template_kwargs": {)" + Members(100000) + "}}");
              EXPECT_EQ(r.status, 200) << r.body.substr(0, 300);
            }),
            kPromptSeconds);
  // logit_bias: 100,000 distinct ids (this model has 320: the first one outside is named) and
  // 100,000 copies of one id (the last value counts, as with any duplicate key).
  std::string distinct, same;
  for (int i = 0; i < 100000; ++i) {
    absl::StrAppend(&distinct, i == 0 ? "" : ", ", "\"", i, "\": 1");
    absl::StrAppend(&same, i == 0 ? "" : ", ", "\"5\": ", i % 2 == 0 ? "1" : "-1");
  }
  EXPECT_LT(SecondsFor([&] {
              const Reply r = Post(service_, "/v1/chat/completions",
                                   "{" + user + R"(, "logit_bias": {)" + distinct + "}}");
              EXPECT_EQ(r.status, 400);
              EXPECT_THAT(r.body, HasSubstr("logit_bias key '320' is not a token id in [0, 320)"));
            }),
            kPromptSeconds);
  EXPECT_LT(SecondsFor([&] {
              const Reply r = Post(service_, "/v1/chat/completions",
                                   "{" + user + R"(, "logit_bias": {)" + same + "}}");
              EXPECT_EQ(r.status, 200) << r.body.substr(0, 300);
            }),
            kPromptSeconds);
  // A schema of 100,000 properties (past the compiler's 10,000 nodes) and an enum of 100,000
  // values (compiled: duplicates are dropped by sorting, not a search per value).
  std::string properties, values;
  for (int i = 0; i < 100000; ++i) {
    absl::StrAppend(&properties, i == 0 ? "" : ", ", "\"p", i, "\": {\"type\": \"integer\"}");
    absl::StrAppend(&values, i == 0 ? "" : ", ", "\"v", i, "\"");
  }
  EXPECT_LT(SecondsFor([&] {
              const Reply r = Post(service_, "/v1/chat/completions",
                                   "{" + user + R"(, "guided_json": {"type": "object",
                                   "properties": {)" +
                                       properties + "}}}");
              EXPECT_EQ(r.status, 400);
              EXPECT_THAT(r.body, HasSubstr("more than 10000 nodes"));
            }),
            kPromptSeconds);
  EXPECT_LT(SecondsFor([&] {
              const Reply r = Post(
                  service_, "/v1/chat/completions",
                  "{" + user + R"(, "max_tokens": 2, "guided_json": {"enum": [)" + values + "]}}");
              EXPECT_EQ(r.status, 200) << r.body.substr(0, 300);
            }),
            kPromptSeconds);
  ExpectAlive();
}

TEST_F(RequestJsonTest, ObjectsPastTheMemberLimitAreRefused) {
  ExpectRefused(
      "/tokenize",
      R"({"prompt": "hi", "x": {)" + Members(static_cast<int>(kMaxJsonObjectMembers) + 1) + "}}",
      "json_limit_exceeded", "x", "JSON object with more than 262144 members");
}

// A tool call the model writes past the limits (it can be made to) is rendered as text, not
// walked (Anthropic's `input` keeps it under "arguments").
TEST_F(RequestJsonTest, DeepToolArgumentsFromTheModelAreKeptAsText) {
  std::string arguments;
  for (int i = 0; i < 257; ++i) arguments += "{\"a\":";
  arguments += "1" + std::string(257, '}');
  std::vector<int32_t> ids = fixture_.Ids(
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>" +
      arguments + "<|tool_call_end|><|tool_calls_section_end|>");
  ids.push_back(frontend::testing::kImEnd);
  fixture_.executor().SetScript([ids](const std::vector<int32_t>&) { return ids; });
  const Reply reply = Post(service_, "/v1/messages",
                           R"({"max_tokens": 3000, "messages": [{"role": "user", "content": "x"}],
                               "tools": [{"name": "f", "input_schema": {"type": "object"}}]})");
  ASSERT_EQ(reply.status, 200) << reply.body.substr(0, 300);
  const Json message = reply.json();
  ASSERT_EQ(message["content"].size(), 1u) << reply.body.substr(0, 300);
  EXPECT_EQ(message["content"][0]["type"], "tool_use");
  EXPECT_EQ(message["content"][0]["input"]["arguments"], arguments);
}

// An error message quotes the request's value cut short: never inside a character (the error
// body is JSON, which must be UTF-8).
TEST_F(RequestJsonTest, QuotedValuesAreCutBetweenCharacters) {
  for (int pad = 0; pad < 4; ++pad) {
    std::string text(static_cast<size_t>(pad), 'a');
    for (int i = 0; i < 40; ++i) text += "\xc3\xa9";  // é
    const Reply reply =
        Post(service_, "/v1/completions", R"({"prompt": "hi", "temperature": ")" + text + "\"}");
    ASSERT_EQ(reply.status, 400) << reply.body;
    EXPECT_THAT(reply.json()["error"]["message"].get<std::string>(),
                HasSubstr("'temperature' must be a number"));
  }
  ExpectAlive();
}

// A field of the wrong type is a 400 naming it, never an exception out of the handler (the
// HTTP server would answer 500; found by tests/fuzz/messages_request_fuzz).
TEST_F(RequestJsonTest, WrongTypesAreA400) {
  struct Case {
    std::string path;
    std::string body;
  };
  const Case cases[] = {
      {"/v1/messages", R"({"max_tokens": 8, "messages": [{"role": ["user"], "content": "hi"}]})"},
      {"/v1/messages", R"({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
                          "system": [{"type": 5, "text": "x"}]})"},
      {"/v1/messages", R"({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
                          "tools": [{"type": 7, "name": "f"}]})"},
      {"/v1/messages", R"({"max_tokens": 8, "messages": [{"role": "user", "content": [
                          {"type": "tool_result", "tool_use_id": "t", "content": [{"type": 1}]}]}]})"},
      {"/v1/responses", R"({"input": [{"type": 5, "role": "user", "content": "hi"}]})"},
      {"/v1/responses", R"({"input": [{"role": {"a": 1}, "content": "hi"}]})"},
      {"/v1/responses", R"({"input": "hi", "tools": [{"type": 1}]})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": 5}]}]})"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path + " " + c.body);
    const Reply reply = Post(service_, c.path, c.body);
    EXPECT_EQ(reply.status, 400) << reply.body;
  }
  ExpectAlive();
}

// ---- gRPC: the same parser and limits ---------------------------------------------------------

TEST_F(RequestJsonTest, GrpcJsonSchemaTextIsParsedWithTheLimits) {
  v1::GenerateRequest request;
  request.set_text("hi");
  request.set_json_schema(Nested(kDeep));
  absl::StatusOr<rpc::GrpcGeneration> built =
      rpc::BuildGeneration(fixture_.served(), frontend::RequestLimits{}, request);
  ASSERT_FALSE(built.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(built.status()));
  EXPECT_THAT(std::string(built.status().message()),
              HasSubstr("json_schema: " + std::string(kTooDeep)));

  request.set_json_schema("{\"type\": \"object\", \"properties\": {" + [] {
    std::string p;
    for (int i = 0; i < 100000; ++i) {
      absl::StrAppend(&p, i == 0 ? "" : ", ", "\"p", i, "\": {}");
    }
    return p;
  }() + "}}");
  EXPECT_LT(SecondsFor([&] {
              built = rpc::BuildGeneration(fixture_.served(), frontend::RequestLimits{}, request);
            }),
            kPromptSeconds);
  ASSERT_FALSE(built.ok());
  EXPECT_THAT(std::string(built.status().message()), HasSubstr("more than 10000 nodes"));

  request.set_json_schema("");
  request.set_regex(std::string(1000, '(') + "a" + std::string(1000, ')'));
  built = rpc::BuildGeneration(fixture_.served(), frontend::RequestLimits{}, request);
  ASSERT_FALSE(built.ok());
  EXPECT_THAT(std::string(built.status().message()), HasSubstr("groups nest deeper than 128"));
}

TEST_F(RequestJsonTest, GrpcLogitBiasOfAHundredThousandEntriesIsLinear) {
  v1::GenerateRequest request;
  request.set_text("hi");
  request.set_max_tokens(2);
  auto& bias = *request.mutable_sampling()->mutable_logit_bias();
  for (int i = 0; i < 100000; ++i) bias[i] = 1.0f;
  absl::StatusOr<rpc::GrpcGeneration> built;
  EXPECT_LT(SecondsFor([&] {
              built = rpc::BuildGeneration(fixture_.served(), frontend::RequestLimits{}, request);
            }),
            kPromptSeconds);
  ASSERT_FALSE(built.ok());  // ids up to 99,999 in a 320-token vocabulary
  EXPECT_THAT(std::string(built.status().message()), HasSubstr("is not a token id in [0, 320)"));
  bias.clear();
  for (int i = 0; i < 320; ++i) bias[i] = 1.0f;
  EXPECT_TRUE(rpc::BuildGeneration(fixture_.served(), frontend::RequestLimits{}, request).ok());
}

}  // namespace
}  // namespace strata::security
