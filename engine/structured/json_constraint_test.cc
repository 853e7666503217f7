// The constraint's masks against brute force (every token's bytes fed to a fresh copy of the
// matcher state), over random vocabularies and the states along valid documents; and sampling
// under the constraint from random logits always yields text that parses and fits the schema.
#include "engine/structured/json_constraint.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "core/check.h"
#include "engine/structured/matcher_testing.h"
#include "engine/structured/reasoning_gate.h"

namespace strata::structured {
namespace {

constexpr int32_t kJsonEndId = 256;  // after the 256 byte tokens

// The test vocabulary over JSON-heavy pieces.
std::vector<std::string> RandomVocab(uint32_t seed, int extra) {
  return testing::RandomVocab(
      seed, extra, {"{",    "}",   "[", "]", "\"",       ":",   ",",    " ",      "\n",    "\\",
                    "u",    "0",   "1", "9", "-",        ".",   "e",    "true",   "false", "null",
                    "name", "age", "a", "b", "\xc3\xa9", "x y", "\": ", "\", \"", "\"}"});
}

std::shared_ptr<const JsonGrammar> Grammar(const char* schema) {
  if (schema == nullptr) return std::make_shared<JsonGrammar>(AnyJsonObjectGrammar());
  absl::StatusOr<JsonGrammar> g = CompileJsonSchema(Json::parse(schema));
  CHECK(g.ok());
  return std::make_shared<JsonGrammar>(*std::move(g));
}

constexpr const char* kPersonSchema = R"({"type":"object","properties":{
    "name":{"type":"string","maxLength":6},
    "bio":{"type":"string"},
    "age":{"type":"integer"},
    "tags":{"type":"array","items":{"enum":["a","b","long tag"]},"maxItems":3},
    "ok":{"type":"boolean"},
    "pet":{"anyOf":[{"type":"null"},{"type":"object","properties":{"kind":{"const":"cat"}},
                                     "required":["kind"],"additionalProperties":false}]}},
  "required":["name","age","ok"],"additionalProperties":false})";

using testing::Bit;

// For each prefix of `doc`: the matcher's mask equals the brute-force mask.
void CheckMasksAlong(const JsonConstraint& constraint, const std::string& doc) {
  const JsonGrammar& g = constraint.grammar();
  const TokenVocab& vocab = constraint.vocab();
  const int64_t n = vocab.size() + 3;  // the model's rows may exceed the tokenizer's
  auto matcher = constraint.NewMatcher();
  auto* m = static_cast<JsonTokenMatcher*>(matcher.get());
  JsonMatchState state = JsonMatchState::Start(g), next, scratch;
  std::vector<uint64_t> bits;
  for (size_t i = 0; i <= doc.size(); ++i) {
    m->AllowedTokens(n, &bits);
    bool any = false;
    for (int64_t id = 0; id < n; ++id) {
      bool expected = false;
      if (id < vocab.size() && !vocab.bytes(static_cast<int32_t>(id)).empty()) {
        expected = state.AdvanceBytes(g, vocab.bytes(static_cast<int32_t>(id)), &next, &scratch);
        // The lowest id among equal bytes only.
        for (int32_t lower = 0; expected && lower < id; ++lower) {
          expected = vocab.bytes(lower) != vocab.bytes(static_cast<int32_t>(id));
        }
      }
      any = any || expected;
      if (id == kJsonEndId) continue;
      ASSERT_EQ(Bit(bits, id), expected)
          << "token " << id << " '" << vocab.bytes(static_cast<int32_t>(id)) << "' after '"
          << doc.substr(0, i) << "'";
    }
    EXPECT_EQ(Bit(bits, kJsonEndId), state.CanFinish() || !any) << doc.substr(0, i);
    if (i == doc.size()) break;
    m->Accept(static_cast<uint8_t>(doc[i]));  // byte tokens: id = byte
    ASSERT_TRUE(state.Advance(g, static_cast<uint8_t>(doc[i]), &next)) << doc.substr(0, i + 1);
    std::swap(state, next);
  }
  EXPECT_TRUE(m->complete());
}

TEST(JsonConstraintTest, MasksEqualBruteForceAlongValidDocuments) {
  for (uint32_t seed : {1u, 2u}) {
    auto vocab = std::make_shared<TokenVocab>(RandomVocab(seed, 1500));
    const JsonConstraint any_object(Grammar(nullptr), vocab, {kJsonEndId});
    CheckMasksAlong(any_object, "{\"a\": [1, -2.5e3, {\"b\\u00e9\": null}], \"x y\": \"t\\\"\"}");
    const JsonConstraint person(Grammar(kPersonSchema), vocab, {kJsonEndId});
    CheckMasksAlong(person, R"({"name":"Ann","bio":"x\ny","age":-3,"ok":true})");
    CheckMasksAlong(person,
                    "{ \"name\": \"\xc3\xa9t\xc3\xa9\", \"age\": 0, \"tags\": [\"long tag\", "
                    "\"a\"], \"ok\": false, \"pet\": {\"kind\": \"cat\"} }");
    const JsonConstraint number(Grammar(R"({"type":"number"})"), vocab, {kJsonEndId});
    CheckMasksAlong(number, "-12.5e+7");
  }
}

