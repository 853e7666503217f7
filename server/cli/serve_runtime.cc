#include "server/cli/serve_runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <functional>
#include <thread>

#include <sys/statvfs.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/log.h"
#include "core/status.h"
#include "dist/tensor_parallel_group.h"
#include "engine/cache_copy.h"
#include "engine/executor.h"
#include "engine/tokenizer/xtml_output_parser.h"
#include "kernels/cpu/matmul.h"
#include "kvcache/memory_planner.h"
#include "kvcache/offload/disk_tier.h"
#include "kvcache/offload/host_tier.h"
#include "scheduler/scheduler.h"
#include "server/cli/default_model.h"
#include "server/tensor_parallel_follower.h"

#if defined(STRATA_HAVE_CUDA)
#include <cuda_runtime.h>

#include "engine/cuda/cuda_executor.h"
#include "engine/cuda/cuda_vision_encoder.h"
#include "engine/cuda/device_moe_dispatch.h"
#if !defined(STRATA_CUDA_EMU)
#include "dist/nccl_communicator.h"
#endif
#endif

#ifndef STRATA_VERSION
#define STRATA_VERSION "unknown"
#endif

namespace strata::cli {

using Json = nlohmann::ordered_json;

absl::StatusOr<int64_t> ParseBytes(const std::string& text, const std::string& flag,
                                   bool allow_zero) {
  std::string number = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  int shift = 0;
  for (const auto& [suffix, bits] : {std::pair<const char*, int>{"gib", 30},
                                     {"mib", 20},
                                     {"kib", 10},
                                     {"gb", 30},
                                     {"mb", 20},
                                     {"kb", 10},
                                     {"g", 30},
                                     {"m", 20},
                                     {"k", 10}}) {
    const std::string s = suffix;
    if (number.size() > s.size() && number.compare(number.size() - s.size(), s.size(), s) == 0) {
      number.resize(number.size() - s.size());
      shift = bits;
      break;
    }
  }
  double value = 0;
  if (!absl::SimpleAtod(number, &value) || !(value > 0 || (allow_zero && value == 0)) ||
      value * (1ll << shift) > 9.0e18) {
    return absl::InvalidArgumentError("--" + flag + " must be a " +
                                      (allow_zero ? "size (0: off)" : "positive size") +
                                      " like 1073741824, 512MiB or 2GiB; got '" + text + "'");
  }
  return static_cast<int64_t>(value * static_cast<double>(int64_t{1} << shift));
}

std::vector<std::string> ServedNames(const ServeOptions& options) {
  if (!options.served_names.empty()) return options.served_names;
  return {options.model_flag.empty() ? "strata-demo" : options.model_flag};
}

namespace {

// How global rank `rank` of a tensor-parallel group loads its shard: with several data-parallel
// groups only its own routed experts are copied (or quantised), as under expert parallelism.
absl::StatusOr<engine::ModelLoadOptions> RankLoadOptions(const std::string& dir,
                                                         const ServeOptions& options, int rank) {
  const ParallelOptions& p = options.parallel;
  engine::ModelLoadOptions load;
  load.copy_weights = options.device == "cpu" && !options.mmap_weights;  // CUDA uploads the mapping
  load.quantization = options.quantization;
  load.reserve_bytes = options.kv_cache_memory_bytes * p.local_ranks;
  load.decode_context_parallel_size = p.decode_context_parallel_size;
  load.tensor_parallel = {rank % p.tensor_parallel_size, p.tensor_parallel_size};
  if (p.data_parallel_groups()) {
    ASSIGN_OR_RETURN(const engine::ModelConfig config, engine::LoadModelConfig(dir));
    if (config.moe.num_experts > 0) {
      ASSIGN_OR_RETURN(load.routed_experts,
                       RanksRoutedExperts(p, config.moe.num_experts, rank, /*num_ranks=*/1));
    }
  }
  return load;
}

}  // namespace

// The ranks of a tensor-parallel group that live in this process: their shards (index 0 is
// null in the lead's process: ModelRuntime::model_), their group communicators and, for every
// rank but the lead, an executor and a step gate driven by a follower thread.
struct TensorParallelRanks {
  std::vector<std::unique_ptr<engine::Model>> shards;  // by local rank
  std::vector<std::unique_ptr<dist::Communicator>> comms;
  std::vector<std::unique_ptr<dist::CommunicatorTensorParallelGroup>> groups;
  // Decode context parallelism over C < T ranks: each local rank's C-rank group (set on its
  // entry of `groups`); empty otherwise.
  ContextParallelGroups context_parallel;
#if defined(STRATA_HAVE_CUDA)
  // --device cuda: each local rank's collectives on its compute stream (engine/cuda/
  // device_collectives.h: NCCL on GPUs; on the emulator, where device memory is host memory,
  // `groups` run as host functions on the stream), the context-parallel group's too when
  // C < T, and the NCCL communicators behind them (declared before the executors that use
  // them).
  std::vector<std::unique_ptr<dist::Communicator>> device_comms, device_cp_comms;
  std::vector<std::unique_ptr<engine::cuda::DeviceCollectives>> device_collectives,
      device_cp_collectives;
#endif
  // --device cuda: each local rank's executor (index 0 is the lead's in the lead's process,
  // taken by TensorParallelLeadRank).
  std::vector<std::unique_ptr<engine::StepExecutor>> cuda_executors;
  std::vector<std::unique_ptr<engine::StepFollower>> executors;
  std::vector<std::unique_ptr<server::CommunicatorStepGate>> gates;
  std::vector<std::thread> followers;
  // Several data-parallel groups: every local rank's communicator over the whole world, its
  // expert exchange (the routed experts spread over all ranks) and step gate; null otherwise.
  std::unique_ptr<LocalRanks> world;
#if defined(STRATA_HAVE_CUDA)
  // --device cuda with several data-parallel groups: each local rank's exchange in device
  // memory (PrepareCuda), what keeps it alive, and its all-to-all seconds since the last call.
  std::vector<engine::cuda::DeviceExpertExchange*> device_exchanges;
  std::vector<std::shared_ptr<void>> device_exchange_owners;
  std::vector<std::function<double()>> device_all_to_all_seconds;
#endif

  // The followers leave once the lead stops (server/tensor_parallel_follower.h).
  ~TensorParallelRanks() {
    for (std::thread& t : followers) t.join();
  }

