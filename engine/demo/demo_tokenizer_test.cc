#include "engine/demo/demo_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/xtml_renderer.h"

namespace strata::engine::demo {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class DemoTokenizerTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    std::filesystem::remove_all(*k2_dir_);
  }
  static void SetUpTestSuite() {
    // Per process: ctest runs this binary's tests in parallel, each writing the tokenizer.
    const std::string base = ::testing::TempDir() + "/demo_tokenizer_" + std::to_string(getpid());
    dir_ = new std::string(base + "_k3");
    k2_dir_ = new std::string(base + "_k2");
    const auto start = std::chrono::steady_clock::now();
    status_ = new absl::Status(WriteDemoTokenizer(*dir_, DemoChatFormat::kKimiK3));
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    k2_status_ = new absl::Status(WriteDemoTokenizer(*k2_dir_, DemoChatFormat::kKimiK2));
  }
  static std::string* dir_;
  static std::string* k2_dir_;
  static absl::Status* status_;
  static absl::Status* k2_status_;
  static double seconds_;
};
std::string* DemoTokenizerTest::dir_ = nullptr;
std::string* DemoTokenizerTest::k2_dir_ = nullptr;
absl::Status* DemoTokenizerTest::status_ = nullptr;
absl::Status* DemoTokenizerTest::k2_status_ = nullptr;
double DemoTokenizerTest::seconds_ = 0;

TEST_F(DemoTokenizerTest, TrainsInSecondsFromTheShippedCorpus) {
  ASSERT_TRUE(status_->ok()) << *status_;
  EXPECT_LT(seconds_, 30.0);
  EXPECT_GT(DemoCorpus().size(), 100000u);
  EXPECT_LT(DemoCorpus().size(), 1u << 20);
}

