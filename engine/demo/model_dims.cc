#include "engine/demo/model_dims.h"

#include <algorithm>
#include <functional>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "engine/demo/demo_tokenizer.h"

namespace strata::engine::demo {
namespace {

using Setter = std::function<absl::Status(ModelDims&, const std::string&)>;

// ---- presets ---------------------------------------------------------------------------------

// Tiny test model (docs/checkpoint.md families at toy size): hidden 96 (not a power of two), 6
// layers KDA,KDA,KDA,MLA,KDA,MLA, 2 KDA heads × 32, 3 MLA heads (d_n 16, d_r 8, d_v 16).
ModelDims TinyDims(bool k3) {
  ModelDims d;
  d.k3 = k3;
  d.vocab = 512;
  d.hidden = 96;
  d.layers = 6;
  d.kda_heads = 2;
  d.kda_head_dim = 32;
  d.mla_heads = 3;
  d.kv_lora = 32;
  d.qk_nope = 16;
  d.qk_rope = 8;
  d.v_head = 16;
  d.dense_intermediate = 160;
  d.experts = 8;
  d.topk = 2;
  d.expert_intermediate = 32;
  // The smallest structurally complete vision tower (used with --vision): D 32, qkv 48 = 3
  // heads × 16 (head_dim a multiple of 4 for the 2-D RoPE), MLP 64, 2 blocks, an 8×8 position
  // table (interpolated for any other grid), at most 1024 patches (256 rows) per image.
  d.vision_hidden = 32;
  d.vision_qkv = 48;
  d.vision_heads = 3;
  d.vision_intermediate = 64;
  d.vision_layers = 2;
  d.vision_pos_emb = 8;
  d.vision_in_patch_limit = 1024;
  if (k3) {
    d.gate_lower_bound = -5.0;
    d.full_rank_gate = true;
    d.q_lora = 48;
    d.mla_gate = true;
    d.shared_experts = 2;
    d.latent = 64;
    d.attn_res_block = 2;  // blocks start at layers 0, 2, 4: several blocks in six layers
  } else {
    d.shared_experts = 1;
    d.routed_scaling = 2.446;
    d.situ = false;
  }
  return d;
}

// Demo model (README's run command), K3 by default: ~32M parameters, vocab 8192, hidden 256,
// and (K3) a small vision tower so that images work out of the box: D 128, qkv 128 = 4 heads ×
// 32, MLP 256, 2 blocks, a 16×16 position table, at most 4096 patches (1024 rows) per image.
ModelDims DemoDims(bool k3) {
  ModelDims d = TinyDims(k3);
  d.vocab = 8192;
  d.hidden = 256;
  d.layers = 8;
  d.kda_heads = 4;
  d.kda_head_dim = 64;
  d.mla_heads = 4;
  d.kv_lora = 128;
  d.qk_nope = 64;
  d.qk_rope = 32;
  d.v_head = 64;
  d.dense_intermediate = 768;
  d.experts = 64;
  d.topk = 6;
  d.expert_intermediate = 128;
  d.vision = k3;
  d.vision_hidden = 128;
  d.vision_qkv = 128;
  d.vision_heads = 4;
  d.vision_intermediate = 256;
  d.vision_layers = 2;
  d.vision_pos_emb = 16;
  d.vision_in_patch_limit = 4096;
  if (k3) {
    d.q_lora = 192;
    d.latent = 128;
    d.attn_res_block = 4;
  }
  return d;
}

// Benchmark model: the Kimi-Linear shape of the peer scripts' make_bench_model.py --preset bench
// (hidden 1024, 12 layers = 9 KDA + 3 MLA, 16 heads × 128 for both mixers, kv_lora 512, 64
// experts top-8 × 256 + 1 shared, dense layer 0 2816, vocab 32000; 744M parameters).
ModelDims BenchDims(bool k3) {
  ModelDims d = TinyDims(k3);
  d.vocab = 32000;
  d.hidden = 1024;
  d.layers = 12;
  d.kda_heads = 16;
  d.kda_head_dim = 128;
  d.mla_heads = 16;
  d.kv_lora = 512;
  d.qk_nope = 128;
  d.qk_rope = 64;
  d.v_head = 128;
  d.dense_intermediate = 2816;
  d.experts = 64;
  d.topk = 8;
  d.shared_experts = 1;
  d.expert_intermediate = 256;
  d.max_position = 4096;
  if (k3) {
    d.q_lora = 512;
    d.latent = 512;
    d.attn_res_block = 4;
  }
  return d;
}

// ---- overrides -------------------------------------------------------------------------------

absl::Status BadValue(const std::string& key, const std::string& value, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("--set ", key, "=", value, ": ", problem));
}

Setter IntField(int ModelDims::*field, int min_value) {
  return [field, min_value](ModelDims& d, const std::string& value) -> absl::Status {
    int parsed = 0;
    if (!absl::SimpleAtoi(value, &parsed) || parsed < min_value) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected an integer >= ", min_value, ", got '", value, "'"));
    }
    d.*field = parsed;
    return absl::OkStatus();
  };
}

