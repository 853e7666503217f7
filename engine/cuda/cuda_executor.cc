#include "engine/cuda/cuda_executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/log.h"
#include "core/status.h"
#include "engine/cache_copy.h"
#include "engine/cuda/expert_exchange.h"
#include "engine/step_codec.h"
#include "kernels/cuda/ceilings.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/sampling.h"

namespace strata::engine::cuda {
namespace kc = kernels::cuda;
namespace {

// Device memory kept free beyond the caches: the forward's scratch at the largest batches,
// cuBLAS workspaces, the CUDA context's own allocations.
constexpr int64_t kScratchReserveBytes = int64_t{2} << 30;
constexpr int64_t kCublasWorkspaceBytes = int64_t{32} << 20;
constexpr int32_t kMaxGraphBatch = 256;
constexpr int32_t kMinGraphTableWidth = 8;
constexpr size_t kMaxGraphs = 48;

int32_t NextPowerOfTwo(int64_t v) {
  int32_t p = 1;
  while (p < v) p *= 2;
  return p;
}

}  // namespace

kvcache::ModelCacheSpec CudaCacheSpecFor(const ModelConfig& cfg, LatentDType latent_dtype) {
  // f32 state and conv rows, as on the CPU; bf16 or fp8 latent rows.
  kvcache::ModelCacheSpec spec = CacheSpecFor(cfg, latent_dtype);
  return spec;
}

absl::StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::Create(
    const Model& model, const CudaExecutorOptions& options) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError("--device cuda: no CUDA device is visible");
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", options.device, " does not exist (", count, " visible)"));
  }
  std::unique_ptr<CudaExecutor> e(new CudaExecutor());
  e->device_ = options.device;
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(e->device_), "cudaSetDevice");
  cudaDeviceProp prop{};
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, e->device_),
                              "cudaGetDeviceProperties");
  LOG_INFO("cuda", "device {}: {} (sm_{}{}, {} SMs, {:.0f} GiB)", e->device_, prop.name, prop.major,
           prop.minor, prop.multiProcessorCount,
           static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&e->stream_, cudaStreamNonBlocking),
                              "cudaStreamCreate");
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&e->copy_stream_, cudaStreamNonBlocking),
                              "cudaStreamCreate (offload copies)");
  STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e->saves_done_), "cudaEventCreate");
  ASSIGN_OR_RETURN(kc::CublasHandle handle, kc::CublasHandle::Create());
  e->cublas_.emplace(std::move(handle));
  // cuBLAS would otherwise allocate its workspace lazily, which a graph capture cannot do.
  ASSIGN_OR_RETURN(e->cublas_workspace_,
                   kc::DeviceBuffer::Allocate(kCublasWorkspaceBytes, "the cuBLAS workspace"));
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(e->cublas_->get(), e->cublas_workspace_.get(),
                                                   static_cast<size_t>(kCublasWorkspaceBytes)),
                                "cublasSetWorkspace");
  ASSIGN_OR_RETURN(e->model_, CudaModel::Create(model, options.model));
  // Graphs need a forward that never waits for the host; the expert exchange does (the
  // tensor- and context-parallel collectives are on the stream: device_collectives.h).
  e->graphs_enabled_ = options.cuda_graphs && options.model.own_grouped_gemm &&
                       options.model.expert_exchange == nullptr;
  if ((options.model.tensor_parallel == nullptr) != (options.tensor_parallel_host == nullptr)) {
    return absl::InvalidArgumentError(
        "tensor parallelism needs both sides of the group (CudaExecutorOptions::"
        "tensor_parallel_host and model.tensor_parallel)");
  }
  e->tensor_parallel_host_ = options.tensor_parallel_host;
  e->device_sampling_ = options.device_sampling;
  return e;
}

CudaExecutor::DecodeGraph::~DecodeGraph() {
  if (exec != nullptr) cudaGraphExecDestroy(exec);
}

CudaExecutor::~CudaExecutor() {
  graphs_.clear();
  for (cudaStream_t stream : {stream_, copy_stream_}) {
    if (stream == nullptr) continue;
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
  if (saves_done_ != nullptr) cudaEventDestroy(saves_done_);
}

absl::StatusOr<int64_t> CudaExecutor::DefaultCacheBudgetBytes(double fraction) const {
  ASSIGN_OR_RETURN(kc::DeviceMemoryInfo info, kc::QueryDeviceMemory());
  const int64_t usable =
      static_cast<int64_t>(static_cast<double>(info.free_bytes) * fraction) - kScratchReserveBytes;
  if (usable <= 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no device memory left for the caches: ", info.free_bytes,
                     " bytes free after ", model_->weight_bytes(), " bytes of weights (",
                     kScratchReserveBytes, " are kept for the forward's scratch)"));
  }
  return usable;
}

absl::StatusOr<int64_t> CudaExecutor::CacheBudgetForUtilization(double utilization) const {
  ASSIGN_OR_RETURN(kc::DeviceMemoryInfo info, kc::QueryDeviceMemory());
  const int64_t in_use = info.total_bytes - info.free_bytes;  // weights, context, others
  const int64_t usable = static_cast<int64_t>(static_cast<double>(info.total_bytes) * utilization) -
                         in_use - kScratchReserveBytes;
  if (usable <= 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("--gpu-memory-utilization ", utilization,
                     " leaves no room for the caches: ", in_use, " of ", info.total_bytes,
                     " device bytes are in use (the weights take ", model_->weight_bytes(),
                     ") and ", kScratchReserveBytes, " are kept for the forward's scratch"));
  }
  return usable;
}

