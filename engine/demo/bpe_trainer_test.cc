#include "engine/demo/bpe_trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/tokenizer/tokenizer.h"

namespace strata::engine::demo {
namespace {

std::unique_ptr<engine::PreTokenizer> WordsAndSpaces() {
  return std::move(*engine::PreTokenizer::Create(R"(\S+|\s+)"));
}

TEST(BpeTrainerTest, MergesMostFrequentPairsInOrder) {
  // Pieces: "aaab" x3, "ab" x1, " " x3. Counts: aa 6, ab 4 -> "aa"; then ab 4 > (aa,a) 3 ->
  // "ab"; then (aa,ab) 3 -> "aaab"; nothing is left to merge.
  auto pre = WordsAndSpaces();
  auto tokens = TrainBpe({"aaab aaab aaab ab"}, *pre, 259);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 259u);
  EXPECT_EQ((*tokens)[97], "a");
  EXPECT_THAT(std::vector<std::string>(tokens->begin() + 256, tokens->end()),
              ::testing::ElementsAre("aa", "ab", "aaab"));
  auto more = TrainBpe({"aaab aaab aaab ab"}, *pre, 260);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(BpeTrainerTest, TiesGoToTheLowestIds) {
  auto pre = WordsAndSpaces();
  auto tokens = TrainBpe({"cd ab"}, *pre, 257);
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->back(), "ab");
}

TEST(BpeTrainerTest, MergesNeverCrossPreTokenizerPieces) {
  auto pre = WordsAndSpaces();
  auto tokens = TrainBpe({"ab ab ab"}, *pre, 257);
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->back(), "ab");  // never "b " or " a"
}

TEST(BpeTrainerTest, LearntVocabularyRoundTripsUtf8AndIsDeterministic) {
  auto pre = engine::PreTokenizer::Create(engine::KimiPatternOriginal());
  ASSERT_TRUE(pre.ok());
  const std::string text = "你好，世界！你好，朋友。Hello hello HELLO héllo naïve café 😀😀";
  auto a = TrainBpe({text, text}, **pre, 280);
  auto b = TrainBpe({text, text}, **pre, 280);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, *b);
  engine::TokenizerSpec spec;
  spec.vocab = *engine::BpeVocab::FromTokens(*a);
  spec.pattern = std::string(engine::KimiPatternOriginal());
  auto tok = engine::Tokenizer::Create(std::move(spec));
  ASSERT_TRUE(tok.ok());
  const std::vector<int32_t> ids = (*tok)->Encode(text);
  EXPECT_LT(ids.size(), text.size() / 2);
  EXPECT_EQ(*(*tok)->Decode(ids), text);
}

}  // namespace
}  // namespace strata::engine::demo
