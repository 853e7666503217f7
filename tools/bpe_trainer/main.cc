// strata-train-bpe: trains a byte-level BPE vocabulary and writes a tokenizer directory.
//
//   strata-train-bpe --out DIR
//       The demo checkpoint's tokenizer (embedded corpus, 8192 ids; see demo_tokenizer.h).
//   strata-train-bpe --out DIR --vocab-size N --text FILE [--text FILE ...]
//       N BPE tokens learnt from the FILEs (Kimi's pre-tokenizer pattern); writes only
//       DIR/tiktoken.model.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/bpe_vocab.h"
#include "engine/tokenizer/pretokenizer.h"
#include "tools/bpe_trainer/bpe_trainer.h"
#include "tools/bpe_trainer/demo_tokenizer.h"

namespace {

constexpr char kUsage[] =
    "usage: strata-train-bpe --out DIR                      (demo tokenizer, 8192 ids)\n"
    "       strata-train-bpe --out DIR --vocab-size N --text FILE [--text FILE ...]\n"
    "                                                      (tiktoken.model only)\n";

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
  auto tokens = strata::tools::TrainBpe(views, **pre, vocab_size);
  if (!tokens.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tokens.status().message()).c_str());
    return 1;
  }
  auto vocab = strata::engine::BpeVocab::FromTokens(*tokens);
  std::filesystem::create_directories(out);
  std::ofstream(out + "/tiktoken.model", std::ios::binary) << (*vocab)->ToTiktoken();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  size_t vocab_size = 0;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n%s", arg.c_str(), kUsage);
      return 2;
    }
    if (arg == "--out") {
      out = argv[++i];
    } else if (arg == "--vocab-size") {
      vocab_size = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--text") {
      files.push_back(argv[++i]);
    } else {
      std::fprintf(stderr, "unknown argument %s\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  if (out.empty() || (files.empty() != (vocab_size == 0))) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  int rc = 0;
  if (files.empty()) {
    absl::Status s = strata::tools::WriteDemoTokenizer(out);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      rc = 1;
    }
  } else {
    rc = TrainCustom(out, vocab_size, files);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rc == 0) std::fprintf(stderr, "wrote %s in %.2f s\n", out.c_str(), seconds);
  return rc;
}