absl::Status CudaExecutor::AllocateCaches(const kvcache::CacheLayout& layout) {
  if (layout.num_mla_layers > 0 && layout.block_size != 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device cuda needs --block-size 64 (the MLA kernels' page), got ", layout.block_size));
  }
  if (layout.num_mla_layers > 0 && layout.latent_dtype != LatentDType::kBF16 &&
      layout.latent_dtype != LatentDType::kFP8) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device cuda keeps the latent cache in bf16 or fp8, not ",
                     std::string(LatentDTypeName(layout.latent_dtype))));
  }
  if (layout.num_tokens() >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the latent cache holds ", layout.num_tokens(),
                     " tokens; the CUDA kernels index at most 2^31 − 1"));
  }
  layout_ = layout;
  ASSIGN_OR_RETURN(caches_arena_, kc::DeviceBuffer::Allocate(layout.TotalBytes(), "the caches"));
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemset(caches_arena_.get(), 0, static_cast<size_t>(layout.TotalBytes())),
      "cache arena cudaMemset");
  caches_ = DeviceCaches();
  caches_.latent_dtype = layout.latent_dtype;
  for (int j = 0; j < layout.num_mla_layers; ++j) {
    caches_.mla_pages.push_back(arena() + layout.MlaLayerOffset(j));
  }
  for (int j = 0; j < layout.num_kda_layers; ++j) {
    caches_.kda_state.push_back(reinterpret_cast<float*>(arena() + layout.KdaStateOffset(j)));
    caches_.kda_conv.push_back(reinterpret_cast<float*>(arena() + layout.KdaConvOffset(j)));
  }
  return absl::OkStatus();
}

absl::Status CudaExecutor::CopyStateRow(int32_t from_row, int32_t to_row) {
  for (int j = 0; j < layout_.num_kda_layers; ++j) {
    for (auto [offset, bytes] :
         {std::pair{layout_.KdaStateOffset(j), layout_.kda_state_bytes_per_layer},
          std::pair{layout_.KdaConvOffset(j), layout_.kda_conv_bytes_per_layer}}) {
      STRATA_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(arena() + offset + to_row * bytes, arena() + offset + from_row * bytes,
                          static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_),
          "state row cudaMemcpyAsync");
    }
  }
  return absl::OkStatus();
}

absl::Status CudaExecutor::InitSlots(const StepPlan& plan) {
  if (layout_.num_kda_layers == 0) return absl::OkStatus();
  for (const ScheduledSequence& seq : plan.sequences) {
    if (seq.slot < 0) continue;
    CHECK_LT(seq.slot, layout_.num_slots);
    const int32_t row = layout_.SlotRow(seq.slot);
    if (seq.slot_init == SlotInit::kFromCheckpoint) {
      CHECK(seq.source_checkpoint >= 0 && seq.source_checkpoint < layout_.num_checkpoint_ids());
      RETURN_IF_ERROR(CopyStateRow(layout_.CheckpointRow(seq.source_checkpoint), row));
    } else if (seq.slot_init == SlotInit::kZero) {
      for (int j = 0; j < layout_.num_kda_layers; ++j) {
        for (auto [offset, bytes] :
             {std::pair{layout_.KdaStateOffset(j), layout_.kda_state_bytes_per_layer},
              std::pair{layout_.KdaConvOffset(j), layout_.kda_conv_bytes_per_layer}}) {
          STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(arena() + offset + row * bytes, 0,
                                                      static_cast<size_t>(bytes), stream_),
                                      "state row cudaMemsetAsync");
        }
      }
    }
  }
  return absl::OkStatus();
}

// The step's index arrays and a zeroed invalid-id counter (the last int) in one copy.
absl::Status CudaExecutor::Upload(kc::DeviceBuffer* ints) {
  const int64_t bytes = (static_cast<int64_t>(step_.ints.size()) + 1) * 4;
  if (ints->bytes() < bytes) return absl::InternalError("step input buffer too small");
  RETURN_IF_ERROR(step_staging_.Reserve(bytes, "step index arrays (host)"));
  int32_t* staging = step_staging_.as<int32_t>();
  std::memcpy(staging, step_.ints.data(), step_.ints.size() * 4);
  staging[step_.ints.size()] = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ints->get(), staging, static_cast<size_t>(bytes),
                                              cudaMemcpyHostToDevice, stream_),
                              "step cudaMemcpyAsync");
  return absl::OkStatus();
}

bool CudaExecutor::PadForGraph(GraphKey* key) {
  // A graph replays its copies: image rows (a one-token piece of an image) run eagerly.
  if (!graphs_enabled_ || step_.num_prefill() > 0 || step_.num_decode == 0 ||
      step_.num_decode > kMaxGraphBatch || step_.num_scored_rows > 0 || !step_.media_rows.empty()) {
    return false;
  }
  *key = {NextPowerOfTwo(step_.num_decode),
          std::max(kMinGraphTableWidth, NextPowerOfTwo(step_.max_blocks_per_seq))};
  if (graph_failed_.contains(*key)) return false;
  if (!graphs_.contains(*key) && graphs_.size() >= kMaxGraphs) return false;
  PadDecodeStep(key->first, key->second, layout_.block_size, &step_);
  return true;
}

