// `strata run-batch` (commands.h): vLLM's run_batch. The serve flags that shape the engine
// (model, cache, scheduler, precision, generation defaults) plus the input and output files;
// the model runtime and the OpenAI front end are those of `strata serve`, driven without
// sockets by server/batch.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "core/status.h"
#include "server/batch/batch_runner.h"
#include "server/cli/commands.h"
#include "server/cli/flags.h"
#include "server/cli/serve_flags.h"
#include "server/cli/serve_runtime.h"
#include "server/frontend/openai_service.h"

#ifndef STRATA_VERSION
#define STRATA_VERSION "unknown"
#endif

namespace strata::cli {
namespace {

// Serve flags that only concern the network (listening, auth, HTTP limits, CORS, stored
// responses): not flags of run-batch.
const std::set<std::string> kNetworkOnlyFlags = {"host",
                                                 "port",
                                                 "grpc-port",
                                                 "api-key",
                                                 "max-body-bytes",
                                                 "http-threads",
                                                 "request-timeout",
                                                 "idle-timeout",
                                                 "keep-alive-timeout",
                                                 "timeout-keep-alive",
                                                 "max-connections",
                                                 "ping-interval",
                                                 "drain-timeout",
                                                 "allowed-origins",
                                                 "allowed-methods",
                                                 "allowed-headers",
                                                 "allow-credentials",
                                                 "responses-store-memory",
                                                 "files-store-memory",
                                                 "files-dir",
                                                 "batch-max-concurrent-requests",
                                                 "batch-priority"};

const std::vector<FlagSpec>& RunBatchFlags() {
  static const std::vector<FlagSpec> flags = [] {
    std::vector<FlagSpec> all = {
        {"input-file", true,
         "OpenAI Batch input, one request per line (JSONL: custom_id, method POST, url "
         "/v1/chat/completions | /v1/completions | /v1/responses, body); - for stdin (also -i)"},
        {"output-file", true,
         "where the output lines go, one per request in input order (written to OUT.tmp, "
         "renamed when complete); - for stdout (also -o)"},
        {"max-concurrent-requests", true,
         "requests submitted and unfinished at a time (default: 2 x --max-num-seqs, at most "
         "--max-queued-requests)"},
    };
    for (const FlagSpec& spec : ServeFlags()) {
      if (kNetworkOnlyFlags.count(spec.name) == 0) all.push_back(spec);
    }
    return all;
  }();
  return flags;
}

std::string RandomIdPrefix() {
  std::mt19937_64 generator{std::random_device{}()};
  return absl::StrFormat("%012x_", generator() & 0xffffffffffffULL);
}

// Non-blank lines of a seekable input (the requests it holds), the stream put back at its
// start; nullopt for a pipe or stdin.
std::optional<int64_t> CountRequests(std::ifstream& in) {
  int64_t count = 0;
  for (std::string line; std::getline(in, line);) {
    if (!absl::StripAsciiWhitespace(line).empty()) ++count;
  }
  in.clear();
  in.seekg(0);
  return in ? std::optional<int64_t>(count) : std::nullopt;
}

void LogProgress(const batch::BatchProgress& p, std::optional<int64_t> total) {
  const int64_t all = total.value_or(p.lines);
  std::string eta;
  if (p.finished > 0 && p.finished < all) {
    eta =
        absl::StrFormat(", about %.0f s left", p.elapsed_s * static_cast<double>(all - p.finished) /
                                                   static_cast<double>(p.finished));
  }
  LOG_INFO("run-batch",
           "{} of {}{} requests done ({} ok, {} failed, {} invalid), {} running; {} prompt + {} "
           "generated tokens of finished requests in {:.1f} s ({:.1f} generated tokens/s){}",
           p.finished, all, total || p.input_done ? "" : "+", p.succeeded, p.failed, p.invalid,
           p.in_flight, p.usage.prompt_tokens, p.usage.completion_tokens, p.elapsed_s,
           p.elapsed_s > 0 ? static_cast<double>(p.usage.completion_tokens) / p.elapsed_s : 0.0,
           eta);
}

absl::Status RunBatchFiles(const Flags& flags) {
  const std::optional<std::string> input_path = flags.Get("input-file");
  const std::optional<std::string> output_path = flags.Get("output-file");
  if (!input_path || !output_path) {
    return absl::InvalidArgumentError("--input-file (-i) and --output-file (-o) are required");
  }
  ASSIGN_OR_RETURN(ServeOptions options, ServeOptionsFromFlags(flags));
  if (options.parallel.num_nodes > 1) {
    return absl::InvalidArgumentError(
        "run-batch runs in one process: its ranks must all be local (--local-ranks = "
        "--world-size)");
  }
  const int64_t default_window = std::min<int64_t>(2 * int64_t{options.scheduler.max_num_seqs},
                                                   options.engine.max_queued_requests);
  ASSIGN_OR_RETURN(const int64_t window, flags.GetInt("max-concurrent-requests", default_window, 1,
                                                      options.engine.max_queued_requests));

  // Both files are opened before the model loads: a wrong path fails in a second, not after it.
  std::ifstream input_file;
  if (*input_path != "-") {
    input_file.open(*input_path);
    if (!input_file) return absl::NotFoundError("cannot read --input-file " + *input_path);
  }
  const std::string tmp_path = *output_path + ".tmp";
  std::ofstream output_file;
  if (*output_path != "-") {
    output_file.open(tmp_path, std::ios::trunc);
    if (!output_file) return absl::PermissionDeniedError("cannot write " + tmp_path);
  }
  const std::optional<int64_t> total =
      *input_path == "-" ? std::nullopt : CountRequests(input_file);
  std::istream& in = *input_path == "-" ? std::cin : input_file;
  std::ostream& out = *output_path == "-" ? std::cout : output_file;

  frontend::ServiceOptions service_options;
  service_options.limits.max_logprobs = options.max_logprobs;
  service_options.version = STRATA_VERSION;
  frontend::OpenAiService service(service_options);
  ASSIGN_OR_RETURN(std::unique_ptr<ModelRuntime> runtime, ModelRuntime::Load(options));
  service.SetModel(&runtime->served());
  LOG_INFO("run-batch", "serving '{}' to {} ({} requests at a time)", runtime->served().names[0],
           *output_path == "-" ? "stdout" : *output_path, window);

  batch::BatchOptions batch_options;
  batch_options.max_in_flight = window;
  batch_options.on_progress = [total](const batch::BatchProgress& p) { LogProgress(p, total); };
  batch_options.id_prefix = RandomIdPrefix();
  ASSIGN_OR_RETURN(batch::BatchProgress done, batch::RunBatch(service, in, out, batch_options));
  if (*output_path != "-") {
    output_file.close();
    if (!output_file) return absl::InternalError("closing " + tmp_path + " failed");
    if (std::rename(tmp_path.c_str(), output_path->c_str()) != 0) {
      return absl::InternalError("renaming " + tmp_path + " to " + *output_path + " failed");
    }
  }
  runtime.reset();
  std::fprintf(
      stderr,
      "strata run-batch: %lld request%s: %lld ok, %lld failed, %lld invalid; %lld prompt "
      "+ %lld generated tokens in %.1f s (%.1f generated tokens/s)%s%s\n",
      static_cast<long long>(done.lines), done.lines == 1 ? "" : "s",
      static_cast<long long>(done.succeeded), static_cast<long long>(done.failed),
      static_cast<long long>(done.invalid), static_cast<long long>(done.usage.prompt_tokens),
      static_cast<long long>(done.usage.completion_tokens), done.elapsed_s,
      done.elapsed_s > 0 ? static_cast<double>(done.usage.completion_tokens) / done.elapsed_s : 0.0,
      *output_path == "-" ? "" : "; wrote ", *output_path == "-" ? "" : output_path->c_str());
  return absl::OkStatus();
}

}  // namespace

const CommandSpec& RunBatchSpec() {
  static const CommandSpec spec{
      .program = "strata",
      .command = "run-batch",
      .description =
          "run an OpenAI Batch file (-i requests.jsonl -o results.jsonl) through the engine",
      .flags = RunBatchFlags(),
      .short_names = {{"-i", "input-file"}, {"-o", "output-file"}},
      .synopsis = "-i INPUT.jsonl -o OUTPUT.jsonl [flags]"};
  return spec;
}

int RunBatchCommand(const std::vector<std::string>& args) {
  return RunCommand(RunBatchSpec(), args, RunBatchFiles);
}

}  // namespace strata::cli
