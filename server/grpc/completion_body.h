// strata.v1.GenerateRequest → the /v1/completions body it means: the proto's fields carry the
// REST field names, so gRPC requests are validated by the REST parser (generate_request.h).
// No model, no engine: the fuzz target of gRPC messages builds bodies with this alone.
#pragma once

#include <nlohmann/json.hpp>

#include "strata/v1/inference.pb.h"

namespace strata::rpc {

using Json = nlohmann::ordered_json;  // frontend::Json

// The body of `request`, with `schema` as response_format's schema when json_schema is set: the
// caller has parsed json_schema (core/json_limits.h) and refused text that does not parse.
// Linear in the message (logit_bias is appended, not inserted key by key).
Json CompletionBody(const v1::GenerateRequest& request, Json schema);

// The same, json_schema parsed here with the limits of core/json_limits.h; text that does not
// parse goes on as a string, which the schema compiler refuses.
Json CompletionBodyFor(const v1::GenerateRequest& request);

}  // namespace strata::rpc
