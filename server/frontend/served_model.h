// What the OpenAI front end serves: one model (its names, limits, tokenizer, chat templates)
// and the engine loop that runs it. Plain pointers to objects the `strata serve` command owns
// and keeps alive for as long as the front end.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/structured/token_vocab.h"
#include "engine/structured/tool_call_constraint.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/engine_loop.h"
#include "server/frontend/generation_config.h"
#include "server/frontend/image_inputs.h"
#include "server/frontend/reply_tokens.h"

namespace strata::frontend {

struct ServedModel {
  std::vector<std::string> names;  // accepted in "model"; names[0] is reported in responses
  std::string root;                // the checkpoint directory (reported by /v1/models)
  int64_t created = 0;             // unix seconds, for /v1/models
  int64_t max_model_len = 0;       // prompt + output tokens per sequence
  int64_t vocab_size = 0;          // the model's; every prompt id must be below it
  // Never null. Served without one (`skip_tokenizer_init`): engine::Tokenizer::WithoutTokens.
  const engine::Tokenizer* tokenizer = nullptr;
  // vLLM's --skip-tokenizer-init: the checkpoint's tokenizer is not loaded (it may ship none).
  // Prompts are token ids (/v1/completions, gRPC Generate); what needs text — chat, text
  // prompts, stop strings, bad_words, structured output, /tokenize, /detokenize — is a 400
  // naming the flag (prompt_builder.h RequireTokenizer). Outputs carry no text: their token ids
  // (return_token_ids on unless the request turns it off).
  bool skip_tokenizer_init = false;
  const engine::ChatTemplate* chat_template = nullptr;        // requests without tools
  const engine::ChatTemplate* chat_template_tools = nullptr;  // requests with tools
  int32_t eos_token_id = -1;                                  // < 0: none
  std::vector<int32_t> chat_stop_token_ids;  // end-of-turn ids that also end chat replies
  // generation_config.json (--generation-config): request defaults, and eos ids that end
  // every reply (unless ignore_eos).
  GenerationConfig generation_config;
  // The tokenizer's vocabulary as bytes for structured output (ConstraintVocab).
  std::shared_ptr<const structured::TokenVocab> token_vocab;
  // Kimi's tool-call markers (ToolCallMarkers); absent: forced tool calls are refused.
  std::optional<structured::ToolCallTokens> tool_call_tokens;
  // `<think>` / `</think>` token ids (−1: none): reasoning is split from the answer.
  int32_t think_begin_id = -1;
  int32_t think_end_id = -1;
  server::EngineLoop* engine = nullptr;
  // Recent chat replies' generated ids (--reply-token-memory); null: prompts are encoded as is.
  ReplyTokenMemory* reply_tokens = nullptr;
  // Image input (a checkpoint with a vision tower); null: image parts are a 400.
  ImageInputs* images = nullptr;
};

// The vocabulary structured output masks: every id below the tokenizer's vocab_size with its
// bytes; special tokens get none (a constraint never allows them but as an end id).
std::shared_ptr<const structured::TokenVocab> ConstraintVocab(const engine::Tokenizer& tokenizer);

// The special-token ids of the tool-call markers; nullopt unless the tokenizer has all five.
std::optional<structured::ToolCallTokens> ToolCallMarkers(const engine::Tokenizer& tokenizer);

}  // namespace strata::frontend