  // Loads local ranks [first, local_ranks)'s shards at once (one thread each).
  absl::Status LoadShards(const std::string& dir, const ServeOptions& options, int first) {
    const ParallelOptions& p = options.parallel;
    shards.resize(static_cast<size_t>(p.local_ranks));
    std::vector<absl::Status> status(shards.size());
    std::vector<engine::ModelLoadOptions> loads(shards.size());
    for (int i = first; i < p.local_ranks; ++i) {
      ASSIGN_OR_RETURN(loads[static_cast<size_t>(i)],
                       RankLoadOptions(dir, options, p.first_rank + i));
    }
    std::vector<std::thread> threads;
    for (int i = first; i < p.local_ranks; ++i) {
      threads.emplace_back([&, i] {
        absl::StatusOr<std::unique_ptr<engine::Model>> model =
            engine::Model::Load(dir, loads[static_cast<size_t>(i)]);
        if (model.ok()) {
          shards[static_cast<size_t>(i)] = *std::move(model);
        } else {
          status[static_cast<size_t>(i)] = model.status();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const absl::Status& s : status) RETURN_IF_ERROR(s);
    return absl::OkStatus();
  }

  // Joins the group (every local rank), then checks that every rank planned the same caches:
  // the lead's block tables and slots index every rank's arena.
  absl::Status Connect(const ParallelOptions& p, const engine::ModelConfig& cfg,
                       const kvcache::CacheLayout& layout) {
    RETURN_IF_ERROR(ConnectGroups(p, cfg));
    return CheckLayouts(layout);
  }

  // With several data-parallel groups the world first (its rank 0 serves the rendezvous store
  // every group's rendezvous then uses; `cpu_exchanges` false: the CUDA executors exchange on
  // the device), then each rank's own group.
  absl::Status ConnectGroups(const ParallelOptions& p, const engine::ModelConfig& cfg,
                             bool cpu_exchanges = true) {
    if (p.data_parallel_groups()) {
      ASSIGN_OR_RETURN(world, ConnectLocalRanks(p, cfg, cpu_exchanges));
    }
    ASSIGN_OR_RETURN(comms, ConnectEachLocalRank(p, "strata-tp", "the tensor-parallel group",
                                                 HostLocalOrGloo(p, "the tensor-parallel group",
                                                                 p.tensor_parallel_size),
                                                 p.tensor_parallel_size));
    for (auto& comm : comms) {
      groups.push_back(std::make_unique<dist::CommunicatorTensorParallelGroup>(comm.get()));
    }
    const int c = p.decode_context_parallel_size;
    if (c > 1 && c < p.tensor_parallel_size) {  // C < T: each context-parallel group's own
      ASSIGN_OR_RETURN(context_parallel,
                       ConnectContextParallelGroups(
                           p, p.tensor_parallel_size, c, "strata-cp",
                           HostLocalOrGloo(p, "the context-parallel group", c), groups));
    }
    return absl::OkStatus();
  }

  absl::Status CheckLayouts(const kvcache::CacheLayout& layout) {
    std::vector<std::thread> threads;
    std::vector<absl::Status> status(comms.size());
    for (size_t i = 0; i < comms.size(); ++i) {
      threads.emplace_back([&, i] { status[i] = CheckSameLayout(*comms[i], layout); });
    }
    for (std::thread& t : threads) t.join();
    for (const absl::Status& s : status) RETURN_IF_ERROR(s);
    return absl::OkStatus();
  }

  // Whether local rank i leads its group (runs the scheduler and answers requests).
  static bool Leads(const ParallelOptions& p, size_t i) {
    return (p.first_rank + static_cast<int>(i)) % p.tensor_parallel_size == 0;
  }

  // The forward context of local rank i's CPU executor: its group, and with several
  // data-parallel groups the expert exchange over the world.
  engine::ForwardContext CpuContext(size_t i) const {
    engine::ForwardContext context;
    context.tensor_parallel = groups[i].get();
    if (world != nullptr) {
      context.exchange = world->exchanges[i].get();
      context.workspace = world->workspaces[i].get();
    }
    return context;
  }

  // The step gate of local rank i: over the world when it spans several groups (every MoE
  // exchange needs every rank), else over the group.
  std::unique_ptr<server::CommunicatorStepGate> Gate(size_t i) const {
    return std::make_unique<server::CommunicatorStepGate>(world != nullptr ? world->comms[i].get()
                                                                           : comms[i].get());
  }

  // Starts a follower for every local rank that does not lead its group: CPU executors on
  // `layout`, or the CUDA executors PrepareCuda made.
  void StartFollowers(const ParallelOptions& p, const kvcache::CacheLayout& layout) {
    for (size_t i = 0; i < comms.size(); ++i) {
      if (Leads(p, i)) continue;
      std::unique_ptr<engine::StepFollower> follower;
      if (!cuda_executors.empty()) {
        follower.reset(dynamic_cast<engine::StepFollower*>(cuda_executors[i].release()));
        CHECK(follower != nullptr);
      } else {
        auto executor = std::make_unique<engine::CpuExecutor>(*shards[i], layout);
        executor->set_forward_context(CpuContext(i));
        follower = std::move(executor);
      }
      std::unique_ptr<server::CommunicatorStepGate> gate = Gate(i);
      followers.emplace_back([follower = follower.get(), gate = gate.get()] {
        server::RunTensorParallelFollower(*gate, *follower);
      });
      executors.push_back(std::move(follower));
      gates.push_back(std::move(gate));
    }
  }

#if defined(STRATA_HAVE_CUDA)
  // --device cuda: the device-memory side of the group, one executor per local rank on its GPU
  // (`lead`: rank 0's shard in the lead's process, else null), one cache plan for all, sized by
  // the rank with the least room and checked against the other processes' ranks; the caches
  // allocated. Call after ConnectGroups.
  absl::StatusOr<kvcache::CacheLayout> PrepareCuda(const ServeOptions& options,
                                                   kvcache::PlannerOptions plan,
                                                   const engine::Model* lead);
#endif

 private:
  static absl::Status CheckSameLayout(dist::Communicator& comm, const kvcache::CacheLayout& l) {
    const int64_t mine[] = {l.num_blocks, l.block_size, l.num_slots, l.num_checkpoints,
                            static_cast<int64_t>(l.latent_dtype)};
    int64_t low[5], high[5];
    for (int i = 0; i < 5; ++i) low[i] = -mine[i], high[i] = mine[i];
    absl::Status s = comm.AllReduce(low, 5, dist::ReduceOp::kMax);
    if (s.ok()) s = comm.AllReduce(high, 5, dist::ReduceOp::kMax);
    RETURN_IF_ERROR(s);
    for (int i = 0; i < 5; ++i) {
      if (-low[i] != high[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rank ", comm.rank(),
            ": the ranks of the tensor-parallel group planned different "
            "caches (this rank: ",
            kvcache::DescribePlan(l),
            "); start every rank with the same --kv-cache-memory, --max-num-seqs, --block-size, "
            "--max-model-len, --kv-cache-dtype and --enable-prefix-caching"));
      }
    }
    return absl::OkStatus();
  }
};

ModelRuntime::~ModelRuntime() {
  if (engine_) engine_->Stop();
  if (offload_ != nullptr && offload_->host() != nullptr && offload_->disk() != nullptr) {
    // A restart finds on disk what the host tier held.
    const int64_t moved = offload_->SpillHostToDisk();
    LOG_INFO("kvoffload", "shutdown: {} host tier entries written to {}", moved,
             offload_->disk()->dir());
  }
}

namespace {

// --kv-offload-disk's default: 64 GiB or half the free space of `dir`, the smaller.
int64_t DefaultOffloadDiskBytes(const std::string& dir) {
  constexpr int64_t kMax = int64_t{64} << 30;
  struct statvfs fs {};
  if (statvfs(dir.c_str(), &fs) != 0) return kMax;
  const int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  return std::min(kMax, free_bytes / 2);
}

}  // namespace

std::string OffloadDirOf(const ServeOptions& options) {
  const ParallelOptions& p = options.parallel;
  if (p.data_parallel_size() <= p.num_engine_ranks()) return options.kv_offload_dir;
  return absl::StrCat(options.kv_offload_dir, "/dp", p.first_rank / p.tensor_parallel_size);
}

absl::Status ModelRuntime::OpenOffloadTiers(const ServeOptions& options) {
  if (!options.kv_offload()) return absl::OkStatus();
  const ParallelOptions& p = options.parallel;
  std::unique_ptr<kvcache::HostTier> host;
  if (options.kv_offload_memory_bytes > 0) {
    host = std::make_unique<kvcache::HostTier>(options.kv_offload_memory_bytes);
  }
  std::unique_ptr<kvcache::DiskTier> disk;
  if (!options.kv_offload_dir.empty()) {
    const std::string dir = OffloadDirOf(options);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kv-offload-dir ", dir, ": cannot create it: ", ec.message()));
    }
    kvcache::OffloadIdentity identity;
    ASSIGN_OR_RETURN(identity.checkpoint_fingerprint, kvcache::CheckpointFingerprint(dir_));
    // The bytes' layout: dtype, backend and unit sizes (another layout is another identity).
    identity.cache_dtype = absl::StrCat(std::string(LatentDTypeName(layout_.latent_dtype)), ";",
                                        options.device, ";block=", layout_.block_bytes(),
                                        ";state=", layout_.state_bytes_per_sequence());
    // Under tensor parallelism the lead's entries hold every rank's share (engine/cache_copy.h):
    // the group's layout is part of the identity (another T or C never reads these files).
    identity.tensor_parallel_size = p.tensor_parallel_size;
    identity.context_parallel_size = p.decode_context_parallel_size;
    identity.block_size = scheduler_config_.block_size;
    const int64_t capacity = options.kv_offload_disk_bytes.value_or(DefaultOffloadDiskBytes(dir));
    ASSIGN_OR_RETURN(disk, kvcache::DiskTier::Open(dir, capacity, identity));
  }
  offload_ = std::make_unique<kvcache::OffloadTiers>(std::move(host), std::move(disk));
  return absl::OkStatus();
}

namespace {

// --chat-template: a file's text, or (vLLM's single-line form) the template itself.
absl::StatusOr<std::optional<std::string>> ChatTemplateFlag(const std::string& flag) {
  if (flag.empty()) return std::nullopt;
  if (FileExists(flag)) {
    absl::StatusOr<std::string> text = ReadFileToString(flag);
    if (!text.ok()) return text.status();
    return *text;
  }
  if (flag.find("{{") != std::string::npos || flag.find("{%") != std::string::npos) return flag;
  return absl::NotFoundError(
      absl::StrCat("--chat-template: cannot open '", flag,
                   "' (give a Jinja template file, or the template itself containing {{ or {%)"));
}

// A checkpoint without its tokenizer (vLLM serves one with --skip-tokenizer-init): refused
// naming what is missing and the flag, before anything else is read.
absl::Status CheckTokenizerFiles(const std::string& dir) {
  if (FileExists(dir + "/tiktoken.model")) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      dir, " has no tokenizer: tiktoken.model is missing",
      FileExists(dir + "/tokenizer_config.json") ? "" : " (and tokenizer_config.json)",
      ". Give the checkpoint its tokenizer files, or start with --skip-tokenizer-init to serve "
      "token-id prompts only"));
}

}  // namespace

