#include "engine/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "core/status.h"

namespace strata::engine {
namespace {

// Bytes of one column of `w`'s data (fractional for MXFP4: two columns per byte) expressed as
// bytes per 32 columns, and of its scales per 32 columns.
int64_t DataBytesPer32Columns(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return 128;
    case WeightFormat::kBf16:
      return 64;
    case WeightFormat::kMxfp4:
      return 16;
    case WeightFormat::kInt8:
      return 32;
  }
  return 0;
}
int64_t ScaleBytesPer32Columns(WeightFormat format) {
  switch (format) {
    case WeightFormat::kMxfp4:
      return 1;
    case WeightFormat::kInt8:
      return 2;
    default:
      return 0;
  }
}
bool IsQuantized(WeightFormat format) {
  return format == WeightFormat::kMxfp4 || format == WeightFormat::kInt8;
}

// A Linear of `out` × `in` in `format` owning zeroed storage for its data and scales.
Linear OwnedLinear(WeightFormat format, int64_t out, int64_t in) {
  Linear w;
  w.format = format;
  w.out_features = out;
  w.in_features = in;
  const size_t data_bytes = static_cast<size_t>(w.data_bytes());
  const size_t data_padded = (data_bytes + AlignedBuffer::kAlignment - 1) /
                             AlignedBuffer::kAlignment * AlignedBuffer::kAlignment;
  w.owned = AlignedBuffer(std::max<size_t>(1, data_padded + static_cast<size_t>(w.scale_bytes())));
  w.data = w.owned.data();
  if (w.scale_bytes() > 0) w.scales = w.owned.as<uint8_t>() + data_padded;
  return w;
}

std::vector<float> SliceVector(const std::vector<float>& v, int64_t begin, int64_t count) {
  if (v.empty()) return v;
  CHECK_LE(begin + count, static_cast<int64_t>(v.size()));
  return std::vector<float>(v.begin() + begin, v.begin() + begin + count);
}

// `count` rows of `rows_per_unit` per unit (head), units [first, first + units).
Linear SliceUnits(const Linear& w, int64_t rows_per_unit, int64_t first, int64_t units) {
  if (w.empty()) return SliceRows(w, 0, 0);
  return SliceRows(w, first * rows_per_unit, units * rows_per_unit);
}

absl::Status SliceColumnsInPlace(Linear& w, int64_t begin, int64_t count, const char* what) {
  if (w.empty()) return absl::OkStatus();
  absl::StatusOr<Linear> sliced = SliceColumns(w, begin, count);
  if (!sliced.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", sliced.status().message()));
  }
  w = *std::move(sliced);
  return absl::OkStatus();
}

absl::Status ShardKda(const ModelConfig& cfg, TensorParallelShard shard, KdaWeights& k) {
  const int64_t heads = cfg.kda.num_heads / shard.size, hd = cfg.kda.head_dim;
  const int64_t first = int64_t{shard.rank} * heads;
  for (Linear* x : {&k.q_proj, &k.k_proj, &k.v_proj, &k.f_b_proj, &k.g_proj, &k.g_b_proj}) {
    *x = SliceUnits(*x, hd, first, heads);
  }
  k.b_proj = SliceUnits(k.b_proj, 1, first, heads);
  const int64_t kernel = cfg.kda.conv_kernel_size;
  for (std::vector<float>* conv : {&k.q_conv, &k.k_conv, &k.v_conv}) {
    *conv = SliceVector(*conv, first * hd * kernel, heads * hd * kernel);
  }
  k.a_log = SliceVector(k.a_log, first, heads);
  k.dt_bias = SliceVector(k.dt_bias, first * hd, heads * hd);
  return SliceColumnsInPlace(k.o_proj, first * hd, heads * hd, "KDA o_proj");
}

absl::Status ShardMla(const ModelConfig& cfg, TensorParallelShard shard, MlaWeights& m) {
  const MlaConfig& c = cfg.mla;
  const int64_t heads = c.num_heads / shard.size, first = int64_t{shard.rank} * heads;
  m.q_proj = SliceUnits(m.q_proj, c.qk_head_dim(), first, heads);
  m.q_b_proj = SliceUnits(m.q_b_proj, c.qk_head_dim(), first, heads);
  m.kv_b_proj = SliceUnits(m.kv_b_proj, c.qk_nope_head_dim + c.v_head_dim, first, heads);
  m.g_proj = SliceUnits(m.g_proj, c.v_head_dim, first, heads);
  return SliceColumnsInPlace(m.o_proj, first * c.v_head_dim, heads * c.v_head_dim, "MLA o_proj");
}

absl::Status ShardMlp(TensorParallelShard shard, MlpWeights& m, const char* what) {
  if (m.gate_proj.empty()) return absl::OkStatus();
  const ShardRange r = RangeOf(m.gate_proj.out_features, shard);
  m.gate_proj = SliceRows(m.gate_proj, r.begin, r.size());
  m.up_proj = SliceRows(m.up_proj, r.begin, r.size());
  return SliceColumnsInPlace(m.down_proj, r.begin, r.size(), what);
}

}  // namespace

