// The OpenAI surface end to end without sockets: OpenAiService over a real scheduler and
// EngineLoop whose executor follows a script (testing/scripted_executor.h).
#include "server/frontend/openai_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/frontend/testing/pending_response.h"
#include "server/frontend/testing/scripted_executor.h"

namespace strata::frontend {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::kImEnd;

struct Reply {
  int status = 0;
  std::string content_type;
  std::vector<http::Header> headers;
  std::string body;
  Json json() const { return Json::parse(body); }
  std::string Header(const std::string& name) const {
    for (const auto& h : headers) {
      if (h.name == name) return h.value;
    }
    return "";
  }
};

http::HttpRequest Request(std::string method, std::string path, std::string body = "",
                          std::vector<http::Header> headers = {}) {
  http::HttpRequest r;
  r.method = std::move(method);
  r.target = path;
  r.path = std::move(path);
  r.body = std::move(body);
  r.headers = std::move(headers);
  return r;
}

// Drives a request to its end the way the HTTP server does (Start, Poll on every wake): the
// head's content type and headers, the final status and body.
Reply Drive(OpenAiService& service, http::HttpRequest request) {
  http::HandlerResult result = service.Handle(std::move(request));
  Reply reply;
  reply.content_type = result.response.content_type;
  reply.headers = result.response.headers;
  const http::HttpResponse out = testing::DrivePending(&result);
  reply.status = out.status;
  reply.body = out.body;
  return reply;
}

Reply Post(OpenAiService& s, const std::string& path, const std::string& body,
           std::vector<http::Header> headers = {}) {
  return Drive(s, Request("POST", path, body, std::move(headers)));
}

// "data: <json>\n\n" events; [DONE] as the string "[DONE]".
std::vector<Json> SseEvents(const std::string& body) {
  std::vector<Json> events;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
    event.remove_prefix(6);
    events.push_back(event == "[DONE]" ? Json("[DONE]") : Json::parse(std::string(event)));
  }
  return events;
}

void ExpectError(const Reply& r, int status, const std::string& code, const Json& param) {
  EXPECT_EQ(r.status, status) << r.body;
  const Json j = Json::parse(r.body);
  EXPECT_EQ(j["error"]["code"], code) << r.body;
  EXPECT_EQ(j["error"]["param"], param) << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_EQ(j["error"]["type"], status == 429   ? "rate_limit_error"
                                : status >= 500 ? "server_error"
                                                : "invalid_request_error");
}

class ServiceTest : public ::testing::Test {
 protected:
  explicit ServiceTest(testing::FixtureOptions options = {}, std::string api_key = "")
      : fixture_(options), service_(ServiceOptions{std::move(api_key), {}, 3}) {
    service_.SetModel(&fixture_.served());
  }
  // Scripts every request to produce `text` then the EOS.
  void ScriptText(const std::string& text) {
    std::vector<int32_t> ids = fixture_.Ids(text);
    ids.push_back(kImEnd);
    fixture_.executor().SetScript([ids](const std::vector<int32_t>&) { return ids; });
  }
  // Waits until the engine has nothing left (cancels processed, caches released).
  void WaitIdle() {
    auto busy = [&] {
      const server::EngineStats s = fixture_.engine().stats();
      return s.num_unfinished > 0 || s.scheduler.num_running > 0 || s.scheduler.num_waiting > 0;
    };
    for (int i = 0; i < 4000 && busy(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_FALSE(busy());
  }
  // Waits until the engine has aborted `n` requests in all (a cancel takes one step).
  void WaitAborted(int64_t n) {
    for (int i = 0; i < 4000 && fixture_.engine().stats().scheduler.num_aborted_total < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(fixture_.engine().stats().scheduler.num_aborted_total, n);
    WaitIdle();
  }

  testing::Fixture fixture_;
  OpenAiService service_;
};

constexpr char kHello[] = R"("messages": [{"role": "user", "content": "Say hello"}])";

std::string ChatBody(const std::string& extra = "") {
  return std::string("{") + kHello + (extra.empty() ? "" : ", " + extra) + "}";
}

TEST_F(ServiceTest, ChatCompletionHasOpenAiShapeAndUsage) {
  ScriptText("hello world");
  Reply r = Post(service_, "/v1/chat/completions", ChatBody(R"("model": "test-model")"));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  EXPECT_TRUE(absl::StartsWith(j["id"].get<std::string>(), "chatcmpl-"));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "test-model");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hello world");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  const int64_t completion = static_cast<int64_t>(fixture_.Ids("hello world").size()) + 1;
  EXPECT_EQ(j["usage"]["completion_tokens"], completion);
  const Json tokenized =
      Post(service_, "/tokenize", ChatBody()).json();  // the same rendered prompt
  EXPECT_EQ(j["usage"]["prompt_tokens"], tokenized["count"]);
  EXPECT_EQ(j["usage"]["total_tokens"], tokenized["count"].get<int64_t>() + completion);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST_F(ServiceTest, StreamCarriesTheSameTextAsNonStream) {
  ScriptText("hello world, hello");
  const Json whole = Post(service_, "/v1/chat/completions", ChatBody()).json();
  Reply r = Post(service_, "/v1/chat/completions",
                 ChatBody(R"("stream": true, "stream_options": {"include_usage": true})"));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/event-stream");
  std::vector<Json> events = SseEvents(r.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const Json& first = events[0];
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  int finishes = 0;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const Json& e = events[i];
    EXPECT_EQ(e["id"], first["id"]);
    EXPECT_EQ(e["created"], first["created"]);
    EXPECT_EQ(e["model"], "test-model");
    const Json& choice = e["choices"][0];
    if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    if (!choice["finish_reason"].is_null()) {
      ++finishes;
      EXPECT_EQ(choice["finish_reason"], "stop");
      EXPECT_EQ(i + 3, events.size()) << "the finish chunk is the last choice chunk";
    }
  }
  EXPECT_EQ(finishes, 1);
  EXPECT_EQ(text, whole["choices"][0]["message"]["content"]);
  const Json& usage_chunk = events[events.size() - 2];
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"], whole["usage"]);
}

TEST_F(ServiceTest, StopStringEndsTheChoiceAndAbortsTheEngineRequest) {
  std::string text = "hello world";
  for (int i = 0; i < 100; ++i) text += " and on";
  ScriptText(text);
  fixture_.executor().SetStepDelay(absl::Milliseconds(1));  // the stop is seen mid-generation
  Reply r = Post(service_, "/v1/chat/completions", ChatBody(R"("stop": ["o w", "zzz"])"));
  const Json j = r.json();
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hell");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(j["usage"]["completion_tokens"].get<int>(), 10);
  WaitAborted(1);
  Reply included = Post(service_, "/v1/chat/completions",
                        ChatBody(R"("stop": "o w", "include_stop_str_in_output": true)"));
  EXPECT_EQ(included.json()["choices"][0]["message"]["content"], "hello w");
}

TEST_F(ServiceTest, MaxTokensAndStopTokenIds) {
  ScriptText("hello world");
  Reply length = Post(service_, "/v1/chat/completions", ChatBody(R"("max_tokens": 1)"));
  EXPECT_EQ(length.json()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(length.json()["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(length.json()["usage"]["completion_tokens"], 1);
  const int32_t w = fixture_.Ids(" w")[0];
  Reply stop = Post(service_, "/v1/chat/completions",
                    ChatBody(R"("stop_token_ids": [)" + std::to_string(w) + "]"));
  EXPECT_EQ(stop.json()["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(stop.json()["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(stop.json()["usage"]["completion_tokens"], 2);  // the stop token counts
}

TEST_F(ServiceTest, SameSeedSameOutputAndNChoicesDiffer) {
  const std::string body =
      ChatBody(R"("n": 3, "seed": 42, "temperature": 1, "max_tokens": 12, "ignore_eos": true)");
  const Json a = Post(service_, "/v1/chat/completions", body).json();
  const Json b = Post(service_, "/v1/chat/completions", body).json();
  ASSERT_EQ(a["choices"].size(), 3u);
  std::vector<int> indices;
  for (const Json& c : a["choices"]) indices.push_back(c["index"]);
  EXPECT_THAT(indices, ElementsAre(0, 1, 2));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a["choices"][i]["message"], b["choices"][i]["message"]) << i;
  }
  EXPECT_NE(a["choices"][0]["message"], a["choices"][1]["message"]);
  EXPECT_EQ(a["usage"]["completion_tokens"], 36);
  // Choice i samples with seed + i (as vLLM does).
  const Json other =
      Post(service_, "/v1/chat/completions",
           ChatBody(R"("seed": 43, "temperature": 1, "max_tokens": 12, "ignore_eos": true)"))
          .json();
  EXPECT_EQ(other["choices"][0]["message"], a["choices"][1]["message"]);
}

// generation_config.json's defaults (as vLLM applies them): fields a request leaves out take
// them, fields it sets keep its values; max_new_tokens caps the default max_tokens; its eos
// ids end every reply unless ignore_eos.
TEST_F(ServiceTest, GenerationConfigDefaultsApplyToFieldsARequestLeavesOut) {
  GenerationConfig& config = fixture_.mutable_served().generation_config;
  config.defaults.temperature = 0.0f;
  config.defaults.max_tokens = 6;
  config.eos_token_ids = {testing::kImUser};
  // Noise (no script): greedy by default, so two unseeded requests agree.
  const std::string prompt = R"({"prompt": "hello", "ignore_eos": true)";
  const Json a = Post(service_, "/v1/completions", prompt + "}").json();
  const Json b = Post(service_, "/v1/completions", prompt + "}").json();
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(a["usage"]["completion_tokens"], 6);  // max_new_tokens
  EXPECT_EQ(a["choices"][0]["finish_reason"], "length");
  // A request's own temperature and max_tokens win.
  const Json c =
      Post(service_, "/v1/completions", prompt + R"(, "temperature": 1, "n": 2, "max_tokens": 9})")
          .json();
  EXPECT_EQ(c["usage"]["completion_tokens"], 18);
  EXPECT_NE(c["choices"][0]["text"], c["choices"][1]["text"]);
  // The config's eos id ends a reply (and is not shown), unless ignore_eos.
  std::vector<int32_t> script = fixture_.Ids("he");
  script.push_back(testing::kImUser);
  for (int32_t id : fixture_.Ids("llo")) script.push_back(id);
  fixture_.executor().SetScript([script](const std::vector<int32_t>&) { return script; });
  const Json stopped =
      Post(service_, "/v1/completions", R"({"prompt": "x", "max_tokens": 5})").json();
  EXPECT_EQ(stopped["choices"][0]["text"], "he");
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  const Json ignored = Post(service_, "/v1/completions",
                            R"({"prompt": "x", "max_tokens": 4, "ignore_eos": true,
                                "skip_special_tokens": false})")
                           .json();
  EXPECT_EQ(ignored["choices"][0]["text"], "he<|im_user|>llo");
}

// vLLM's continue_final_message: the prompt ends with the final (assistant) message's text, no
// end of turn and no generation prompt, and the reply continues it.
TEST_F(ServiceTest, ContinueFinalMessageEndsThePromptInsideIt) {
  ScriptText("ld!");
  const std::string messages =
      R"("messages": [{"role": "user", "content": "Say hello"},
                      {"role": "assistant", "content": "hello wor"}])";
  const Json open =
      Post(service_, "/tokenize", "{" + messages + R"(, "continue_final_message": true,
                                             "return_token_strs": true})")
          .json();
  std::string rendered;
  for (const Json& t : open["token_strs"]) rendered += t.get<std::string>();
  EXPECT_TRUE(absl::EndsWith(rendered, "<|im_middle|>hello wor")) << rendered;
  const Json closed =
      Post(service_, "/tokenize",
           "{" + messages + R"(, "add_generation_prompt": false, "return_token_strs": true})")
          .json();
  std::string whole;
  for (const Json& t : closed["token_strs"]) whole += t.get<std::string>();
  EXPECT_TRUE(absl::StartsWith(whole, rendered));
  EXPECT_GT(whole.size(), rendered.size()) << "the closed turn ends with its end-of-turn";

  const Json reply = Post(service_, "/v1/chat/completions",
                          "{" + messages + R"(, "continue_final_message": true})")
                         .json();
  EXPECT_EQ(reply["choices"][0]["message"]["content"], "ld!");
  EXPECT_EQ(reply["usage"]["prompt_tokens"], open["count"]);

  ExpectError(
      Post(service_, "/v1/chat/completions",
           "{" + messages + R"(, "continue_final_message": true, "add_generation_prompt": true})"),
      400, "invalid_value", "continue_final_message");
  ExpectError(Post(service_, "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": ""}],
                       "continue_final_message": true})"),
              400, "invalid_value", "messages[0].content");
}

