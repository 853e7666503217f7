#include "engine/vision/vision_config.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/json_key_reader.h"

namespace strata::engine {
namespace {

using json = nlohmann::json;

// A string key that Strata implements for one value only: absent (the released value is
// assumed) or exactly `supported`.
absl::Status RequireString(const KeyReader& reader, std::string_view key,
                           std::string_view supported, std::string_view what) {
  std::string value(supported);
  RETURN_IF_ERROR(reader.String(key, &value, /*required=*/false));
  if (value == supported) return absl::OkStatus();
  return reader.Error(key, CatAny("must be \"", supported, "\" (", what, "), found \"",
                                  value.substr(0, kMaxStringInMessage), "\""));
}

// A bias switch: Strata's vision tower has no biases (the release has none).
absl::Status RequireNoBias(const KeyReader& reader, std::string_view key) {
  bool value = false;
  RETURN_IF_ERROR(reader.Bool(key, &value, /*required=*/false));
  if (!value) return absl::OkStatus();
  return reader.Error(key,
                      "must be false, found true: Strata's vision tower has no biases (the "
                      "released K3 has none) and refuses a checkpoint that asks for them");
}

absl::Status ParseTower(const KeyReader& v, VisionConfig* config) {
  RETURN_IF_ERROR(v.Int("patch_size", &config->patch_size, false));
  RETURN_IF_ERROR(v.Int("vt_hidden_size", &config->hidden_size, true));
  RETURN_IF_ERROR(v.Int("qkv_hidden_size", &config->qkv_hidden_size, true));
  RETURN_IF_ERROR(v.Int("vt_num_attention_heads", &config->num_heads, true));
  RETURN_IF_ERROR(v.Int("vt_intermediate_size", &config->intermediate_size, true));
  RETURN_IF_ERROR(v.Int("vt_num_hidden_layers", &config->num_layers, true));
  RETURN_IF_ERROR(v.Int("init_pos_emb_height", &config->pos_emb_height, false));
  RETURN_IF_ERROR(v.Int("init_pos_emb_width", &config->pos_emb_width, false));
  RETURN_IF_ERROR(RequireString(v, "norm_type", "rmsnorm", "the only normalisation implemented"));
  RETURN_IF_ERROR(RequireNoBias(v, "attn_bias"));
  RETURN_IF_ERROR(RequireNoBias(v, "linear_bias"));
  RETURN_IF_ERROR(RequireNoBias(v, "patch_embed_proj_bias"));
  RETURN_IF_ERROR(RequireString(v, "pos_emb_interpolation_mode", "bilinear",
                                "the only position-table interpolation implemented"));
  RETURN_IF_ERROR(RequireString(v, "activation_func", "gelu_pytorch_tanh",
                                "the encoder MLP's activation as implemented"));
  return absl::OkStatus();
}

absl::Status ParseProjector(const KeyReader& v, VisionConfig* config) {
  std::vector<int> merge = {config->merge_height, config->merge_width};
  RETURN_IF_ERROR(v.IntList("merge_kernel_size", &merge, false));
  if (merge.size() != 2) {
    return v.Error(
        "merge_kernel_size",
        CatAny("must be a list of 2 integers [height, width], found ", merge.size(), " entries"));
  }
  config->merge_height = merge[0];
  config->merge_width = merge[1];
  RETURN_IF_ERROR(
      RequireString(v, "merge_type", "sd2_tpool", "the 2×2 spatial merge as implemented"));
  RETURN_IF_ERROR(RequireString(v, "mm_projector_type", "patchmergerv2",
                                "K3's projector: no pre-norm, post_norm after proj.2"));
  RETURN_IF_ERROR(RequireString(v, "projector_hidden_act", "gelu",
                                "the projector's exact GELU as implemented"));
  RETURN_IF_ERROR(v.Int("mm_hidden_size", &config->mm_hidden_size, true));
  RETURN_IF_ERROR(v.Int("text_hidden_size", &config->text_hidden_size, true));
  RETURN_IF_ERROR(v.Float("projector_ln_eps", &config->projector_ln_eps, false));
  return absl::OkStatus();
}

absl::Status ReadTriple(const KeyReader& p, std::string_view key, std::array<float, 3>* out) {
  std::vector<float> values(out->begin(), out->end());
  RETURN_IF_ERROR(p.FloatList(key, &values, false));
  if (values.size() != 3) {
    return p.Error(key, CatAny("must list 3 numbers (R, G, B), found ", values.size()));
  }
  for (int c = 0; c < 3; ++c) (*out)[c] = values[c];
  return absl::OkStatus();
}

// An integer the preprocessor file may repeat from vision_config; it must then agree.
absl::Status RequireAgreement(const KeyReader& p, std::string_view key, int expected,
                              std::string_view vision_key) {
  const json* value = p.Find(key);
  if (value == nullptr) return absl::OkStatus();
  // merge_kernel_size may be one integer (a square kernel) or [height, width].
  std::vector<int> values;
  if (value->is_array()) {
    RETURN_IF_ERROR(p.IntList(key, &values, true));
  } else {
    int single = 0;
    RETURN_IF_ERROR(p.Int(key, &single, true));
    values.push_back(single);
  }
  for (int v : values) {
    if (v != expected) {
      return p.Error(key, CatAny("must agree with config.json's vision_config.", vision_key, " = ",
                                 expected, ", found ", v));
    }
  }
  return absl::OkStatus();
}

absl::Status ParsePreprocessor(const json& root, std::string_view source, VisionConfig* config) {
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        CatAny(source, ": expected a JSON object, found ", DescribeJson(root)));
  }
  const json* scope = &root;
  std::string prefix;
  auto nested = root.find("media_proc_cfg");
  if (!root.contains("in_patch_limit") && nested != root.end() && nested->is_object()) {
    scope = &*nested;
    prefix = "media_proc_cfg.";
  }
  const KeyReader p(*scope, source, prefix);
  RETURN_IF_ERROR(p.Int64("in_patch_limit", &config->in_patch_limit, false));
  RETURN_IF_ERROR(p.Int("patch_limit_on_one_side", &config->patch_limit_on_one_side, false));
  RETURN_IF_ERROR(ReadTriple(p, "image_mean", &config->image_mean));
  RETURN_IF_ERROR(ReadTriple(p, "image_std", &config->image_std));
  RETURN_IF_ERROR(RequireAgreement(p, "patch_size", config->patch_size, "patch_size"));
  if (config->merge_height == config->merge_width) {
    RETURN_IF_ERROR(
        RequireAgreement(p, "merge_kernel_size", config->merge_height, "merge_kernel_size"));
  }
  return absl::OkStatus();
}

