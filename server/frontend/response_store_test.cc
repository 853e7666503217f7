#include "server/frontend/response_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/file.h"

namespace strata::frontend {
namespace {

StoredResponse Entry(const std::string& text, Json request = Json()) {
  return {Json{{"id", text}}, Json::array({Json{{"role", "user"}, {"content", text}}}),
          std::move(request)};
}

int64_t Bytes(const std::string& id, const StoredResponse& s) {
  return static_cast<int64_t>(id.size() + s.response.dump().size() + s.messages.dump().size() +
                              (s.request.is_null() ? 0 : s.request.dump().size()) +
                              (s.input_items.is_null() ? 0 : s.input_items.dump().size()));
}

TEST(ResponseStoreTest, KeepsWithinItsBytesDroppingTheLeastRecentlyUsed) {
  const int64_t one = Bytes("a", Entry("a"));
  ResponseStore store(2 * one);
  ASSERT_TRUE(store.Put("a", Entry("a")).ok());
  ASSERT_TRUE(store.Put("b", Entry("b")).ok());
  EXPECT_EQ(store.num_bytes(), 2 * one);
  ASSERT_TRUE(store.Get("a"));  // "b" is now the oldest
  ASSERT_TRUE(store.Put("c", Entry("c")).ok());
  EXPECT_TRUE(store.Get("a"));
  EXPECT_FALSE(store.Get("b"));
  EXPECT_EQ(store.Get("c")->messages[0]["content"], "c");
  EXPECT_EQ(store.num_responses(), 2);
  // Put again under one id: replaced, counted once.
  ASSERT_TRUE(store.Put("c", Entry("c")).ok());
  EXPECT_EQ(store.num_bytes(), 2 * one);
  // Larger than the whole store: not kept, nothing evicted for it, an older copy dropped.
  const absl::Status large = store.Put("a", Entry(std::string(4 * one, 'x')));
  EXPECT_EQ(large.code(), absl::StatusCode::kResourceExhausted) << large;
  EXPECT_NE(large.message().find("--responses-store-memory"), std::string::npos) << large;
  EXPECT_FALSE(store.Get("a"));
  EXPECT_TRUE(store.Get("c"));
  EXPECT_TRUE(store.Erase("c"));
  EXPECT_FALSE(store.Erase("c"));
  EXPECT_EQ(store.num_responses(), 0);
  EXPECT_EQ(store.num_bytes(), 0);
}

std::string FreshDir(const std::string& name) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/strata_responses_", name, "_", getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

std::unique_ptr<ResponseStore> OpenStore(int64_t capacity, const std::string& dir) {
  absl::StatusOr<std::unique_ptr<ResponseStore>> store = ResponseStore::Open(capacity, dir);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

int NumRecords(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/responses")) {
    n += e.path().extension() == ".json";
  }
  return n;
}

TEST(ResponseStoreTest, ADirectoryKeepsWhatMemoryKeepsAcrossReopening) {
  const std::string dir = FreshDir("reopen");
  const int64_t one = Bytes("a", Entry("a"));
  StoredResponse d = Entry("d");
  d.input_items = Json::array({{{"type", "message"}, {"role", "user"}}});
  // b, c and d fit; a, b, c and d do not.
  const int64_t capacity =
      Bytes("b", Entry("b", Json{{"body", Json::object()}})) + one + Bytes("d", d);
  {
    std::unique_ptr<ResponseStore> store = OpenStore(capacity, dir);
    ASSERT_NE(store, nullptr);
    // One process per directory.
    absl::StatusOr<std::unique_ptr<ResponseStore>> second = ResponseStore::Open(capacity, dir);
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(second.status().message().find("--responses-dir " + dir + " is in use"),
              std::string::npos)
        << second.status();
    ASSERT_TRUE(store->Put("a", Entry("a")).ok());
    ASSERT_TRUE(store->Put("b", Entry("b", Json{{"body", Json::object()}})).ok());
    ASSERT_TRUE(store->Put("c", Entry("c")).ok());
    ASSERT_TRUE(store->Put("d", d).ok());  // evicts "a": its record goes too
    EXPECT_FALSE(store->Get("a"));
    EXPECT_EQ(NumRecords(dir), 3);
    EXPECT_TRUE(store->Erase("c"));
    EXPECT_EQ(NumRecords(dir), 2);
    EXPECT_TRUE(store->TakeUnfinished().empty());  // only what was loaded
  }
  std::unique_ptr<ResponseStore> store = OpenStore(capacity, dir);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->num_responses(), 2);
  EXPECT_FALSE(store->Get("a"));
  EXPECT_FALSE(store->Get("c"));
  ASSERT_TRUE(store->Get("d"));
  EXPECT_EQ(store->Get("d")->messages[0]["content"], "d");
  EXPECT_TRUE(store->Get("d")->request.is_null());
  EXPECT_EQ(store->Get("d")->input_items, Json::array({{{"type", "message"}, {"role", "user"}}}));
  EXPECT_TRUE(store->Get("b")->input_items.is_null());
  ASSERT_TRUE(store->Get("b"));
  EXPECT_EQ(store->Get("b")->request, (Json{{"body", Json::object()}}));
  EXPECT_EQ(store->num_bytes(),
            Bytes("b", Entry("b", Json{{"body", Json::object()}})) + Bytes("d", d));
  // The entry holding a request is the one to run again; asked once.
  EXPECT_EQ(store->TakeUnfinished(), std::vector<std::string>{"b"});
  EXPECT_TRUE(store->TakeUnfinished().empty());
  // A finished version replaces it: no request left on disk either.
  ASSERT_TRUE(store->Put("b", Entry("b")).ok());
  store.reset();
  store = OpenStore(capacity, dir);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->TakeUnfinished().empty());
  EXPECT_EQ(store->num_responses(), 2);
}