// vLLM's chat echo: the final message (the reply's role) starts the reply's content; a stream
// sends it in a chunk of its own right after the role, as vLLM does.
TEST_F(ServiceTest, ChatEchoStartsTheReplyWithTheFinalMessage) {
  ScriptText("ld!");
  const std::string body =
      R"({"messages": [{"role": "user", "content": "Say hello"},
                       {"role": "assistant", "content": "hello wor"}],
          "continue_final_message": true, "echo": true)";
  const Json whole = Post(service_, "/v1/chat/completions", body + "}").json();
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "hello world!");
  EXPECT_EQ(whole["usage"]["completion_tokens"],
            static_cast<int64_t>(fixture_.Ids("ld!").size()) + 1);  // the echo is no output
  const std::vector<Json> events =
      SseEvents(Post(service_, "/v1/chat/completions", body + R"(, "stream": true})").body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[1]["choices"][0]["delta"], Json({{"content", "hello wor"}}));
  std::string text;
  for (const Json& e : events) {
    if (e != "[DONE]" && e["choices"][0]["delta"].contains("content")) {
      text += e["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(text, "hello world!");
  // A user message last: the reply is a new assistant turn, nothing to echo.
  ScriptText("hi");
  EXPECT_EQ(Post(service_, "/v1/chat/completions", ChatBody(R"("echo": true)"))
                .json()["choices"][0]["message"]["content"],
            "hi");
}

// vLLM's allowed_token_ids and bad_words, alone and beside a scripted (forced) reply.
TEST_F(ServiceTest, AllowedTokenIdsAndBadWordsFilterTheSampledTokens) {
  // Noise: every sampled token is one of the allowed ids ('h' and 'i').
  const Json only = Post(service_, "/v1/completions",
                         R"({"prompt": "x", "max_tokens": 12, "ignore_eos": true, "seed": 5,
                             "allowed_token_ids": [104, 105], "logprobs": 0})")
                        .json();
  const std::string text = only["choices"][0]["text"];
  EXPECT_EQ(text.size(), 12u);
  EXPECT_EQ(text.find_first_not_of("hi"), std::string::npos) << text;
  // The script writes "hello world": with "world" banned its last token cannot follow
  // " w" "or", so the reply leaves the script there.
  ScriptText("hello world");
  const Json free = Post(service_, "/v1/completions", R"({"prompt": "x", "max_tokens": 6})").json();
  EXPECT_EQ(free["choices"][0]["text"], "hello world");
  const Json banned = Post(service_, "/v1/completions",
                           R"({"prompt": "x", "max_tokens": 6, "seed": 1,
                               "bad_words": ["world", "zzz"]})")
                          .json();
  const std::string b = banned["choices"][0]["text"];
  EXPECT_TRUE(absl::StartsWith(b, "hello wor")) << b;
  EXPECT_EQ(b.find("world"), std::string::npos) << b;
  // A one-token bad word is never sampled, even where the script wants it.
  const Json no_hello = Post(service_, "/v1/completions",
                             R"({"prompt": "x", "max_tokens": 3, "seed": 2,
                                 "bad_words": ["hello"]})")
                            .json();
  EXPECT_FALSE(absl::StartsWith(no_hello["choices"][0]["text"].get<std::string>(), "hello"));

  ExpectError(Post(service_, "/v1/completions", R"({"prompt": "x", "allowed_token_ids": []})"), 400,
              "invalid_value", "allowed_token_ids");
  ExpectError(
      Post(service_, "/v1/completions", R"({"prompt": "x", "allowed_token_ids": [1, 999999]})"),
      400, "invalid_value", "allowed_token_ids[1]");
  ExpectError(Post(service_, "/v1/chat/completions", ChatBody(R"("bad_words": "x")")), 400,
              "invalid_type", "bad_words");
}

// vLLM's stream_options.continuous_usage_stats and truncate_prompt_tokens.
TEST_F(ServiceTest, ContinuousUsageAndPromptTruncation) {
  ScriptText("hello world");
  const std::vector<Json> events =
      SseEvents(Post(service_, "/v1/chat/completions",
                     ChatBody(R"("stream": true, "stream_options": {"continuous_usage_stats": true,
                       "include_usage": true})"))
                    .body);
  int64_t last = -1, chunks = 0;
  for (const Json& e : events) {
    if (e == "[DONE]" || e["choices"].empty()) continue;
    ASSERT_TRUE(e.contains("usage")) << e.dump();
    const int64_t done = e["usage"]["completion_tokens"].get<int64_t>();
    EXPECT_GE(done, last);
    last = done;
    ++chunks;
    EXPECT_EQ(e["usage"]["total_tokens"], e["usage"]["prompt_tokens"].get<int64_t>() + done);
  }
  EXPECT_GE(chunks, 3);
  EXPECT_EQ(last, events[events.size() - 2]["usage"]["completion_tokens"]);  // the usage chunk

  // Keep the last 5 of 12 prompt ids; -1 keeps what fits; echo shows what is left.
  const Json cut = Post(service_, "/v1/completions",
                        R"({"prompt": [104, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100, 33],
                            "max_tokens": 1, "truncate_prompt_tokens": 5, "echo": true})")
                       .json();
  EXPECT_EQ(cut["usage"]["prompt_tokens"], 5);
  EXPECT_TRUE(absl::StartsWith(cut["choices"][0]["text"].get<std::string>(), "orld!"))
      << cut.dump();
  const Json text_cut = Post(service_, "/v1/completions",
                             R"({"prompt": "hello world", "max_tokens": 1,
                                 "truncate_prompt_tokens": 1, "echo": true})")
                            .json();
  EXPECT_EQ(text_cut["usage"]["prompt_tokens"], 1);
  EXPECT_TRUE(absl::StartsWith(text_cut["choices"][0]["text"].get<std::string>(), "ld"))
      << text_cut.dump();
  const Json chat = Post(service_, "/v1/chat/completions",
                         ChatBody(R"("truncate_prompt_tokens": 4, "max_tokens": 2)"))
                        .json();
  EXPECT_EQ(chat["usage"]["prompt_tokens"], 4);
  const int64_t limit = fixture_.served().max_model_len;
  const Json all =
      Post(service_, "/v1/completions",
           absl::StrCat(R"({"prompt": [)",
                        absl::StrJoin(std::vector<int>(static_cast<size_t>(limit + 10), 104), ","),
                        R"(], "max_tokens": 1, "truncate_prompt_tokens": -1})"))
          .json();
  EXPECT_EQ(all["usage"]["prompt_tokens"], limit - 1) << all.dump().substr(0, 300);
  ExpectError(Post(service_, "/v1/completions", R"({"prompt": "x", "truncate_prompt_tokens": 0})"),
              400, "invalid_value", "truncate_prompt_tokens");
  ExpectError(Post(service_, "/v1/completions",
                   absl::StrCat(R"({"prompt": "x", "truncate_prompt_tokens": )", limit, "}")),
              400, "invalid_value", "truncate_prompt_tokens");
}

TEST_F(ServiceTest, ChatLogprobsListEveryTokenWithTopAlternatives) {
  ScriptText("hello");
  const Json j =
      Post(service_, "/v1/chat/completions", ChatBody(R"("logprobs": true, "top_logprobs": 3)"))
          .json();
  const Json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);  // "hello" and the EOS
  EXPECT_EQ(content[0]["token"], "hello");
  EXPECT_THAT(content[0]["bytes"].get<std::vector<int>>(), ElementsAre('h', 'e', 'l', 'l', 'o'));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 3u);
  EXPECT_EQ(content[0]["top_logprobs"][0]["token"], "hello");  // the scripted token leads
  EXPECT_FLOAT_EQ(content[0]["top_logprobs"][0]["logprob"].get<float>(),
                  content[0]["logprob"].get<float>());
  EXPECT_GE(content[0]["top_logprobs"][1]["logprob"].get<double>(),
            content[0]["top_logprobs"][2]["logprob"].get<double>());
  EXPECT_LE(content[0]["logprob"].get<double>(), 0.0);
}

