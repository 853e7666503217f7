#include "core/command_line.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::vector<FlagSpec> kSpecs = {
    {"model", true, ""}, {"max-tokens", true, ""}, {"ignore-eos", false, ""}, {"t", true, ""}};

TEST(FlagsTest, ParsesSpaceAndEqualsFormsAndSwitches) {
  auto flags = Flags::Parse({"--model", "/m", "--max-tokens=7", "--ignore-eos"}, kSpecs);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->GetOr("model", ""), "/m");
  EXPECT_EQ(*flags->GetInt("max-tokens", 0, 0, 100), 7);
  EXPECT_TRUE(flags->Has("ignore-eos"));
  EXPECT_FALSE(flags->Has("t"));
  EXPECT_FALSE(flags->help());
  EXPECT_EQ(*flags->GetInt("t", 42, 0, 100), 42);
}

TEST(FlagsTest, NameOrAliasIsWhicheverWasGivenAndNeverBoth) {
  const std::vector<FlagSpec> specs = {{"tensor-parallel-size", true, ""}, {"tp-size", true, ""}};
  auto name = [&](const std::vector<std::string>& args) {
    auto flags = Flags::Parse(args, specs);
    EXPECT_TRUE(flags.ok()) << flags.status();
    return flags->NameOrAlias("tensor-parallel-size", "tp-size");
  };
  EXPECT_EQ(*name({}), "tensor-parallel-size");
  EXPECT_EQ(*name({"--tensor-parallel-size", "2"}), "tensor-parallel-size");
  EXPECT_EQ(*name({"--tp-size", "2"}), "tp-size");
  absl::StatusOr<std::string> both = name({"--tensor-parallel-size", "2", "--tp-size", "2"});
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().message(),
            "--tensor-parallel-size and --tp-size mean the same: give one");
}

TEST(FlagsTest, RepeatedFlagsKeepEveryValueInOrderAndGetReturnsTheLast) {
  auto flags = Flags::Parse({"--t", "a=1", "--model", "/m", "--t=b=2", "--t", "c"}, kSpecs);
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->GetAll("t"), (std::vector<std::string>{"a=1", "b=2", "c"}));
  EXPECT_EQ(flags->GetOr("t", ""), "c");
  EXPECT_EQ(flags->GetAll("model"), (std::vector<std::string>{"/m"}));
  EXPECT_TRUE(flags->GetAll("max-tokens").empty());
}

TEST(FlagsTest, RejectsUnknownFlagsMissingValuesAndBadNumbers) {
  EXPECT_EQ(Flags::Parse({"--nope"}, kSpecs).status().message(), "unknown flag --nope");
  EXPECT_EQ(Flags::Parse({"--model"}, kSpecs).status().message(), "--model needs a value");
  EXPECT_FALSE(Flags::Parse({"positional"}, kSpecs).ok());
  EXPECT_FALSE(Flags::Parse({"--ignore-eos=1"}, kSpecs).ok());
  auto flags = Flags::Parse({"--max-tokens", "x1", "--t", "500"}, kSpecs);
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->GetInt("max-tokens", 0, 0, 100).status().message(),
            "--max-tokens expects an integer, got 'x1'");
  EXPECT_EQ(flags->GetInt("t", 0, 0, 100).status().message(), "--t must be in [0, 100], got 500");
  EXPECT_EQ(flags->GetInt("t", 0, 501, INT64_MAX).status().message(),
            "--t must be >= 501, got 500");
  EXPECT_FALSE(flags->GetDouble("t", 0, 2).ok());
}

TEST(FlagsTest, HelpWhereAFlagMayStandEvenAfterAnError) {
  EXPECT_TRUE(Flags::Parse({"--help"}, kSpecs)->help());
  EXPECT_TRUE(Flags::Parse({"--model", "m", "-h"}, kSpecs)->help());
  EXPECT_TRUE(Flags::Parse({"--bogus", "--help"}, kSpecs)->help());
  // A value that reads "--help" is a value.
  auto flags = Flags::Parse({"--model", "--help"}, kSpecs);
  ASSERT_TRUE(flags.ok());
  EXPECT_FALSE(flags->help());
  EXPECT_EQ(flags->GetOr("model", ""), "--help");
}

