// `strata parse-output`: expected JSON written by hand from the K3 rules (docs/k3-format.md
// "Output") and from Kimi K2's <think> / tool-call tokens.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "engine/tokenizer/bpe_vocab.h"
#include "server/cli/commands.h"

namespace strata::cli {
namespace {

class ParseOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/parse_output_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    const std::string vocab = (*engine::BpeVocab::FromTokens(tokens))->ToTiktoken();
    // A K3-shaped checkpoint: config.json model_type kimi_k3, the XTML control tokens.
    Write("k3/tiktoken.model", vocab);
    Write("k3/tokenizer_config.json", R"({"added_tokens_decoder": {
        "256": {"content": "<|end_of_msg|>", "special": true},
        "257": {"content": "<|open|>", "special": true},
        "258": {"content": "<|close|>", "special": true},
        "259": {"content": "<|sep|>", "special": true}}})");
    Write("k3/config.json", R"({"model_type": "kimi_k3"})");
    // A K2-shaped one: <think> tokens and Kimi's tool-call tokens, and a config that says
    // kimi_k3 without the XTML control tokens (as the demo checkpoint): still read as K2.
    Write("k2/config.json", R"({"model_type": "kimi_k3"})");
    Write("k2/tiktoken.model", vocab);
    Write("k2/tokenizer_config.json", R"({"added_tokens_decoder": {
        "256": {"content": "<think>", "special": false},
        "257": {"content": "</think>", "special": false},
        "258": {"content": "<|tool_calls_section_begin|>", "special": true},
        "259": {"content": "<|tool_calls_section_end|>", "special": true},
        "260": {"content": "<|tool_call_begin|>", "special": true},
        "261": {"content": "<|tool_call_argument_begin|>", "special": true},
        "262": {"content": "<|tool_call_end|>", "special": true}},
        "chat_template": "{{ messages }}"})");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(dir_ + "/" + name).parent_path());
    std::ofstream(dir_ + "/" + name, std::ios::binary) << text;
  }
  // Runs the command with `input` on stdin; (exit code, stdout).
  std::pair<int, std::string> Run(const std::string& input, std::vector<std::string> args) {
    std::istringstream in(input);
    std::streambuf* old = std::cin.rdbuf(in.rdbuf());
    ::testing::internal::CaptureStdout();
    const int rc = ParseOutputCommand(args);
    std::string out = ::testing::internal::GetCapturedStdout();
    std::cin.rdbuf(old);
    return {rc, out};
  }
  // The output for `input`, checked to be the same whole and in 1- and 7-character chunks.
  std::string Parse(const std::string& model, const std::string& input, const std::string& thinking,
                    const std::string& tools, const std::string& choice) {
    const std::vector<std::string> args = {
        "--model", dir_ + "/" + model, "--thinking", thinking, "--tools",
        tools,     "--tool-choice",    choice};
    auto [rc, whole] = Run(input, args);
    EXPECT_EQ(rc, 0);
    for (const char* chunk : {"1", "7"}) {
      std::vector<std::string> chunked = args;
      chunked.insert(chunked.end(), {"--chunk", chunk});
      auto [rc2, out] = Run(input, chunked);
      EXPECT_EQ(rc2, 0);
      EXPECT_EQ(out, whole) << "--chunk " << chunk;
    }
    return whole;
  }
  std::string dir_;
};

const std::string kK3Reply =
    "Paris weather?<|close|>think<|sep|><|open|>response<|sep|>  <|close|>response<|sep|>"
    "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
    "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris \"Île\"<|close|>argument<|sep|>"
    "<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|>"
    "<|close|>call<|sep|><|open|>call tool=\"now\" index=\"2\"<|sep|><|close|>call<|sep|>"
    "<|close|>tools<|sep|><|close|>message<|sep|>";

