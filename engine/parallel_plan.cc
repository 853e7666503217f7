#include "engine/parallel_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/int8_quantize.h"
#include "core/status.h"
#include "kvcache/memory_planner.h"

namespace strata::engine {
namespace {

constexpr int64_t kBf16Bytes = 2;
constexpr int64_t kF32Bytes = 4;
constexpr int kGroupSize = 32;  // MXFP4 and int8 groups (core/mxfp4_quantize.h, int8_quantize.h)
static_assert(kGroupSize == kInt8GroupSize);

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

enum class Format { kBf16, kInt8, kMxfp4 };

// engine/model.h's QuantizesExpertsToMxfp4 / QuantizesToInt8, here so that the plan needs the
// enum only (not the engine's code).
bool Mxfp4Experts(WeightQuantization q) {
  return q == WeightQuantization::kMxfp4 || q == WeightQuantization::kMxfp4Int8;
}
bool Int8Projections(WeightQuantization q) {
  return q == WeightQuantization::kInt8 || q == WeightQuantization::kMxfp4Int8;
}

const char* FormatName(Format f) {
  switch (f) {
    case Format::kBf16:
      return "bf16";
    case Format::kInt8:
      return "int8";
    case Format::kMxfp4:
      return "mxfp4";
  }
  return "?";
}

// Bytes of a [rows, cols] Linear in `format`.
int64_t MatrixBytes(int64_t rows, int64_t cols, Format format) {
  switch (format) {
    case Format::kBf16:
      return rows * cols * kBf16Bytes;
    case Format::kInt8:
      return rows * cols + rows * CeilDiv(cols, kGroupSize) * kBf16Bytes;
    case Format::kMxfp4:
      return rows * CeilDiv(cols, 2) + rows * CeilDiv(cols, kGroupSize);
  }
  return 0;
}

// Formats of the Linears of one rank under the options.
class LinearFormats {
 public:
  LinearFormats(const ModelConfig& cfg, WeightQuantization q)
      : int8_(Int8Projections(q)),
        experts_(cfg.moe.mxfp4_experts || Mxfp4Experts(q) ? Format::kMxfp4
                 : int8_                                  ? Format::kInt8
                                                          : Format::kBf16) {}

  // A Linear `--quantization int8` may turn to int8; `full_cols` its unsharded input width.
  int64_t Projection(int64_t rows, int64_t cols, int64_t full_cols) const {
    return MatrixBytes(rows, cols, ProjectionFormat(full_cols));
  }
  Format ProjectionFormat(int64_t full_cols) const {
    return int8_ && full_cols % kGroupSize == 0 ? Format::kInt8 : Format::kBf16;
  }
  // Kept as stored: the embedding, routers, kv_b_proj.
  static int64_t Kept(int64_t rows, int64_t cols) { return MatrixBytes(rows, cols, Format::kBf16); }
  int64_t Expert(int64_t rows, int64_t cols) const { return MatrixBytes(rows, cols, experts_); }
  Format experts() const { return experts_; }
  bool int8() const { return int8_; }

