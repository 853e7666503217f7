// What `strata serve` runs: the options resolved from flags, and the model runtime (model,
// tokenizer, chat templates, cache plan, scheduler + executor in an engine loop) behind the
// OpenAI front end's ServedModel.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/model.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "kvcache/cache_layout.h"
#include "kvcache/offload/offload_tiers.h"
#include "scheduler/scheduler_config.h"
#include "server/cli/parallel_flags.h"
#include "server/cli/serve_ranks.h"
#include "server/engine_loop.h"
#include "server/frontend/encoder_budget.h"
#include "server/frontend/served_model.h"
#include "server/http/http_server.h"

namespace strata::engine::cuda {
class DeviceExpertExchange;
}  // namespace strata::engine::cuda

namespace strata::cli {

struct TensorParallelRanks;  // serve_runtime.cc

struct ServeOptions {
  std::string model_flag;                 // --model; empty: the embedded demo model
  std::vector<std::string> served_names;  // --served-model-name (comma separated)
  std::string api_key;                    // --api-key or $STRATA_API_KEY
  int64_t max_model_len = 0;              // 0: min(config, what the cache holds)
  int64_t kv_cache_memory_bytes = int64_t{1} << 30;
  bool kv_cache_memory_given = false;  // --kv-cache-memory was set (else a per-device default)
  std::string device = "cpu";          // --device: cpu | cuda
  // The offload tiers below the cache (docs/kv-offload.md): --kv-offload-memory (0: no host
  // tier), --kv-offload-dir (empty: no disk tier), --kv-offload-disk (nullopt: the default).
  // Paces the vision tower against the engine's steps (server/frontend/encoder_budget.h); set by
  // `strata serve` (which feeds it the steps), null elsewhere.
  frontend::EncoderBudget* encoder_budget = nullptr;
  int64_t kv_offload_memory_bytes = 0;
  std::string kv_offload_dir;
  std::optional<int64_t> kv_offload_disk_bytes;
  bool kv_offload() const { return kv_offload_memory_bytes > 0 || !kv_offload_dir.empty(); }
  // --kv-cache-dtype resolved for the device; nullopt: the device's default (cpu f32, cuda bf16).
  std::optional<LatentDType> latent_dtype;
  bool mmap_weights = false;  // --mmap-weights (cpu): no copy to huge pages
  engine::WeightQuantization quantization = engine::WeightQuantization::kNone;  // --quantization
  std::optional<double> gpu_memory_utilization;  // --gpu-memory-utilization (cuda), (0, 1]
  bool cuda_graphs = true;                       // false: --enforce-eager
  // --tool-call-parser / --reasoning-parser as given (empty: the checkpoint's format decides).
  // Given, they must name the checkpoint's format (kimi_k3 for a checkpoint replying in XTML).
  std::string tool_call_parser;
  std::string reasoning_parser;
  scheduler::SchedulerConfig scheduler;  // pool sizes filled from the memory plan
  // --max-num-seqs was given; else its default (64) shrinks to what a quarter of the cache
  // budget holds in KDA state slots (PlannerOptions::fit_max_num_seqs).
  bool max_num_seqs_given = false;
  server::EngineLoopOptions engine;
  http::HttpServerOptions http;
  double drain_timeout_s = 30.0;
  ParallelOptions parallel;  // world size, this process's ranks, rendezvous (MULTIRANK.md)
  // --generation-config: "auto" (the model directory's generation_config.json), "vllm" (none:
  // OpenAI's defaults) or a directory holding one.
  std::string generation_config = "auto";
  // --skip-tokenizer-init: no tokenizer loaded (frontend::ServedModel::skip_tokenizer_init).
  bool skip_tokenizer_init = false;
  std::string chat_template;               // --chat-template: a Jinja file, or the template itself
  std::string override_generation_config;  // --override-generation-config: JSON, set on top
  int max_logprobs = 20;                   // --max-logprobs
  // --reply-token-memory: generated tokens of recent chat replies kept by their text (0: off).
  int64_t reply_token_memory_tokens = int64_t{1} << 20;
  // Image URLs beyond data: (docs/vision.md): --allowed-media-domains (lower-cased hosts),
  // --allowed-local-media-path, --media-fetch-timeout.
  std::vector<std::string> allowed_media_domains;
  std::string allowed_local_media_path;
  double media_fetch_timeout_s = 5.0;
  bool log_requests = true;  // a log line per finished request (--disable-log-requests: off)
  // --responses-store-memory: bytes of stored /v1/responses (0: nothing stored).
  int64_t responses_store_bytes = int64_t{128} << 20;
  std::string responses_dir;  // --responses-dir: where they are kept too; empty: memory only
  // --files-store-memory: bytes of /v1/files (0: the Files and Batches API off).
  int64_t files_store_bytes = int64_t{1} << 30;
  std::string files_dir;  // --files-dir: where files and batches are kept too; empty: memory
  int64_t batch_max_concurrent_requests = 32;  // --batch-max-concurrent-requests
  int batch_priority = 1;                      // --batch-priority
};

// --kv-offload-dir's directory for this process: the flag's, or its sub-directory "dp<g>" when the
// process runs only some of the data-parallel groups (from group g on: one process per rank or
// per node, whose directories may be on one file system; each needs its own).
std::string OffloadDirOf(const ServeOptions& options);

class ModelRuntime {
 public:
  // Loads everything, joins the group (several ranks: blocks until every rank connected) and
  // starts the engine loop (one thread per local rank). Errors: missing/bad checkpoint or
  // tokenizer, a cache budget too small for max_model_len, an invalid scheduler configuration.
  static absl::StatusOr<std::unique_ptr<ModelRuntime>> Load(const ServeOptions& options);
  ~ModelRuntime();  // stops the engine loop (aborting what is left)

