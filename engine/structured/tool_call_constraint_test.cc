// Forced tool calls: sampling from random logits under the constraint always yields a
// well-formed Kimi tool-call section (markers in order, a declared tool named with its call
// index, arguments that parse and fit that tool's schema), within the call limit.
#include "engine/structured/tool_call_constraint.h"

#include <random>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "engine/structured/matcher_testing.h"

namespace strata::structured {
namespace {

// Ids 0–255: bytes; 256: end; 257–261: the markers (special: no bytes); then a few pieces.
constexpr int32_t kEnd = 256;
constexpr ToolCallTokens kMarkers{257, 258, 259, 260, 261};

std::shared_ptr<const TokenVocab> Vocab() {
  std::vector<std::string> bytes(262);
  for (int b = 0; b < 256; ++b)
    bytes[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  for (const char* piece : {"functions.", "get_weather", ":0", "{\"city\": \"", "\"}", "true",
                            "unit", "\"celsius\"", "search"}) {
    bytes.emplace_back(piece);
  }
  return std::make_shared<TokenVocab>(std::move(bytes));
}

std::shared_ptr<const JsonGrammar> Schema(const char* text) {
  return testing::CompiledSchema(text);
}

struct Call {
  std::string id, arguments;
};

// Samples until the end id; the calls found between the markers, or a failure.
std::vector<Call> SampleCalls(const std::shared_ptr<const ToolCallConstraint>& c, uint64_t seed,
                              const TokenVocab& vocab) {
  engine::SamplingParams params;
  params.constraint = c;
  engine::Sampler sampler(params, seed, {});
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(vocab.size()));
  std::vector<int32_t> ids;
  for (int step = 0; step < 4000; ++step) {
    for (float& x : logits) x = normal(rng);
    const int32_t id = sampler.Sample(logits.data(), vocab.size());
    if (id == kEnd) break;
    ids.push_back(id);
  }
  // Section begin, then (call begin, id text, argument begin, JSON, call end)+, section end.
  std::vector<Call> calls;
  EXPECT_FALSE(ids.empty());
  if (ids.empty() || ids.front() != kMarkers.section_begin) return {};
  EXPECT_EQ(ids.back(), kMarkers.section_end);
  size_t i = 1;
  while (i < ids.size() && ids[i] == kMarkers.call_begin) {
    Call call;
    for (++i; i < ids.size() && ids[i] != kMarkers.argument_begin; ++i)
      call.id += vocab.bytes(ids[i]);
    for (++i; i < ids.size() && ids[i] != kMarkers.call_end; ++i)
      call.arguments += vocab.bytes(ids[i]);
    ++i;
    calls.push_back(call);
  }
  EXPECT_EQ(i + 1, ids.size()) << "tokens after the last call";
  return calls;
}

TEST(ToolCallConstraintTest, RequiredCallsNameDeclaredToolsWithSchemaValidArguments) {
  auto vocab = Vocab();
  ToolCallOptions o;
  o.tools = {{"get_weather", Schema(R"({"type":"object","properties":{
                 "city":{"type":"string","maxLength":8},
                 "unit":{"enum":["celsius","fahrenheit"]}},
               "required":["city"],"additionalProperties":false})")},
             {"search", Schema(R"({"type":"object","properties":{"q":{"type":"string",
                 "maxLength":5},"n":{"type":"integer"}},"required":["q","n"],
                 "additionalProperties":false})")}};
  o.max_calls = 3;
  o.markers = kMarkers;
  o.end_ids = {kEnd};
  auto c = std::make_shared<const ToolCallConstraint>(o, vocab);
  int total = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const std::vector<Call> calls = SampleCalls(c, seed, *vocab);
    ASSERT_GE(calls.size(), 1u) << seed;
    ASSERT_LE(calls.size(), 3u) << seed;
    for (size_t k = 0; k < calls.size(); ++k) {
      const Call& call = calls[k];
      const bool weather = call.id == absl::StrCat("functions.get_weather:", k);
      ASSERT_TRUE(weather || call.id == absl::StrCat("functions.search:", k)) << call.id;
      ASSERT_TRUE(nlohmann::json::accept(call.arguments)) << call.arguments;
      const nlohmann::json args = nlohmann::json::parse(call.arguments);
      if (weather) {
        EXPECT_TRUE(args["city"].is_string()) << call.arguments;
        if (args.contains("unit")) {
          EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit");
        }
      } else {
        EXPECT_TRUE(args["q"].is_string() && args["n"].is_number_integer()) << call.arguments;
      }
      ++total;
    }
  }
  EXPECT_GT(total, 30);  // some replies made several calls
}

TEST(ToolCallConstraintTest, NamedToolChoiceMakesExactlyOneCallToIt) {
  auto vocab = Vocab();
  ToolCallOptions o;
  o.tools = {{"search", Schema(R"({"type":"object","properties":{"q":{"enum":["a","b"]}},
                                 "required":["q"],"additionalProperties":false})")}};
  o.markers = kMarkers;
  o.end_ids = {kEnd};
  auto c = std::make_shared<const ToolCallConstraint>(o, vocab);
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const std::vector<Call> calls = SampleCalls(c, seed, *vocab);
    ASSERT_EQ(calls.size(), 1u) << seed;
    EXPECT_EQ(calls[0].id, "functions.search:0");
    const nlohmann::json args = nlohmann::json::parse(calls[0].arguments);
    EXPECT_TRUE(args == nlohmann::json({{"q", "a"}}) || args == nlohmann::json({{"q", "b"}}))
        << calls[0].arguments;
  }
}

}  // namespace
}  // namespace strata::structured