 private:
  bool int8_;
  Format experts_;
};

absl::Status CheckOptions(const ModelConfig& cfg, const ParallelPlanOptions& o) {
  const int t = o.tensor_parallel_size, c = o.decode_context_parallel_size;
  const int d = o.data_parallel_size;
  if (t < 1 || c < 1 || d < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tensor-parallel-size ", t, ", --decode-context-parallel-size ", c,
                     " and --data-parallel-size ", d, " must each be at least 1"));
  }
  if (int64_t{t} * d > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size --tensor-parallel-size ", t, " x --data-parallel-size ", d, " = ",
                     int64_t{t} * d, " ranks is more than 1,048,576"));
  }
  if (cfg.NumKdaLayers() > 0 && cfg.kda.num_heads % t != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        cfg.kda.num_heads, " KDA heads cannot be split over --tensor-parallel-size ", t, " (",
        cfg.NumKdaLayers(), " KDA layers; the size must divide ", cfg.kda.num_heads, ")"));
  }
  if (cfg.NumMlaLayers() > 0 && cfg.mla.num_heads % t != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        cfg.mla.num_heads, " MLA heads cannot be split over --tensor-parallel-size ", t, " (",
        cfg.NumMlaLayers(), " MLA layers; the size must divide ", cfg.mla.num_heads, ")"));
  }
  if (t % c != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--decode-context-parallel-size ", c, " must divide --tensor-parallel-size ",
                     t, " (a DCP group is made of ranks of one tensor-parallel group)"));
  }
  if (c > 1 && cfg.NumMlaLayers() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--decode-context-parallel-size ", c,
                     " splits the MLA latent cache, and this model has no MLA layers"));
  }
  if (o.quantization == WeightQuantization::kCheckpoint && !cfg.moe.mxfp4_experts) {
    return absl::InvalidArgumentError(
        "--quantization compressed-tensors needs the config's quantization_config (MXFP4 routed "
        "experts, K3's release); this config has none");
  }
  if (o.device_memory_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device-memory must be positive, got ", o.device_memory_bytes));
  }
  if (!(o.reserve_fraction >= 0.0 && o.reserve_fraction < 1.0) || o.reserve_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reserve: the fraction must be in [0, 1) and the bytes >= 0, got ",
                     o.reserve_fraction, " and ", o.reserve_bytes));
  }
  if (o.activation_bytes < 1 || o.sequence_tokens < 1) {
    return absl::InvalidArgumentError("activation bytes and sequence tokens must be positive");
  }
  return absl::OkStatus();
}

int64_t KdaMixerBytes(const ModelConfig& cfg, int t, const LinearFormats& f) {
  const KdaConfig& k = cfg.kda;
  const int64_t d = cfg.hidden_size, dh = k.head_dim;
  const int64_t heads = k.num_heads / t, p = heads * dh, full_p = k.projection_size();
  int64_t bytes = 3 * f.Projection(p, d, d);  // q, k, v
  bytes += f.Projection(heads, d, d);         // b_proj
  bytes += f.Projection(dh, d, d);            // f_a (replicated)
  bytes += f.Projection(p, dh, dh);           // f_b
  if (k.use_full_rank_gate) {
    bytes += f.Projection(p, d, d);  // g_proj
  } else {
    bytes += f.Projection(dh, d, d) + f.Projection(p, dh, dh);  // g_a (replicated), g_b
  }
  bytes += f.Projection(d, p, full_p);                       // o_proj
  bytes += 3 * p * int64_t{k.conv_kernel_size} * kF32Bytes;  // q/k/v conv
  bytes += (heads + p) * kF32Bytes;                          // A_log, dt_bias
  return bytes;
}

int64_t MlaMixerBytes(const ModelConfig& cfg, int t, const LinearFormats& f) {
  const MlaConfig& m = cfg.mla;
  const int64_t d = cfg.hidden_size, heads = m.num_heads / t;
  const int64_t q_rows = heads * m.qk_head_dim();
  int64_t bytes = 0;
  if (m.q_lora_rank > 0) {
    bytes += f.Projection(m.q_lora_rank, d, d) + f.Projection(q_rows, m.q_lora_rank, m.q_lora_rank);
  } else {
    bytes += f.Projection(q_rows, d, d);
  }
  bytes += f.Projection(m.latent_dim(), d, d);  // kv_a_proj_with_mqa (replicated)
  bytes += LinearFormats::Kept(heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank);
  const int64_t out = heads * m.v_head_dim, full_out = int64_t{m.num_heads} * m.v_head_dim;
  if (m.use_output_gate) bytes += f.Projection(out, d, d);  // g_proj
  bytes += f.Projection(d, out, full_out);                  // o_proj
  return bytes;
}

// gate/up [ceil(width/T), d], down [d, ceil(width/T)].
int64_t GluBytes(int64_t d, int64_t width, int t, const LinearFormats& f) {
  const int64_t share = CeilDiv(width, t);
  return 2 * f.Projection(share, d, d) + f.Projection(d, share, width);
}

