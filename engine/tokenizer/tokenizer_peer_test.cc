// Peer comparison against js-tiktoken (tests/js): encodes the corpus written by
// tests/js/tokenizer/setup_encoding_peer.mjs with Strata and compares ids exactly, then checks
// decode(encode(s)) == s and streaming detokenization of every prefix. The vocabulary files have
// no tokenizer_config.json: the pattern and specials must come from the sha256 table.
//
// Data directory: $STRATA_TOKENIZER_PEER_DIR (set by ctest; the fixture creates it).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/detokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace strata::engine {
namespace {

using Json = nlohmann::json;

std::string PeerDir() {
  const char* dir = std::getenv("STRATA_TOKENIZER_PEER_DIR");
  return dir == nullptr ? std::string() : std::string(dir);
}

const Json& Vectors() {
  static const Json* const vectors = [] {
    std::ifstream in(PeerDir() + "/encoding_vectors.json");
    std::stringstream text;
    text << in.rdbuf();
    return new Json(Json::parse(text.str(), nullptr, /*allow_exceptions=*/false));
  }();
  return *vectors;
}

std::string Escape(const std::string& s) {
  return Json(s).dump(-1, ' ', true, Json::error_handler_t::replace).substr(0, 200);
}

class EncodingPeerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(PeerDir().empty())
        << "STRATA_TOKENIZER_PEER_DIR is not set; run through ctest (fixture "
           "tokenizer_js_peer_setup), which needs `npm ci --prefix tests/js`";
    ASSERT_TRUE(Vectors().is_object())
        << "cannot read " << PeerDir() << "/encoding_vectors.json; run `npm ci --prefix tests/js`";
    auto tok = Tokenizer::LoadFromDir(PeerDir() + "/" + GetParam());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(EncodingPeerTest, RecognisesVocabularyBySha256) {
  const std::string expected =
      TranslatePattern(GetParam() == "cl100k_base" ? Cl100kPattern() : O200kPattern());
  EXPECT_EQ(tok_->pretokenizer().pattern(), expected);
  EXPECT_EQ(tok_->SpecialTokenId("<|endoftext|>"), GetParam() == "cl100k_base" ? 100257 : 199999);
}

TEST_P(EncodingPeerTest, OrdinaryTextIdsEqualJsTiktoken) {
  const Json& corpus = Vectors()["corpus"];
  const Json& expected = Vectors()[GetParam()]["ids"];
  ASSERT_EQ(corpus.size(), expected.size());
  ASSERT_GE(corpus.size(), 4000u);
  int mismatches = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i].get<std::string>();
    const std::vector<int32_t> ids = tok_->Encode(text);
    if (ids != expected[i].get<std::vector<int32_t>>()) {
      ADD_FAILURE() << "string " << i << " " << Escape(text) << "\n strata " << Json(ids).dump()
                    << "\n js     " << expected[i].dump();
      if (++mismatches > 5) break;
    }
  }
}

TEST_P(EncodingPeerTest, SpecialTextIdsEqualJsTiktokenAllowAll) {
  const Json& corpus = Vectors()[GetParam() + "_special_corpus"];
  const Json& expected = Vectors()[GetParam()]["special_ids"];
  ASSERT_EQ(corpus.size(), expected.size());
  ASSERT_FALSE(corpus.empty());
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i].get<std::string>();
    ASSERT_EQ(tok_->Encode(text, {.parse_special = true}), expected[i].get<std::vector<int32_t>>())
        << "string " << i << " " << Escape(text);
  }
}

TEST_P(EncodingPeerTest, DecodeOfEncodeIsIdentity) {
  for (const Json& item : Vectors()["corpus"]) {
    const std::string text = item.get<std::string>();
    ASSERT_EQ(*tok_->Decode(tok_->Encode(text)), text) << Escape(text);
  }
}

