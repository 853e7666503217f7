// command_line.h.
#include "core/command_line.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace strata {
namespace {

bool IsHelp(const std::string& arg) { return arg == "--help" || arg == "-h"; }

const FlagSpec* FindSpec(const std::vector<FlagSpec>& specs, const std::string& name) {
  for (const FlagSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

// "[lo, hi]", or ">= lo" / "<= hi" when the other end is the type's limit.
std::string RangeText(int64_t min, int64_t max) {
  if (max == INT64_MAX && min != INT64_MIN) return absl::StrCat(">= ", min);
  if (min == INT64_MIN && max != INT64_MAX) return absl::StrCat("<= ", max);
  return absl::StrCat("in [", min, ", ", max, "]");
}

// "--a is required" / "--a and --b are required" / "--a, --b and --c are required".
std::string RequiredText(const std::vector<std::string>& names) {
  std::vector<std::string> flags;
  for (const std::string& name : names) flags.push_back("--" + name);
  if (flags.size() == 1) return flags[0] + " is required";
  const std::string last = flags.back();
  flags.pop_back();
  return absl::StrCat(absl::StrJoin(flags, ", "), " and ", last, " are required");
}

void PrintSubcommands(const std::string& program, const std::vector<Subcommand>& subcommands,
                      const std::string& footer, FILE* out) {
  std::fprintf(out, "usage: %s <command> [flags]\n\ncommands:\n", program.c_str());
  for (const Subcommand& s : subcommands) {
    const CommandSpec& spec = s.spec();
    std::fprintf(out, "  %-14s %s\n", spec.command.c_str(), spec.description.c_str());
  }
  std::fprintf(out, "\n`%s <command> --help` lists a command's flags.%s%s\n", program.c_str(),
               footer.empty() ? "" : " ", footer.c_str());
}

}  // namespace

void Flags::Set(const std::string& name, std::string value) {
  all_values_[name].push_back(value);
  values_[name] = std::move(value);
}

std::vector<std::string> Flags::GetAll(const std::string& name) const {
  auto it = all_values_.find(name);
  return it == all_values_.end() ? std::vector<std::string>{} : it->second;
}

absl::StatusOr<Flags> Flags::Parse(const std::vector<std::string>& args,
                                   const std::vector<FlagSpec>& specs,
                                   const std::map<std::string, std::string>& short_names) {
  Flags flags;
  // The error at args[i], unless a later argument asks for help.
  auto error = [&args, &flags](size_t i, std::string message) -> absl::StatusOr<Flags> {
    if (std::any_of(args.begin() + static_cast<std::ptrdiff_t>(i), args.end(), IsHelp)) {
      flags.help_ = true;
      return flags;
    }
    return absl::InvalidArgumentError(message);
  };
  for (size_t i = 0; i < args.size(); ++i) {
    if (IsHelp(args[i])) {
      flags.help_ = true;
      return flags;
    }
    std::string arg = args[i];
    if (auto it = short_names.find(arg); it != short_names.end()) {
      arg = "--" + it->second;
    }
    if (arg.rfind("--", 0) != 0) {
      return error(i, "unexpected argument '" + arg + "' (flags start with --)");
    }
    arg = arg.substr(2);
    std::optional<std::string> inline_value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    const FlagSpec* spec = FindSpec(specs, arg);
    if (spec == nullptr) return error(i, "unknown flag --" + arg);
    if (!spec->takes_value) {
      if (inline_value) return error(i, "--" + arg + " takes no value");
      flags.Set(arg, "true");
      continue;
    }
    if (inline_value) {
      flags.Set(arg, *inline_value);
    } else if (i + 1 < args.size()) {
      flags.Set(arg, args[++i]);
    } else {
      return error(i, "--" + arg + " needs a value");
    }
  }
  return flags;
}

std::optional<std::string> Flags::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Flags::GetOr(const std::string& name, const std::string& fallback) const {
  return Get(name).value_or(fallback);
}

absl::StatusOr<std::string> Flags::NameOrAlias(const std::string& name,
                                               const std::string& alias) const {
  if (Has(name) && Has(alias)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " and --", alias, " mean the same: give one"));
  }
  return Has(alias) ? alias : name;
}