TEST(JsonConstraintTest, PreparedMasksEqualMasksComputedWhenSampling) {
  auto vocab = std::make_shared<TokenVocab>(RandomVocab(6, 800));
  const JsonConstraint c(Grammar(kPersonSchema), vocab, {kJsonEndId});
  auto prepared = c.NewMatcher();
  auto lazy = c.NewMatcher();
  const std::string doc = R"({"name":"Ann","bio":"x","age":7,"tags":["a"],"ok":true})";
  std::vector<float> a(static_cast<size_t>(vocab->size())), b(a.size());
  for (size_t i = 0; i <= doc.size(); ++i) {
    std::fill(a.begin(), a.end(), 1.0f);
    std::fill(b.begin(), b.end(), 1.0f);
    prepared->Prepare(vocab->size());
    prepared->MaskLogits(a.data(), vocab->size());
    lazy->MaskLogits(b.data(), vocab->size());
    ASSERT_EQ(a, b) << doc.substr(0, i);
    if (i == doc.size()) break;
    // A mask prepared and then not used (the token came another way) must not linger.
    prepared->Prepare(vocab->size());
    prepared->Accept(static_cast<uint8_t>(doc[i]));
    lazy->Accept(static_cast<uint8_t>(doc[i]));
  }
}

// Samples one text under `constraint` from random logits (greedy every fourth trial): whether
// an end id came within `max_steps`. Fails the test if a masked token is ever drawn.
bool SampleText(const std::shared_ptr<const JsonConstraint>& constraint, int trial,
                std::mt19937* rng, int max_steps, std::string* text) {
  const TokenVocab& vocab = constraint->vocab();
  const int64_t n = vocab.size();
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(n));
  engine::SamplingParams params;
  params.temperature = trial % 4 == 0 ? 0.0f : 1.0f;
  params.constraint = constraint;
  engine::Sampler sampler(params, 100 + trial, {});
  EXPECT_TRUE(sampler.constrained());
  text->clear();
  for (int step = 0; step < max_steps; ++step) {
    for (float& x : logits) x = normal(*rng);
    const int32_t id = sampler.Sample(logits.data(), n);
    EXPECT_TRUE(std::isfinite(logits[static_cast<size_t>(id)])) << "a masked token was drawn";
    if (id == kJsonEndId) return true;
    *text += vocab.bytes(id);
  }
  return false;
}

TEST(JsonConstraintTest, SamplingFromRandomLogitsYieldsSchemaValidJson) {
  auto vocab = std::make_shared<TokenVocab>(RandomVocab(3, 1500));
  auto constraint = std::make_shared<const JsonConstraint>(Grammar(kPersonSchema), vocab,
                                                           std::vector{kJsonEndId});
  std::mt19937 rng(11);
  int finished = 0;
  for (int trial = 0; trial < 40; ++trial) {
    std::string text;
    // An unbounded "bio" string may outlast the step budget.
    if (!SampleText(constraint, trial, &rng, 3000, &text)) continue;
    ++finished;
    ASSERT_TRUE(nlohmann::json::accept(text)) << text;
    const nlohmann::json doc = nlohmann::json::parse(text);
    ASSERT_TRUE(doc.is_object()) << text;
    ASSERT_TRUE(doc.contains("name") && doc["name"].is_string()) << text;
    EXPECT_LE(doc["name"].get<std::string>().size(), 12u) << text;  // ≤ 6 code points
    ASSERT_TRUE(doc.contains("age") && doc["age"].is_number_integer()) << text;
    ASSERT_TRUE(doc.contains("ok") && doc["ok"].is_boolean()) << text;
    for (const auto& [key, value] : doc.items()) {
      EXPECT_TRUE(key == "name" || key == "bio" || key == "age" || key == "tags" || key == "ok" ||
                  key == "pet")
          << text;
    }
    if (doc.contains("tags")) {
      EXPECT_LE(doc["tags"].size(), 3u) << text;
    }
    if (doc.contains("pet") && !doc["pet"].is_null()) {
      EXPECT_EQ(doc["pet"]["kind"], "cat") << text;
    }
  }
  EXPECT_GE(finished, 20);
}

constexpr const char* kPatternSchema = R"({"type":"object","properties":{
    "id":{"type":"string","pattern":"^[a-f0-9]{4}-x$"},
    "when":{"type":"string","format":"date"},
    "note":{"type":"string","pattern":"\\d\\n","maxLength":5},
    "score":{"type":"number","minimum":-1,"maximum":1},
    "n":{"type":"integer","exclusiveMinimum":9,"maximum":99}},
  "required":["id","when","note","score","n"],"additionalProperties":false})";