PlanWeightBytes WeightBytes(const ModelConfig& cfg, const ParallelPlanOptions& o,
                            int experts_here) {
  const int t = o.tensor_parallel_size;
  const LinearFormats f(cfg, o.quantization);
  const MoeConfig& moe = cfg.moe;
  const int64_t d = cfg.hidden_size, vocab_rows = CeilDiv(cfg.vocab_size, t);
  PlanWeightBytes w;
  w.embedding_lm_head = LinearFormats::Kept(vocab_rows, d);
  // Tied: the LM head is the embedding's view, unless int8 gives it bytes of its own.
  if (!cfg.tie_word_embeddings || f.int8()) w.embedding_lm_head += f.Projection(vocab_rows, d, d);
  // Per layer: input and post norms, AttnRes norm and projection of both sites.
  const int64_t layer_vectors = 2 * d + (cfg.has_attn_res() ? 4 * d : 0);
  w.norms_routers = cfg.num_layers * layer_vectors * kF32Bytes;
  w.norms_routers += (d + (cfg.has_attn_res() ? 2 * d : 0)) * kF32Bytes;  // final, output AttnRes
  const int64_t expert_in = moe.is_latent() ? moe.routed_expert_hidden_size : d;
  const int64_t expert_bytes = 2 * f.Expert(moe.moe_intermediate_size, expert_in) +
                               f.Expert(expert_in, moe.moe_intermediate_size);
  for (int l = 0; l < cfg.num_layers; ++l) {
    if (cfg.IsKda(l)) {
      w.mixers += KdaMixerBytes(cfg, t, f);
      w.norms_routers += int64_t{cfg.kda.head_dim} * kF32Bytes;  // o_norm
    } else {
      w.mixers += MlaMixerBytes(cfg, t, f);
      w.norms_routers += (int64_t{cfg.mla.q_lora_rank} + cfg.mla.kv_lora_rank) * kF32Bytes;
    }
    if (!cfg.IsMoe(l)) {
      w.dense_mlp_shared += GluBytes(d, cfg.intermediate_size, t, f);
      continue;
    }
    if (moe.num_shared_experts > 0) {
      w.dense_mlp_shared +=
          GluBytes(d, int64_t{moe.num_shared_experts} * moe.moe_intermediate_size, t, f);
    }
    w.norms_routers += LinearFormats::Kept(moe.num_experts, d);  // router
    w.norms_routers += int64_t{moe.num_experts} * kF32Bytes;     // score correction bias
    if (moe.is_latent()) {
      const int64_t latent = moe.routed_expert_hidden_size;
      w.latent_moe += f.Projection(latent, d, d) + f.Projection(CeilDiv(d, t), latent, latent);
      if (moe.latent_use_norm) w.norms_routers += latent * kF32Bytes;
    }
    w.routed_experts += experts_here * expert_bytes;
  }
  return w;
}

// Cache shapes of one rank: the KDA state of its H/T heads, the whole latent row.
kvcache::ModelCacheSpec RankCacheSpec(const ModelConfig& cfg, const ParallelPlanOptions& o) {
  kvcache::ModelCacheSpec spec;
  spec.num_mla_layers = cfg.NumMlaLayers();
  spec.latent_dim = cfg.mla.latent_dim();
  spec.rope_dim = cfg.mla.qk_rope_head_dim;
  spec.latent_dtype = o.kv_cache_dtype;
  spec.num_kda_layers = cfg.NumKdaLayers();
  const int32_t heads = cfg.kda.num_heads / o.tensor_parallel_size;
  spec.kda_state_bytes_per_layer =
      kvcache::KdaStateBytes(heads, cfg.kda.head_dim, static_cast<int32_t>(kF32Bytes));
  spec.kda_conv_bytes_per_layer = kvcache::KdaConvBytes(
      heads, cfg.kda.head_dim, cfg.kda.conv_kernel_size, static_cast<int32_t>(kF32Bytes));
  return spec;
}