absl::StatusOr<std::unique_ptr<CudaExecutor::DecodeGraph>> CudaExecutor::Capture() {
  auto g = std::make_unique<DecodeGraph>();
  ASSIGN_OR_RETURN(g->ints,
                   kc::DeviceBuffer::Allocate((static_cast<int64_t>(step_.ints.size()) + 1) * 4,
                                              "graph step arrays"));
  ASSIGN_OR_RETURN(g->logits,
                   g->scratch.Take<float>(step_.num_logit_rows * model_->config().vocab_size));
  ASSIGN_OR_RETURN(g->expert_offsets, g->scratch.Take<int32_t>(model_->expert_offsets_ints()));
  DeviceStep step;
  step.host = &step_;
  step.ints = g->ints.as<int32_t>();
  step.invalid_tokens = g->ints.as<int32_t>() + step_.ints.size();
  const DeviceContext ctx{stream_, cublas_->get(), &g->scratch, /*decode_only=*/true};
  // Relaxed: the graph's scratch may still grow (cudaMalloc) while the forward is recorded.
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed),
                              "cudaStreamBeginCapture");
  const absl::Status recorded = model_->Forward(step, caches_, ctx, g->logits, g->expert_offsets);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (!recorded.ok() || ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    return recorded.ok() ? kc::CudaStatus(ended, "cudaStreamEndCapture") : recorded;
  }
  cudaGraphGetNodes(graph, nullptr, &g->num_nodes);
  const cudaError_t made = cudaGraphInstantiate(&g->exec, graph, 0);
  cudaGraphDestroy(graph);
  STRATA_CUDA_RETURN_IF_ERROR(made, "cudaGraphInstantiate");
  return g;
}

CudaExecutor::DecodeGraph* CudaExecutor::GraphFor(const GraphKey& key) {
  auto it = graphs_.find(key);
  if (it != graphs_.end()) return it->second.get();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<DecodeGraph>> g = Capture();
  if (!g.ok()) {
    LOG_WARN("cuda", "decode graph for batch {} / {} pages not captured ({}); eager instead",
             key.first, key.second, g.status().ToString());
    graph_failed_.insert(key);
    return nullptr;
  }
  // Once per bucket: how long a capture takes, and how many nodes each replay launches (at small
  // batches a decode step costs about that many kernel latencies).
  LOG_INFO(
      "cuda", "captured the decode graph for batch {} / {} pages: {} nodes, {:.1f} ms", key.first,
      key.second, (*g)->num_nodes,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return graphs_.emplace(key, std::move(*g)).first->second.get();
}

// Which sampled tokens the device picks: all, when device sampling is on, but those asking
// for more than kSamplingChunk log-probabilities or under a constraint. Rows with log-probabilities
// or penalties keep a raw copy of their logits row (RowLogprobs reads it; a hand-back sends it to
// the host).
bool CudaExecutor::PlanDeviceSampling(const StepPlan& plan) {
  DeviceSampling& d = device_sampling_plan_;
  const size_t n = step_.sampled_plan_index.size();
  d.on_device.assign(n, false);
  d.raw_copy.assign(n, -1);
  d.logprob_row.assign(n, -1);
  d.num_raw = d.num_logprob_rows = d.max_top = 0;
  if (!device_sampling_) return false;
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    const ScheduledSequence& seq = plan.sequences[static_cast<size_t>(step_.sampled_plan_index[i])];
    // Rows with more log-probabilities than a chunk, masked by a constraint (structured
    // output walks its grammar on the host) or verifying drafts (each row is sampled only if
    // the previous one matched its draft) are sampled on the host.
    if (seq.num_logprobs > kc::kSamplingChunk || seq.sampler->constrained() ||
        seq.num_draft_tokens > 0) {
      continue;
    }
    d.on_device[i] = any = true;
    if (seq.num_logprobs >= 0) {
      d.logprob_row[i] = d.num_logprob_rows++;
      d.max_top = std::max(d.max_top, seq.num_logprobs);
    }
    if (seq.num_logprobs >= 0 || seq.sampler->ModifiesLogits()) d.raw_copy[i] = d.num_raw++;
  }
  return any;
}

namespace {

// Byte offsets of the device sampler's arrays in one buffer (16-byte aligned): the inputs
// (staged on the host, copied in one piece), then the outputs (copied back in one piece).
struct SamplingBlock {
  int64_t params, uniforms, bias_offsets, bias_ids, bias_values, history_offsets, history_ids,
      history_counts, logprob_rows, inputs_end;
  int64_t tokens, token_logprob, top_ids, top_logprobs, end;

