#include "engine/kda_drafts.h"

#include <cstring>

#include "core/check.h"

namespace strata::engine {

void KdaDraftRows::Reserve(const ModelConfig& cfg, int64_t num_rows) {
  width_ = cfg.kda.projection_size();
  heads_ = cfg.kda.num_heads;
  num_layers_ = cfg.NumKdaLayers();
  num_rows_ = num_rows;
  const auto floats = static_cast<size_t>(num_layers_ * num_rows_ * (4 * width_ + heads_));
  if (data_.size() < floats) data_.resize(floats);
}

size_t KdaDraftRows::LayerOffset(int kda_index) const {
  CHECK(kda_index >= 0 && kda_index < num_layers_);
  return static_cast<size_t>(kda_index * num_rows_ * (4 * width_ + heads_));
}

kernels::cpu::KdaRows KdaDraftRows::Layer(int kda_index) const {
  const float* base = data_.data() + LayerOffset(kda_index);
  const int64_t plane = num_rows_ * width_;
  kernels::cpu::KdaRows rows;
  rows.q = base;
  rows.k = base + plane;
  rows.v = base + 2 * plane;
  rows.f = base + 3 * plane;
  rows.b = base + 4 * plane;
  rows.gate = rows.f;
  return rows;
}

void KdaDraftRows::Save(int kda_index, int64_t row, const kernels::cpu::KdaRows& from,
                        int64_t from_row, int64_t count) {
  CHECK(row >= 0 && count >= 0 && row + count <= num_rows_)
      << "draft rows [" << row << ", " << row + count << ") of " << num_rows_;
  float* to = data_.data() + LayerOffset(kda_index);
  auto copy = [&](const float* src, int64_t width) {
    std::memcpy(to + row * width, src + from_row * width,
                static_cast<size_t>(count * width) * sizeof(float));
    to += num_rows_ * width;  // the next plane
  };
  copy(from.q, width_);
  copy(from.k, width_);
  copy(from.v, width_);
  copy(from.f, width_);
  copy(from.b, heads_);
}

}  // namespace strata::engine