absl::Status VisionError(std::string_view source, std::string_view key, std::string_view message) {
  return absl::InvalidArgumentError(CatAny(source, ": vision_config.", key, " ", message));
}

absl::Status Positive(std::string_view source, std::string_view key, int64_t value) {
  if (value >= 1) return absl::OkStatus();
  return VisionError(source, key, CatAny("must be positive, found ", value));
}

absl::Status FitsInt(std::string_view source, std::string_view what, int64_t value) {
  if (value <= std::numeric_limits<int>::max()) return absl::OkStatus();
  return VisionError(source, what, CatAny("= ", value, " does not fit in a 32-bit int"));
}

absl::Status ValidateSizes(const VisionConfig& c, std::string_view source) {
  RETURN_IF_ERROR(Positive(source, "patch_size", c.patch_size));
  RETURN_IF_ERROR(Positive(source, "vt_hidden_size", c.hidden_size));
  RETURN_IF_ERROR(Positive(source, "qkv_hidden_size", c.qkv_hidden_size));
  RETURN_IF_ERROR(Positive(source, "vt_num_attention_heads", c.num_heads));
  RETURN_IF_ERROR(Positive(source, "vt_intermediate_size", c.intermediate_size));
  RETURN_IF_ERROR(Positive(source, "vt_num_hidden_layers", c.num_layers));
  RETURN_IF_ERROR(Positive(source, "init_pos_emb_height", c.pos_emb_height));
  RETURN_IF_ERROR(Positive(source, "init_pos_emb_width", c.pos_emb_width));
  if (c.qkv_hidden_size % c.num_heads != 0) {
    return VisionError(source, "qkv_hidden_size",
                       CatAny("must be divisible by vt_num_attention_heads = ", c.num_heads,
                              ", found ", c.qkv_hidden_size));
  }
  if (c.head_dim() % 4 != 0) {
    return VisionError(source, "qkv_hidden_size",
                       CatAny("/ vt_num_attention_heads (head_dim) must be a multiple of 4 (the "
                              "2-D RoPE rotates groups of 4), found ",
                              c.qkv_hidden_size, " / ", c.num_heads, " = ", c.head_dim()));
  }
  if (c.merge_height != 2 || c.merge_width != 2) {
    return VisionError(source, "merge_kernel_size",
                       CatAny("must be [2, 2] (merge_type sd2_tpool), found [", c.merge_height,
                              ", ", c.merge_width, "]"));
  }
  if (c.mm_hidden_size != c.hidden_size) {
    return VisionError(source, "mm_hidden_size",
                       CatAny("must equal vt_hidden_size = ", c.hidden_size,
                              " (the projector's input), found ", c.mm_hidden_size));
  }
  if (!(std::isfinite(c.projector_ln_eps) && c.projector_ln_eps > 0.0f)) {
    return VisionError(source, "projector_ln_eps",
                       CatAny("must be a positive finite number, found ", c.projector_ln_eps));
  }
  RETURN_IF_ERROR(FitsInt(source, "qkv_hidden_size * 3", int64_t{3} * c.qkv_hidden_size));
  RETURN_IF_ERROR(
      FitsInt(source, "vt_hidden_size * merge size (4)", int64_t{c.merge_size()} * c.hidden_size));
  RETURN_IF_ERROR(FitsInt(source, "vt_hidden_size * 3 * patch_size^2",
                          int64_t{3} * c.patch_size * c.patch_size * c.hidden_size));
  return absl::OkStatus();
}

