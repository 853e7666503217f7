// The Files and Batches API over a fake handler (fake_handler_testing.h): uploads, listing,
// content and deletion; a batch's run into output and error files; validation; cancellation
// (running and queued); the methods and paths it answers.
#include "server/batch/batch_api.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/batch/batch_line.h"
#include "server/batch/batch_store.h"
#include "server/batch/fake_handler_testing.h"
#include "server/batch/scoped_umask_testing.h"
#include "server/frontend/api_error.h"

namespace strata::batch {
namespace {

using testing::FakeHandler;
using testing::Json;
using testing::Line;
using testing::OutputLines;

constexpr const char* kBoundary = "----strata-test-boundary";

http::HttpRequest Request(std::string method, std::string target, std::string body = "") {
  http::HttpRequest r;
  r.method = std::move(method);
  r.target = target;
  r.path = target.substr(0, target.find('?'));
  r.body = std::move(body);
  r.headers.push_back({"content-type", "application/json"});
  return r;
}

http::HttpRequest Upload(const std::string& content, const std::string& purpose = "batch",
                         const std::string& filename = "in.jsonl") {
  http::HttpRequest r = Request("POST", "/v1/files");
  r.headers = {{"content-type", absl::StrCat("multipart/form-data; boundary=", kBoundary)}};
  r.body = absl::StrCat(
      "--", kBoundary, "\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n", purpose,
      "\r\n--", kBoundary, "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"",
      filename, "\"\r\nContent-Type: application/octet-stream\r\n\r\n", content, "\r\n--",
      kBoundary, "--\r\n");
  return r;
}

// The JSON of a 200 answer (fails the test otherwise).
Json Ok(const absl::StatusOr<http::HttpResponse>& r) {
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return nullptr;
  EXPECT_EQ(r->status, 200) << r->body;
  return Json::parse(r->body);
}

// The HTTP status an error answer gets, and its message.
std::pair<int, std::string> Error(const absl::StatusOr<http::HttpResponse>& r) {
  if (r.ok()) return {r->status, r->body};
  return {frontend::HttpStatusFor(r.status().code()), std::string(r.status().message())};
}

std::string Lines(int n, int fail_every = 0) { return testing::EchoLines(n, "req-", fail_every); }

// Polls the batch until its status is not `while_status` (10 s at most).
Json WaitWhile(BatchApi& api, const std::string& id, std::initializer_list<std::string> statuses) {
  Json b;
  for (int i = 0; i < 2000; ++i) {
    b = Ok(api.Handle(Request("GET", "/v1/batches/" + id)));
    if (std::find(statuses.begin(), statuses.end(), b["status"].get<std::string>()) ==
        statuses.end()) {
      return b;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ADD_FAILURE() << "batch " << id << " stayed " << b["status"];
  return b;
}

Json CreateBatch(BatchApi& api, const std::string& file_id,
                 const std::string& endpoint = "/v1/chat/completions") {
  return Ok(api.Handle(Request("POST", "/v1/batches",
                               Json{{"input_file_id", file_id},
                                    {"endpoint", endpoint},
                                    {"completion_window", "24h"},
                                    {"metadata", {{"job", "nightly"}}}}
                                   .dump())));
}

TEST(BatchApi, FilesAreUploadedListedReadAndDeleted) {
  BatchApi api(BatchApiOptions{.files_store_bytes = 4096});
  const Json a = Ok(api.Handle(Upload("first\n")));
  EXPECT_EQ(a["object"], "file");
  EXPECT_EQ(a["bytes"], 6);
  EXPECT_EQ(a["filename"], "in.jsonl");
  EXPECT_EQ(a["purpose"], "batch");
  EXPECT_TRUE(a["id"].get<std::string>().starts_with("file-"));
  const Json b = Ok(api.Handle(Upload("second\n", "batch", "b.jsonl")));
  // Newest first by default; order=asc, limit and after page through.
  Json list = Ok(api.Handle(Request("GET", "/v1/files")));
  ASSERT_EQ(list["data"].size(), 2u);
  EXPECT_EQ(list["data"][0]["id"], b["id"]);
  list = Ok(api.Handle(Request("GET", "/v1/files?order=asc&limit=1")));
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["id"], a["id"]);
  EXPECT_TRUE(list["has_more"]);
  list = Ok(api.Handle(Request(
      "GET", absl::StrCat("/v1/files?order=asc&after=", list["last_id"].get<std::string>()))));
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["id"], b["id"]);
  EXPECT_FALSE(list["has_more"]);
  EXPECT_EQ(Ok(api.Handle(Request("GET", "/v1/files?purpose=batch_output")))["data"].size(), 0u);
  const std::string id = a["id"];
  EXPECT_EQ(Ok(api.Handle(Request("GET", "/v1/files/" + id)))["filename"], "in.jsonl");
  const absl::StatusOr<http::HttpResponse> content =
      api.Handle(Request("GET", "/v1/files/" + id + "/content"));
  ASSERT_TRUE(content.ok());
  EXPECT_EQ(content->body, "first\n");
  EXPECT_EQ(content->content_type, "application/octet-stream");
  const Json deleted = Ok(api.Handle(Request("DELETE", "/v1/files/" + id)));
  EXPECT_EQ(deleted["deleted"], true);
  EXPECT_EQ(Error(api.Handle(Request("GET", "/v1/files/" + id))).first, 404);
  EXPECT_EQ(api.files().num_bytes(), 7);

  // Refusals, each naming what was wrong.
  auto [status, message] = Error(api.Handle(Upload("x", "fine-tune")));
  EXPECT_EQ(status, 400);
  EXPECT_NE(message.find("'purpose' must be 'batch'"), std::string::npos) << message;
  std::tie(status, message) = Error(api.Handle(Upload("")));
  EXPECT_EQ(status, 400);
  EXPECT_NE(message.find("empty"), std::string::npos) << message;
  std::tie(status, message) = Error(api.Handle(Upload(std::string(5000, 'x'))));
  EXPECT_EQ(status, 429);
  EXPECT_NE(message.find("the file store is full"), std::string::npos) << message;
  http::HttpRequest json = Request("POST", "/v1/files", "{}");
  std::tie(status, message) = Error(api.Handle(json));
  EXPECT_EQ(status, 400);
  EXPECT_NE(message.find("multipart/form-data"), std::string::npos) << message;
  std::tie(status, message) = Error(api.Handle(Request("GET", "/v1/files?limit=0")));
  EXPECT_EQ(status, 400);
  EXPECT_NE(message.find("'limit' must be an integer in [1, 10000]"), std::string::npos);
}

TEST(BatchApi, ABatchRunsIntoOutputAndErrorFilesInInputOrder) {
  FakeHandler handler;
  BatchApi api(BatchApiOptions{.max_in_flight = 3});
  api.SetHandler(&handler);
  const Json file = Ok(api.Handle(Upload(Lines(12, /*fail_every=*/4))));
  const Json created = CreateBatch(api, file["id"]);
  EXPECT_EQ(created["object"], "batch");
  EXPECT_EQ(created["request_counts"]["total"], 12);
  EXPECT_EQ(created["metadata"]["job"], "nightly");
  EXPECT_TRUE(created["errors"].is_null());
  const Json done = WaitWhile(api, created["id"], {"validating", "in_progress", "finalizing"});
  ASSERT_EQ(done["status"], "completed") << done.dump();
  EXPECT_EQ(done["request_counts"]["completed"], 9);
  EXPECT_EQ(done["request_counts"]["failed"], 3);
  EXPECT_TRUE(done["completed_at"].is_number());
  EXPECT_LE(handler.max_live(), 3);                      // the batch's window
  EXPECT_EQ(handler.seen_bodies_.at(0)["priority"], 1);  // behind online requests
  const std::vector<Json> out =
      OutputLines(api.Handle(Request("GET", absl::StrCat("/v1/files/",
                                                         done["output_file_id"].get<std::string>(),
                                                         "/content")))
                      ->body);
  ASSERT_EQ(out.size(), 9u);
  int expected = 0;
  for (const Json& line : out) {
    if (expected % 4 == 3) ++expected;  // the failing ones are in the error file
    EXPECT_EQ(line["custom_id"], absl::StrCat("req-", expected));
    EXPECT_EQ(line["response"]["status_code"], 200);
    EXPECT_EQ(line["response"]["body"]["echo"], absl::StrCat(expected));
    ++expected;
  }
  const std::vector<Json> errors = OutputLines(
      api.Handle(Request("GET", absl::StrCat("/v1/files/", done["error_file_id"].get<std::string>(),
                                             "/content")))
          ->body);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0]["custom_id"], "req-3");
  EXPECT_EQ(errors[0]["response"]["status_code"], 400);
  const Json outputs = Ok(api.Handle(Request("GET", "/v1/files?purpose=batch_output")));
  EXPECT_EQ(outputs["data"].size(), 2u);
  const Json summary = api.Summary();
  EXPECT_EQ(summary["batches"]["completed"], 1);
  EXPECT_EQ(summary["files"]["num_files"], 3);  // the input, the output and the errors
  const Json listed = Ok(api.Handle(Request("GET", "/v1/batches")));
  ASSERT_EQ(listed["data"].size(), 1u);
  EXPECT_EQ(listed["data"][0]["id"], created["id"]);
}