// The largest n for which PlanMemory gives n state slots and n · blocks_per_sequence blocks.
int64_t SequencesThatFit(const kvcache::ModelCacheSpec& spec, const ParallelPlanOptions& o,
                         int64_t cache_bytes, int64_t tokens_per_sequence) {
  const int64_t blocks_per_sequence = CeilDiv(tokens_per_sequence, o.block_size);
  auto fits = [&](int64_t n) {
    kvcache::PlannerOptions p;
    p.memory_budget_bytes = cache_bytes;
    p.block_size = o.block_size;
    p.max_num_seqs = static_cast<int32_t>(n);
    p.checkpoint_fraction = 0.0;
    p.min_num_tokens = n * blocks_per_sequence * o.block_size;
    return kvcache::PlanMemory(spec, p).ok();
  };
  const int64_t latent_bytes_per_token =
      spec.num_mla_layers > 0
          ? spec.num_mla_layers *
                LatentBytesPerToken(spec.latent_dtype, spec.latent_dim, spec.rope_dim)
          : 0;
  const int64_t per_sequence = int64_t{spec.num_kda_layers} * (spec.kda_state_bytes_per_layer +
                                                               spec.kda_conv_bytes_per_layer) +
                               blocks_per_sequence * o.block_size * latent_bytes_per_token;
  if (per_sequence <= 0) return 0;
  int64_t lo = 0;  // fits (trivially)
  int64_t hi = std::min<int64_t>(cache_bytes / per_sequence + 1,
                                 std::numeric_limits<int32_t>::max());  // does not fit
  if (fits(hi)) return hi;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

// Ring all-reduce bus bytes of one rank: 2(n−1)/n of the buffer.
int64_t AllReduceBus(int64_t bytes, int n) { return bytes * 2 * (n - 1) / n; }
// Ring all-gather bus bytes of one rank: (n−1)/n of the gathered buffer.
int64_t AllGatherBus(int64_t gathered_bytes, int n) { return gathered_bytes * (n - 1) / n; }

std::vector<PlanCollective> Collectives(const ModelConfig& cfg, const ParallelPlanOptions& o,
                                        int num_moe_layers) {
  const int t = o.tensor_parallel_size, c = o.decode_context_parallel_size;
  const int dp = o.data_parallel_size;
  const int64_t b = o.activation_bytes, d = cfg.hidden_size;
  std::vector<PlanCollective> out;
  if (t > 1) {
    const int64_t hidden = d * b;
    out.push_back({"embedding all-reduce", "token", 1, hidden, AllReduceBus(hidden, t)});
    out.push_back({"mixer all-reduce", "layer", cfg.num_layers, hidden, AllReduceBus(hidden, t)});
    out.push_back({"FFN all-reduce", "layer", cfg.num_layers, hidden, AllReduceBus(hidden, t)});
    if (cfg.moe.is_latent() && num_moe_layers > 0) {
      const int64_t latent = int64_t{cfg.moe.routed_expert_hidden_size} * b;
      out.push_back(
          {"latent all-reduce", "MoE layer", num_moe_layers, latent, AllReduceBus(latent, t)});
    }
    const int64_t logits = int64_t{t} * CeilDiv(cfg.vocab_size, t) * kF32Bytes;
    out.push_back({"logits all-gather", "sampled token", 1, logits, AllGatherBus(logits, t)});
  }
  if (dp > 1 && num_moe_layers > 0) {
    const int64_t width = cfg.moe.is_latent() ? cfg.moe.routed_expert_hidden_size : d;
    const int64_t rows = int64_t{cfg.moe.num_experts_per_token} * width * b;
    const int64_t off_group = rows * (dp - 1) / dp;
    out.push_back({"expert dispatch all-to-all", "MoE layer", num_moe_layers, rows, off_group});
    out.push_back({"expert combine all-to-all", "MoE layer", num_moe_layers, rows, off_group});
  }
  if (c > 1) {
    const int64_t heads = cfg.mla.num_heads / t;
    const int64_t queries = c * heads * cfg.mla.latent_dim() * b;
    const int64_t outputs = c * heads * (cfg.mla.kv_lora_rank * b + kF32Bytes);
    const int mla = cfg.NumMlaLayers();
    out.push_back({"DCP query all-gather", "MLA layer", mla, queries, AllGatherBus(queries, c)});
    out.push_back({"DCP output merge", "MLA layer", mla, outputs, AllGatherBus(outputs, c)});
  }
  return out;
}

std::string Bytes(int64_t bytes) { return kvcache::FormatBytes(bytes); }

}  // namespace

