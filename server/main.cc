// The `strata` binary: subcommand dispatch. Flags and environment are read only here and in
// server/cli/ (docs/style.md): library code receives typed options.
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/cpu_features.h"
#include "server/cli/commands.h"
#include "server/cli/serve_command.h"

int main(int argc, char** argv) {
  namespace cli = strata::cli;
  const std::vector<strata::Subcommand> subcommands = {
      {cli::GenerateSpec, cli::GenerateCommand},
      {cli::LogitsSpec, cli::LogitsCommand},
      {cli::BenchSpec, cli::BenchCommand},
      {cli::QuantizeSpec, cli::QuantizeCommand},
      {cli::TokenizeSpec, cli::TokenizeCommand},
      {cli::DetokenizeSpec, cli::DetokenizeCommand},
      {cli::ChatTemplateSpec, cli::ChatTemplateCommand},
      {cli::ServeSpec, cli::ServeCommand},
      {cli::RunBatchSpec, cli::RunBatchCommand},
      {cli::ParseOutputSpec, cli::ParseOutputCommand},
      {cli::PlanSpec, cli::PlanCommand},
  };
  return strata::RunSubcommand("strata", subcommands,
                               std::vector<std::string>(argv + 1, argv + argc),
                               "CPU: " + strata::DescribeCpu());
}
