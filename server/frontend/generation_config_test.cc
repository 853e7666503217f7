// LoadGenerationConfig: the fields vLLM takes from generation_config.json, transformers'
// defaults ignored, eos ids as an id or a list, and errors naming the file, field and range.
#include "server/frontend/generation_config.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace strata::frontend {
namespace {

class GenerationConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/gen_config_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& text) { std::ofstream(dir_ + "/generation_config.json") << text; }
  std::string dir_;
};

TEST_F(GenerationConfigTest, MissingFileIsAnEmptyConfig) {
  absl::StatusOr<GenerationConfig> c = LoadGenerationConfig(dir_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->source.empty());
  EXPECT_FALSE(c->defaults.temperature.has_value());
  EXPECT_TRUE(c->eos_token_ids.empty());
  EXPECT_EQ(DescribeGenerationConfig(*c), "none");
}

TEST_F(GenerationConfigTest, ReadsTheSamplingDefaultsAndEosIds) {
  Write(R"({"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.05,
            "repetition_penalty": 1.1, "max_new_tokens": 300, "do_sample": true,
            "eos_token_id": [163586, 163585], "transformers_version": "4.57.1"})");
  absl::StatusOr<GenerationConfig> c = LoadGenerationConfig(dir_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->source, dir_ + "/generation_config.json");
  EXPECT_FLOAT_EQ(*c->defaults.temperature, 0.6f);
  EXPECT_FLOAT_EQ(*c->defaults.top_p, 0.95f);
  EXPECT_EQ(*c->defaults.top_k, 20);
  EXPECT_FLOAT_EQ(*c->defaults.min_p, 0.05f);
  EXPECT_FLOAT_EQ(*c->defaults.repetition_penalty, 1.1f);
  EXPECT_EQ(*c->defaults.max_tokens, 300);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{163586, 163585}));
  EXPECT_EQ(DescribeGenerationConfig(*c),
            "temperature 0.6, top_p 0.95, top_k 20, min_p 0.05, repetition_penalty 1.1, "
            "max_tokens 300, eos ids [163586, 163585]");
}

TEST_F(GenerationConfigTest, TransformersDefaultsAreNotDefaults) {
  Write(R"({"temperature": 1.0, "top_p": 1.0, "top_k": 50, "repetition_penalty": 1.0,
            "eos_token_id": 7, "bos_token_id": 1})");
  absl::StatusOr<GenerationConfig> c = LoadGenerationConfig(dir_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->defaults.temperature || c->defaults.top_p || c->defaults.top_k ||
               c->defaults.repetition_penalty || c->defaults.max_tokens);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{7}));
}

TEST_F(GenerationConfigTest, BadFilesNameTheFieldAndTheRange) {
  const struct {
    const char* text;
    const char* needle;
  } cases[] = {
      {"{", "not a JSON object"},
      {"[1]", "not a JSON object"},
      {R"({"temperature": 3})", "'temperature' must be in [0, 2]; got 3"},
      {R"({"temperature": "hot"})", "'temperature' must be a number"},
      {R"({"top_p": 0})", "'top_p' must be in (0, 1]"},
      {R"({"top_k": 2.5})", "'top_k' must be an integer"},
      {R"({"max_new_tokens": 0})", "'max_new_tokens' must be in [1, "},
      {R"({"eos_token_id": "x"})", "'eos_token_id' must be a token id or a list"},
      {R"({"eos_token_id": [1, -2]})", "'eos_token_id' must be a token id or a list"},
  };
  for (const auto& c : cases) {
    Write(c.text);
    absl::StatusOr<GenerationConfig> config = LoadGenerationConfig(dir_);
    ASSERT_FALSE(config.ok()) << c.text;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(config.status().message().find(c.needle), std::string::npos)
        << c.text << " -> " << config.status().message();
    EXPECT_NE(config.status().message().find("generation_config.json"), std::string::npos);
  }
}

// vLLM's --override-generation-config: every named field is set over the file's (transformers'
// defaults included), unknown or bad fields name the flag.
TEST_F(GenerationConfigTest, OverrideSetsNamedFieldsOverTheFile) {
  Write(R"({"temperature": 0.6, "top_p": 0.95, "eos_token_id": [7, 9]})");
  absl::StatusOr<GenerationConfig> c = LoadGenerationConfig(dir_);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(
      ApplyGenerationOverride(R"({"temperature": 1.0, "top_k": 20, "max_new_tokens": 64})", *c)
          .ok());
  EXPECT_EQ(c->defaults.temperature, 1.0f);  // set, although transformers' default
  EXPECT_EQ(c->defaults.top_p, 0.95f);       // kept from the file
  EXPECT_EQ(c->defaults.top_k, 20);
  EXPECT_EQ(c->defaults.max_tokens, 64);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(c->source, dir_ + "/generation_config.json + --override-generation-config");

  GenerationConfig empty;  // --generation-config vllm: the override alone
  ASSERT_TRUE(ApplyGenerationOverride(R"({"min_p": 0.05})", empty).ok());
  EXPECT_EQ(empty.defaults.min_p, 0.05f);
  EXPECT_EQ(empty.source, "--override-generation-config");

  GenerationConfig bad;
  EXPECT_EQ(ApplyGenerationOverride(R"({"temprature": 0.5})", bad).message(),
            "--override-generation-config: unknown field 'temprature' (known: temperature, "
            "top_p, top_k, min_p, repetition_penalty, max_new_tokens)");
  EXPECT_EQ(ApplyGenerationOverride(R"({"top_p": 0})", bad).message(),
            "--override-generation-config: 'top_p' must be in (0, 1]; got 0");
  EXPECT_FALSE(ApplyGenerationOverride("[1]", bad).ok());
}

}  // namespace
}  // namespace strata::frontend