TEST(JsonConstraintTest, MasksEqualBruteForceWithPatternsAndBounds) {
  auto vocab = std::make_shared<TokenVocab>(RandomVocab(8, 1500));
  const JsonConstraint c(Grammar(kPatternSchema), vocab, {kJsonEndId});
  CheckMasksAlong(c, R"({"id":"ab12-x","when":"2026-11-30","note":"a1\nb","score":-0.25,"n":42})");
  CheckMasksAlong(c, R"({ "id": "0000-x", "when": "1999-01-31", "note": "7\u000a", )"
                     R"("score": 1, "n": 10 })");
  const auto regex = std::make_shared<JsonGrammar>(
      RegexTextGrammar(*CompileRegex("(yes|no)-[0-9]{2,3}", RegexAnchoring::kFullMatch)));
  CheckMasksAlong(JsonConstraint(regex, vocab, {kJsonEndId}), "no-123");
}

// Sampling never reaches a dead end: every text it ends is valid (patterns, formats, bounds).
TEST(JsonConstraintTest, SamplingFromRandomLogitsFitsPatternsFormatsAndBounds) {
  auto vocab = std::make_shared<TokenVocab>(RandomVocab(9, 1500));
  auto constraint = std::make_shared<const JsonConstraint>(Grammar(kPatternSchema), vocab,
                                                           std::vector{kJsonEndId});
  std::mt19937 rng(12);
  const std::regex date(R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))");
  for (int trial = 0; trial < 30; ++trial) {
    std::string text;
    ASSERT_TRUE(SampleText(constraint, trial, &rng, 3000, &text)) << text;
    ASSERT_TRUE(nlohmann::json::accept(text)) << text;
    const nlohmann::json doc = nlohmann::json::parse(text);
    ASSERT_EQ(doc.size(), 5u) << text;
    EXPECT_TRUE(std::regex_match(doc["id"].get<std::string>(), std::regex("[a-f0-9]{4}-x")))
        << text;
    EXPECT_TRUE(std::regex_match(doc["when"].get<std::string>(), date)) << text;
    const std::string note = doc["note"].get<std::string>();
    EXPECT_TRUE(std::regex_search(note, std::regex("\\d\\n"))) << text;
    EXPECT_LE(std::count_if(note.begin(), note.end(), [](char ch) { return (ch & 0xC0) != 0x80; }),
              5)
        << text;  // code points
    EXPECT_TRUE(doc["score"].is_number() && doc["score"].get<double>() >= -1 &&
                doc["score"].get<double>() <= 1)
        << text;
    EXPECT_TRUE(doc["n"].is_number_integer() && doc["n"].get<int>() > 9 &&
                doc["n"].get<int>() <= 99)
        << text;
  }
  const auto grammar = std::make_shared<JsonGrammar>(
      RegexTextGrammar(*CompileRegex("(yes|no)-[0-9]{2,3}", RegexAnchoring::kFullMatch)));
  auto regex = std::make_shared<const JsonConstraint>(grammar, vocab, std::vector{kJsonEndId});
  for (int trial = 0; trial < 20; ++trial) {
    std::string text;
    ASSERT_TRUE(SampleText(regex, trial, &rng, 100, &text)) << text;
    EXPECT_TRUE(std::regex_match(text, std::regex("(yes|no)-[0-9]{2,3}"))) << text;
  }
}

TEST(JsonConstraintTest, ReasoningGateConstrainsOnlyTheAnswer) {
  auto vocab = std::make_shared<TokenVocab>(RandomVocab(5, 10));
  constexpr int32_t kThinkEnd = 300;  // one of the random tokens stands for </think>
  auto json =
      std::make_shared<const JsonConstraint>(Grammar(nullptr), vocab, std::vector{kJsonEndId});
  const ReasoningGate gate(json, kThinkEnd);
  auto m = gate.NewMatcher();
  std::vector<float> logits(static_cast<size_t>(vocab->size()), 0.0f);
  auto num_allowed = [&] {
    std::fill(logits.begin(), logits.end(), 0.0f);
    m->MaskLogits(logits.data(), vocab->size());
    return std::count_if(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); });
  };
  EXPECT_EQ(num_allowed(), vocab->size());  // reasoning: anything
  m->Accept('x');
  EXPECT_EQ(num_allowed(), vocab->size());
  m->Accept(kThinkEnd);
  const auto answer = num_allowed();  // the answer: a JSON object's first bytes only
  EXPECT_LT(answer, 50);
  EXPECT_TRUE(std::isfinite(logits['{']));
  EXPECT_FALSE(std::isfinite(logits['x']));
}

TEST(JsonConstraintTest, UnknownTokenEndsTheConstraint) {
  auto vocab = std::make_shared<TokenVocab>(RandomVocab(4, 10));
  const JsonConstraint c(Grammar(nullptr), vocab, {kJsonEndId});
  auto m = c.NewMatcher();
  auto* jm = static_cast<JsonTokenMatcher*>(m.get());
  m->Accept('x');  // cannot start an object
  EXPECT_TRUE(jm->finished());
  std::vector<uint64_t> bits;
  jm->AllowedTokens(vocab->size(), &bits);
  for (int64_t id = 0; id < vocab->size(); ++id) EXPECT_EQ(Bit(bits, id), id == kJsonEndId) << id;
}

}  // namespace
}  // namespace strata::structured
