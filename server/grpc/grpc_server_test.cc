// End-to-end tests of the gRPC API against a real server: the embedded demo model (random
// weights, trained tokenizer) in a ModelRuntime with its engine loop, served by GrpcServer on a
// free loopback port, driven by generated strata.v1 stubs over a real channel.
#include "server/grpc/grpc_server.h"

#include <gmock/gmock.h>
#include <google/protobuf/empty.pb.h>
#include <google/protobuf/wrappers.pb.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/support/sync_stream.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <regex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/media/test_image_encoders.h"
#include "server/cli/serve_runtime.h"
#include "server/frontend/openai_request.h"
#include "strata/v1/control.grpc.pb.h"
#include "strata/v1/inference.grpc.pb.h"

namespace strata::rpc {
namespace {

using v1::GenerateRequest;
using v1::GenerateResponse;

// Everything one Generate call returned.
struct Outcome {
  grpc::Status status;
  std::vector<int32_t> ids;  // choice 0
  std::string text;
  std::map<int, std::string> texts;  // every choice's, by index
  std::vector<v1::Complete> completes;
  int num_chunks = 0;
  // Choice 0's prompt scores, and the chunk (0-based) that carried them.
  std::vector<v1::TokenLogprob> prompt_logprobs;
  int prompt_logprobs_chunk = -1;
  std::vector<v1::Progress> progress;  // with return_progress
  int progress_after_chunk = 0;        // Progress messages read after the first Chunk
};

class GrpcServerTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::getenv("STRATA_CACHE_DIR") == nullptr) {
      setenv("STRATA_CACHE_DIR", (testing::TempDir() + "strata_grpc_test_cache").c_str(), 1);
    }
    cli::ServeOptions options;
    options.kv_cache_memory_bytes = int64_t{64} << 20;
    options.engine.max_queued_requests = 80;
    auto runtime = cli::ModelRuntime::Load(options);
    ASSERT_TRUE(runtime.ok()) << runtime.status();
    runtime_ = runtime->release();
    GrpcServerOptions grpc_options;
    grpc_options.host = "127.0.0.1";
    grpc_options.port = 0;
    grpc_options.on_choice_finished = [](const server::RequestTimings& t) {
      std::lock_guard<std::mutex> lock(finished_mu_);
      finished_.push_back(t);
    };
    auto server = GrpcServer::Start(grpc_options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    server_->SetModel(&runtime_->served());
  }
  static void TearDownTestSuite() {
    delete server_;
    delete runtime_;
  }

  static std::shared_ptr<grpc::Channel> Channel(int port) {
    return grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                               grpc::InsecureChannelCredentials());
  }
  std::unique_ptr<v1::Inference::Stub> Inference(int port = server_->port()) {
    return v1::Inference::NewStub(Channel(port));
  }
  std::unique_ptr<v1::Control::Stub> Control() {
    return v1::Control::NewStub(Channel(server_->port()));
  }

  static GenerateRequest Request(std::vector<int32_t> prompt, int64_t max_tokens) {
    GenerateRequest r;
    r.mutable_token_ids()->mutable_ids()->Add(prompt.begin(), prompt.end());
    r.set_max_tokens(max_tokens);
    r.set_ignore_eos(true);
    return r;
  }

  // Reads the whole stream; `on_chunk(i)` runs after the i-th chunk (0-based).
  Outcome Run(const GenerateRequest& request, grpc::ClientContext* context,
              const std::function<void(int)>& on_chunk = nullptr, int port = 0) {
    auto stub = Inference(port == 0 ? server_->port() : port);
    auto reader = stub->Generate(context, request);
    Outcome out;
    GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_chunk()) {
        out.texts[response.chunk().index()] += response.chunk().text();
        if (response.chunk().index() == 0) {
          if (response.chunk().prompt_logprobs_size() > 0) {
            EXPECT_EQ(out.prompt_logprobs_chunk, -1) << "prompt scores sent twice";
            out.prompt_logprobs_chunk = out.num_chunks;
            out.prompt_logprobs.assign(response.chunk().prompt_logprobs().begin(),
                                       response.chunk().prompt_logprobs().end());
          }
          out.ids.insert(out.ids.end(), response.chunk().token_ids().begin(),
                         response.chunk().token_ids().end());
          out.text += response.chunk().text();
        }
        if (on_chunk) on_chunk(out.num_chunks);
        ++out.num_chunks;
      } else if (response.has_progress()) {
        out.progress.push_back(response.progress());
        if (out.num_chunks > 0) ++out.progress_after_chunk;
      } else {
        out.completes.push_back(response.complete());
      }
    }
    out.status = reader->Finish();
    return out;
  }
  Outcome Run(const GenerateRequest& request) {
    grpc::ClientContext context;
    return Run(request, &context);
  }

  v1::Loads Loads() {
    grpc::ClientContext context;
    v1::Loads loads;
    EXPECT_TRUE(Control()->GetLoads(&context, v1::GetLoadsRequest(), &loads).ok());
    return loads;
  }
  // Waits until the engine has aborted `min_aborted_total` requests in all and holds nothing
  // (every page and slot free); the last loads. (Loads are a snapshot of the latest step.)
  v1::Loads WaitForEmptyCache(int64_t min_aborted_total = 0) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    v1::Loads loads = Loads();
    while (absl::Now() < deadline &&
           !(loads.num_aborted_total() >= min_aborted_total && loads.num_unfinished() == 0 &&
             loads.num_running() == 0 && loads.num_free_blocks() == loads.num_blocks() &&
             loads.num_free_slots() == loads.num_slots())) {
      absl::SleepFor(absl::Milliseconds(10));
      loads = Loads();
    }
    return loads;
  }
  static void ExpectEmpty(const v1::Loads& loads) {
    EXPECT_EQ(loads.num_unfinished(), 0);
    EXPECT_EQ(loads.num_running(), 0);
    EXPECT_EQ(loads.num_free_blocks(), loads.num_blocks());
    EXPECT_EQ(loads.num_free_slots(), loads.num_slots());
  }
  int64_t MaxModelLen() const { return runtime_->served().max_model_len; }

  // grpc.health.v1.Health/Check: HealthCheckRequest{service=""} is an empty message and
  // HealthCheckResponse{status} has the wire shape of Int32Value (field 1, varint).
  static int HealthStatus(int port) {
    auto channel = Channel(port);
    grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                     grpc::internal::RpcMethod::NORMAL_RPC);
    grpc::ClientContext context;
    google::protobuf::Empty request;
    google::protobuf::Int32Value response;
    grpc::Status status =
        grpc::internal::BlockingUnaryCall(channel.get(), method, &context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.value();  // 1 SERVING, 2 NOT_SERVING
  }

  // The choices whose engine request id starts with `call_id`, as reported so far.
  static std::vector<server::RequestTimings> FinishedChoices(const std::string& call_id) {
    std::lock_guard<std::mutex> lock(finished_mu_);
    std::vector<server::RequestTimings> out;
    for (const server::RequestTimings& t : finished_) {
      if (t.request_id.rfind(call_id, 0) == 0) out.push_back(t);
    }
    return out;
  }

  static cli::ModelRuntime* runtime_;
  static GrpcServer* server_;
  static std::mutex finished_mu_;
  static std::vector<server::RequestTimings> finished_;  // GrpcServerOptions::on_choice_finished
};