TEST(BatchApi, InputsAreCheckedWhenTheBatchIsCreated) {
  FakeHandler handler;
  BatchApi api(BatchApiOptions{});
  api.SetHandler(&handler);
  // A line to another endpoint and a line without custom_id: the batch fails, listing both.
  const std::string mixed =
      absl::StrCat(Line("a", {{"echo", "1"}}), "\n", Line("b", {{"echo", "2"}}, "/v1/completions"),
                   "\n", R"({"method": "POST", "url": "/v1/chat/completions", "body": {}})", "\n");
  const Json failed = CreateBatch(api, Ok(api.Handle(Upload(mixed)))["id"]);
  EXPECT_EQ(failed["status"], "failed");
  ASSERT_EQ(failed["errors"]["data"].size(), 2u) << failed.dump();
  EXPECT_EQ(failed["errors"]["data"][0]["code"], "mismatched_endpoint");
  EXPECT_EQ(failed["errors"]["data"][0]["line"], 2);
  EXPECT_EQ(failed["errors"]["data"][1]["line"], 3);
  EXPECT_NE(failed["errors"]["data"][1]["message"].get<std::string>().find("custom_id"),
            std::string::npos);
  const std::string good = Ok(api.Handle(Upload(Lines(2))))["id"];
  struct Case {
    Json body;
    int status;
    std::string message;
  };
  const Case cases[] = {
      {{{"endpoint", "/v1/chat/completions"}, {"completion_window", "24h"}}, 400, "input_file_id"},
      {{{"input_file_id", "file-nope"},
        {"endpoint", "/v1/chat/completions"},
        {"completion_window", "24h"}},
       404,
       "no file 'file-nope'"},
      {{{"input_file_id", good}, {"endpoint", "/v1/embeddings"}, {"completion_window", "24h"}},
       400,
       "'endpoint' must be one of /v1/chat/completions, /v1/completions, /v1/responses"},
      {{{"input_file_id", good}, {"endpoint", "/v1/chat/completions"}, {"completion_window", "1h"}},
       400,
       "'completion_window' must be '24h'"},
      {{{"input_file_id", good},
        {"endpoint", "/v1/chat/completions"},
        {"completion_window", "24h"},
        {"metadata", {{"k", 1}}}},
       400,
       "metadata.k"},
  };
  for (const Case& c : cases) {
    auto [status, message] = Error(api.Handle(Request("POST", "/v1/batches", c.body.dump())));
    EXPECT_EQ(status, c.status) << c.body.dump();
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
  }
}

