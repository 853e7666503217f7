#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/tokenizer/bpe_vocab.h"
#include "server/cli/commands.h"

namespace strata::cli {
namespace {

class TokenizerCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory per test and process: ctest runs the tests of this binary in parallel.
    dir_ = ::testing::TempDir() + "/cli_model_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    for (const char* t : {"he", "ll", "hell", "hello", " w"}) tokens.emplace_back(t);
    Write("tiktoken.model", (*engine::BpeVocab::FromTokens(tokens))->ToTiktoken());
    Write("tokenizer_config.json", R"({
      "added_tokens_decoder": {"261": {"content": "[BOS]", "special": true},
                               "262": {"content": "<|im_end|>", "special": true}},
      "bos_token": "[BOS]", "add_bos_token": true,
      "chat_template": "{% for m in messages %}{{ m.role }}:{{ m.content }}<|im_end|>{% endfor %}{% if tools %}T{{ tools | length }}{% endif %}{% if add_generation_prompt %}>{% endif %}"
    })");
    Write("text.txt", "hello world<|im_end|>");
    Write("messages.json", R"([{"role": "user", "content": "hi"}])");
    Write("tools.json", R"([{"type": "function", "function": {"name": "f"}}])");
    Write("bad.json", R"([{"content": "no role"}])");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << text;
  }
  // Runs `command` and returns (exit code, stdout).
  std::pair<int, std::string> Run(int (*command)(const std::vector<std::string>&),
                                  std::vector<std::string> args) {
    ::testing::internal::CaptureStdout();
    const int rc = command(args);
    return {rc, ::testing::internal::GetCapturedStdout()};
  }
  std::string dir_;
};

TEST_F(TokenizerCommandsTest, TokenizePrintsOneJsonArray) {
  auto [rc, out] = Run(TokenizeCommand, {"--model", dir_, "--text-file", dir_ + "/text.txt"});
  EXPECT_EQ(rc, 0);
  // Special text stays ordinary without --add-special-tokens.
  EXPECT_EQ(out.substr(0, 29), "[259,260,111,114,108,100,60,1");
  auto [rc2, out2] = Run(TokenizeCommand, {"--model=" + dir_, "--text-file", dir_ + "/text.txt",
                                           "--add-special-tokens"});
  EXPECT_EQ(rc2, 0);
  EXPECT_EQ(out2, "[261,259,260,111,114,108,100,262]\n");
}

TEST_F(TokenizerCommandsTest, DetokenizePrintsTextExactly) {
  auto [rc, out] = Run(DetokenizeCommand, {"--model", dir_, "--ids", "261,259,260,262"});
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "[BOS]hello w<|im_end|>");
  auto [rc2, out2] =
      Run(DetokenizeCommand, {"--model", dir_, "--ids", "261,259,262", "--skip-special-tokens"});
  EXPECT_EQ(out2, "hello");
  EXPECT_EQ(Run(DetokenizeCommand, {"--model", dir_, "--ids", "1,x"}).first, 2);
  EXPECT_EQ(Run(DetokenizeCommand, {"--model", dir_, "--ids", "9999"}).first, 1);
}

TEST_F(TokenizerCommandsTest, ChatTemplatePrintsPromptWithoutTrailingNewline) {
  auto [rc, out] =
      Run(ChatTemplateCommand, {"--model", dir_, "--messages-file", dir_ + "/messages.json",
                                "--add-generation-prompt", "--tools-file", dir_ + "/tools.json"});
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "user:hi<|im_end|>T1>");
  EXPECT_EQ(
      Run(ChatTemplateCommand, {"--model", dir_, "--messages-file", dir_ + "/bad.json"}).first, 1);
}

TEST_F(TokenizerCommandsTest, ChatTemplateTokenIdsAreOneJsonArray) {
  // The Jinja template's output is encoded with its special-token text recognised.
  auto [rc, out] = Run(ChatTemplateCommand, {"--model", dir_, "--messages-file",
                                             dir_ + "/messages.json", "--token-ids"});
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "[117,115,101,114,58,104,105,262]\n");  // "user:hi" <|im_end|>
}