std::mutex GrpcServerTest::finished_mu_;
std::vector<server::RequestTimings> GrpcServerTest::finished_;

cli::ModelRuntime* GrpcServerTest::runtime_ = nullptr;
GrpcServer* GrpcServerTest::server_ = nullptr;

constexpr int kServing = 1;
constexpr int kNotServing = 2;

TEST_F(GrpcServerTest, StreamsChunksThenCompleteWithUsageAndTimings) {
  GenerateRequest request = Request({5, 6, 7}, 12);
  request.mutable_sampling()->set_temperature(0.0f);
  grpc::ClientContext context;
  Outcome out = Run(request, &context);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  // The generated request id (for Control.Abort) comes with the response headers.
  auto id = context.GetServerInitialMetadata().find("strata-request-id");
  ASSERT_NE(id, context.GetServerInitialMetadata().end());
  EXPECT_EQ(std::string(id->second.data(), id->second.size()).rfind("grpc-", 0), 0u);
  EXPECT_EQ(out.ids.size(), 12u);
  EXPECT_EQ(out.num_chunks, 12);  // one decode step, one token, one chunk
  ASSERT_EQ(out.completes.size(), 1u);
  const v1::Complete& done = out.completes[0];
  EXPECT_EQ(done.finish_reason(), "length");
  EXPECT_EQ(done.usage().prompt_tokens(), 3);
  EXPECT_EQ(done.usage().completion_tokens(), 12);
  // Times since the request arrived: the first token after the queue, the 12th a step later.
  EXPECT_GT(done.timings().first_token_ms(), done.timings().queued_ms());
  EXPECT_GT(done.timings().last_token_ms(), done.timings().first_token_ms());
  for (int32_t id : out.ids) EXPECT_LT(id, runtime_->served().vocab_size);
}

TEST_F(GrpcServerTest, SameSeedGivesTheSameTokensAsTheEngineDirectly) {
  GenerateRequest request = Request({11, 12, 13, 14}, 10);
  request.mutable_sampling()->set_temperature(0.9f);
  request.mutable_sampling()->set_seed(1234);
  Outcome a = Run(request);
  Outcome b = Run(request);
  ASSERT_TRUE(a.status.ok());
  EXPECT_EQ(a.ids, b.ids);
  // The same request straight into the engine loop (choice 0 keeps the seed).
  scheduler::Request direct;
  direct.request_id = "direct-seed-check";
  direct.prompt = {11, 12, 13, 14};
  direct.max_tokens = 10;
  direct.ignore_eos = true;
  direct.sampling.temperature = 0.9f;
  direct.sampling.seed = 1234;
  auto stream = runtime_->engine().Submit(direct);
  ASSERT_TRUE(stream.ok());
  std::vector<int32_t> ids;
  for (;;) {
    std::optional<server::StreamEvent> event = (*stream)->Next(absl::Seconds(10));
    ASSERT_TRUE(event.has_value());
    ids.insert(ids.end(), event->token_ids.begin(), event->token_ids.end());
    if (event->terminal()) break;
  }
  EXPECT_EQ(a.ids, ids);
}

TEST_F(GrpcServerTest, TextPromptStreamsTextDeltasThatDetokenizeTheIds) {
  GenerateRequest request;
  request.set_text("hello world");
  request.set_max_tokens(8);
  request.set_ignore_eos(true);
  request.set_skip_special_tokens(false);
  Outcome out = Run(request);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  grpc::ClientContext context;
  v1::DetokenizeRequest detok;
  detok.mutable_token_ids()->Add(out.ids.begin(), out.ids.end());
  v1::DetokenizeResponse text;
  ASSERT_TRUE(Inference()->Detokenize(&context, detok, &text).ok());
  EXPECT_EQ(out.text, text.text());
}

