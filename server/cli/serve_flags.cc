// `strata serve`'s flags (serve_flags.h).
#include "server/cli/serve_flags.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/log.h"
#include "core/status.h"
#include "scheduler/request.h"
#include "server/cli/parallel_flags.h"

namespace strata::cli {
namespace {

const std::vector<FlagSpec> kBaseServeFlags = {
    {"model", true, "checkpoint directory (default: the embedded demo model, random weights)"},
    {"host", true, "address to listen on (default 0.0.0.0)"},
    {"port", true, "port to listen on (default 8000; 0 = any free port)"},
    {"grpc-port", true, "gRPC (strata.v1) port (default 50051, any free port when --port is 0)"},
    {"served-model-name", true, "model name(s) clients use, comma separated (default: --model)"},
    {"api-key", true, "require 'Authorization: Bearer KEY' on /v1/* (or $STRATA_API_KEY)"},
    {"max-model-len", true, "prompt + output tokens per request (default: config, cache-bound)"},
    {"max-num-seqs", true,
     "sequences running at once (default 64, fewer when their KDA states would take over a "
     "quarter of --kv-cache-memory)"},
    {"max-num-batched-tokens", true, "tokens per engine step (default 2048)"},
    {"device", true, "cpu | cuda (GPU i for replica i; default cpu)"},
    {"mmap-weights", false,
     "cpu: serve the weights from the memory-mapped checkpoint (shared with other processes, no "
     "copy at load) instead of a copy on transparent huge pages (faster decode)"},
    {"kv-cache-memory", true,
     "bytes for all caches of each rank, e.g. 512MiB, 4GiB (default: cpu 1GiB, cuda 90% of the "
     "GPU memory the weights leave free)"},
    {"kv-cache-dtype", true, kKvCacheDTypeHelp},
    {"cpu-matmul-precision", true, kCpuMatmulPrecisionHelp},
    {"quantization", true, kQuantizationHelp},
    {"block-size", true, "tokens per latent cache page (default 64)"},
    {"kv-offload-memory", true,
     "bytes of host memory below the cache for the full latent blocks and KDA checkpoints the "
     "prefix cache evicts, so a later prefix hit loads them back instead of computing them, "
     "e.g. 8GiB (default 0: off)"},
    {"kv-offload-dir", true,
     "a directory on local disk below the cache (and below --kv-offload-memory) for what it "
     "evicts, kept across restarts: a restarted server finds the prefixes it had (created if "
     "missing; one server per directory; files of another checkpoint, cache dtype or layout are "
     "left alone and never read)"},
    {"kv-offload-disk", true,
     "bytes of --kv-offload-dir the tier may fill, least recently used out (default: 64GiB or "
     "half the free space there, the smaller)"},
    {"kv-offload-max-load-per-step", true,
     "bytes a step copies back from the tiers, at most (default 256MiB): a longer prefix hit "
     "loads over several steps before it computes, so the other requests' steps never wait "
     "for more copying than this"},
    {"no-prefix-caching", false, "disable prefix caching"},
    {"scheduling-policy", true, "fcfs | priority (default fcfs)"},
    {"max-queued-requests", true, "requests in flight before 429 (default 1024)"},
    {"max-body-bytes", true, "largest request body (default 16MiB)"},
    {"http-threads", true, "HTTP I/O threads (default 2)"},
    {"request-timeout", true, "seconds for a whole request to arrive (default 30)"},
    {"idle-timeout", true, "seconds an idle keep-alive connection stays open (default 75)"},
    {"keep-alive-timeout", true, "as --idle-timeout"},
    {"timeout-keep-alive", true, "as --idle-timeout (uvicorn's name)"},
    {"max-connections", true,
     "HTTP connections open at most; past it a new one is answered 503 and closed (default: "
     "the open-file limit, RLIMIT_NOFILE, which serve raises towards the hard limit up to "
     "65536, less a reserve of a quarter of it, 64 to 1024, for model files and gRPC: "
     "512 -> 384, 65536 -> 64512)"},
    {"ping-interval", true, "seconds of stream silence before an SSE ping (default 10)"},
    {"drain-timeout", true, "seconds to finish requests after SIGTERM (default 30)"},
    {"allowed-origins", true,
     "CORS origins browsers may call from, a JSON list or comma separated (default [\"*\"])"},
    {"allowed-methods", true, "CORS methods (default [\"*\"])"},
    {"allowed-headers", true, "CORS request headers (default [\"*\"])"},
    {"allow-credentials", false, "CORS: allow credentials (cookies, Authorization)"},
    {"generation-config", true,
     "request sampling defaults: auto (the model's generation_config.json), vllm (none), or a "
     "directory with a generation_config.json (default auto)"},
    {"override-generation-config", true,
     "JSON object of request sampling defaults set over the generation config, e.g. "
     "'{\"temperature\": 0.6}' (vLLM's)"},
    {"chat-template", true,
     "Jinja chat template file (or the template itself) replacing the tokenizer's"},
    {"max-logprobs", true,
     "most log-probabilities a request may ask for (logprobs, top_logprobs, prompt_logprobs; "
     "default 20)"},
    {"speculative-config", true, kSpeculativeConfigHelp},
    {"long-prefill-token-threshold", true,
     "prefill tokens of one sequence per step at most, so long prompts share steps (default 0: "
     "off)"},
    {"target-itl-ms", true,
     "while sequences are generating, prompt chunks are cut so that a step (the gap between "
     "their tokens) takes about this long at the measured prefill rate, with at least 64 prompt "
     "tokens a step; 0: off, a chunk may take all of --max-num-batched-tokens (default 1000)"},
    {"allowed-media-domains", true,
     "image URLs: fetch http(s) images only from these hosts, a JSON list or comma separated "
     "(exact host names; default none: remote image URLs are refused, send data: URLs)"},
    {"allowed-local-media-path", true,
     "image URLs: read file:// images under this directory (a security risk: the API can read "
     "any image there; default none)"},
    {"media-fetch-timeout", true,
     "seconds for fetching one remote image, the whole exchange (default 5)"},
    {"reply-token-memory", true,
     "chat: keep the generated token ids of recent replies (up to this many tokens, by their "
     "text), so a conversation sent back with a reply in it gets the model's own tokens for it "
     "instead of a new encoding, and the prefix cache (a KDA state checkpoint) still matches "
     "past the reply; 0: off (default 1048576; off without prefix caching)"},
    {"responses-store-memory", true,
     "/v1/responses: bytes of responses kept for `store` (OpenAI's default: on), so "
     "previous_response_id continues a conversation and GET /v1/responses/{id} returns one; "
     "least recently used out; 0: off (default 128MiB)"},
    {"responses-dir", true,
     "/v1/responses: keep stored responses in this directory too (created if missing; one "
     "server per directory), so they outlive restarts: GET and previous_response_id find them, "
     "and a background response running or queued at shutdown or a crash runs again from its "
     "start at the next start (default: memory only; those end with the process)"},
    {"files-store-memory", true,
     "/v1/files and /v1/batches: bytes of uploaded batch inputs and batch output files kept "
     "(a file past it is refused, none dropped; 0: the Files and Batches API off; default "
     "1GiB); uploads are request bodies: raise --max-body-bytes for files over 16MiB"},
    {"files-dir", true,
     "/v1/files and /v1/batches: keep files and batches in this directory too (created if "
     "missing; one server per directory), so they outlive restarts: a batch running at "
     "shutdown or a crash carries on at the next start from its first unwritten line, queued "
     "ones start then (default: memory only; a batch running at shutdown ends cancelled)"},
    {"batch-max-concurrent-requests", true,
     "/v1/batches: a running batch's requests in flight at a time, so online requests keep "
     "the rest of the engine's room (default max-num-seqs / 2)"},
    {"batch-priority", true,
     "/v1/batches: the priority of batch requests whose body sets none; with "
     "--scheduling-policy priority lower runs first, online requests default to 0 (default 1: "
     "batches yield to online traffic)"},
    {"log-level", true, "trace|debug|info|warn|error|off (default info)"},
    {"log-format", true, "text | json (one JSON object per line; default text)"},
};

// vLLM's `serve` flags a ported command line (a model card's) carries, with their meaning here,
// or refused naming why (ReadVllmFlags).
const std::vector<FlagSpec> kVllmServeFlags = {
    {"gpu-memory-utilization", true,
     "cuda: fraction of the device memory this server may use, weights included (vLLM's; "
     "default: the caches take 90% of what the weights leave free)"},
    {"enforce-eager", false, "cuda: decode steps without CUDA graphs"},
    {"enable-prefix-caching", false, "prefix caching on (the default)"},
    {"no-enable-prefix-caching", false, "prefix caching off (as --no-prefix-caching)"},
    {"trust-remote-code", false, "accepted: Strata runs no code from the checkpoint"},
    {"enable-auto-tool-choice", false, "accepted: tool_choice auto is always served"},
    {"tool-call-parser", true,
     "kimi_k2 | kimi_k3 (default: the checkpoint's format — a Kimi K3 checkpoint's XTML tools "
     "channel or Kimi's tool-call tokens; given, it must name that format)"},
    {"dtype", true, "auto | bfloat16 (the checkpoint's weights; bf16 on a GPU)"},
    {"reasoning-parser", true,
     "kimi_k2 | kimi_k3 (default: the checkpoint's format; given, it must name it): "
     "<think> ... </think>, or K3's think channel, is returned as reasoning_content"},
    {"enable-chunked-prefill", false, "accepted: prompts are always chunked over steps"},
    {"no-enable-chunked-prefill", false,
     "refused: prompts are always chunked over steps (--max-num-batched-tokens a step)"},
    {"disable-log-requests", false, "no log line per finished request"},
    {"enable-log-requests", false, "a log line per finished request (the default)"},
    {"disable-log-stats", false, "accepted: Strata logs no periodic statistics (see /metrics)"},
    {"enable-request-id-headers", false,
     "accepted: an X-Request-Id sent always comes back (and names the response)"},
    {"skip-tokenizer-init", false,
     "serve without the checkpoint's tokenizer (one may ship none): prompts are token ids "
     "(/v1/completions 'prompt' as ids, gRPC token_ids), outputs their token ids with empty "
     "text; chat, text prompts, stop strings, structured output, /tokenize and /detokenize "
     "answer 400"},
};

absl::Status ReadOffloadFlags(const Flags& flags, ServeOptions* o);

absl::Status ReadSchedulerFlags(const Flags& flags, ServeOptions* o) {
  scheduler::SchedulerConfig& s = o->scheduler;
  ASSIGN_OR_RETURN(int64_t seqs, flags.GetInt("max-num-seqs", 64, 1, 1 << 16));
  s.max_num_seqs = static_cast<int32_t>(seqs);
  o->max_num_seqs_given = flags.Has("max-num-seqs");
  ASSIGN_OR_RETURN(s.max_num_batched_tokens,
                   flags.GetInt("max-num-batched-tokens", 2048, 1, int64_t{1} << 30));
  ASSIGN_OR_RETURN(int64_t block, flags.GetInt("block-size", 64, 1, 1 << 16));
  s.block_size = static_cast<int>(block);
  s.enable_prefix_caching =
      !flags.Has("no-prefix-caching") && !flags.Has("no-enable-prefix-caching");
  const std::string policy = flags.GetOr("scheduling-policy", "fcfs");
  if (policy != "fcfs" && policy != "priority") {
    return absl::InvalidArgumentError("--scheduling-policy must be fcfs or priority");
  }
  s.policy = policy == "fcfs" ? scheduler::Policy::kFcfs : scheduler::Policy::kPriority;
  ASSIGN_OR_RETURN(s.long_prefill_token_threshold,
                   flags.GetInt("long-prefill-token-threshold", 0, 0, int64_t{1} << 30));
  ASSIGN_OR_RETURN(int64_t itl_ms, flags.GetInt("target-itl-ms", 1000, 0, 3'600'000));
  o->engine.target_itl_ms = static_cast<double>(itl_ms);
  if (auto spec = flags.Get("speculative-config")) {
    RETURN_IF_ERROR(ParseSpeculativeConfig(*spec, &s));
  }
  ASSIGN_OR_RETURN(o->max_model_len, flags.GetInt("max-model-len", 0, 0, int64_t{1} << 31));
  ASSIGN_OR_RETURN(o->engine.max_queued_requests,
                   flags.GetInt("max-queued-requests", 1024, 1, int64_t{1} << 30));
  if (auto bytes = flags.Get("kv-cache-memory")) {
    ASSIGN_OR_RETURN(o->kv_cache_memory_bytes, ParseBytes(*bytes, "kv-cache-memory"));
    o->kv_cache_memory_given = true;
  }
  ASSIGN_OR_RETURN(o->latent_dtype,
                   ParseKvCacheDType(flags.GetOr("kv-cache-dtype", "auto"), o->device));
  return ReadOffloadFlags(flags, o);
}

// --kv-offload-memory / --kv-offload-dir / --kv-offload-disk (docs/kv-offload.md).
absl::Status ReadOffloadFlags(const Flags& flags, ServeOptions* o) {
  if (auto text = flags.Get("kv-offload-memory")) {
    ASSIGN_OR_RETURN(o->kv_offload_memory_bytes,
                     ParseBytes(*text, "kv-offload-memory", /*allow_zero=*/true));
  }
  if (auto dir = flags.Get("kv-offload-dir")) {
    if (dir->empty()) return absl::InvalidArgumentError("--kv-offload-dir: empty path");
    o->kv_offload_dir = *dir;
  }
  if (auto text = flags.Get("kv-offload-disk")) {
    if (o->kv_offload_dir.empty()) {
      return absl::InvalidArgumentError(
          "--kv-offload-disk sizes the disk tier, which needs --kv-offload-dir DIR");
    }
    ASSIGN_OR_RETURN(o->kv_offload_disk_bytes, ParseBytes(*text, "kv-offload-disk"));
  }
  if (auto text = flags.Get("kv-offload-max-load-per-step")) {
    ASSIGN_OR_RETURN(o->scheduler.max_tier_load_bytes_per_step,
                     ParseBytes(*text, "kv-offload-max-load-per-step"));
  }
  if (o->kv_offload() && !o->scheduler.enable_prefix_caching) {
    return absl::InvalidArgumentError(
        "--kv-offload-memory / --kv-offload-dir keep what the prefix cache evicts: they need "
        "prefix caching (drop --no-prefix-caching)");
  }
  return absl::OkStatus();
}

absl::Status ReadVllmFlags(const Flags& flags, ServeOptions* o) {
  if (flags.Has("enable-prefix-caching") &&
      (flags.Has("no-prefix-caching") || flags.Has("no-enable-prefix-caching"))) {
    return absl::InvalidArgumentError(
        "--enable-prefix-caching contradicts --no-prefix-caching / --no-enable-prefix-caching");
  }
  ASSIGN_OR_RETURN(std::optional<double> utilization,
                   flags.GetDouble("gpu-memory-utilization", 0.01, 1.0));
  if (utilization && o->device != "cuda") {
    return absl::InvalidArgumentError(
        "--gpu-memory-utilization sizes GPU memory (--device cuda); on the CPU give the caches "
        "bytes with --kv-cache-memory");
  }
  if (utilization && o->kv_cache_memory_given) {
    return absl::InvalidArgumentError(
        "--gpu-memory-utilization and --kv-cache-memory both size the caches: give one");
  }
  o->gpu_memory_utilization = utilization;
  o->cuda_graphs = !flags.Has("enforce-eager");
  // The parsers follow the checkpoint (a Kimi K3 one is read as XTML, ChoiceOptions::xtml);
  // the flags name the formats of the models Strata serves.
  const std::string parser = flags.GetOr("tool-call-parser", "kimi_k2");
  if (parser != "kimi_k2" && parser != "kimi_k3") {
    return absl::InvalidArgumentError(
        "--tool-call-parser: must be kimi_k2 or kimi_k3 (Kimi's tool-call tokens, Kimi K3's XTML "
        "tools channel: the formats of the models Strata serves); got '" +
        parser + "'");
  }
  if (flags.Has("tool-call-parser")) o->tool_call_parser = parser;
  const std::string dtype = flags.GetOr("dtype", "auto");
  if (dtype != "auto" && dtype != "bfloat16" && dtype != "bf16") {
    return absl::InvalidArgumentError(
        "--dtype must be auto or bfloat16 (Strata computes with the checkpoint's bf16 weights: "
        "f32 math on the CPU, bf16 tensor cores on a GPU), got '" +
        dtype + "'");
  }
  if (flags.Has("no-enable-chunked-prefill")) {
    return absl::InvalidArgumentError(
        "--no-enable-chunked-prefill: Strata always splits prompts over steps of at most "
        "--max-num-batched-tokens tokens; drop the flag (a step as long as a whole prompt: raise "
        "--max-num-batched-tokens and set --target-itl-ms 0)");
  }
  const std::string reasoning = flags.GetOr("reasoning-parser", "kimi_k2");
  if (reasoning != "kimi_k2" && reasoning != "kimi_k3") {
    return absl::InvalidArgumentError(
        "--reasoning-parser: must be kimi_k2 or kimi_k3 (Kimi's <think> ... </think>, Kimi K3's "
        "think channel: the formats of the models Strata serves); got '" +
        reasoning + "'");
  }
  if (flags.Has("reasoning-parser")) o->reasoning_parser = reasoning;
  if (flags.Has("disable-log-requests") && flags.Has("enable-log-requests")) {
    return absl::InvalidArgumentError(
        "--disable-log-requests contradicts --enable-log-requests: give one");
  }
  o->log_requests = !flags.Has("disable-log-requests");
  if (flags.Has("trust-remote-code")) {
    LOG_INFO("serve", "--trust-remote-code: not needed, Strata runs no code from the checkpoint");
  }
  return absl::OkStatus();
}

// A store's memory bound (--`memory_flag`, 0: off) and the directory that keeps it across
// restarts (--`dir_flag`; needs the store on).
absl::Status ReadStoreFlags(const Flags& flags, const char* memory_flag, const char* dir_flag,
                            const char* what, int64_t* bytes, std::string* dir) {
  if (auto text = flags.Get(memory_flag)) {
    ASSIGN_OR_RETURN(*bytes, ParseBytes(*text, memory_flag, /*allow_zero=*/true));
  }
  if (auto given = flags.Get(dir_flag)) {
    if (given->empty())
      return absl::InvalidArgumentError(absl::StrCat("--", dir_flag, ": empty path"));
    if (*bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", dir_flag, " keeps ", what, ", which --", memory_flag, " 0 turns off"));
    }
    *dir = *given;
  }
  return absl::OkStatus();
}

// --idle-timeout or one of its other names (default 75 s); two names given must agree.
absl::StatusOr<absl::Duration> KeepAliveTimeout(const Flags& flags) {
  std::optional<double> seconds;
  std::string given;
  for (const char* name : {"idle-timeout", "keep-alive-timeout", "timeout-keep-alive"}) {
    ASSIGN_OR_RETURN(std::optional<double> v, flags.GetDouble(name, 0.001, 86400.0));
    if (!v) continue;
    if (seconds && *seconds != *v) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", given, " and --", name, " both set the keep-alive timeout: give one"));
    }
    seconds = v;
    given = name;
  }
  return absl::Seconds(seconds.value_or(75));
}

absl::Status ReadHttpFlags(const Flags& flags, ServeOptions* o) {
  http::HttpServerOptions& h = o->http;
  h.host = flags.GetOr("host", "0.0.0.0");
  ASSIGN_OR_RETURN(int64_t port, flags.GetInt("port", 8000, 0, 65535));
  h.port = static_cast<int>(port);
  ASSIGN_OR_RETURN(int64_t threads, flags.GetInt("http-threads", 2, 1, 256));
  h.num_threads = static_cast<int>(threads);
  if (auto bytes = flags.Get("max-body-bytes")) {
    ASSIGN_OR_RETURN(h.max_body_bytes, ParseBytes(*bytes, "max-body-bytes"));
  }
  RETURN_IF_ERROR(ReadStoreFlags(flags, "responses-store-memory", "responses-dir",
                                 "stored /v1/responses", &o->responses_store_bytes,
                                 &o->responses_dir));
  RETURN_IF_ERROR(ReadStoreFlags(flags, "files-store-memory", "files-dir",
                                 "the Files and Batches API's files", &o->files_store_bytes,
                                 &o->files_dir));
  ASSIGN_OR_RETURN(const int64_t batch_priority,
                   flags.GetInt("batch-priority", 1, INT32_MIN, INT32_MAX));
  o->batch_priority = static_cast<int>(batch_priority);
  ASSIGN_OR_RETURN(o->batch_max_concurrent_requests,
                   flags.GetInt("batch-max-concurrent-requests",
                                std::max<int64_t>(1, o->scheduler.max_num_seqs / 2), 1, 1 << 20));
  auto seconds = [&](const char* name, double fallback) -> absl::StatusOr<absl::Duration> {
    ASSIGN_OR_RETURN(std::optional<double> v, flags.GetDouble(name, 0.001, 86400.0));
    return absl::Seconds(v.value_or(fallback));
  };
  ASSIGN_OR_RETURN(h.request_timeout, seconds("request-timeout", 30));
  ASSIGN_OR_RETURN(h.idle_timeout, KeepAliveTimeout(flags));
  ASSIGN_OR_RETURN(h.max_connections,
                   flags.GetInt("max-connections", 0, 1, int64_t{1} << 24));  // 0: default
  ASSIGN_OR_RETURN(h.ping_interval, seconds("ping-interval", 10));
  ASSIGN_OR_RETURN(std::optional<double> drain, flags.GetDouble("drain-timeout", 0, 86400.0));
  o->drain_timeout_s = drain.value_or(30.0);
  // CORS, with vLLM's flag names and defaults (any origin, method and header).
  http::CorsOptions& cors = h.cors;
  if (auto v = flags.Get("allowed-origins")) {
    ASSIGN_OR_RETURN(cors.allowed_origins, ParseStringList(*v, "--allowed-origins"));
  }
  if (auto v = flags.Get("allowed-methods")) {
    ASSIGN_OR_RETURN(cors.allowed_methods, ParseStringList(*v, "--allowed-methods"));
  }
  if (auto v = flags.Get("allowed-headers")) {
    ASSIGN_OR_RETURN(cors.allowed_headers, ParseStringList(*v, "--allowed-headers"));
  }
  cors.allow_credentials = flags.Has("allow-credentials");
  return absl::OkStatus();
}

}  // namespace

