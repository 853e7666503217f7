// Steps every generation endpoint of OpenAiService takes (generation_endpoints.cc,
// responses_endpoints.cc): the draining refusal, the request limits of the served model, and
// the X-Request-Id header as the request id.
#pragma once

#include "absl/status/status.h"
#include "engine/tokenizer/utf8.h"
#include "server/frontend/api_error.h"
#include "server/frontend/openai_request.h"
#include "server/frontend/openai_service.h"
#include "server/frontend/served_model.h"
#include "server/http/http_types.h"

namespace strata::frontend::internal {

inline absl::Status Draining() {
  return ApiErrorStatus(absl::StatusCode::kUnavailable,
                        "the server is shutting down and accepts no new requests", {},
                        "server_draining");
}

inline RequestLimits LimitsFor(const ServiceOptions& options, const ServedModel& model) {
  RequestLimits limits = options.limits;
  limits.vocab_size = model.vocab_size;
  limits.defaults = model.generation_config.defaults;
  return limits;
}

// The X-Request-Id header (a client's or proxy's trace id) as the request id when the body
// gives none, as vLLM: the response id becomes `<prefix>-<header>`.
inline absl::Status ApplyRequestIdHeader(const http::HttpRequest& request, GenerationFields* gen) {
  const std::string* header = request.FindHeader("x-request-id");
  if (header == nullptr || header->empty() || !gen->request_id.empty()) return absl::OkStatus();
  if (header->size() > 256) {
    return InvalidField("X-Request-Id", "the X-Request-Id header must be at most 256 bytes");
  }
  // It becomes part of JSON text (the response id), which is UTF-8.
  if (!engine::IsValidUtf8(*header)) {
    return InvalidField("X-Request-Id", "the X-Request-Id header must be UTF-8 text");
  }
  gen->request_id = *header;
  gen->request_id_from_header = true;
  return absl::OkStatus();
}

}  // namespace strata::frontend::internal