int64_t ParallelPlan::bus_bytes_per_token() const {
  int64_t sum = 0;
  for (const PlanCollective& c : collectives) sum += c.bus_bytes_per_token();
  return sum;
}

absl::StatusOr<ParallelPlan> PlanParallel(const ModelConfig& cfg,
                                          const ParallelPlanOptions& options) {
  RETURN_IF_ERROR(CheckOptions(cfg, options));
  const int t = options.tensor_parallel_size, c = options.decode_context_parallel_size;
  ParallelPlan plan;
  plan.options = options;
  plan.model = cfg.family == ModelFamily::kKimiK3 ? "Kimi K3" : "Kimi-Linear";
  plan.world_size = t * options.data_parallel_size;
  plan.num_layers = cfg.num_layers;
  plan.num_kda_layers = cfg.NumKdaLayers();
  plan.num_mla_layers = cfg.NumMlaLayers();
  for (int l = 0; l < cfg.num_layers; ++l) plan.num_moe_layers += cfg.IsMoe(l) ? 1 : 0;
  plan.kda_heads_per_rank = cfg.kda.num_heads / t;
  plan.mla_heads_per_rank = cfg.mla.num_heads / t;
  const int experts = cfg.moe.num_experts;
  plan.min_experts_per_rank = experts / plan.world_size;
  plan.max_experts_per_rank = plan.min_experts_per_rank + (experts % plan.world_size != 0 ? 1 : 0);
  const LinearFormats formats(cfg, options.quantization);
  plan.routed_expert_format = FormatName(formats.experts());
  plan.projection_format = FormatName(formats.ProjectionFormat(cfg.hidden_size));
  plan.weights = WeightBytes(cfg, options, plan.max_experts_per_rank);

  const int64_t weights = plan.weights.total();
  if (options.device_memory_bytes < weights) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device-memory ", Bytes(options.device_memory_bytes), " is ",
        Bytes(weights - options.device_memory_bytes), " smaller than the weights of one rank (",
        Bytes(weights), " at --tensor-parallel-size ", t, ", --data-parallel-size ",
        options.data_parallel_size, ")"));
  }
  const int64_t free_bytes = options.device_memory_bytes - weights;
  plan.reserve_bytes =
      static_cast<int64_t>(std::floor(options.reserve_fraction * static_cast<double>(free_bytes))) +
      options.reserve_bytes;
  plan.cache_bytes = free_bytes - plan.reserve_bytes;
  if (plan.cache_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device-memory ", Bytes(options.device_memory_bytes), " leaves ", Bytes(free_bytes),
        " after the weights (", Bytes(weights), "), less than the reserve of ",
        Bytes(plan.reserve_bytes), ": no room for the caches"));
  }

  const kvcache::ModelCacheSpec spec = RankCacheSpec(cfg, options);
  plan.kda_state_bytes_per_sequence =
      int64_t{spec.num_kda_layers} *
      (spec.kda_state_bytes_per_layer + spec.kda_conv_bytes_per_layer);
  if (spec.num_mla_layers > 0) {
    plan.latent_bytes_per_token =
        spec.num_mla_layers *
        LatentBytesPerToken(spec.latent_dtype, spec.latent_dim, spec.rope_dim);
  }
  kvcache::PlannerOptions p;
  p.memory_budget_bytes = plan.cache_bytes;
  p.block_size = options.block_size;
  p.max_num_seqs = options.max_num_seqs;
  p.checkpoint_fraction = options.checkpoint_fraction;
  absl::StatusOr<kvcache::CacheLayout> layout = kvcache::PlanMemory(spec, p);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the cache of one rank (", Bytes(plan.cache_bytes),
                     " after weights and reserve) does not fit: ", layout.status().message()));
  }
  plan.cache_tokens_per_rank = layout->num_tokens();
  plan.cache_tokens_per_group = plan.cache_tokens_per_rank * c;
  plan.state_slots = layout->num_slots;
  plan.checkpoints = layout->num_checkpoints;
  plan.sequence_tokens_per_rank = CeilDiv(options.sequence_tokens, c);
  plan.sequences_per_group =
      SequencesThatFit(spec, options, plan.cache_bytes, plan.sequence_tokens_per_rank);
  plan.collectives = Collectives(cfg, options, plan.num_moe_layers);
  return plan;
}