absl::Status ModelRuntime::LoadTokenizer(const ServeOptions& options) {
  if (options.skip_tokenizer_init) {
    LOG_INFO("serve",
             "--skip-tokenizer-init: no tokenizer; prompts and outputs are token ids, chat and "
             "text prompts answer 400");
    tokenizer_ = engine::Tokenizer::WithoutTokens();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckTokenizerFiles(dir_));
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> tokenizer =
      engine::Tokenizer::LoadFromDir(dir_);
  if (!tokenizer.ok()) {
    return absl::Status(
        tokenizer.status().code(),
        absl::StrCat("cannot load the tokenizer of ", dir_, ": ", tokenizer.status().message()));
  }
  tokenizer_ = std::move(*tokenizer);
  // The parsers follow the checkpoint's format; a flag naming the other one is refused rather
  // than ignored.
  const char* format = engine::RepliesInXtml(*tokenizer_) ? "kimi_k3" : "kimi_k2";
  for (const auto& [flag, value] :
       {std::pair<const char*, const std::string&>{"--tool-call-parser", options.tool_call_parser},
        {"--reasoning-parser", options.reasoning_parser}}) {
    if (!value.empty() && value != format) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " ", value, " does not fit ", dir_, ": its replies are in ", format, "'s format (",
          std::string(format) == "kimi_k3" ? "Kimi K3's XTML" : "Kimi K2's tokens", "); give ",
          format, " or leave the flag out"));
    }
  }
  ASSIGN_OR_RETURN(std::optional<std::string> given, ChatTemplateFlag(options.chat_template));
  for (bool with_tools : {false, true}) {
    absl::StatusOr<engine::ChatTemplate> t = engine::ChatTemplate::ForTokenizer(
        *tokenizer_, with_tools, given ? std::optional<std::string_view>(*given) : std::nullopt);
    if (!t.ok() && given) {
      return absl::InvalidArgumentError(
          absl::StrCat("--chat-template: ", std::string(t.status().message())));
    }
    if (!t.ok()) {
      LOG_WARN("serve",
               "no usable chat template ({}); /v1/chat/completions and /v1/responses answer 400",
               std::string(t.status().message()));
      break;
    }
    (with_tools ? chat_template_tools_ : chat_template_) = std::move(*t);
  }
  return absl::OkStatus();
}

absl::Status ModelRuntime::LoadGenerationConfig(const ServeOptions& options) {
  if (options.generation_config != "vllm") {
    const bool model_dir = options.generation_config == "auto";
    const std::string dir = model_dir ? dir_ : options.generation_config;
    if (!model_dir && !FileExists(dir + "/generation_config.json")) {
      return absl::NotFoundError(absl::StrCat("--generation-config: no generation_config.json in '",
                                              dir, "' (give auto, vllm or such a directory)"));
    }
    ASSIGN_OR_RETURN(generation_config_, frontend::LoadGenerationConfig(dir));
  }
  if (!options.override_generation_config.empty()) {
    RETURN_IF_ERROR(
        frontend::ApplyGenerationOverride(options.override_generation_config, generation_config_));
  }
  if (!generation_config_.source.empty()) {
    LOG_INFO("serve", "request defaults from {}: {} (fields a request sets keep its values)",
             generation_config_.source, frontend::DescribeGenerationConfig(generation_config_));
  }
  return absl::OkStatus();
}

#if defined(STRATA_HAVE_CUDA)
namespace {

// The GPU of local rank `local_rank` in a group: global rank mod the visible GPUs, so one
// process per node driving every GPU (--local-ranks = GPUs) uses GPU i for local rank i, and
// one process per GPU (--world-size N --rank R on a node) uses GPU R mod the count.
int RankDevice(int first_rank, int local_rank, int devices) {
  return (first_rank + local_rank) % devices;
}

// What every --device cuda start needs: block size 64 and a visible device; the device count.
absl::StatusOr<int> CudaDevicesForServing(const ServeOptions& options) {
  if (options.scheduler.block_size != 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device cuda needs --block-size 64 (the MLA kernels' page); got ",
                     options.scheduler.block_size));
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError("--device cuda: no CUDA device is visible");
  }
  return devices;
}

// The device-memory communicator of each local rank and its expert exchange over the world
// `ranks` connected. On GPUs: NCCL (one GPU per rank; group "strata-ep" of the same
// rendezvous). On the CPU emulator device memory is host memory, so the rank's host
// communicator serves.
struct DeviceExchanges {
  std::vector<engine::cuda::DeviceExpertExchange*> exchanges;  // [local ranks]; null without MoE
  std::vector<std::shared_ptr<void>> owners;                   // exchanges, NCCL communicators
  // Per exchange: its all-to-all seconds since the previous call.
  std::vector<std::function<double()>> all_to_all_seconds;
};

absl::StatusOr<DeviceExchanges> ConnectDeviceExpertExchanges(const ParallelOptions& p,
                                                             const LocalRanks& ranks,
                                                             int num_experts, int devices) {
  const size_t n = static_cast<size_t>(p.local_ranks);
  DeviceExchanges out;
  out.exchanges.assign(n, nullptr);
  std::vector<dist::Communicator*> comms(n, nullptr);
#if defined(STRATA_CUDA_EMU)
  (void)devices;
  for (size_t i = 0; i < n; ++i) comms[i] = ranks.comms[i].get();
#else
  if (p.local_ranks > devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device cuda with expert parallelism runs one rank per GPU: ", p.local_ranks,
                     " local ranks but ", devices, " GPU(s) visible"));
  }
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<dist::Communicator>> nccl,
                   ConnectEachLocalRank(p, "strata-ep", "the NCCL group of the expert exchange",
                                        [devices](const auto& o, int local_rank) {
                                          return dist::ConnectNccl(
                                              o,
                                              RankDevice(o.rank - local_rank, local_rank, devices));
                                        }));
  for (size_t i = 0; i < n; ++i) {
    comms[i] = nccl[i].get();
    out.owners.push_back(std::shared_ptr<dist::Communicator>(std::move(nccl[i])));
  }
#endif
  if (num_experts == 0) return out;
  LOG_INFO("serve", "MoE rows exchanged in device memory through {}", comms[0]->backend());
  for (size_t i = 0; i < n; ++i) {
    auto exchange =
        std::make_shared<engine::cuda::DeviceExpertParallelExchange>(comms[i], ranks.placement);
    out.exchanges[i] = exchange.get();
    out.all_to_all_seconds.push_back([exchange] { return exchange->stats().all_to_all_seconds; });
    out.owners.push_back(std::move(exchange));
  }
  return out;
}

}  // namespace

