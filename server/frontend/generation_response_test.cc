// GenerationResponse over streams the test feeds directly: error events after the stream
// started, usage accounting across choices and prompts, and the per-choice hooks.
#include "server/frontend/generation_response.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "server/frontend/testing/scripted_executor.h"

namespace strata::frontend {
namespace {

using ::testing::ElementsAre;

server::StreamEvent Event(std::vector<int32_t> ids, int64_t output, int64_t cached = 0,
                          std::optional<server::FinishReason> finish = std::nullopt) {
  server::StreamEvent e;
  e.token_ids = std::move(ids);
  e.logprobs.assign(e.token_ids.size(), -0.1f);
  e.top_logprobs.assign(e.token_ids.size(), {});
  e.num_prompt_tokens = 10;
  e.num_cached_tokens = cached;
  e.num_output_tokens = output;
  e.finish = finish;
  return e;
}

struct Harness {
  testing::Fixture fixture;
  std::vector<std::shared_ptr<server::RequestStream>> streams;
  std::vector<server::RequestTimings> finished;
  std::shared_ptr<std::atomic<int64_t>> in_flight = std::make_shared<std::atomic<int64_t>>(0);

  std::unique_ptr<GenerationResponse> Make(ApiKind kind, bool stream, int num_choices,
                                           int num_groups = 1, bool return_progress = false) {
    GenerationSpec spec;
    spec.kind = kind;
    spec.meta = {"id-1", 123, "m"};
    spec.stream = stream;
    spec.return_progress = return_progress;
    spec.include_usage = true;
    for (int g = 0; g < num_groups; ++g) spec.group_prompt_tokens.push_back(10);
    for (int i = 0; i < num_choices; ++i) {
      ChoiceSpec c;
      c.index = i;
      c.group = i % num_groups;
      c.request.request_id = "r-" + std::to_string(i);
      spec.choices.push_back(std::move(c));
      streams.push_back(std::make_shared<server::RequestStream>("r-" + std::to_string(i)));
    }
    ResponseHooks hooks{in_flight,
                        [this](const server::RequestTimings& t) { finished.push_back(t); }};
    auto response = GenerationResponse::FromStreams(fixture.served(), std::move(spec),
                                                    std::move(hooks), streams);
    response->Start([] {});
    return response;
  }
};

std::vector<std::string> RawSseEvents(const std::string& body) {
  std::vector<std::string> out;
  for (absl::string_view e : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    out.emplace_back(e);
  }
  return out;
}

TEST(GenerationResponseTest, ErrorAfterTheStreamStartedIsADataEventThenDone) {
  Harness h;
  auto response = h.Make(ApiKind::kChat, /*stream=*/true, 1);
  http::HttpResponse out;
  h.streams[0]->Push(Event(h.fixture.Ids("hello"), 1));
  EXPECT_FALSE(response->Poll(&out));
  server::StreamEvent failed;
  failed.error = absl::InternalError("the executor failed");
  h.streams[0]->Push(failed);
  EXPECT_TRUE(response->Poll(&out));
  std::vector<std::string> events = RawSseEvents(out.body);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_NE(events[0].find("\"role\":\"assistant\""), std::string::npos);
  EXPECT_NE(events[1].find("\"content\":\"hello\""), std::string::npos);
  const Json error = Json::parse(events[2].substr(6))["error"];
  EXPECT_EQ(error["type"], "server_error");
  EXPECT_EQ(error["code"], "internal_error");
  EXPECT_TRUE(error["param"].is_null());
  EXPECT_EQ(error["message"], "the executor failed");
  EXPECT_EQ(events[3], "data: [DONE]");
  ASSERT_EQ(h.finished.size(), 1u);
  EXPECT_EQ(h.finished[0].finished_reason, "error");
}

TEST(GenerationResponseTest, NonStreamedErrorIsTheErrorStatus) {
  Harness h;
  auto response = h.Make(ApiKind::kCompletion, /*stream=*/false, 2);
  server::StreamEvent failed;
  failed.error = absl::ResourceExhaustedError("preempted too often");
  h.streams[1]->Push(failed);
  http::HttpResponse out;
  EXPECT_TRUE(response->Poll(&out));
  EXPECT_EQ(out.status, 429);
  EXPECT_EQ(Json::parse(out.body)["error"]["code"], "rate_limit_exceeded");
}

TEST(GenerationResponseTest, UsageCountsEachPromptOnceAndEveryChoicesTokens) {
  Harness h;
  auto response = h.Make(ApiKind::kCompletion, /*stream=*/false, 4, /*num_groups=*/2);
  EXPECT_EQ(h.in_flight->load(), 1);
  const std::vector<int32_t> ids = h.fixture.Ids("hello world");
  for (int i = 0; i < 4; ++i) {
    const int64_t n = 1 + i;  // choice i produces i + 1 tokens
    std::vector<int32_t> out(ids.begin(), ids.begin() + std::min<size_t>(n, ids.size()));
    h.streams[i]->Push(Event(out, n, /*cached=*/i < 2 ? 8 : 0, server::FinishReason::kLength));
  }
  http::HttpResponse out;
  ASSERT_TRUE(response->Poll(&out));
  const Json j = Json::parse(out.body);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 20);  // two prompts of 10
  EXPECT_EQ(j["usage"]["completion_tokens"], 1 + 2 + 3 + 4);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 16);  // 8 per prompt
  std::vector<std::string> texts;
  for (const Json& c : j["choices"]) texts.push_back(c["text"]);
  EXPECT_THAT(texts, ElementsAre("hello", "hello w", "hello wor", "hello world"));
  EXPECT_EQ(h.finished.size(), 4u);
  response.reset();
  EXPECT_EQ(h.in_flight->load(), 0);
}