TEST(FlagsTest, ShortNamesStandForTheirFlags) {
  auto flags =
      Flags::Parse({"-i", "in.jsonl", "-o=x"}, {{"input-file", true, ""}}, {{"-i", "input-file"}});
  EXPECT_EQ(flags.status().message(), "unexpected argument '-o=x' (flags start with --)");
  flags = Flags::Parse({"-i", "in.jsonl"}, {{"input-file", true, ""}}, {{"-i", "input-file"}});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->GetOr("input-file", ""), "in.jsonl");
}

CommandSpec Quantize() {
  return CommandSpec{.program = "strata",
                     .command = "quantize",
                     .description = "write a quantised checkpoint",
                     .flags = {{"model", true, "checkpoint to read"},
                               {"out", true, "directory to write"},
                               {"json", false, "print JSON"}},
                     .required = {"model", "out"},
                     .notes = "Environment: none.\n"};
}

TEST(CommandLineTest, HelpListsUsageDescriptionAndEveryFlagOnStdout) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  CommandLine line = ReadCommandLine(Quantize(), {"--json", "-h"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(line.exit_code, 0);
  EXPECT_THAT(out, StartsWith("usage: strata quantize [flags]\nwrite a quantised checkpoint\n"));
  for (const char* flag : {"--model VALUE", "--out VALUE", "--json ", "--help "}) {
    EXPECT_THAT(out, HasSubstr(flag));
  }
  EXPECT_THAT(out, HasSubstr("\nEnvironment: none.\n"));
}

TEST(CommandLineTest, UsageErrorsNameTheFlagAndTheHelpOnStderrWithStatus2) {
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--frobnicate"}, "unknown flag --frobnicate"},
           {{"--model", "m"}, "--model and --out are required"},
           {{"--json=1"}, "--json takes no value"}}) {
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    CommandLine line = ReadCommandLine(Quantize(), args);
    EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
    EXPECT_EQ(::testing::internal::GetCapturedStderr(),
              "strata quantize: " + message + "\nsee `strata quantize --help`\n");
    EXPECT_EQ(line.exit_code, 2);
  }
}

TEST(CommandLineTest, RunCommandMapsInvalidArgumentTo2AndOtherErrorsTo1) {
  const std::vector<std::string> args = {"--model", "m", "--out", "o"};
  std::string seen;
  EXPECT_EQ(RunCommand(Quantize(), args,
                       [&seen](const Flags& flags) {
                         seen = flags.GetOr("out", "");
                         return absl::OkStatus();
                       }),
            0);
  EXPECT_EQ(seen, "o");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunCommand(Quantize(), args,
                       [](const Flags&) { return absl::InvalidArgumentError("--out exists"); }),
            2);
  EXPECT_EQ(RunCommand(Quantize(), args,
                       [](const Flags&) { return absl::NotFoundError("no config.json"); }),
            1);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "strata quantize: --out exists\nsee `strata quantize --help`\n"
            "strata quantize: no config.json\n");
  EXPECT_EQ(RunCommand(Quantize(), {"--bogus"},
                       [](const Flags&) -> absl::Status {
                         ADD_FAILURE() << "ran";
                         return {};
                       }),
            2);
}

const CommandSpec& QuantizeSpec() {
  static const CommandSpec spec = Quantize();
  return spec;
}
int Ran(const std::vector<std::string>& args) { return 40 + static_cast<int>(args.size()); }

TEST(RunSubcommandTest, DispatchesListsAndRefusesUnknownCommands) {
  const std::vector<Subcommand> subcommands = {{QuantizeSpec, Ran}};
  EXPECT_EQ(RunSubcommand("strata", subcommands, {"quantize", "a", "b"}, ""), 42);
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(RunSubcommand("strata", subcommands, {"--help"}, "CPU: x"), 0);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(out, HasSubstr("usage: strata <command> [flags]"));
  EXPECT_THAT(out, HasSubstr("  quantize       write a quantised checkpoint\n"));
  EXPECT_THAT(out, HasSubstr("`strata <command> --help` lists a command's flags. CPU: x\n"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunSubcommand("strata", subcommands, {}, ""), 2);
  EXPECT_EQ(RunSubcommand("strata", subcommands, {"frobnicate"}, ""), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("strata: unknown command 'frobnicate'"));
}

}  // namespace
}  // namespace strata