absl::StatusOr<kvcache::CacheLayout> TensorParallelRanks::PrepareCuda(const ServeOptions& options,
                                                                      kvcache::PlannerOptions plan,
                                                                      const engine::Model* lead) {
  const ParallelOptions& p = options.parallel;
  ASSIGN_OR_RETURN(const int devices, CudaDevicesForServing(options));
  auto device_of = [&](int local_rank) { return RankDevice(p.first_rank, local_rank, devices); };
#if defined(STRATA_CUDA_EMU)
  // The emulator's device memory is host memory: the host groups serve, their collectives run as
  // host functions on each rank's stream.
  for (size_t i = 0; i < groups.size(); ++i) {
    device_collectives.push_back(
        std::make_unique<engine::cuda::HostFunctionCollectives>(groups[i].get()));
    if (groups[i]->context_parallel() != nullptr) {
      device_cp_collectives.push_back(
          std::make_unique<engine::cuda::HostFunctionCollectives>(groups[i]->context_parallel()));
    }
  }
#else
  if (p.local_ranks > devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device cuda with --tensor-parallel-size runs one rank per GPU: ", p.local_ranks,
        " ranks in this process but ", devices, " GPU(s) visible"));
  }
  auto nccl = [&](const auto& o, int local_rank) {
    return dist::ConnectNccl(o, device_of(local_rank));
  };
  ASSIGN_OR_RETURN(device_comms,
                   ConnectEachLocalRank(p, "strata-tp-nccl", "the NCCL tensor-parallel group", nccl,
                                        p.tensor_parallel_size));
  for (auto& comm : device_comms)
    device_collectives.push_back(dist::NcclDeviceCollectives(comm.get()));
  if (!context_parallel.comms.empty()) {  // C < T: each context-parallel group's own
    ASSIGN_OR_RETURN(device_cp_comms,
                     ConnectEachLocalRank(p, "strata-cp-nccl", "the NCCL context-parallel group",
                                          nccl, p.decode_context_parallel_size));
    for (auto& comm : device_cp_comms) {
      device_cp_collectives.push_back(dist::NcclDeviceCollectives(comm.get()));
    }
  }
#endif
  const engine::Model& first = lead != nullptr ? *lead : *shards[0];
  if (world != nullptr) {  // data-parallel groups: the experts over every rank of the world
    ASSIGN_OR_RETURN(
        DeviceExchanges exchanges,
        ConnectDeviceExpertExchanges(p, *world, first.config().moe.num_experts, devices));
    device_exchanges = std::move(exchanges.exchanges);
    device_exchange_owners = std::move(exchanges.owners);
    device_all_to_all_seconds = std::move(exchanges.all_to_all_seconds);
  }
  int64_t budget = options.kv_cache_memory_bytes;
  for (size_t i = 0; i < groups.size(); ++i) {
    engine::cuda::CudaExecutorOptions o;
    o.device = device_of(static_cast<int>(i));
    o.cuda_graphs = options.cuda_graphs;
    o.model.tensor_parallel = device_collectives[i].get();
    o.model.context_parallel =
        i < device_cp_collectives.size() ? device_cp_collectives[i].get() : nullptr;
    o.model.expert_exchange = i < device_exchanges.size() ? device_exchanges[i] : nullptr;
    o.tensor_parallel_host = groups[i].get();
    const engine::Model& model = i == 0 && lead != nullptr ? *lead : *shards[i];
    ASSIGN_OR_RETURN(std::unique_ptr<engine::cuda::CudaExecutor> executor,
                     engine::cuda::CudaExecutor::Create(model, o));
    if (!options.kv_cache_memory_given) {
      ASSIGN_OR_RETURN(int64_t free_budget,
                       options.gpu_memory_utilization
                           ? executor->CacheBudgetForUtilization(*options.gpu_memory_utilization)
                           : executor->DefaultCacheBudgetBytes(0.9));
      budget = i == 0 ? free_budget : std::min(budget, free_budget);
    }
    cuda_executors.push_back(std::move(executor));
  }
  plan.memory_budget_bytes = budget;
  const engine::ModelConfig& cfg = first.config();
  ASSIGN_OR_RETURN(const kvcache::CacheLayout layout,
                   kvcache::PlanMemory(engine::cuda::CudaCacheSpecFor(
                                           cfg, options.latent_dtype.value_or(LatentDType::kBF16)),
                                       plan));
  // Ranks in other processes (or GPUs with other free memory) must have planned the same.
  RETURN_IF_ERROR(CheckLayouts(layout));
  for (auto& executor : cuda_executors) {
    RETURN_IF_ERROR(
        static_cast<engine::cuda::CudaExecutor*>(executor.get())->AllocateCaches(layout));
  }
  return layout;
}
#endif

namespace {

// The cache plan's inputs from the flags (--kv-cache-memory per rank).
kvcache::PlannerOptions PlannerOptionsFor(const ServeOptions& options) {
  kvcache::PlannerOptions plan;
  plan.memory_budget_bytes = options.kv_cache_memory_bytes;
  plan.block_size = options.scheduler.block_size;
  plan.max_num_seqs = options.scheduler.max_num_seqs;
  plan.fit_max_num_seqs = !options.max_num_seqs_given;
  plan.checkpoint_fraction = options.scheduler.enable_prefix_caching ? 0.1 : 0.0;
  // With decode context parallelism each rank holds every C-th position of a sequence.
  const int c = options.parallel.decode_context_parallel_size;
  plan.min_num_tokens = (options.max_model_len + c - 1) / c;
  return plan;
}

absl::StatusOr<kvcache::CacheLayout> PlanCpuCaches(const ServeOptions& options,
                                                   const engine::ModelConfig& cfg) {
  return kvcache::PlanMemory(
      engine::CacheSpecFor(cfg, options.latent_dtype.value_or(LatentDType::kF32)),
      PlannerOptionsFor(options));
}

}  // namespace

absl::Status RunTensorParallelFollowerProcess(const ServeOptions& options) {
  const ParallelOptions& p = options.parallel;
  ASSIGN_OR_RETURN(const std::string dir, ResolveModelDir(options.model_flag));
  LOG_INFO("serve",
           "ranks {}..{} of a tensor-parallel group of {}: following rank {} (no API here)",
           p.first_rank, p.first_rank + p.local_ranks - 1, p.tensor_parallel_size,
           p.first_rank - p.first_rank % p.tensor_parallel_size);
  TensorParallelRanks ranks;
  RETURN_IF_ERROR(ranks.LoadShards(dir, options, 0));
  kvcache::CacheLayout layout;
  if (options.device == "cuda") {
#if defined(STRATA_HAVE_CUDA)
    RETURN_IF_ERROR(ranks.ConnectGroups(p, ranks.shards[0]->config(), /*cpu_exchanges=*/false));
    ASSIGN_OR_RETURN(layout, ranks.PrepareCuda(options, PlannerOptionsFor(options), nullptr));
#else
    return absl::FailedPreconditionError(
        "--device cuda: this strata was built without CUDA (no nvcc at configure time, or "
        "-DSTRATA_WITH_CUDA=OFF)");
#endif
  } else {
    ASSIGN_OR_RETURN(layout, PlanCpuCaches(options, ranks.shards[0]->config()));
    RETURN_IF_ERROR(ranks.Connect(p, ranks.shards[0]->config(), layout));
  }
  LOG_INFO("serve", "memory plan (each of {} local ranks): {}", p.local_ranks,
           kvcache::DescribePlan(layout));
  ranks.StartFollowers(p, layout);
  return absl::OkStatus();  // ~TensorParallelRanks waits until the lead stops
}

