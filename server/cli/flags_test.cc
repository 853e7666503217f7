#include "server/cli/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata::cli {
namespace {

TEST(FlagsTest, ParsesIdListsAndNamesTheBadEntry) {
  EXPECT_EQ(*ParseIdList("1, 2,3", "--ids"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(ParseIdList("1,,2", "--ids").ok());
  EXPECT_EQ(ParseIdList("1,-2", "--ids").status().message(),
            "--ids: '-2' is not a non-negative token id");
  EXPECT_FALSE(ParseIdList("", "--ids").ok());
  EXPECT_FALSE(ParseIdList("99999999999", "--ids").ok());
}

TEST(FlagsTest, StringListsAreJsonArraysOrCommaSeparated) {
  EXPECT_EQ(*ParseStringList(R"(["https://a.example", "*"])", "--allowed-origins"),
            (std::vector<std::string>{"https://a.example", "*"}));
  EXPECT_EQ(*ParseStringList("GET, POST", "--allowed-methods"),
            (std::vector<std::string>{"GET", "POST"}));
  EXPECT_EQ(*ParseStringList("[]", "--allowed-origins"), std::vector<std::string>{});
  EXPECT_EQ(ParseStringList("[1, 2]", "--allowed-origins").status().message(),
            "--allowed-origins must list strings, got 1");
  EXPECT_FALSE(ParseStringList("[\"a\"", "--allowed-origins").ok());
}

TEST(FlagsTest, SpeculativeConfigTakesVllmsNgramJsonAndNamesWhatIsWrong) {
  scheduler::SchedulerConfig c;
  ASSERT_TRUE(ParseSpeculativeConfig(
                  R"({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4})", &c)
                  .ok());
  EXPECT_EQ(c.num_speculative_tokens, 5);
  EXPECT_EQ(c.prompt_lookup_max, 4);
  EXPECT_EQ(c.prompt_lookup_min, 2);  // min(2, max) when absent
  EXPECT_EQ(c.speculative_disable_by_batch_size, 0);
  ASSERT_TRUE(ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 3,
                                         "prompt_lookup_max": 1, "disable_by_batch_size": 8})",
                                     &c)
                  .ok());
  EXPECT_EQ(c.prompt_lookup_min, 1);
  EXPECT_EQ(c.speculative_disable_by_batch_size, 8);
  auto error = [](const std::string& text) {
    scheduler::SchedulerConfig untouched;
    absl::Status s = ParseSpeculativeConfig(text, &untouched);
    EXPECT_EQ(untouched.num_speculative_tokens, 0) << text;
    return std::string(s.message());
  };
  EXPECT_THAT(error(R"({"method": "eagle", "num_speculative_tokens": 3})"),
              testing::HasSubstr("method must be \"ngram\""));
  EXPECT_THAT(error(R"({"num_speculative_tokens": 3})"), testing::HasSubstr("got none"));
  EXPECT_THAT(error(R"({"method": "ngram"})"),
              testing::HasSubstr("num_speculative_tokens is required"));
  EXPECT_THAT(error(R"({"method": "ngram", "num_speculative_tokens": 17})"),
              testing::HasSubstr("must be in [1, 16], got 17"));
  EXPECT_THAT(error(R"({"method": "ngram", "num_speculative_tokens": 0})"),
              testing::HasSubstr("num_speculative_tokens must be an integer in [1, 64], got 0"));
  EXPECT_THAT(error(R"({"method": "ngram", "num_speculative_tokens": "4"})"),
              testing::HasSubstr("got \"4\""));
  EXPECT_THAT(error(R"({"method": "ngram", "num_speculative_tokens": 4, "model": "x"})"),
              testing::HasSubstr("unknown key \"model\""));
  EXPECT_THAT(error(R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 6,
                        "prompt_lookup_max": 3})"),
              testing::HasSubstr("prompt_lookup_min (6) exceeds prompt_lookup_max (3)"));
  EXPECT_THAT(error("ngram"), testing::HasSubstr("not a JSON object"));
}

TEST(FlagsTest, KvCacheDTypeResolvesAutoPerDeviceAndNamesWhatIsNotServed) {
  EXPECT_EQ(*ParseKvCacheDType("auto", "cpu"), LatentDType::kF32);
  EXPECT_EQ(*ParseKvCacheDType("auto", "cuda"), LatentDType::kBF16);
  EXPECT_EQ(*ParseKvCacheDType("fp8", "cpu"), LatentDType::kFP8);
  EXPECT_EQ(*ParseKvCacheDType("fp8_ds_mla", "cpu"), LatentDType::kFP8);  // vLLM's spelling
  EXPECT_EQ(*ParseKvCacheDType("bfloat16", "cuda"), LatentDType::kBF16);
  const absl::Status bad = ParseKvCacheDType("int4", "cpu").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("'int4'"), std::string::npos) << bad;
  EXPECT_EQ(*ParseKvCacheDType("fp8_e4m3", "cuda"), LatentDType::kFP8);
  const absl::Status gpu_f32 = ParseKvCacheDType("f32", "cuda").status();
  EXPECT_EQ(gpu_f32.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gpu_f32.message().find("bf16 or fp8"), std::string::npos) << gpu_f32;
}

TEST(FlagsTest, CpuMatmulPrecisionSetsTheProcessWidePrecisionAndNamesBadValues) {
  const absl::Status bad = ApplyCpuMatmulPrecision("fp16");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()),
              ::testing::HasSubstr("--cpu-matmul-precision must be f32, bf16 or int8, got 'fp16'"));
  EXPECT_EQ(kernels::cpu::GetMatmulPrecision(), kernels::cpu::MatmulPrecision::kF32);
  EXPECT_STREQ(kernels::cpu::MatmulPrecisionInEffect(), "f32");
  ASSERT_TRUE(ApplyCpuMatmulPrecision("bf16").ok());
  EXPECT_EQ(kernels::cpu::GetMatmulPrecision(), kernels::cpu::MatmulPrecision::kBf16);
  const std::string expected = !kernels::cpu::Bf16MatmulSupported() ? "f32"
                               : kernels::cpu::Bf16MatmulUsesAmx()  ? "bf16-amx"
                                                                    : "bf16";
  EXPECT_EQ(kernels::cpu::MatmulPrecisionInEffect(), expected);
  ASSERT_TRUE(ApplyCpuMatmulPrecision("int8").ok());
  EXPECT_EQ(kernels::cpu::GetMatmulPrecision(), kernels::cpu::MatmulPrecision::kInt8);
  const std::string int8 = kernels::cpu::Int8MatmulSupported() ? "int8" : "";
  const std::string with_bf16 = expected == "f32" ? int8
                                : int8.empty()    ? expected
                                                  : int8 + "+" + expected;
  EXPECT_EQ(kernels::cpu::MatmulPrecisionInEffect(), with_bf16.empty() ? "f32" : with_bf16);
  ASSERT_TRUE(ApplyCpuMatmulPrecision("f32").ok());
  EXPECT_EQ(kernels::cpu::GetMatmulPrecision(), kernels::cpu::MatmulPrecision::kF32);
}

}  // namespace
}  // namespace strata::cli