TEST_F(ServiceTest, ToolCallsAreParsedInBothModes) {
  ScriptText(
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
      "<|tool_calls_section_end|>");
  const std::string tools = R"("tools": [{"type": "function", "function": {"name":
      "get_weather", "parameters": {"type": "object", "properties": {"city":
      {"type": "string"}}}}}])";
  const Json j = Post(service_, "/v1/chat/completions", ChatBody(tools)).json();
  const Json& message = j["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["id"], "functions.get_weather:0");
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");

  Reply s = Post(service_, "/v1/chat/completions", ChatBody(tools + R"(, "stream": true)"));
  std::string arguments, name, id;
  std::string finish;
  for (const Json& e : SseEvents(s.body)) {
    if (e == "[DONE]") continue;
    const Json& choice = e["choices"][0];
    if (choice["delta"].contains("tool_calls")) {
      for (const Json& call : choice["delta"]["tool_calls"]) {
        EXPECT_EQ(call["index"], 0);
        if (call.contains("id")) id = call["id"];
        if (call["function"].contains("name")) name = call["function"]["name"];
        arguments += call["function"]["arguments"].get<std::string>();
      }
    }
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(id, "functions.get_weather:0");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(finish, "tool_calls");
  // The tools were declared to the model (the prompt grew).
  const int64_t with_tools = j["usage"]["prompt_tokens"];
  const Json plain = Post(service_, "/v1/chat/completions", ChatBody()).json();
  EXPECT_GT(with_tools, plain["usage"]["prompt_tokens"].get<int64_t>());
  // tool_choice none: no parsing, the markers are special tokens and are skipped.
  const Json none =
      Post(service_, "/v1/chat/completions", ChatBody(tools + R"(, "tool_choice": "none")")).json();
  EXPECT_FALSE(none["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(none["choices"][0]["finish_reason"], "stop");
}

// {reasoning_content, content}.
using Said = std::pair<std::string, std::string>;

TEST_F(ServiceTest, ReasoningIsSplitFromTheAnswer) {
  // Returns {reasoning_content, content} of a non-streamed reply and checks the streamed one
  // says the same.
  auto reply = [&](const std::string& fields) {
    const Json j = Post(service_, "/v1/chat/completions", ChatBody(fields)).json();
    const Json& message = j["choices"][0]["message"];
    const std::string reasoning = message.value("reasoning_content", "");
    const std::string content = message["content"].get<std::string>();
    const std::string sep = fields.empty() ? "" : ", ";
    Reply s = Post(service_, "/v1/chat/completions", ChatBody(fields + sep + R"("stream": true)"));
    std::string streamed_reasoning, streamed_content;
    for (const Json& e : SseEvents(s.body)) {
      if (e == "[DONE]") continue;
      const Json& delta = e["choices"][0]["delta"];
      streamed_reasoning += delta.value("reasoning_content", "");
      streamed_content += delta.value("content", "");
    }
    EXPECT_EQ(streamed_reasoning, reasoning);
    EXPECT_EQ(streamed_content, content);
    return Said(reasoning, content);
  };
  // The reply opens <think> itself.
  ScriptText("<think>hello</think> world");
  EXPECT_EQ(reply(""), Said("hello", " world"));
  // The prompt opened it (thinking on): the reply starts inside the reasoning.
  ScriptText("hello</think> world");
  EXPECT_EQ(reply(R"("chat_template_kwargs": {"thinking": true})"), Said("hello", " world"));
  // Cut off before </think>: all reasoning.
  ScriptText("<think>hello");
  EXPECT_EQ(reply(""), Said("hello", ""));
  // Not opened: the markers are plain text of the answer.
  ScriptText("hello</think> world");
  EXPECT_EQ(reply(""), Said("", "hello</think> world"));
}

TEST_F(ServiceTest, CompletionsAcceptEveryPromptShape) {
  ScriptText(" world");
  const Json text =
      Post(service_, "/v1/completions", R"({"prompt": "hello", "echo": true, "max_tokens": 5})")
          .json();
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_TRUE(absl::StartsWith(text["id"].get<std::string>(), "cmpl-"));
  EXPECT_EQ(text["choices"][0]["text"], "hello world");
  EXPECT_EQ(text["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(text["usage"]["prompt_tokens"], 1);  // "hello" is one token

  const Json many = Post(service_, "/v1/completions",
                         R"({"prompt": [[104, 105], "hello"], "n": 2, "max_tokens": 5})")
                        .json();
  ASSERT_EQ(many["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(many["choices"][i]["index"], i);
    EXPECT_EQ(many["choices"][i]["text"], " world");
  }
  EXPECT_EQ(many["usage"]["prompt_tokens"], 3);  // each prompt counted once

  const Json lp =
      Post(service_, "/v1/completions", R"({"prompt": "hello", "logprobs": 2, "max_tokens": 5})")
          .json();
  const Json& logprobs = lp["choices"][0]["logprobs"];
  EXPECT_THAT(logprobs["tokens"].get<std::vector<std::string>>(),
              ElementsAre(" w", "or", "ld", "<|im_end|>"));
  EXPECT_THAT(logprobs["text_offset"].get<std::vector<int>>(), ElementsAre(0, 2, 4, 6));
  EXPECT_EQ(logprobs["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(logprobs["token_logprobs"].size(), 4u);
}

TEST_F(ServiceTest, CompletionStreamEndsWithUsageAndDone) {
  ScriptText(" world");
  Reply r = Post(service_, "/v1/completions",
                 R"({"prompt": "hello", "stream": true, "echo": true,
                     "stream_options": {"include_usage": true}})");
  std::vector<Json> events = SseEvents(r.body);
  ASSERT_GE(events.size(), 4u);
  std::string text;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    EXPECT_EQ(events[i]["object"], "text_completion");
    text += events[i]["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "hello world");
  EXPECT_EQ(events[events.size() - 3]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(events[events.size() - 2]["usage"]["completion_tokens"], 4);
  EXPECT_EQ(events.back(), "[DONE]");
}

// vLLM's return_token_ids: the prompt's ids and every generated id (the EOS included), in
// the body or spread over the chunks (the prompt's in a choice's first chunk only); chat puts
// the prompt's at the top level, completions in each choice. Absent unless asked for.
TEST_F(ServiceTest, ReturnTokenIdsGiveThePromptAndEveryGeneratedToken) {
  ScriptText(" world");
  std::vector<int32_t> generated = fixture_.Ids(" world");
  generated.push_back(kImEnd);
  const Json plain = Post(service_, "/v1/completions", R"({"prompt": [104, 105]})").json();
  EXPECT_FALSE(plain["choices"][0].contains("token_ids"));
  EXPECT_FALSE(plain["choices"][0].contains("prompt_token_ids"));

  const std::string completion = R"({"prompt": [104, 105], "return_token_ids": true)";
  const Json whole = Post(service_, "/v1/completions", completion + "}").json();
  EXPECT_EQ(whole["choices"][0]["prompt_token_ids"], Json({104, 105}));
  EXPECT_EQ(whole["choices"][0]["token_ids"], Json(generated));
  std::vector<int32_t> streamed;
  int prompt_lists = 0;
  for (const Json& e :
       SseEvents(Post(service_, "/v1/completions", completion + R"(, "stream": true})").body)) {
    if (e == "[DONE]") continue;
    const Json& choice = e["choices"][0];
    if (choice.contains("prompt_token_ids")) {
      ++prompt_lists;
      EXPECT_EQ(choice["prompt_token_ids"], Json({104, 105}));
      EXPECT_TRUE(streamed.empty()) << "the prompt's ids come in the first chunk";
    }
    for (const Json& id : choice["token_ids"]) streamed.push_back(id.get<int32_t>());
  }
  EXPECT_EQ(prompt_lists, 1);
  EXPECT_EQ(streamed, generated);

  ScriptText("hello world, hello");
  generated = fixture_.Ids("hello world, hello");
  generated.push_back(kImEnd);
  const Json prompt = Post(service_, "/tokenize", ChatBody()).json()["tokens"];
  const Json chat =
      Post(service_, "/v1/chat/completions", ChatBody(R"("return_token_ids": true)")).json();
  EXPECT_EQ(chat["prompt_token_ids"], prompt);
  EXPECT_EQ(chat["choices"][0]["token_ids"], Json(generated));
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "hello world, hello");
  streamed.clear();
  const std::vector<Json> events =
      SseEvents(Post(service_, "/v1/chat/completions",
                     ChatBody(R"("return_token_ids": true, "stream": true, "stream_options":
                       {"include_usage": true})"))
                    .body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["prompt_token_ids"], prompt);
  for (const Json& e : events) {
    if (e == "[DONE]" || e["choices"].empty()) continue;  // [DONE], the usage chunk
    if (&e != &events[0]) {
      EXPECT_FALSE(e.contains("prompt_token_ids"));
    }
    for (const Json& id : e["choices"][0]["token_ids"]) streamed.push_back(id.get<int32_t>());
  }
  EXPECT_EQ(streamed, generated);

  // n choices share the one prompt: its ids come once per stream.
  int with_prompt = 0;
  for (const Json& e :
       SseEvents(Post(service_, "/v1/chat/completions",
                      ChatBody(R"("return_token_ids": true, "stream": true, "n": 2)"))
                     .body)) {
    with_prompt += e != "[DONE]" && e.contains("prompt_token_ids") ? 1 : 0;
  }
  EXPECT_EQ(with_prompt, 1);

  ExpectError(Post(service_, "/v1/completions", R"({"prompt": "a", "return_token_ids": 1})"), 400,
              "invalid_type", "return_token_ids");
}

TEST_F(ServiceTest, AConversationSentBackGetsTheRepliesOwnTokens) {
  ReplyTokenMemory memory(fixture_.tokenizer(), 1000);
  fixture_.mutable_served().reply_tokens = &memory;
  // The model writes "hello" byte by byte, where the tokenizer has one token for it.
  const std::vector<int32_t> bytes = {104, 101, 108, 108, 111};
  ASSERT_THAT(fixture_.Ids("hello"), ElementsAre(259));
  std::vector<int32_t> script = bytes;
  script.push_back(kImEnd);
  fixture_.executor().SetScript([script](const std::vector<int32_t>&) { return script; });
  const Reply first = Post(service_, "/v1/chat/completions", ChatBody(R"("stream": true)"));
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(memory.num_replies(), 1);

  const std::string conversation = R"({"messages": [{"role": "user", "content": "Say hello"},
      {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}])";
  fixture_.mutable_served().reply_tokens = nullptr;
  const Json encoded = Post(service_, "/tokenize", conversation + "}").json()["tokens"];
  fixture_.mutable_served().reply_tokens = &memory;
  const Json chat =
      Post(service_, "/v1/chat/completions", conversation + R"(, "return_token_ids": true})")
          .json();
  const std::vector<int32_t> prompt = chat["prompt_token_ids"].get<std::vector<int32_t>>();
  // /tokenize gives what the chat request gets.
  EXPECT_EQ(Post(service_, "/tokenize", conversation + "}").json()["tokens"], Json(prompt));
  // The reply's five tokens stand where the text encoded afresh has one.
  std::vector<int32_t> want = encoded.get<std::vector<int32_t>>();
  const std::vector<int32_t> reply = {testing::kImMiddle, 259, kImEnd};  // not "Say hello"'s
  const auto hello = std::search(want.begin(), want.end(), reply.begin(), reply.end());
  ASSERT_NE(hello, want.end());
  const auto at = want.erase(hello + 1);
  want.insert(at, bytes.begin(), bytes.end());
  EXPECT_EQ(prompt, want);
  EXPECT_EQ(chat["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(*fixture_.tokenizer().DecodeBytes(prompt),
            *fixture_.tokenizer().DecodeBytes(encoded.get<std::vector<int32_t>>()));

  // A reply cut by a stop string is not what its tokens say: not kept.
  const Reply cut = Post(service_, "/v1/chat/completions", ChatBody(R"("stop": ["lo"])"));
  ASSERT_EQ(cut.json()["choices"][0]["message"]["content"], "hel");
  EXPECT_EQ(memory.Find("hel"), std::nullopt);
  EXPECT_EQ(memory.num_replies(), 1);
}

TEST_F(ServiceTest, TokenizeAndDetokenizeUseVllmShapes) {
  const Json t =
      Post(service_, "/tokenize", R"({"prompt": "hello world", "return_token_strs": true})").json();
  EXPECT_EQ(t["count"], 4);
  EXPECT_EQ(t["max_model_len"], 512);
  EXPECT_THAT(t["token_strs"].get<std::vector<std::string>>(),
              ElementsAre("hello", " w", "or", "ld"));
  const Json d = Post(service_, "/detokenize", Json{{"tokens", t["tokens"]}}.dump()).json();
  EXPECT_EQ(d["prompt"], "hello world");
  const Json chat = Post(service_, "/tokenize", ChatBody()).json();
  EXPECT_GT(chat["count"].get<int>(), 4);
  ExpectError(Post(service_, "/detokenize", R"({"tokens": [1, 9999]})"), 400, "invalid_value",
              "tokens[1]");
  ExpectError(Post(service_, "/tokenize", R"({})"), 400, "missing_required_parameter", "prompt");
}

// vLLM's --skip-tokenizer-init: token ids in, token ids out (the text is empty); whatever needs
// text is a 400 naming the field and the flag.
TEST_F(ServiceTest, WithoutATokenizerPromptsAndOutputsAreTokenIds) {
  const std::unique_ptr<engine::Tokenizer> none = engine::Tokenizer::WithoutTokens();
  ServedModel& model = fixture_.mutable_served();
  model.tokenizer = none.get();
  model.skip_tokenizer_init = true;
  ScriptText("hello world");
  std::vector<int32_t> generated = fixture_.Ids("hello world");
  generated.push_back(kImEnd);
  const Json whole =
      Post(service_, "/v1/completions", R"({"prompt": [104, 105], "logprobs": 1})").json();
  const Json& choice = whole["choices"][0];
  EXPECT_EQ(choice["text"], "");
  EXPECT_EQ(choice["token_ids"], Json(generated));  // return_token_ids on by default
  EXPECT_EQ(choice["prompt_token_ids"], Json({104, 105}));
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(choice["logprobs"]["token_logprobs"].size(), generated.size());
  EXPECT_EQ(whole["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(whole["usage"]["completion_tokens"], generated.size());
  const Json off =
      Post(service_, "/v1/completions", R"({"prompt": [104], "return_token_ids": false})").json();
  EXPECT_FALSE(off["choices"][0].contains("token_ids")) << off.dump();
  std::vector<int32_t> streamed;
  for (const Json& e : SseEvents(
           Post(service_, "/v1/completions", R"({"prompt": [[104, 105]], "stream": true})").body)) {
    if (e == "[DONE]") continue;
    EXPECT_EQ(e["choices"][0]["text"], "");
    for (const Json& id : e["choices"][0]["token_ids"]) streamed.push_back(id.get<int32_t>());
  }
  EXPECT_EQ(streamed, generated);

  struct Refused {
    const char* path;
    const char* body;
    const char* param;
  };
  for (const Refused& r : {
           Refused{"/v1/completions", R"({"prompt": "hello"})", "prompt"},
           Refused{"/v1/completions", R"({"prompt": [[1], "hello"]})", "prompt[1]"},
           Refused{"/v1/completions", R"({"prompt": [1], "stop": ["x"]})", "stop"},
           Refused{"/v1/completions", R"({"prompt": [1], "bad_words": ["x"]})", "bad_words"},
           Refused{"/v1/completions", R"({"prompt": [1], "response_format": {"type":
                   "json_object"}})",
                   "response_format"},
           Refused{"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}]})",
                   "messages"},
           Refused{"/v1/responses", R"({"input": "hi"})", "messages"},
           Refused{"/tokenize", R"({"prompt": "hi"})", "prompt"},
           Refused{"/tokenize", R"({"messages": [{"role": "user", "content": "hi"}]})", "messages"},
           Refused{"/detokenize", R"({"tokens": [1]})", "tokens"},
       }) {
    SCOPED_TRACE(std::string(r.path) + " " + r.body);
    const Reply reply = Post(service_, r.path, r.body);
    ExpectError(reply, 400, "unsupported_value", r.param);
    EXPECT_THAT(reply.body, HasSubstr("--skip-tokenizer-init: send token ids"));
  }
}

// Tool declarations reach the prompt as the request wrote them: key order kept end to end
// (request JSON → template values → tojson), as Hugging Face's renderer does (a tokenizer that
// sorts tools, Kimi's, does so on purpose: engine/tokenizer/chat_template.h).
TEST_F(ServiceTest, ToolDeclarationsKeepTheRequestsKeyOrderInThePrompt) {
  const std::string body = R"({"messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                 "parameters": {"type": "object", "properties": {"z": {"type": "string"},
                                                                 "a": {"type": "integer"}}}}}],
      "return_token_strs": true})";
  const Reply reply = Post(service_, "/tokenize", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json tokenized = reply.json();
  std::string prompt;
  for (const Json& t : tokenized["token_strs"]) prompt += t.get<std::string>();
  EXPECT_THAT(prompt,
              HasSubstr(R"([{"type":"function","function":{"name":"f","description":"d",)"
                        R"("parameters":{"type":"object","properties":{"z":{"type":"string"},)"
                        R"("a":{"type":"integer"}}}}}])"));
}

TEST_F(ServiceTest, ModelsListServedNamesWithContextLength) {
  const Json j = Drive(service_, Request("GET", "/v1/models")).json();
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][0]["id"], "test-model");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_EQ(j["data"][0]["max_model_len"], 512);
  EXPECT_EQ(Drive(service_, Request("GET", "/v1/models/alias")).json()["id"], "alias");
  ExpectError(Drive(service_, Request("GET", "/v1/models/nope")), 404, "model_not_found", "model");
}

TEST_F(ServiceTest, RoutingErrors) {
  ExpectError(Drive(service_, Request("GET", "/v1/nothing")), 404, "unknown_url", nullptr);
  Reply wrong = Drive(service_, Request("GET", "/v1/chat/completions"));
  ExpectError(wrong, 405, "method_not_allowed", nullptr);
  EXPECT_EQ(wrong.Header("Allow"), "POST");
  ExpectError(Post(service_, "/v1/chat/completions", ChatBody(R"("model": "gpt-4")")), 404,
              "model_not_found", "model");
  EXPECT_EQ(Post(service_, "/v1/chat/completions", ChatBody(R"("model": "alias")")).status, 200);
  ExpectError(Post(service_, "/v1/chat/completions", "{"), 400, "invalid_json", nullptr);
}

// Checks one prompt entry of a completions logprobs object against vLLM's prompt_logprobs
// entry of the same position (the same scores in two shapes).
void ExpectSameScore(const Json& echo, size_t i, const Json& vllm, int n) {
  const std::string where = "position " + std::to_string(i);
  const double logprob = echo["token_logprobs"][i].get<double>();
  EXPECT_LE(logprob, 0.0) << where;
  const Json& top = echo["top_logprobs"][i];
  ASSERT_EQ(top.size(), static_cast<size_t>(n)) << where;
  double best = -1e9;
  for (const auto& [text, lp] : top.items()) best = std::max(best, lp.get<double>());
  EXPECT_GE(best, logprob) << where;
  // vLLM's entry: the prompt token first (its rank), then the top n with ranks 1..n.
  ASSERT_TRUE(vllm.is_object()) << where;
  auto it = vllm.begin();
  EXPECT_DOUBLE_EQ(it.value()["logprob"].get<double>(), logprob) << where;
  EXPECT_EQ(it.value()["decoded_token"], echo["tokens"][i]) << where;
  const int64_t rank = it.value()["rank"].get<int64_t>();
  EXPECT_GE(rank, 1) << where;
  EXPECT_EQ(rank == 1, logprob == best) << where;
  int64_t expected_rank = 1;
  for (++it; it != vllm.end(); ++it) {
    if (expected_rank == rank) ++expected_rank;  // the prompt token's own place
    EXPECT_EQ(it.value()["rank"], expected_rank++) << where;
    EXPECT_GE(best, it.value()["logprob"].get<double>()) << where;
  }
  EXPECT_GE(vllm.size(), static_cast<size_t>(n)) << where;
}

TEST_F(ServiceTest, CompletionEchoWithLogprobsScoresThePrompt) {
  ScriptText("hello");
  const std::string prompt = R"("prompt": "hello world, or ld he")";
  const Json j = Post(service_, "/v1/completions",
                      "{" + prompt + R"(, "echo": true, "logprobs": 2, "max_tokens": 5})")
                     .json();
  const Json& choice = j["choices"][0];
  const Json& lp = choice["logprobs"];
  const int64_t num_prompt = j["usage"]["prompt_tokens"].get<int64_t>();
  ASSERT_EQ(lp["tokens"].size(), static_cast<size_t>(num_prompt + 2));  // + "hello", EOS
  EXPECT_EQ(choice["text"], "hello world, or ld hehello");
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  std::string joined;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    EXPECT_EQ(lp["text_offset"][i], joined.size()) << i;
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, "hello world, or ld hehello<|im_end|>");

  // vLLM's prompt_logprobs: the same scores, one entry per prompt token, the first null.
  const Json v = Post(service_, "/v1/completions",
                      "{" + prompt + R"(, "prompt_logprobs": 2, "max_tokens": 5})")
                     .json();
  const Json& scores = v["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(scores.size(), static_cast<size_t>(num_prompt));
  EXPECT_TRUE(scores[0].is_null());
  for (int64_t i = 1; i < num_prompt; ++i)
    ExpectSameScore(lp, static_cast<size_t>(i), scores[i], 2);
  EXPECT_FALSE(v["choices"][0].contains("logprobs") && !v["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(v["choices"][0]["text"], "hello");
}

TEST_F(ServiceTest, EchoWithMaxTokensZeroScoresThePromptAlone) {
  ScriptText("hello");
  const Json j = Post(service_, "/v1/completions",
                      R"({"prompt": "hello world", "echo": true, "max_tokens": 0, "logprobs": 0})")
                     .json();
  const Json& choice = j["choices"][0];
  EXPECT_EQ(choice["text"], "hello world");
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
  const Json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), j["usage"]["prompt_tokens"].get<size_t>());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  for (size_t i = 1; i < lp["tokens"].size(); ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_TRUE(lp["top_logprobs"][i].empty());  // logprobs 0: no alternatives
  }
  // Token-id prompts too; a one-token prompt has only its null entry.
  const Json one = Post(service_, "/v1/completions",
                        R"({"prompt": [104], "echo": true, "max_tokens": 0, "logprobs": 1})")
                       .json();
  EXPECT_EQ(one["choices"][0]["text"], "h");
  EXPECT_EQ(one["choices"][0]["logprobs"]["tokens"], Json::array({"h"}));
  EXPECT_EQ(one["choices"][0]["logprobs"]["token_logprobs"], Json::array({nullptr}));
}

TEST_F(ServiceTest, StreamedEchoCarriesThePromptsLogprobsFirst) {
  ScriptText("hello");
  const std::string body =
      R"({"prompt": "or ld he", "echo": true, "logprobs": 1, "max_tokens": 5, "n": 2)";
  const Json whole = Post(service_, "/v1/completions", body + "}").json();
  const std::vector<Json> events =
      SseEvents(Post(service_, "/v1/completions", body + R"(, "stream": true})").body);
  for (int index = 0; index < 2; ++index) {
    std::string text;
    Json tokens = Json::array(), logprobs = Json::array(), offsets = Json::array();
    bool first = true;
    for (const Json& e : events) {
      if (e == "[DONE]" || e["choices"][0]["index"] != index) continue;
      const Json& c = e["choices"][0];
      if (first) {
        EXPECT_EQ(c["text"], "or ld he");  // the prompt's chunk comes first, scored
        first = false;
      }
      text += c["text"].get<std::string>();
      if (c["logprobs"].is_null()) continue;
      for (const Json& t : c["logprobs"]["tokens"]) tokens.push_back(t);
      for (const Json& l : c["logprobs"]["token_logprobs"]) logprobs.push_back(l);
      for (const Json& o : c["logprobs"]["text_offset"]) offsets.push_back(o);
    }
    const Json& want = whole["choices"][index];
    EXPECT_EQ(text, want["text"]) << index;
    EXPECT_EQ(tokens, want["logprobs"]["tokens"]) << index;
    EXPECT_EQ(logprobs, want["logprobs"]["token_logprobs"]) << index;
    EXPECT_EQ(offsets, want["logprobs"]["text_offset"]) << index;
  }
}

TEST_F(ServiceTest, ChatPromptLogprobsCoverTheRenderedPrompt) {
  ScriptText("hello");
  const Json j =
      Post(service_, "/v1/chat/completions", ChatBody(R"("prompt_logprobs": 0, "n": 2)")).json();
  const Json& scores = j["prompt_logprobs"];
  ASSERT_EQ(scores.size(), j["usage"]["prompt_tokens"].get<size_t>());
  EXPECT_TRUE(scores[0].is_null());
  for (size_t i = 1; i < scores.size(); ++i) {
    ASSERT_EQ(scores[i].size(), 1u) << i;  // the prompt token alone (0 alternatives)
    EXPECT_LE(scores[i].begin().value()["logprob"].get<double>(), 0.0);
  }
  // Position i scores the rendered prompt's token i (what /tokenize gives for these messages).
  const Json rendered =
      Post(service_, "/tokenize", ChatBody(R"("return_token_strs": true)")).json();
  ASSERT_EQ(rendered["token_strs"].size(), scores.size());
  for (size_t i = 1; i < scores.size(); ++i) {
    EXPECT_EQ(scores[i].begin().key(), std::to_string(rendered["tokens"][i].get<int>())) << i;
    EXPECT_EQ(scores[i].begin().value()["decoded_token"], rendered["token_strs"][i]) << i;
  }
  EXPECT_EQ(j["choices"][1]["message"]["content"], "hello");
}

TEST_F(ServiceTest, PromptScoringErrorsNameTheField) {
  ExpectError(
      Post(service_, "/v1/chat/completions", ChatBody(R"("prompt_logprobs": 1, "stream": true)")),
      400, "invalid_value", "prompt_logprobs");
  ExpectError(Post(service_, "/v1/completions", R"({"prompt": "a", "prompt_logprobs": 21})"), 400,
              "invalid_value", "prompt_logprobs");
  ExpectError(Post(service_, "/v1/completions", R"({"prompt": "a", "prompt_logprobs": -1})"), 400,
              "invalid_value", "prompt_logprobs");
  ExpectError(Post(service_, "/v1/completions", R"({"prompt": "a", "max_tokens": 0})"), 400,
              "invalid_value", "max_tokens");
  ExpectError(Post(service_, "/v1/chat/completions", ChatBody(R"("max_tokens": 0)")), 400,
              "invalid_value", "max_tokens");
}

TEST_F(ServiceTest, HealthReadyAndDraining) {
  EXPECT_EQ(Drive(service_, Request("GET", "/health")).status, 200);
  EXPECT_EQ(Drive(service_, Request("GET", "/ping")).status, 200);
  EXPECT_EQ(Drive(service_, Request("POST", "/ping")).status, 200);
  EXPECT_EQ(Drive(service_, Request("GET", "/version")).json()["version"], "unknown");
  EXPECT_EQ(Drive(service_, Request("GET", "/ready")).status, 200);
  EXPECT_EQ(Drive(service_, Request("GET", "/v1/health/ready")).status, 200);
  service_.StartDraining();
  ExpectError(Drive(service_, Request("GET", "/ready")), 503, "server_draining", nullptr);
  ExpectError(Post(service_, "/v1/chat/completions", ChatBody()), 503, "server_draining", nullptr);
  EXPECT_EQ(Drive(service_, Request("GET", "/health")).status, 200);

  OpenAiService loading(ServiceOptions{});
  EXPECT_EQ(Drive(loading, Request("GET", "/health")).status, 200);
  ExpectError(Drive(loading, Request("GET", "/ready")), 503, "model_loading", nullptr);
  ExpectError(Post(loading, "/v1/completions", R"({"prompt": "a"})"), 503, "model_loading",
              nullptr);
}

TEST_F(ServiceTest, ServerInfoAndMetricsComeFromProviders) {
  ExpectError(Drive(service_, Request("GET", "/metrics")), 404, "unknown_url", nullptr);
  service_.SetMetricsProvider([] { return std::string("strata:x 1\n"); });
  service_.SetServerInfoProvider([] { return Json{{"version", "v"}}; });
  Reply metrics = Drive(service_, Request("GET", "/metrics"));
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.body, "strata:x 1\n");
  EXPECT_THAT(metrics.content_type, HasSubstr("text/plain"));
  const Json info = Drive(service_, Request("GET", "/server_info")).json();
  EXPECT_EQ(info["version"], "v");
  EXPECT_EQ(info["num_requests_in_flight"], 0);
  EXPECT_EQ(info["draining"], false);
}

