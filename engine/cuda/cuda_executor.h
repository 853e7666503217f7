// The CUDA executor (`strata serve --device cuda`, issue #10): runs a StepPlan on one GPU with
// the same contract as CpuExecutor (engine/executor.h) — slot starts, one forward over the
// ragged batch, sampling, KDA checkpoints — on caches in device memory.
//
// Memory: the weights are uploaded once at Create; the cache arena (latent pages in bf16 or fp8,
// KDA state and conv rows in f32, laid out by kvcache::CacheLayout from PlanMemory(
// CudaCacheSpecFor(cfg))) is one device allocation made by AllocateCaches; the forward's
// scratch is a device arena that grows to the largest step and then stays (device_arena.h).
// Per step: one host→device copy of the step's index arrays; the device sampler picks every
// sampled token (with the uniform the sequence's own sampler draws, its bias and its penalty
// history: the same token the host would pick) and computes the requested log-probabilities
// (up to kSamplingChunk per token), so only ids and log-probabilities come back; a row whose
// draw lies deeper than the device's one ranked chunk comes back raw and is sampled on the
// host with the same uniform, as are rows asking for more log-probabilities; the expert offsets
// of every MoE layer come back in one small copy.
//
// Decode steps (every sequence one token) run as CUDA graphs when the model's forward never
// synchronises with the host (CudaModelOptions::own_grouped_gemm): the step is padded to a
// batch bucket (1, 2, 4, …, 256 sequences) and a block-table width bucket (powers of two), the
// first step of a bucket is captured (its own scratch, inputs and outputs, whose addresses the
// graph keeps), later steps of the bucket copy their arrays into the graph's input buffer and
// replay it. A capture that fails is logged once and the bucket runs eagerly. Under tensor and
// decode context parallelism every rank pads, captures and replays the same way: the group's
// collectives are captured with the kernels (NCCL kernels on GPUs, host nodes on the emulator).
//
// KDA checkpoints inside a sequence's new tokens: its KDA kernels run piece by piece, split at
// the saves, each layer copying its state and conv rows out between pieces (as the CPU
// executor); a save at the end is copied after the forward.
//
// Device failures (a kernel launch error, device memory exhausted by the step scratch) are not
// recoverable mid-step: the caches may be half-updated. Execute stops the process with the
// failing kernel's message (CHECK); a supervisor restarts it.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cache_copy.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/device_arena.h"
#include "engine/cuda/step_layout.h"
#include "engine/executor.h"
#include "engine/step_sampling.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kda_chunk.h"
#include "kvcache/cache_layout.h"
#include "kvcache/memory_planner.h"

namespace strata::engine::cuda {

// Prompt pieces that end at multiples of this many tokens from the sequence's start give the
// whole prompt's result bit for bit (the chunked KDA prefill counts its 16-token chunks from a
// piece's start; the other prompt kernels do not depend on the split). The scheduler of a CUDA
// engine cuts prompts there (SchedulerConfig::prefill_chunk_alignment). Not so with the absorbed
// MLA prefill (CudaModelOptions::mha_prefill = false): its split-K count follows the batch.
inline constexpr int kPromptChunkAlignment = kernels::cuda::kKdaPrefillChunk;

// What the caches of `cfg` need on the device: bf16 (or fp8) latent rows, f32 KDA state and conv
// rows.
kvcache::ModelCacheSpec CudaCacheSpecFor(const ModelConfig& cfg,
                                         LatentDType latent_dtype = LatentDType::kBF16);

// The device's ceilings measured on the executor's stream (kernels/cuda/ceilings.h).
struct DeviceCeilings {
  double copy_gb_s = 0.0;     // 1 GiB device-to-device copy, bytes read + written
  double bf16_tflop_s = 0.0;  // cuBLAS bf16 GEMM 8192³
};

struct CudaExecutorOptions {
  int device = 0;  // CUDA device index
  CudaModelOptions model;
  bool cuda_graphs = true;  // decode steps as CUDA graphs (when the forward allows it)
  // Tokens picked on the device (kernels/cuda/sampling.h: the same rules, the sampler's own
  // uniform, bias and penalty history; log-probabilities by RowLogprobs): only ids and
  // log-probabilities come back instead of vocab-sized logits rows — except rows whose cut or
  // draw lies past the best 1024 tokens (flat full-vocabulary draws) or that ask for more than
  // 1024 log-probabilities, whose rows come back to the host.
  bool device_sampling = true;
  // Tensor parallelism (model.tensor_parallel set: the model is one rank's shard): the group's
  // host-memory side, which carries the lead's plans and the drafts it accepted (model.
  // tensor_parallel is its device-memory side: NCCL on GPUs; on the emulator the same group).
  // The lead (rank 0) executes plans and samples; the other ranks call FollowStep in the same
  // order and never sample. Decode steps are CUDA graphs on every rank (the collectives are on
  // the stream), unless an expert exchange is in the forward.
  TensorParallelGroup* tensor_parallel_host = nullptr;
};

class CudaExecutor : public StepExecutor, public StepFollower {
 public:
  // Uploads the weights of `model` (which must outlive the executor) to the current device.
  // Errors: no device, a model shape the kernels do not take (CudaModel::CheckSupported), device
  // memory exhausted.
  static absl::StatusOr<std::unique_ptr<CudaExecutor>> Create(
      const Model& model, const CudaExecutorOptions& options = {});
  ~CudaExecutor() override;

