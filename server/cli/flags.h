// The values of `strata`'s flags that several subcommands share: id and string lists, the cache
// format, speculative decoding, CPU matmul precision, and their help lines. The flags themselves
// are read by core/command_line.h. (Flags and environment are read only by the CLI layer, never
// by library code.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/command_line.h"
#include "core/latent_row.h"
#include "kernels/cpu/matmul.h"
#include "scheduler/scheduler_config.h"

namespace strata::cli {

// A list flag as vLLM writes it, a JSON array of strings ('["https://a.example", "*"]'), or
// comma separated (a,b). InvalidArgument naming `what` for malformed JSON or non-strings.
absl::StatusOr<std::vector<std::string>> ParseStringList(const std::string& text,
                                                         const std::string& what);

// Parses "1,2,3" (spaces allowed) into ids; InvalidArgument naming `what` on bad input.
absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& text, const std::string& what);

// --kv-cache-dtype for `device` ("cpu" | "cuda"): "auto" is f32 on the CPU (exact) and bf16 on a
// GPU; otherwise a name core/latent_row.h knows, if the device stores that format (the CPU reads
// all three, the CUDA kernels bf16 and fp8). InvalidArgument naming the flag, the value and the
// choices.
absl::StatusOr<LatentDType> ParseKvCacheDType(const std::string& value, const std::string& device);

// --speculative-config, vLLM's JSON object: {"method": "ngram", "num_speculative_tokens": k,
// "prompt_lookup_max": M, "prompt_lookup_min": m, "disable_by_batch_size": b} (M defaults to 5,
// m to min(2, M), b to none) into
// `config`'s speculative fields. InvalidArgument naming the key and its limit for malformed
// JSON, another method (draft models, EAGLE, MTP: Strata has none), unknown keys or values out
// of range (scheduler_config.h).
absl::Status ParseSpeculativeConfig(const std::string& text, scheduler::SchedulerConfig* config);

inline constexpr char kSpeculativeConfigHelp[] =
    "speculative decoding by prompt lookup, vLLM's JSON: '{\"method\": \"ngram\", "
    "\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 5, \"prompt_lookup_min\": 2, "
    "\"disable_by_batch_size\": 8}' (default off)";

// --cpu-matmul-precision: f32 (the default), bf16 or int8, set process-wide (kernels/cpu/matmul.h
// MatmulPrecision). InvalidArgument naming the flag and the choices; a warning, not an error,
// when the CPU lacks what they need (AVX512_BF16; int8 also AVX512_VNNI): those products then
// stay f32.
absl::Status ApplyCpuMatmulPrecision(const std::string& value);

inline constexpr char kQuantizationHelp[] =
    "mxfp4: quantise the checkpoint's bf16 routed experts to MXFP4 at load (K3's release "
    "format: 4.25 bits a weight, 0.27x the experts' memory and decode reads; `strata quantize` "
    "writes them once) | int8: every other projection and the LM head (not the embedding, "
    "routers or MLA's kv_b_proj) to int8 groups of 32 with a bf16 scale at load (8.5 bits a "
    "weight, llama.cpp's Q8_0; both backends; `strata quantize` writes them once) | mxfp4,int8: "
    "both | compressed-tensors (vLLM's name "
    "for the checkpoint's own MXFP4 "
    "experts: K3's release; refused where there are none) | none (default)";

inline constexpr char kCpuMatmulPrecisionHelp[] =
    "cpu: products with bf16, MXFP4 or int8 weights over >= 16 rows (prefill chunks, large "
    "batches) "
    "and the MLA prefill attention: f32 (default: activations stay f32, exact) | bf16 "
    "(activations rounded to bf16 with f32 sums, as llama.cpp and GPU engines compute: on AMX "
    "tiles where the CPU has them, prefill 2-2.5x; else vdpbf16ps, about twice the matrix "
    "FLOP/s; 8 significant bits per activation; CPUs with AVX512_BF16 only) | int8 (bf16's "
    "products, and decode's products with MXFP4 or int8 weights round activations to int8 per "
    "32 values, llama.cpp's Q8_0, and multiply bytes with VNNI: MXFP4 decode is bound by "
    "decoding, not memory, without it; CPUs with AVX512_VNNI)";

inline constexpr char kKvCacheDTypeHelp[] =
    "MLA latent cache rows: auto | f32 | bf16 | fp8 (FlashMLA's 656-byte rows: 1.76x the tokens "
    "of bf16, 3.5x f32; f32 cpu only); vLLM's float32, bfloat16, fp8_e4m3, fp8_ds_mla too "
    "(default auto: cpu f32, cuda bf16)";

}  // namespace strata::cli