// POST /reset_prefix_cache: the finished request's cached blocks are forgotten on the engine's
// thread, the reply counts them; 404 until the process enables it.
class PrefixCachingServiceTest : public ServiceTest {
 protected:
  PrefixCachingServiceTest() : ServiceTest(testing::FixtureOptions{512, 1024, 16, true}) {}
};

TEST_F(PrefixCachingServiceTest, ResetPrefixCacheForgetsCachedBlocks) {
  ExpectError(Post(service_, "/reset_prefix_cache", "{}"), 404, "unknown_url", nullptr);
  service_.SetPrefixCacheResetter(
      [this] { return fixture_.engine().ResetPrefixCache(std::chrono::seconds(10)); });
  ScriptText("hello world");
  const std::string body = R"({"prompt": ")" + std::string(200, 'y') + R"(", "max_tokens": 2})";
  auto cached_tokens = [](const Reply& r) {
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  };
  Reply cold = Post(service_, "/v1/completions", body);
  ASSERT_EQ(cold.status, 200) << cold.body;
  WaitIdle();
  Reply warm = Post(service_, "/v1/completions", body);
  ASSERT_EQ(warm.status, 200) << warm.body;
  EXPECT_GT(cached_tokens(warm), 0) << "the repeated prompt was meant to hit";
  WaitIdle();
  const int64_t cached_blocks = fixture_.engine().stats().scheduler.num_cached_blocks;
  ASSERT_GT(cached_blocks, 0);

  Reply reset = Post(service_, "/reset_prefix_cache", "");
  ASSERT_EQ(reset.status, 200) << reset.body;
  EXPECT_EQ(reset.json()["status"], "ok");
  EXPECT_EQ(reset.json()["num_ranks"], 1);
  EXPECT_EQ(reset.json()["num_blocks_dropped"], cached_blocks);
  Reply after = Post(service_, "/v1/completions", body);
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_EQ(cached_tokens(after), 0) << "the reset was meant to forget the prompt";
  ExpectError(Drive(service_, Request("GET", "/reset_prefix_cache")), 405, "method_not_allowed",
              nullptr);
}