TEST_F(ParseOutputTest, KimiK3ReasoningAndToolCalls) {
  // Content that is only whitespace beside tool calls is null (vLLM's kimi_k3 parser).
  EXPECT_EQ(
      Parse("k3", kK3Reply, "true", "true", "auto"),
      R"({"reasoning_content":"Paris weather?","content":null,"tool_calls":[)"
      R"({"name":"get_weather","arguments":"{\"city\": \"Paris \\\"Île\\\"\", \"days\": 3}"},)"
      R"({"name":"now","arguments":"{}"}]})"
      "\n");
  // tool_choice none, or no tools: the tools channel is dropped; the content stays.
  const std::string no_calls =
      R"({"reasoning_content":"Paris weather?","content":"  ","tool_calls":[]})"
      "\n";
  EXPECT_EQ(Parse("k3", kK3Reply, "true", "true", "none"), no_calls);
  EXPECT_EQ(Parse("k3", kK3Reply, "true", "false", "auto"), no_calls);
}

TEST_F(ParseOutputTest, KimiK3ThinkingOffAndTruncation) {
  EXPECT_EQ(Parse("k3", "Hi there<|close|>response<|sep|><|close|>message<|sep|>", "false", "true",
                  "auto"),
            R"({"reasoning_content":null,"content":"Hi there","tool_calls":[]})"
            "\n");
  // Cut off inside the think channel: the reasoning is kept, the cut marker dropped.
  EXPECT_EQ(Parse("k3", "Still thinking<|close|>thi", "true", "true", "auto"),
            R"({"reasoning_content":"Still thinking","content":null,"tool_calls":[]})"
            "\n");
  // A call cut off: dropped, never shown.
  EXPECT_EQ(Parse("k3",
                  "Let me check.<|close|>response<|sep|><|open|>tools<|sep|><|open|>call "
                  "tool=\"f\"<|sep|><|open|>argument key=\"a\"<|sep|>x",
                  "false", "true", "auto"),
            R"({"reasoning_content":null,"content":"Let me check.","tool_calls":[]})"
            "\n");
}

TEST_F(ParseOutputTest, KimiK2ThinkAndToolCallTokens) {
  EXPECT_EQ(Parse("k2",
                  "Hmm.</think>Sure<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
                  "<|tool_call_argument_begin|>{\"a\": 1}<|tool_call_end|>"
                  "<|tool_calls_section_end|>",
                  "true", "true", "auto"),
            R"({"reasoning_content":"Hmm.","content":"Sure","tool_calls":[)"
            R"({"name":"f","arguments":"{\"a\": 1}"}]})"
            "\n");
  EXPECT_EQ(Parse("k2", "plain answer", "false", "false", "none"),
            R"({"reasoning_content":null,"content":"plain answer","tool_calls":[]})"
            "\n");
}

TEST_F(ParseOutputTest, BadFlagValuesAreUsageErrorsNamingTheAcceptedValues) {
  for (const auto& [flag, value, accepted] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--thinking", "yes", "true or false"},
           {"--tools", "1", "true or false"},
           {"--tool-choice", "required", "auto or none"},
           {"--chunk", "0", "--chunk"}}) {
    std::vector<std::string> args = {"--model", dir_ + "/k3", "--thinking",    "true",
                                     "--tools", "true",       "--tool-choice", "auto"};
    bool replaced = false;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == flag) {
        args[i + 1] = value;
        replaced = true;
      }
    }
    if (!replaced) args.insert(args.end(), {flag, value});
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(Run("x", args).first, 2) << flag;
    EXPECT_THAT(::testing::internal::GetCapturedStderr(), ::testing::HasSubstr(accepted));
  }
  // A model that cannot be read is a runtime error.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(Run("x", {"--model", dir_ + "/missing", "--thinking", "true", "--tools", "true",
                      "--tool-choice", "auto"})
                .first,
            1);
  ::testing::internal::GetCapturedStderr();
}

TEST_F(ParseOutputTest, HelpListsTheFlags) {
  auto [rc, out] = Run("", {"--help"});
  EXPECT_EQ(rc, 0);
  for (const char* flag : {"--model ", "--thinking ", "--tools ", "--tool-choice ", "--chunk "}) {
    EXPECT_THAT(out, ::testing::HasSubstr(flag));
  }
}

}  // namespace
}  // namespace strata::cli