absl::Status ModelRuntime::StartEngine(const ServeOptions& options) {
  const engine::ModelConfig& cfg = model_->config();
  kvcache::PlannerOptions plan = PlannerOptionsFor(options);
#if defined(STRATA_HAVE_CUDA)
  // The vision tower on the first local rank's GPU, before the caches take what is free there.
  if (options.device == "cuda" && model_->vision() != nullptr) {
    ASSIGN_OR_RETURN(const int devices, CudaDevicesForServing(options));
    const int device = RankDevice(options.parallel.first_rank, 0, devices);
    ASSIGN_OR_RETURN(device_vision_,
                     engine::cuda::CudaVisionEncoder::Create(*model_->vision(), device));
  }
#endif
  if (options.device == "cuda" && options.parallel.tensor_parallel()) {
#if defined(STRATA_HAVE_CUDA)
    RETURN_IF_ERROR(tp_->ConnectGroups(options.parallel, cfg, /*cpu_exchanges=*/false));
    ASSIGN_OR_RETURN(layout_, tp_->PrepareCuda(options, plan, model_.get()));
    prefill_chunk_alignment_ = engine::cuda::kPromptChunkAlignment;
#endif
  } else if (options.device == "cuda") {
    // Expert parallelism: the group first (the executors hold only their ranks' experts).
    if (options.parallel.multi_rank()) {
      ASSIGN_OR_RETURN(local_ranks_,
                       ConnectLocalRanks(options.parallel, cfg, /*cpu_exchanges=*/false));
    }
    RETURN_IF_ERROR(PrepareCudaExecutor(options, plan));
  } else {
    ASSIGN_OR_RETURN(layout_, PlanCpuCaches(options, cfg));
  }
  // Decode context parallelism: a block of the scheduler's holds C·block_size positions, every
  // C-th on each rank, so a sequence can hold C times what one rank's cache does.
  const int cp = options.parallel.decode_context_parallel_size;
  const int64_t sequence_tokens = layout_.num_tokens() * cp;
  int64_t max_model_len = options.max_model_len;
  if (max_model_len == 0) {
    // Default: the checkpoint's context. A cache too small for one such sequence caps it (with
    // a warning); an explicit --max-model-len the cache cannot hold is refused by the planner.
    max_model_len = cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : (1 << 20);
    if (layout_.num_mla_layers > 0 && sequence_tokens < max_model_len) {
      LOG_WARN("serve",
               "the latent cache holds {} tokens, fewer than the model's context ({} tokens): "
               "--max-model-len defaults to {} (raise --kv-cache-memory to serve the whole "
               "context)",
               sequence_tokens, max_model_len, sequence_tokens);
      max_model_len = sequence_tokens;
    }
  }
  scheduler_config_ = options.scheduler;
  if (layout_.num_kda_layers > 0 && layout_.num_slots < scheduler_config_.max_num_seqs) {
    LOG_WARN("serve",
             "--max-num-seqs defaults to {} here: {} KDA state slots ({} bytes each) would take "
             "over a quarter of the cache memory (give --max-num-seqs to choose)",
             layout_.num_slots, scheduler_config_.max_num_seqs, layout_.state_bytes_per_sequence());
    scheduler_config_.max_num_seqs = layout_.num_slots;
  }
  scheduler_config_.block_size = options.scheduler.block_size * cp;
  scheduler_config_.max_model_len = max_model_len;
  scheduler_config_.num_blocks = layout_.num_blocks;
  scheduler_config_.num_slots = layout_.num_slots;
  scheduler_config_.num_checkpoint_slots = layout_.num_checkpoints;
  scheduler_config_.has_kda_layers = layout_.num_kda_layers > 0;
  scheduler_config_.prefill_chunk_alignment = prefill_chunk_alignment_;
  RETURN_IF_ERROR(scheduler::Scheduler::Create(scheduler_config_).status());
  RETURN_IF_ERROR(OpenOffloadTiers(options));
  first_rank_ = options.parallel.first_rank;
  rank_stride_ = options.parallel.tensor_parallel_size;
  std::vector<server::EngineRank> ranks;
  if (options.parallel.tensor_parallel()) {
    if (tp_->groups.empty()) RETURN_IF_ERROR(tp_->Connect(options.parallel, cfg, layout_));
    tp_->StartFollowers(options.parallel, layout_);
    for (size_t i = 0; i < tp_->comms.size(); ++i) {
      if (TensorParallelRanks::Leads(options.parallel, i))
        ranks.push_back(TensorParallelLeadRank(i));
    }
  } else {
    if (options.parallel.multi_rank() && local_ranks_ == nullptr) {
      ASSIGN_OR_RETURN(local_ranks_, ConnectLocalRanks(options.parallel, cfg));
    }
    ranks = MakeLocalRanks(options);
  }
  if (offload_ != nullptr) {
    // Every engine loop (each data-parallel group's lead) shares the process's tiers. An entry
    // is a unit's distinct shares over the group (engine/cache_copy.h CacheShares).
    const engine::CacheShares shares{0, options.parallel.tensor_parallel_size,
                                     options.parallel.decode_context_parallel_size};
    for (server::EngineRank& rank : ranks) {
      rank.scheduler->SetOffloadTiers(
          offload_.get(), layout_.block_bytes() * shares.Count(engine::CacheUnit::kBlock),
          layout_.state_bytes_per_sequence() * shares.Count(engine::CacheUnit::kSlot));
    }
  }
  server::EngineLoopOptions engine_options = options.engine;
  engine_options.stop_grace = options.parallel.collective_timeout;
  engine_ = std::make_unique<server::EngineLoop>(std::move(ranks), engine_options);
  engine_->Start();
  LOG_INFO("serve", "memory plan (each of {} local ranks): {}", engine_->num_ranks(),
           kvcache::DescribePlan(layout_));
  if (cp > 1) {
    LOG_INFO("serve",
             "decode context parallelism over {} ranks: each sequence's latent rows spread over "
             "them, {} tokens per group ({:.2f} 1M-token sequences), {} per rank",
             cp, sequence_tokens, static_cast<double>(sequence_tokens) / (1 << 20),
             layout_.num_tokens());
  }
  return absl::OkStatus();
}

#if defined(STRATA_HAVE_CUDA)

absl::StatusOr<std::vector<engine::cuda::DeviceExpertExchange*>>
ModelRuntime::ConnectDeviceExchanges(const ServeOptions& options, int devices) {
  ASSIGN_OR_RETURN(DeviceExchanges connected,
                   ConnectDeviceExpertExchanges(options.parallel, *local_ranks_,
                                                model_->config().moe.num_experts, devices));
  for (auto& owner : connected.owners) device_exchange_owners_.push_back(std::move(owner));
  for (auto& stats : connected.all_to_all_seconds) device_exchange_stats_.push_back(stats);
  return connected.exchanges;
}
#endif

absl::Status ModelRuntime::PrepareCudaExecutor(const ServeOptions& options,
                                               kvcache::PlannerOptions plan) {
#if defined(STRATA_HAVE_CUDA)
  // One executor per replica, replica i on GPU i mod the device count — or, with several
  // ranks, one per local rank on its own GPU; one cache layout for all (their schedulers share
  // a configuration), sized by the device with the least room.
  ASSIGN_OR_RETURN(const int devices, CudaDevicesForServing(options));
  const int num_executors = options.parallel.num_engine_ranks();
  std::vector<engine::cuda::DeviceExpertExchange*> exchanges(static_cast<size_t>(num_executors),
                                                             nullptr);
  if (local_ranks_ != nullptr) {
    ASSIGN_OR_RETURN(exchanges, ConnectDeviceExchanges(options, devices));
  }
  std::vector<int> device_of(static_cast<size_t>(num_executors));
  for (int i = 0; i < num_executors; ++i) {
    device_of[static_cast<size_t>(i)] =
        local_ranks_ != nullptr ? RankDevice(options.parallel.first_rank, i, devices) : i % devices;
  }
  std::vector<std::unique_ptr<engine::cuda::CudaExecutor>> executors;
  int64_t budget = options.kv_cache_memory_bytes;
  for (int i = 0; i < num_executors; ++i) {
    engine::cuda::CudaExecutorOptions executor_options;
    executor_options.device = device_of[static_cast<size_t>(i)];
    executor_options.model.expert_exchange = exchanges[static_cast<size_t>(i)];
    executor_options.cuda_graphs = options.cuda_graphs;
    ASSIGN_OR_RETURN(std::unique_ptr<engine::cuda::CudaExecutor> executor,
                     engine::cuda::CudaExecutor::Create(*model_, executor_options));
    if (!options.kv_cache_memory_given) {
      // Executors sharing a GPU split what the first left free.
      const auto sharing = std::count(device_of.begin(), device_of.end(), executor_options.device);
      ASSIGN_OR_RETURN(int64_t free_budget,
                       options.gpu_memory_utilization
                           ? executor->CacheBudgetForUtilization(*options.gpu_memory_utilization)
                           : executor->DefaultCacheBudgetBytes(0.9));
      free_budget /= sharing;
      budget = i == 0 ? free_budget : std::min(budget, free_budget);
    }
    executors.push_back(std::move(executor));
  }
  plan.memory_budget_bytes = budget;
  // Where the pacer or the budget cuts a prompt must not change its result.
  prefill_chunk_alignment_ = engine::cuda::kPromptChunkAlignment;
  ASSIGN_OR_RETURN(
      layout_,
      kvcache::PlanMemory(engine::cuda::CudaCacheSpecFor(
                              model_->config(), options.latent_dtype.value_or(LatentDType::kBF16)),
                          plan));
  for (auto& executor : executors) {
    RETURN_IF_ERROR(executor->AllocateCaches(layout_));
    cuda_executors_.push_back(std::move(executor));
  }
  return absl::OkStatus();
#else
  (void)options;
  (void)plan;
  return absl::FailedPreconditionError(
      "--device cuda: this strata was built without CUDA (no nvcc at configure time, or "
      "-DSTRATA_WITH_CUDA=OFF)");
#endif
}

