#include "engine/model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "core/status.h"
#include "engine/mixers.h"
#include "engine/weight_copy.h"
#include "engine/weight_quantize.h"
#include "kernels/cpu/attn_res.h"
#include "kernels/cpu/rms_norm.h"
#include "kvcache/memory_planner.h"

namespace strata::engine {
namespace {

// Block AttnRes sources of the current forward (docs/model.md §1, §5): completed blocks plus the
// running partial sum p, all [num_rows, d], in one workspace array of slots: slot i < num_blocks
// is block i, slot num_blocks is p (pushing a block just advances the count: nothing is copied).
class AttnResSources {
 public:
  AttnResSources(Workspace& ws, int max_sources, int64_t num_rows, int64_t dim)
      : max_sources_(max_sources),
        slot_floats_(num_rows * dim),
        rows_(num_rows),
        dim_(dim),
        storage_(ws.Floats(max_sources * num_rows * dim)),
        pointers_(ws.Array<const float*>(max_sources)) {
    CHECK_LE(max_sources, kernels::cpu::kMaxAttnResSources);
  }

  // h = Mix(blocks + [p], site)
  void Mix(const AttnResWeights& site, float eps, float* h) const {
    const int n = num_blocks_ + 1;
    for (int i = 0; i < n; ++i) pointers_[i] = slot(i);
    kernels::cpu::AttnResMix(absl::MakeConstSpan(pointers_, n), rows_, dim_, site.norm.data(),
                             site.proj.data(), eps, h);
  }
  // blocks.append(p); p = None (the next Add starts a new partial sum)
  void PushBlock() {
    ++num_blocks_;
    CHECK_LT(num_blocks_, max_sources_);
    partial_empty_ = true;
  }
  // p = a if p is None else p + a
  void Add(const float* a) {
    float* p = slot(num_blocks_);
    if (partial_empty_) {
      std::memcpy(p, a, static_cast<size_t>(slot_floats_) * sizeof(float));
      partial_empty_ = false;
      return;
    }
#pragma omp simd
    for (int64_t i = 0; i < slot_floats_; ++i) p[i] += a[i];
  }

 private:
  float* slot(int i) const { return storage_ + i * slot_floats_; }