absl::Status ValidateBudget(const VisionConfig& c) {
  constexpr std::string_view kFile = "preprocessor_config.json";
  if (c.in_patch_limit < c.merge_size()) {
    return absl::InvalidArgumentError(CatAny(kFile, ": in_patch_limit must be at least ",
                                             c.merge_size(), " (one merged row), found ",
                                             c.in_patch_limit));
  }
  if (c.patch_limit_on_one_side < c.merge_height ||
      int64_t{c.patch_limit_on_one_side} * c.patch_size > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(CatAny(
        kFile, ": patch_limit_on_one_side must be at least ", c.merge_height,
        " and its pixels (× patch_size) fit in a 32-bit int, found ", c.patch_limit_on_one_side));
  }
  for (int ch = 0; ch < 3; ++ch) {
    if (!std::isfinite(c.image_mean[ch]) ||
        !(std::isfinite(c.image_std[ch]) && c.image_std[ch] > 0.0f)) {
      return absl::InvalidArgumentError(
          CatAny(kFile, ": image_std must be positive and image_mean finite, found channel ", ch,
                 " mean ", c.image_mean[ch], " std ", c.image_std[ch]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<VisionConfig> ParseVisionConfig(const json& vision_config,
                                               const json* preprocessor_config,
                                               std::string_view source,
                                               std::string_view preprocessor_source) {
  const KeyReader v(vision_config, source, "vision_config.");
  VisionConfig config;
  RETURN_IF_ERROR(ParseTower(v, &config));
  RETURN_IF_ERROR(ParseProjector(v, &config));
  if (preprocessor_config != nullptr) {
    RETURN_IF_ERROR(ParsePreprocessor(*preprocessor_config, preprocessor_source, &config));
  }
  return config;
}

absl::Status ValidateVisionConfig(const VisionConfig& config, int text_hidden_size,
                                  std::string_view source) {
  RETURN_IF_ERROR(ValidateSizes(config, source));
  if (config.text_hidden_size != text_hidden_size) {
    return VisionError(source, "text_hidden_size",
                       CatAny("must equal the language model's hidden_size = ", text_hidden_size,
                              ", found ", config.text_hidden_size));
  }
  return ValidateBudget(config);
}

}  // namespace strata::engine