namespace {

// EngineRank::all_to_all_seconds_total of a CPU exchange (its stats() return what accumulated
// since the previous call).
std::function<double()> AllToAllSecondsTotal(dist::ExpertParallelExchange* exchange) {
  return [exchange, total = 0.0]() mutable {
    total += exchange->stats().all_to_all_seconds;
    return total;
  };
}

}  // namespace

// A scheduler and an executor per local rank; with several ranks in the group also the step
// gate, the MoE exchange and a workspace of its own (the local ranks share the model).
std::vector<server::EngineRank> ModelRuntime::MakeLocalRanks(const ServeOptions& options) {
  std::vector<server::EngineRank> ranks(static_cast<size_t>(options.parallel.num_engine_ranks()));
  for (size_t i = 0; i < ranks.size(); ++i) {
    server::EngineRank& r = ranks[i];
    r.scheduler = std::make_unique<scheduler::Scheduler>(scheduler_config_);
    if (!cuda_executors_.empty()) {  // one per replica or local rank (PrepareCudaExecutor)
      r.executor = std::move(cuda_executors_[i]);
      if (local_ranks_ != nullptr) {
        r.gate = std::make_unique<server::CommunicatorStepGate>(local_ranks_->comms[i].get());
        if (i < device_exchange_stats_.size()) {
          r.all_to_all_seconds_total = [seconds = device_exchange_stats_[i],
                                        total = 0.0]() mutable {
            total += seconds();
            return total;
          };
        }
      }
      continue;
    }
    auto executor = std::make_unique<engine::CpuExecutor>(*model_, layout_);
    if (local_ranks_ != nullptr) {
      dist::ExpertParallelExchange* exchange = local_ranks_->exchanges[i].get();
      engine::ForwardContext context;
      context.exchange = exchange;
      context.workspace = local_ranks_->workspaces[i].get();
      executor->set_forward_context(context);
      r.gate = std::make_unique<server::CommunicatorStepGate>(local_ranks_->comms[i].get());
      if (exchange != nullptr) r.all_to_all_seconds_total = AllToAllSecondsTotal(exchange);
    }
    r.executor = std::move(executor);
  }
  return ranks;
}

server::EngineRank ModelRuntime::TensorParallelLeadRank(size_t local_rank) {
  server::EngineRank r;
  r.scheduler = std::make_unique<scheduler::Scheduler>(scheduler_config_);
  if (!tp_->cuda_executors.empty()) {
#if defined(STRATA_HAVE_CUDA)
    r.executor = std::move(tp_->cuda_executors[local_rank]);
    if (local_rank < tp_->device_all_to_all_seconds.size()) {
      r.all_to_all_seconds_total = [seconds = tp_->device_all_to_all_seconds[local_rank],
                                    total = 0.0]() mutable {
        total += seconds();
        return total;
      };
    }
#endif
  } else {
    const engine::Model& model = local_rank == 0 ? *model_ : *tp_->shards[local_rank];
    auto executor = std::make_unique<engine::CpuExecutor>(model, layout_);
    const engine::ForwardContext context = tp_->CpuContext(local_rank);
    executor->set_forward_context(context);
    r.executor = std::move(executor);
    if (dist::ExpertParallelExchange* exchange =
            tp_->world != nullptr ? tp_->world->exchanges[local_rank].get() : nullptr) {
      r.all_to_all_seconds_total = AllToAllSecondsTotal(exchange);
    }
  }
  r.gate = tp_->Gate(local_rank);
  return r;
}

absl::StatusOr<std::unique_ptr<ModelRuntime>> ModelRuntime::Load(const ServeOptions& options) {
  std::unique_ptr<ModelRuntime> rt(new ModelRuntime());
  ASSIGN_OR_RETURN(rt->dir_, ResolveModelDir(options.model_flag));
  engine::ModelLoadOptions load;  // the CUDA backend uploads from the mapping
  load.copy_weights = options.device == "cpu" && !options.mmap_weights;
  load.quantization = options.quantization;
  load.reserve_bytes = options.kv_cache_memory_bytes * options.parallel.num_engine_ranks();
  const bool quantize = engine::QuantizesExpertsToMxfp4(options.quantization) ||
                        engine::QuantizesToInt8(options.quantization);
  if ((load.copy_weights || quantize) && options.parallel.multi_rank() &&
      !options.parallel.tensor_parallel()) {
    // Expert parallelism: this process copies (and quantises) only its ranks' experts.
    ASSIGN_OR_RETURN(const engine::ModelConfig config, engine::LoadModelConfig(rt->dir_));
    if (config.moe.num_experts > 0) {
      ASSIGN_OR_RETURN(load.routed_experts,
                       ProcessRoutedExperts(options.parallel, config.moe.num_experts));
      LOG_INFO("serve",
               "ranks {}..{} run {} of {} routed experts: only those are copied or quantised",
               options.parallel.first_rank,
               options.parallel.first_rank + options.parallel.local_ranks - 1,
               std::count(load.routed_experts.begin(), load.routed_experts.end(), true),
               config.moe.num_experts);
    }
  }
  // The tokenizer first: a missing or bad one fails before the weights are read and copied.
  RETURN_IF_ERROR(rt->LoadTokenizer(options));
  RETURN_IF_ERROR(rt->LoadGenerationConfig(options));
  if (options.parallel.tensor_parallel()) {
    // This process leads the group: rank 0's shard is model_, its other local ranks follow.
    rt->tp_ = std::make_unique<TensorParallelRanks>();
    RETURN_IF_ERROR(rt->tp_->LoadShards(rt->dir_, options, 1));
    ASSIGN_OR_RETURN(const engine::ModelLoadOptions lead,
                     RankLoadOptions(rt->dir_, options, options.parallel.first_rank));
    ASSIGN_OR_RETURN(rt->model_, engine::Model::Load(rt->dir_, lead));
  } else {
    ASSIGN_OR_RETURN(rt->model_, engine::Model::Load(rt->dir_, load));
  }
  RETURN_IF_ERROR(rt->StartEngine(options));
  const engine::ModelConfig& cfg = rt->model_->config();
  frontend::ServedModel& s = rt->served_;
  s.names = ServedNames(options);
  s.root = rt->dir_;
  s.created = static_cast<int64_t>(std::time(nullptr));
  s.max_model_len = rt->scheduler_config_.max_model_len;
  s.vocab_size = cfg.vocab_size;
  s.tokenizer = rt->tokenizer_.get();
  s.chat_template = rt->chat_template_ ? &*rt->chat_template_ : nullptr;
  s.chat_template_tools = rt->chat_template_tools_ ? &*rt->chat_template_tools_ : nullptr;
  s.eos_token_id =
      rt->tokenizer_->eos_id() ? *rt->tokenizer_->eos_id() : static_cast<int32_t>(cfg.eos_token_id);
  if (std::optional<int32_t> im_end = rt->tokenizer_->SpecialTokenId("<|im_end|>")) {
    if (*im_end != s.eos_token_id) s.chat_stop_token_ids.push_back(*im_end);
  }
  s.generation_config = rt->generation_config_;
  for (int32_t eos : s.generation_config.eos_token_ids) {
    if (eos >= cfg.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(s.generation_config.source, ": eos_token_id ",
                                                     eos, " is outside the model's vocabulary [0, ",
                                                     cfg.vocab_size, ")"));
    }
  }
  s.token_vocab = frontend::ConstraintVocab(*rt->tokenizer_);
  s.tool_call_tokens = frontend::ToolCallMarkers(*rt->tokenizer_);
  s.think_begin_id = rt->tokenizer_->SpecialTokenId("<think>").value_or(-1);
  s.think_end_id = rt->tokenizer_->SpecialTokenId("</think>").value_or(-1);
  s.engine = rt->engine_.get();
  s.skip_tokenizer_init = options.skip_tokenizer_init;
  // Replies' own ids only pay off through prefix-cache hits (and need text to be found by).
  if (options.reply_token_memory_tokens > 0 && rt->scheduler_config_.enable_prefix_caching &&
      !options.skip_tokenizer_init) {
    rt->reply_tokens_ = std::make_unique<frontend::ReplyTokenMemory>(
        *rt->tokenizer_, options.reply_token_memory_tokens);
    s.reply_tokens = rt->reply_tokens_.get();
  }
  if (const engine::VisionEncoder* vision = rt->model_->vision()) {
    // Under tensor parallelism the lead encodes and writes the rows; its followers' plans carry
    // the images' places (engine/step_codec.cc). Data-parallel groups each encode their own.
    frontend::ImageInputLimits limits;
    limits.allowed_media_domains = options.allowed_media_domains;
    limits.allowed_local_media_path = options.allowed_local_media_path;
    limits.fetch_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(std::llround(options.media_fetch_timeout_s * 1000)));
    const engine::ImageEncoder* encoder = rt->device_vision_ != nullptr
                                              ? rt->device_vision_.get()
                                              : static_cast<const engine::ImageEncoder*>(vision);
    rt->images_ = std::make_unique<frontend::ImageInputs>(
        encoder, static_cast<int32_t>(cfg.media_placeholder_token_id), limits);
    if (options.encoder_budget != nullptr) {
      // vLLM's encoder budget: a step's tokens through the whole tower (a block over n patches
      // costs n).
      options.encoder_budget->SetTokensPerStep(rt->scheduler_config_.max_num_batched_tokens *
                                               vision->config().num_layers);
      rt->images_->SetEncoderBudget(options.encoder_budget);
    }
    s.images = rt->images_.get();
  }
  return rt;
}