TEST_F(TokenizerCommandsTest, ChatTemplateRendersKimiK3AsXtmlWithSegmentWiseIds) {
  const std::string k3 = dir_ + "/k3";
  std::filesystem::create_directories(k3);
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(k3 + "/" + name, std::ios::binary) << text;
  };
  write("tiktoken.model", (*engine::BpeVocab::FromTokens(tokens))->ToTiktoken());
  // The control tokens at small ids: the command takes them from the tokenizer.
  write("tokenizer_config.json", R"({"added_tokens_decoder": {
      "256": {"content": "<|end_of_msg|>", "special": true},
      "257": {"content": "<|open|>", "special": true},
      "258": {"content": "<|close|>", "special": true},
      "259": {"content": "<|sep|>", "special": true}}})");
  write("config.json", R"({"model_type": "kimi_k3"})");
  write("messages.json", R"([{"role": "user", "content": "<|sep|>"}])");
  write("kwargs.json", R"({"thinking": false})");
  const std::vector<std::string> args = {"--model",
                                         k3,
                                         "--messages-file",
                                         k3 + "/messages.json",
                                         "--kwargs-file",
                                         k3 + "/kwargs.json",
                                         "--add-generation-prompt"};
  auto [rc, out] = Run(ChatTemplateCommand, args);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, R"(<|open|>message role="user"<|sep|><|sep|><|close|>message<|sep|><|end_of_msg|>)"
                 R"(<|open|>message role="assistant"<|sep|><|open|>response<|sep|>)");

  std::vector<std::string> with_ids = args;
  with_ids.push_back("--token-ids");
  auto [rc2, out2] = Run(ChatTemplateCommand, with_ids);
  EXPECT_EQ(rc2, 0);
  // Hand-built: markers as their ids, all other text as its bytes; the user's "<|sep|>" is text.
  std::vector<int> ids;
  auto text = [&](std::string_view s) {
    for (unsigned char c : s) ids.push_back(c);
  };
  ids.push_back(257);
  text("message role=\"user\"");
  ids.push_back(259);
  text("<|sep|>");
  ids.push_back(258);
  text("message");
  ids.push_back(259);
  ids.push_back(256);
  ids.push_back(257);
  text("message role=\"assistant\"");
  ids.push_back(259);
  ids.push_back(257);
  text("response");
  ids.push_back(259);
  std::string expected = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) expected += ',';
    expected += std::to_string(ids[i]);
  }
  EXPECT_EQ(out2, expected + "]\n");

  // A bad effort is a runtime error naming the accepted values.
  write("kwargs.json", R"({"thinking_effort": "medium"})");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(Run(ChatTemplateCommand, args).first, 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), ::testing::HasSubstr("low, high, max"));
}

TEST_F(TokenizerCommandsTest, UsageErrorsReturnTwo) {
  EXPECT_EQ(Run(TokenizeCommand, {"--model", dir_}).first, 2);
  EXPECT_EQ(Run(TokenizeCommand, {"--bogus"}).first, 2);
  EXPECT_EQ(Run(ChatTemplateCommand, {"--model"}).first, 2);
  EXPECT_EQ(Run(TokenizeCommand, {"--model", dir_ + "/missing", "--text-file", "x"}).first, 1);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(Run(DetokenizeCommand, {"--model", dir_, "--bogus"}).first, 2);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "strata detokenize: unknown flag --bogus\nsee `strata detokenize --help`\n");
}

TEST_F(TokenizerCommandsTest, HelpListsEveryFlagOnStdout) {
  for (const auto& [command, flags] :
       std::vector<std::pair<int (*)(const std::vector<std::string>&), std::vector<std::string>>>{
           {TokenizeCommand, {"--model", "--text-file", "--add-special-tokens", "--parse-special"}},
           {DetokenizeCommand, {"--model", "--ids", "--skip-special-tokens"}},
           {ChatTemplateCommand,
            {"--model", "--messages-file", "--tools-file", "--kwargs-file",
             "--add-generation-prompt", "--token-ids"}}}) {
    auto [rc, out] = Run(command, {"--help"});
    EXPECT_EQ(rc, 0);
    EXPECT_THAT(out, ::testing::StartsWith("usage: strata "));
    for (const std::string& flag : flags) EXPECT_THAT(out, ::testing::HasSubstr(flag + " "));
  }
}

}  // namespace
}  // namespace strata::cli