  int max_sources_;
  int64_t slot_floats_, rows_, dim_;
  float* storage_;
  const float** pointers_;
  int num_blocks_ = 0;
  bool partial_empty_ = true;
};

WeightStats CountWeights(const ModelConfig& cfg, const ModelWeights& w) {
  WeightStats stats;
  auto params = [](const Linear& x) { return x.out_features * x.in_features; };
  ForEachLinear(w, [&](const Linear& x, LinearRole role) {
    if (x.empty()) return;
    switch (role) {
      case LinearRole::kEmbedding:  // one row read per token: not "active"
        stats.total_bytes += x.num_bytes();
        return;
      case LinearRole::kLmHead:  // tied: the embedding's bytes, counted once (unless quantised)
        if (!cfg.tie_word_embeddings || x.data != w.embed.data) stats.total_bytes += x.num_bytes();
        stats.active_params_per_token += params(x);
        return;
      case LinearRole::kRoutedExpert:
        stats.total_bytes += x.num_bytes();
        return;
      case LinearRole::kDense:
        stats.total_bytes += x.num_bytes();
        stats.active_params_per_token += params(x);
        return;
    }
  });
  for (const LayerWeights& l : w.layers) {
    if (l.moe && !l.moe->experts.empty()) {
      // Expert parallelism with --quantization: only this process's experts are quantised, and
      // those are the ones it reads; the smallest expert is their size.
      int64_t expert_bytes = std::numeric_limits<int64_t>::max(), expert_params = 0;
      for (const ExpertWeights& e : l.moe->experts) {
        int64_t bytes = 0;
        expert_params = 0;
        for (const Linear* x : {&e.w1, &e.w3, &e.w2}) {
          bytes += x->num_bytes();
          expert_params += params(*x);
        }
        expert_bytes = std::min(expert_bytes, bytes);
      }
      stats.routed_expert_bytes_per_layer_expert = expert_bytes;
      stats.active_params_per_token += expert_params * cfg.moe.num_experts_per_token;
    }
  }
  return stats;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// h[row] = embedding of each new token, rows in batch order (or the row a sequence's
// `embeddings` give). With tensor parallelism the rows of this rank's vocabulary share
// (`vocab`), zeros for the others (summed over the group next).
void EmbedRows(const ModelConfig& cfg, const ModelWeights& weights, ForwardBatch batch,
               absl::Span<const RowSpan> rows, ShardRange vocab, float* h) {
  const int64_t d = cfg.hidden_size;
  for (size_t s = 0; s < batch.size(); ++s) {
    for (int64_t i = 0; i < batch[s].num_new_tokens; ++i) {
      const int64_t id = batch[s].token_ids[i];
      CHECK(id >= 0 && id < cfg.vocab_size) << "token id " << id;
      float* row = h + (rows[s].offset + i) * d;
      if (id >= vocab.begin && id < vocab.end) {
        EmbeddingRow(weights.embed, id - vocab.begin, row);
      } else {
        std::fill(row, row + d, 0.0f);
      }
    }
    // Given rows (images) replace their tokens' embeddings; under tensor parallelism the group
    // sums the rows, so only the rank holding the vocabulary's start writes them.
    for (const EmbeddingRows& e : batch[s].embeddings) {
      CHECK(e.first >= 0 && e.num_rows >= 0 && e.first + e.num_rows <= batch[s].num_new_tokens)
          << "embedding rows [" << e.first << ", +" << e.num_rows << ") of a sequence of "
          << batch[s].num_new_tokens << " new tokens";
      float* row = h + (rows[s].offset + e.first) * d;
      if (vocab.begin == 0) {
        CHECK(e.rows != nullptr) << "image rows missing on the rank that writes them";
        std::copy(e.rows, e.rows + e.num_rows * d, row);
      } else {
        std::fill(row, row + e.num_rows * d, 0.0f);
      }
    }
  }
}

// logits[r, vocab] from every rank's [r, stride] share (the gathered `shares`, rank-major).
void AssembleVocabShares(const float* shares, int64_t num_rows, int64_t vocab, int size,
                         float* logits) {
  const int64_t stride = ShardStride(vocab, size);
  for (int rank = 0; rank < size; ++rank) {
    const ShardRange range = RangeOf(vocab, {rank, size});
    const float* share = shares + rank * num_rows * stride;
    for (int64_t r = 0; r < num_rows; ++r) {
      std::copy(share + r * stride, share + r * stride + range.size(),
                logits + r * vocab + range.begin);
    }
  }
}

// Final norm of the rows whose logits are wanted (into workspace rows), then the LM head.
void FinalNormAndLmHead(const ModelConfig& cfg, const ModelWeights& weights, ForwardBatch batch,
                        absl::Span<const RowSpan> rows, const float* h, TensorParallelGroup* tp,
                        Workspace& ws, std::vector<float>* logits) {
  const int64_t d = cfg.hidden_size;
  const int64_t num_logit_rows = NumLogitRows(batch);
  float* selected = ws.Floats(num_logit_rows * d);
  int64_t r = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t t = rows[s].count;
    if (t == 0 || batch[s].logits == LogitsMode::kNone) continue;
    const int64_t first = batch[s].logits == LogitsMode::kAll
                              ? 0
                              : t - std::clamp<int64_t>(batch[s].num_last_logits, 1, t);
    kernels::cpu::RmsNorm(h + (rows[s].offset + first) * d, t - first, d, weights.final_norm.data(),
                          cfg.rms_norm_eps, selected + r * d);
    r += t - first;
  }
  CHECK_EQ(r, num_logit_rows);
  logits->resize(static_cast<size_t>(num_logit_rows * cfg.vocab_size));
  if (num_logit_rows == 0) return;
  if (tp == nullptr) {
    LinearForward(weights.lm_head, selected, num_logit_rows, logits->data());
    return;
  }
  // Vocab-parallel head: this rank's [rows, stride] share (columns past its range unused), the
  // shares gathered, then laid out as full rows.
  const int64_t stride = ShardStride(cfg.vocab_size, tp->size());
  float* share = ws.Floats(num_logit_rows * stride);
  float* shares = ws.Floats(tp->size() * num_logit_rows * stride);
  if (weights.lm_head.out_features == stride) {
    LinearForward(weights.lm_head, selected, num_logit_rows, share);
  } else {
    const int64_t n = weights.lm_head.out_features;
    float* narrow = ws.Floats(num_logit_rows * std::max<int64_t>(n, 1));
    if (n > 0) LinearForward(weights.lm_head, selected, num_logit_rows, narrow);
    std::fill(share, share + num_logit_rows * stride, 0.0f);
    for (int64_t row = 0; row < num_logit_rows; ++row) {
      std::copy(narrow + row * n, narrow + (row + 1) * n, share + row * stride);
    }
  }
  tp->AllGather(share, num_logit_rows * stride, shares);
  AssembleVocabShares(shares, num_logit_rows, cfg.vocab_size, tp->size(), logits->data());
}

}  // namespace

int64_t NumLogitRows(ForwardBatch batch) {
  int64_t rows = 0;
  for (const ForwardSequence& s : batch) {
    if (s.logits == LogitsMode::kLast && s.num_new_tokens > 0) {
      rows += std::clamp<int64_t>(s.num_last_logits, 1, s.num_new_tokens);
    }
    if (s.logits == LogitsMode::kAll) rows += s.num_new_tokens;
  }
  return rows;
}

CacheGeometry GetCacheGeometry(const ModelConfig& cfg) {
  CacheGeometry g;
  g.num_kda_layers = cfg.NumKdaLayers();
  g.num_mla_layers = cfg.NumMlaLayers();
  g.kda_state_floats = cfg.kda.state_floats();
  g.kda_conv_floats = cfg.kda.conv_floats();
  g.latent_dim = cfg.mla.latent_dim();
  g.rope_dim = cfg.mla.qk_rope_head_dim;
  return g;
}

namespace {

// engine/weight_copy.h when options ask for it and the copy fits; returns the bytes copied.
int64_t CopyWeightsIfTheyFit(const ModelLoadOptions& options, ModelWeights& weights,
                             AlignedBuffer* arena) {
  if (!options.copy_weights) return 0;
  std::optional<int64_t> limit;
  if (options.max_copy_bytes >= 0) {
    limit = options.max_copy_bytes;
  } else if (std::optional<int64_t> available = AvailableHostMemoryBytes()) {
    limit = *available - options.reserve_bytes - ModelLoadOptions::kCopySlackBytes;
  }
  const WeightCopy copy = CopyMappedLinears(weights, limit, arena, options.routed_experts);
  if (copy.copied_bytes < copy.needed_bytes) {
    LOG_WARN("engine",
             "weights stay memory-mapped (read from the page cache, slower on the CPU): a copy "
             "on huge pages needs {} and {} of memory is available for it",
             kvcache::FormatBytes(copy.needed_bytes),
             kvcache::FormatBytes(std::max<int64_t>(0, limit.value_or(0))));
  }
  return copy.copied_bytes;
}

}  // namespace

absl::StatusOr<WeightQuantization> ParseWeightQuantization(std::string_view flag) {
  if (flag.empty() || flag == "none") return WeightQuantization::kNone;
  if (flag == "mxfp4") return WeightQuantization::kMxfp4;
  if (flag == "int8") return WeightQuantization::kInt8;
  if (flag == "mxfp4,int8" || flag == "int8,mxfp4") return WeightQuantization::kMxfp4Int8;
  if (flag == "compressed-tensors") return WeightQuantization::kCheckpoint;
  return absl::InvalidArgumentError(absl::StrCat(
      "--quantization \"", std::string(flag),
      "\" is not supported: mxfp4 (routed experts quantised to MXFP4 at load, K3's "
      "release format), int8 (every other projection and the LM head to int8 groups of 32 at "
      "load), mxfp4,int8 (both), compressed-tensors (the checkpoint's own MXFP4 experts, as K3's "
      "release holds them; also what happens without the flag) or none"));
}

bool QuantizesExpertsToMxfp4(WeightQuantization q) {
  return q == WeightQuantization::kMxfp4 || q == WeightQuantization::kMxfp4Int8;
}

bool QuantizesToInt8(WeightQuantization q) {
  return q == WeightQuantization::kInt8 || q == WeightQuantization::kMxfp4Int8;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir,
                                                   const ModelLoadOptions& options) {
  std::unique_ptr<Model> model(new Model());
  ASSIGN_OR_RETURN(model->checkpoint_, Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(model->weights_, LoadModelWeights(*model->checkpoint_));
  model->config_ = model->checkpoint_->config();
  if (const std::optional<VisionConfig>& vision = model->config_.vision) {
    ASSIGN_OR_RETURN(VisionWeights vision_weights, LoadVisionWeights(*model->checkpoint_, *vision));
    model->vision_ = std::make_unique<VisionEncoder>(*vision, std::move(vision_weights));
  }
  std::vector<bool> routed_experts = options.routed_experts;
  if (const TensorParallelShard shard = options.tensor_parallel; shard.enabled()) {
    CHECK(shard.rank >= 0 && shard.rank < shard.size);
    RETURN_IF_ERROR(ShardModelWeights(model->config_, shard, &model->weights_));
    model->config_ = ShardConfig(model->config_, shard.size);
    model->tensor_parallel_ = shard;
    if (routed_experts.empty() && model->config_.moe.num_experts > 0) {
      routed_experts = ShardRoutedExperts(model->config_.moe.num_experts, shard);
    }
    model->tp_routed_experts_ = routed_experts;
  }
  if (const int c = options.decode_context_parallel_size; c != 1) {
    if (c < 1 || options.tensor_parallel.size % c != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--decode-context-parallel-size ", c, " must divide --tensor-parallel-size ",
          options.tensor_parallel.size,
          " (a context-parallel group is made of ranks of one tensor-parallel group)"));
    }
    // Ranks g·C … g·C + C − 1 split each sequence's positions; rank r holds p ≡ r (mod C).
    model->context_parallel_ = {options.tensor_parallel.rank % c, c};
  }
  if (options.quantization == WeightQuantization::kCheckpoint &&
      !model->config().moe.mxfp4_experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--quantization compressed-tensors: ", dir,
        "/config.json has no compressed-tensors quantization_config (its weights are stored "
        "unquantised); --quantization mxfp4 quantises its routed experts at load, int8 the "
        "other projections"));
  }
  if (QuantizesExpertsToMxfp4(options.quantization)) {
    const auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(const QuantizationResult q,
                     QuantizeRoutedExperts(model->config(), &model->weights_, routed_experts));
    if (q.matrices == 0) {
      LOG_INFO("engine", "--quantization mxfp4: the routed experts are MXFP4 already");
    } else {
      LOG_INFO("engine", "--quantization mxfp4: {} routed-expert weights, {} -> {}, in {:.1f} s",
               q.matrices, kvcache::FormatBytes(q.source_bytes),
               kvcache::FormatBytes(q.quantized_bytes), SecondsSince(start));
    }
  }
  if (QuantizesToInt8(options.quantization)) {
    const auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(const QuantizationResult q,
                     QuantizeLinearsInt8(*model->checkpoint_, &model->weights_, routed_experts));
    LOG_INFO("engine",
             "--quantization int8: {} weights, {} -> {}, in {:.1f} s; {} kept as stored (input "
             "width not a multiple of 32)",
             q.matrices, kvcache::FormatBytes(q.source_bytes),
             kvcache::FormatBytes(q.quantized_bytes), SecondsSince(start), q.kept_odd_width);
  }
  ModelLoadOptions copy_options = options;
  copy_options.routed_experts = routed_experts;
  const int64_t copied_bytes =
      CopyWeightsIfTheyFit(copy_options, model->weights_, &model->weight_copy_);
  const ModelConfig& cfg = model->config();
  model->geometry_ = GetCacheGeometry(cfg);
  model->weight_stats_ = CountWeights(cfg, model->weights_);
  int kda = 0, mla = 0, moe = 0;
  for (int l = 0; l < cfg.num_layers; ++l) {
    model->mixer_index_.push_back(cfg.IsKda(l) ? kda++ : mla++);
    model->moe_index_.push_back(model->weights_.layers[static_cast<size_t>(l)].moe ? moe++ : -1);
  }
  LOG_INFO("engine", "loaded {}{}: {} layers ({} KDA, {} MLA), hidden {}, vocab {}; weights {}",
           dir,
           model->tensor_parallel_.enabled()
               ? absl::StrCat(" (tensor-parallel rank ", model->tensor_parallel_.rank, " of ",
                              model->tensor_parallel_.size, ")")
               : std::string(),
           cfg.num_layers, kda, mla, cfg.hidden_size, cfg.vocab_size,
           copied_bytes > 0 ? kvcache::FormatBytes(copied_bytes) + " copied to huge pages"
                            : std::string("memory-mapped"));
  return model;
}