const std::vector<FlagSpec>& ServeFlags() {
  static const std::vector<FlagSpec> flags = [] {
    std::vector<FlagSpec> all = kBaseServeFlags;
    all.insert(all.end(), kVllmServeFlags.begin(), kVllmServeFlags.end());
    const std::vector<FlagSpec>& parallel = ParallelFlagSpecs();
    all.insert(all.end(), parallel.begin(), parallel.end());
    return all;
  }();
  return flags;
}

absl::StatusOr<ServeOptions> ServeOptionsFromFlags(const Flags& flags) {
  ServeOptions o;
  o.model_flag = flags.GetOr("model", "");
  if (auto names = flags.Get("served-model-name")) {
    for (absl::string_view name : absl::StrSplit(*names, ',', absl::SkipWhitespace())) {
      o.served_names.emplace_back(name);
    }
  }
  o.device = flags.GetOr("device", "cpu");
  if (o.device != "cpu" && o.device != "cuda") {
    return absl::InvalidArgumentError("--device must be cpu or cuda, got '" + o.device + "'");
  }
  o.mmap_weights = flags.Has("mmap-weights");
  ASSIGN_OR_RETURN(o.quantization,
                   engine::ParseWeightQuantization(flags.GetOr("quantization", "")));
  RETURN_IF_ERROR(ApplyCpuMatmulPrecision(flags.GetOr("cpu-matmul-precision", "f32")));
  o.api_key = flags.GetOr("api-key", "");
  if (o.api_key.empty()) {
    if (const char* env = std::getenv("STRATA_API_KEY"); env && *env) o.api_key = env;
  }
  o.generation_config = flags.GetOr("generation-config", "auto");
  o.chat_template = flags.GetOr("chat-template", "");
  o.skip_tokenizer_init = flags.Has("skip-tokenizer-init");
  if (o.skip_tokenizer_init && !o.chat_template.empty()) {
    return absl::InvalidArgumentError(
        "--chat-template renders chats into text for the tokenizer, which --skip-tokenizer-init "
        "leaves out: give one");
  }
  o.override_generation_config = flags.GetOr("override-generation-config", "");
  ASSIGN_OR_RETURN(int64_t max_logprobs,
                   flags.GetInt("max-logprobs", 20, 0, scheduler::kMaxPromptLogprobs));
  o.max_logprobs = static_cast<int>(max_logprobs);
  ASSIGN_OR_RETURN(
      o.reply_token_memory_tokens,
      flags.GetInt("reply-token-memory", o.reply_token_memory_tokens, 0, int64_t{1} << 30));
  if (auto v = flags.Get("allowed-media-domains")) {
    ASSIGN_OR_RETURN(o.allowed_media_domains, ParseStringList(*v, "--allowed-media-domains"));
    for (std::string& domain : o.allowed_media_domains) domain = absl::AsciiStrToLower(domain);
  }
  o.allowed_local_media_path = flags.GetOr("allowed-local-media-path", "");
  if (!o.allowed_local_media_path.empty() &&
      !std::filesystem::is_directory(o.allowed_local_media_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--allowed-local-media-path ", o.allowed_local_media_path, " is not a directory"));
  }
  ASSIGN_OR_RETURN(std::optional<double> fetch_timeout,
                   flags.GetDouble("media-fetch-timeout", 0.001, 600.0));
  o.media_fetch_timeout_s = fetch_timeout.value_or(o.media_fetch_timeout_s);
  RETURN_IF_ERROR(ReadSchedulerFlags(flags, &o));
  RETURN_IF_ERROR(ReadHttpFlags(flags, &o));
  RETURN_IF_ERROR(ReadVllmFlags(flags, &o));
  ASSIGN_OR_RETURN(o.parallel, ParallelOptionsFromFlags(flags));
  if (auto level_text = flags.Get("log-level")) {
    log::Level level;
    if (!log::ParseLevel(*level_text, &level)) {
      return absl::InvalidArgumentError("--log-level must be trace|debug|info|warn|error|off");
    }
    log::SetLevel(level);
  }
  const std::string format = flags.GetOr("log-format", "text");
  if (format != "text" && format != "json") {
    return absl::InvalidArgumentError("--log-format must be text or json, got '" + format + "'");
  }
  log::SetJsonLines(format == "json");
  return o;
}

}  // namespace strata::cli