TEST(GenerationResponseTest, CancelReportsAbortedChoicesOnce) {
  Harness h;
  auto response = h.Make(ApiKind::kChat, /*stream=*/true, 2);
  h.streams[0]->Push(Event({'a'}, 1, 0, server::FinishReason::kLength));
  http::HttpResponse out;
  EXPECT_FALSE(response->Poll(&out));
  response->Cancel();
  response.reset();
  ASSERT_EQ(h.finished.size(), 2u);
  EXPECT_EQ(h.finished[0].finished_reason, "length");
  EXPECT_EQ(h.finished[1].finished_reason, "abort");
}

// Every engine step is a chunk, as vLLM streams, even when its token shows no text yet (here the
// first bytes of a three-byte character): clients and load generators see each step's timing.
TEST(GenerationResponseTest, StreamSendsAChunkPerStepEvenWhenItsTokenShowsNothingYet) {
  for (ApiKind kind : {ApiKind::kCompletion, ApiKind::kChat}) {
    Harness h;
    auto response = h.Make(kind, /*stream=*/true, 1);
    const std::vector<int32_t> ids = h.fixture.Ids("\xe2\x82\xac");  // U+20AC, one id per byte
    ASSERT_EQ(ids.size(), 3u);
    std::vector<std::string> texts;
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool last = i + 1 == ids.size();
      h.streams[0]->Push(Event({ids[i]}, static_cast<int64_t>(i + 1), 0,
                               last ? std::optional(server::FinishReason::kLength) : std::nullopt));
      http::HttpResponse out;
      EXPECT_EQ(response->Poll(&out), last);
      for (const std::string& e : RawSseEvents(out.body)) {
        if (e == "data: [DONE]") continue;
        const Json chunk = Json::parse(e.substr(6));
        if (chunk["choices"].empty()) continue;  // usage
        const Json& choice = chunk["choices"][0];
        if (kind == ApiKind::kCompletion) {
          texts.push_back(choice["text"].get<std::string>() + "|" +
                          (choice["finish_reason"].is_null() ? "" : "end"));
        } else if (choice["delta"].contains("role")) {
          continue;  // the opening chunk
        } else if (choice["delta"].contains("content")) {
          texts.push_back(choice["delta"]["content"].get<std::string>());
        } else if (!choice["finish_reason"].is_null()) {
          texts.push_back("end");
        }
      }
    }
    if (kind == ApiKind::kCompletion) {
      EXPECT_THAT(texts, ElementsAre("|", "|", "\xe2\x82\xac|", "|end"));
    } else {
      EXPECT_THAT(texts, ElementsAre("", "", "\xe2\x82\xac", "end"));
    }
  }
}