absl::StatusOr<int64_t> Flags::GetInt(const std::string& name, int64_t fallback, int64_t min,
                                      int64_t max) const {
  std::optional<std::string> text = Get(name);
  if (!text) return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return absl::InvalidArgumentError("--" + name + " expects an integer, got '" + *text + "'");
  }
  if (value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be ", RangeText(min, max), ", got ", *text));
  }
  return value;
}

absl::StatusOr<std::optional<double>> Flags::GetDouble(const std::string& name, double min,
                                                       double max) const {
  std::optional<std::string> text = Get(name);
  if (!text) return std::optional<double>();
  double value = 0;
  if (!absl::SimpleAtod(*text, &value)) {
    return absl::InvalidArgumentError("--" + name + " expects a number, got '" + *text + "'");
  }
  if (!(value >= min && value <= max)) {
    return absl::InvalidArgumentError("--" + name + " must be in [" + std::to_string(min) + ", " +
                                      std::to_string(max) + "], got " + *text);
  }
  return std::optional<double>(value);
}

std::string FlagsHelp(const std::vector<FlagSpec>& specs) {
  std::string out;
  for (const FlagSpec& s : specs) {
    std::string left = "  --" + s.name + (s.takes_value ? " VALUE" : "");
    left.resize(std::max<size_t>(left.size() + 2, 30), ' ');
    out += left + s.help + "\n";
  }
  return out;
}

std::string CommandSpec::Name() const {
  return command.empty() ? program : program + " " + command;
}

std::string CommandHelp(const CommandSpec& command) {
  std::string out = absl::StrCat("usage: ", command.Name(), " ", command.synopsis, "\n",
                                 command.description, "\n\nflags:\n", FlagsHelp(command.flags));
  out += FlagsHelp({{"help", false, "print this help and exit (also -h)"}});
  if (!command.notes.empty()) {
    absl::StrAppend(&out, "\n", absl::StripPrefix(command.notes, "\n"));
  }
  if (!out.empty() && out.back() != '\n') out += '\n';
  return out;
}

CommandLine ReadCommandLine(const CommandSpec& command, const std::vector<std::string>& args) {
  CommandLine line;
  absl::StatusOr<Flags> flags = Flags::Parse(args, command.flags, command.short_names);
  if (!flags.ok()) {
    line.exit_code = UsageError(command, flags.status());
    return line;
  }
  if (flags->help()) {
    std::fputs(CommandHelp(command).c_str(), stdout);
    line.exit_code = 0;
    return line;
  }
  for (const std::string& name : command.required) {
    if (!flags->Has(name)) {
      line.exit_code =
          UsageError(command, absl::InvalidArgumentError(RequiredText(command.required)));
      return line;
    }
  }
  line.flags = *std::move(flags);
  return line;
}

int UsageError(const CommandSpec& command, const absl::Status& status) {
  const std::string name = command.Name();
  std::fprintf(stderr, "%s: %s\nsee `%s --help`\n", name.c_str(),
               std::string(status.message()).c_str(), name.c_str());
  return 2;
}

int CommandError(const CommandSpec& command, const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInvalidArgument) return UsageError(command, status);
  std::fprintf(stderr, "%s: %s\n", command.Name().c_str(), std::string(status.message()).c_str());
  return 1;
}

int RunCommand(const CommandSpec& command, const std::vector<std::string>& args,
               absl::FunctionRef<absl::Status(const Flags&)> run) {
  CommandLine line = ReadCommandLine(command, args);
  if (line.exit_code) return *line.exit_code;
  const absl::Status status = run(line.flags);
  return status.ok() ? 0 : CommandError(command, status);
}

int RunSubcommand(const std::string& program, const std::vector<Subcommand>& subcommands,
                  const std::vector<std::string>& args, const std::string& footer) {
  if (args.empty() || IsHelp(args[0])) {
    PrintSubcommands(program, subcommands, footer, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  for (const Subcommand& s : subcommands) {
    if (s.spec().command == args[0]) return s.run(rest);
  }
  std::fprintf(stderr, "%s: unknown command '%s'\n\n", program.c_str(), args[0].c_str());
  PrintSubcommands(program, subcommands, footer, stderr);
  return 2;
}

}  // namespace strata
