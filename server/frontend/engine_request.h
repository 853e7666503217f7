// From validated request fields to what the engine loop and the choice decoder take: shared by
// the OpenAI REST endpoints and the gRPC API, so both build identical engine requests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/structured/thinking_budget.h"
#include "scheduler/request.h"
#include "server/frontend/choice_decoder.h"
#include "server/frontend/openai_request.h"
#include "server/frontend/served_model.h"

namespace strata::frontend {

// The engine request of choice `i` (id "<id>-<i>"; seed + i for n > 1, as vLLM does). `chat`
// adds the model's end-of-turn ids to the stop ids (unless ignore_eos). A response format on a
// Kimi K3 chat request constrains the XTML reply's response channel (xtml_constraint.h).
scheduler::Request EngineRequest(const ServedModel& model, const GenerationFields& gen,
                                 const std::vector<int32_t>& prompt, int64_t max_tokens,
                                 const std::string& id, int i, bool chat);

// tool_choice required / named: constrains `r` to the tool-call section (at most
// kMaxForcedToolCalls calls for required, one without parallel_tool_calls or when named).
// Kimi K3 (engine::RepliesInXtml): the XTML tools channel instead (xtml_constraint.h: argument
// keys and values from the tools' parameters), after the reasoning when the prompt opened the
// think channel; InvalidArgument when a tool's parameters are not an object schema.
// InvalidArgument when the model's tokenizer lacks the tool-call markers.
absl::Status ForceToolCalls(const ServedModel& model, const ChatCompletionRequest& req,
                            scheduler::Request* r);
inline constexpr int kMaxForcedToolCalls = 16;

// Chat replies on a model with `<think>` / `</think>`: reasoning is split from the answer
// (ChoiceOptions), and when the prompt opened `<think>` a constraint on `r` starts after
// `</think>` (ReasoningGate). A Kimi K3 model (engine::RepliesInXtml): the reply is parsed as XTML
// (ChoiceOptions::xtml; thinking when the prompt ends by opening the think channel), with
// control tokens kept, and <|end_of_msg|> ends it (a stop id, not shown) unless ignore_eos.
void ApplyReasoning(const ServedModel& model, const std::vector<int32_t>& prompt,
                    scheduler::Request* r, ChoiceOptions* options);

// thinking_token_budget: the close to force (`</think>`, or K3's
// `<|close|>think<|sep|><|open|>response<|sep|>`) when the prompt opened the reasoning
// (ChoiceOptions after ApplyReasoning; the same for every choice of a request), else nullopt.
std::optional<structured::ThinkingEnd> ThinkingEndFor(const ServedModel& model,
                                                      const ChoiceOptions& options);
// At most `budget_tokens` tokens of reasoning, then `end` is forced
// (engine/structured/thinking_budget.h) around the request's constraint.
void ApplyThinkingBudget(const ServedModel& model, const structured::ThinkingEnd& end,
                         int64_t budget_tokens, scheduler::Request* r);

// vLLM's token filters (allowed_token_ids; bad_words tokenized as vLLM does: each word as
// written and, when that tokenizes to as many tokens with a different first one, after a
// space), built once per request; null when it has none. Each choice combines them with its
// own constraint last (after tool-call and reasoning constraints): AddTokenFilters.
std::shared_ptr<const engine::TokenConstraint> TokenFilters(const ServedModel& model,
                                                            const GenerationFields& gen);
void AddTokenFilters(std::shared_ptr<const engine::TokenConstraint> filters, scheduler::Request* r);

// How the choice of `r` is decoded (stop strings, special tokens, hidden stop ids, logprobs).
ChoiceOptions OptionsFor(const GenerationFields& gen, const scheduler::Request& r,
                         bool parse_tool_calls);

}  // namespace strata::frontend