TEST_F(ServiceTest, ContextLengthErrorsCountTokens) {
  std::string long_text(600, 'x');  // 600 tokens of one byte each (no merges for "xx")
  Reply prompt = Post(service_, "/v1/chat/completions",
                      R"({"messages": [{"role": "user", "content": ")" + long_text + R"("}]})");
  ExpectError(prompt, 400, "context_length_exceeded", "messages");
  EXPECT_THAT(prompt.json()["error"]["message"].get<std::string>(),
              HasSubstr("maximum context length is 512 tokens"));
  Reply budget = Post(service_, "/v1/chat/completions", ChatBody(R"("max_tokens": 600)"));
  ExpectError(budget, 400, "context_length_exceeded", "max_tokens");
  EXPECT_THAT(budget.json()["error"]["message"].get<std::string>(), HasSubstr("600 > 512 - "));
  ExpectError(Post(service_, "/v1/completions", R"({"prompt": [1, 2], "max_tokens": 511})"), 400,
              "context_length_exceeded", "max_tokens");
  ExpectError(Post(service_, "/v1/completions", R"({"prompt": ["a", ")" + long_text + R"("]})"),
              400, "context_length_exceeded", "prompt[1]");
}

// X-Request-Id: the response id when the body has no request_id (vLLM); a retry reusing it
// while the first attempt runs is served (its engine ids made unique), unlike a body request_id
// in use; an oversized or binary one is a 400 naming the header.
TEST_F(ServiceTest, XRequestIdHeaderNamesTheResponseAndAReuseWhileRunningIsServed) {
  ScriptText("hello");
  const http::Header trace{"x-request-id", "trace-42"};
  Reply chat = Post(service_, "/v1/chat/completions", ChatBody(), {trace});
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.json()["id"], "chatcmpl-trace-42");
  Reply cmpl = Post(service_, "/v1/completions", R"({"prompt": "a", "max_tokens": 2})", {trace});
  ASSERT_EQ(cmpl.status, 200) << cmpl.body;
  EXPECT_EQ(cmpl.json()["id"], "cmpl-trace-42");
  Reply body_wins =
      Post(service_, "/v1/chat/completions", ChatBody(R"("request_id": "mine")"), {trace});
  EXPECT_EQ(body_wins.json()["id"], "chatcmpl-mine");
  ExpectError(
      Post(service_, "/v1/chat/completions", ChatBody(), {{"x-request-id", std::string(257, 'x')}}),
      400, "invalid_value", "X-Request-Id");
  // It becomes JSON text (the id): bytes that are not UTF-8 are refused before anything runs.
  const Reply binary =
      Post(service_, "/v1/responses", R"({"input": "x"})", {{"x-request-id", "trace-\xff"}});
  ExpectError(binary, 400, "invalid_value", "X-Request-Id");
  EXPECT_THAT(binary.body, HasSubstr("UTF-8"));

  // The first attempt still runs when the same id comes again (a script without an end).
  std::vector<int32_t> endless;
  for (int i = 0; i < 100; ++i) {
    for (int32_t id : fixture_.Ids("hello ")) endless.push_back(id);
  }
  fixture_.executor().SetScript([endless](const std::vector<int32_t>&) { return endless; });
  fixture_.executor().SetStepDelay(absl::Milliseconds(5));
  auto running = [&](const std::vector<http::Header>& headers, const std::string& extra) {
    http::HandlerResult r =
        service_.Handle(Request("POST", "/v1/chat/completions",
                                ChatBody(R"("stream": true, "max_tokens": 400)" + extra), headers));
    EXPECT_NE(r.pending, nullptr) << r.response.body;
    return r;
  };
  http::HandlerResult first = running({trace}, "");
  ASSERT_NE(first.pending, nullptr);
  first.pending->Start([] {});
  Reply retry = Post(service_, "/v1/chat/completions", ChatBody(R"("max_tokens": 3)"), {trace});
  EXPECT_EQ(retry.status, 200) << retry.body;
  EXPECT_EQ(retry.json()["id"], "chatcmpl-trace-42");
  // A body request_id in use stays an error naming the field.
  http::HandlerResult mine = running({}, R"(, "request_id": "r1")");
  ASSERT_NE(mine.pending, nullptr);
  mine.pending->Start([] {});
  ExpectError(Post(service_, "/v1/chat/completions", ChatBody(R"("request_id": "r1")")), 400,
              "invalid_value", "request_id");
  first.pending->Cancel();
  mine.pending->Cancel();
  first.pending.reset();
  mine.pending.reset();
  WaitAborted(2);
}

TEST_F(ServiceTest, CancelAbortsTheRequestAndFreesItsCache) {
  fixture_.executor().SetStepDelay(absl::Milliseconds(5));
  const int32_t total_blocks = [&] {
    Post(service_, "/v1/completions", R"({"prompt": "a", "max_tokens": 1})");
    return fixture_.engine().stats().scheduler.num_blocks;
  }();
  http::HandlerResult r = service_.Handle(
      Request("POST", "/v1/chat/completions", ChatBody(R"("stream": true, "max_tokens": 400)")));
  ASSERT_NE(r.pending, nullptr);
  r.pending->Start([] {});
  http::HttpResponse out;
  for (int i = 0; i < 200 && fixture_.engine().stats().scheduler.num_running == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    r.pending->Poll(&out);
  }
  EXPECT_EQ(service_.num_in_flight(), 1);
  EXPECT_LT(fixture_.engine().stats().scheduler.num_free_blocks, total_blocks);
  r.pending->Cancel();
  r.pending.reset();
  EXPECT_EQ(service_.num_in_flight(), 0);
  WaitAborted(1);
  const scheduler::SchedulerStats s = fixture_.engine().stats().scheduler;
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.num_free_blocks, total_blocks);
  EXPECT_EQ(s.num_free_slots, s.num_slots);
  EXPECT_EQ(s.num_aborted_total, 1);
}

TEST_F(ServiceTest, ShutdownMidStreamEndsChoicesWithAbort) {
  fixture_.executor().SetStepDelay(absl::Milliseconds(2));
  http::HandlerResult r = service_.Handle(
      Request("POST", "/v1/chat/completions", ChatBody(R"("stream": true, "max_tokens": 400)")));
  r.pending->Start([] {});
  http::HttpResponse out;
  r.pending->Poll(&out);
  fixture_.engine().Stop();
  bool done = false;
  for (int i = 0; i < 100 && !done; ++i) done = r.pending->Poll(&out);
  ASSERT_TRUE(done);
  std::vector<Json> events = SseEvents(out.body);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "abort");
}

class SmallQueueTest : public ServiceTest {
 protected:
  SmallQueueTest() : ServiceTest(testing::FixtureOptions{512, 1, 16, false}) {}
};

TEST_F(SmallQueueTest, QueueFullIs429WithRetryAfter) {
  fixture_.executor().SetStepDelay(absl::Milliseconds(5));
  http::HandlerResult first =
      service_.Handle(Request("POST", "/v1/chat/completions", ChatBody(R"("max_tokens": 400)")));
  ASSERT_NE(first.pending, nullptr);
  Reply second = Post(service_, "/v1/chat/completions", ChatBody());
  ExpectError(second, 429, "rate_limit_exceeded", nullptr);
  EXPECT_EQ(second.Header("Retry-After"), "3");
  first.pending->Cancel();
  first.pending.reset();
  WaitAborted(1);
  EXPECT_EQ(Post(service_, "/v1/chat/completions", ChatBody(R"("max_tokens": 2)")).status, 200);
}

class AuthTest : public ServiceTest {
 protected:
  AuthTest() : ServiceTest({}, "sk-test") {}
};

