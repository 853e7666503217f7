#include "engine/model_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/file.h"
#include "core/status.h"
#include "engine/json_key_reader.h"
#include "engine/quantization_config.h"

namespace strata::engine {
namespace {

using json = nlohmann::json;

// A token id: an integer, or a list of integers (the first one is kept).
absl::Status ReadTokenId(const KeyReader& reader, std::string_view key, int64_t* out) {
  const json* value = reader.Find(key);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_array()) return reader.Int64(key, out, /*required=*/false);
  if (value->empty()) return absl::OkStatus();
  const json& first = value->front();
  if (first.is_number_integer() && !first.is_number_unsigned()) {
    *out = first.get<int64_t>();
    return absl::OkStatus();
  }
  if (first.is_number_unsigned() &&
      first.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    *out = static_cast<int64_t>(first.get<uint64_t>());
    return absl::OkStatus();
  }
  return reader.TypeError(CatAny(key, "[0]"), "a 64-bit integer", first);
}

absl::Status ParseKda(const KeyReader& lm, ModelConfig* config) {
  ASSIGN_OR_RETURN(KeyReader linear, lm.Child("linear_attn_config"));
  RETURN_IF_ERROR(linear.IntList("kda_layers", &config->kda_layers, true));
  RETURN_IF_ERROR(linear.IntList("full_attn_layers", &config->full_attn_layers, true));
  KdaConfig& kda = config->kda;
  RETURN_IF_ERROR(linear.Int("num_heads", &kda.num_heads, true));
  RETURN_IF_ERROR(linear.Int("head_dim", &kda.head_dim, true));
  RETURN_IF_ERROR(linear.Int("short_conv_kernel_size", &kda.conv_kernel_size, false));
  kda.has_gate_lower_bound = linear.Has("gate_lower_bound");
  RETURN_IF_ERROR(linear.Float("gate_lower_bound", &kda.gate_lower_bound, false));
  RETURN_IF_ERROR(linear.Bool("use_full_rank_gate", &kda.use_full_rank_gate, false));
  return absl::OkStatus();
}

absl::Status ParseMla(const KeyReader& lm, MlaConfig* mla) {
  RETURN_IF_ERROR(lm.Int("num_attention_heads", &mla->num_heads, true));
  RETURN_IF_ERROR(lm.Int("q_lora_rank", &mla->q_lora_rank, false));  // null → 0
  RETURN_IF_ERROR(lm.Int("kv_lora_rank", &mla->kv_lora_rank, true));
  RETURN_IF_ERROR(lm.Int("qk_nope_head_dim", &mla->qk_nope_head_dim, true));
  RETURN_IF_ERROR(lm.Int("qk_rope_head_dim", &mla->qk_rope_head_dim, true));
  RETURN_IF_ERROR(lm.Int("v_head_dim", &mla->v_head_dim, true));
  RETURN_IF_ERROR(lm.Bool("mla_use_output_gate", &mla->use_output_gate, false));
  RETURN_IF_ERROR(lm.Bool("mla_use_nope", &mla->use_nope, false));
  return absl::OkStatus();
}

absl::Status ParseMoe(const KeyReader& lm, MoeConfig* moe) {
  RETURN_IF_ERROR(lm.Int("num_experts", &moe->num_experts, true));
  RETURN_IF_ERROR(lm.Int("num_experts_per_token", &moe->num_experts_per_token, true));
  RETURN_IF_ERROR(lm.Int("num_shared_experts", &moe->num_shared_experts, false));
  RETURN_IF_ERROR(lm.Int("moe_intermediate_size", &moe->moe_intermediate_size, true));
  RETURN_IF_ERROR(lm.Bool("moe_renormalize", &moe->renormalize, false));
  RETURN_IF_ERROR(lm.Float("routed_scaling_factor", &moe->routed_scaling_factor, false));
  RETURN_IF_ERROR(lm.Int("num_expert_group", &moe->num_expert_group, false));
  RETURN_IF_ERROR(lm.Int("topk_group", &moe->topk_group, false));
  RETURN_IF_ERROR(lm.Int("first_k_dense_replace", &moe->first_k_dense_replace, false));
  RETURN_IF_ERROR(lm.Int("moe_layer_freq", &moe->moe_layer_freq, false));
  RETURN_IF_ERROR(lm.Int("routed_expert_hidden_size", &moe->routed_expert_hidden_size, false));
  RETURN_IF_ERROR(lm.Bool("latent_moe_use_norm", &moe->latent_use_norm, false));
  std::string router = "sigmoid";
  RETURN_IF_ERROR(lm.String("moe_router_activation_func", &router, false));
  if (router != "sigmoid") {
    return lm.Error("moe_router_activation_func",
                    CatAny("must be \"sigmoid\" (the only supported router), found \"",
                           router.substr(0, kMaxStringInMessage), "\""));
  }
  return absl::OkStatus();
}

absl::Status ParseActivation(const KeyReader& lm, ModelConfig* config) {
  std::string act;
  RETURN_IF_ERROR(lm.String("hidden_act", &act, true));
  if (act == "situ") {
    config->activation = FfnActivation::kSitu;
  } else if (act == "silu" || act == "swiglu") {
    config->activation = FfnActivation::kSwiGlu;
  } else {
    return lm.Error("hidden_act", CatAny("must be \"situ\", \"silu\" or \"swiglu\", found \"",
                                         act.substr(0, kMaxStringInMessage), "\""));
  }
  RETURN_IF_ERROR(lm.Float("activation_situ_beta", &config->situ_beta, false));
  RETURN_IF_ERROR(lm.Float("activation_situ_linear_beta", &config->situ_linear_beta, false));
  return absl::OkStatus();
}

// compressed-tensors as Strata reads it: MXFP4 routed experts (docs/checkpoint.md §6; → true)
// and/or int8 groups (what `strata quantize --quantization int8` writes; their tensors say which
// Linears: engine/linear.h). Any other quantization is unsupported. Returns whether the routed
// experts are MXFP4.
absl::StatusOr<bool> ReadQuantizationConfig(const KeyReader& owner) {
  const json* quant = owner.Find("quantization_config");
  if (quant == nullptr) return false;
  if (!quant->is_object()) return owner.TypeError("quantization_config", "an object", *quant);
  auto string_at = [](const json& object, const char* key) -> std::string {
    auto it = object.find(key);
    return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string method = string_at(*quant, "quant_method");
  const std::string format = string_at(*quant, "format");
  bool mxfp4 = format == kMxfp4Format, int8 = format == kInt8Format;
  bool other_group = false;  // a group in a format Strata does not read
  auto groups = quant->find("config_groups");
  if (groups != quant->end() && groups->is_object()) {
    for (const json& group : *groups) {
      const std::string f = group.is_object() ? string_at(group, "format") : std::string();
      mxfp4 = mxfp4 || f == kMxfp4Format;
      int8 = int8 || f == kInt8Format;
      other_group = other_group || (!f.empty() && f != kMxfp4Format && f != kInt8Format);
    }
  }
  // The top-level format may be absent or mixed-precision where the groups name theirs.
  const bool known_format = format == kMxfp4Format || format == kInt8Format ||
                            ((format.empty() || format == "mixed-precision") && (mxfp4 || int8));
  if (method == "compressed-tensors" && known_format && !other_group) return mxfp4;
  return owner.Error("quantization_config",
                     CatAny("must be compressed-tensors \"mxfp4-pack-quantized\" (K3's experts) or "
                            "\"int-quantized\" (strata quantize's int8), found quant_method \"",
                            method.substr(0, kMaxStringInMessage), "\" format \"",
                            format.substr(0, kMaxStringInMessage), "\""));
}

// Keys that K3 may hold at the top level instead of text_config: token ids, length, tying,
// quantization. `top` is the top-level reader, `lm` the language-model one (the same for
// Kimi-Linear); the language-model level wins when both hold a key.
absl::Status ParseEitherLevel(const KeyReader& top, const KeyReader& lm, ModelConfig* config) {
  for (const KeyReader* reader : {&top, &lm}) {
    RETURN_IF_ERROR(ReadTokenId(*reader, "bos_token_id", &config->bos_token_id));
    RETURN_IF_ERROR(ReadTokenId(*reader, "eos_token_id", &config->eos_token_id));
    RETURN_IF_ERROR(ReadTokenId(*reader, "pad_token_id", &config->pad_token_id));
    RETURN_IF_ERROR(
        ReadTokenId(*reader, "media_placeholder_token_id", &config->media_placeholder_token_id));
    RETURN_IF_ERROR(reader->Int64("model_max_length", &config->max_position_embeddings, false));
    RETURN_IF_ERROR(
        reader->Int64("max_position_embeddings", &config->max_position_embeddings, false));
    RETURN_IF_ERROR(reader->Bool("tie_word_embeddings", &config->tie_word_embeddings, false));
    ASSIGN_OR_RETURN(bool mxfp4, ReadQuantizationConfig(*reader));
    config->moe.mxfp4_experts = config->moe.mxfp4_experts || mxfp4;
  }
  return absl::OkStatus();
}

// layer_mixer from the 1-based lists; entries outside 1..L are left for Validate() to report.
void DeriveLayerMixer(ModelConfig* config) {
  config->layer_mixer.clear();
  if (config->num_layers < 1 || config->num_layers > ModelConfig::kMaxLayers) return;
  config->layer_mixer.assign(config->num_layers, MixerKind::kKda);
  for (int layer : config->full_attn_layers) {
    if (layer >= 1 && layer <= config->num_layers) {
      config->layer_mixer[layer - 1] = MixerKind::kMla;
    }
  }
}

// K3's vision_config (top level), when present and not null, with preprocessor_config.json's
// text when given (parsed only here: a text-only config never reads it).
absl::Status ParseVision(const KeyReader& top, const std::string* preprocessor_text,
                         std::string_view preprocessor_source, ModelConfig* config) {
  const json* vision = top.Find("vision_config");
  if (vision == nullptr) return absl::OkStatus();
  if (!vision->is_object()) return top.TypeError("vision_config", "an object", *vision);
  json preprocessor;
  if (preprocessor_text != nullptr) {
    preprocessor = json::parse(preprocessor_text->begin(), preprocessor_text->end(),
                               /*cb=*/nullptr, /*allow_exceptions=*/false);
    if (preprocessor.is_discarded()) {
      return absl::InvalidArgumentError(CatAny(preprocessor_source, ": not valid JSON"));
    }
  }
  ASSIGN_OR_RETURN(config->vision,
                   ParseVisionConfig(*vision, preprocessor_text ? &preprocessor : nullptr,
                                     top.source(), preprocessor_source));
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseParsed(const json& root, std::string_view source,
                                        const std::string* preprocessor_text,
                                        std::string_view preprocessor_source) {
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        CatAny(source, ": expected a JSON object, found ", DescribeJson(root)));
  }
  ModelConfig config;
  config.source = std::string(source);
  const KeyReader top(root, source, "");
  std::string model_type;
  RETURN_IF_ERROR(top.String("model_type", &model_type, true));
  const json* lm_object = &root;
  if (model_type == "kimi_k3") {
    const json* text_config = top.Find("text_config");
    if (text_config == nullptr) return top.Missing("text_config", true);
    if (!text_config->is_object()) return top.TypeError("text_config", "an object", *text_config);
    lm_object = text_config;
    config.family = ModelFamily::kKimiK3;
    config.tensor_prefix = "language_model.";
    config.key_prefix = "text_config.";
  } else if (model_type != "kimi_linear") {
    return top.Error("model_type", CatAny("must be \"kimi_k3\" or \"kimi_linear\", found \"",
                                          model_type.substr(0, kMaxStringInMessage), "\""));
  }
  const KeyReader lm(*lm_object, source, config.key_prefix);
  RETURN_IF_ERROR(lm.Int64("vocab_size", &config.vocab_size, true));
  RETURN_IF_ERROR(lm.Int("hidden_size", &config.hidden_size, true));
  RETURN_IF_ERROR(lm.Int("num_hidden_layers", &config.num_layers, true));
  RETURN_IF_ERROR(lm.Float("rms_norm_eps", &config.rms_norm_eps, false));
  RETURN_IF_ERROR(lm.Int("intermediate_size", &config.intermediate_size, false));
  RETURN_IF_ERROR(lm.Int("attn_res_block_size", &config.attn_res_block_size, false));
  RETURN_IF_ERROR(ParseKda(lm, &config));
  RETURN_IF_ERROR(ParseMla(lm, &config.mla));
  RETURN_IF_ERROR(ParseMoe(lm, &config.moe));
  RETURN_IF_ERROR(ParseActivation(lm, &config));
  RETURN_IF_ERROR(ParseEitherLevel(top, lm, &config));
  if (config.family == ModelFamily::kKimiK3) {
    RETURN_IF_ERROR(ParseVision(top, preprocessor_text, preprocessor_source, &config));
  }
  DeriveLayerMixer(&config);
  return config;
}

// ---- Validate ---------------------------------------------------------------------------------

class Checker {
 public:
  explicit Checker(const ModelConfig& config) : config_(config) {}

