#include "engine/tokenizer/detokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace strata::engine {
namespace {

using ::testing::ElementsAre;

const std::string kFffd = "\xEF\xBF\xBD";

// Bytes 0..255, "he" 256, "ll" 257, "hell" 258, "hello" 259, " w" 260; special 300 "<|im_end|>".
std::unique_ptr<Tokenizer> MakeTokenizer() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"he", "ll", "hell", "hello", " w"}) tokens.emplace_back(t);
  TokenizerSpec spec;
  spec.vocab = *BpeVocab::FromTokens(tokens);
  spec.pattern = std::string(Cl100kPattern());
  spec.special_tokens[300] = {"<|im_end|>", true};
  return std::move(*Tokenizer::Create(std::move(spec)));
}

std::vector<std::string> Stream(IncrementalDetokenizer* d, const std::vector<int32_t>& ids) {
  std::vector<std::string> deltas;
  for (int32_t id : ids) deltas.push_back(*d->Add(id));
  deltas.push_back(d->Finish());
  return deltas;
}

TEST(IncrementalDetokenizerTest, EmitsOnlyWholeCharacters) {
  auto tok = MakeTokenizer();
  IncrementalDetokenizer d(*tok, {});
  // 你 = E4 BD A0, split over three tokens.
  EXPECT_THAT(Stream(&d, {0xE4, 0xBD, 0xA0, 'x'}), ElementsAre("", "", "你", "x", ""));
}

TEST(IncrementalDetokenizerTest, IllFormedBytesBecomeReplacementCharacters) {
  auto tok = MakeTokenizer();
  IncrementalDetokenizer invalid(*tok, {});
  EXPECT_THAT(Stream(&invalid, {0xFF, 0xE4, 'a'}), ElementsAre(kFffd, "", kFffd + "a", ""));
  IncrementalDetokenizer truncated(*tok, {});
  EXPECT_THAT(Stream(&truncated, {'a', 0xE4, 0xBD}), ElementsAre("a", "", "", kFffd));
}

TEST(IncrementalDetokenizerTest, SpecialTokensSkippedOrShown) {
  auto tok = MakeTokenizer();
  IncrementalDetokenizer skip(*tok, {.skip_special_tokens = true});
  EXPECT_THAT(Stream(&skip, {256, 300, 256}), ElementsAre("he", "", "he", ""));
  IncrementalDetokenizer show(*tok, {.skip_special_tokens = false});
  EXPECT_THAT(Stream(&show, {256, 300, 256}), ElementsAre("he", "<|im_end|>", "he", ""));
  // A skipped special between the bytes of one character does not break the character.
  IncrementalDetokenizer joined(*tok, {.skip_special_tokens = true});
  EXPECT_THAT(Stream(&joined, {0xE4, 0xBD, 300, 0xA0}), ElementsAre("", "", "", "你", ""));
}

TEST(IncrementalDetokenizerTest, StopStringSpanningTokensIsNotEmitted) {
  auto tok = MakeTokenizer();
  // "hello" + " w" + "orld": the stop "lo w" starts inside "hello" and ends inside " w".
  IncrementalDetokenizer d(*tok, {.stop = {"xyz", "lo w"}});
  EXPECT_EQ(*d.Add(259), "hel");
  EXPECT_FALSE(d.stopped());
  EXPECT_EQ(*d.Add(260), "");
  EXPECT_TRUE(d.stopped());
  EXPECT_EQ(d.stop_index(), 1u);
  EXPECT_EQ(*d.Add('o'), "");
  EXPECT_EQ(d.Finish(), "");
  EXPECT_EQ(d.output(), "hel");
}

TEST(IncrementalDetokenizerTest, StopStringIncludedWhenAsked) {
  auto tok = MakeTokenizer();
  IncrementalDetokenizer d(*tok, {.stop = {"lo w"}, .include_stop_str_in_output = true});
  Stream(&d, {259, 260, 'o'});
  EXPECT_EQ(d.output(), "hello w");
}

TEST(IncrementalDetokenizerTest, HeldBackPrefixIsReleasedWhenItDiverges) {
  auto tok = MakeTokenizer();
  IncrementalDetokenizer d(*tok, {.stop = {"hex"}});
  EXPECT_EQ(*d.Add(256), "");  // "he" could start "hex"
  EXPECT_EQ(*d.Add('y'), "hey");
  EXPECT_EQ(*d.Add(256), "");
  EXPECT_EQ(d.Finish(), "he");  // end of stream releases the held prefix
  EXPECT_FALSE(d.stopped());
}

TEST(IncrementalDetokenizerTest, MinTokensDefersStopStringsButFindsOneThatEndsAfter) {
  auto tok = MakeTokenizer();
  IncrementalDetokenizer d(*tok, {.stop = {"he"}, .min_tokens = 4});
  EXPECT_EQ(*d.Add(256), "he");  // id 1: a whole stop string, not looked for yet
  EXPECT_EQ(*d.Add('x'), "x");
  EXPECT_EQ(*d.Add('h'), "");  // id 3: held back (it may begin a stop string)
  EXPECT_FALSE(d.stopped());
  EXPECT_EQ(*d.Add('e'), "");  // id 4: "he", begun before min_tokens, ends the stream
  EXPECT_TRUE(d.stopped());
  EXPECT_EQ(d.output(), "hex");
}

TEST(IncrementalDetokenizerTest, EarliestStopWins) {
  auto tok = MakeTokenizer();
  IncrementalDetokenizer d(*tok, {.stop = {"llo", "he"}});
  EXPECT_EQ(*d.Add(259), "");
  EXPECT_EQ(d.stop_index(), 1u);
}

TEST(IncrementalDetokenizerTest, UnknownIdIsAnErrorAndLeavesStreamIntact) {
  auto tok = MakeTokenizer();
  IncrementalDetokenizer d(*tok, {});
  EXPECT_EQ(*d.Add(0xE4), "");
  EXPECT_FALSE(d.Add(299).ok());
  EXPECT_EQ(*d.Add(0xBD), "");
  EXPECT_EQ(*d.Add(0xA0), "你");
}

TEST(IncrementalDetokenizerTest, EveryPrefixMatchesOneShotDecode) {
  auto tok = MakeTokenizer();
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> pick(0, 300);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i) {
      int id = pick(rng);
      if (id > 260 && id != 300) id = 0x80 + id % 0x40;  // continuation bytes, often
      ids.push_back(id);
    }
    for (bool skip : {true, false}) {
      IncrementalDetokenizer d(*tok, {.skip_special_tokens = skip});
      for (size_t k = 0; k <= ids.size(); ++k) {
        IncrementalDetokenizer snapshot = d;
        snapshot.Finish();
        const std::string streamed = snapshot.output();
        ASSERT_EQ(streamed, *tok->Decode({ids.data(), k}, skip)) << "trial " << trial << " k " << k;
        if (k < ids.size()) {
          ASSERT_TRUE(d.Add(ids[k]).ok());
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata::engine