TEST(BatchApi, CancellingStopsReadingAndKeepsWhatFinished) {
  FakeHandler handler;
  handler.Hold("0");  // the first request does not finish until released
  BatchApi api(BatchApiOptions{.max_in_flight = 2});
  api.SetHandler(&handler);
  const Json created = CreateBatch(api, Ok(api.Handle(Upload(Lines(50))))["id"]);
  const std::string id = created["id"];
  // Cancel once the window is full (request 0 held, request 1 finished or in flight).
  for (int i = 0; i < 2000 && handler.handled() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GE(handler.handled(), 2);
  const Json cancelling = Ok(api.Handle(Request("POST", "/v1/batches/" + id + "/cancel")));
  EXPECT_EQ(cancelling["status"], "cancelling");
  EXPECT_TRUE(cancelling["cancelling_at"].is_number());
  handler.Release();
  const Json done = WaitWhile(api, id, {"cancelling"});
  EXPECT_EQ(done["status"], "cancelled");
  EXPECT_TRUE(done["cancelled_at"].is_number());
  const int64_t completed = done["request_counts"]["completed"];
  EXPECT_GE(completed, 1);  // the held request finished after the cancel
  EXPECT_LT(completed, 50);
  ASSERT_TRUE(done["output_file_id"].is_string());
  const std::vector<Json> out =
      OutputLines(api.Handle(Request("GET", absl::StrCat("/v1/files/",
                                                         done["output_file_id"].get<std::string>(),
                                                         "/content")))
                      ->body);
  EXPECT_EQ(static_cast<int64_t>(out.size()), completed);
  EXPECT_EQ(out[0]["custom_id"], "req-0");
  // A finished batch cannot be cancelled; cancelling again is a no-op.
  auto [status, message] = Error(api.Handle(Request("POST", "/v1/batches/" + id + "/cancel")));
  EXPECT_EQ(status, 200);
  EXPECT_EQ(Json::parse(message)["status"], "cancelled");
}

TEST(BatchApi, ABatchPastItsCompletionWindowExpires) {
  FakeHandler handler;
  BatchApi api(BatchApiOptions{.completion_window_s = 0});  // expired as soon as it runs
  api.SetHandler(&handler);
  const Json created = CreateBatch(api, Ok(api.Handle(Upload(Lines(5))))["id"]);
  EXPECT_EQ(created["expires_at"], created["created_at"]);
  const Json done = WaitWhile(api, created["id"], {"validating", "in_progress", "finalizing"});
  ASSERT_EQ(done["status"], "expired") << done.dump();
  EXPECT_TRUE(done["expired_at"].is_number());
  EXPECT_EQ(done["request_counts"]["completed"], 0);
  EXPECT_EQ(done["request_counts"]["failed"], 5);
  EXPECT_TRUE(done["output_file_id"].is_null());
  const std::vector<Json> errors = OutputLines(
      api.Handle(Request("GET", absl::StrCat("/v1/files/", done["error_file_id"].get<std::string>(),
                                             "/content")))
          ->body);
  ASSERT_EQ(errors.size(), 5u);
  for (const Json& line : errors) EXPECT_EQ(line["error"]["code"], "batch_expired");
  EXPECT_EQ(errors[4]["custom_id"], "req-4");
  EXPECT_EQ(handler.handled(), 0);
}

TEST(BatchApi, StopCancelsWhatIsStillInFlight) {
  FakeHandler handler;
  handler.Hold("0");  // never released: Stop must not wait for it
  BatchApi api(BatchApiOptions{.max_in_flight = 2});
  api.SetHandler(&handler);
  const std::string id = CreateBatch(api, Ok(api.Handle(Upload(Lines(20))))["id"])["id"];
  for (int i = 0; i < 2000 && handler.handled() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  api.Stop();
  const Json done = Ok(api.Handle(Request("GET", "/v1/batches/" + id)));
  EXPECT_EQ(done["status"], "cancelled");
  EXPECT_GE(done["request_counts"]["failed"], 1);  // the held request, cancelled
}

TEST(BatchApi, QueuedBatchesWaitForTheHandlerAndCancelAtOnce) {
  BatchApi api(BatchApiOptions{});
  const std::string file = Ok(api.Handle(Upload(Lines(3))))["id"];
  const Json first = CreateBatch(api, file);
  const Json second = CreateBatch(api, file);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // No handler yet (the model is loading): both wait, validating.
  EXPECT_EQ(
      Ok(api.Handle(Request("GET", "/v1/batches/" + first["id"].get<std::string>())))["status"],
      "validating");
  const Json cancelled = Ok(api.Handle(
      Request("POST", absl::StrCat("/v1/batches/", second["id"].get<std::string>(), "/cancel"))));
  EXPECT_EQ(cancelled["status"], "cancelled");
  FakeHandler handler;
  api.SetHandler(&handler);
  EXPECT_EQ(WaitWhile(api, first["id"], {"validating", "in_progress", "finalizing"})["status"],
            "completed");
  // At shutdown a queued batch never starts, and no batch is taken after RequestStop.
  BatchApi idle(BatchApiOptions{});
  const Json queued = CreateBatch(idle, Ok(idle.Handle(Upload(Lines(3))))["id"]);
  idle.Stop();
  EXPECT_EQ(
      Ok(idle.Handle(Request("GET", "/v1/batches/" + queued["id"].get<std::string>())))["status"],
      "cancelled");
  const std::string idle_file = Ok(idle.Handle(Upload(Lines(1))))["id"];
  EXPECT_EQ(Error(idle.Handle(Request("POST", "/v1/batches",
                                      Json{{"input_file_id", idle_file},
                                           {"endpoint", "/v1/chat/completions"},
                                           {"completion_window", "24h"}}
                                          .dump())))
                .first,
            503);
  auto [status, message] = Error(api.Handle(
      Request("POST", absl::StrCat("/v1/batches/", first["id"].get<std::string>(), "/cancel"))));
  EXPECT_EQ(status, 400);
  EXPECT_NE(message.find("is completed"), std::string::npos) << message;
}

// A fresh directory for a test's store.
std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/strata_batch_", name, "_", getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

std::unique_ptr<BatchApi> OpenApi(const std::string& dir, int64_t max_in_flight = 32) {
  absl::StatusOr<std::unique_ptr<BatchApi>> api =
      BatchApi::Open(BatchApiOptions{.max_in_flight = max_in_flight,
                                     .dir = dir,
                                     .resumed_headers = {{"authorization", "Bearer server-key"}}});
  EXPECT_TRUE(api.ok()) << api.status();
  return api.ok() ? *std::move(api) : nullptr;
}

std::string Content(BatchApi& api, const Json& id) {
  const absl::StatusOr<http::HttpResponse> r =
      api.Handle(Request("GET", absl::StrCat("/v1/files/", id.get<std::string>(), "/content")));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->body : "";
}

TEST(BatchApi, WithADirectoryFilesAndBatchesOutliveTheProcess) {
  const std::string dir = FreshDir("outlive");
  Json input, queued;
  {
    std::unique_ptr<BatchApi> api = OpenApi(dir);
    ASSERT_NE(api, nullptr);
    // One server per directory.
    const absl::StatusOr<std::unique_ptr<BatchApi>> second =
        BatchApi::Open(BatchApiOptions{.dir = dir});
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.status().message().find("in use by another process"), std::string::npos)
        << second.status();
    input = Ok(api->Handle(Upload(Lines(6, /*fail_every=*/3), "batch", "nightly.jsonl")));
    queued = CreateBatch(*api, input["id"]);  // no handler yet: still queued at shutdown
  }
  // What a crash leaves or a hand breaks: a torn upload, unreadable records.
  std::ofstream(dir + "/files/file-torn.data") << "half an upl";
  std::ofstream(dir + "/files/file-bad.json") << "{not json";
  std::ofstream(dir + "/batches/batch-bad.json") << R"({"id": 7})";
  Json odd = queued;  // a status no batch has; an id naming another file
  odd["seq"] = 5;
  odd["id"] = "batch-odd";
  odd["status"] = "sleeping";
  std::ofstream(dir + "/batches/batch-odd.json") << odd.dump();
  odd["id"] = "../batch-elsewhere";
  odd["status"] = "in_progress";
  std::ofstream(dir + "/batches/batch-elsewhere.json") << odd.dump();
  Json done;
  std::string output, errors;
  {
    std::unique_ptr<BatchApi> api = OpenApi(dir);
    ASSERT_NE(api, nullptr);
    EXPECT_FALSE(std::filesystem::exists(dir + "/files/file-torn.data"));
    EXPECT_EQ(Ok(api->Handle(Request("GET", "/v1/batches/" + queued["id"].get<std::string>()))),
              queued);
    EXPECT_EQ(Ok(api->Handle(Request("GET", "/v1/batches")))["data"].size(), 1u);
    // The batch queued at the last shutdown runs now, as the server's key.
    FakeHandler handler;
    api->SetHandler(&handler);
    done = WaitWhile(*api, queued["id"], {"validating", "in_progress", "finalizing"});
    ASSERT_EQ(done["status"], "completed");
    EXPECT_EQ(done["request_counts"]["completed"], 4);
    EXPECT_EQ(done["request_counts"]["failed"], 2);
    ASSERT_FALSE(handler.seen_auth_.empty());
    EXPECT_EQ(handler.seen_auth_[0], "Bearer server-key");
    output = Content(*api, done["output_file_id"]);
    errors = Content(*api, done["error_file_id"]);
  }
  std::unique_ptr<BatchApi> api = OpenApi(dir);
  ASSERT_NE(api, nullptr);
  const Json files = Ok(api->Handle(Request("GET", "/v1/files?order=asc")));
  ASSERT_EQ(files["data"].size(), 3u) << files.dump();  // the input, the output, the errors
  EXPECT_EQ(files["data"][0], input);
  EXPECT_EQ(files["data"][1]["id"], done["output_file_id"]);
  EXPECT_EQ(files["data"][2]["id"], done["error_file_id"]);
  EXPECT_EQ(Content(*api, input["id"]), Lines(6, 3));
  EXPECT_EQ(Content(*api, done["output_file_id"]), output);
  EXPECT_EQ(Content(*api, done["error_file_id"]), errors);
  EXPECT_EQ(OutputLines(output).size(), 4u);
  EXPECT_EQ(api->files().num_bytes(),
            static_cast<int64_t>(Lines(6, 3).size() + output.size() + errors.size()));
  EXPECT_EQ(Ok(api->Handle(Request("GET", "/v1/batches/" + done["id"].get<std::string>()))), done);
  EXPECT_EQ(api->Summary()["batches"]["completed"], 1);
  EXPECT_EQ(api->Summary()["files"]["dir"], dir);
  // Deleting removes the file from the directory too.
  Ok(api->Handle(Request("DELETE", "/v1/files/" + input["id"].get<std::string>())));
  EXPECT_FALSE(std::filesystem::exists(
      absl::StrCat(dir, "/files/", input["id"].get<std::string>(), ".data")));
}

// A server stopped mid-batch (in-flight requests cancelled past the drain, a torn last line as
// a crash would leave) carries the batch on at its next start: every request answered once,
// in input order, as one uninterrupted run would.
TEST(BatchApi, WithADirectoryARunningBatchCarriesOnAfterARestart) {
  const std::string dir = FreshDir("carry_on");
  const std::string input = Lines(40, /*fail_every=*/4);
  std::string batch_id;
  int64_t written = 0;
  {
    std::unique_ptr<BatchApi> api = OpenApi(dir, /*max_in_flight=*/3);
    ASSERT_NE(api, nullptr);
    FakeHandler handler;
    handler.Hold("9");  // never finishes: the stop cancels it
    api->SetHandler(&handler);
    batch_id = CreateBatch(*api, Ok(api->Handle(Upload(input)))["id"])["id"];
    for (int i = 0; i < 2000 && handler.handled() < 12; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // The drain: no line is read after RequestStop, those in flight finish — but the held one,
    // which Stop cancels.
    api->RequestStop();
    auto lines_written = [&] {
      int64_t n = 0;
      for (const char* kind : {".output.jsonl", ".errors.jsonl"}) {
        std::ifstream in(absl::StrCat(dir, "/batches/", batch_id, kind));
        for (std::string line; std::getline(in, line);) ++n;
      }
      return n;
    };
    for (int i = 0; i < 2000 && lines_written() < 9; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    api->Stop();
    EXPECT_EQ(Ok(api->Handle(Request("GET", "/v1/batches/" + batch_id)))["status"], "in_progress");
    written = lines_written();
    EXPECT_EQ(written, 9);  // every line before the held one, none after
  }
  std::ofstream(absl::StrCat(dir, "/batches/", batch_id, ".output.jsonl"), std::ios::app)
      << R"({"id": "batch_req_torn)";
  {  // An output file stored by a finalize the process died in before the record named it.
    std::unique_ptr<BatchStore> disk = BatchStore::Open(dir).value();
    ASSERT_TRUE(disk->PutFile(StoredFile{"file-stale", batch_id + "_output.jsonl", "batch_output",
                                         1, std::make_shared<const std::string>("{}\n")},
                              1000)
                    .ok());
  }
  std::unique_ptr<BatchApi> api = OpenApi(dir, /*max_in_flight=*/3);
  ASSERT_NE(api, nullptr);
  FakeHandler handler;
  api->SetHandler(&handler);
  const Json done = WaitWhile(*api, batch_id, {"in_progress", "finalizing"});
  ASSERT_EQ(done["status"], "completed") << done.dump();
  EXPECT_EQ(done["request_counts"]["total"], 40);
  EXPECT_EQ(done["request_counts"]["completed"], 30);
  EXPECT_EQ(done["request_counts"]["failed"], 10);
  const std::vector<Json> out = OutputLines(Content(*api, done["output_file_id"]));
  const std::vector<Json> errors = OutputLines(Content(*api, done["error_file_id"]));
  ASSERT_EQ(out.size(), 30u);
  ASSERT_EQ(errors.size(), 10u);
  for (int i = 0, o = 0, e = 0; i < 40; ++i) {
    const Json& line = i % 4 == 3 ? errors[e++] : out[o++];
    EXPECT_EQ(line["custom_id"], absl::StrCat("req-", i));
    EXPECT_EQ(line["id"], absl::StrCat("batch_req_", batch_id, "-", i));
  }
  for (const Json& body : handler.seen_bodies_) {  // nothing written before is sent again
    if (!body.contains("echo")) continue;
    EXPECT_GE(std::stoi(body["echo"].get<std::string>()), written);
  }
  EXPECT_EQ(handler.handled(), 40 - written);
  EXPECT_FALSE(std::filesystem::exists(absl::StrCat(dir, "/batches/", batch_id, ".output.jsonl")));
  // The stale output file is gone; the batch's own stands.
  EXPECT_NE(done["output_file_id"], "file-stale");
  EXPECT_EQ(Error(api->Handle(Request("GET", "/v1/files/file-stale"))).first, 404);
  EXPECT_FALSE(std::filesystem::exists(dir + "/files/file-stale.json"));
}

// Every regular file under `dir` whose mode is not 0600 and every directory below it whose mode
// is not 0700, with its mode. (A temporary renamed away while the directory is listed is passed
// over.)
std::vector<std::string> FilesNotPrivate(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::filesystem::file_status st = std::filesystem::status(it->path(), ec);
    const bool is_dir = std::filesystem::is_directory(st);
    if (ec || !(is_dir || std::filesystem::is_regular_file(st))) continue;
    const auto perms = static_cast<unsigned>(st.permissions());
    if (perms != (is_dir ? 0700u : 0600u)) {
      found.push_back(absl::StrCat(it->path().string(), " mode ", absl::Hex(perms)));
    }
  }
  return found;
}

// What an earlier run left is checked line by line before the batch carries on: a garbage line,
// a line cut short, a line of another request or another file, a repeat are dropped and their
// requests run again, so the batch ends with each request answered exactly once and counted
// once. And everything the server keeps in the directory is 0600, whatever the umask.
TEST(BatchApi, WithADirectoryLinesWrittenBeforeAreCheckedBeforeTheBatchCarriesOn) {
  const std::string dir = FreshDir("checked");
  const ScopedUmask umask(0);
  const std::string input = Lines(12, /*fail_every=*/4);  // requests 3, 7 and 11 fail
  std::string batch_id;
  {
    std::unique_ptr<BatchApi> api = OpenApi(dir);
    ASSERT_NE(api, nullptr);
    batch_id = CreateBatch(*api, Ok(api->Handle(Upload(input)))["id"])["id"];  // no handler yet
  }
  // An earlier run's lines, as a crash, a full disk or a hand may leave them.
  auto line = [&](int i, const std::string& custom_id, int status = 200) {
    BatchUsage usage;
    return BatchResponseLine(absl::StrCat("batch_req_", batch_id, "-", i), custom_id, status,
                             R"({"id": "x"})", &usage) +
           "\n";
  };
  const std::string cut = line(1, "req-1");
  std::ofstream(absl::StrCat(dir, "/batches/", batch_id, ".output.jsonl"))
      << line(0, "req-0") << "garbage\n"
      << cut.substr(0, cut.size() / 2) << "\n"
      << line(2, "req-99") << line(4, "req-4") << line(0, "req-0") << line(5, "req-5");
  std::ofstream(absl::StrCat(dir, "/batches/", batch_id, ".errors.jsonl"))
      << line(3, "req-3", 400) << line(6, "req-6");
  std::unique_ptr<BatchApi> api = OpenApi(dir, /*max_in_flight=*/2);
  ASSERT_NE(api, nullptr);
  FakeHandler handler;
  handler.Hold("9");  // the batch runs until released: its line files are looked at meanwhile
  api->SetHandler(&handler);
  for (int i = 0; i < 2000 && handler.handled() < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_THAT(FilesNotPrivate(dir), ::testing::IsEmpty());
  handler.Release();
  const Json done = WaitWhile(*api, batch_id, {"validating", "in_progress", "finalizing"});
  ASSERT_EQ(done["status"], "completed") << done.dump();
  EXPECT_EQ(done["request_counts"]["total"], 12);
  EXPECT_EQ(done["request_counts"]["completed"], 9);
  EXPECT_EQ(done["request_counts"]["failed"], 3);
  // Requests 1, 2 and 6 (lines dropped) and 7 to 11 (never written) were sent; 0, 3, 4, 5 not.
  std::vector<std::string> sent;
  for (const Json& body : handler.seen_bodies_) sent.push_back(body.value("echo", "fail"));
  std::sort(sent.begin(), sent.end());
  EXPECT_THAT(sent, ::testing::ElementsAre("1", "10", "2", "6", "8", "9", "fail", "fail"));
  std::map<std::string, int> answered;
  const std::vector<Json> out = OutputLines(Content(*api, done["output_file_id"]));
  const std::vector<Json> errors = OutputLines(Content(*api, done["error_file_id"]));
  EXPECT_EQ(out.size(), 9u);
  EXPECT_EQ(errors.size(), 3u);
  for (const std::vector<Json>* lines : {&out, &errors}) {
    for (const Json& l : *lines) {
      const std::string custom_id = l["custom_id"];
      ++answered[custom_id];
      EXPECT_EQ(l["id"], absl::StrCat("batch_req_", batch_id, "-", custom_id.substr(4)));
      EXPECT_EQ(l["response"]["status_code"].get<int>() / 100 == 2, lines == &out);
    }
  }
  ASSERT_EQ(answered.size(), 12u);
  for (const auto& [custom_id, times] : answered) EXPECT_EQ(times, 1) << custom_id;
  EXPECT_THAT(FilesNotPrivate(dir), ::testing::IsEmpty());
}

TEST(BatchApi, RoutesMethodsAndTemplates) {
  EXPECT_TRUE(BatchApi::Serves("/v1/files"));
  EXPECT_TRUE(BatchApi::Serves("/v1/batches/b-1/cancel"));
  EXPECT_FALSE(BatchApi::Serves("/v1/filesx"));
  EXPECT_FALSE(BatchApi::Serves("/v1/chat/completions"));
  EXPECT_EQ(BatchApi::RouteTemplate("/v1/files/file-1/content"), "/v1/files/{file_id}/content");
  EXPECT_EQ(BatchApi::RouteTemplate("/v1/batches/b-1"), "/v1/batches/{batch_id}");
  BatchApi api(BatchApiOptions{});
  const absl::StatusOr<http::HttpResponse> wrong = api.Handle(Request("DELETE", "/v1/batches"));
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->status, 405);
  ASSERT_EQ(wrong->headers.size(), 1u);
  EXPECT_EQ(wrong->headers[0].value, "GET, POST");
  EXPECT_EQ(Error(api.Handle(Request("GET", "/v1/files/a/b"))).first, 404);
  EXPECT_EQ(Error(api.Handle(Request("GET", "/v1/batches/nope"))).first, 404);
}

}  // namespace
}  // namespace strata::batch