  // A cache budget when the user gave none: `fraction` of the device memory still free after
  // the weights, less a reserve for the forward's scratch and cuBLAS.
  absl::StatusOr<int64_t> DefaultCacheBudgetBytes(double fraction) const;
  // vLLM's --gpu-memory-utilization: the caches get what keeps this process (and whatever else
  // already uses the device) within `utilization` of the device's total memory, less the
  // scratch reserve. ResourceExhausted naming the numbers when nothing is left.
  absl::StatusOr<int64_t> CacheBudgetForUtilization(double utilization) const;
  // Allocates (and zeroes) the cache arena. `layout` must come from
  // PlanMemory(CudaCacheSpecFor(cfg), ...) with block_size 64 (the MLA kernels' page).
  absl::Status AllocateCaches(const kvcache::CacheLayout& layout);

  StepResult Execute(const StepPlan& plan) override;
  // Tensor parallelism, on the ranks other than the lead (CudaExecutorOptions::
  // tensor_parallel_host): runs the lead's next plan on this shard (engine/executor.h).
  int64_t FollowStep() override;
  // On the lead, for drivers without a step gate (`strata bench`): every follower's next
  // FollowStep returns −1.
  void EndFollowers();
  void ExecuteInto(const StepPlan& plan, StepResult* result) override;

  const kvcache::CacheLayout& layout() const { return layout_; }
  // Host copy of one KDA layer's state row (tests compare slots and checkpoints).
  absl::StatusOr<std::vector<float>> StateRow(int kda_layer, int32_t row) const;
  int64_t weight_bytes() const { return model_->weight_bytes(); }
  // Graphs captured so far and steps that replayed one (tests, logs).
  int num_graphs() const { return static_cast<int>(graphs_.size()); }
  int64_t graph_replays() const { return graph_replays_; }
  // Nodes (kernels, copies, memsets) one replay of the largest-batch decode graph runs; 0
  // before any capture. At small batches a decode step costs about that many kernel latencies.
  size_t decode_graph_nodes() const {
    return graphs_.empty() ? 0 : graphs_.rbegin()->second->num_nodes;
  }
  // Device-sampled rows whose draw lay beyond the ranks the device sampler looks at (one chunk
  // of kernels::cuda::kSamplingChunk) and were sampled here with the same uniform.
  int64_t handed_back_rows() const { return handed_back_rows_; }
  absl::StatusOr<DeviceCeilings> MeasureCeilings();

 private:
  // A captured decode step of one (batch, table width) bucket with everything it addresses.
  struct DecodeGraph {
    DecodeGraph() : scratch(int64_t{1} << 20) {}
    ~DecodeGraph();
    DeviceArena scratch;               // never reset: the graph keeps its addresses
    kernels::cuda::DeviceBuffer ints;  // the step's arrays + the invalid-id counter
    float* logits = nullptr;
    int32_t* expert_offsets = nullptr;
    cudaGraphExec_t exec = nullptr;
    size_t num_nodes = 0;  // kernels and copies one replay runs
  };
  using GraphKey = std::pair<int32_t, int32_t>;  // (batch bucket, table width)