  SamplingBlock(int64_t rows, int64_t bias, int64_t history, int64_t logprob_rows_n,
                int64_t max_top) {
    int64_t at = 0;
    auto take = [&at](int64_t bytes) {
      const int64_t start = at;
      at += (bytes + 15) / 16 * 16;
      return start;
    };
    params = take(rows * static_cast<int64_t>(sizeof(kc::SamplingRowParams)));
    uniforms = take(rows * 8);
    bias_offsets = take((rows + 1) * 4);
    bias_ids = take(bias * 4);
    bias_values = take(bias * 4);
    history_offsets = take((rows + 1) * 4);
    history_ids = take(history * 4);
    history_counts = take(history * 4);
    logprob_rows = take(logprob_rows_n * static_cast<int64_t>(sizeof(kc::LogprobRow)));
    inputs_end = at;
    tokens = take(rows * 4);
    token_logprob = take(logprob_rows_n * 4);
    top_ids = take(logprob_rows_n * max_top * 4);
    top_logprobs = take(logprob_rows_n * max_top * 4);
    end = at;
  }
  int64_t outputs_bytes() const { return end - tokens; }
};

template <typename T>
T* At(void* base, int64_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

}  // namespace

// Enqueues the device sampler over all R logits rows with this step's per-row parameters,
// uniforms, biases and penalty histories, then RowLogprobs over the raw copies. *outputs: the
// device block the caller copies back (SamplingBlock::tokens onwards).
absl::Status CudaExecutor::SampleOnDevice(const StepPlan& plan, float* logits, const char** outputs,
                                          int64_t* outputs_bytes) {
  const DeviceSampling& d = device_sampling_plan_;
  const int64_t rows = step_.num_sampled_rows();  // the scored rows after them stay raw
  const int64_t vocab = model_->config().vocab_size;
  auto sampler_of = [&](size_t i) -> Sampler& {
    return *plan.sequences[static_cast<size_t>(step_.sampled_plan_index[i])].sampler;
  };
  int64_t bias = 0, history = 0;
  for (size_t i = 0; i < d.on_device.size(); ++i) {
    if (!d.on_device[i]) continue;
    bias += static_cast<int64_t>(sampler_of(i).params().logit_bias.size() +
                                 sampler_of(i).blocked_stop_ids().size());
    history += static_cast<int64_t>(sampler_of(i).penalized_ids().size());
  }
  const SamplingBlock block(rows, bias, history, d.num_logprob_rows, d.max_top);
  RETURN_IF_ERROR(sampling_staging_.Reserve(block.inputs_end, "sampling inputs (host)"));
  RETURN_IF_ERROR(sampling_device_.Reserve(block.end, "sampling inputs and outputs"));
  void* host = sampling_staging_.get();
  auto* params = At<kc::SamplingRowParams>(host, block.params);
  auto* uniforms = At<double>(host, block.uniforms);
  auto* bias_offsets = At<int32_t>(host, block.bias_offsets);
  auto* bias_ids = At<int32_t>(host, block.bias_ids);
  auto* bias_values = At<float>(host, block.bias_values);
  auto* history_offsets = At<int32_t>(host, block.history_offsets);
  auto* history_ids = At<int32_t>(host, block.history_ids);
  auto* history_counts = At<int32_t>(host, block.history_counts);
  auto* logprob_rows = At<kc::LogprobRow>(host, block.logprob_rows);
  // Rows nobody samples here (host rows, padding) are greedy with no bias or history.
  row_uniform_.assign(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    params[r] = kc::SamplingRowParams();
    params[r].temperature = 0.0f;
    uniforms[r] = 0.0;
  }
  // Bias and history entries are written in row order, so the CSR offsets are prefix sums.
  std::vector<size_t>& by_row = sampled_by_row_;
  by_row.assign(static_cast<size_t>(rows), d.on_device.size());
  for (size_t i = 0; i < d.on_device.size(); ++i) {
    if (d.on_device[i]) by_row[static_cast<size_t>(step_.sampled_logit_row[i])] = i;
  }
  int32_t b = 0, h = 0;
  for (int64_t r = 0; r < rows; ++r) {
    bias_offsets[r] = b;
    history_offsets[r] = h;
    const size_t i = by_row[static_cast<size_t>(r)];
    if (i == d.on_device.size()) continue;
    Sampler& sampler = sampler_of(i);
    const SamplingParams& p = sampler.params();
    params[r].temperature = p.temperature;
    params[r].top_k = p.top_k;
    params[r].top_p = p.top_p;
    params[r].min_p = p.min_p;
    params[r].repetition_penalty = p.repetition_penalty;
    params[r].presence_penalty = p.presence_penalty;
    params[r].frequency_penalty = p.frequency_penalty;
    uniforms[r] = sampler.NextUniform();
    row_uniform_[static_cast<size_t>(r)] = uniforms[r];
    for (const auto& [id, value] : p.logit_bias) {
      bias_ids[b] = id;
      bias_values[b++] = value;
    }
    for (int32_t id : sampler.blocked_stop_ids()) {  // min_tokens: not yet
      bias_ids[b] = id;
      bias_values[b++] = -std::numeric_limits<float>::infinity();
    }
    for (int32_t id : sampler.penalized_ids()) {
      history_ids[h] = id;
      history_counts[h++] = sampler.output_count(id);
    }
    if (d.logprob_row[i] >= 0) {
      const ScheduledSequence& seq =
          plan.sequences[static_cast<size_t>(step_.sampled_plan_index[i])];
      logprob_rows[d.logprob_row[i]] = {d.raw_copy[i], static_cast<int32_t>(r), seq.num_logprobs};
    }
  }
  bias_offsets[rows] = b;
  history_offsets[rows] = h;
  void* dev = sampling_device_.get();
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev, host, static_cast<size_t>(block.inputs_end),
                                              cudaMemcpyHostToDevice, stream_),
                              "sampling inputs cudaMemcpyAsync");
  // Raw copies before the sampler applies bias and penalties in place.
  if (d.num_raw > 0) {
    RETURN_IF_ERROR(raw_logits_.Reserve(d.num_raw * vocab * 4, "raw logits rows"));
    for (size_t i = 0; i < d.on_device.size(); ++i) {
      if (d.raw_copy[i] < 0) continue;
      STRATA_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(raw_logits_.as<float>() + d.raw_copy[i] * vocab,
                          logits + step_.sampled_logit_row[i] * vocab,
                          static_cast<size_t>(vocab) * 4, cudaMemcpyDeviceToDevice, stream_),
          "raw logits row cudaMemcpyAsync");
    }
  }
  kc::SamplingInputs in;
  in.logits = logits;
  in.params = At<kc::SamplingRowParams>(dev, block.params);
  in.uniforms = At<double>(dev, block.uniforms);
  if (bias > 0) {
    in.bias_offsets = At<int32_t>(dev, block.bias_offsets);
    in.bias_ids = At<int32_t>(dev, block.bias_ids);
    in.bias_values = At<float>(dev, block.bias_values);
  }
  if (history > 0) {
    in.history_offsets = At<int32_t>(dev, block.history_offsets);
    in.history_ids = At<int32_t>(dev, block.history_ids);
    in.history_counts = At<int32_t>(dev, block.history_counts);
  }
  in.max_ranked_chunks = 1;  // deeper draws come back (kSampleOnHost): the host ranks faster
  int32_t* tokens = At<int32_t>(dev, block.tokens);
  RETURN_IF_ERROR(kc::SampleTokens(in, rows, vocab, tokens, stream_));
  if (d.num_logprob_rows > 0) {
    const kc::LogprobInputs lin{raw_logits_.as<float>(), tokens,
                                At<kc::LogprobRow>(dev, block.logprob_rows)};
    const kc::LogprobOutputs lout{At<float>(dev, block.token_logprob),
                                  At<int32_t>(dev, block.top_ids),
                                  At<float>(dev, block.top_logprobs)};
    RETURN_IF_ERROR(kc::RowLogprobs(lin, d.num_logprob_rows, vocab, d.max_top, lout, stream_));
  }
  sampled_outputs_ = {block.token_logprob - block.tokens, block.top_ids - block.tokens,
                      block.top_logprobs - block.tokens};
  *outputs = At<const char>(dev, block.tokens);
  *outputs_bytes = block.outputs_bytes();
  return absl::OkStatus();
}

