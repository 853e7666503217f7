// `--quantization mxfp4`: a checkpoint's bf16 routed experts quantised to MXFP4 at load.
//
// Routed experts hold most of a sparse MoE's bytes (Kimi-Linear 48B-A3B: ~94 %), and every
// decode step streams the chosen ones; as MXFP4 (4.25 bits a weight: E2M1 codes with one E8M0
// scale per 32 inputs, core/mxfp4_quantize.h) they take 0.27× their bf16 memory and are read
// by the same MXFP4 kernels that run K3's released experts. The format is K3's release recipe
// (CHECKPOINT.md §6): routed experts only; shared experts, router, attention, latent
// projections, embedding and head stay as stored. `strata quantize` writes the same bytes to a
// checkpoint once, so later loads skip this step.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"

namespace strata::engine {

struct ExpertQuantization {
  int64_t matrices = 0;         // routed-expert weights quantised (3 per expert and layer)
  int64_t source_bytes = 0;     // their bytes as stored (bf16 / f32)
  int64_t quantized_bytes = 0;  // their MXFP4 codes and scales
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

// Quantises every routed-expert Linear of `weights` stored as bf16 or f32 into
// `weights->quantized_experts` (one buffer on huge pages) and points it there; MXFP4 ones stay.
// With `routed_experts` non-empty only experts e with routed_experts[e] are quantised (expert
// parallelism: a process's share; the rest are never read here). The checkpoint pages of each
// source are released from this process once it is quantised (engine/weight_copy.h).
// Errors, naming the tensor: an input width that is not a multiple of 32 (the MXFP4 group), a
// value that is infinite or NaN; and the buffer not fitting in the host's available memory.
absl::StatusOr<ExpertQuantization> QuantizeRoutedExperts(const ModelConfig& cfg,
                                                         ModelWeights* weights,
                                                         const std::vector<bool>& routed_experts);

}  // namespace strata::engine