int64_t ShardStride(int64_t total, int size) { return (total + size - 1) / size; }

ShardRange RangeOf(int64_t total, TensorParallelShard shard) {
  const int64_t stride = ShardStride(total, shard.size);
  const int64_t begin = std::min(total, stride * shard.rank);
  return {begin, std::min(total, begin + stride)};
}

absl::Status CheckTensorParallelSplit(const ModelConfig& cfg, int tp_size) {
  if (tp_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tensor-parallel-size ", tp_size, " must be at least 1"));
  }
  auto refuse = [&](int64_t count, const char* what) {
    return absl::InvalidArgumentError(absl::StrCat(count, " ", what,
                                                   " cannot be split over --tensor-parallel-size ",
                                                   tp_size, " (it must divide them)"));
  };
  if (cfg.NumKdaLayers() > 0 && cfg.kda.num_heads % tp_size != 0) {
    return refuse(cfg.kda.num_heads, "KDA heads");
  }
  if (cfg.NumMlaLayers() > 0 && cfg.mla.num_heads % tp_size != 0) {
    return refuse(cfg.mla.num_heads, "MLA heads");
  }
  return absl::OkStatus();
}

ModelConfig ShardConfig(const ModelConfig& cfg, int tp_size) {
  ModelConfig shard = cfg;
  shard.kda.num_heads = cfg.kda.num_heads / tp_size;
  shard.mla.num_heads = cfg.mla.num_heads / tp_size;
  return shard;
}

std::vector<bool> ShardRoutedExperts(int num_experts, TensorParallelShard shard) {
  std::vector<bool> mine(static_cast<size_t>(num_experts), false);
  const int base = num_experts / shard.size, extra = num_experts % shard.size;
  const int begin = shard.rank * base + std::min(shard.rank, extra);
  const int count = base + (shard.rank < extra ? 1 : 0);
  for (int e = begin; e < begin + count; ++e) mine[static_cast<size_t>(e)] = true;
  return mine;
}

Linear SliceRows(const Linear& w, int64_t begin, int64_t count) {
  Linear out;
  if (w.empty()) return out;
  CHECK(begin >= 0 && count >= 0 && begin + count <= w.out_features);
  const int64_t row_bytes = w.data_bytes() / w.out_features;
  const int64_t scale_row_bytes = w.scale_bytes() / w.out_features;
  if (w.owned.size() == 0) {
    out.format = w.format;
    out.out_features = count;
    out.in_features = w.in_features;
    out.data = static_cast<const char*>(w.data) + begin * row_bytes;
    if (w.scales != nullptr) out.scales = w.scales + begin * scale_row_bytes;
    return out;
  }
  out = OwnedLinear(w.format, count, w.in_features);
  std::memcpy(const_cast<void*>(out.data), static_cast<const char*>(w.data) + begin * row_bytes,
              static_cast<size_t>(count * row_bytes));
  if (w.scales != nullptr) {
    std::memcpy(const_cast<uint8_t*>(out.scales), w.scales + begin * scale_row_bytes,
                static_cast<size_t>(count * scale_row_bytes));
  }
  return out;
}