void Model::Forward(ForwardBatch batch, std::vector<float>* logits,
                    std::vector<int64_t>* expert_tokens) const {
  ForwardContext context;
  context.expert_tokens = expert_tokens;
  Forward(batch, logits, context);
}

void Model::Forward(ForwardBatch batch, std::vector<float>* logits,
                    const ForwardContext& context) const {
  const ModelConfig& cfg = config();
  Workspace& ws = context.workspace != nullptr ? *context.workspace : *workspace_;
  WorkspaceScope scope(ws);
  const int64_t d = cfg.hidden_size;
  const float eps = cfg.rms_norm_eps;
  RowSpan* row_array = ws.Array<RowSpan>(static_cast<int64_t>(batch.size()));
  int64_t num_rows = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    row_array[s] = {num_rows, batch[s].num_new_tokens};
    num_rows += batch[s].num_new_tokens;
  }
  const absl::Span<const RowSpan> rows(row_array, batch.size());
  float* h = ws.Floats(num_rows * d);
  float* normed = ws.Floats(num_rows * d);
  float* out = ws.Floats(num_rows * d);
  TensorParallelGroup* tp = context.tensor_parallel;
  CHECK(!tensor_parallel_.enabled() || (tp != nullptr && tp->rank() == tensor_parallel_.rank &&
                                        tp->size() == tensor_parallel_.size))
      << "a tensor-parallel shard needs its group in ForwardContext::tensor_parallel";
  if (!tensor_parallel_.enabled()) tp = nullptr;
  // Sums this rank's partial rows over the group (nothing without tensor parallelism).
  auto reduce = [&](float* x) {
    if (tp != nullptr && num_rows > 0) tp->AllReduceSum(x, num_rows * d);
  };
  EmbedRows(
      cfg, weights_, batch, rows,
      tp != nullptr ? RangeOf(cfg.vocab_size, tensor_parallel_) : ShardRange{0, cfg.vocab_size}, h);
  reduce(h);
  MoeTensorParallel moe_tp{tp, &tp_routed_experts_};
  TensorParallelGroup* cp_group =
      tp != nullptr && tp->context_parallel() != nullptr ? tp->context_parallel() : tp;
  CHECK(!context_parallel_.enabled() ||
        (cp_group != nullptr && cp_group->size() == context_parallel_.size &&
         cp_group->rank() == context_parallel_.rank))
      << "decode context parallelism over " << context_parallel_.size
      << " of the tensor-parallel ranks needs their own group (TensorParallelGroup::"
         "context_parallel)";
  const MlaContextParallel mla_cp{cp_group, context_parallel_};

  // Mixer and FFN of layer l on the normalised rows (normed) into out.
  auto run_mixer = [&](int l) {
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
    const int index = mixer_index_[static_cast<size_t>(l)];
    if (lw.kda) {
      KdaMixerForward(cfg, *lw.kda, normed, num_rows, batch, rows, index, context.kda_drafts, out,
                      ws);
    } else {
      MlaMixerForward(cfg, *lw.mla, normed, num_rows, batch, rows, index, out, ws,
                      context_parallel_.enabled() ? &mla_cp : nullptr);
    }
    reduce(out);
  };
  auto run_ffn = [&](int l) {
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
    if (lw.moe) {
      std::vector<int64_t>* expert_tokens = context.expert_tokens;
      if (expert_tokens != nullptr) expert_tokens->resize(cfg.moe.num_experts, 0);
      MoeForward(cfg, *lw.moe, moe_index_[static_cast<size_t>(l)], normed, num_rows, out,
                 expert_tokens != nullptr ? expert_tokens->data() : nullptr, context.exchange, ws,
                 tp != nullptr ? &moe_tp : nullptr);
    } else {
      MlpForward(cfg, *lw.dense, normed, num_rows, out, ws);
    }
    reduce(out);
  };
  auto norm = [&](const float* x, const std::vector<float>& weight) {
    kernels::cpu::RmsNorm(x, num_rows, d, weight.data(), eps, normed);
  };

  if (cfg.has_attn_res()) {
    const int block = cfg.attn_res_block_size;
    AttnResSources sources(ws, (cfg.num_layers + block - 1) / block + 1, num_rows, d);
    sources.Add(h);  // p = x0
    for (int l = 0; l < cfg.num_layers; ++l) {
      const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
      sources.Mix(lw.attn_res, eps, h);
      if (l % block == 0) sources.PushBlock();
      norm(h, lw.input_norm);
      run_mixer(l);
      sources.Add(out);
      sources.Mix(lw.mlp_res, eps, h);
      norm(h, lw.post_norm);
      run_ffn(l);
      sources.Add(out);
    }
    sources.Mix(weights_.output_res, eps, h);
  } else {
    // h += out fused with the next norm: normed = RMSNorm(h).
    if (cfg.num_layers > 0) norm(h, weights_.layers[0].input_norm);
    for (int l = 0; l < cfg.num_layers; ++l) {
      const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
      run_mixer(l);
      kernels::cpu::AddRmsNorm(h, out, num_rows, d, lw.post_norm.data(), eps, normed);
      run_ffn(l);
      if (l + 1 < cfg.num_layers) {
        const LayerWeights& next = weights_.layers[static_cast<size_t>(l) + 1];
        kernels::cpu::AddRmsNorm(h, out, num_rows, d, next.input_norm.data(), eps, normed);
      } else {
#pragma omp simd
        for (int64_t i = 0; i < num_rows * d; ++i) h[i] += out[i];
      }
    }
  }
  FinalNormAndLmHead(cfg, weights_, batch, rows, h, tp, ws, logits);
}