absl::Status CudaExecutor::Sample(const StepPlan& plan, const char* device_outputs,
                                  const float* logits, StepResult* result) {
  const DeviceSampling& d = device_sampling_plan_;
  const int64_t vocab = model_->config().vocab_size;
  const size_t r = step_.sampled_plan_index.size();  // rows: at least the tokens sampled
  if (result->sampled.size() < r) result->sampled.resize(r);
  num_sampled_by_plan_.assign(plan.sequences.size(), 0);
  size_t num_out = 0;
  const auto* device_tokens = reinterpret_cast<const int32_t*>(device_outputs);
  const auto* token_logprob =
      reinterpret_cast<const float*>(device_outputs + sampled_outputs_.token_logprob);
  const auto* top_ids = reinterpret_cast<const int32_t*>(device_outputs + sampled_outputs_.top_ids);
  const auto* top_logprobs =
      reinterpret_cast<const float*>(device_outputs + sampled_outputs_.top_logprobs);
  // Rows the device handed back (their draw lay beyond its chunk): their raw logits rows come
  // back in one round trip.
  bool any_handed_back = false;
  for (size_t i = 0; i < r; ++i) {
    const int64_t row = step_.sampled_logit_row[i];
    if (!d.on_device[i] || device_tokens[row] != kc::kSampleOnHost) continue;
    const float* raw =
        d.raw_copy[i] >= 0 ? raw_logits_.as<float>() + d.raw_copy[i] * vocab : logits + row * vocab;
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(outputs_host_.as<float>() + row * vocab, raw,
                        static_cast<size_t>(vocab) * 4, cudaMemcpyDeviceToHost, stream_),
        "handed-back logits row cudaMemcpyAsync");
    any_handed_back = true;
  }
  if (any_handed_back) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                                "handed-back rows cudaStreamSynchronize");
  }
  for (size_t i = 0; i < r; ++i) {
    const ScheduledSequence& seq = plan.sequences[static_cast<size_t>(step_.sampled_plan_index[i])];
    const int64_t row = step_.sampled_logit_row[i];
    float* host_row = outputs_host_.as<float>() + row * vocab;
    SampledToken& out = result->sampled[num_out++];
    ++num_sampled_by_plan_[static_cast<size_t>(step_.sampled_plan_index[i])];
    if (!d.on_device[i]) {
      sampler_.Sample(seq, host_row, vocab, &out);
      // Drafts: the rows after a rejected one are skipped.
      const int32_t back = step_.sampled_rows_back[i];
      if (EndsDraftVerification(seq, back, out.token_id)) i += back;
      continue;
    }
    if (device_tokens[row] == kc::kSampleOnHost) {
      sampler_.SampleWithUniform(seq, host_row, vocab, row_uniform_[static_cast<size_t>(row)],
                                 &out);
      ++handed_back_rows_;
      continue;
    }
    out.seq_id = seq.seq_id;
    out.token_id = device_tokens[row];
    CHECK(out.token_id >= 0 && out.token_id < vocab) << "device sampler picked " << out.token_id;
    seq.sampler->Accept(out.token_id);
    out.logprob = 0.0f;
    out.top_logprobs.clear();
    const int32_t lp = d.logprob_row[i];
    if (lp < 0) continue;
    out.logprob = token_logprob[lp];
    const int64_t n = std::min<int64_t>(seq.num_logprobs, vocab);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t at = lp * d.max_top + k;
      out.top_logprobs.push_back({top_ids[at], top_logprobs[at]});
    }
  }
  result->sampled.resize(num_out);  // shrinks only: entries keep their capacity
  return absl::OkStatus();
}

absl::StatusOr<DeviceKdaDrafts> CudaExecutor::ReserveKdaDrafts() {
  DeviceKdaDrafts kept;
  if (step_.num_drafting == 0 || layout_.num_kda_layers == 0) return kept;
  const KdaConfig& k = model_->config().kda;
  kept.num_rows = step_.num_rows - step_.first_draft_row;
  kept.width = k.projection_size();
  kept.heads = k.num_heads;
  kept.layer_floats = DeviceKdaDrafts::LayerFloats(kept.num_rows, kept.width, kept.heads);
  ASSIGN_OR_RETURN(kept.base, scratch_.Take<float>(layout_.num_kda_layers * kept.layer_floats));
  return kept;
}

