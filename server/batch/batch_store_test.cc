// KeepValidLines: what a batch carrying on keeps of the lines an earlier run wrote, and the
// files' modes.
#include "server/batch/batch_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "server/batch/batch_line.h"
#include "server/batch/fake_handler_testing.h"
#include "server/batch/scoped_umask_testing.h"

namespace strata::batch {
namespace {

using ::testing::ElementsAre;

// Sets the umask for a test's scope (0: the files' modes come from the code alone).
mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::string FreshStoreDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/strata_store_", name, "_", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string Answer(int index, const std::string& custom_id, int status = 200) {
  BatchUsage usage;
  return BatchResponseLine(absl::StrCat("batch_req_b-", index), custom_id, status,
                           R"({"id": "cmpl-1"})", &usage) +
         "\n";
}

TEST(KeepValidLines, DropsEveryLineThatIsNotASoundAnswerToOneOfTheRequests) {
  const ScopedUmask umask(0);
  const std::string dir = FreshStoreDir("drop");
  const std::string out = dir + "/b.output.jsonl", errors = dir + "/b.errors.jsonl";
  // Requests r0 .. r4, and one without a custom_id (its error line has none).
  const std::string input = testing::EchoLines(5, "r") + R"({"method": "POST"})" + "\n";
  const std::string cut = Answer(1, "r1");
  std::ofstream(out) << Answer(0, "r0") << "garbage\n"
                     << cut.substr(0, cut.size() / 2) << "\n"  // cut short, then a newline
                     << Answer(2, "r9")                        // another request's custom_id
                     << Answer(7, "r7")                        // no request 7
                     << Answer(4, "r4") << Answer(0, "r0")     // a repeat
                     << Answer(3, "r3", 500)                   // an error in the output file
                     << R"({"id": "batch_req_b-2", "custom_id": "r2"})"
                     << "\n"                            // no outcome
                     << Answer(2, "r2").substr(0, 20);  // a last line without its newline
  std::ofstream(errors) << Answer(3, "r3", 500)
                        << BatchErrorLine("batch_req_b-5", std::nullopt, "invalid_request", "x")
                        << "\n"
                        << Answer(1, "r1");  // an answer in the error file
  ASSERT_EQ(::chmod(out.c_str(), 0644), 0);  // as a version before made them
  const absl::StatusOr<KeptLines> kept = KeepValidLines(out, errors, "b-", input);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->answered, 2);
  EXPECT_EQ(kept->failed, 2);
  EXPECT_EQ(kept->dropped, 9);
  EXPECT_THAT(kept->written, ElementsAre(true, false, false, true, true, true));
  EXPECT_EQ(ReadFileToString(out).value(), Answer(0, "r0") + Answer(4, "r4"));
  EXPECT_EQ(ReadFileToString(errors).value(),
            Answer(3, "r3", 500) +
                BatchErrorLine("batch_req_b-5", std::nullopt, "invalid_request", "x") + "\n");
  EXPECT_EQ(ModeOf(out), 0600u);
  EXPECT_EQ(ModeOf(errors), 0600u);
  // Sound files are kept as they are.
  const absl::StatusOr<KeptLines> again = KeepValidLines(out, errors, "b-", input);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->dropped, 0);
  EXPECT_EQ(again->answered, 2);
}

TEST(KeepValidLines, CreatesMissingFilesPrivateWhateverTheUmask) {
  const ScopedUmask umask(0);
  const std::string dir = FreshStoreDir("create");
  const absl::StatusOr<KeptLines> kept =
      KeepValidLines(dir + "/o.jsonl", dir + "/e.jsonl", "b-", testing::EchoLines(1, "r"));
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->answered + kept->failed + kept->dropped, 0);
  EXPECT_TRUE(kept->written.empty());  // nothing written before
  EXPECT_EQ(ModeOf(dir + "/o.jsonl"), 0600u);
  EXPECT_EQ(ModeOf(dir + "/e.jsonl"), 0600u);
}

TEST(KeepValidLines, NamesTheFileItCannotUse) {
  const absl::StatusOr<KeptLines> kept =
      KeepValidLines("/nonexistent-dir/o.jsonl", "/nonexistent-dir/e.jsonl", "b-", "");
  ASSERT_FALSE(kept.ok());
  EXPECT_THAT(std::string(kept.status().message()), ::testing::HasSubstr("/nonexistent-dir/o"));
}

TEST(RequestCustomIds, OnePerNonBlankLineNoneWhereALineHasNone) {
  const std::string input = testing::Line("a", {{"echo", "1"}}) + "\n\n  \n{not json\n" +
                            testing::Line("b", {{"echo", "2"}}) + "\n" + R"({"custom_id": 7})" +
                            "\n" + testing::Line("a", {});
  EXPECT_THAT(RequestCustomIds(input), ElementsAre("a", std::nullopt, "b", std::nullopt, "a"));
}

TEST(CheckOutputLine, NamesWhatIsWrong) {
  const std::vector<std::optional<std::string>> ids = {"r0"};
  auto message = [&](const std::string& line, bool answered = true) {
    absl::StatusOr<int64_t> index = CheckOutputLine(line, "b-", ids, answered);
    return index.ok() ? "" : std::string(index.status().message());
  };
  EXPECT_EQ(CheckOutputLine(Answer(0, "r0"), "b-", ids, true).value_or(-1), 0);
  EXPECT_THAT(message("[1]"), ::testing::HasSubstr("not a JSON object"));
  EXPECT_THAT(message(Answer(1, "r0")), ::testing::HasSubstr("names no request"));
  EXPECT_THAT(message(Answer(0, "r1")), ::testing::HasSubstr("not request 0's ('r0')"));
  EXPECT_THAT(message(Answer(0, "r0", 404)), ::testing::HasSubstr("does not belong in the output"));
  EXPECT_THAT(message(Answer(0, "r0"), /*answered=*/false),
              ::testing::HasSubstr("does not belong in the error"));
  EXPECT_THAT(message(R"({"id": "batch_req_b-0", "custom_id": "r0", "response": null,
                         "error": {"code": 1}})",
                      /*answered=*/false),
              ::testing::HasSubstr("no string code and message"));
}

}  // namespace
}  // namespace strata::batch