void Model::ReplayKdaDrafts(const KdaDraftRows& drafts, absl::Span<const KdaReplay> sequences,
                            Workspace* workspace) const {
  if (sequences.empty()) return;
  Workspace& ws = workspace != nullptr ? *workspace : *workspace_;
  const ModelConfig& cfg = config();
  for (int l = 0; l < cfg.num_layers; ++l) {
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
    if (!lw.kda) continue;
    KdaReplayLayer(cfg, *lw.kda, drafts, sequences, mixer_index_[static_cast<size_t>(l)], ws);
  }
}

SequenceCache::SequenceCache(const CacheGeometry& geometry, int64_t max_tokens, int block_size,
                             LatentDType latent_dtype)
    : max_tokens_(max_tokens) {
  CHECK_GT(block_size, 0);
  const int64_t num_blocks = (max_tokens + block_size - 1) / block_size;
  for (int j = 0; j < geometry.num_kda_layers; ++j) {
    buffers_.emplace_back(static_cast<size_t>(geometry.kda_state_floats) * 4);
    view_.kda_state.push_back(buffers_.back().as<float>());
    buffers_.emplace_back(static_cast<size_t>(geometry.kda_conv_floats) * 4);
    view_.kda_conv.push_back(buffers_.back().as<float>());
  }
  for (int j = 0; j < geometry.num_mla_layers; ++j) {
    buffers_.emplace_back(static_cast<size_t>(
        num_blocks * block_size *
        LatentBytesPerToken(latent_dtype, geometry.latent_dim, geometry.rope_dim)));
    view_.mla_pages.push_back(buffers_.back().as<std::byte>());
  }
  for (int64_t b = 0; b < num_blocks; ++b) block_table_.push_back(static_cast<int32_t>(b));
  view_.block_table = block_table_.data();
  view_.block_size = block_size;
  view_.latent_dtype = latent_dtype;
  view_.rope_dim = geometry.rope_dim;
}

}  // namespace strata::engine