TEST_F(AuthTest, BearerKeyGuardsV1AndTheAdminRoute) {
  ExpectError(Drive(service_, Request("GET", "/v1/models")), 401, "invalid_api_key", nullptr);
  ExpectError(Drive(service_, Request("GET", "/v1/models", "", {{"authorization", "Bearer no"}})),
              401, "invalid_api_key", nullptr);
  ExpectError(Drive(service_, Request("GET", "/v1/models", "", {{"authorization", "sk-test"}})),
              401, "invalid_api_key", nullptr);
  EXPECT_EQ(Drive(service_, Request("GET", "/v1/models", "", {{"authorization", "Bearer sk-test"}}))
                .status,
            200);
  EXPECT_EQ(Drive(service_, Request("GET", "/health")).status, 200);
  EXPECT_EQ(Drive(service_, Request("GET", "/ready")).status, 200);
  // The admin route is guarded too (it changes what every client's requests cost).
  ExpectError(Post(service_, "/reset_prefix_cache", ""), 401, "invalid_api_key", nullptr);
}

// Routes another module adds (the Files and Batches API): behind the key, errors rendered as
// the service's, other paths untouched.
TEST(ExtraRoutesTest, GoBehindTheKeyAndRenderErrorsAsTheService) {
  ServiceOptions options;
  options.api_key = "sk-x";
  options.extra_routes_serve = [](std::string_view path) { return path.starts_with("/v1/extra"); };
  options.extra_routes_handle =
      [](const http::HttpRequest& r) -> absl::StatusOr<http::HttpResponse> {
    if (r.path == "/v1/extra/missing") {
      return ApiErrorStatus(absl::StatusCode::kNotFound, "no such thing", "thing_id");
    }
    http::HttpResponse response;
    response.body = "{\"served\": true}";
    return response;
  };
  OpenAiService service(options);
  const std::vector<http::Header> key = {{"authorization", "Bearer sk-x"}};
  ExpectError(Drive(service, Request("GET", "/v1/extra/a")), 401, "invalid_api_key", nullptr);
  const Reply ok = Drive(service, Request("GET", "/v1/extra/a", "", key));
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, "{\"served\": true}");
  ExpectError(Drive(service, Request("DELETE", "/v1/extra/missing", "", key)), 404, "not_found",
              "thing_id");
  EXPECT_EQ(Drive(service, Request("GET", "/v1/other", "", key)).status, 404);
}

// ---- /v1/responses ----

// "event: T\ndata: {json}\n\n" events of a Responses stream, checking that the event line names
// the data's type and that sequence numbers count up from 0.
std::vector<Json> ResponsesEvents(const std::string& body) {
  std::vector<Json> events;
  for (absl::string_view block : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    if (absl::StartsWith(block, ":")) continue;  // keep-alive ping
    const size_t newline = block.find('\n');
    EXPECT_NE(newline, absl::string_view::npos) << block;
    const absl::string_view event_line = block.substr(0, newline);
    absl::string_view data = block.substr(newline + 1);
    EXPECT_TRUE(absl::StartsWith(data, "data: ")) << block;
    data.remove_prefix(6);
    Json e = Json::parse(std::string(data));
    EXPECT_EQ(event_line, absl::StrCat("event: ", e["type"].get<std::string>()));
    EXPECT_EQ(e["sequence_number"], events.size());
    events.push_back(std::move(e));
  }
  return events;
}

TEST_F(ServiceTest, ResponsesServeTheChatAsOutputItems) {
  ScriptText("hello world");
  Reply r = Post(service_, "/v1/responses",
                 R"({"model": "test-model", "input": "Say hello", "instructions": "Be brief",
                     "max_output_tokens": 50, "metadata": {"k": "v"}})");
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  EXPECT_TRUE(absl::StartsWith(j["id"].get<std::string>(), "resp-"));
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["model"], "test-model");
  EXPECT_EQ(j["instructions"], "Be brief");
  EXPECT_EQ(j["max_output_tokens"], 50);
  EXPECT_EQ(j["metadata"]["k"], "v");
  EXPECT_EQ(j["store"], false);
  ASSERT_EQ(j["output"].size(), 1u) << j.dump();
  const Json& message = j["output"][0];
  EXPECT_EQ(message["type"], "message");
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["status"], "completed");
  EXPECT_EQ(message["content"][0]["type"], "output_text");
  EXPECT_EQ(message["content"][0]["text"], "hello world");
  // The same prompt as the chat request it translates to (instructions = a system message).
  const Json chat = Post(service_, "/v1/chat/completions",
                         R"({"messages": [{"role": "system", "content": "Be brief"},
                                          {"role": "user", "content": "Say hello"}]})")
                        .json();
  EXPECT_EQ(j["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
  EXPECT_EQ(j["usage"]["output_tokens"], chat["usage"]["completion_tokens"]);
  EXPECT_EQ(j["usage"]["total_tokens"], chat["usage"]["total_tokens"]);
  // Cut by max_output_tokens: incomplete.
  const Json cut =
      Post(service_, "/v1/responses", R"({"input": "Say hello", "max_output_tokens": 1})").json();
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(cut["output"][0]["status"], "incomplete");
}

TEST_F(ServiceTest, ResponsesStreamEventsAddUpToTheResponse) {
  ScriptText("<think>hmm</think>hello world, hello");
  const Json whole = Post(service_, "/v1/responses", R"({"input": "Say hello"})").json();
  ASSERT_EQ(whole["output"].size(), 2u) << whole.dump();
  EXPECT_EQ(whole["output"][0]["type"], "reasoning");
  EXPECT_EQ(whole["output"][0]["content"][0]["text"], "hmm");
  Reply r = Post(service_, "/v1/responses", R"({"input": "Say hello", "stream": true})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/event-stream");
  const std::vector<Json> events = ResponsesEvents(r.body);
  ASSERT_GE(events.size(), 10u);
  EXPECT_EQ(events[0]["type"], "response.created");
  EXPECT_EQ(events[0]["response"]["status"], "in_progress");
  EXPECT_EQ(events[1]["type"], "response.in_progress");
  EXPECT_EQ(events.back()["type"], "response.completed");
  std::string reasoning, text;
  std::vector<std::string> items;
  for (const Json& e : events) {
    const std::string type = e["type"];
    if (type == "response.reasoning_text.delta") reasoning += e["delta"].get<std::string>();
    if (type == "response.output_text.delta") text += e["delta"].get<std::string>();
    if (type == "response.output_item.added") items.push_back(e["item"]["type"]);
    if (type == "response.output_item.done") {  // the item as the whole response shows it
      EXPECT_EQ(e["item"], events.back()["response"]["output"][e["output_index"].get<size_t>()]);
    }
  }
  EXPECT_EQ(items, (std::vector<std::string>{"reasoning", "message"}));
  EXPECT_EQ(reasoning, "hmm");
  EXPECT_EQ(text, "hello world, hello");
  const Json& done = events.back()["response"];
  EXPECT_EQ(done["output"][1]["content"][0]["text"], text);
  EXPECT_EQ(done["usage"], whole["usage"]);
}

// include ["message.output_text.logprobs"] + top_logprobs: the message's output_text lists the
// text's tokens (not the reasoning's) with chat's entries; the stream's deltas carry the same.
TEST_F(ServiceTest, ResponsesOutputTextCarriesLogprobsWhenAskedFor) {
  ScriptText("<think>hmm</think>hello world");
  const std::string body = R"({"input": "Say hello", "top_logprobs": 2,
                               "include": ["message.output_text.logprobs"])";
  const Json whole = Post(service_, "/v1/responses", body + "}").json();
  ASSERT_EQ(whole["output"].size(), 2u) << whole.dump();
  const Json& text = whole["output"][1]["content"][0];
  EXPECT_EQ(text["text"], "hello world");
  std::string joined;
  for (const Json& entry : text["logprobs"]) {
    joined += entry["token"].get<std::string>();
    EXPECT_LE(entry["logprob"].get<double>(), 0.0);
    EXPECT_EQ(entry["top_logprobs"].size(), 2u);
  }
  EXPECT_TRUE(absl::StartsWith(joined, "hello world")) << joined;  // + the hidden end of turn
  EXPECT_EQ(whole["top_logprobs"], 2);
  // Streamed: the deltas' logprobs add up to the final list; without asking, lists are empty.
  Json streamed = Json::array();
  for (const Json& e :
       ResponsesEvents(Post(service_, "/v1/responses", body + R"(, "stream": true})").body)) {
    if (e["type"] == "response.output_text.delta") {
      for (const Json& entry : e["logprobs"]) streamed.push_back(entry);
    }
    if (e["type"] == "response.output_text.done") {
      EXPECT_EQ(e["logprobs"], text["logprobs"]);
    }
  }
  EXPECT_EQ(streamed, text["logprobs"]);
  const Json plain = Post(service_, "/v1/responses", R"({"input": "Say hello"})").json();
  EXPECT_EQ(plain["output"][1]["content"][0]["logprobs"], Json::array());
  for (const Json& e :
       ResponsesEvents(Post(service_, "/v1/responses", R"({"input": "x", "stream": true})").body)) {
    if (e["type"] == "response.output_text.delta") {
      EXPECT_EQ(e["logprobs"], Json::array());
    }
  }
  ExpectError(Post(service_, "/v1/responses", R"({"input": "x", "top_logprobs": 21})"), 400,
              "invalid_value", "top_logprobs");
}

TEST_F(ServiceTest, ResponsesFunctionCallsRoundTrip) {
  ScriptText(
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
      "<|tool_calls_section_end|>");
  const std::string tools = R"("tools": [{"type": "function", "name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}])";
  const Json j =
      Post(service_, "/v1/responses", absl::StrCat(R"({"input": "Weather?", )", tools, "}")).json();
  ASSERT_EQ(j["output"].size(), 1u) << j.dump();
  const Json& call = j["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["call_id"], "functions.get_weather:0");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(j["tools"][0]["name"], "get_weather");  // echoed as sent
  // Streamed: one function_call item whose argument deltas add up.
  Reply s = Post(service_, "/v1/responses",
                 absl::StrCat(R"({"input": "Weather?", "stream": true, )", tools, "}"));
  std::string arguments;
  int calls = 0;
  for (const Json& e : ResponsesEvents(s.body)) {
    if (e["type"] == "response.output_item.added") calls += e["item"]["type"] == "function_call";
    if (e["type"] == "response.function_call_arguments.delta") arguments += e["delta"];
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(arguments, "{\"city\": \"Paris\"}");
  // The call and its output go back as input items: the next turn renders them as the chat
  // template's tool call and tool message.
  ScriptText("sunny");
  const std::string next = absl::StrCat(R"({"input": [
      {"role": "user", "content": "Weather?"},
      {"type": "function_call", "call_id": "functions.get_weather:0", "name": "get_weather",
       "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call_output", "call_id": "functions.get_weather:0",
       "output": "{\"sky\": \"clear\"}"}], )",
                                        tools, "}");
  const Json answer = Post(service_, "/v1/responses", next).json();
  EXPECT_EQ(answer["output"][0]["content"][0]["text"], "sunny") << answer.dump();
  const Json chat_prompt = Post(service_, "/tokenize",
                                absl::StrCat(R"({"messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "functions.get_weather:0",
       "type": "function", "function": {"name": "get_weather",
       "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "functions.get_weather:0",
       "content": "{\"sky\": \"clear\"}"}], )",
                                             R"("tools": [{"type": "function", "function":
      {"name": "get_weather", "parameters": {"type": "object", "properties":
      {"city": {"type": "string"}}}}}]})"))
                               .json();
  EXPECT_EQ(answer["usage"]["input_tokens"], chat_prompt["count"]);
}

