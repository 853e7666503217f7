// `--quantization`: a checkpoint's bf16/f32 weights quantised at load.
//
// mxfp4 — routed experts to MXFP4. Routed experts hold most of a sparse MoE's bytes (Kimi-Linear
//   48B-A3B: ~94 %), and every decode step streams the chosen ones; as MXFP4 (4.25 bits a
//   weight: E2M1 codes with one E8M0 scale per 32 inputs, core/mxfp4_quantize.h) they take 0.27×
//   their bf16 memory and are read by the same MXFP4 kernels that run K3's released experts. The
//   format is K3's release recipe (docs/checkpoint.md §6): routed experts only. `strata quantize`
//   writes the same bytes to a checkpoint once, so later loads skip this step.
// int8 — every other Linear a token reads to int8 groups (8.5 bits a weight: one bf16 scale per
//   32 inputs, core/int8_quantize.h; llama.cpp's Q8_0): attention and latent projections, dense
//   and shared-expert MLPs, the LM head, and routed experts not quantised otherwise. Once the
//   experts are MXFP4 these are most of a decode step's bytes (Kimi-Linear-shaped models:
//   ~50–75 %). Kept as stored: the embedding (one row read per token), the MoE routers (top-k
//   choices are sensitive to them; small) and MLA's kv_b_proj (read inside attention, whose
//   kernels take f32/bf16), and any Linear whose input width is not a multiple of 32.
//
// Quantised weights live in buffers of ModelWeights::quantized that the weight copy leaves
// alone; the checkpoint pages they came from are released from this process.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/checkpoint.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"

namespace strata::engine {

struct QuantizationResult {
  int64_t matrices = 0;         // weights quantised
  int64_t source_bytes = 0;     // their bytes as stored (bf16 / f32)
  int64_t quantized_bytes = 0;  // their codes and scales
  int64_t kept_odd_width = 0;   // int8: Linears kept as stored, input width not a multiple of 32
};

// The checkpoint name of a routed expert's weight: part "w1" (gate), "w3" (up) or "w2" (down).
std::string RoutedExpertWeightName(const ModelConfig& cfg, int64_t layer, int64_t expert,
                                   std::string_view part);

// InvalidArgument naming `tensor` unless its input width is a whole number of MXFP4 groups.
absl::Status CheckMxfp4Width(const std::string& tensor, int64_t in_features);

// Quantises `tensor`, a [rows, cols] matrix of dtype kF32 or kBF16 (cols a multiple of 32), into
// packed [rows, cols/2] and scales [rows, cols/32], rows spread over the thread pool.
// InvalidArgument naming the tensor and the first row holding an infinite or NaN value (the
// outputs then unspecified).
absl::Status QuantizeMxfp4Matrix(const std::string& tensor, DType dtype, const void* values,
                                 int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales);

// The same for int8 groups of 32 (core/int8_quantize.h): codes [rows, cols], bf16 scales
// [rows, cols/32].
absl::Status QuantizeInt8Matrix(const std::string& tensor, DType dtype, const void* values,
                                int64_t rows, int64_t cols, int8_t* codes, uint16_t* scales);

// The Linears `--quantization int8` turns into int8 (see the header): every one stored as bf16 or
// f32 but the embedding, the MoE routers, MLA's kv_b_proj and the routed experts outside
// `routed_experts` (when non-empty); one whose input width is not a multiple of 32 is kept and
// counted in *kept_odd_width.
std::vector<Linear*> Int8Targets(ModelWeights* weights, const std::vector<bool>& routed_experts,
                                 int64_t* kept_odd_width);

// Checkpoint tensor names by the address of their bytes (a Linear used in place maps to its
// tensor; one converted at load to none).
std::map<const void*, std::string> TensorNamesByData(const Checkpoint& ckpt);

// Quantises every routed-expert Linear of `weights` stored as bf16 or f32 to MXFP4 in a new
// buffer of `weights->quantized` (on huge pages) and points it there; MXFP4 ones stay.
// With `routed_experts` non-empty only experts e with routed_experts[e] are quantised (expert
// parallelism: a process's share; the rest are never read here). The checkpoint pages of each
// source are released from this process once it is quantised (engine/weight_copy.h).
// Errors, naming the tensor: an input width that is not a multiple of 32 (the MXFP4 group), a
// value that is infinite or NaN; and the buffer not fitting in the host's available memory.
absl::StatusOr<QuantizationResult> QuantizeRoutedExperts(const ModelConfig& cfg,
                                                         ModelWeights* weights,
                                                         const std::vector<bool>& routed_experts);

// `--quantization int8`: the Linears named in the header, stored as bf16 or f32, to int8 groups
// in a new buffer of `weights->quantized`; routed experts only those in `routed_experts` (when
// non-empty). `ckpt` names tensors in errors: a value that is infinite or NaN, and the buffer not
// fitting in the host's available memory.
absl::StatusOr<QuantizationResult> QuantizeLinearsInt8(const Checkpoint& ckpt,
                                                       ModelWeights* weights,
                                                       const std::vector<bool>& routed_experts);

}  // namespace strata::engine