std::string ParallelPlanJson(const ParallelPlan& plan) {
  const ParallelPlanOptions& o = plan.options;
  nlohmann::ordered_json j;
  j["model"] = plan.model;
  j["tensor_parallel_size"] = o.tensor_parallel_size;
  j["decode_context_parallel_size"] = o.decode_context_parallel_size;
  j["data_parallel_size"] = o.data_parallel_size;
  j["world_size"] = plan.world_size;
  j["device_memory_bytes"] = o.device_memory_bytes;
  j["kv_cache_dtype"] = std::string(LatentDTypeName(o.kv_cache_dtype));
  j["routed_expert_format"] = plan.routed_expert_format;
  j["projection_format"] = plan.projection_format;
  j["layers"] = {{"total", plan.num_layers},
                 {"kda", plan.num_kda_layers},
                 {"mla", plan.num_mla_layers},
                 {"moe", plan.num_moe_layers}};
  j["per_rank"] = {{"kda_heads", plan.kda_heads_per_rank},
                   {"mla_heads", plan.mla_heads_per_rank},
                   {"routed_experts_max", plan.max_experts_per_rank},
                   {"routed_experts_min", plan.min_experts_per_rank}};
  const PlanWeightBytes& w = plan.weights;
  j["weight_bytes_per_rank"] = {{"embedding_lm_head", w.embedding_lm_head},
                                {"mixers", w.mixers},
                                {"dense_mlp_shared_experts", w.dense_mlp_shared},
                                {"latent_moe_projections", w.latent_moe},
                                {"routed_experts", w.routed_experts},
                                {"norms_routers", w.norms_routers},
                                {"total", w.total()}};
  j["reserve"] = {{"fraction", o.reserve_fraction},
                  {"bytes", o.reserve_bytes},
                  {"per_rank_bytes", plan.reserve_bytes}};
  j["cache_bytes_per_rank"] = plan.cache_bytes;
  j["latent_bytes_per_token_per_rank"] = plan.latent_bytes_per_token;
  j["kda_state_bytes_per_sequence_per_rank"] = plan.kda_state_bytes_per_sequence;
  j["cache_tokens_per_rank"] = plan.cache_tokens_per_rank;
  j["cache_tokens_per_group"] = plan.cache_tokens_per_group;
  j["state_slots"] = plan.state_slots;
  j["kda_checkpoints"] = plan.checkpoints;
  j["sequence_tokens"] = o.sequence_tokens;
  j["sequence_tokens_per_rank"] = plan.sequence_tokens_per_rank;
  j["sequences_per_group"] = plan.sequences_per_group;
  nlohmann::ordered_json collectives = nlohmann::ordered_json::array();
  for (const PlanCollective& c : plan.collectives) {
    collectives.push_back({{"name", c.name},
                           {"per", c.per},
                           {"calls_per_token", c.calls_per_token},
                           {"message_bytes", c.message_bytes},
                           {"bus_bytes", c.bus_bytes},
                           {"bus_bytes_per_token", c.bus_bytes_per_token()}});
  }
  j["activation_bytes"] = o.activation_bytes;
  j["collectives"] = std::move(collectives);
  j["bus_bytes_per_token"] = plan.bus_bytes_per_token();
  return j.dump();
}