Setter DoubleField(double ModelDims::*field) {
  return [field](ModelDims& d, const std::string& value) -> absl::Status {
    double parsed = 0.0;
    if (!absl::SimpleAtod(value, &parsed)) {
      return absl::InvalidArgumentError(absl::StrCat("expected a number, got '", value, "'"));
    }
    d.*field = parsed;
    return absl::OkStatus();
  };
}

Setter BoolField(bool ModelDims::*field) {
  return [field](ModelDims& d, const std::string& value) -> absl::Status {
    bool parsed = false;
    if (!absl::SimpleAtob(value, &parsed)) {
      return absl::InvalidArgumentError(absl::StrCat("expected true/false, got '", value, "'"));
    }
    d.*field = parsed;
    return absl::OkStatus();
  };
}

absl::Status SetFullAttn(ModelDims& d, const std::string& value) {
  d.full_attn_layers.clear();
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    int layer = 0;
    if (!absl::SimpleAtoi(item, &layer)) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected comma-separated 1-based layer numbers, got '", value, "'"));
    }
    d.full_attn_layers.push_back(layer);
  }
  return absl::OkStatus();
}

absl::Status SetActivation(ModelDims& d, const std::string& value) {
  if (value != "situ" && value != "silu") {
    return absl::InvalidArgumentError(absl::StrCat("expected situ or silu, got '", value, "'"));
  }
  d.situ = value == "situ";
  return absl::OkStatus();
}

