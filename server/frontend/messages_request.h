// Anthropic's Messages API request (/v1/messages, /v1/messages/count_tokens) → the chat request
// it means: the translation is a chat body parsed by ParseChatCompletionRequest, so the
// endpoints validate and generate alike; errors name the Messages fields.
//
//   system (a string or text blocks)        → a system message
//   messages[].content: a string or blocks:
//     text, image (base64 or url source)    → content parts (text, image_url)
//     tool_use {id, name, input}            → the assistant message's tool_calls
//     tool_result {tool_use_id, content}    → a tool message (before the user's other blocks)
//     thinking / redacted_thinking          → dropped (earlier reasoning is not shown again,
//                                             as the chat template does)
//   max_tokens (required for /v1/messages), stop_sequences, temperature, top_p, top_k, stream,
//   metadata (ignored), tools [{name, description, input_schema}] (client tools only),
//   tool_choice {type: auto | any | tool (name) | none, disable_parallel_tool_use},
//   thinking {type: enabled | disabled} (Kimi's `thinking` template switch).
#pragma once

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "server/frontend/openai_request.h"

namespace strata::frontend {

// `count_tokens`: /v1/messages/count_tokens (max_tokens not required, nothing generated).
absl::StatusOr<ChatCompletionRequest> ParseMessagesRequest(const Json& body,
                                                           const RequestLimits& limits,
                                                           bool count_tokens = false);

}  // namespace strata::frontend