std::string ParallelPlanTable(const ParallelPlan& plan) {
  const ParallelPlanOptions& o = plan.options;
  using kvcache::FormatBytes;
  using kvcache::FormatWithThousands;
  std::string s = absl::StrFormat(
      "%s: TP %d x DCP %d x DP %d = %d ranks, %s per rank; %d layers (%d KDA, %d MLA, %d MoE)\n"
      "per rank: %d KDA heads, %d MLA heads, %s routed experts per MoE layer (%s), projections "
      "%s\n\n",
      plan.model, o.tensor_parallel_size, o.decode_context_parallel_size, o.data_parallel_size,
      plan.world_size, FormatBytes(o.device_memory_bytes), plan.num_layers, plan.num_kda_layers,
      plan.num_mla_layers, plan.num_moe_layers, plan.kda_heads_per_rank, plan.mla_heads_per_rank,
      plan.min_experts_per_rank == plan.max_experts_per_rank
          ? absl::StrCat(plan.max_experts_per_rank)
          : absl::StrCat(plan.min_experts_per_rank, "-", plan.max_experts_per_rank),
      plan.routed_expert_format, plan.projection_format);
  const PlanWeightBytes& w = plan.weights;
  s += "weights per rank\n";
  const std::pair<const char*, int64_t> rows[] = {
      {"embedding + LM head", w.embedding_lm_head},
      {"KDA / MLA mixers", w.mixers},
      {"dense MLPs + shared experts", w.dense_mlp_shared},
      {"LatentMoE projections", w.latent_moe},
      {"routed experts", w.routed_experts},
      {"norms + routers", w.norms_routers},
      {"total", w.total()}};
  for (const auto& [name, bytes] : rows) {
    s += absl::StrFormat("  %-28s %12s\n", name, FormatBytes(bytes));
  }
  s += absl::StrFormat(
      "\ncache per rank                 %12s  (reserve %s = %.0f%% of the %s left + %s)\n",
      FormatBytes(plan.cache_bytes), FormatBytes(plan.reserve_bytes), 100.0 * o.reserve_fraction,
      FormatBytes(o.device_memory_bytes - w.total()), FormatBytes(o.reserve_bytes));
  s += absl::StrFormat("  latent row, all MLA layers   %12s per token (%s)\n",
                       FormatBytes(plan.latent_bytes_per_token),
                       std::string(LatentDTypeName(o.kv_cache_dtype)));
  s += absl::StrFormat("  KDA state, all KDA layers    %12s per sequence (f32)\n",
                       FormatBytes(plan.kda_state_bytes_per_sequence));
  s += absl::StrFormat(
      "  latent tokens                %12s per rank, %s per group (%d state slots, %d KDA "
      "checkpoints)\n",
      FormatWithThousands(plan.cache_tokens_per_rank),
      FormatWithThousands(plan.cache_tokens_per_group), plan.state_slots, plan.checkpoints);
  s += absl::StrFormat(
      "  long sequences that fit       %12s per group (%s tokens each: %s per rank)\n",
      FormatWithThousands(plan.sequences_per_group), FormatWithThousands(o.sequence_tokens),
      FormatWithThousands(plan.sequence_tokens_per_rank));
  s +=
      absl::StrFormat("\ncollectives per token (%d-byte activations; bus = bytes one rank sends)\n",
                      o.activation_bytes);
  if (plan.collectives.empty()) s += "  none (one rank)\n";
  for (const PlanCollective& c : plan.collectives) {
    s += absl::StrFormat("  %-27s %4d x %-13s %11s each, bus %11s; per token %11s\n", c.name,
                         c.calls_per_token, c.per, FormatBytes(c.message_bytes),
                         FormatBytes(c.bus_bytes), FormatBytes(c.bus_bytes_per_token()));
  }
  if (!plan.collectives.empty()) {
    s += absl::StrFormat("  %-27s %63s\n", "total bus per token",
                         FormatBytes(plan.bus_bytes_per_token()));
  }
  return s;
}

}  // namespace strata::engine
