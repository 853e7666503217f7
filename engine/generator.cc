#include "engine/generator.h"

#include <algorithm>
#include <string>

#include "core/status.h"

namespace strata::engine {
namespace {

// Runs `ids` through the model in chunks on top of `cache`, starting at position `start`, with
// the rows of `media` (positions in `ids`) at their positions.
// Returns the logits of the last token when `mode` is kLast, of every token when kAll.
void Prefill(const Model& model, const SequenceCache& cache, const std::vector<int32_t>& ids,
             absl::Span<const MediaEmbedding> media, int64_t start, int64_t chunk, LogitsMode mode,
             const ForwardContext& context, std::vector<float>* logits) {
  std::vector<float> chunk_logits;
  std::vector<EmbeddingRows> embeddings;
  const int64_t total = static_cast<int64_t>(ids.size());
  for (int64_t begin = 0; begin < total; begin += chunk) {
    const int64_t count = std::min(chunk, total - begin);
    const bool last_chunk = begin + count == total;
    ForwardSequence seq;
    seq.token_ids = ids.data() + begin;
    seq.num_new_tokens = count;
    seq.num_computed_tokens = start + begin;
    seq.cache = cache.view();
    embeddings.clear();
    MediaRowsIn(media, begin, count, model.config().hidden_size, &embeddings);
    seq.embeddings = embeddings;
    seq.logits = mode == LogitsMode::kAll ? LogitsMode::kAll
                 : last_chunk             ? LogitsMode::kLast
                                          : LogitsMode::kNone;
    model.Forward({seq}, &chunk_logits, context);
    if (mode == LogitsMode::kAll || last_chunk) {
      logits->insert(logits->end(), chunk_logits.begin(), chunk_logits.end());
    }
  }
}

}  // namespace

absl::Status ValidatePromptIds(const std::vector<int32_t>& ids, int64_t vocab_size) {
  if (ids.empty()) return absl::InvalidArgumentError("the prompt is empty (need at least 1 id)");
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError("prompt id " + std::to_string(ids[i]) + " at position " +
                                        std::to_string(i) + " is outside the vocabulary [0, " +
                                        std::to_string(vocab_size) + ")");
    }
  }
  return absl::OkStatus();
}

namespace {

// Images need a vision tower's rows of the LM's width at valid positions.
absl::Status ValidatePromptMedia(const Model& model, const std::vector<int32_t>& prompt,
                                 absl::Span<const MediaEmbedding> media) {
  if (media.empty()) return absl::OkStatus();
  return ValidateMedia(media, static_cast<int64_t>(prompt.size()), model.config().hidden_size);
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> Generate(const Model& model,
                                              const std::vector<int32_t>& prompt,
                                              const GenerateOptions& options) {
  const ModelConfig& cfg = model.config();
  RETURN_IF_ERROR(ValidatePromptIds(prompt, cfg.vocab_size));
  RETURN_IF_ERROR(ValidatePromptMedia(model, prompt, options.media));
  RETURN_IF_ERROR(options.sampling.Validate(cfg.vocab_size));
  if (options.max_tokens < 0) {
    return absl::InvalidArgumentError("max_tokens must be >= 0, got " +
                                      std::to_string(options.max_tokens));
  }
  if (options.prefill_chunk_tokens < 1) {
    return absl::InvalidArgumentError("prefill chunk size must be >= 1");
  }
  std::vector<int32_t> output;
  if (options.max_tokens == 0) return output;

  const int64_t prompt_len = static_cast<int64_t>(prompt.size());
  // With decode context parallelism this rank holds every C-th position's latent row.
  SequenceCache cache(model.geometry(),
                      model.context_parallel().MaxLocalRows(prompt_len + options.max_tokens), 64,
                      options.latent_dtype);
  std::vector<float> logits;
  ForwardContext context;
  context.tensor_parallel = options.tensor_parallel;
  Prefill(model, cache, prompt, options.media, 0, options.prefill_chunk_tokens, LogitsMode::kLast,
          context, &logits);
  Sampler sampler(options.sampling, options.fallback_seed, prompt);
  for (int64_t step = 0;; ++step) {
    const int32_t token = sampler.Sample(logits.data(), cfg.vocab_size);
    output.push_back(token);
    const bool eos = !options.ignore_eos && token == cfg.eos_token_id;
    const bool stop = std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(),
                                token) != options.stop_token_ids.end();
    if (eos || stop || static_cast<int64_t>(output.size()) >= options.max_tokens) break;
    ForwardSequence seq;
    seq.token_ids = &output.back();
    seq.num_new_tokens = 1;
    seq.num_computed_tokens = prompt_len + step;
    seq.cache = cache.view();
    seq.logits = LogitsMode::kLast;
    model.Forward({seq}, &logits, context);
  }
  return output;
}

absl::StatusOr<std::vector<float>> PromptLogits(const Model& model,
                                                const std::vector<int32_t>& prompt,
                                                int64_t prefill_chunk_tokens,
                                                LatentDType latent_dtype,
                                                TensorParallelGroup* tensor_parallel,
                                                absl::Span<const MediaEmbedding> media) {
  RETURN_IF_ERROR(ValidatePromptIds(prompt, model.config().vocab_size));
  RETURN_IF_ERROR(ValidatePromptMedia(model, prompt, media));
  if (prefill_chunk_tokens < 1) {
    return absl::InvalidArgumentError("prefill chunk size must be >= 1");
  }
  SequenceCache cache(model.geometry(),
                      model.context_parallel().MaxLocalRows(static_cast<int64_t>(prompt.size())),
                      64, latent_dtype);
  std::vector<float> logits;
  ForwardContext context;
  context.tensor_parallel = tensor_parallel;
  Prefill(model, cache, prompt, media, 0, prefill_chunk_tokens, LogitsMode::kAll, context, &logits);
  return logits;
}

}  // namespace strata::engine
