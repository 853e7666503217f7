#include "engine/tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

namespace strata::engine {
namespace {

using ::testing::ElementsAre;

// Ranks 0..255 are the bytes; then "he" 256, "ll" 257, "hell" 258, "hello" 259, " w" 260.
std::shared_ptr<const BpeVocab> SmallVocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"he", "ll", "hell", "hello", " w"}) tokens.emplace_back(t);
  return *BpeVocab::FromTokens(tokens);
}

std::unique_ptr<Tokenizer> SmallTokenizer(bool add_bos = false) {
  TokenizerSpec spec;
  spec.vocab = SmallVocab();
  spec.pattern = std::string(Cl100kPattern());
  spec.special_tokens[300] = {"<|im_end|>", true};
  spec.special_tokens[301] = {"[BOS]", true};
  spec.special_tokens[302] = {"<|im_end|>x", false};  // longer, not special for decode
  spec.bos_token = "[BOS]";
  spec.add_bos_token = add_bos;
  auto tok = Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return std::move(*tok);
}

TEST(TokenizerTest, EncodesThroughPretokenizerAndBpe) {
  auto tok = SmallTokenizer();
  EXPECT_THAT(tok->Encode("hello world"), ElementsAre(259, 260, 'o', 'r', 'l', 'd'));
  EXPECT_THAT(tok->Encode("hell"), ElementsAre(258));
  EXPECT_EQ(tok->vocab_size(), 303);
}

TEST(TokenizerTest, SpecialTextIsOrdinaryUnlessParseSpecial) {
  auto tok = SmallTokenizer();
  const std::string text = "he<|im_end|>";
  std::vector<int32_t> plain = tok->Encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 300), 0);
  EXPECT_EQ(*tok->DecodeBytes(plain), text);
  EXPECT_THAT(tok->Encode(text, {.parse_special = true}), ElementsAre(256, 300));
  // Longest special wins at the same position.
  EXPECT_THAT(tok->Encode("<|im_end|>xhe", {.parse_special = true}), ElementsAre(302, 256));
}

TEST(TokenizerTest, AddSpecialTokensFollowsConfig) {
  EXPECT_THAT(SmallTokenizer(false)->Encode("he", {.add_special_tokens = true}), ElementsAre(256));
  EXPECT_THAT(SmallTokenizer(true)->Encode("he", {.add_special_tokens = true}),
              ElementsAre(301, 256));
  EXPECT_THAT(SmallTokenizer(true)->Encode("he"), ElementsAre(256));
}

TEST(TokenizerTest, DecodeSkipsOnlySpecialTokensAndRejectsUnknownIds) {
  auto tok = SmallTokenizer();
  std::vector<int32_t> ids = {256, 300, 302, 259};
  EXPECT_EQ(*tok->Decode(ids), "he<|im_end|><|im_end|>xhello");
  EXPECT_EQ(*tok->Decode(ids, /*skip_special_tokens=*/true), "he<|im_end|>xhello");
  auto bad = tok->Decode(std::vector<int32_t>{256, 299});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("299"), std::string_view::npos);
  EXPECT_FALSE(tok->Decode(std::vector<int32_t>{-1}).ok());
}

TEST(TokenizerTest, DecodeReplacesIllFormedUtf8ButDecodeBytesKeepsIt) {
  auto tok = SmallTokenizer();
  std::vector<int32_t> ids = {0xE4, 0xBD, 'x'};
  EXPECT_EQ(*tok->DecodeBytes(ids), "\xE4\xBDx");
  EXPECT_EQ(*tok->Decode(ids), "\xEF\xBF\xBDx");
}

TEST(TokenizerTest, RandomBytesRoundTrip) {
  auto tok = SmallTokenizer();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 500; ++trial) {
    std::string s;
    const int len = trial % 64;
    for (int i = 0; i < len; ++i) {
      // Bias towards ASCII so words form, keep raw high bytes for invalid UTF-8.
      int b = byte(rng);
      s.push_back(static_cast<char>(b < 160 ? 'a' + b % 26 : b));
    }
    for (bool parse : {false, true}) {
      std::vector<int32_t> ids = tok->Encode(s, {.parse_special = parse});
      ASSERT_EQ(*tok->DecodeBytes(ids), s);
    }
  }
}