const std::map<std::string, Setter>& Setters() {
  static const auto* setters = new std::map<std::string, Setter>{
      {"vocab",
       [](ModelDims& d, const std::string& v) -> absl::Status {
         int vocab = 0;
         if (!absl::SimpleAtoi(v, &vocab) || vocab < 16) {
           return absl::InvalidArgumentError("expected an integer >= 16, got '" + v + "'");
         }
         d.vocab = vocab;
         return absl::OkStatus();
       }},
      {"hidden", IntField(&ModelDims::hidden, 1)},
      {"layers", IntField(&ModelDims::layers, 1)},
      {"full_attn", SetFullAttn},
      {"kda_heads", IntField(&ModelDims::kda_heads, 1)},
      {"kda_head_dim", IntField(&ModelDims::kda_head_dim, 1)},
      {"conv_kernel", IntField(&ModelDims::conv_kernel, 1)},
      {"gate_lower_bound", DoubleField(&ModelDims::gate_lower_bound)},
      {"full_rank_gate", BoolField(&ModelDims::full_rank_gate)},
      {"mla_heads", IntField(&ModelDims::mla_heads, 1)},
      {"q_lora", IntField(&ModelDims::q_lora, 0)},
      {"kv_lora", IntField(&ModelDims::kv_lora, 1)},
      {"qk_nope", IntField(&ModelDims::qk_nope, 1)},
      {"qk_rope", IntField(&ModelDims::qk_rope, 0)},
      {"v_head", IntField(&ModelDims::v_head, 1)},
      {"mla_gate", BoolField(&ModelDims::mla_gate)},
      {"dense_intermediate", IntField(&ModelDims::dense_intermediate, 1)},
      {"first_dense", IntField(&ModelDims::first_dense, 0)},
      {"moe_layer_freq", IntField(&ModelDims::moe_layer_freq, 1)},
      {"experts", IntField(&ModelDims::experts, 1)},
      {"topk", IntField(&ModelDims::topk, 1)},
      {"shared_experts", IntField(&ModelDims::shared_experts, 0)},
      {"expert_intermediate", IntField(&ModelDims::expert_intermediate, 1)},
      {"latent", IntField(&ModelDims::latent, 0)},
      {"groups", IntField(&ModelDims::groups, 1)},
      {"topk_group", IntField(&ModelDims::topk_group, 1)},
      {"routed_scaling", DoubleField(&ModelDims::routed_scaling)},
      {"renormalize", BoolField(&ModelDims::renormalize)},
      {"act", SetActivation},
      {"situ_beta", DoubleField(&ModelDims::situ_beta)},
      {"situ_linear_beta", DoubleField(&ModelDims::situ_linear_beta)},
      {"attn_res_block", IntField(&ModelDims::attn_res_block, 0)},
      {"rms_norm_eps", DoubleField(&ModelDims::rms_norm_eps)},
      {"tie_embeddings", BoolField(&ModelDims::tie_embeddings)},
      {"vision_hidden", IntField(&ModelDims::vision_hidden, 1)},
      {"vision_qkv", IntField(&ModelDims::vision_qkv, 4)},
      {"vision_heads", IntField(&ModelDims::vision_heads, 1)},
      {"vision_intermediate", IntField(&ModelDims::vision_intermediate, 1)},
      {"vision_layers", IntField(&ModelDims::vision_layers, 1)},
      {"vision_pos_emb", IntField(&ModelDims::vision_pos_emb, 1)},
      {"vision_in_patch_limit", IntField(&ModelDims::vision_in_patch_limit, 4)},
  };
  return *setters;
}

// ---- validation ------------------------------------------------------------------------------

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError("invalid model dimensions: " + message);
}

absl::Status ValidateLayers(const ModelDims& d) {
  std::set<int> seen;
  for (int layer : d.full_attn_layers) {
    if (layer < 1 || layer > d.layers) {
      return Invalid(absl::StrCat("full_attn layer ", layer, " outside 1..", d.layers));
    }
    if (!seen.insert(layer).second) return Invalid(absl::StrCat("full_attn repeats ", layer));
  }
  if (d.first_dense > d.layers) {
    return Invalid(absl::StrCat("first_dense ", d.first_dense, " > layers ", d.layers));
  }
  return absl::OkStatus();
}