absl::Status CudaExecutor::ReplayKdaDrafts(const StepPlan& plan, const DeviceStep& step) {
  if (step.kda_drafts.base == nullptr) return absl::OkStatus();
  // Drafting sequence n keeps its rows [cu[n], ends[n]): the tokens before its drafts and the
  // accepted drafts (one fewer than the tokens it sampled).
  const int32_t n = step_.num_drafting, first = step_.num_sequences - n;
  RETURN_IF_ERROR(step_staging_.Reserve((2 * int64_t{n} + 1) * 4, "KDA replay arrays (host)"));
  int32_t* cu = step_staging_.as<int32_t>();
  int32_t* ends = cu + n + 1;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t index = step_.plan_index[static_cast<size_t>(first + i)];
    const ScheduledSequence& seq = plan.sequences[static_cast<size_t>(index)];
    const int32_t sampled = num_sampled_by_plan_[static_cast<size_t>(index)];
    CHECK_GE(sampled, 1) << "sequence " << seq.seq_id << " verified drafts without a token";
    cu[i] = static_cast<int32_t>(step_.row_offset[static_cast<size_t>(first + i)] -
                                 step_.first_draft_row);
    const auto kept =
        static_cast<int32_t>(seq.token_ids.size()) - seq.num_draft_tokens + (sampled - 1);
    ends[i] = cu[i] + kept;
  }
  cu[n] = static_cast<int32_t>(step_.num_rows - step_.first_draft_row);
  ASSIGN_OR_RETURN(int32_t * device, scratch_.Take<int32_t>(2 * int64_t{n} + 1));
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device, cu, (2 * static_cast<size_t>(n) + 1) * 4,
                                              cudaMemcpyHostToDevice, stream_),
                              "KDA replay arrays cudaMemcpyAsync");
  const DeviceContext ctx{stream_, cublas_->get(), &scratch_};
  RETURN_IF_ERROR(model_->ReplayKdaDrafts(step, caches_, ctx, device, device + n + 1));
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "KDA replay cudaStreamSynchronize");
  return absl::OkStatus();
}

// Copies through pinned staging, so they are asynchronous: a load's bytes are staged on the host
// and go up while the host launches the step; a save comes down into staging and reaches
// result->saved in FinishCacheSaves, after the step's synchronisation. Saves and the loads the
// step's sequences use run on the step's stream before its kernels (InitSlots, the forward);
// loads beside the step (a hit loading over several steps) run on copy_stream_ beside the
// kernels, after the saves. The staging is free again when the step ends (both streams are
// synchronised), so one buffer grown to the largest step serves.
absl::Status CudaExecutor::CopyCacheUnits(const StepPlan& plan, StepResult* result) {
  RETURN_IF_ERROR(WaitForCopiesBeside());  // a step that failed half way: staging in use
  pending_saves_.clear();
  if (plan.cache_saves.empty() && plan.cache_loads.empty()) {
    result->saved.clear();
    return absl::OkStatus();
  }
  int64_t staged = 0;
  for (const CacheSave& save : plan.cache_saves) staged += UnitBytes(save.unit, save.index);
  for (const CacheLoad& load : plan.cache_loads) staged += UnitBytes(load.unit, load.index);
  RETURN_IF_ERROR(copy_staging_.Reserve(staged, "offload copy staging (pinned host)"));
  char* staging = copy_staging_.as<char>();
  int64_t at = 0;
  return engine::CopyCacheUnits(
      plan, layout_, result, &spans_,
      [&](int64_t offset, int64_t bytes, char* to) -> absl::Status {
        STRATA_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(staging + at, arena() + offset, static_cast<size_t>(bytes),
                            cudaMemcpyDeviceToHost, stream_),
            "cache save cudaMemcpyAsync");
        pending_saves_.push_back({to, at, bytes});
        at += bytes;
        return absl::OkStatus();
      },
      [&](const CacheLoad& load, const char* from, int64_t offset, int64_t bytes) -> absl::Status {
        if (load.beside_step && !copies_beside_) {  // after every save (all come first)
          STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(saves_done_, stream_), "cudaEventRecord");
          STRATA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_stream_, saves_done_, 0),
                                      "cudaStreamWaitEvent");
          copies_beside_ = true;
        }
        std::memcpy(staging + at, from, static_cast<size_t>(bytes));
        STRATA_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(arena() + offset, staging + at, static_cast<size_t>(bytes),
                            cudaMemcpyHostToDevice, load.beside_step ? copy_stream_ : stream_),
            "cache load cudaMemcpyAsync");
        at += bytes;
        return absl::OkStatus();
      },
      Shares());
}

absl::Status CudaExecutor::SynchronizeStep() {
  if (DeviceCollectives* group = model_->options().tensor_parallel; group != nullptr) {
    // The step's collectives are on the stream: the group bounds the wait by its timeout.
    RETURN_IF_ERROR(group->Synchronize(stream_));
  } else {
    STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "step cudaStreamSynchronize");
  }
  return WaitForCopiesBeside();
}

absl::Status CudaExecutor::WaitForCopiesBeside() {
  if (!copies_beside_) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_stream_),
                              "offload copies cudaStreamSynchronize");
  copies_beside_ = false;
  return absl::OkStatus();
}

CacheShares CudaExecutor::Shares() const {
  TensorParallelGroup* tp = tensor_parallel_host_;
  return {tp != nullptr ? tp->rank() : 0, tp != nullptr ? tp->size() : 1,
          model_->context_parallel().size};
}

int64_t CudaExecutor::UnitBytes(CacheUnit unit, int32_t index) {
  CacheUnitSpans(layout_, unit, index, &spans_);
  return static_cast<int64_t>(SpanBytes(spans_));
}

void CudaExecutor::FinishCacheSaves(const StepPlan& plan, StepResult* result) {
  const char* staging = copy_staging_.as<char>();
  for (const PendingSave& save : pending_saves_) {
    std::memcpy(save.to, staging + save.staging_offset, static_cast<size_t>(save.bytes));
  }
  pending_saves_.clear();
  // Under tensor parallelism the lead gathers the followers' shares (engine/cache_copy.h).
  if (tensor_parallel_host_ != nullptr) {
    GatherSavedShares(*tensor_parallel_host_, Shares(), plan, result, &save_scratch_);
  }
}