absl::StatusOr<Linear> SliceColumns(const Linear& w, int64_t begin, int64_t count) {
  CHECK(begin >= 0 && count >= 0 && begin + count <= w.in_features);
  if (IsQuantized(w.format) && (begin % 32 != 0 || count % 32 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "columns [", begin, ", ", begin + count, ") of a ",
        w.format == WeightFormat::kInt8 ? "int8" : "MXFP4",
        " weight do not fall on its 32-wide groups (split the checkpoint's bf16 weights instead, "
        "or pick a --tensor-parallel-size that cuts at multiples of 32)"));
  }
  Linear out = OwnedLinear(w.format, w.out_features, count);
  const int64_t data_row = w.data_bytes() / w.out_features;
  const int64_t out_row = out.data_bytes() / w.out_features;
  const int64_t scale_row = w.scale_bytes() / w.out_features;
  const int64_t out_scale_row = out.scale_bytes() / std::max<int64_t>(1, w.out_features);
  // Byte offsets of the column range inside one row (a multiple of 32 columns for quantised
  // formats, so whole bytes and whole scale entries).
  const int64_t data_offset = IsQuantized(w.format) ? begin / 32 * DataBytesPer32Columns(w.format)
                                                    : begin * DataBytesPer32Columns(w.format) / 32;
  const int64_t scale_offset = begin / 32 * ScaleBytesPer32Columns(w.format);
  for (int64_t r = 0; r < w.out_features; ++r) {
    std::memcpy(static_cast<char*>(const_cast<void*>(out.data)) + r * out_row,
                static_cast<const char*>(w.data) + r * data_row + data_offset,
                static_cast<size_t>(out_row));
    if (w.scales != nullptr) {
      std::memcpy(const_cast<uint8_t*>(out.scales) + r * out_scale_row,
                  w.scales + r * scale_row + scale_offset, static_cast<size_t>(out_scale_row));
    }
  }
  return out;
}

absl::Status ShardModelWeights(const ModelConfig& cfg, TensorParallelShard shard, ModelWeights* w) {
  if (!shard.enabled()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckTensorParallelSplit(cfg, shard.size));
  const ShardRange vocab = RangeOf(cfg.vocab_size, shard);
  const bool tied = w->lm_head.data == w->embed.data;
  w->embed = SliceRows(w->embed, vocab.begin, vocab.size());
  w->lm_head = tied ? SliceRows(w->embed, 0, vocab.size())
                    : SliceRows(w->lm_head, vocab.begin, vocab.size());
  for (size_t l = 0; l < w->layers.size(); ++l) {
    LayerWeights& layer = w->layers[l];
    const std::string where = absl::StrCat("layer ", l);
    if (layer.kda) RETURN_IF_ERROR(ShardKda(cfg, shard, *layer.kda));
    if (layer.mla) RETURN_IF_ERROR(ShardMla(cfg, shard, *layer.mla));
    if (layer.dense) RETURN_IF_ERROR(ShardMlp(shard, *layer.dense, "dense MLP down_proj"));
    if (layer.moe) {
      MoeWeights& m = *layer.moe;
      RETURN_IF_ERROR(ShardMlp(shard, m.shared, "shared experts' down_proj"));
      if (!m.latent_up.empty()) {
        const ShardRange cols = RangeOf(cfg.hidden_size, shard);
        m.latent_up = SliceRows(m.latent_up, cols.begin, cols.size());
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace strata::engine