std::vector<std::pair<std::string, std::string>> ModelRuntime::CacheConfigLabels() const {
  return {{"block_size", std::to_string(layout_.block_size)},
          {"cache_dtype", std::string(LatentDTypeName(layout_.latent_dtype))},
          {"num_gpu_blocks", std::to_string(layout_.num_blocks)},
          {"num_state_slots", std::to_string(layout_.num_slots)},
          {"num_kda_checkpoints", std::to_string(layout_.num_checkpoints)},
          {"enable_prefix_caching", scheduler_config_.enable_prefix_caching ? "True" : "False"}};
}

std::string ModelRuntime::DescribeMemory() const { return kvcache::DescribePlan(layout_); }

namespace {

// The tower's pacing against the engine's steps: null when unpaced.
Json EncoderBudgetInfo(const frontend::EncoderBudget* budget) {
  if (budget == nullptr) return nullptr;
  const frontend::EncoderBudgetStats s = budget->stats();
  return {{"tokens_per_step", budget->tokens_per_step()},
          {"waits", s.waits},
          {"wait_seconds", s.wait_seconds},
          {"granted_tokens", s.granted_tokens}};
}

// /server_info's "vision": null without a vision tower, else its shape, where it runs ("cuda":
// the GPU tower, engine/cuda/cuda_vision_encoder.h), the image limits and the encoder cache's
// use (docs/vision.md).
Json VisionInfo(const engine::VisionEncoder* vision, const frontend::ImageInputs* images,
                bool on_device) {
  if (vision == nullptr || images == nullptr) return nullptr;
  const engine::VisionConfig& c = vision->config();
  const frontend::ImageInputLimits& limits = images->limits();
  const frontend::ImageInputStats stats = images->stats();
  return {{"layers", c.num_layers},
          {"hidden_size", c.hidden_size},
          {"heads", c.num_heads},
          {"patch_size", c.patch_size},
          {"encoder_device", on_device ? "cuda" : "cpu"},
          {"in_patch_limit", c.in_patch_limit},
          {"media_placeholder_token_id", images->placeholder_id()},
          {"max_images_per_request", limits.max_images_per_request},
          {"max_image_bytes", limits.max_image_bytes},
          {"max_side_pixels", limits.decode.max_side_pixels},
          {"encoder_cache_capacity_bytes", limits.encoder_cache_bytes},
          {"encoder_cache_bytes", stats.cache_bytes},
          {"images_encoded", stats.images_encoded},
          {"encoder_cache_hits", stats.cache_hits},
          {"encoder_queue_images", stats.images_waiting},
          {"encoder_running_images", stats.images_encoding},
          {"encoder_budget", EncoderBudgetInfo(images->encoder_budget())}};
}

// /server_info's "kv_offload": null without tiers, else each tier's place, use and traffic and
// the scheduler's tier totals (docs/kv-offload.md).
Json OffloadInfo(const ServeOptions& options, const server::EngineStats& stats) {
  if (!options.kv_offload()) return nullptr;
  Json out = Json::object();
  const kvcache::OffloadTiersStats tiers = stats.offload.value_or(kvcache::OffloadTiersStats{});
  if (tiers.host.has_value()) {
    const kvcache::HostTierStats& h = *tiers.host;
    out["host"] = {{"capacity_bytes", h.capacity_bytes},
                   {"bytes_used", h.bytes_used},
                   {"entries", h.num_entries},
                   {"hits", h.hits},
                   {"misses", h.misses},
                   {"bytes_in", h.bytes_in},
                   {"bytes_out", h.bytes_out},
                   {"evictions", h.evictions},
                   {"spilled_to_disk", tiers.spilled_entries},
                   {"dropped", tiers.dropped_entries}};
  } else if (options.kv_offload_memory_bytes > 0) {
    out["host"] = {{"capacity_bytes", options.kv_offload_memory_bytes}};
  }
  if (tiers.disk.has_value()) {
    const kvcache::DiskTierStats& d = *tiers.disk;
    out["disk"] = {{"dir", OffloadDirOf(options)},
                   {"capacity_bytes", d.capacity_bytes},
                   {"bytes_used", d.bytes_used},
                   {"entries", d.num_entries},
                   {"hits", d.hits},
                   {"misses", d.misses},
                   {"bytes_written", d.bytes_written},
                   {"bytes_read", d.bytes_read},
                   {"write_failures", d.write_failures},
                   {"dropped_puts", d.dropped_puts},
                   {"evictions", d.evictions},
                   {"corrupt_entries", d.corrupt_entries},
                   {"foreign_files", d.foreign_files},
                   {"queued_writes", d.queued_writes}};
  } else if (!options.kv_offload_dir.empty()) {
    out["disk"] = {{"dir", OffloadDirOf(options)}};
  }
  out["engine_ranks"] = options.parallel.num_engine_ranks();  // they share these tiers
  const scheduler::SchedulerStats& s = stats.scheduler;
  out["prefix_hits"] = {{"admissions", s.num_tier_hits},
                        {"tokens", s.num_tier_hit_tokens},
                        {"blocks_loaded", s.num_tier_loaded_blocks},
                        {"checkpoints_loaded", s.num_tier_loaded_checkpoints},
                        {"bytes_loaded", s.num_tier_loaded_bytes},
                        {"waits_for_disk", s.num_tier_waits},
                        {"loaded_over_several_steps", s.num_tier_staged_hits},
                        {"load_failures", s.num_tier_load_failures}};
  out["stored"] = {{"units", s.num_tier_stored_units},
                   {"bytes", s.num_tier_stored_bytes},
                   {"refused", s.num_tier_store_failures}};
  return out;
}

}  // namespace