absl::Status ValidateMoe(const ModelDims& d) {
  if (d.topk > d.experts) {
    return Invalid(absl::StrCat("topk ", d.topk, " > experts ", d.experts));
  }
  if (d.experts % d.groups != 0) {
    return Invalid(absl::StrCat("experts ", d.experts, " not divisible by groups ", d.groups));
  }
  if (d.topk_group > d.groups) {
    return Invalid(absl::StrCat("topk_group ", d.topk_group, " > groups ", d.groups));
  }
  if (d.groups > 1 && d.experts / d.groups < 2) {
    return Invalid("grouped routing needs at least 2 experts per group");
  }
  if (d.topk > d.topk_group * (d.experts / d.groups)) {
    return Invalid(absl::StrCat("topk ", d.topk, " > experts in the kept groups (",
                                d.topk_group * (d.experts / d.groups), ")"));
  }
  if (d.mxfp4) {
    if (!d.k3) return Invalid("--mxfp4 applies to the K3 family only");
    if (d.expert_input() % 32 != 0 || d.expert_intermediate % 32 != 0) {
      return Invalid(absl::StrCat("MXFP4 needs the expert input width (", d.expert_input(),
                                  ") and expert_intermediate (", d.expert_intermediate,
                                  ") to be multiples of 32"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateVision(const ModelDims& d) {
  if (!d.vision) return absl::OkStatus();
  if (!d.k3) return Invalid("--vision applies to the K3 family only");
  if (d.vision_qkv % d.vision_heads != 0 || (d.vision_qkv / d.vision_heads) % 4 != 0) {
    return Invalid(absl::StrCat("vision_qkv ", d.vision_qkv, " must be vision_heads (",
                                d.vision_heads,
                                ") × a head_dim that is a multiple of 4 (the 2-D RoPE)"));
  }
  return absl::OkStatus();
}

absl::Status Validate(const ModelDims& d) {
  RETURN_IF_ERROR(ValidateLayers(d));
  RETURN_IF_ERROR(ValidateVision(d));
  RETURN_IF_ERROR(ValidateMoe(d));
  if (d.gate_lower_bound > 0.0) return Invalid("gate_lower_bound must be < 0 (or 0: absent)");
  if (d.situ_beta <= 0.0 || d.situ_linear_beta < 0.0) {
    return Invalid("situ_beta must be > 0 and situ_linear_beta >= 0 (0: absent)");
  }
  if (d.routed_scaling <= 0.0 || d.rms_norm_eps <= 0.0) {
    return Invalid("routed_scaling and rms_norm_eps must be > 0");
  }
  return absl::OkStatus();
}

}  // namespace

int64_t ModelDims::media_placeholder_id() const {
  if (vocab < kDemoNumSpecialTokens) return vocab - 13;
  return vocab - kDemoNumSpecialTokens + kK3MediaPadIndex;
}

bool ModelDims::IsMla(int layer) const {
  return std::find(full_attn_layers.begin(), full_attn_layers.end(), layer + 1) !=
         full_attn_layers.end();
}

std::vector<int> DefaultFullAttnLayers(int layers) {
  std::vector<int> full;
  for (int l = 1; l <= layers; ++l) {
    if (l % 4 == 0 || l == layers) full.push_back(l);
  }
  return full;
}

std::vector<std::string> OverrideKeys() {
  std::vector<std::string> keys;
  for (const auto& [key, setter] : Setters()) keys.push_back(key);
  return keys;
}

absl::StatusOr<ModelDims> ResolveDims(const std::string& family, const std::string& preset,
                                      const std::map<std::string, std::string>& overrides,
                                      bool mxfp4_experts, bool vision) {
  if (!family.empty() && family != "k3" && family != "kimi-linear") {
    return absl::InvalidArgumentError("unknown family '" + family + "' (k3 | kimi-linear)");
  }
  ModelDims dims;
  if (preset == "tiny") {
    dims = TinyDims(family != "kimi-linear");
  } else if (preset == "demo") {
    dims = DemoDims(family != "kimi-linear");
  } else if (preset == "bench") {
    dims = BenchDims(family == "k3");
  } else {
    return absl::InvalidArgumentError("unknown preset '" + preset + "' (tiny | demo | bench)");
  }
  dims.mxfp4 = mxfp4_experts;
  dims.vision = dims.vision || vision;
  if (dims.vision && !dims.k3) return Invalid("--vision applies to the K3 family only");
  for (const auto& [key, value] : overrides) {
    if (absl::StartsWith(key, "vision_") && !dims.vision) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--set ", key, ": the vision tower's sizes need --vision (K3; the demo preset has it)"));
    }
    auto it = Setters().find(key);
    if (it == Setters().end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown --set key '", key, "'; keys: ", absl::StrJoin(OverrideKeys(), ", ")));
    }
    absl::Status status = it->second(dims, value);
    if (!status.ok()) return BadValue(key, value, status.message());
  }
  if (!overrides.contains("full_attn")) dims.full_attn_layers = DefaultFullAttnLayers(dims.layers);
  std::sort(dims.full_attn_layers.begin(), dims.full_attn_layers.end());
  RETURN_IF_ERROR(Validate(dims));
  return dims;
}

}  // namespace strata::engine::demo