absl::Status CudaExecutor::Run(const StepPlan& plan, bool lead, StepResult* result) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
  BuildStepLayout(plan, layout_, &step_, model_->context_parallel());
  RETURN_IF_ERROR(CopyCacheUnits(plan, result));
  RETURN_IF_ERROR(InitSlots(plan));

  // The forward: a graph replay (decode buckets) or eager launches.
  const int64_t vocab = model_->config().vocab_size;
  GraphKey key;
  DecodeGraph* graph = PadForGraph(&key) ? GraphFor(key) : nullptr;
  const int64_t logit_floats = step_.num_logit_rows * vocab;
  const int64_t offsets_ints = model_->expert_offsets_ints();
  const float* logits = nullptr;
  const int32_t* expert_offsets = nullptr;
  const int32_t* invalid_tokens = nullptr;
  DeviceStep step;  // the eager step (steps verifying drafts are never graphs: multi-token)
  step.host = &step_;
  if (graph != nullptr) {
    CHECK_EQ(step_.num_drafting, 0);
    RETURN_IF_ERROR(Upload(&graph->ints));
    STRATA_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph->exec, stream_), "cudaGraphLaunch");
    ++graph_replays_;
    logits = graph->logits;
    expert_offsets = graph->expert_offsets;
    invalid_tokens = graph->ints.as<int32_t>() + step_.ints.size();
  } else {
    RETURN_IF_ERROR(
        step_ints_.Reserve((static_cast<int64_t>(step_.ints.size()) + 1) * 4, "step index arrays"));
    RETURN_IF_ERROR(Upload(&step_ints_));
    ASSIGN_OR_RETURN(float* eager_logits, scratch_.Take<float>(logit_floats));
    ASSIGN_OR_RETURN(int32_t * eager_offsets, scratch_.Take<int32_t>(offsets_ints));
    ASSIGN_OR_RETURN(step.kda_drafts, ReserveKdaDrafts());
    step.ints = step_ints_.as<int32_t>();
    step.invalid_tokens = step_ints_.as<int32_t>() + step_.ints.size();
    const bool decode_only = step_.num_prefill() == 0 && step_.num_scored_rows == 0;
    const DeviceContext ctx{stream_, cublas_->get(), &scratch_, decode_only};
    RETURN_IF_ERROR(model_->Forward(step, caches_, ctx, eager_logits, eager_offsets));
    logits = eager_logits;
    expert_offsets = eager_offsets;
    invalid_tokens = step.invalid_tokens;
  }
  if (!lead) {  // a follower: the caches only, then the drafts the lead accepted
    RETURN_IF_ERROR(SaveEndCheckpoints(plan));
    RETURN_IF_ERROR(SynchronizeStep());
    FinishCacheSaves(plan, result);
    if (step_.num_drafting > 0) {
      num_sampled_by_plan_.assign(plan.sequences.size(), 0);
      tensor_parallel_host_->BroadcastFromLead(num_sampled_by_plan_.data(),
                                               static_cast<int64_t>(plan.sequences.size()) * 4);
    }
    RETURN_IF_ERROR(ReplayKdaDrafts(plan, step));
    return scratch_.Reset();
  }

  // Sampling on the device where it can be (then only token ids come back).
  const char* device_outputs = nullptr;
  int64_t device_outputs_bytes = 0;
  const bool device_sampling = PlanDeviceSampling(plan);
  if (device_sampling) {
    RETURN_IF_ERROR(
        SampleOnDevice(plan, const_cast<float*>(logits), &device_outputs, &device_outputs_bytes));
  }
  // Outputs back to the host: the invalid-id count, the expert offsets, the device-sampled
  // tokens, and the logits rows the host samples (all rows when no row is sampled on device).
  const int64_t sampled_bytes = device_sampling ? device_outputs_bytes : 0;
  const int64_t out_bytes = logit_floats * 4 + 4 + offsets_ints * 4 + sampled_bytes;
  RETURN_IF_ERROR(outputs_host_.Reserve(out_bytes, "step outputs (host)"));
  float* logits_host = outputs_host_.as<float>();
  int32_t* invalid_host = reinterpret_cast<int32_t*>(logits_host + logit_floats);
  int32_t* offsets_host = invalid_host + 1;
  char* sampled_host = reinterpret_cast<char*>(offsets_host + offsets_ints);
  auto copy = [this](void* dst, const void* src, int64_t bytes) -> absl::Status {
    if (bytes == 0) return absl::OkStatus();
    return kc::CudaStatus(
        cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_),
        "step outputs cudaMemcpyAsync");
  };
  RETURN_IF_ERROR(copy(invalid_host, invalid_tokens, 4));
  RETURN_IF_ERROR(copy(offsets_host, expert_offsets, offsets_ints * 4));
  if (device_sampling) {
    RETURN_IF_ERROR(copy(sampled_host, device_outputs, sampled_bytes));
    for (size_t i = 0; i < device_sampling_plan_.on_device.size(); ++i) {
      if (device_sampling_plan_.on_device[i]) continue;
      const int64_t row = step_.sampled_logit_row[i];
      RETURN_IF_ERROR(copy(logits_host + row * vocab, logits + row * vocab, vocab * 4));
    }
    // Scored prompt rows (the last ones): scored on the host.
    const int64_t first_scored = step_.num_sampled_rows();
    RETURN_IF_ERROR(copy(logits_host + first_scored * vocab, logits + first_scored * vocab,
                         step_.num_scored_rows * vocab * 4));
  } else {
    RETURN_IF_ERROR(copy(logits_host, logits, logit_floats * 4));
  }
  RETURN_IF_ERROR(SaveEndCheckpoints(plan));
  // Constraint masks (structured output) are built on the host while the device works.
  PrepareConstraints(plan, vocab, /*parallel=*/true);
  RETURN_IF_ERROR(SynchronizeStep());
  FinishCacheSaves(plan, result);
  // As Model::Forward on the CPU: callers validate token ids, an invalid one is a bug.
  CHECK_EQ(*invalid_host, 0) << "token ids outside [0, " << vocab << ") reached the CUDA forward";
  if (model_->options().expert_exchange != nullptr) {
    model_->options().expert_exchange->TakeExpertTokens(&result->expert_tokens);
  } else if (model_->num_moe_layers() > 0 && step_.num_rows > 0) {
    model_->CountExpertTokens(offsets_host, &result->expert_tokens);
  } else {  // no MoE, or no rows (a step of cache copies only: the forward wrote no offsets)
    result->expert_tokens.clear();
  }
  RETURN_IF_ERROR(Sample(plan, sampled_host, logits, result));
  if (tensor_parallel_host_ != nullptr && step_.num_drafting > 0) {  // the followers replay too
    tensor_parallel_host_->BroadcastFromLead(num_sampled_by_plan_.data(),
                                             static_cast<int64_t>(plan.sequences.size()) * 4);
  }
  RETURN_IF_ERROR(ReplayKdaDrafts(plan, step));
  result->scored.resize(step_.scored_plan_index.size());
  for (size_t j = 0; j < step_.scored_plan_index.size(); ++j) {
    ScoreTargets(plan.sequences[static_cast<size_t>(step_.scored_plan_index[j])],
                 logits_host + int64_t{step_.scored_logit_row[j]} * vocab, vocab,
                 &result->scored[j]);
  }
  return scratch_.Reset();
}

