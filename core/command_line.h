// The command-line framework of Strata's binaries (`strata`, `strata-client`,
// `strata-bench-serve`): flags, a command's `--help`, and dispatch to subcommands. Only the
// binaries' command layers (server/cli/, clients/) use it; library code receives typed options,
// never flags.
//
// A command line is flags only: `--name value`, `--name=value` and boolean `--name`, plus the
// short forms a command declares (`-i FILE`). Every flag is declared by its command; an unknown
// flag, a missing value or a malformed number is an error naming the flag. `--help` and `-h` work
// on every command: the usage line, the command's one-line description and its flags on stdout,
// exit status 0. A usage error prints "<command>: <what is wrong>" and "see `<command> --help`"
// on stderr, exit status 2; any other failure exits 1.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

// One flag of a command.
struct FlagSpec {
  std::string name;  // without dashes
  bool takes_value;  // false: boolean switch
  std::string help;  // one line
};

// A command line read against its FlagSpecs.
class Flags {
 public:
  // `short_names` maps a short form ("-i") to the flag it stands for ("input-file"). A `--help`
  // or `-h` where a flag may stand sets help() and ends the reading (also after an error, so
  // `strata cmd --bogus --help` still helps). InvalidArgument naming the flag otherwise.
  static absl::StatusOr<Flags> Parse(const std::vector<std::string>& args,
                                     const std::vector<FlagSpec>& specs,
                                     const std::map<std::string, std::string>& short_names = {});

  bool help() const { return help_; }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  // The flag's value (the last one where it was given more than once).
  std::optional<std::string> Get(const std::string& name) const;
  // Every value of a flag that may be repeated (`--set a=1 --set b=2`), in command-line order.
  std::vector<std::string> GetAll(const std::string& name) const;
  std::string GetOr(const std::string& name, const std::string& fallback) const;
  // Which of `name` and `alias` (another server's spelling of the same flag, e.g. SGLang's
  // --tp-size for --tensor-parallel-size) was given: `name` when neither. InvalidArgument
  // "--NAME and --ALIAS mean the same: give one" when both were.
  absl::StatusOr<std::string> NameOrAlias(const std::string& name, const std::string& alias) const;
  // Parsed numbers; InvalidArgument naming the flag when malformed or out of [min, max].
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback, int64_t min,
                                 int64_t max) const;
  absl::StatusOr<std::optional<double>> GetDouble(const std::string& name, double min,
                                                  double max) const;

 private:
  void Set(const std::string& name, std::string value);

  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_values_;
  bool help_ = false;
};

// "  --model VALUE    the checkpoint directory" lines for a usage message.
std::string FlagsHelp(const std::vector<FlagSpec>& specs);

// One command: a binary without subcommands (`command` empty) or one subcommand of it.
struct CommandSpec {
  std::string program;      // "strata"
  std::string command;      // "generate"
  std::string description;  // one line: `<program> --help` lists it beside the name
  std::vector<FlagSpec> flags;
  // Flags that must be given; a command line without one of them is a usage error naming them
  // all ("--model and --out are required").
  std::vector<std::string> required;
  std::map<std::string, std::string> short_names;  // "-i" -> "input-file"
  std::string synopsis = "[flags]";                // the usage line after the name
  std::string notes;                               // printed after the flags (environment...)

  // "strata generate" (or just the program).
  std::string Name() const;
};

// `--help`'s text: "usage: <name> <synopsis>", the description, the flags, the notes.
std::string CommandHelp(const CommandSpec& command);

// A command line read for `command`: `flags` to run with, or `exit_code` when the command is
// over already (help printed: 0; a usage error printed: 2).
struct CommandLine {
  Flags flags;
  std::optional<int> exit_code;
};
CommandLine ReadCommandLine(const CommandSpec& command, const std::vector<std::string>& args);

// "<name>: <message>" and "see `<name> --help`" on stderr; returns 2.
int UsageError(const CommandSpec& command, const absl::Status& status);

// A failure of a command that has read its flags: InvalidArgument (a flag's value that cannot
// work) as UsageError, anything else as "<name>: <message>" on stderr returning 1.
int CommandError(const CommandSpec& command, const absl::Status& status);

// The usual body of a command: ReadCommandLine, then `run` with the flags; its error reported by
// CommandError. Returns the exit status.
int RunCommand(const CommandSpec& command, const std::vector<std::string>& args,
               absl::FunctionRef<absl::Status(const Flags&)> run);

// One subcommand of a binary with several: its spec (for the binary's list and its `--help`)
// and its entry point (the arguments after its name; returns the exit status).
struct Subcommand {
  const CommandSpec& (*spec)();
  int (*run)(const std::vector<std::string>& args);
};

// `<program> <subcommand> [flags]`: runs the subcommand named by args[0] with the rest.
// `<program> --help` (or -h) lists the subcommands and `footer` on stdout and returns 0; no
// subcommand lists them on stderr and returns 2; an unknown one is named, returning 2.
int RunSubcommand(const std::string& program, const std::vector<Subcommand>& subcommands,
                  const std::vector<std::string>& args, const std::string& footer);

}  // namespace strata
