// strata-train-bpe: trains a byte-level BPE vocabulary and writes a tokenizer directory.
//
// `--out DIR [--chat-format k3|k2]`: the demo checkpoint's tokenizer (embedded corpus, 8192 ids;
// demo_tokenizer.h) with Kimi K3's control tokens (default) or Kimi K2's tokens and template.
// `--out DIR --vocab-size N --text FILE [--text FILE ...]`: N BPE tokens learnt from the FILEs
// (Kimi's pre-tokenizer pattern); writes only DIR/tiktoken.model.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/status.h"
#include "engine/demo/bpe_trainer.h"
#include "engine/demo/demo_tokenizer.h"
#include "engine/tokenizer/bpe_vocab.h"
#include "engine/tokenizer/pretokenizer.h"

namespace {

const strata::CommandSpec& Spec() {
  static const strata::CommandSpec spec = {
      .program = "strata-train-bpe",
      .description = "train a byte-level BPE vocabulary and write a tokenizer directory",
      .flags =
          {
              {"out", true, "the directory to write (required)"},
              {"vocab-size", true, "BPE tokens to learn from the --text files"},
              {"text", true, "a training file (repeatable); with --vocab-size"},
              {"chat-format", true,
               "k3 | k2: the demo tokenizer's special tokens (default k3: Kimi K3's XTML control "
               "tokens, no chat template; k2: Kimi K2's tokens and Strata's built-in template)"},
          },
      .required = {"out"},
      .notes =
          "Without --text: the demo checkpoint's tokenizer (embedded corpus, 8192 ids).\n"
          "With --vocab-size N --text FILE...: only DIR/tiktoken.model.",
  };
  return spec;
}

int TrainCustom(const std::string& out, size_t vocab_size, const std::vector<std::string>& files) {
  std::vector<std::string> texts;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot open %s\n", f.c_str());
      return 1;
    }
    std::stringstream buffer;
    buffer << in.rdbuf();
    texts.push_back(buffer.str());
  }
  std::vector<std::string_view> views(texts.begin(), texts.end());
  auto pre = strata::engine::PreTokenizer::Create(strata::engine::KimiPatternOriginal());
  auto tokens = strata::engine::demo::TrainBpe(views, **pre, vocab_size);
  if (!tokens.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tokens.status().message()).c_str());
    return 1;
  }
  auto vocab = strata::engine::BpeVocab::FromTokens(*tokens);
  std::filesystem::create_directories(out);
  std::ofstream(out + "/tiktoken.model", std::ios::binary) << (*vocab)->ToTiktoken();
  return 0;
}

absl::Status Run(const strata::Flags& flags) {
  const std::string out = flags.GetOr("out", "");
  const std::vector<std::string> files = flags.GetAll("text");
  ASSIGN_OR_RETURN(const int64_t vocab_size, flags.GetInt("vocab-size", 0, 0, 1 << 24));
  if (files.empty() != (vocab_size == 0)) {
    return absl::InvalidArgumentError("--vocab-size and --text go together");
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string format = flags.GetOr("chat-format", "k3");
  if (format != "k3" && format != "k2") {
    return absl::InvalidArgumentError("--chat-format: must be k3 or k2, got '" + format + "'");
  }
  if (files.empty()) {
    RETURN_IF_ERROR(strata::engine::demo::WriteDemoTokenizer(
        out, format == "k3" ? strata::engine::demo::DemoChatFormat::kKimiK3
                            : strata::engine::demo::DemoChatFormat::kKimiK2));
  } else if (TrainCustom(out, static_cast<size_t>(vocab_size), files) != 0) {
    return absl::InternalError("training failed");
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "wrote %s in %.2f s\n", out.c_str(), seconds);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  return strata::RunCommand(Spec(), std::vector<std::string>(argv + 1, argv + argc), Run);
}