TEST_F(GrpcServerTest, PromptLogprobsComeWithTheFirstChunk) {
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10, 11};
  GenerateRequest request = Request(prompt, 4);
  request.set_prompt_logprobs(2);
  request.mutable_sampling()->set_temperature(0.0f);
  Outcome out = Run(request);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.prompt_logprobs_chunk, 0);
  ASSERT_EQ(out.prompt_logprobs.size(), prompt.size() - 1);
  for (size_t i = 0; i < out.prompt_logprobs.size(); ++i) {
    const v1::TokenLogprob& lp = out.prompt_logprobs[i];
    EXPECT_EQ(lp.token_id(), prompt[i + 1]);
    EXPECT_LE(lp.logprob(), 0.0f);
    EXPECT_GE(lp.rank(), 1);
    ASSERT_EQ(lp.top_size(), 2);
    EXPECT_GE(lp.top(0).logprob(), lp.top(1).logprob());
    EXPECT_GE(lp.top(0).logprob(), lp.logprob());
    EXPECT_EQ(lp.rank() == 1, lp.top(0).token_id() == lp.token_id()) << i;
  }
  // Greedy: the same output as without scoring.
  request.clear_prompt_logprobs();
  Outcome plain = Run(request);
  EXPECT_EQ(plain.ids, out.ids);
  EXPECT_TRUE(plain.prompt_logprobs.empty());
  request.set_prompt_logprobs(21);
  Outcome bad = Run(request);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.status.error_message().find("prompt_logprobs"), std::string::npos)
      << bad.status.error_message();
}

TEST_F(GrpcServerTest, AllowedTokenIdsAndBadWordsFilterTheOutput) {
  GenerateRequest request = Request({5, 6, 7}, 16);
  request.mutable_sampling()->set_temperature(1.0f);
  request.mutable_sampling()->set_seed(3);
  for (int32_t id : {40, 41, 42}) request.add_allowed_token_ids(id);
  request.add_bad_words("x");  // tokenizes to ids outside the allowed three anyway
  Outcome out = Run(request);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  ASSERT_EQ(out.ids.size(), 16u);
  for (int32_t id : out.ids) EXPECT_TRUE(id >= 40 && id <= 42) << id;
  request.add_allowed_token_ids(runtime_->served().vocab_size);
  Outcome bad = Run(request);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(GrpcServerTest, StopTokenIdEndsTheChoiceAndIsReported) {
  GenerateRequest greedy = Request({21, 22, 23}, 12);
  greedy.mutable_sampling()->set_temperature(0.0f);
  Outcome full = Run(greedy);
  ASSERT_EQ(full.ids.size(), 12u);
  const int32_t stop_id = full.ids[5];
  const size_t first = std::find(full.ids.begin(), full.ids.end(), stop_id) - full.ids.begin();
  GenerateRequest request = greedy;
  request.add_stop_token_ids(stop_id);
  Outcome out = Run(request);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.ids, std::vector<int32_t>(full.ids.begin(), full.ids.begin() + first + 1));
  ASSERT_EQ(out.completes.size(), 1u);
  EXPECT_EQ(out.completes[0].finish_reason(), "stop");
  ASSERT_TRUE(out.completes[0].has_matched_stop_token_id());
  EXPECT_EQ(out.completes[0].matched_stop_token_id(), stop_id);
  EXPECT_FALSE(out.completes[0].has_matched_stop_str());
}

TEST_F(GrpcServerTest, StopStringEndsTheTextAndIsReported) {
  GenerateRequest greedy;
  greedy.set_text("once upon a time");
  greedy.set_max_tokens(24);
  greedy.set_ignore_eos(true);
  greedy.mutable_sampling()->set_temperature(0.0f);
  Outcome full = Run(greedy);
  ASSERT_TRUE(full.status.ok());
  ASSERT_GE(full.text.size(), 8u);
  // One whole UTF-8 character from the middle of the text.
  size_t at = full.text.size() / 2;
  while (at < full.text.size() && (static_cast<uint8_t>(full.text[at]) & 0xC0) == 0x80) ++at;
  ASSERT_LT(at, full.text.size());
  const uint8_t lead = static_cast<uint8_t>(full.text[at]);
  const size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  const std::string stop = full.text.substr(at, length);
  GenerateRequest request = greedy;
  request.add_stop(stop);
  Outcome out = Run(request);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.text, full.text.substr(0, full.text.find(stop)));
  ASSERT_EQ(out.completes.size(), 1u);
  EXPECT_EQ(out.completes[0].finish_reason(), "stop");
  EXPECT_EQ(out.completes[0].matched_stop_str(), stop);
  ExpectEmpty(WaitForEmptyCache());
}

TEST_F(GrpcServerTest, TokenizeThenDetokenizeRoundTrips) {
  grpc::ClientContext c1;
  v1::TokenizeRequest request;
  request.set_text("The quick brown fox");
  request.set_add_special_tokens(false);
  request.set_return_token_strs(true);
  v1::TokenizeResponse ids;
  ASSERT_TRUE(Inference()->Tokenize(&c1, request, &ids).ok());
  ASSERT_GT(ids.token_ids_size(), 0);
  EXPECT_EQ(ids.token_strs_size(), ids.token_ids_size());
  EXPECT_EQ(ids.max_model_len(), MaxModelLen());
  grpc::ClientContext c2;
  v1::DetokenizeRequest back;
  *back.mutable_token_ids() = ids.token_ids();
  v1::DetokenizeResponse text;
  ASSERT_TRUE(Inference()->Detokenize(&c2, back, &text).ok());
  EXPECT_EQ(text.text(), "The quick brown fox");
}