TEST_P(EncodingPeerTest, StreamingEveryPrefixEqualsFullDecode) {
  for (const Json& item : Vectors()["corpus"]) {
    const std::string text = item.get<std::string>();
    const std::vector<int32_t> ids = tok_->Encode(text);
    IncrementalDetokenizer d(*tok_, {.skip_special_tokens = false});
    for (size_t k = 0; k <= ids.size(); ++k) {
      IncrementalDetokenizer snapshot = d;
      snapshot.Finish();
      const std::string streamed = snapshot.output();
      ASSERT_EQ(streamed, *tok_->Decode({ids.data(), k})) << Escape(text) << " prefix " << k;
      if (k < ids.size()) {
        ASSERT_TRUE(d.Add(ids[k]).ok());
      }
    }
    d.Finish();
    ASSERT_EQ(d.output(), text);
  }
}

// One megabyte "words" and combining runs must encode in near-linear time without exhausting the
// regex engine's stack: time at 256 KiB and at 1 MiB, expect about 4x (quadratic would be 16x).
TEST_P(EncodingPeerTest, PathologicalMegabyteInputsEncodeInLinearTime) {
  auto vocab_text = [&] {
    std::ifstream in(PeerDir() + "/" + GetParam() + "/tiktoken.model");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }();
  TokenizerSpec kimi_spec;
  kimi_spec.vocab = *BpeVocab::FromTiktoken(vocab_text);
  kimi_spec.pattern = std::string(KimiPatternOriginal());
  auto kimi = Tokenizer::Create(std::move(kimi_spec));
  ASSERT_TRUE(kimi.ok()) << kimi.status();

  struct Case {
    const char* name;
    std::string unit;
    std::string prefix;
  };
  const std::vector<Case> cases = {
      {"one word", "a", ""},
      {"mixed-case word", "aBcDeFgHiJ", ""},
      {"combining marks", "\xCC\x81", "x"},
      {"spaces then letter", " ", ""},
      {"digits", "7", ""},
      {"han", "\xE4\xB8\xAD", ""},
      {"emoji zwj", "\xF0\x9F\x91\xA8\xE2\x80\x8D", ""},
  };
  for (const Tokenizer* tok : {tok_.get(), kimi->get()}) {
    for (const Case& c : cases) {
      auto make = [&](size_t target) {
        std::string text = c.prefix;
        while (text.size() < target) text += c.unit;
        return text + "x";
      };
      const std::string small = make(256u << 10), large = make(1u << 20);
      // Best of up to three runs each: other processes on a shared machine only add time.
      double seconds[2] = {1e9, 1e9};
      for (int attempt = 0; attempt < 3; ++attempt) {
        for (int k = 0; k < 2; ++k) {
          const std::string& text = k == 0 ? small : large;
          const auto start = std::chrono::steady_clock::now();
          const std::vector<int32_t> ids = tok->Encode(text);
          seconds[k] = std::min(
              seconds[k],
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
          ASSERT_EQ(*tok->DecodeBytes(ids), text) << c.name;
        }
        if (seconds[1] < 8.0 * seconds[0] + 0.25) break;
      }
      if (std::getenv("STRATA_VERBOSE")) {
        std::printf("%s: %.3f s -> %.3f s\n", c.name, seconds[0], seconds[1]);
      }
      EXPECT_LT(seconds[1], 5.0) << c.name;
      // Linear growth gives ~4x for 4x the input; quadratic would give ~16x. The slack absorbs
      // scheduling noise of a loaded machine at these millisecond scales; the 5 s bound above
      // is what a quadratic merge over a 1 MB word could never meet.
      EXPECT_LT(seconds[1], 8.0 * seconds[0] + 0.25)
          << c.name << ": " << seconds[0] << " s -> " << seconds[1] << " s";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Encodings, EncodingPeerTest,
                         ::testing::Values("cl100k_base", "o200k_base"));

}  // namespace
}  // namespace strata::engine
