// Single-sequence generation and scoring on top of Model::Forward (a batch of one).
//
// Prefill runs in chunks of `prefill_chunk_tokens` (any size gives the same result: KDA state,
// conv cache and latent rows carry across chunks), then one token per decode step.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/media_embedding.h"
#include "engine/model.h"
#include "engine/sampling.h"

namespace strata::engine {

struct GenerateOptions {
  int64_t max_tokens = 16;
  bool ignore_eos = false;              // when false, stop after the config's eos_token_id
  std::vector<int32_t> stop_token_ids;  // extra ids that end generation (included in output)
  int64_t prefill_chunk_tokens = 512;
  SamplingParams sampling;  // default temperature 1; set temperature 0 for greedy
  uint64_t fallback_seed = 0;
  LatentDType latent_dtype = LatentDType::kF32;  // the latent cache's rows (--kv-cache-dtype)
  // A tensor-parallel shard's group (Model::Forward): every rank of the group calls Generate
  // with the same prompt and options and gets the same tokens.
  TensorParallelGroup* tensor_parallel = nullptr;
  // Images in the prompt (positions in `prompt`, already expanded: ExpandMediaPlaceholders).
  std::vector<MediaEmbedding> media;
};

// Rejects an empty prompt or an id outside [0, vocab) with an InvalidArgument naming the
// position and the limit.
absl::Status ValidatePromptIds(const std::vector<int32_t>& ids, int64_t vocab_size);

// Generates up to max_tokens ids after `prompt`.
absl::StatusOr<std::vector<int32_t>> Generate(const Model& model,
                                              const std::vector<int32_t>& prompt,
                                              const GenerateOptions& options);

// Logits [prompt.size(), vocab] for every prompt position, through the normal chunked
// prefill path, over a latent cache of `latent_dtype` rows. A tensor-parallel shard passes its
// group; every rank then gets the full logits. `media`: images in the prompt, as in
// GenerateOptions.
absl::StatusOr<std::vector<float>> PromptLogits(const Model& model,
                                                const std::vector<int32_t>& prompt,
                                                int64_t prefill_chunk_tokens,
                                                LatentDType latent_dtype = LatentDType::kF32,
                                                TensorParallelGroup* tensor_parallel = nullptr,
                                                absl::Span<const MediaEmbedding> media = {});

}  // namespace strata::engine
