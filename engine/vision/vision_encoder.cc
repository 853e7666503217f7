#include "engine/vision/vision_encoder.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/status.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/vit.h"

namespace strata::engine {
namespace {

constexpr char kTower[] = "vision_tower.";
constexpr char kProjector[] = "mm_projector.";

absl::StatusOr<VisionBlockWeights> LoadBlock(const Checkpoint& ckpt, const VisionConfig& c, int i) {
  const std::string base = absl::StrCat(kTower, "encoder.blocks.", i, ".");
  const int64_t d = c.hidden_size, q = c.qkv_hidden_size, inter = c.intermediate_size;
  VisionBlockWeights b;
  ASSIGN_OR_RETURN(b.norm0, LoadVector(ckpt, base + "norm0.weight", Shape{d}));
  ASSIGN_OR_RETURN(b.norm1, LoadVector(ckpt, base + "norm1.weight", Shape{d}));
  ASSIGN_OR_RETURN(b.wqkv, LoadLinear(ckpt, base + "wqkv.weight", 3 * q, d));
  ASSIGN_OR_RETURN(b.wo, LoadLinear(ckpt, base + "wo.weight", d, q));
  ASSIGN_OR_RETURN(b.fc0, LoadLinear(ckpt, base + "mlp.fc0.weight", inter, d));
  ASSIGN_OR_RETURN(b.fc1, LoadLinear(ckpt, base + "mlp.fc1.weight", d, inter));
  return b;
}

// x = RMSNorm(x) · weight with the tower's eps, rows of width d, into y.
void Norm(const float* x, int64_t rows, int64_t d, const std::vector<float>& weight, float eps,
          float* y) {
  kernels::cpu::RmsNorm(x, rows, d, weight.data(), eps, y);
}

void AddInto(const float* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

absl::StatusOr<VisionWeights> LoadVisionWeights(const Checkpoint& ckpt, const VisionConfig& c) {
  const int64_t d = c.hidden_size, p = c.patch_size, t = c.text_hidden_size;
  const int64_t merged = int64_t{c.merge_size()} * c.mm_hidden_size;
  VisionWeights w;
  ASSIGN_OR_RETURN(w.patch_embed, LoadLinear(ckpt, absl::StrCat(kTower, "patch_embed.proj.weight"),
                                             Shape{d, 3, p, p}, d, 3 * p * p));
  ASSIGN_OR_RETURN(w.pos_emb, LoadVector(ckpt, absl::StrCat(kTower, "patch_embed.pos_emb.weight"),
                                         Shape{c.pos_emb_height, c.pos_emb_width, d}));
  for (int i = 0; i < c.num_layers; ++i) {
    ASSIGN_OR_RETURN(VisionBlockWeights block, LoadBlock(ckpt, c, i));
    w.blocks.push_back(std::move(block));
  }
  ASSIGN_OR_RETURN(
      w.final_norm,
      LoadVector(ckpt, absl::StrCat(kTower, "encoder.final_layernorm.weight"), Shape{d}));
  ASSIGN_OR_RETURN(w.proj0,
                   LoadLinear(ckpt, absl::StrCat(kProjector, "proj.0.weight"), merged, merged));
  ASSIGN_OR_RETURN(w.proj2, LoadLinear(ckpt, absl::StrCat(kProjector, "proj.2.weight"), t, merged));
  ASSIGN_OR_RETURN(w.post_norm,
                   LoadVector(ckpt, absl::StrCat(kProjector, "post_norm.weight"), Shape{t}));
  return w;
}

std::vector<float> VisionEncoder::Encode(const media::ImagePatches& image,
                                         const BeforeBlock& before_block) const {
  const VisionConfig& c = config_;
  const int64_t n = image.num_patches(), d = c.hidden_size, q = c.qkv_hidden_size;
  const int64_t inter = c.intermediate_size;
  CHECK_EQ(static_cast<int64_t>(image.patches.size()), n * 3 * c.patch_size * c.patch_size);
  CHECK(c.merge_height == 2 && c.merge_width == 2 && image.grid_height % 2 == 0 &&
        image.grid_width % 2 == 0)
      << image.grid_height << "x" << image.grid_width << " patches";
  // Patch embedding and the position table resized to the grid.
  std::vector<float> x(static_cast<size_t>(n * d));
  LinearForward(weights_.patch_embed, image.patches.data(), n, x.data());
  kernels::cpu::AddBilinearPositions(weights_.pos_emb.data(), c.pos_emb_height, c.pos_emb_width,
                                     static_cast<int>(d), image.grid_height, image.grid_width,
                                     x.data());
  const kernels::cpu::Rope2dTable rope = kernels::cpu::MakeRope2dTable(
      image.grid_height, image.grid_width, c.head_dim(), c.rope_theta);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
  std::vector<float> normed(x.size()), qkv(static_cast<size_t>(n * 3 * q));
  std::vector<float> attn(static_cast<size_t>(n * q)), hidden(static_cast<size_t>(n * inter));
  std::vector<float> out(x.size());
  for (const VisionBlockWeights& b : weights_.blocks) {
    if (before_block) before_block(n);
    Norm(x.data(), n, d, b.norm0, kVisionRmsNormEps, normed.data());
    LinearForward(b.wqkv, normed.data(), n, qkv.data());
    kernels::cpu::Rope2d(rope, qkv.data(), 3 * q, c.num_heads);      // q
    kernels::cpu::Rope2d(rope, qkv.data() + q, 3 * q, c.num_heads);  // k
    kernels::cpu::VitAttention(qkv.data(), qkv.data() + q, qkv.data() + 2 * q, 3 * q, n,
                               c.num_heads, c.head_dim(), scale, attn.data());
    LinearForward(b.wo, attn.data(), n, out.data());
    AddInto(out.data(), n * d, x.data());
    Norm(x.data(), n, d, b.norm1, kVisionRmsNormEps, normed.data());
    LinearForward(b.fc0, normed.data(), n, hidden.data());
    kernels::cpu::GeluTanh(hidden.data(), n * inter);
    LinearForward(b.fc1, hidden.data(), n, out.data());
    AddInto(out.data(), n * d, x.data());
  }
  Norm(x.data(), n, d, weights_.final_norm, kVisionRmsNormEps, x.data());
  // 2×2 merge (the four patches of a window side by side), then the projector.
  const int64_t rows = n / 4, merged_width = 4 * d, t = c.text_hidden_size;
  std::vector<float> merged(static_cast<size_t>(rows * merged_width));
  const int64_t half_w = image.grid_width / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r / half_w, j = r % half_w;
    const int64_t sources[4] = {
        (2 * i) * image.grid_width + 2 * j, (2 * i) * image.grid_width + 2 * j + 1,
        (2 * i + 1) * image.grid_width + 2 * j, (2 * i + 1) * image.grid_width + 2 * j + 1};
    for (int s = 0; s < 4; ++s) {
      std::copy(x.data() + sources[s] * d, x.data() + (sources[s] + 1) * d,
                merged.data() + r * merged_width + s * d);
    }
  }
  std::vector<float> projected(merged.size());
  LinearForward(weights_.proj0, merged.data(), rows, projected.data());
  kernels::cpu::GeluErf(projected.data(), rows * merged_width);
  std::vector<float> result(static_cast<size_t>(rows * t));
  LinearForward(weights_.proj2, projected.data(), rows, result.data());
  Norm(result.data(), rows, t, weights_.post_norm, c.projector_ln_eps, result.data());
  return result;
}

}  // namespace strata::engine
