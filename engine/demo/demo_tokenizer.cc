#include "engine/demo/demo_tokenizer.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "engine/demo/bpe_trainer.h"
#include "engine/tokenizer/bpe_vocab.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/xtml_markers.h"

namespace strata::engine::demo {
namespace {

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

bool IsSpecialFlag(const std::string& token) { return token != "<think>" && token != "</think>"; }

// K3's control block (docs/k3-format.md): named ids at their offsets from its first id, the
// rest reserved.
std::vector<std::string> K3SpecialTokens() {
  std::vector<std::string> tokens(kDemoNumSpecialTokens);
  for (int32_t i = 0; i < kDemoNumSpecialTokens; ++i) {
    tokens[i] = absl::StrCat("<|reserved_token_", kDemoNumBpeTokens + i, "|>");
  }
  tokens[0] = "[BOS]";
  tokens[1] = "[EOS]";
  tokens[2] = std::string(xtml::kEndOfMessage);
  tokens[3] = std::string(xtml::kOpen);
  tokens[4] = std::string(xtml::kClose);
  tokens[5] = std::string(xtml::kSep);
  tokens[kK3MediaBeginIndex] = std::string(xtml::kMediaBegin);
  tokens[kK3MediaContentIndex] = std::string(xtml::kMediaContent);
  tokens[kK3MediaEndIndex] = std::string(xtml::kMediaEnd);
  tokens[kK3MediaPadIndex] = std::string(xtml::kMediaPad);
  tokens[kDemoNumSpecialTokens - 1] = "[PAD]";
  return tokens;
}

// Kimi K2's special tokens (Kimi-Linear's format), then reserved ones.
std::vector<std::string> K2SpecialTokens() {
  std::vector<std::string> tokens = {"[BOS]",
                                     "[EOS]",
                                     "<|im_end|>",
                                     "<|im_user|>",
                                     "<|im_assistant|>",
                                     "<|im_system|>",
                                     "<|im_middle|>",
                                     "<|tool_calls_section_begin|>",
                                     "<|tool_calls_section_end|>",
                                     "<|tool_call_begin|>",
                                     "<|tool_call_argument_begin|>",
                                     "<|tool_call_end|>",
                                     "[PAD]",
                                     "[UNK]",
                                     "<think>",
                                     "</think>",
                                     "<|media_start|>",
                                     "<|media_content|>",
                                     "<|media_end|>",
                                     "<|media_pad|>"};
  for (int32_t id = kDemoNumBpeTokens + static_cast<int32_t>(tokens.size()); id < kDemoVocabSize;
       ++id) {
    tokens.push_back(absl::StrCat("<|reserved_token_", id, "|>"));
  }
  return tokens;
}

// tokenizer_config.json without added_tokens_decoder: K3's names its control tokens and ships
// no chat template (the XTML renderer prompts it); K2's carries Strata's built-in template.
nlohmann::ordered_json FormatConfig(DemoChatFormat format) {
  if (format == DemoChatFormat::kKimiK3) {
    return {{"bos_token", "[BOS]"},
            {"eos_token", std::string(xtml::kEndOfMessage)},
            {"pad_token", "[PAD]"}};
  }
  return {{"additional_special_tokens",
           {"<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>"}},
          {"bos_token", "[BOS]"},
          {"chat_template", std::string(engine::BuiltinKimiChatTemplate())},
          {"eos_token", "[EOS]"},
          {"pad_token", "[PAD]"},
          {"unk_token", "[UNK]"}};
}

}  // namespace

std::vector<std::string> DemoSpecialTokens(DemoChatFormat format) {
  return format == DemoChatFormat::kKimiK3 ? K3SpecialTokens() : K2SpecialTokens();
}

absl::StatusOr<std::vector<std::string>> TrainDemoVocabulary() {
  absl::StatusOr<std::unique_ptr<engine::PreTokenizer>> pre =
      engine::PreTokenizer::Create(engine::KimiPatternOriginal());
  if (!pre.ok()) return pre.status();
  return TrainBpe({DemoCorpus()}, **pre, kDemoNumBpeTokens);
}

absl::Status WriteDemoTokenizer(const std::string& dir, DemoChatFormat format) {
  absl::StatusOr<std::vector<std::string>> tokens = TrainDemoVocabulary();
  if (!tokens.ok()) return tokens.status();
  absl::StatusOr<std::shared_ptr<const engine::BpeVocab>> vocab =
      engine::BpeVocab::FromTokens(*tokens);
  if (!vocab.ok()) return vocab.status();

  nlohmann::ordered_json added = nlohmann::ordered_json::object();
  const std::vector<std::string> specials = DemoSpecialTokens(format);
  for (size_t i = 0; i < specials.size(); ++i) {
    added[std::to_string(kDemoNumBpeTokens + static_cast<int32_t>(i))] = {
        {"content", specials[i]}, {"lstrip", false},      {"normalized", false},
        {"rstrip", false},        {"single_word", false}, {"special", IsSpecialFlag(specials[i])}};
  }
  nlohmann::ordered_json config = FormatConfig(format);
  config["added_tokens_decoder"] = std::move(added);
  config["auto_map"] = {{"AutoTokenizer", {"tokenization_kimi.TikTokenTokenizer", nullptr}}};
  config["clean_up_tokenization_spaces"] = false;
  config["model_max_length"] = 1048576;
  config["pat_str"] = std::string(engine::KimiPatternOriginal());
  config["tokenizer_class"] = "TikTokenTokenizer";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  if (absl::Status s = WriteFile(dir + "/tiktoken.model", (*vocab)->ToTiktoken()); !s.ok())
    return s;
  return WriteFile(dir + "/tokenizer_config.json", config.dump(2) + "\n");
}

}  // namespace strata::engine::demo