  absl::Status Error(std::string_view key, std::string_view message) const {
    return absl::InvalidArgumentError(
        CatAny(config_.source, ": ", config_.key_prefix, key, " ", message));
  }
  absl::Status AtLeast(std::string_view key, int64_t value, int64_t minimum) const {
    if (value >= minimum) return absl::OkStatus();
    if (minimum == 1) return Error(key, CatAny("must be positive, found ", value));
    return Error(key, CatAny("must be at least ", minimum, ", found ", value));
  }
  // `what` = a product the engine forms in int; `value` computed in int64.
  absl::Status FitsInt(std::string_view what, int64_t value) const {
    if (value <= std::numeric_limits<int>::max()) return absl::OkStatus();
    return Error(what, CatAny("= ", value, " does not fit in a 32-bit int"));
  }
  absl::Status PositiveFloat(std::string_view key, float value) const {
    if (std::isfinite(value) && value > 0.0f) return absl::OkStatus();
    return Error(key, CatAny("must be a positive finite number, found ", value));
  }

 private:
  const ModelConfig& config_;
};

absl::Status ValidateLayerLists(const ModelConfig& config, const Checker& check) {
  RETURN_IF_ERROR(check.AtLeast("num_hidden_layers", config.num_layers, 1));
  if (config.num_layers > ModelConfig::kMaxLayers) {
    return check.Error("num_hidden_layers", CatAny("must be at most ", ModelConfig::kMaxLayers,
                                                   ", found ", config.num_layers));
  }
  const int num_layers = config.num_layers;
  // owner[l] = 0 unlisted, 1 kda_layers, 2 full_attn_layers (l is 1-based).
  std::vector<int> owner(num_layers + 1, 0);
  const std::pair<const std::vector<int>*, const char*> lists[] = {
      {&config.kda_layers, "linear_attn_config.kda_layers"},
      {&config.full_attn_layers, "linear_attn_config.full_attn_layers"}};
  for (int list = 0; list < 2; ++list) {
    const char* key = lists[list].second;
    for (int layer : *lists[list].first) {
      if (layer < 1 || layer > num_layers) {
        return check.Error(key,
                           CatAny("lists layer ", layer, ", outside 1..", num_layers,
                                  " (layers are 1-based, num_hidden_layers = ", num_layers, ")"));
      }
      if (owner[layer] == list + 1) {
        return check.Error(key, CatAny("lists layer ", layer, " twice"));
      }
      if (owner[layer] != 0) {
        return check.Error(key, CatAny("lists layer ", layer,
                                       ", which linear_attn_config.kda_layers also lists "
                                       "(a layer is either KDA or MLA)"));
      }
      owner[layer] = list + 1;
    }
  }
  for (int layer = 1; layer <= num_layers; ++layer) {
    if (owner[layer] == 0) {
      return check.Error("linear_attn_config",
                         CatAny("does not list layer ", layer,
                                ": kda_layers and full_attn_layers must together list "
                                "every layer 1..",
                                num_layers, " exactly once"));
    }
  }
  bool mixer_matches = config.layer_mixer.size() == static_cast<size_t>(num_layers);
  for (int l = 0; mixer_matches && l < num_layers; ++l) {
    mixer_matches = (config.layer_mixer[l] == MixerKind::kMla) == (owner[l + 1] == 2);
  }
  if (!mixer_matches) {
    return check.Error("linear_attn_config",
                       "layer lists disagree with ModelConfig::layer_mixer (built in code?)");
  }
  return absl::OkStatus();
}

absl::Status ValidateAttention(const ModelConfig& config, const Checker& check) {
  const KdaConfig& kda = config.kda;
  RETURN_IF_ERROR(check.AtLeast("linear_attn_config.num_heads", kda.num_heads, 1));
  RETURN_IF_ERROR(check.AtLeast("linear_attn_config.head_dim", kda.head_dim, 1));
  RETURN_IF_ERROR(
      check.AtLeast("linear_attn_config.short_conv_kernel_size", kda.conv_kernel_size, 1));
  RETURN_IF_ERROR(check.FitsInt("linear_attn_config.num_heads * head_dim",
                                int64_t{kda.num_heads} * kda.head_dim));
  if (kda.has_gate_lower_bound &&
      !(std::isfinite(kda.gate_lower_bound) && kda.gate_lower_bound < 0.0f)) {
    return check.Error("linear_attn_config.gate_lower_bound",
                       CatAny("must be negative, found ", kda.gate_lower_bound));
  }
  const MlaConfig& mla = config.mla;
  if (!mla.use_nope) {
    return check.Error("mla_use_nope",
                       "must be true, found false: rotary position embedding (RoPE) in MLA is "
                       "not supported");
  }
  RETURN_IF_ERROR(check.AtLeast("num_attention_heads", mla.num_heads, 1));
  RETURN_IF_ERROR(check.AtLeast("q_lora_rank", mla.q_lora_rank, 0));
  RETURN_IF_ERROR(check.AtLeast("kv_lora_rank", mla.kv_lora_rank, 1));
  RETURN_IF_ERROR(check.AtLeast("qk_nope_head_dim", mla.qk_nope_head_dim, 1));
  RETURN_IF_ERROR(check.AtLeast("qk_rope_head_dim", mla.qk_rope_head_dim, 0));
  RETURN_IF_ERROR(check.AtLeast("v_head_dim", mla.v_head_dim, 1));
  const int64_t qk_head_dim = int64_t{mla.qk_nope_head_dim} + mla.qk_rope_head_dim;
  RETURN_IF_ERROR(check.FitsInt("num_attention_heads * (qk_nope_head_dim + qk_rope_head_dim)",
                                mla.num_heads * qk_head_dim));
  RETURN_IF_ERROR(check.FitsInt("num_attention_heads * (qk_nope_head_dim + v_head_dim)",
                                mla.num_heads * (int64_t{mla.qk_nope_head_dim} + mla.v_head_dim)));
  RETURN_IF_ERROR(check.FitsInt("kv_lora_rank + qk_rope_head_dim",
                                int64_t{mla.kv_lora_rank} + mla.qk_rope_head_dim));
  return absl::OkStatus();
}

absl::Status ValidateRouting(const MoeConfig& moe, const Checker& check) {
  RETURN_IF_ERROR(check.AtLeast("num_experts", moe.num_experts, 1));
  RETURN_IF_ERROR(check.AtLeast("num_experts_per_token", moe.num_experts_per_token, 1));
  if (moe.num_experts_per_token > moe.num_experts) {
    return check.Error("num_experts_per_token",
                       CatAny("must be at most num_experts = ", moe.num_experts, ", found ",
                              moe.num_experts_per_token));
  }
  RETURN_IF_ERROR(check.AtLeast("num_expert_group", moe.num_expert_group, 1));
  if (moe.num_experts % moe.num_expert_group != 0) {
    return check.Error("num_expert_group", CatAny("must divide num_experts = ", moe.num_experts,
                                                  ", found ", moe.num_expert_group));
  }
  RETURN_IF_ERROR(check.AtLeast("topk_group", moe.topk_group, 1));
  if (moe.topk_group > moe.num_expert_group) {
    return check.Error("topk_group", CatAny("must be at most num_expert_group = ",
                                            moe.num_expert_group, ", found ", moe.topk_group));
  }
  const int64_t reachable = int64_t{moe.topk_group} * (moe.num_experts / moe.num_expert_group);
  if (moe.num_experts_per_token > reachable) {
    return check.Error("num_experts_per_token",
                       CatAny("must be at most topk_group * experts per group = ", reachable,
                              ", found ", moe.num_experts_per_token));
  }
  RETURN_IF_ERROR(check.PositiveFloat("routed_scaling_factor", moe.routed_scaling_factor));
  return absl::OkStatus();
}

// The vision tower against the language model: its sizes (ValidateVisionConfig), and an image
// placeholder id inside the vocabulary.
absl::Status ValidateVision(const ModelConfig& config) {
  if (config.family != ModelFamily::kKimiK3) {
    return absl::InvalidArgumentError(
        CatAny(config.source,
               ": vision_config is supported for Kimi K3 (model_type kimi_k3) "
               "only"));
  }
  RETURN_IF_ERROR(ValidateVisionConfig(*config.vision, config.hidden_size, config.source));
  const int64_t id = config.media_placeholder_token_id;
  if (id < 0 || id >= config.vocab_size) {
    return absl::InvalidArgumentError(CatAny(
        config.source, ": media_placeholder_token_id must be a token id in 0..",
        config.vocab_size - 1, " (vocab_size ", config.vocab_size,
        ") when vision_config is present, found ", id < 0 ? std::string("none") : CatAny(id)));
  }
  return absl::OkStatus();
}

absl::Status ValidateFfn(const ModelConfig& config, const Checker& check) {
  const MoeConfig& moe = config.moe;
  RETURN_IF_ERROR(ValidateRouting(moe, check));
  RETURN_IF_ERROR(check.AtLeast("moe_intermediate_size", moe.moe_intermediate_size, 1));
  RETURN_IF_ERROR(check.AtLeast("num_shared_experts", moe.num_shared_experts, 0));
  RETURN_IF_ERROR(check.FitsInt("num_shared_experts * moe_intermediate_size",
                                int64_t{moe.num_shared_experts} * moe.moe_intermediate_size));
  RETURN_IF_ERROR(check.AtLeast("first_k_dense_replace", moe.first_k_dense_replace, 0));
  RETURN_IF_ERROR(check.AtLeast("moe_layer_freq", moe.moe_layer_freq, 1));
  RETURN_IF_ERROR(check.AtLeast("routed_expert_hidden_size", moe.routed_expert_hidden_size, 0));
  if (moe.mxfp4_experts) {
    const bool latent = moe.is_latent();
    const int width = latent ? moe.routed_expert_hidden_size : config.hidden_size;
    if (width % kMxfp4BlockSize != 0) {
      return check.Error(latent ? "routed_expert_hidden_size" : "hidden_size",
                         CatAny("must be a multiple of 32 for MXFP4 routed experts "
                                "(quantization_config), found ",
                                width));
    }
    if (moe.moe_intermediate_size % kMxfp4BlockSize != 0) {
      return check.Error("moe_intermediate_size",
                         CatAny("must be a multiple of 32 for MXFP4 routed experts "
                                "(quantization_config), found ",
                                moe.moe_intermediate_size));
    }
  }
  const bool has_dense_layer = moe.first_k_dense_replace > 0 || moe.moe_layer_freq > 1;
  if (has_dense_layer)
    RETURN_IF_ERROR(check.AtLeast("intermediate_size", config.intermediate_size, 1));
  if (config.activation == FfnActivation::kSitu) {
    RETURN_IF_ERROR(check.PositiveFloat("activation_situ_beta", config.situ_beta));
    if (!(std::isfinite(config.situ_linear_beta) && config.situ_linear_beta >= 0.0f)) {
      return check.Error("activation_situ_linear_beta",
                         CatAny("must be positive (or absent), found ", config.situ_linear_beta));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int ModelConfig::NumKdaLayers() const {
  return static_cast<int>(std::count(layer_mixer.begin(), layer_mixer.end(), MixerKind::kKda));
}

int ModelConfig::NumMlaLayers() const {
  return static_cast<int>(std::count(layer_mixer.begin(), layer_mixer.end(), MixerKind::kMla));
}

absl::Status ModelConfig::Validate() const {
  const Checker check(*this);
  RETURN_IF_ERROR(check.AtLeast("vocab_size", vocab_size, 1));
  // Keeps vocab_size · hidden_size (embedding and lm_head sizes) within int64.
  RETURN_IF_ERROR(check.FitsInt("vocab_size", vocab_size));
  RETURN_IF_ERROR(check.AtLeast("hidden_size", hidden_size, 1));
  RETURN_IF_ERROR(check.PositiveFloat("rms_norm_eps", rms_norm_eps));
  RETURN_IF_ERROR(check.AtLeast("attn_res_block_size", attn_res_block_size, 0));
  RETURN_IF_ERROR(ValidateLayerLists(*this, check));
  RETURN_IF_ERROR(ValidateAttention(*this, check));
  RETURN_IF_ERROR(ValidateFfn(*this, check));
  if (vision.has_value()) RETURN_IF_ERROR(ValidateVision(*this));
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source,
                                             const std::string* preprocessor_text,
                                             std::string_view preprocessor_source) {
  try {
    const json root = json::parse(json_text.begin(), json_text.end(), /*cb=*/nullptr,
                                  /*allow_exceptions=*/false);
    if (root.is_discarded()) {
      return absl::InvalidArgumentError(CatAny(source, ": not valid JSON"));
    }
    return ParseParsed(root, source, preprocessor_text, preprocessor_source);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(CatAny(source, ": malformed config: ", e.what()));
  }
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  if (!FileExists(path)) {
    return absl::NotFoundError(
        CatAny("config.json not found in checkpoint directory ", dir, " (", path, ")"));
  }
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  // The image budget of K3's vision tower; the released values apply when the file is absent.
  const std::string preprocessor_path = dir + "/preprocessor_config.json";
  std::optional<std::string> preprocessor;
  if (FileExists(preprocessor_path)) {
    ASSIGN_OR_RETURN(preprocessor, ReadFileToString(preprocessor_path));
  }
  return ParseModelConfig(*text, path, preprocessor ? &*preprocessor : nullptr, preprocessor_path);
}

}  // namespace strata::engine
