// Encode throughput, single thread, on a corpus file: the same document split as
// tests/js/tokenizer/bench_encode.mjs (lines, each encoded with its "\n"), so the token counts
// of the two programs must agree.
//   tokenizer_bench VOCAB_DIR CORPUS_FILE  ->  "strata <dir name> <MB/s> MB/s (<n> tokens)"
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s VOCAB_DIR CORPUS_FILE\n", argv[0]);
    return 2;
  }
  auto tok = strata::engine::Tokenizer::LoadFromDir(argv[1]);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::vector<std::string_view> docs;
  for (size_t start = 0;;) {
    const size_t nl = text.find('\n', start);
    if (nl == std::string::npos) break;
    docs.push_back(std::string_view(text).substr(start, nl + 1 - start));
    start = nl + 1;
  }
  const size_t last = text.rfind('\n');
  // bench_encode.mjs encodes the piece after the last newline plus "\n" as one more document.
  const std::string tail = text.substr(last == std::string::npos ? 0 : last + 1) + "\n";
  docs.push_back(tail);
  double best_seconds = 1e30;
  size_t tokens = 0;
  for (int rep = 0; rep < 3; ++rep) {
    tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (std::string_view doc : docs) tokens += (*tok)->Encode(doc).size();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best_seconds = std::min(best_seconds, seconds);
  }
  const double mb = static_cast<double>(text.size()) / (1024.0 * 1024.0);
  std::string name = argv[1];
  while (!name.empty() && name.back() == '/') name.pop_back();
  name = name.substr(name.find_last_of('/') + 1);
  std::printf("strata %s %.3f MB/s (%zu tokens)\n", name.c_str(), mb / best_seconds, tokens);
  return 0;
}