Json ModelRuntime::ServerInfo(const ServeOptions& options,
                              const http::HttpServerStats& http_stats) const {
  const server::EngineStats stats = engine_->stats();
  const scheduler::SchedulerStats& sch = stats.scheduler;
  Json info = Json::object();
  info["version"] = STRATA_VERSION;
  info["build"] = {
      {"compiler", __VERSION__}, {"cplusplus", __cplusplus}, {"backend", options.device}};
  info["model"] = {
      {"names", served_.names},
      {"root", dir_},
      {"max_model_len", served_.max_model_len},
      {"vocab_size", served_.vocab_size},
      {"tokenizer_vocab_size", tokenizer_->vocab_size()},
      {"skip_tokenizer_init", served_.skip_tokenizer_init},
      {"chat_template", chat_template_.has_value()},
      {"generation_config", generation_config_.source.empty()
                                ? Json(nullptr)
                                : Json(frontend::DescribeGenerationConfig(generation_config_))},
      {"weight_bytes", model_->weight_stats().total_bytes},
      {"weights_memory", model_->weight_copy_bytes() > 0 ? "huge_pages" : "mmap"},
      {"weight_copy_bytes", model_->weight_copy_bytes()},
      {"routed_experts", engine::RoutedExpertFormat(model_->weights())},
      {"projections", engine::ProjectionFormat(model_->weights())},
      {"lm_head", engine::WeightFormatName(model_->weights().lm_head.format)},
      // Weights quantised at load (--quantization), not read from the checkpoint.
      {"quantized_at_load_bytes", model_->weights().quantized_bytes()}};
  const scheduler::SchedulerConfig& c = scheduler_config_;
  info["config"] = {
      {"host", options.http.host},
      {"port", options.http.port},
      {"api_key_required", !options.api_key.empty()},
      {"max_model_len", c.max_model_len},
      {"max_num_seqs", c.max_num_seqs},
      {"max_num_batched_tokens", c.max_num_batched_tokens},
      {"long_prefill_token_threshold", c.long_prefill_token_threshold},
      // Prompt chunks end at multiples of this (--device cuda: 16; 0: anywhere).
      {"prefill_chunk_alignment_tokens", c.prefill_chunk_alignment},
      {"target_itl_ms", options.engine.target_itl_ms},
      {"reply_token_memory_tokens", reply_tokens_ ? options.reply_token_memory_tokens : 0},
      {"block_size", c.block_size},
      {"enable_prefix_caching", c.enable_prefix_caching},
      {"policy", std::string(scheduler::PolicyName(c.policy))},
      {"speculative_config",
       c.num_speculative_tokens > 0
           ? Json{{"method", "ngram"},
                  {"num_speculative_tokens", c.num_speculative_tokens},
                  {"prompt_lookup_max", c.prompt_lookup_max},
                  {"prompt_lookup_min", c.prompt_lookup_min},
                  {"disable_by_batch_size", c.speculative_disable_by_batch_size > 0
                                                ? Json(c.speculative_disable_by_batch_size)
                                                : Json(nullptr)}}
           : Json(nullptr)},
      {"device", options.device},
      {"kv_cache_memory_bytes",
       options.kv_cache_memory_given
           ? options.kv_cache_memory_bytes
           : (options.device == "cuda" ? layout_.TotalBytes() : options.kv_cache_memory_bytes)},
      {"max_queued_requests", options.engine.max_queued_requests},
      {"max_body_bytes", options.http.max_body_bytes},
      {"http_threads", options.http.num_threads},
      {"drain_timeout_s", options.drain_timeout_s}};
  info["memory_plan"] = {
      {"description", kvcache::DescribePlan(layout_)},
      {"kv_cache_dtype", std::string(LatentDTypeName(layout_.latent_dtype))},
      {"cpu_matmul_precision", kernels::cpu::MatmulPrecisionInEffect()},
      {"num_blocks", layout_.num_blocks},
      {"block_size", layout_.block_size},
      {"num_tokens", layout_.num_tokens()},
      // A sequence's cache spread over the context-parallel ranks: tokens per group.
      {"num_tokens_per_group",
       layout_.num_tokens() * options.parallel.decode_context_parallel_size},
      {"num_1m_token_sequences",
       static_cast<double>(layout_.num_tokens() * options.parallel.decode_context_parallel_size) /
           (1 << 20)},
      {"latent_bytes_per_token", layout_.mla_bytes_per_token()},
      {"state_bytes_per_sequence", layout_.state_bytes_per_sequence()},
      {"num_slots", layout_.num_slots},
      {"num_checkpoints", layout_.num_checkpoints},
      {"total_bytes", layout_.TotalBytes()}};
  info["kv_offload"] = OffloadInfo(options, stats);
  info["vision"] = VisionInfo(model_->vision(), images_.get(), device_vision_ != nullptr);
  const ParallelOptions& p = options.parallel;
  // The world's communicators and placement (data parallelism, also over tensor-parallel groups).
  const LocalRanks* ranks = local_ranks_ != nullptr ? local_ranks_.get()
                            : tp_ != nullptr        ? tp_->world.get()
                                                    : nullptr;
  info["parallel"] = {
      {"replicas", p.replicas},
      {"data_parallel_size", p.world_size / p.tensor_parallel_size},
      {"tensor_parallel_size", p.tensor_parallel_size},
      {"decode_context_parallel_size", p.decode_context_parallel_size},
      {"expert_parallel_size",
       (local_ranks_ != nullptr || tp_ != nullptr) && model_->config().moe.num_experts > 0
           ? p.world_size
           : 1},
      {"rank", p.first_rank},
      {"local_ranks", p.local_ranks},
      {"node_rank", p.node_rank},
      {"num_nodes", p.num_nodes},
      {"coordinator", p.coordinator},
      {"backend", ranks != nullptr ? ranks->comms[0]->backend()
                  : tp_ != nullptr ? tp_->comms[0]->backend()
                                   : "none"},
      {"collective_timeout_s", std::chrono::duration<double>(p.collective_timeout).count()},
      {"expert_placement",
       ranks != nullptr && ranks->placement.num_experts > 0 ? ranks->placement.DebugString() : ""}};
  info["engine"] = {{"num_steps", stats.num_steps},
                    {"num_unfinished", stats.num_unfinished},
                    {"last_step_ms", stats.last_step_ms},
                    {"num_running", sch.num_running},
                    {"num_waiting", sch.num_waiting},
                    {"num_blocks", sch.num_blocks},
                    {"num_free_blocks", sch.num_free_blocks},
                    {"num_cached_blocks", sch.num_cached_blocks},
                    {"block_usage", sch.block_usage},
                    {"num_slots", sch.num_slots},
                    {"num_free_slots", sch.num_free_slots},
                    {"slot_usage", sch.slot_usage},
                    {"num_finished_total", sch.num_finished_total},
                    {"num_aborted_total", sch.num_aborted_total},
                    {"num_preempted_total", sch.num_preempted_total},
                    {"num_prefix_hit_tokens", sch.num_prefix_hit_tokens},
                    {"num_prefix_waits", sch.num_prefix_waits},
                    {"num_spec_drafts_total", sch.num_spec_drafts_total},
                    {"num_spec_draft_tokens_total", sch.num_spec_draft_tokens_total},
                    {"num_spec_accepted_tokens_total", sch.num_spec_accepted_tokens_total}};
  info["reply_token_memory"] = reply_tokens_
                                   ? Json{{"capacity_tokens", options.reply_token_memory_tokens},
                                          {"num_replies", reply_tokens_->num_replies()},
                                          {"num_tokens", reply_tokens_->num_tokens()},
                                          {"num_spliced_total", reply_tokens_->num_spliced_total()}}
                                   : Json(nullptr);
  info["http"] = {{"num_connections", http_stats.num_connections},
                  {"num_exchanges", http_stats.num_exchanges},
                  {"num_requests_total", http_stats.num_requests_total},
                  {"num_cancelled_total", http_stats.num_cancelled_total},
                  {"max_connections", http_stats.max_connections},
                  {"num_refused_total", http_stats.num_refused_total},
                  {"num_accept_errors_total", http_stats.num_accept_errors_total}};
  return info;
}

}  // namespace strata::cli
