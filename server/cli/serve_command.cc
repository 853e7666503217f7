// `strata serve` (serve_command.h): flags, start-up order, signals and the drain.
#include "server/cli/serve_command.h"

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>

#include "core/log.h"
#include "core/status.h"
#include "dist/rendezvous.h"
#include "server/batch/batch_api.h"
#include "server/cli/flags.h"
#include "server/cli/parallel_flags.h"
#include "server/cli/serve_flags.h"
#include "server/cli/serve_runtime.h"
#include "server/frontend/image_inputs.h"
#include "server/frontend/openai_service.h"
#include "server/grpc/grpc_server.h"
#include "server/http/http_server.h"
#include "server/http_metrics.h"
#include "server/metrics.h"
#include "server/offload_metrics.h"
#include "server/request_timing_recorder.h"
#include "server/scheduler_step_stats.h"
#include "server/store_metrics.h"
#include "server/vision_metrics.h"

#ifndef STRATA_VERSION
#define STRATA_VERSION "unknown"
#endif

namespace strata::cli {
namespace {

// Blocks SIGINT and SIGTERM in this thread (and the threads it starts), so they are only
// received by WaitForSignal.
sigset_t BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return set;
}

// Waits for a blocked signal up to `timeout_s` (< 0: forever); the signal number or 0.
int WaitForSignal(const sigset_t& set, double timeout_s) {
  if (timeout_s < 0) {
    int sig = 0;
    sigwait(&set, &sig);
    return sig;
  }
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout_s);
  ts.tv_nsec = static_cast<long>((timeout_s - static_cast<double>(ts.tv_sec)) * 1e9);
  const int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

void PrintReady(const ServeOptions& o, int port, const frontend::ServedModel& model) {
  const std::string host =
      o.http.host == "0.0.0.0" || o.http.host == "::" ? "localhost" : o.http.host;
  const std::string auth = o.api_key.empty() ? "" : " -H 'Authorization: Bearer " + o.api_key + "'";
  std::fprintf(stdout,
               "strata: serving '%s' on http://%s:%d (OpenAI API at /v1). Try:\n"
               "curl -s http://%s:%d/v1/chat/completions -H 'Content-Type: application/json'%s "
               "-d '{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": "
               "\"Hello!\"}], \"max_tokens\": 16}'\n",
               model.names[0].c_str(), host.c_str(), port, host.c_str(), port, auth.c_str(),
               model.names[0].c_str());
  std::fflush(stdout);
}

// Drain: readiness 503, no new requests, wait for those in flight (a second signal or the
// timeout ends the wait).
void Drain(frontend::OpenAiService& service, rpc::GrpcServer& grpc_server, const sigset_t& signals,
           double timeout_s) {
  service.StartDraining();
  grpc_server.StartDraining();
  LOG_INFO("serve", "draining: {} requests in flight, up to {:.0f} s", service.num_in_flight(),
           timeout_s);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (service.num_in_flight() + grpc_server.num_in_flight() > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    if (WaitForSignal(signals, 0.02) != 0) {
      LOG_WARN("serve", "second signal: stopping now");
      return;
    }
  }
  if (service.num_in_flight() + grpc_server.num_in_flight() > 0) {
    LOG_WARN("serve", "drain timeout: aborting {} requests",
             service.num_in_flight() + grpc_server.num_in_flight());
  }
}

// The gRPC server (listening, not yet serving): --grpc-port, else 50051, or any free port when
// the HTTP port is "any" (so test servers never collide on 50051).
absl::StatusOr<std::unique_ptr<rpc::GrpcServer>> StartGrpc(
    const Flags& flags, const std::string& host, bool any_port,
    const frontend::ServiceOptions& service) {
  rpc::GrpcServerOptions options;
  options.host = host;
  options.api_key = service.api_key;
  options.limits = service.limits;
  options.on_choice_finished = service.on_choice_finished;  // the same request metrics as REST
  ASSIGN_OR_RETURN(int64_t port, flags.GetInt("grpc-port", any_port ? 0 : 50051, 0, 65535));
  options.port = static_cast<int>(port);
  options.version = STRATA_VERSION;
  return rpc::GrpcServer::Start(options);
}

// The engine loop's report of one step (EngineLoopOptions::on_step) as the metrics' StepStats;
// its expert_tokens view `expert_tokens`.
server::StepStats StepStatsBetween(const server::EngineStats& before,
                                   const server::EngineStats& now, int64_t checkpoint_bytes,
                                   int num_routed_experts, std::vector<int64_t>& expert_tokens) {
  server::StepStats step = server::StepStatsFromScheduler(
      before.scheduler, now.scheduler, now.last_step_ms / 1000.0, checkpoint_bytes);
  // Every sampled token counts as generated, including the one that ends a prefill.
  step.num_decode_tokens = now.num_generated_tokens_total - before.num_generated_tokens_total;
  if (static_cast<int>(now.expert_tokens_total.size()) == num_routed_experts) {
    expert_tokens.assign(now.expert_tokens_total.size(), 0);
    for (size_t e = 0; e < expert_tokens.size(); ++e) {
      const int64_t old = e < before.expert_tokens_total.size() ? before.expert_tokens_total[e] : 0;
      expert_tokens[e] = now.expert_tokens_total[e] - old;
    }
    step.expert_tokens = expert_tokens;
  }
  if (now.all_to_all_seconds_total > before.all_to_all_seconds_total) {
    step.all_to_all_seconds = now.all_to_all_seconds_total - before.all_to_all_seconds_total;
  }
  return step;
}

// Where the engine loop's per-step reports go: each local rank's metrics, once they exist
// (created after the model loads; steps before that serve no request). OnStep runs on the
// rank's thread, so each rank's Metrics is fed by one thread.
class StepMetricsSink {
 public:
  void Attach(std::vector<std::unique_ptr<server::Metrics>>* metrics, int64_t checkpoint_bytes,
              int num_routed_experts) {
    metrics_ = metrics;
    expert_tokens_.resize(metrics->size());
    checkpoint_bytes_ = checkpoint_bytes;
    num_routed_experts_ = num_routed_experts;
    attached_.store(true, std::memory_order_release);
  }

