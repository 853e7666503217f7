// `strata` subcommands (server/main.cc lists them). Each has a spec (its one-line description and
// flags, core/command_line.h: `--help` prints them) and an entry point that takes the arguments
// after its name, prints its result to stdout (machine-readable) and diagnostics to stderr, and
// returns the exit status: 0, 1 on a failure, 2 on a usage error.
#pragma once

#include <string>
#include <vector>

#include "core/command_line.h"

namespace strata::cli {

const CommandSpec& GenerateSpec();
int GenerateCommand(const std::vector<std::string>& args);
const CommandSpec& LogitsSpec();
int LogitsCommand(const std::vector<std::string>& args);
const CommandSpec& BenchSpec();
int BenchCommand(const std::vector<std::string>& args);
// A checkpoint's bf16 routed experts written as MXFP4 (llama-quantize's step for this family).
const CommandSpec& QuantizeSpec();
int QuantizeCommand(const std::vector<std::string>& args);
// tokenize | detokenize | chat-template: the checkpoint's tokenizer and chat template
// (tokenizer_commands.cc).
const CommandSpec& TokenizeSpec();
int TokenizeCommand(const std::vector<std::string>& args);
const CommandSpec& DetokenizeSpec();
int DetokenizeCommand(const std::vector<std::string>& args);
const CommandSpec& ChatTemplateSpec();
int ChatTemplateCommand(const std::vector<std::string>& args);
// vLLM's run_batch: an OpenAI Batch file through the serving engine, no network.
const CommandSpec& RunBatchSpec();
int RunBatchCommand(const std::vector<std::string>& args);
// Generated text → reasoning_content, content and tool_calls, as the server parses a reply
// (parse_output_command.cc).
const CommandSpec& ParseOutputSpec();
int ParseOutputCommand(const std::vector<std::string>& args);
// A TP × DCP × DP deployment's capacity on paper from config.json (plan_command.cc).
const CommandSpec& PlanSpec();
int PlanCommand(const std::vector<std::string>& args);

}  // namespace strata::cli