// strata serve --skip-tokenizer-init: token ids in, token ids out; text is INVALID_ARGUMENT
// naming the flag.
TEST_F(GrpcServerTest, WithoutATokenizerTokenIdsGoInAndOut) {
  const std::unique_ptr<engine::Tokenizer> none = engine::Tokenizer::WithoutTokens();
  frontend::ServedModel model = runtime_->served();
  model.tokenizer = none.get();
  model.skip_tokenizer_init = true;
  GrpcServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  auto server = GrpcServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetModel(&model);
  const int port = (*server)->port();
  grpc::ClientContext ids_context;
  const Outcome ids = Run(Request({5, 6, 7}, 4), &ids_context, nullptr, port);
  ASSERT_TRUE(ids.status.ok()) << ids.status.error_message();
  EXPECT_EQ(ids.ids.size(), 4u);
  EXPECT_EQ(ids.text, "");
  GenerateRequest text;
  text.set_text("hello world");
  text.set_max_tokens(4);
  grpc::ClientContext text_context;
  const Outcome refused = Run(text, &text_context, nullptr, port);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.status.error_message().find("--skip-tokenizer-init"), std::string::npos)
      << refused.status.error_message();
  grpc::ClientContext c1;
  v1::TokenizeRequest tokenize;
  tokenize.set_text("hello");
  v1::TokenizeResponse tokenized;
  EXPECT_EQ(Inference(port)->Tokenize(&c1, tokenize, &tokenized).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext c2;
  v1::DetokenizeRequest detokenize;
  detokenize.mutable_token_ids()->Add(5);
  v1::DetokenizeResponse detokenized;
  const grpc::Status status = Inference(port)->Detokenize(&c2, detokenize, &detokenized);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("--skip-tokenizer-init"), std::string::npos);
}

TEST_F(GrpcServerTest, InvalidArgumentCarriesTheRestMessage) {
  GenerateRequest request = Request({1, 2}, 4);
  request.mutable_sampling()->set_temperature(5.0f);
  Outcome out = Run(request);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // The REST parser's message for the same body.
  frontend::RequestLimits limits;
  limits.vocab_size = runtime_->served().vocab_size;
  auto rest = frontend::ParseCompletionRequest(
      frontend::Json{{"prompt", {1, 2}}, {"temperature", 5.0}, {"max_tokens", 4}}, limits);
  ASSERT_FALSE(rest.ok());
  EXPECT_EQ(out.status.error_message(), std::string(rest.status().message()));
  EXPECT_NE(out.status.error_message().find("temperature"), std::string::npos);
}