  // Each rank's gauges as they stand before its first step (e.g. the prompt-token cap).
  void PublishIdle(server::EngineLoop& engine) {
    for (size_t rank = 0; rank < metrics_->size(); ++rank) {
      const server::EngineStats now = engine.rank_stats(static_cast<int>(rank));
      std::vector<int64_t> scratch;
      (*metrics_)[rank]->SetGauges(
          StepStatsBetween(now, now, checkpoint_bytes_, num_routed_experts_, scratch));
    }
  }

  void OnStep(int local_rank, const server::EngineStats& before, const server::EngineStats& now) {
    if (!attached_.load(std::memory_order_acquire)) return;
    const auto rank = static_cast<size_t>(local_rank);
    (*metrics_)[rank]->OnStep(StepStatsBetween(before, now, checkpoint_bytes_, num_routed_experts_,
                                               expert_tokens_[rank]));
  }

 private:
  std::atomic<bool> attached_{false};
  std::vector<std::unique_ptr<server::Metrics>>* metrics_ = nullptr;
  std::vector<std::vector<int64_t>> expert_tokens_;  // per rank: its thread's buffer
  int64_t checkpoint_bytes_ = 0;
  int num_routed_experts_ = 0;
};

// Raises the soft open-file limit (RLIMIT_NOFILE) towards the hard one, up to 65536 as vLLM
// does: the default --max-connections is sized from it, and distributions' soft 1024 would cap
// a server at 768 connections.
void RaiseOpenFileLimit() {
  constexpr rlim_t kTarget = 65536;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= kTarget) return;
  const rlim_t raised = std::min(limit.rlim_max, kTarget);
  if (raised <= limit.rlim_cur) return;
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = raised;
  if (setrlimit(RLIMIT_NOFILE, &limit) == 0) {
    LOG_DEBUG("serve", "open-file limit raised from {} to {}", before, raised);
  }
}