TEST_F(DemoTokenizerTest, HasEightThousandIdsWithK3ControlTokensOnTop) {
  ASSERT_TRUE(status_->ok()) << *status_;
  auto tok = engine::Tokenizer::LoadFromDir(*dir_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const engine::Tokenizer& t = **tok;
  EXPECT_EQ(t.vocab_size(), 8192);
  EXPECT_EQ(t.bpe().num_tokens(), 7936u);
  // K3's control block (163584 + offset) moved to 7936 + offset.
  EXPECT_EQ(t.bos_id(), 7936);
  EXPECT_EQ(t.eos_id(), 7938);  // <|end_of_msg|>
  EXPECT_EQ(t.SpecialTokenId("[EOS]"), 7937);
  EXPECT_EQ(t.SpecialTokenId("<|open|>"), 7939);
  EXPECT_EQ(t.SpecialTokenId("<|close|>"), 7940);
  EXPECT_EQ(t.SpecialTokenId("<|sep|>"), 7941);
  EXPECT_EQ(t.SpecialTokenId("<|media_begin|>"), 7954);
  EXPECT_EQ(t.SpecialTokenId("<|media_pad|>"), 7957);
  EXPECT_EQ(t.SpecialTokenId("<|reserved_token_7942|>"), 7942);
  EXPECT_EQ(t.SpecialTokenId("[PAD]"), 8191);
  EXPECT_FALSE(t.SpecialTokenId("<|im_end|>").has_value());
  EXPECT_FALSE(t.SpecialTokenId("<think>").has_value());
  EXPECT_TRUE(t.IsSpecial(7939));
  EXPECT_TRUE(t.config().chat_templates.empty());
  EXPECT_TRUE(t.config().kimi_tokenizer);
}

TEST_F(DemoTokenizerTest, PromptsInK3Format) {
  ASSERT_TRUE(status_->ok()) << *status_;
  auto tok = engine::Tokenizer::LoadFromDir(*dir_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_TRUE(engine::UsesXtml(**tok));
  auto tmpl = engine::ChatTemplate::ForTokenizer(**tok, false);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  engine::ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  in.add_generation_prompt = true;
  auto prompt = tmpl->RenderPrompt(in);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  // No default system prompt: the thinking-effort message (thinking on, effort max), the user's
  // message, then the generation prompt opening the think channel.
  const std::string& text = prompt->text;
  EXPECT_EQ(text.rfind("<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>", 0), 0u)
      << text;
  const std::string tail =
      "`thinking_effort=max`.<|close|>message<|sep|><|end_of_msg|><|open|>message "
      "role=\"user\"<|sep|>Hi<|close|>message"
      "<|sep|><|end_of_msg|><|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>";
  ASSERT_GE(text.size(), tail.size());
  EXPECT_EQ(text.substr(text.size() - tail.size()), tail);
  const std::vector<int32_t> ids = engine::EncodePrompt(**tok, *prompt);
  EXPECT_EQ(ids.back(), 7941);           // <|sep|>
  EXPECT_EQ(ids[ids.size() - 3], 7939);  // <|open|> think <|sep|>
}

TEST_F(DemoTokenizerTest, HasEightThousandIdsWithK2SpecialsOnTop) {
  ASSERT_TRUE(k2_status_->ok()) << *k2_status_;
  auto tok = engine::Tokenizer::LoadFromDir(*k2_dir_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const engine::Tokenizer& t = **tok;
  EXPECT_EQ(t.vocab_size(), 8192);
  EXPECT_EQ(t.bpe().num_tokens(), 7936u);
  EXPECT_EQ(t.bos_id(), 7936);
  EXPECT_EQ(t.eos_id(), 7937);
  EXPECT_EQ(t.SpecialTokenId("<|im_end|>"), 7938);
  EXPECT_EQ(t.SpecialTokenId("<|im_middle|>"), 7942);
  EXPECT_EQ(t.SpecialTokenId("<|tool_calls_section_begin|>"), 7943);
  EXPECT_EQ(t.SpecialTokenId("<|tool_call_end|>"), 7947);
  EXPECT_EQ(t.SpecialTokenId("<|reserved_token_8191|>"), 8191);
  EXPECT_TRUE(t.IsSpecial(7938));
  EXPECT_FALSE(t.IsSpecial(*t.SpecialTokenId("<think>")));
  EXPECT_TRUE(t.config().kimi_tokenizer);
}

TEST_F(DemoTokenizerTest, EncodesTextCompactlyAndRoundTrips) {
  ASSERT_TRUE(status_->ok()) << *status_;
  auto tok = engine::Tokenizer::LoadFromDir(*dir_);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string sample =
      "The scheduler never calls the executor. 上善若水。 Я вас любил. <|close|> 😀";
  const std::vector<int32_t> ids = (*tok)->Encode(sample, {.parse_special = true});
  EXPECT_EQ(*(*tok)->Decode(ids), sample);
  EXPECT_LT(ids.size(), sample.size() / 2);
  const std::vector<int32_t> corpus_ids = (*tok)->Encode(DemoCorpus());
  EXPECT_LT(corpus_ids.size() * 3, DemoCorpus().size());  // > 3 bytes per token
}

TEST_F(DemoTokenizerTest, K2FormatShipsTheBuiltinChatTemplate) {
  ASSERT_TRUE(k2_status_->ok()) << *k2_status_;
  auto tok = engine::Tokenizer::LoadFromDir(*k2_dir_);
  ASSERT_TRUE(tok.ok());
  auto tmpl = engine::ChatTemplate::ForTokenizer(**tok, false);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  engine::ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  in.add_generation_prompt = true;
  auto prompt = tmpl->Render(in);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(prompt->substr(prompt->size() - 38), "<|im_assistant|>assistant<|im_middle|>");
  const auto ids = (*tok)->Encode(*prompt, {.parse_special = true});
  EXPECT_EQ(ids.back(), 7942);  // <|im_middle|>
}

TEST_F(DemoTokenizerTest, OutputIsByteIdenticalAcrossRuns) {
  ASSERT_TRUE(status_->ok()) << *status_;
  const std::string again =
      ::testing::TempDir() + "/demo_tokenizer_again_" + std::to_string(getpid());
  ASSERT_TRUE(WriteDemoTokenizer(again, DemoChatFormat::kKimiK3).ok());
  for (const char* name : {"/tiktoken.model", "/tokenizer_config.json"}) {
    EXPECT_EQ(ReadAll(*dir_ + name), ReadAll(again + name)) << name;
  }
  std::filesystem::remove_all(again);
}

}  // namespace
}  // namespace strata::engine::demo