TEST_F(ServiceTest, StoredResponsesContinueRetrieveAndDelete) {
  ResponseStore store(1 << 20);
  OpenAiService service(ServiceOptions{.retry_after_seconds = 3, .response_store = &store});
  service.SetModel(&fixture_.served());
  std::vector<std::string> prompts;  // what the model was shown, per request
  fixture_.executor().SetScript([&](const std::vector<int32_t>& prompt) {
    prompts.push_back(*fixture_.tokenizer().DecodeBytes(prompt));
    std::vector<int32_t> ids = fixture_.Ids("hello world");
    ids.push_back(kImEnd);
    return ids;
  });
  const Json first =
      Post(service, "/v1/responses", R"({"input": "Say hello", "instructions": "Be brief"})")
          .json();
  ASSERT_EQ(first["status"], "completed") << first.dump();
  EXPECT_EQ(first["store"], true);
  const std::string id = first["id"];
  EXPECT_EQ(store.num_responses(), 1);

  // Retrieved as it was returned.
  const Reply got = Drive(service, Request("GET", "/v1/responses/" + id));
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.json(), first);

  // A continuation shows the model the earlier turn and its reply, not the old instructions.
  const Json next =
      Post(service, "/v1/responses", Json{{"input", "Again"}, {"previous_response_id", id}}.dump())
          .json();
  ASSERT_EQ(next["status"], "completed") << next.dump();
  EXPECT_EQ(next["previous_response_id"], id);
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_THAT(prompts[0], HasSubstr("Be brief"));
  EXPECT_THAT(prompts[1], ::testing::Not(HasSubstr("Be brief")));
  const size_t turn = prompts[1].find("Say hello"), reply = prompts[1].find("hello world"),
               again = prompts[1].find("Again");
  ASSERT_NE(turn, std::string::npos) << prompts[1];
  ASSERT_NE(reply, std::string::npos) << prompts[1];
  ASSERT_NE(again, std::string::npos) << prompts[1];
  EXPECT_LT(turn, reply);
  EXPECT_LT(reply, again);
  EXPECT_GT(next["usage"]["input_tokens"], first["usage"]["input_tokens"]);

  // A streamed response is stored as its response.completed event shows it.
  Json completed;
  for (absl::string_view event : absl::StrSplit(
           Post(service, "/v1/responses", R"({"input": "Say hello", "stream": true})").body, "\n\n",
           absl::SkipEmpty())) {
    const size_t data = event.find("data: ");
    if (data == absl::string_view::npos) continue;
    const Json e = Json::parse(std::string(event.substr(data + 6)));
    if (e.value("type", "") == "response.completed") completed = e["response"];
  }
  ASSERT_TRUE(completed.is_object());
  const Reply streamed =
      Drive(service, Request("GET", "/v1/responses/" + completed["id"].get<std::string>()));
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_EQ(streamed.json()["output"], completed["output"]);
  EXPECT_EQ(streamed.json()["store"], true);

  // store: false keeps nothing; a deleted response is gone for GET and continuations.
  const Json unstored =
      Post(service, "/v1/responses", R"({"input": "Say hello", "store": false})").json();
  EXPECT_EQ(unstored["store"], false);
  EXPECT_EQ(
      Drive(service, Request("GET", "/v1/responses/" + unstored["id"].get<std::string>())).status,
      404);
  const Reply deleted = Drive(service, Request("DELETE", "/v1/responses/" + id));
  ASSERT_EQ(deleted.status, 200) << deleted.body;
  EXPECT_EQ(deleted.json()["deleted"], true);
  EXPECT_EQ(Drive(service, Request("GET", "/v1/responses/" + id)).status, 404);
  ExpectError(
      Post(service, "/v1/responses", Json{{"input", "x"}, {"previous_response_id", id}}.dump()),
      400, "previous_response_not_found", "previous_response_id");
  ExpectError(Post(service, "/v1/responses", R"({"input": "x", "previous_response_id": 7})"), 400,
              "invalid_type", "previous_response_id");
  const Reply wrong = Drive(service, Request("PUT", "/v1/responses/" + id));
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.Header("Allow"), "GET, DELETE");
}

// A service that stores responses and runs background ones.
class BackgroundTest : public ServiceTest {
 protected:
  BackgroundTest() { stored_.SetModel(&fixture_.served()); }
  ResponseStore store_{1 << 20};
  BackgroundResponses background_;
  OpenAiService stored_{ServiceOptions{
      .retry_after_seconds = 3, .response_store = &store_, .background_responses = &background_}};
};

// OpenAI's background mode: answered "queued" at once, generated after, polled with GET,
// cancelled with POST …/cancel (the engine request aborted), refused where it cannot be served.
TEST_F(BackgroundTest, ResponsesAreQueuedPolledAndCancelled) {
  auto get = [&](const std::string& id) {
    return Drive(stored_, Request("GET", "/v1/responses/" + id));
  };
  auto cancel = [&](const std::string& id) {
    return Drive(stored_, Request("POST", "/v1/responses/" + id + "/cancel"));
  };
  // Polls until the response leaves `statuses` (10 s at most).
  auto wait_while = [&](const std::string& id, std::initializer_list<std::string> statuses) {
    Json r;
    for (int i = 0; i < 2000; ++i) {
      r = get(id).json();
      if (std::find(statuses.begin(), statuses.end(), r["status"]) == statuses.end()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return r;
  };
  ScriptText("hello world");
  const Reply queued = Drive(
      stored_, Request("POST", "/v1/responses", R"({"input": "Say hello", "background": true})"));
  ASSERT_EQ(queued.status, 200) << queued.body;
  const Json q = queued.json();
  EXPECT_EQ(q["status"], "queued");
  EXPECT_EQ(q["background"], true);
  EXPECT_EQ(q["store"], true);
  EXPECT_TRUE(q["output"].empty());
  const std::string id = q["id"];
  const Json done = wait_while(id, {"queued", "in_progress"});
  ASSERT_EQ(done["status"], "completed") << done.dump();
  EXPECT_EQ(done["id"], id);
  EXPECT_EQ(done["background"], true);
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "hello world");
  EXPECT_EQ(cancel(id).json(), done);  // finished before the cancel: as it ended
  const Json next =
      Post(stored_, "/v1/responses", Json{{"input", "Again"}, {"previous_response_id", id}}.dump())
          .json();
  EXPECT_EQ(next["status"], "completed") << next.dump();
  EXPECT_EQ(next["background"], false);

  // A long one, cancelled while it runs: the engine request is aborted, the object says so.
  std::string text = "hello world";
  for (int i = 0; i < 100; ++i) text += " and on";
  ScriptText(text);
  fixture_.executor().SetStepDelay(absl::Milliseconds(5));
  const std::string long_id =
      Drive(stored_, Request("POST", "/v1/responses",
                             R"({"input": "Go on", "background": true, "max_output_tokens": 300})"))
          .json()["id"];
  EXPECT_EQ(wait_while(long_id, {"queued"})["status"], "in_progress");
  EXPECT_EQ(background_.num_running(), 1);
  EXPECT_EQ(stored_.num_in_flight(), 1);  // a drain waits for it
  const Reply early = Post(stored_, "/v1/responses",
                           Json{{"input", "x"}, {"previous_response_id", long_id}}.dump());
  ExpectError(early, 400, "invalid_value", "previous_response_id");
  EXPECT_THAT(early.body, HasSubstr("is still in_progress"));
  const Reply cancelled = cancel(long_id);
  ASSERT_EQ(cancelled.status, 200) << cancelled.body;
  EXPECT_EQ(cancelled.json()["status"], "cancelled");
  WaitAborted(1);
  EXPECT_EQ(background_.num_running(), 0);
  EXPECT_EQ(get(long_id).json()["status"], "cancelled");
  EXPECT_EQ(cancel(long_id).json()["status"], "cancelled");

  // Refusals, each naming the field.
  ExpectError(
      Post(stored_, "/v1/responses", R"({"input": "x", "background": true, "store": false})"), 400,
      "invalid_value", "background");
  ExpectError(Post(stored_, "/v1/responses", R"({"input": "x", "background": "yes"})"), 400,
              "invalid_type", "background");
  ExpectError(Post(service_, "/v1/responses", R"({"input": "x", "background": true})"), 400,
              "unsupported_value", "background");  // a server that stores nothing
  ExpectError(cancel(next["id"]), 400, "invalid_value", "response_id");  // not a background one
  EXPECT_EQ(cancel("resp-nope").status, 404);
  const Reply wrong = Drive(stored_, Request("GET", "/v1/responses/" + id + "/cancel"));
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.Header("Allow"), "POST");

  // Stopped (the server going down): what runs is cancelled, nothing new starts.
  const std::string last =
      Drive(stored_, Request("POST", "/v1/responses",
                             R"({"input": "Go on", "background": true, "max_output_tokens": 300})"))
          .json()["id"];
  background_.Stop();
  EXPECT_EQ(background_.num_running(), 0);
  WaitAborted(2);
  ExpectError(
      Drive(stored_, Request("POST", "/v1/responses", R"({"input": "x", "background": true})")),
      503, "server_draining", nullptr);
  EXPECT_EQ(get(last).json()["status"], "queued");  // never finished: left as it was
}

// GET /v1/responses/{id}/input_items: the request's input as Responses items, paged (20, newest
// first by default), with the ids the client gave or the response's own.
TEST_F(BackgroundTest, InputItemsListWhatTheRequestGave) {
  auto items = [&](const std::string& id, const std::string& query) {
    http::HttpRequest r = Request("GET", "/v1/responses/" + id + "/input_items");
    r.target += query;
    return Drive(stored_, std::move(r));
  };
  ScriptText("hello");
  const std::string plain =
      Post(stored_, "/v1/responses", R"({"input": "Say hello"})").json()["id"];
  const Json one = items(plain, "").json();
  EXPECT_EQ(one, (Json{{"object", "list"},
                       {"data",
                        {{{"type", "message"},
                          {"role", "user"},
                          {"status", "completed"},
                          {"content", {{{"type", "input_text"}, {"text", "Say hello"}}}},
                          {"id", "msg_" + plain + "_in0"}}}},
                       {"first_id", "msg_" + plain + "_in0"},
                       {"last_id", "msg_" + plain + "_in0"},
                       {"has_more", false}}))
      << one.dump();
  const Reply turn = Post(stored_, "/v1/responses", R"({"input": [
      {"role": "user", "content": "a"},
      {"type": "message", "role": "assistant", "content": "b"},
      {"type": "function_call", "id": "fc_given", "call_id": "c1", "name": "f", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "42"},
      {"role": "user", "content": [{"type": "input_text", "text": "d"}]}]})");
  ASSERT_EQ(turn.status, 200) << turn.body;
  const std::string id = turn.json()["id"];
  auto ids = [](const Json& page) {
    std::vector<std::string> out;
    for (const Json& item : page["data"]) out.push_back(item["id"]);
    return out;
  };
  const Json asc = items(id, "?order=asc").json();
  EXPECT_EQ(ids(asc),
            (std::vector<std::string>{"msg_" + id + "_in0", "msg_" + id + "_in1", "fc_given",
                                      "fco_" + id + "_in3", "msg_" + id + "_in4"}));
  EXPECT_EQ(asc["data"][1]["content"][0], (Json{{"type", "output_text"}, {"text", "b"}}));
  EXPECT_EQ(asc["data"][3]["output"], "42");
  // Newest first, two at a time, each page after the last one's last id.
  const Json first = items(id, "?limit=2").json();
  EXPECT_EQ(ids(first), (std::vector<std::string>{"msg_" + id + "_in4", "fco_" + id + "_in3"}));
  EXPECT_EQ(first["has_more"], true);
  const Json second = items(id, "?limit=2&after=" + first["last_id"].get<std::string>()).json();
  EXPECT_EQ(ids(second), (std::vector<std::string>{"fc_given", "msg_" + id + "_in1"}));
  const Json third = items(id, "?limit=2&after=" + second["last_id"].get<std::string>()).json();
  EXPECT_EQ(ids(third), (std::vector<std::string>{"msg_" + id + "_in0"}));
  EXPECT_EQ(third["has_more"], false);
  // Refusals naming the parameter; an unknown response; the method.
  ExpectError(items(id, "?limit=0"), 400, "invalid_value", "limit");
  ExpectError(items(id, "?limit=101"), 400, "invalid_value", "limit");
  ExpectError(items(id, "?order=up"), 400, "invalid_value", "order");
  ExpectError(items(id, "?after=nope"), 400, "invalid_value", "after");
  EXPECT_EQ(items("resp-nope", "").status, 404);
  const Reply post = Drive(stored_, Request("POST", "/v1/responses/" + id + "/input_items"));
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.Header("Allow"), "GET");
  EXPECT_EQ(RouteTemplate("/v1/responses/" + id + "/input_items"),
            "/v1/responses/{response_id}/input_items");
}