absl::Status RunServe(const Flags& flags) {
  ASSIGN_OR_RETURN(ServeOptions options, ServeOptionsFromFlags(flags));
  // Every rank in this process and no coordinator asked for: the rendezvous store on an
  // ephemeral loopback port (two servers on one host never race for a fixed one).
  std::optional<dist::LocalCoordinator> local_coordinator;
  if (options.parallel.multi_rank() && options.parallel.coordinator_defaulted) {
    ASSIGN_OR_RETURN(local_coordinator, dist::StartLocalCoordinator());
    options.parallel.coordinator = local_coordinator->address;
  }
  // The other processes of a tensor-parallel group compute only; rank 0 answers requests.
  if (!options.parallel.leads_tensor_parallel_group()) {
    // SIGTERM / SIGINT (an orchestrator stopping the whole group) do not end a follower: it
    // follows until its lead has drained and stopped the group (or a collective fails).
    BlockShutdownSignals();
    return RunTensorParallelFollowerProcess(options);
  }
  RaiseOpenFileLimit();
  const sigset_t signals = BlockShutdownSignals();
  // Created once the model is loaded (the per-expert series need its expert count): one per
  // local rank, sharing one registry; request metrics go to the first.
  std::vector<std::unique_ptr<server::Metrics>> metrics;
  std::atomic<server::Metrics*> metrics_ptr{nullptr};
  StepMetricsSink step_metrics;
  // The vision tower's share of the steps (its grant is set once the tower is loaded); the
  // safety: a busy engine that reports no step for 2 s no longer holds the tower back.
  frontend::EncoderBudget encoder_budget(0, std::chrono::milliseconds(2000));
  options.encoder_budget = &encoder_budget;
  options.engine.on_step = [&step_metrics, &encoder_budget](int rank,
                                                            const server::EngineStats& before,
                                                            const server::EngineStats& now) {
    step_metrics.OnStep(rank, before, now);
    encoder_budget.OnStep(now.num_unfinished > 0);
  };
  frontend::ServiceOptions service_options;
  service_options.api_key = options.api_key;
  service_options.limits.max_logprobs = options.max_logprobs;
  service_options.version = STRATA_VERSION;
  service_options.on_choice_finished =
      [&metrics_ptr, log = options.log_requests](const server::RequestTimings& t) {
        if (server::Metrics* m = metrics_ptr.load()) m->OnRequestFinished(t);
        if (log) server::LogRequestFinished(t);
      };
  std::unique_ptr<frontend::ResponseStore> response_store;
  std::unique_ptr<frontend::BackgroundResponses> background_responses;
  if (options.responses_store_bytes > 0) {
    if (options.responses_dir.empty()) {
      response_store = std::make_unique<frontend::ResponseStore>(options.responses_store_bytes);
    } else {
      ASSIGN_OR_RETURN(response_store, frontend::ResponseStore::Open(options.responses_store_bytes,
                                                                     options.responses_dir));
    }
    service_options.response_store = response_store.get();
    background_responses = std::make_unique<frontend::BackgroundResponses>();
    service_options.background_responses = background_responses.get();
  }
  // The Files and Batches API: its batches' requests go through the service (set below).
  std::unique_ptr<batch::BatchApi> batch_api;
  if (options.files_store_bytes > 0) {
    batch::BatchApiOptions batch_options{.files_store_bytes = options.files_store_bytes,
                                         .max_in_flight = options.batch_max_concurrent_requests,
                                         .priority = options.batch_priority,
                                         .dir = options.files_dir};
    if (!options.api_key.empty()) {
      batch_options.resumed_headers = {{"authorization", "Bearer " + options.api_key}};
    }
    ASSIGN_OR_RETURN(batch_api, batch::BatchApi::Open(std::move(batch_options)));
    service_options.extra_routes_serve = batch::BatchApi::Serves;
    service_options.extra_routes_handle = [api = batch_api.get()](const http::HttpRequest& r) {
      return api->Handle(r);
    };
  }
  frontend::OpenAiService service(service_options);
  // On every way out: the batch worker stops before the service it sends requests to goes.
  struct StopBatches {
    batch::BatchApi* api;
    ~StopBatches() {
      if (api) api->Stop();
    }
  } stop_batches{batch_api.get()};
  // HTTP series from the first request on; the engine's join their registry once they exist.
  server::HttpMetrics http_metrics([](std::string_view path) {
    return batch::BatchApi::Serves(path) ? batch::BatchApi::RouteTemplate(path)
                                         : frontend::RouteTemplate(path);
  });
  options.http.on_exchange = [&http_metrics](const http::ExchangeRecord& exchange) {
    http_metrics.Observe(exchange);
  };
  ASSIGN_OR_RETURN(std::unique_ptr<http::HttpServer> server,
                   http::HttpServer::Start(options.http, &service));
  ASSIGN_OR_RETURN(std::unique_ptr<rpc::GrpcServer> grpc_server,
                   StartGrpc(flags, options.http.host, options.http.port == 0, service_options));
  options.http.port = server->port();
  LOG_INFO("serve", "listening on {}:{} (loading the model; at most {} HTTP connections)",
           options.http.host, server->port(), server->stats().max_connections);
  ASSIGN_OR_RETURN(std::unique_ptr<ModelRuntime> runtime, ModelRuntime::Load(options));
  for (int i = 0; i < runtime->engine().num_ranks(); ++i) {
    metrics.push_back(std::make_unique<server::Metrics>(
        ServedNames(options)[0], runtime->global_rank(i),
        server::MetricsOptions{.num_experts = runtime->num_routed_experts(),
                               .cache_config = runtime->CacheConfigLabels()},
        http_metrics.registry()));
  }
  metrics_ptr.store(metrics[0].get());
  step_metrics.Attach(&metrics, runtime->checkpoint_bytes(), runtime->num_routed_experts());
  step_metrics.PublishIdle(runtime->engine());
  // What the server keeps beyond a request (batches, stored responses), counted at each scrape.
  server::StoreMetrics store_metrics(*http_metrics.registry(), batch_api != nullptr,
                                     response_store != nullptr);
  // The offload tiers (--kv-offload-*), from the engine's last snapshot.
  server::OffloadMetrics offload_metrics(*http_metrics.registry(),
                                         options.kv_offload_memory_bytes > 0,
                                         !options.kv_offload_dir.empty());
  // The vision encoder (a model with a vision tower), from the image inputs' stats.
  const frontend::ImageInputs* images = runtime->served().images;
  server::VisionMetrics vision_metrics(*http_metrics.registry(), images != nullptr);
  service.SetMetricsProvider([&] {
    if (images != nullptr) {
      const frontend::ImageInputStats s = images->stats();
      vision_metrics.Set({.queue_images = s.images_waiting,
                          .running_images = s.images_encoding,
                          .cache_bytes = s.cache_bytes,
                          .cache_capacity_bytes = images->limits().encoder_cache_bytes,
                          .images_encoded = s.images_encoded,
                          .encode_seconds = s.encode_seconds,
                          .cache_hits = s.cache_hits});
    }
    if (options.kv_offload()) {
      const server::EngineStats engine_stats = runtime->engine().stats();
      if (engine_stats.offload.has_value()) {
        offload_metrics.Set(*engine_stats.offload, engine_stats.scheduler);
      }
    }
    server::ResponseCounts responses;
    if (response_store != nullptr) {
      responses = {.stored = response_store->num_responses(),
                   .bytes = response_store->num_bytes(),
                   .capacity_bytes = response_store->capacity_bytes(),
                   .background_running = background_responses->num_running()};
    }
    store_metrics.Set(batch_api != nullptr ? batch_api->Counts() : server::BatchCounts(),
                      responses);
    const http::HttpServerStats http_stats = server->stats();
    http_metrics.SetConnections({.num_connections = http_stats.num_connections,
                                 .max_connections = http_stats.max_connections,
                                 .num_refused_total = http_stats.num_refused_total,
                                 .num_accept_errors_total = http_stats.num_accept_errors_total});
    return metrics[0]->Serialize();
  });
  service.SetServerInfoProvider([&] {
    nlohmann::ordered_json info = runtime->ServerInfo(options, server->stats());
    info["responses_store"] =
        response_store == nullptr
            ? nlohmann::ordered_json(nullptr)
            : nlohmann::ordered_json{
                  {"capacity_bytes", response_store->capacity_bytes()},
                  {"num_responses", response_store->num_responses()},
                  {"num_bytes", response_store->num_bytes()},
                  {"num_background_running", background_responses->num_running()}};
    info["files_and_batches"] =
        batch_api == nullptr ? nlohmann::ordered_json(nullptr) : batch_api->Summary();
    return info;
  });
  service.SetPrefixCacheResetter(
      [&] { return runtime->engine().ResetPrefixCache(std::chrono::seconds(30)); });
  grpc_server->SetServerInfoProvider(
      [&] { return runtime->ServerInfo(options, server->stats()).dump(); });
  service.SetModel(&runtime->served());
  if (batch_api) batch_api->SetHandler(&service);  // batches created while loading start now
  service.ResumeBackgroundResponses();  // what a previous process left running (--responses-dir)
  grpc_server->SetModel(&runtime->served());
  PrintReady(options, server->port(), runtime->served());
  std::fprintf(stdout, "strata: gRPC API (strata.v1) on %s:%d\n", options.http.host.c_str(),
               grpc_server->port());
  if (options.parallel.multi_rank()) {
    std::fprintf(
        stdout, "strata: ranks %d..%d of %d (node %d of %d)\n", options.parallel.first_rank,
        options.parallel.first_rank + options.parallel.local_ranks - 1, options.parallel.world_size,
        options.parallel.node_rank, options.parallel.num_nodes);
  }
  std::fflush(stdout);
  const int sig = WaitForSignal(signals, -1);
  LOG_INFO("serve", "received {}; shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  if (batch_api) batch_api->RequestStop();  // a running batch sends no more requests
  Drain(service, *grpc_server, signals, options.drain_timeout_s);
  if (batch_api) batch_api->Stop();  // cancels what the drain left of its requests
  // Background responses the drain left running are cancelled (with --responses-dir they run
  // again at the next start; else they end with the process).
  if (background_responses) background_responses->Stop();
  grpc_server->Stop();
  server->Stop();
  metrics_ptr.store(nullptr);
  runtime.reset();  // joins the engine threads: no step reports after this
  LOG_INFO("serve", "stopped");
  return absl::OkStatus();
}

}  // namespace

const CommandSpec& ServeSpec() {
  static const CommandSpec spec{
      .program = "strata",
      .command = "serve",
      .description =
          "OpenAI-compatible HTTP server (default: the embedded demo model on port 8000)",
      .flags = ServeFlags(),
      .notes = ParallelEnvHelp()};
  return spec;
}

int ServeCommand(const std::vector<std::string>& args) {
  return RunCommand(ServeSpec(), args, RunServe);
}

}  // namespace strata::cli
