// strata-bench-serve: the serving benchmark (docs/performance.md "Serving"): requests from a
// dataset sent to an OpenAI-compatible server at Poisson (gamma) arrival times, streamed, timed;
// TTFT, TPOT, ITL and end-to-end latency percentiles, request / token throughput and goodput under
// an SLO, printed as a table and saved as JSON. Flags and JSON fields follow vLLM's `bench serve`,
// so a run against Strata and one against another server compare directly.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "clients/bench_serve/load_runner.h"
#include "clients/bench_serve/metrics.h"
#include "clients/bench_serve/workload.h"
#include "core/command_line.h"
#include "nlohmann/json.hpp"

namespace strata::bench_serve {
namespace {

using Json = nlohmann::json;

const CommandSpec& BenchServeSpec() {
  static const CommandSpec spec{
      .program = "strata-bench-serve",
      .description =
          "the serving benchmark: latency percentiles and throughput of an "
          "OpenAI-compatible server under load (vLLM's `bench serve` flags and JSON)",
      .flags =
          {{"base-url", true, "the server (default http://127.0.0.1:8000; or --host / --port)"},
           {"host", true, "the server's host (default 127.0.0.1)"},
           {"port", true, "the server's port (default 8000)"},
           {"endpoint", true, "/v1/completions (default) or /v1/chat/completions"},
           {"backend", true, "openai or vllm (completions), openai-chat (chat): vLLM's names"},
           {"model", true, "default: the first model of /v1/models"},
           {"api-key", true, "Authorization: Bearer KEY (default $OPENAI_API_KEY)"},
           {"dataset-name", true, "random (default) or sharegpt"},
           {"dataset-path", true, "the ShareGPT JSON file"},
           {"num-prompts", true, "requests to send (default 1000)"},
           {"random-input-len", true, "prompt tokens (default 1024)"},
           {"random-output-len", true, "max_tokens (default 128)"},
           {"random-range-ratio", true, "lengths drawn from len·[1−R, 1+R] (default 0)"},
           {"random-prefix-len", true, "the same N random tokens before every prompt (default 0)"},
           {"random-vocab-size", true,
            "ids in [0, N) (default: the server's /server_info, tokenizer vocabulary)"},
           {"sharegpt-output-len", true,
            "max_tokens for every ShareGPT request (default: its reply's length)"},
           {"request-rate", true, "requests/s, or inf (default); several R,R...: one run per rate"},
           {"burstiness", true, "gamma shape of the arrival gaps (default 1: Poisson)"},
           {"max-concurrency", true, "at most N requests in flight"},
           {"seed", true, "dataset and arrivals (default 0)"},
           {"ignore-eos", false, "generate max_tokens tokens whatever the model says"},
           {"temperature", true, "sampling temperature (default: the server's)"},
           {"top-p", true, "nucleus sampling mass (default: the server's)"},
           {"top-k", true, "the k most likely tokens only (default: the server's)"},
           {"goodput", true,
            "the SLO for request_goodput, ttft:MS,tpot:MS,e2el:MS (or vLLM's space-separated "
            "form: --goodput ttft:MS tpot:MS)"},
           {"percentile-metrics", true, "of ttft,tpot,itl,e2el to print (default ttft,tpot,itl)"},
           {"metric-percentiles", true, "e.g. 50,90,99 (default)"},
           {"request-timeout", true,
            "a request still running after S seconds fails (default: none)"},
           {"ready-check-timeout-sec", true,
            "wait up to S seconds for the server to answer (default 0)"},
           {"save-result", false, "write the result JSON (--result-dir, --result-filename)"},
           {"result-dir", true, "where --save-result writes (default .)"},
           {"result-filename", true, "the result file's name (default openai-RATEqps-DATE.json)"}},
      .notes =
          "Exit status: 0 when every request succeeded, 1 when some failed, 2 on bad flags "
          "or no server.\n"};
  return spec;
}

absl::StatusOr<std::vector<double>> NumberList(const std::string& flag, const std::string& text) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double v = 0;
    if (part == "inf") {
      v = std::numeric_limits<double>::infinity();
    } else if (!absl::SimpleAtod(part, &v) || !(v > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a positive number (or inf)"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

absl::StatusOr<Slo> ParseGoodput(const std::string& text) {
  Slo slo;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar(", "), absl::SkipEmpty())) {
    const std::vector<std::string> kv = absl::StrSplit(part, ':');
    double ms = 0;
    if (kv.size() != 2 || !absl::SimpleAtod(kv[1], &ms) || !(ms > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--goodput: '", part, "' is not NAME:MILLISECONDS (ttft, tpot or e2el)"));
    }
    if (kv[0] == "ttft") {
      slo.ttft_ms = ms;
    } else if (kv[0] == "tpot") {
      slo.tpot_ms = ms;
    } else if (kv[0] == "e2el") {
      slo.e2el_ms = ms;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--goodput: unknown metric '", kv[0], "' (ttft, tpot or e2el)"));
    }
  }
  return slo;
}

// A JSON reply of a set-up call, or an error naming the call.
absl::StatusOr<Json> GetJson(const Target& target, const std::string& method,
                             const std::string& path, const std::string& body = "") {
  absl::StatusOr<HttpReply> reply = HttpCall(target, method, path, body);
  if (!reply.ok()) return reply.status();
  Json j = Json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
  if (reply->status != 200 || j.is_discarded()) {
    return absl::FailedPreconditionError(
        absl::StrCat(method, " ", path, ": HTTP ", reply->status, " ", reply->body.substr(0, 300)));
  }
  return j;
}

struct Config {
  Target target;
  LoadOptions load;
  std::string dataset = "random";
  RandomDataset random;
  ShareGptDataset sharegpt;
  std::vector<double> rates = {std::numeric_limits<double>::infinity()};
  double burstiness = 1.0;
  uint64_t seed = 0;
  Slo slo;
  std::vector<std::string> metrics = {"ttft", "tpot", "itl"};
  std::vector<double> percents = {50, 90, 99};
  bool save = false;
  std::string result_dir = ".", result_filename;
  double ready_timeout_s = 0;  // wait this long for the server to answer /v1/models
};

absl::StatusOr<Config> ParseConfig(const Flags& f) {
  Config c;
  auto get_int = [&f](const char* name, int64_t* out, int64_t min) -> absl::Status {
    absl::StatusOr<int64_t> v = f.GetInt(name, *out, min, INT64_MAX);
    if (!v.ok()) return v.status();
    *out = *v;
    return absl::OkStatus();
  };
  auto get_double = [&f](const char* name, double* out) -> absl::Status {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    absl::StatusOr<std::optional<double>> v = f.GetDouble(name, -kInf, kInf);
    if (!v.ok()) return v.status();
    if (v->has_value()) *out = **v;
    return absl::OkStatus();
  };
  if (f.Has("base-url") && (f.Has("host") || f.Has("port"))) {
    return absl::InvalidArgumentError("give --base-url or --host/--port, not both");
  }
  if (f.Has("base-url")) {
    absl::StatusOr<Target> t = ParseBaseUrl(*f.Get("base-url"));
    if (!t.ok()) return t.status();
    c.target = *t;
  } else {
    absl::StatusOr<Target> t = ParseBaseUrl(absl::StrCat(
        "http://", f.Get("host").value_or("127.0.0.1"), ":", f.Get("port").value_or("8000")));
    if (!t.ok()) return t.status();
    c.target = *t;
  }
  const char* env_key = std::getenv("OPENAI_API_KEY");
  c.target.api_key = f.Get("api-key").value_or(env_key != nullptr ? env_key : "");
  c.load.target = c.target;
  // vLLM's --backend picks the default endpoint: vllm / openai → completions, openai-chat →
  // chat completions (all speak the OpenAI API here).
  const std::string backend = f.Get("backend").value_or("openai");
  if (backend != "openai" && backend != "vllm" && backend != "openai-chat") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend must be openai, vllm or openai-chat, got ", backend));
  }
  c.load.endpoint =
      f.Get("endpoint")
          .value_or(backend == "openai-chat" ? "/v1/chat/completions" : "/v1/completions");
  if (c.load.endpoint != "/v1/completions" && c.load.endpoint != "/v1/chat/completions") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--endpoint must be /v1/completions or /v1/chat/completions, got ", c.load.endpoint));
  }
  c.load.model = f.Get("model").value_or("");
  c.dataset = f.Get("dataset-name").value_or("random");
  if (c.dataset != "random" && c.dataset != "sharegpt") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset-name must be random or sharegpt, got ", c.dataset));
  }
  if (c.dataset == "sharegpt" && !f.Has("dataset-path")) {
    return absl::InvalidArgumentError("--dataset-name sharegpt needs --dataset-path FILE");
  }
  if (c.dataset == "random" && c.load.endpoint != "/v1/completions") {
    return absl::InvalidArgumentError(
        "the random dataset sends token ids: use --endpoint /v1/completions (or a ShareGPT file "
        "for chat)");
  }
  c.sharegpt.path = f.Get("dataset-path").value_or("");
  int64_t num = 1000, seed = 0;
  for (absl::Status s :
       {get_int("num-prompts", &num, 1), get_int("random-input-len", &c.random.input_len, 1),
        get_int("random-output-len", &c.random.output_len, 1),
        get_int("random-prefix-len", &c.random.prefix_len, 0),
        get_int("random-vocab-size", &c.random.vocab_size, 2),
        get_int("sharegpt-output-len", &c.sharegpt.fixed_output_len, 1),
        get_int("max-concurrency", &c.load.max_concurrency, 1), get_int("seed", &seed, 0),
        get_double("random-range-ratio", &c.random.range_ratio),
        get_double("burstiness", &c.burstiness),
        get_double("request-timeout", &c.load.request_timeout_s),
        get_double("ready-check-timeout-sec", &c.ready_timeout_s)}) {
    if (!s.ok()) return s;
  }
  if (!(c.random.range_ratio >= 0 && c.random.range_ratio < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--random-range-ratio must be in [0, 1), got ", c.random.range_ratio));
  }
  if (!(c.burstiness > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--burstiness must be > 0, got ", c.burstiness));
  }
  c.random.num_prompts = c.sharegpt.num_prompts = num;
  c.seed = c.random.seed = c.sharegpt.seed = static_cast<uint64_t>(seed);
  if (f.Has("request-rate")) {
    absl::StatusOr<std::vector<double>> rates = NumberList("request-rate", *f.Get("request-rate"));
    if (!rates.ok()) return rates.status();
    c.rates = *rates;
  }
  if (f.Has("goodput")) {
    absl::StatusOr<Slo> slo = ParseGoodput(*f.Get("goodput"));
    if (!slo.ok()) return slo.status();
    c.slo = *slo;
  }
  if (f.Has("percentile-metrics")) {
    c.metrics = absl::StrSplit(*f.Get("percentile-metrics"), ',', absl::SkipWhitespace());
    for (const std::string& m : c.metrics) {
      if (m != "ttft" && m != "tpot" && m != "itl" && m != "e2el") {
        return absl::InvalidArgumentError(
            absl::StrCat("--percentile-metrics: unknown metric '", m, "' (ttft, tpot, itl, e2el)"));
      }
    }
  }
  if (f.Has("metric-percentiles")) {
    c.percents.clear();
    for (absl::string_view part : absl::StrSplit(*f.Get("metric-percentiles"), ',')) {
      double p = 0;
      if (!absl::SimpleAtod(part, &p) || !(p > 0 && p < 100)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--metric-percentiles: '", part, "' is not in (0, 100)"));
      }
      c.percents.push_back(p);
    }
  }
  if (f.Has("ignore-eos")) c.load.extra_body["ignore_eos"] = true;
  for (const char* name : {"temperature", "top-p"}) {
    double v = 0;
    if (absl::Status s = get_double(name, &v); !s.ok()) return s;
    if (f.Has(name))
      c.load.extra_body[name[0] == 't' && name[1] == 'e' ? "temperature" : "top_p"] = v;
  }
  int64_t top_k = 0;
  if (absl::Status s = get_int("top-k", &top_k, -1); !s.ok()) return s;
  if (f.Has("top-k")) c.load.extra_body["top_k"] = top_k;
  c.save = f.Has("save-result");
  c.result_dir = f.Get("result-dir").value_or(".");
  c.result_filename = f.Get("result-filename").value_or("");
  return c;
}

// Waits until GET /v1/models answers 200 (a server still loading its model answers 503), at
// most `timeout_s`; the last error after that.
absl::StatusOr<Json> WaitForModels(const Target& target, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    absl::StatusOr<Json> models = GetJson(target, "GET", "/v1/models");
    if (models.ok() || std::chrono::steady_clock::now() >= deadline) return models;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

// The model name and, for the random dataset, the vocabulary, asked from the server.
absl::Status Discover(Config& c) {
  absl::StatusOr<Json> models = WaitForModels(c.target, c.ready_timeout_s);
  if (!models.ok()) return models.status();
  if (c.load.model.empty()) {
    const Json& data = (*models)["data"];
    if (!data.is_array() || data.empty() || !data[0].contains("id")) {
      return absl::FailedPreconditionError("GET /v1/models lists no model: pass --model");
    }
    c.load.model = data[0]["id"].get<std::string>();
  }
  if (c.dataset == "random" && c.random.vocab_size == 0) {
    absl::StatusOr<Json> info = GetJson(c.target, "GET", "/server_info");
    const Json* model = info.ok() && info->contains("model") ? &(*info)["model"] : nullptr;
    for (const char* key : {"tokenizer_vocab_size", "vocab_size"}) {
      if (model != nullptr && model->contains(key) && (*model)[key].is_number_integer() &&
          (*model)[key].get<int64_t>() >= 2) {
        c.random.vocab_size = (*model)[key].get<int64_t>();
        break;
      }
    }
    if (c.random.vocab_size == 0) {
      return absl::FailedPreconditionError(
          "the server's vocabulary size is unknown (no /server_info): pass --random-vocab-size");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<BenchRequest>> MakeRequests(const Config& c) {
  if (c.dataset == "random") return RandomRequests(c.random);
  const Target target = c.target;
  const std::string model = c.load.model;
  return ShareGptRequests(c.sharegpt, [&](const std::string& text) -> absl::StatusOr<int64_t> {
    Json body = Json::object();
    body["model"] = model;
    body["prompt"] = text;
    body["add_special_tokens"] = false;
    absl::StatusOr<Json> reply = GetJson(target, "POST", "/tokenize", body.dump());
    if (!reply.ok()) return reply.status();
    if (!reply->contains("count") || !(*reply)["count"].is_number_integer()) {
      return absl::FailedPreconditionError("POST /tokenize returned no count");
    }
    return (*reply)["count"].get<int64_t>();
  });
}

std::string Timestamp() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%d-%H%M%S", std::localtime(&now));
  return text;
}

// vLLM takes `--goodput ttft:500 tpot:50` (several words): joined into one comma-separated value
// so ported command lines parse.
std::vector<std::string> JoinGoodputWords(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    out.push_back(args[i]);
    if (args[i] != "--goodput") continue;
    std::vector<std::string> words;
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) words.push_back(args[++i]);
    if (!words.empty()) out.push_back(absl::StrJoin(words, ","));
  }
  return out;
}

int Main(const std::vector<std::string>& raw_args) {
  const std::vector<std::string> args = JoinGoodputWords(raw_args);
  CommandLine line = ReadCommandLine(BenchServeSpec(), args);
  if (line.exit_code) return *line.exit_code;
  absl::StatusOr<Config> config = ParseConfig(line.flags);
  if (!config.ok()) return UsageError(BenchServeSpec(), config.status());
  Config& c = *config;
  if (absl::Status s = Discover(c); !s.ok()) {
    std::fprintf(stderr, "strata-bench-serve: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<std::vector<BenchRequest>> requests = MakeRequests(c);
  if (!requests.ok()) {
    std::fprintf(stderr, "strata-bench-serve: %s\n",
                 std::string(requests.status().message()).c_str());
    return 2;
  }
  std::printf("%zu requests (%s) to http://%s:%s%s, model %s\n", requests->size(),
              c.dataset.c_str(), c.target.host.c_str(), c.target.port.c_str(),
              c.load.endpoint.c_str(), c.load.model.c_str());
  Json runs = Json::array();
  bool all_ok = true;
  for (double rate : c.rates) {
    const std::vector<double> arrivals =
        ArrivalTimes(static_cast<int64_t>(requests->size()), rate, c.burstiness, c.seed);
    const LoadResult result = RunLoad(c.load, *requests, arrivals);
    const BenchSummary s = Summarize(result.records, result.duration_s, c.percents, c.slo);
    std::fputs(SummaryTable(s, c.metrics, rate, c.load.max_concurrency).c_str(), stdout);
    for (const RequestRecord& r : result.records) {
      if (!r.success) {
        std::fprintf(stderr, "first failure: %s\n", r.error.c_str());
        break;
      }
    }
    all_ok = all_ok && s.failed == 0;
    Json j = SummaryJson(s, result.records);
    j["date"] = Timestamp();
    j["backend"] = "openai";
    j["endpoint"] = c.load.endpoint;
    j["base_url"] = absl::StrCat("http://", c.target.host, ":", c.target.port);
    j["model_id"] = c.load.model;
    j["dataset_name"] = c.dataset;
    j["num_prompts"] = requests->size();
    j["request_rate"] = std::isinf(rate) ? Json("inf") : Json(rate);
    j["burstiness"] = c.burstiness;
    j["max_concurrency"] = c.load.max_concurrency > 0 ? Json(c.load.max_concurrency) : Json();
    j["seed"] = c.seed;
    runs.push_back(std::move(j));
  }
  if (c.save) {
    std::string name = c.result_filename;
    if (name.empty()) {
      name = absl::StrCat("openai-",
                          c.rates.size() == 1 && !std::isinf(c.rates[0])
                              ? absl::StrCat(c.rates[0])
                              : std::string(c.rates.size() == 1 ? "inf" : "multi"),
                          "qps-", Timestamp(), ".json");
    }
    const std::string path = absl::StrCat(c.result_dir, "/", name);
    std::ofstream out(path);
    out << (runs.size() == 1 ? runs[0] : runs).dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "strata-bench-serve: cannot write %s\n", path.c_str());
      return 2;
    }
    std::printf("result: %s\n", path.c_str());
  }
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace strata::bench_serve

int main(int argc, char** argv) {
  return strata::bench_serve::Main(std::vector<std::string>(argv + 1, argv + argc));
}
