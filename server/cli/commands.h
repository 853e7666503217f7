// `strata` subcommands. Each takes the arguments after its name, prints its result to stdout
// (machine-readable) and diagnostics to stderr, and returns the process exit code.
#pragma once

#include <string>
#include <vector>

namespace strata::cli {

int GenerateCommand(const std::vector<std::string>& args);
int LogitsCommand(const std::vector<std::string>& args);
int BenchCommand(const std::vector<std::string>& args);
// A checkpoint's bf16 routed experts written as MXFP4 (llama-quantize's step for this family).
int QuantizeCommand(const std::vector<std::string>& args);
// vLLM's run_batch: an OpenAI Batch file through the serving engine, no network.
int RunBatchCommand(const std::vector<std::string>& args);

}  // namespace strata::cli