// `event: TYPE\ndata: JSON` events of a Responses stream, as their data objects.
std::vector<Json> ResponseEvents(const std::string& body) {
  std::vector<Json> events;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    const size_t data = event.find("data: ");
    EXPECT_NE(data, absl::string_view::npos) << event;
    if (data != absl::string_view::npos) {
      events.push_back(Json::parse(std::string(event.substr(data + 6))));
    }
  }
  return events;
}

// Background with stream: the events are kept, so a client resumes after any sequence number;
// a client leaving does not stop the response.
TEST_F(BackgroundTest, StreamedResponsesResumeAfterASequenceNumber) {
  auto follow = [&](const std::string& id, const std::string& query) {
    http::HttpRequest r = Request("GET", "/v1/responses/" + id);
    r.target += "?stream=true" + query;
    return Drive(stored_, std::move(r));
  };
  ScriptText("hello world, and a few more words");
  const Reply streamed = Post(stored_, "/v1/responses",
                              R"({"input": "Say hello", "background": true, "stream": true})");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_EQ(streamed.content_type, "text/event-stream");
  const std::vector<Json> all = ResponseEvents(streamed.body);
  ASSERT_GE(all.size(), 8u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i]["sequence_number"], i);
  ASSERT_EQ(all.back()["type"], "response.completed");
  const Json final_object = all.back()["response"];
  EXPECT_EQ(final_object["background"], true);
  const std::string id = final_object["id"];
  // Resumed after event 3: the rest; from the start: the same bytes.
  const Reply resumed = follow(id, "&starting_after=3");
  ASSERT_EQ(resumed.status, 200) << resumed.body;
  EXPECT_EQ(ResponseEvents(resumed.body), std::vector<Json>(all.begin() + 4, all.end()));
  EXPECT_EQ(follow(id, "").body, streamed.body);
  EXPECT_EQ(Drive(stored_, Request("GET", "/v1/responses/" + id)).json(), final_object);

  // A client that leaves mid-stream: the response goes on, and a new reader sees it end.
  std::string text = "hello world";
  for (int i = 0; i < 40; ++i) text += " and on";
  ScriptText(text);
  fixture_.executor().SetStepDelay(absl::Milliseconds(2));
  http::HandlerResult first = stored_.Handle(Request(
      "POST", "/v1/responses", R"({"input": "Go on", "background": true, "stream": true})"));
  ASSERT_NE(first.pending, nullptr);
  first.pending->Start([] {});
  http::HttpResponse partial;
  for (int i = 0; i < 2000 && ResponseEvents(partial.body).size() < 5; ++i) {
    first.pending->Poll(&partial);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::vector<Json> seen = ResponseEvents(partial.body);
  ASSERT_GE(seen.size(), 5u);
  const std::string long_id = seen[0]["response"]["id"];
  first.pending->Cancel();
  first.pending.reset();
  const int last_seen = seen.back()["sequence_number"];
  const std::vector<Json> rest =
      ResponseEvents(follow(long_id, absl::StrCat("&starting_after=", last_seen)).body);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.front()["sequence_number"], last_seen + 1);
  EXPECT_EQ(rest.back()["type"], "response.completed");
  EXPECT_EQ(rest.back()["response"]["output"][0]["content"][0]["text"], text);
  EXPECT_EQ(Drive(stored_, Request("GET", "/v1/responses/" + long_id)).json()["status"],
            "completed");

  // Refusals: a bad sequence number; a response whose events are not kept.
  ExpectError(follow(id, "&starting_after=-2"), 400, "invalid_value", "starting_after");
  ExpectError(follow(id, "&starting_after=x"), 400, "invalid_value", "starting_after");
  const std::string plain =
      Post(stored_, "/v1/responses", R"({"input": "Say hello"})").json()["id"];
  ExpectError(follow(plain, ""), 400, "invalid_value", "stream");
}

// A service storing responses in `dir` with background mode on, as `strata serve
// --responses-dir DIR` runs it.
struct DirService {
  DirService(const std::string& dir, const ServedModel& model)
      : store(ResponseStore::Open(1 << 20, dir).value()),
        service(
            ServiceOptions{.response_store = store.get(), .background_responses = &background}) {
    service.SetModel(&model);
  }
  std::unique_ptr<ResponseStore> store;
  BackgroundResponses background;
  OpenAiService service;
};

// With a directory (--responses-dir) stored responses outlive the process, and a background
// response accepted but not finished runs again from its start at the next start, under its
// id, from the conversation it continued (even if that one is gone by then).
TEST_F(ServiceTest, BackgroundResponsesRunAgainAfterARestart) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/strata_service_responses_", getpid());
  std::filesystem::remove_all(dir);
  auto get = [&](OpenAiService& service, const std::string& id) {
    return Drive(service, Request("GET", "/v1/responses/" + id)).json();
  };
  std::string text = "hello world";
  for (int i = 0; i < 30; ++i) text += " and on";
  std::string first_id, long_id, streamed_id;
  Json first, long_queued;
  {
    DirService server(dir, fixture_.served());
    OpenAiService& service = server.service;
    ResponseStore* store = server.store.get();
    ScriptText("hello world");
    first = Post(service, "/v1/responses", R"({"input": "Say hello"})").json();
    first_id = first["id"];
    ScriptText(text);
    fixture_.executor().SetStepDelay(absl::Milliseconds(5));
    long_queued = Post(service, "/v1/responses",
                       Json{{"input", "Go on"},
                            {"background", true},
                            {"max_output_tokens", 300},
                            {"previous_response_id", first_id}}
                           .dump())
                      .json();
    long_id = long_queued["id"];
    http::HandlerResult streamed = service.Handle(Request(
        "POST", "/v1/responses", R"({"input": "Go on", "background": true, "stream": true})"));
    ASSERT_NE(streamed.pending, nullptr);
    streamed.pending->Start([] {});
    http::HttpResponse partial;
    for (int i = 0; i < 2000 && ResponseEvents(partial.body).empty(); ++i) {
      streamed.pending->Poll(&partial);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_FALSE(ResponseEvents(partial.body).empty());
    streamed_id = ResponseEvents(partial.body)[0]["response"]["id"];
    for (int i = 0; i < 2000 && get(service, long_id)["status"] == "queued"; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_EQ(get(service, long_id)["status"], "in_progress");
    // A request this server's successor cannot run (written as an older server might have).
    ASSERT_TRUE(store
                    ->Put("resp-unrunnable",
                          {Json{{"id", "resp-unrunnable"}, {"status", "queued"}}, Json::array(),
                           Json{{"body", {{"input", "x"}, {"max_output_tokens", 0}}},
                                {"history", Json::array()}}})
                    .ok());
    // The server goes down: what runs is cancelled, and the first response is forgotten by
    // the time the next one starts (the continuation must not need it).
    server.background.Stop();
    WaitAborted(2);
    ASSERT_TRUE(store->Erase(first_id));
    streamed.pending.reset();
  }
  fixture_.executor().SetStepDelay(absl::Milliseconds(0));
  DirService server(dir, fixture_.served());
  OpenAiService& service = server.service;
  ResponseStore* store = server.store.get();
  EXPECT_EQ(service.ResumeBackgroundResponses(), 2);
  EXPECT_EQ(service.ResumeBackgroundResponses(), 0);  // once
  Json done;
  for (int i = 0; i < 2000; ++i) {
    done = get(service, long_id);
    if (done["status"] != "queued" && done["status"] != "in_progress") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(done["status"], "completed") << done.dump();
  EXPECT_EQ(done["id"], long_id);
  EXPECT_EQ(done["created_at"], long_queued["created_at"]);
  EXPECT_EQ(done["background"], true);
  EXPECT_EQ(done["previous_response_id"], first_id);
  EXPECT_EQ(done["output"][0]["content"][0]["text"], text);
  // It ran from the conversation it continued: the first exchange, then its own.
  const std::optional<StoredResponse> kept = store->Get(long_id);
  ASSERT_TRUE(kept);
  ASSERT_EQ(kept->messages.size(), 4u) << kept->messages.dump();
  EXPECT_EQ(kept->messages[0]["content"], "Say hello");
  EXPECT_EQ(kept->messages[1]["content"], "hello world");
  EXPECT_EQ(kept->messages[3]["content"], text);
  EXPECT_TRUE(kept->request.is_null());
  // The streamed one runs again too, its events kept from the first.
  http::HttpRequest follow = Request("GET", "/v1/responses/" + streamed_id);
  follow.target += "?stream=true";
  const std::vector<Json> events = ResponseEvents(Drive(service, std::move(follow)).body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front()["sequence_number"], 0);
  EXPECT_EQ(events.back()["type"], "response.completed");
  EXPECT_EQ(events.back()["response"]["output"][0]["content"][0]["text"], text);
  EXPECT_EQ(get(service, first_id)["error"]["code"], "not_found");
  const Json unrunnable = get(service, "resp-unrunnable");
  EXPECT_EQ(unrunnable["status"], "failed");
  EXPECT_THAT(unrunnable["error"]["message"].get<std::string>(),
              AllOf(HasSubstr("restarted"), HasSubstr("max_output_tokens")));
  WaitIdle();
}

TEST_F(ServiceTest, ResponsesRefuseWhatTheyCannotServeNamingTheField) {
  ExpectError(Post(service_, "/v1/responses", R"({"input": "x", "previous_response_id": "r"})"),
              400, "unsupported_value", "previous_response_id");
  ExpectError(
      Post(service_, "/v1/responses", R"({"input": "x", "tools": [{"type": "web_search"}]})"), 400,
      "unsupported_value", "tools[0].type");
  ExpectError(Post(service_, "/v1/responses", R"({"instructions": "x"})"), 400,
              "missing_required_parameter", "input");
  const Reply zero = Post(service_, "/v1/responses", R"({"input": "x", "max_output_tokens": 0})");
  ExpectError(zero, 400, "invalid_value", "max_output_tokens");
  EXPECT_THAT(zero.body,
              AllOf(HasSubstr("'max_output_tokens' must be"), Not(HasSubstr("max_tokens"))));
  ExpectError(Post(service_, "/v1/responses",
                   R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "n",
                       "schema": {"type": "integer", "not": {"const": 2}}}}})"),
              400, "invalid_value", "text.format.schema");
  ExpectError(Post(service_, "/v1/responses",
                   R"({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]})"),
              400, "invalid_value", "input[0].content[0].type");
}

// Metrics labels: fixed routes as themselves, parameterised ones as templates, anything else
// (scanners, typos) as "none".
TEST(RouteTemplateTest, GroupsPathsIntoAFixedSetOfLabels) {
  EXPECT_EQ(RouteTemplate("/v1/chat/completions"), "/v1/chat/completions");
  EXPECT_EQ(RouteTemplate("/metrics"), "/metrics");
  EXPECT_EQ(RouteTemplate("/v1/models"), "/v1/models");
  EXPECT_EQ(RouteTemplate("/v1/models/strata-demo"), "/v1/models/{model}");
  EXPECT_EQ(RouteTemplate("/v1/responses/resp-1"), "/v1/responses/{response_id}");
  EXPECT_EQ(RouteTemplate("/v1/responses/resp-1/cancel"), "/v1/responses/{response_id}/cancel");
  EXPECT_EQ(RouteTemplate("/v1/responses/"), "none");
  EXPECT_EQ(RouteTemplate("/v1/embeddings"), "none");
  EXPECT_EQ(RouteTemplate("/wp-login.php"), "none");
}

}  // namespace
}  // namespace strata::frontend