StepResult CudaExecutor::Execute(const StepPlan& plan) {
  StepResult result;
  ExecuteInto(plan, &result);
  return result;
}

// The checkpoints inside the step were copied by the KDA layers (CudaModel::KdaSavingPieces).
absl::Status CudaExecutor::SaveEndCheckpoints(const StepPlan& plan) {
  for (const ScheduledSequence& seq : plan.sequences) {
    if (seq.slot < 0 || layout_.num_kda_layers == 0 || seq.save_checkpoints.empty()) continue;
    const CheckpointSave& last = seq.save_checkpoints.back();
    if (last.num_tokens != static_cast<int64_t>(seq.token_ids.size())) continue;
    CHECK(last.checkpoint >= 0 && last.checkpoint < layout_.num_checkpoint_ids())
        << "checkpoint " << last.checkpoint << " of " << seq.seq_id;
    RETURN_IF_ERROR(
        CopyStateRow(layout_.SlotRow(seq.slot), layout_.CheckpointRow(last.checkpoint)));
  }
  return absl::OkStatus();
}

int64_t CudaExecutor::FollowStep() {
  CHECK(tensor_parallel_host_ != nullptr) << "FollowStep is for the other ranks of a group";
  std::optional<StepPlan> plan = ReceiveStepPlan(*tensor_parallel_host_, &plan_bytes_);
  if (!plan.has_value()) return -1;  // EndFollowers
  StepResult result;
  const absl::Status status = Run(*plan, /*lead=*/false, &result);
  CHECK(status.ok()) << "CUDA step " << plan->step_id << " failed: " << status.ToString();
  return plan->step_id;
}

void CudaExecutor::EndFollowers() {
  CHECK(tensor_parallel_host_ != nullptr) << "EndFollowers is for the lead rank of a group";
  EndStepPlans(*tensor_parallel_host_);
}

void CudaExecutor::ExecuteInto(const StepPlan& plan, StepResult* result) {
  const auto start = std::chrono::steady_clock::now();
  result->step_id = plan.step_id;
  if (tensor_parallel_host_ != nullptr) SendStepPlan(*tensor_parallel_host_, plan, &plan_bytes_);
  const absl::Status status = Run(plan, /*lead=*/true, result);
  CHECK(status.ok()) << "CUDA step " << plan.step_id << " failed: " << status.ToString();
  result->forward_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

absl::StatusOr<DeviceCeilings> CudaExecutor::MeasureCeilings() {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
#if defined(STRATA_CUDA_EMU)
  // On the CPU emulator the ceilings only need to be finite: small operands, few repetitions.
  constexpr int64_t kCopyBytes = int64_t{16} << 20;
  constexpr int kGemmN = 256, kReps = 2;
#else
  constexpr int64_t kCopyBytes = int64_t{1} << 30;
  constexpr int kGemmN = 8192, kReps = 10;
#endif
  DeviceCeilings c;
  ASSIGN_OR_RETURN(c.copy_gb_s, kc::MeasureCopyBandwidthGBps(kCopyBytes, kReps, stream_));
  ASSIGN_OR_RETURN(c.bf16_tflop_s,
                   kc::MeasureBf16GemmTflops(cublas_->get(), kGemmN, kReps, stream_));
  return c;
}

absl::StatusOr<std::vector<float>> CudaExecutor::StateRow(int kda_layer, int32_t row) const {
  const int64_t bytes = layout_.kda_state_bytes_per_layer;
  std::vector<float> out(static_cast<size_t>(bytes / 4));
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(out.data(), arena() + layout_.KdaStateOffset(kda_layer) + row * bytes,
                 static_cast<size_t>(bytes), cudaMemcpyDeviceToHost),
      "state row cudaMemcpy");
  return out;
}

}  // namespace strata::engine::cuda
