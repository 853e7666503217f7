// The `strata` binary: subcommand dispatch. Flags and environment are read only here and in
// server/cli/ (docs/style.md): library code receives typed options.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "engine/tokenizer/cli_commands.h"
#include "server/cli/commands.h"
#include "server/cli/serve_command.h"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(const std::vector<std::string>&);
  const char* help;
};

const Subcommand kSubcommands[] = {
    {"generate", strata::cli::GenerateCommand,
     "generate token ids after --prompt-ids (JSON array on stdout)"},
    {"logits", strata::cli::LogitsCommand,
     "write float32 logits [positions, vocab] of --ids-file to --out (.npy)"},
    {"bench", strata::cli::BenchCommand,
     "prefill and decode tokens/s through the engine, next to the roofline floor"},
    {"quantize", strata::cli::QuantizeCommand,
     "write --model's checkpoint with MXFP4 routed experts to --out (K3's release format)"},
    {"tokenize", strata::engine::TokenizeCommand,
     "print the token ids of --text-file as one JSON array"},
    {"detokenize", strata::engine::DetokenizeCommand, "print the text of --ids"},
    {"chat-template", strata::engine::ChatTemplateCommand,
     "render --messages-file with the checkpoint's chat template"},
    {"serve", strata::cli::ServeCommand,
     "OpenAI-compatible HTTP server (default: the embedded demo model on port 8000)"},
    {"run-batch", strata::cli::RunBatchCommand,
     "run an OpenAI Batch file (-i requests.jsonl -o results.jsonl) through the engine"},
};

void PrintUsage(FILE* out) {
  std::fprintf(out, "usage: strata <command> [flags]\n\ncommands:\n");
  for (const Subcommand& c : kSubcommands) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
  std::fprintf(out, "\n`strata <command> --help` lists a command's flags. CPU: %s\n",
               strata::DescribeCpu().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const Subcommand& c : kSubcommands) {
    if (std::strcmp(argv[1], c.name) == 0) return c.run(args);
  }
  std::fprintf(stderr, "strata: unknown command '%s'\n\n", argv[1]);
  PrintUsage(stderr);
  return 2;
}