  const frontend::ServedModel& served() const { return served_; }
  server::EngineLoop& engine() { return *engine_; }
  // /server_info: resolved config, memory plan, parallel layout, build, live engine stats.
  nlohmann::ordered_json ServerInfo(const ServeOptions& options,
                                    const http::HttpServerStats& http_stats) const;
  std::string DescribeMemory() const;
  // Bytes of one KDA checkpoint (all KDA layers), for the metrics.
  int64_t checkpoint_bytes() const { return layout_.state_bytes_per_sequence(); }
  int num_routed_experts() const { return model_->config().moe.num_experts; }
  // strata:cache_config_info's labels: the memory plan and the cache options (vLLM's names).
  std::vector<std::pair<std::string, std::string>> CacheConfigLabels() const;
  // Global rank of engine rank `i` (metrics label the series with it): under tensor
  // parallelism the engine ranks are the groups' leads, a group apart.
  int global_rank(int engine_rank) const { return first_rank_ + engine_rank * rank_stride_; }

 private:
  ModelRuntime() = default;
  absl::Status LoadTokenizer(const ServeOptions& options);
  absl::Status LoadGenerationConfig(const ServeOptions& options);
  absl::Status StartEngine(const ServeOptions& options);
  // --kv-offload-*: opens the tiers for this checkpoint and cache layout (offload_).
  absl::Status OpenOffloadTiers(const ServeOptions& options);
  std::vector<server::EngineRank> MakeLocalRanks(const ServeOptions& options);
  // --tensor-parallel-size: the engine rank of the group lead at `local_rank` (scheduler, an
  // executor that sends each plan to its group, the step gate; with several data-parallel
  // groups the expert exchange and the gate over the world).
  server::EngineRank TensorParallelLeadRank(size_t local_rank);
  // --device cuda: uploads the weights (per replica, replica i on GPU i mod the device count),
  // plans the caches in device memory (from --kv-cache-memory, else 90% of what the weights
  // leave free, split among replicas sharing a GPU) and allocates them.
  absl::Status PrepareCudaExecutor(const ServeOptions& options, kvcache::PlannerOptions plan);
#if defined(STRATA_HAVE_CUDA)
  // Several ranks with --device cuda: each local rank's device-memory communicator and
  // expert exchange (kept in device_exchange_owners_); null entries for a model without MoE.
  absl::StatusOr<std::vector<engine::cuda::DeviceExpertExchange*>> ConnectDeviceExchanges(
      const ServeOptions& options, int devices);
#endif

  std::string dir_;
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  std::optional<engine::ChatTemplate> chat_template_;
  std::optional<engine::ChatTemplate> chat_template_tools_;
  frontend::GenerationConfig generation_config_;
  kvcache::CacheLayout layout_;
  // --device cuda: the executors (one per replica), made before the schedulers (the cache plan
  // depends on the device memory the weights leave); MakeLocalRanks hands them to the engine.
  std::vector<std::unique_ptr<engine::StepExecutor>> cuda_executors_;
  scheduler::SchedulerConfig scheduler_config_;
  // The executors' SchedulerConfig::prefill_chunk_alignment (set by PrepareCudaExecutor).
  int prefill_chunk_alignment_ = 0;
  int first_rank_ = 0;
  int rank_stride_ = 1;  // global ranks between two engine ranks
  // Communicators and MoE exchanges of the local ranks (several ranks only); declared before
  // engine_ so the loops stop before what they use goes away.
  std::unique_ptr<LocalRanks> local_ranks_;
  // --tensor-parallel-size: this process's other ranks of the group (their shards, executors
  // and follower threads) and every local rank's group communicator (serve_runtime.cc).
  std::unique_ptr<TensorParallelRanks> tp_;
  // --device cuda with several ranks: the NCCL communicators and device expert exchanges
  // (type-erased: this header does not see CUDA), and each exchange's all-to-all seconds since
  // the previous call (for the metrics).
  std::vector<std::shared_ptr<void>> device_exchange_owners_;
  std::vector<std::function<double()>> device_exchange_stats_;
  // --kv-offload-*: the tiers below the cache (before engine_: the loop stops first).
  std::unique_ptr<kvcache::OffloadTiers> offload_;
  std::unique_ptr<server::EngineLoop> engine_;
  std::unique_ptr<frontend::ReplyTokenMemory> reply_tokens_;
  // --device cuda with a vision tower: the tower on the first local rank's GPU (its weights and
  // working buffers taken before the cache plan), which images_ encodes with.
  std::unique_ptr<engine::ImageEncoder> device_vision_;
  std::unique_ptr<frontend::ImageInputs> images_;  // with a vision tower
  frontend::ServedModel served_;
};

// A process whose ranks of a tensor-parallel group are all followers (--world-size T --rank R,
// R > 0): loads their shards, plans the same caches as the lead, joins the group and follows
// its steps until the lead stops (no API of its own). Errors: those of loading and joining.
absl::Status RunTensorParallelFollowerProcess(const ServeOptions& options);

// The names clients use: --served-model-name, else --model as given, else "strata-demo".
std::vector<std::string> ServedNames(const ServeOptions& options);

// "1073741824", "1GiB", "512MiB", "2G", "64M", "100K" → bytes (K/M/G = 2^10/2^20/2^30); 0 only
// with allow_zero.
absl::StatusOr<int64_t> ParseBytes(const std::string& text, const std::string& flag,
                                   bool allow_zero = false);

}  // namespace strata::cli