TEST(TokenizerTest, WithoutTokensKnowsNoTokenAndEncodesNothing) {
  const std::unique_ptr<Tokenizer> none = Tokenizer::WithoutTokens();
  EXPECT_EQ(none->vocab_size(), 0);
  EXPECT_TRUE(none->Encode("hello", {.add_special_tokens = true, .parse_special = true}).empty());
  EXPECT_EQ(none->TokenBytes(0), std::nullopt);
  EXPECT_FALSE(none->IsSpecial(0));
  EXPECT_FALSE(none->Decode({7}).ok());
  EXPECT_EQ(*none->Decode({}), "");
  EXPECT_FALSE(none->eos_id().has_value());
  EXPECT_TRUE(none->config().chat_templates.empty());
}

TEST(TokenizerTest, SpecialCollidingWithBpeRankIsRejected) {
  TokenizerSpec spec;
  spec.vocab = SmallVocab();
  spec.pattern = std::string(Cl100kPattern());
  spec.special_tokens[256] = {"<x>", true};
  EXPECT_FALSE(Tokenizer::Create(std::move(spec)).ok());
}

TEST(SplitLongRunsTest, SplitsRunsLongerThanLimitLikeTokenizationKimi) {
  std::vector<std::string> pieces;
  auto collect = [&](std::string_view p) { pieces.emplace_back(p); };
  // Python: list(_split_whitespaces_or_nonwhitespaces("aaaaa  bb", 2))
  //   == ['aa', 'aa', 'a  bb'] (a run of 5 splits every 2; the rest is one piece).
  SplitLongRuns("aaaaa  bb", 100, 2, collect);
  EXPECT_THAT(pieces, ElementsAre("aa", "aa", "a  bb"));
  pieces.clear();
  // Chunks of 3 code points first ("你好吗", "abc"), then runs within each chunk.
  SplitLongRuns("你好吗abc", 3, 10, collect);
  EXPECT_THAT(pieces, ElementsAre("你好吗", "abc"));
  pieces.clear();
  SplitLongRuns("", 3, 10, collect);
  EXPECT_TRUE(pieces.empty());
}

class TokenizerDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/tokdir_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
    Write("tiktoken.model", SmallVocab()->ToTiktoken());
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << text;
  }
  std::string dir_;
};

TEST_F(TokenizerDirTest, LoadsConfigPatternAndKimiReservedSpecials) {
  Write("tokenizer_config.json", R"({
    "tokenizer_class": "TikTokenTokenizer",
    "bos_token": "[BOS]", "eos_token": {"content": "[EOS]"},
    "added_tokens_decoder": {"261": {"content": "[BOS]", "special": true},
                             "262": {"content": "[EOS]", "special": true}},
    "pat_str": "\\S+|\\s+",
    "chat_template": "{{ bos_token }}"})");
  auto tok = Tokenizer::LoadFromDir(dir_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->bos_id(), 261);
  EXPECT_EQ((*tok)->eos_id(), 262);
  // 261 = num_base; the 256 ids from there are special, unnamed ones reserved.
  EXPECT_EQ((*tok)->SpecialTokenId("<|reserved_token_263|>"), 263);
  EXPECT_EQ((*tok)->SpecialTokenId("<|reserved_token_516|>"), 516);
  EXPECT_FALSE((*tok)->SpecialTokenId("<|reserved_token_517|>").has_value());
  EXPECT_EQ((*tok)->vocab_size(), 261 + 256);
  EXPECT_TRUE((*tok)->config().kimi_tokenizer);
  EXPECT_EQ((*tok)->config().chat_templates.at("default"), "{{ bos_token }}");
  // The "\S+|\s+" pattern keeps "hello," whole (cl100k would split off the comma).
  EXPECT_THAT((*tok)->Encode("hello, w"), ElementsAre(259, ',', ' ', 'w'));
}

TEST_F(TokenizerDirTest, ChatTemplateFileWinsAndMissingConfigIsFine) {
  Write("chat_template.jinja", "{{ messages }}");
  auto tok = Tokenizer::LoadFromDir(dir_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->config().chat_templates.at("default"), "{{ messages }}");
  EXPECT_FALSE((*tok)->bos_id().has_value());
}

TEST_F(TokenizerDirTest, ReportsMissingAndMalformedFiles) {
  EXPECT_EQ(Tokenizer::LoadFromDir(dir_ + "/nope").status().code(), absl::StatusCode::kNotFound);
  Write("tokenizer_config.json", "{not json");
  EXPECT_EQ(Tokenizer::LoadFromDir(dir_).status().code(), absl::StatusCode::kInvalidArgument);
  Write("tokenizer_config.json", R"({"added_tokens_decoder": {"x": {"content": "a"}}})");
  EXPECT_FALSE(Tokenizer::LoadFromDir(dir_).ok());
}

}  // namespace
}  // namespace strata::engine