// A choice's opening chunk (chat's role) comes with its first token, not before it: vLLM's
// benchmark and similar clients time the first chunk as the time to first token.
TEST(GenerationResponseTest, ChatRoleChunkComesWithTheFirstToken) {
  Harness h;
  auto response = h.Make(ApiKind::kChat, /*stream=*/true, 1);
  http::HttpResponse out;
  EXPECT_FALSE(response->Poll(&out));
  EXPECT_EQ(out.body, "");  // prefilling: nothing to show yet
  h.streams[0]->Push(Event(h.fixture.Ids("hi"), 1));
  EXPECT_FALSE(response->Poll(&out));
  const std::vector<std::string> events = RawSseEvents(out.body);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_NE(events[0].find("\"role\":\"assistant\""), std::string::npos);
  EXPECT_NE(events[1].find("\"content\":\"hi\""), std::string::npos);
}

server::StreamEvent ProgressEvent(int64_t processed) {
  server::StreamEvent e;
  e.num_prompt_tokens = 10;
  e.progress =
      server::PrefillProgress{.total = 10, .cached = 2, .processed = processed, .time_ms = 1.5};
  return e;
}

TEST(GenerationResponseTest, ProgressEventsAreLlamaCppPromptProgressChunks) {
  for (ApiKind kind : {ApiKind::kChat, ApiKind::kCompletion}) {
    Harness h;
    auto response = h.Make(kind, /*stream=*/true, 1, 1, /*return_progress=*/true);
    http::HttpResponse out;
    h.streams[0]->Push(ProgressEvent(6));
    h.streams[0]->Push(ProgressEvent(10));
    EXPECT_FALSE(response->Poll(&out));
    std::vector<std::string> events = RawSseEvents(out.body);
    ASSERT_EQ(events.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_TRUE(absl::StartsWith(events[i], "data: ")) << events[i];
      const Json chunk = Json::parse(events[i].substr(6));
      EXPECT_EQ(
          chunk["prompt_progress"],
          (Json{{"total", 10}, {"cache", 2}, {"processed", i == 0 ? 6 : 10}, {"time_ms", 1.5}}));
      EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
      if (kind == ApiKind::kChat) {
        EXPECT_EQ(chunk["choices"][0]["delta"],
                  (Json{{"role", "assistant"}, {"content", nullptr}}));
      } else {
        EXPECT_EQ(chunk["choices"][0]["text"], "");
      }
    }
    // The tokens follow as usual; progress events count no token and no time to first token.
    out.body.clear();
    h.streams[0]->Push(Event(h.fixture.Ids("hi"), 1, 2, server::FinishReason::kLength));
    EXPECT_TRUE(response->Poll(&out));
    EXPECT_EQ(out.body.find("prompt_progress"), std::string::npos);
    EXPECT_NE(out.body.find("hi"), std::string::npos);
  }
}

TEST(GenerationResponseTest, ProgressEventsAreDroppedWithoutReturnProgress) {
  Harness h;
  auto response = h.Make(ApiKind::kCompletion, /*stream=*/true, 1);
  http::HttpResponse out;
  h.streams[0]->Push(ProgressEvent(6));
  EXPECT_FALSE(response->Poll(&out));
  EXPECT_EQ(out.body, "");  // keep-alives only, as before
}

}  // namespace
}  // namespace strata::frontend