TEST_F(GrpcServerTest, JsonSchemaConstrainsEveryChoice) {
  GenerateRequest request = Request({5, 6, 7}, 200);
  request.set_ignore_eos(false);
  request.set_n(3);
  request.mutable_sampling()->set_seed(4);
  request.set_json_schema(R"({"type":"object","properties":{
      "size":{"enum":["S","M","L"]},"count":{"type":"integer"},"hot":{"type":"boolean"}},
      "required":["size","count","hot"],"additionalProperties":false})");
  const Outcome out = Run(request);
  ASSERT_TRUE(out.status.ok());
  EXPECT_EQ(out.completes.size(), 3u);
  ASSERT_EQ(out.texts.size(), 3u);
  for (const auto& [index, t] : out.texts) {
    ASSERT_TRUE(nlohmann::json::accept(t)) << index << ": " << t;
    const nlohmann::json v = nlohmann::json::parse(t);
    ASSERT_TRUE(v.is_object()) << t;
    EXPECT_EQ(v.size(), 3u) << t;
    EXPECT_TRUE(v["size"] == "S" || v["size"] == "M" || v["size"] == "L") << t;
    EXPECT_TRUE(v["count"].is_number_integer()) << t;
    EXPECT_TRUE(v["hot"].is_boolean()) << t;
  }
  GenerateRequest bad = Request({5, 6}, 4);
  bad.set_json_schema("{\"type\": ");
  Outcome unparsable = Run(bad);
  EXPECT_EQ(unparsable.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(unparsable.status.error_message().find("json_schema is not valid JSON"),
            std::string::npos);
  bad.set_json_schema(R"({"type":"integer","not":{"const":2}})");
  Outcome unsupported = Run(bad);
  EXPECT_EQ(unsupported.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(unsupported.status.error_message().find("'not' is not supported"), std::string::npos);
}

TEST_F(GrpcServerTest, RegexConstrainsTheWholeText) {
  GenerateRequest request = Request({5, 6, 7}, 40);
  request.set_ignore_eos(false);
  request.set_n(2);
  request.mutable_sampling()->set_seed(8);
  request.set_regex("(red|green)-[0-9]{2}");
  const Outcome out = Run(request);
  ASSERT_TRUE(out.status.ok());
  ASSERT_EQ(out.texts.size(), 2u);
  for (const auto& [index, t] : out.texts) {
    EXPECT_TRUE(std::regex_match(t, std::regex("(red|green)-[0-9]{2}"))) << index << ": " << t;
  }
  GenerateRequest both = Request({5, 6}, 4);
  both.set_regex("a");
  both.set_json_schema("{}");
  Outcome two = Run(both);
  EXPECT_EQ(two.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(two.status.error_message().find("both constrain"), std::string::npos);
  GenerateRequest lookahead = Request({5, 6}, 4);
  lookahead.set_regex("a(?=b)");
  Outcome refused = Run(lookahead);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.status.error_message().find("lookaround"), std::string::npos);
}

TEST_F(GrpcServerTest, GrammarConstrainsTheWholeText) {
  GenerateRequest request = Request({5, 6, 7}, 60);
  request.set_ignore_eos(false);
  request.set_n(3);
  request.mutable_sampling()->set_seed(9);
  request.set_grammar(R"g(root ::= item ("," item){0,3}
item ::= "(" [a-c]{1,3} ")" | [0-9])g");
  const Outcome out = Run(request);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  ASSERT_EQ(out.texts.size(), 3u);
  const std::regex whole(R"((\([a-c]{1,3}\)|[0-9])(,(\([a-c]{1,3}\)|[0-9])){0,3})");
  for (const auto& [index, t] : out.texts) {
    EXPECT_TRUE(std::regex_match(t, whole)) << index << ": " << t;
  }
  GenerateRequest undefined = Request({5, 6}, 4);
  undefined.set_grammar("root ::= item");
  Outcome refused = Run(undefined);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.status.error_message().find("rule 'item' is used but not defined"),
            std::string::npos)
      << refused.status.error_message();
  GenerateRequest both = Request({5, 6}, 4);
  both.set_grammar("root ::= \"a\"");
  both.set_regex("a");
  EXPECT_EQ(Run(both).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(GrpcServerTest, InvalidPromptsAreInvalidArgument) {
  Outcome empty = Run(Request({}, 4));
  EXPECT_EQ(empty.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  Outcome out_of_vocab = Run(Request({1, static_cast<int32_t>(runtime_->served().vocab_size)}, 4));
  EXPECT_EQ(out_of_vocab.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  Outcome too_long = Run(Request({1, 2, 3}, MaxModelLen()));
  EXPECT_EQ(too_long.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  Outcome no_tokens = Run(Request({1, 2}, 0));  // gRPC has no echo: its message must not offer it
  EXPECT_EQ(no_tokens.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(no_tokens.status.error_message(), "'max_tokens' must be at least 1; got 0");
  GenerateRequest unknown_model = Request({1, 2}, 4);
  unknown_model.set_model("no-such-model");
  EXPECT_EQ(Run(unknown_model).status.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcServerTest, FullQueueIsResourceExhausted) {
  // Fill the engine's queue (80) directly with long requests, then ask over gRPC.
  const int64_t aborted_before = Loads().num_aborted_total();
  std::vector<std::string> ids;
  for (int i = 0; i < 80; ++i) {
    scheduler::Request r;
    r.request_id = absl::StrCat("filler-", i);
    r.prompt = {1, 2, 3};
    r.max_tokens = MaxModelLen() - 3;
    r.ignore_eos = true;
    if (runtime_->engine().Submit(r).ok()) ids.push_back(r.request_id);
  }
  ASSERT_EQ(ids.size(), 80u);
  Outcome out = Run(Request({1, 2}, 4));
  for (const std::string& id : ids) runtime_->engine().Cancel(id);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ExpectEmpty(WaitForEmptyCache(aborted_before + 80));
}

// Every choice is reported to on_choice_finished once (serve records the request metrics from
// it, as for REST): finished ones with their reason and timings, cancelled ones as "abort".
TEST_F(GrpcServerTest, EachChoiceReportsItsTimingsOnceAsRestDoes) {
  GenerateRequest request = Request({5, 6, 7, 8}, 6);
  request.set_request_id("timed-call");
  request.set_n(2);
  Outcome out = Run(request);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  const std::vector<server::RequestTimings> done = FinishedChoices("timed-call");
  ASSERT_EQ(done.size(), 2u);
  for (const server::RequestTimings& t : done) {
    EXPECT_EQ(t.finished_reason, "length");
    EXPECT_EQ(t.num_prompt_tokens, 4);
    EXPECT_EQ(t.num_generation_tokens, 6);
    ASSERT_TRUE(t.ttft_seconds.has_value());
    ASSERT_TRUE(t.queue_seconds.has_value());
    ASSERT_TRUE(t.prefill_seconds.has_value());
    ASSERT_TRUE(t.decode_seconds.has_value());
    EXPECT_GE(*t.ttft_seconds, *t.queue_seconds);
    EXPECT_GE(t.e2e_seconds, *t.ttft_seconds + *t.decode_seconds - 1e-9);
    EXPECT_EQ(t.inter_token_seconds.size(), 5u);
  }

  GenerateRequest long_request = Request({1, 2, 3}, MaxModelLen() - 3);
  long_request.set_request_id("cancelled-call");
  const int64_t aborted_before = Loads().num_aborted_total();
  grpc::ClientContext context;
  Outcome cancelled = Run(long_request, &context, [&](int chunk) {
    if (chunk == 2) context.TryCancel();
  });
  EXPECT_EQ(cancelled.status.error_code(), grpc::StatusCode::CANCELLED);
  // The server's call notices the cancellation within its poll interval, then reports.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (FinishedChoices("cancelled-call").empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ExpectEmpty(WaitForEmptyCache(aborted_before + 1));
  const std::vector<server::RequestTimings> aborted = FinishedChoices("cancelled-call");
  ASSERT_EQ(aborted.size(), 1u);
  EXPECT_EQ(aborted[0].finished_reason, "abort");
  EXPECT_GE(aborted[0].num_generation_tokens, 3);
}

TEST_F(GrpcServerTest, ClientCancellationAbortsTheRequestAndFreesItsCache) {
  const int64_t aborted_before = Loads().num_aborted_total();
  grpc::ClientContext context;
  Outcome out = Run(Request({1, 2, 3, 4, 5}, MaxModelLen() - 5), &context, [&](int chunk) {
    if (chunk == 2) context.TryCancel();
  });
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(out.ids.size(), static_cast<size_t>(MaxModelLen() - 5));
  v1::Loads loads = WaitForEmptyCache(aborted_before + 1);
  ExpectEmpty(loads);
  EXPECT_EQ(loads.num_aborted_total(), aborted_before + 1);
}

TEST_F(GrpcServerTest, PassedDeadlineIsDeadlineExceededAndFreesTheCache) {
  const int64_t aborted_before = Loads().num_aborted_total();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(150));
  Outcome out = Run(Request({1, 2, 3}, MaxModelLen() - 3), &context, [](int) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a slow reader
  });
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  v1::Loads loads = WaitForEmptyCache(aborted_before + 1);
  ExpectEmpty(loads);
  EXPECT_EQ(loads.num_aborted_total(), aborted_before + 1);
}

TEST_F(GrpcServerTest, ControlAbortEndsTheStreamWithFinishAbort) {
  GenerateRequest request = Request({3, 4, 5}, MaxModelLen() - 3);
  request.set_request_id("abort-me");
  const int64_t aborted_before = Loads().num_aborted_total();
  grpc::ClientContext context;
  int num_aborted = -1;
  Outcome out = Run(request, &context, [&](int chunk) {
    if (chunk != 1) return;
    grpc::ClientContext c;
    v1::AbortRequest abort;
    abort.add_request_ids("abort-me");
    abort.add_request_ids("not-running");
    v1::AbortResponse response;
    EXPECT_TRUE(Control()->Abort(&c, abort, &response).ok());
    num_aborted = response.num_aborted();
  });
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(num_aborted, 1);
  ASSERT_EQ(out.completes.size(), 1u);
  EXPECT_EQ(out.completes[0].finish_reason(), "abort");
  ExpectEmpty(WaitForEmptyCache(aborted_before + 1));
}

TEST_F(GrpcServerTest, SixtyFourConcurrentStreamsAllComplete) {
  constexpr int kStreams = 64;
  std::vector<Outcome> outcomes(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      GenerateRequest request = Request({1 + i % 7, 2, 3 + i % 5}, 16);
      grpc::ClientContext context;
      outcomes[i] = Run(request, &context);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    EXPECT_TRUE(outcomes[i].status.ok()) << i << ": " << outcomes[i].status.error_message();
    EXPECT_EQ(outcomes[i].ids.size(), 16u) << i;
    ASSERT_EQ(outcomes[i].completes.size(), 1u) << i;
    EXPECT_EQ(outcomes[i].completes[0].finish_reason(), "length");
  }
  ExpectEmpty(WaitForEmptyCache());
}

TEST_F(GrpcServerTest, NChoicesEachStreamAndComplete) {
  GenerateRequest request = Request({7, 8, 9}, 5);
  request.set_n(3);
  grpc::ClientContext context;
  Outcome out = Run(request, &context);
  ASSERT_TRUE(out.status.ok());
  ASSERT_EQ(out.completes.size(), 3u);
  std::vector<bool> seen(3, false);
  for (const v1::Complete& c : out.completes) {
    ASSERT_LT(c.index(), 3u);
    seen[c.index()] = true;
    EXPECT_EQ(c.usage().completion_tokens(), 5);
  }
  EXPECT_EQ(seen, std::vector<bool>(3, true));
}

// With an API key (--api-key) every Inference and Control call needs `authorization: Bearer KEY`
// metadata, as REST's header; health stays open for probes.
TEST_F(GrpcServerTest, ApiKeyGuardsInferenceAndControl) {
  GrpcServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.api_key = "sk-test";
  auto server = GrpcServer::Start(options);
  ASSERT_TRUE(server.ok());
  (*server)->SetModel(&runtime_->served());
  const int port = (*server)->port();
  grpc::ClientContext none;
  const Outcome refused = Run(Request({1, 2}, 2), &none, nullptr, port);
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(refused.status.error_message().find("missing API key"), std::string::npos);
  grpc::ClientContext wrong;
  wrong.AddMetadata("authorization", "Bearer nope");
  EXPECT_EQ(Run(Request({1, 2}, 2), &wrong, nullptr, port).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext right;
  right.AddMetadata("authorization", "Bearer sk-test");
  EXPECT_TRUE(Run(Request({1, 2}, 2), &right, nullptr, port).status.ok());
  auto control = v1::Control::NewStub(Channel(port));
  grpc::ClientContext c1;
  v1::ResetPrefixCacheResponse reset;
  EXPECT_EQ(control->ResetPrefixCache(&c1, v1::ResetPrefixCacheRequest(), &reset).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext c2;
  c2.AddMetadata("authorization", "Bearer sk-test");
  v1::Loads loads;
  EXPECT_TRUE(control->GetLoads(&c2, v1::GetLoadsRequest(), &loads).ok());
  EXPECT_EQ(HealthStatus(port), kServing);
}

TEST_F(GrpcServerTest, HealthIsServingOnlyWhileReady) {
  GrpcServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  auto server = GrpcServer::Start(options);
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  EXPECT_EQ(HealthStatus(port), kNotServing);  // loading
  grpc::ClientContext loading_context;
  EXPECT_EQ(Run(Request({1, 2}, 2), &loading_context, nullptr, port).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  (*server)->SetModel(&runtime_->served());
  EXPECT_EQ(HealthStatus(port), kServing);
  grpc::ClientContext ok_context;
  EXPECT_TRUE(Run(Request({1, 2}, 2), &ok_context, nullptr, port).status.ok());
  (*server)->StartDraining();
  EXPECT_EQ(HealthStatus(port), kNotServing);
  grpc::ClientContext drain_context;
  EXPECT_EQ(Run(Request({1, 2}, 2), &drain_context, nullptr, port).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(GrpcServerTest, ReflectionListsTheServices) {
  // grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo with a hand-encoded
  // ServerReflectionRequest{list_services: ""} (field 7, length 0); the response's
  // ServiceResponse names are length-delimited strings inside it.
  auto channel = Channel(server_->port());
  grpc::internal::RpcMethod method("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                   grpc::internal::RpcMethod::BIDI_STREAMING);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel.get(), method, &context));
  const char request_bytes[] = {0x3a, 0x00};
  grpc::Slice slice(request_bytes, sizeof(request_bytes));
  ASSERT_TRUE(stream->Write(grpc::ByteBuffer(&slice, 1)));
  stream->WritesDone();
  grpc::ByteBuffer response;
  ASSERT_TRUE(stream->Read(&response));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  while (stream->Read(&response)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_NE(bytes.find("strata.v1.Inference"), std::string::npos);
  EXPECT_NE(bytes.find("strata.v1.Control"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
}

// Control.ResetPrefixCache forgets the cached blocks of finished requests: a 200-token prompt
// leaves 3 full 64-token blocks cached; a second reset finds nothing left.
TEST_F(GrpcServerTest, ResetPrefixCacheForgetsFinishedPrompts) {
  std::vector<int32_t> prompt(200);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(7 + i % 50);
  ASSERT_TRUE(Run(Request(prompt, 2)).status.ok());
  WaitForEmptyCache();
  grpc::ClientContext c1;
  v1::ResetPrefixCacheResponse first;
  ASSERT_TRUE(Control()->ResetPrefixCache(&c1, v1::ResetPrefixCacheRequest(), &first).ok());
  EXPECT_EQ(first.num_ranks(), 1);
  EXPECT_GE(first.num_blocks_dropped(), 3);
  grpc::ClientContext c2;
  v1::ResetPrefixCacheResponse second;
  ASSERT_TRUE(Control()->ResetPrefixCache(&c2, v1::ResetPrefixCacheRequest(), &second).ok());
  EXPECT_EQ(second.num_blocks_dropped(), 0);
  EXPECT_EQ(second.num_checkpoints_dropped(), 0);
}

TEST_F(GrpcServerTest, ModelAndServerInfo) {
  grpc::ClientContext c1;
  v1::ModelInfo model;
  ASSERT_TRUE(Control()->GetModelInfo(&c1, v1::GetModelInfoRequest(), &model).ok());
  ASSERT_GT(model.names_size(), 0);
  EXPECT_EQ(model.names(0), runtime_->served().names[0]);
  EXPECT_EQ(model.max_model_len(), MaxModelLen());
  grpc::ClientContext c2;
  v1::ServerInfo info;
  ASSERT_TRUE(Control()->GetServerInfo(&c2, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_TRUE(info.ready());
  EXPECT_FALSE(info.draining());
}

TEST_F(GrpcServerTest, ReturnProgressStreamsProgressBeforeTheFirstChunk) {
  std::vector<int32_t> prompt(5000);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(7 + i * 31 % 4000);
  GenerateRequest request = Request(prompt, 2);
  request.mutable_sampling()->set_temperature(0.0f);
  request.set_return_progress(true);
  const Outcome out = Run(request);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  // Chunks of --max-num-batched-tokens (2048): 2048, 4096, 5000.
  ASSERT_EQ(out.progress.size(), 3u);
  EXPECT_EQ(out.progress_after_chunk, 0);
  std::vector<int64_t> processed;
  for (const v1::Progress& p : out.progress) {
    EXPECT_EQ(p.index(), 0u);
    EXPECT_EQ(p.total(), 5000);
    EXPECT_EQ(p.cached(), 0);
    processed.push_back(p.processed());
  }
  EXPECT_THAT(processed, ::testing::ElementsAre(2048, 4096, 5000));
  EXPECT_EQ(out.ids.size(), 2u);
  // Without the field: no Progress message (and the same tokens, now mostly from the cache).
  request.set_return_progress(false);
  const Outcome plain = Run(request);
  ASSERT_TRUE(plain.status.ok());
  EXPECT_TRUE(plain.progress.empty());
  EXPECT_EQ(plain.ids, out.ids);
}

// A width × height RGB PNG (libpng's own encoder) whose pixels depend on `seed`.
std::string TestPng(int width, int height, int seed) {
  media::testing::PngSpec spec;
  spec.width = width;
  spec.height = height;
  spec.color_type = 2;  // PNG_COLOR_TYPE_RGB
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      spec.rows.push_back(static_cast<uint8_t>((x * 7 + seed * 60) % 256));
      spec.rows.push_back(static_cast<uint8_t>((y * 5 + seed * 90) % 256));
      spec.rows.push_back(static_cast<uint8_t>(((x ^ y) * 3 + seed * 30) % 256));
    }
  }
  return media::testing::EncodePng(spec);
}

int32_t MediaPlaceholderId(v1::Control::Stub* control) {
  grpc::ClientContext context;
  v1::ModelInfo info;
  EXPECT_TRUE(control->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
  return info.media_placeholder_token_id();
}

TEST_F(GrpcServerTest, ImageBytesExpandTheirPlaceholderToTheImageRows) {
  ASSERT_NE(runtime_->served().images, nullptr) << "the demo model has a vision tower";
  const int32_t pad = MediaPlaceholderId(Control().get());
  ASSERT_EQ(pad, runtime_->served().images->placeholder_id());
  const std::string png = TestPng(56, 42, 1);
  const auto prepared = runtime_->served().images->PrepareBytes(png, "png");
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const int64_t rows = prepared->num_rows;
  ASSERT_GT(rows, 1);

  GenerateRequest with_image = Request({5, pad, 6, 7}, 8);
  with_image.mutable_sampling()->set_temperature(0.0f);
  with_image.add_images(png);
  const Outcome image = Run(with_image);
  ASSERT_TRUE(image.status.ok()) << image.status.error_message();
  ASSERT_EQ(image.completes.size(), 1u);
  EXPECT_EQ(image.completes[0].usage().prompt_tokens(), 3 + rows);  // the placeholder → rows
  EXPECT_EQ(image.ids.size(), 8u);

  // The rows reach the model: no image (the placeholder's own embedding) and another image give
  // other tokens.
  GenerateRequest without = with_image;
  without.clear_images();
  const Outcome plain = Run(without);
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
  EXPECT_EQ(plain.completes[0].usage().prompt_tokens(), 4);
  EXPECT_NE(plain.ids, image.ids);
  GenerateRequest other = with_image;
  other.set_images(0, TestPng(56, 42, 2));
  const Outcome other_image = Run(other);
  ASSERT_TRUE(other_image.status.ok()) << other_image.status.error_message();
  EXPECT_NE(other_image.ids, image.ids);

  // A text prompt names the image with the placeholder's special-token text; the same ids give
  // the same tokens. Two choices share one encoding (the tower's cache serves the image again).
  grpc::ClientContext c1;
  v1::DetokenizeRequest detok;
  detok.mutable_token_ids()->Add(pad);
  v1::DetokenizeResponse pad_text;
  ASSERT_TRUE(Inference()->Detokenize(&c1, detok, &pad_text).ok());
  EXPECT_EQ(pad_text.text(), "<|media_pad|>");
  const std::string text = "a photo: " + pad_text.text() + " what is it?";
  grpc::ClientContext c2;
  v1::TokenizeRequest tokenize;
  tokenize.set_text(text);
  v1::TokenizeResponse ids;
  ASSERT_TRUE(Inference()->Tokenize(&c2, tokenize, &ids).ok());
  ASSERT_EQ(std::count(ids.token_ids().begin(), ids.token_ids().end(), pad), 1);
  GenerateRequest by_text;
  by_text.set_text(text);
  by_text.set_max_tokens(6);
  by_text.set_ignore_eos(true);
  by_text.set_n(2);
  by_text.mutable_sampling()->set_temperature(0.0f);
  by_text.add_images(png);
  const frontend::ImageInputStats before = runtime_->served().images->stats();
  const Outcome text_out = Run(by_text);
  ASSERT_TRUE(text_out.status.ok()) << text_out.status.error_message();
  ASSERT_EQ(text_out.completes.size(), 2u);
  for (const v1::Complete& done : text_out.completes) {
    EXPECT_EQ(done.usage().prompt_tokens(), ids.token_ids_size() - 1 + rows);
  }
  EXPECT_EQ(text_out.texts.at(0), text_out.texts.at(1));
  const frontend::ImageInputStats after = runtime_->served().images->stats();
  EXPECT_EQ(after.images_encoded, before.images_encoded);  // encoded by the first request
  EXPECT_EQ(after.cache_hits, before.cache_hits + 1);
  GenerateRequest by_ids =
      Request(std::vector<int32_t>(ids.token_ids().begin(), ids.token_ids().end()), 6);
  by_ids.mutable_sampling()->set_temperature(0.0f);
  by_ids.add_images(png);
  const Outcome ids_out = Run(by_ids);
  ASSERT_TRUE(ids_out.status.ok()) << ids_out.status.error_message();
  EXPECT_EQ(ids_out.text, text_out.texts.at(0));
}

TEST_F(GrpcServerTest, TwoImagesFillTheirPlaceholdersInOrder) {
  const int32_t pad = MediaPlaceholderId(Control().get());
  // The same size (the same layout either way round): only the rows tell them apart.
  const std::string a = TestPng(42, 28, 3), b = TestPng(42, 28, 4);
  const int64_t rows_a = runtime_->served().images->PrepareBytes(a, "a")->num_rows;
  const int64_t rows_b = runtime_->served().images->PrepareBytes(b, "b")->num_rows;
  GenerateRequest ab = Request({5, pad, 6, pad, 7}, 6);
  ab.mutable_sampling()->set_temperature(0.0f);
  ab.add_images(a);
  ab.add_images(b);
  const Outcome first = Run(ab);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_EQ(rows_a, rows_b);
  EXPECT_EQ(first.completes[0].usage().prompt_tokens(), 3 + rows_a + rows_b);
  GenerateRequest ba = ab;
  ba.set_images(0, b);
  ba.set_images(1, a);
  const Outcome swapped = Run(ba);
  ASSERT_TRUE(swapped.status.ok()) << swapped.status.error_message();
  EXPECT_NE(swapped.ids, first.ids);
}

TEST_F(GrpcServerTest, BadImagesAreInvalidArgumentNamingTheImage) {
  const int32_t pad = MediaPlaceholderId(Control().get());
  const std::string png = TestPng(56, 42, 1);
  const auto refused = [&](const GenerateRequest& request) {
    const Outcome out = Run(request);
    EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << out.status.error_message();
    EXPECT_TRUE(out.ids.empty());
    return out.status.error_message();
  };
  GenerateRequest two = Request({5, pad, 6, pad}, 4);
  two.add_images(png);
  two.add_images("not an image at all");
  EXPECT_THAT(refused(two), ::testing::StartsWith("images[1]: not an image: "));
  two.set_images(1, png.substr(0, png.size() / 2));  // truncated
  EXPECT_THAT(refused(two), ::testing::StartsWith("images[1]: "));
  two.set_images(0, "");
  EXPECT_EQ(refused(two), "images[0]: the image is empty");

  // Placeholders and images must pair up; the message names both counts.
  GenerateRequest mismatch = Request({5, pad, 6, pad}, 4);
  mismatch.add_images(png);
  const std::string message = refused(mismatch);
  EXPECT_NE(message.find("2 media placeholders"), std::string::npos) << message;
  EXPECT_NE(message.find("1 image was given"), std::string::npos) << message;
  GenerateRequest none = Request({5, 6}, 4);
  none.add_images(png);
  EXPECT_NE(refused(none).find("0 media placeholders"), std::string::npos);

  // More images than the server takes.
  const int most = runtime_->served().images->limits().max_images_per_request;
  std::vector<int32_t> prompt(static_cast<size_t>(most + 1), pad);
  GenerateRequest many = Request(prompt, 4);
  for (int i = 0; i <= most; ++i) many.add_images(png);
  EXPECT_EQ(refused(many), absl::StrCat("images: the request has ", most + 1, " images; at most ",
                                        most, " are accepted"));

  // A model without a vision tower refuses images (and says so in ModelInfo).
  frontend::ServedModel text_only = runtime_->served();
  text_only.images = nullptr;
  GrpcServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  auto server = GrpcServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetModel(&text_only);
  EXPECT_EQ(MediaPlaceholderId(v1::Control::NewStub(Channel((*server)->port())).get()), -1);
  GenerateRequest one = Request({5, pad, 6}, 4);
  one.add_images(png);
  grpc::ClientContext context;
  const Outcome no_tower = Run(one, &context, nullptr, (*server)->port());
  EXPECT_EQ(no_tower.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(no_tower.status.error_message().find("no vision tower"), std::string::npos)
      << no_tower.status.error_message();

  // The server keeps serving, images included.
  const Outcome ok = Run(one);
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.ids.size(), 4u);
  ExpectEmpty(WaitForEmptyCache());
}

}  // namespace
}  // namespace strata::rpc