  CudaExecutor() = default;
  // `lead` false: a tensor-parallel follower (the forward and the caches only; no sampling).
  absl::Status Run(const StepPlan& plan, bool lead, StepResult* result);
  // KDA checkpoints at the end of a sequence's new tokens (stream-ordered after the forward).
  absl::Status SaveEndCheckpoints(const StepPlan& plan);
  // Whether this step replays a graph; pads step_ to its bucket when it does.
  bool PadForGraph(GraphKey* key);
  // The bucket's graph, captured from step_ on first use; null when capture failed.
  DecodeGraph* GraphFor(const GraphKey& key);
  absl::StatusOr<std::unique_ptr<DecodeGraph>> Capture();
  absl::Status Upload(kernels::cuda::DeviceBuffer* ints);
  absl::Status InitSlots(const StepPlan& plan);
  // Before InitSlots: the plan's cache saves into result->saved, then its loads (step.h); the
  // loads beside the step go on copy_stream_, after the saves.
  absl::Status CopyCacheUnits(const StepPlan& plan, StepResult* result);
  // The step's synchronisation: its stream, then the loads beside it.
  absl::Status SynchronizeStep();
  absl::Status WaitForCopiesBeside();
  // After the step's synchronisation: the saves from staging into result->saved, then (tensor
  // parallelism) the lead gathers every rank's share.
  void FinishCacheSaves(const StepPlan& plan, StepResult* result);
  int64_t UnitBytes(CacheUnit unit, int32_t index);  // bytes of a unit on this rank
  CacheShares Shares() const;  // this rank's share of the offload units (engine/cache_copy.h)
  absl::Status CopyStateRow(int32_t from_row, int32_t to_row);
  bool PlanDeviceSampling(const StepPlan& plan);
  absl::Status SampleOnDevice(const StepPlan& plan, float* logits, const char** outputs,
                              int64_t* outputs_bytes);
  // The step's tokens: device-picked ones (and their log-probabilities) from the host copy of
  // the device sampler's outputs, the others sampled here from the host copy of their logits
  // rows; rows the device handed back copy their raw row (device) first and are sampled here
  // with the uniform the device was given.
  absl::Status Sample(const StepPlan& plan, const char* device_outputs, const float* logits,
                      StepResult* result);
  // Device memory for the step's KDA draft rows (from scratch_), when it verifies drafts.
  absl::StatusOr<DeviceKdaDrafts> ReserveKdaDrafts();
  // After sampling: the kept tokens of the sequences that verified drafts into their KDA
  // caches (CudaModel::ReplayKdaDrafts), then a synchronisation (the replay reads scratch_).
  absl::Status ReplayKdaDrafts(const StepPlan& plan, const DeviceStep& step);
  char* arena() const { return caches_arena_.as<char>(); }

  int device_ = 0;
  std::unique_ptr<CudaModel> model_;
  std::optional<kernels::cuda::CublasHandle> cublas_;
  cudaStream_t stream_ = nullptr;
  // Tier loads no sequence of the step touches (CacheLoad::beside_step) run here, beside the
  // step's kernels, after saves_done_ (the step's saves: a unit saved and reloaded in one step).
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t saves_done_ = nullptr;
  bool copies_beside_ = false;  // copy_stream_ has work of this step
  kvcache::CacheLayout layout_;
  kernels::cuda::DeviceBuffer caches_arena_;
  std::vector<kvcache::CacheSpan> spans_;  // CopyCacheUnits scratch
  std::vector<float> save_scratch_;        // GatherSavedShares scratch
  // Offload copies' pinned staging (CopyCacheUnits) and the saves still in it.
  kernels::cuda::PinnedBuffer copy_staging_;
  struct PendingSave {
    char* to = nullptr;  // in StepResult::saved
    int64_t staging_offset = 0;
    int64_t bytes = 0;
  };
  std::vector<PendingSave> pending_saves_;
  DeviceCaches caches_;
  DeviceArena scratch_;
  StepLayout step_;
  kernels::cuda::DeviceBuffer step_ints_;     // the step's index arrays + the invalid-id counter
  kernels::cuda::PinnedBuffer step_staging_;  // host side of step_ints_
  // Host copies of the step's outputs: logits [R, vocab] f32, the invalid-id count, the expert
  // offsets table.
  kernels::cuda::PinnedBuffer outputs_host_;
  kernels::cuda::DeviceBuffer cublas_workspace_;  // set once: cuBLAS allocates nothing in graphs
  bool graphs_enabled_ = true;
  bool device_sampling_ = true;
  TensorParallelGroup* tensor_parallel_host_ = nullptr;
  std::vector<uint8_t> plan_bytes_;  // tensor parallelism: the encoded plan
  // This step's device sampling, by sampled token (StepLayout::sampled_plan_index order).
  struct DeviceSampling {
    std::vector<bool> on_device;       // picked on the device
    std::vector<int32_t> raw_copy;     // ≥ 0: its raw logits row in raw_logits_
    std::vector<int32_t> logprob_row;  // ≥ 0: its row of RowLogprobs' outputs
    int32_t num_raw = 0, num_logprob_rows = 0, max_top = 0;
  };
  // Byte offsets of RowLogprobs' outputs from the start of the device sampler's outputs.
  struct SampledOutputs {
    int64_t token_logprob = 0, top_ids = 0, top_logprobs = 0;
  };
  DeviceSampling device_sampling_plan_;
  SampledOutputs sampled_outputs_;
  std::vector<double> row_uniform_;           // by logits row: the uniform it was given
  std::vector<size_t> sampled_by_row_;        // by logits row: its sampled token (or the count)
  std::vector<int32_t> num_sampled_by_plan_;  // tokens Sample() returned per plan sequence
  int64_t handed_back_rows_ = 0;
  kernels::cuda::PinnedBuffer sampling_staging_;  // the device sampler's inputs (host)
  kernels::cuda::DeviceBuffer sampling_device_;   // its inputs and outputs
  kernels::cuda::DeviceBuffer raw_logits_;        // raw copies of rows it modifies
  std::map<GraphKey, std::unique_ptr<DecodeGraph>> graphs_;
  std::set<GraphKey> graph_failed_;
  int64_t graph_replays_ = 0;
  StepSampler sampler_;
};

}  // namespace strata::engine::cuda