// Stored responses are the users' data: every file in the directory is 0600, whatever the
// umask the server runs under.
TEST(ResponseStoreTest, EveryFileInTheDirectoryIsPrivate) {
  const mode_t old_umask = ::umask(0);
  const std::string dir = FreshDir("private");
  {
    std::unique_ptr<ResponseStore> store = OpenStore(1 << 20, dir);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Put("a", Entry("a", Json{{"body", Json::object()}})).ok());
    ASSERT_TRUE(store->Put("b", Entry("b")).ok());
    int files = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      ++files;
      EXPECT_EQ(e.status().permissions(),
                std::filesystem::perms::owner_read | std::filesystem::perms::owner_write)
          << e.path();
    }
    EXPECT_GE(files, 3);  // the lock and two records
  }
  ::umask(old_umask);
}

TEST(ResponseStoreTest, LoadsInWriteOrderAndDropsTheOldestPastASmallerBudget) {
  const std::string dir = FreshDir("smaller");
  const int64_t one = Bytes("a", Entry("a"));
  {
    std::unique_ptr<ResponseStore> store = OpenStore(3 * one, dir);
    ASSERT_NE(store, nullptr);
    for (const char* id : {"c", "a", "b"}) ASSERT_TRUE(store->Put(id, Entry(id)).ok());
  }
  std::unique_ptr<ResponseStore> store = OpenStore(2 * one, dir);  // restarted with less room
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->Get("c"));  // written first: the least recently used
  EXPECT_TRUE(store->Get("a"));
  EXPECT_TRUE(store->Get("b"));
  EXPECT_EQ(NumRecords(dir), 2);
}

TEST(ResponseStoreTest, IdsOfAnyBytesNameFilesAndBrokenRecordsAreSkipped) {
  const std::string dir = FreshDir("names");
  const std::string odd = "resp-../../x y\xc3\xa9";  // an X-Request-Id is any UTF-8 text
  const std::string long_odd = "resp-" + std::string(200, '/');
  {
    std::unique_ptr<ResponseStore> store = OpenStore(1 << 20, dir);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Put(odd, Entry("odd", Json{{"body", Json::object()}})).ok());
    // Too long to name a file: kept in memory only, and refused where it must be kept.
    ASSERT_TRUE(store->Put(long_odd, Entry("long")).ok());
    EXPECT_TRUE(store->Get(long_odd));
    const absl::Status refused =
        store->Put(long_odd, Entry("long", Json{{"body", Json::object()}}));
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_NE(refused.message().find("--responses-dir"), std::string::npos) << refused;
    ASSERT_TRUE(store->Put("good", Entry("good")).ok());
  }
  // Nothing outside the directory; records a crash or a hand broke.
  EXPECT_EQ(NumRecords(dir), 2);
  for (const auto& e : std::filesystem::directory_iterator(dir + "/responses")) {
    EXPECT_EQ(e.path().parent_path(), std::filesystem::path(dir + "/responses"));
  }
  std::ofstream(dir + "/responses/torn.json") << "{\"id\": \"torn\", \"se";
  std::ofstream(dir + "/responses/other.json")
      << R"({"id": "good", "seq": 9, "response": {}, "messages": []})";
  std::ofstream(dir + "/responses/typed.json")
      << R"({"id": "typed", "seq": 9, "response": [], "messages": []})";
  std::ofstream(dir + "/responses/good.json.tmp") << "half";
  std::unique_ptr<ResponseStore> store = OpenStore(1 << 20, dir);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->num_responses(), 2);
  ASSERT_TRUE(store->Get(odd));
  EXPECT_EQ(store->Get(odd)->messages[0]["content"], "odd");
  EXPECT_EQ(store->Get("good")->messages[0]["content"], "good");
  EXPECT_FALSE(store->Get("torn"));
  EXPECT_FALSE(store->Get("typed"));
  EXPECT_EQ(store->TakeUnfinished(), std::vector<std::string>{odd});
  EXPECT_FALSE(FileExists(dir + "/responses/good.json.tmp"));
  EXPECT_TRUE(FileExists(dir + "/responses/torn.json"));  // left for a person to look at
}

}  // namespace
}  // namespace strata::frontend
