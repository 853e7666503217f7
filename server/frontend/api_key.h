// The API key check both front ends share (`--api-key` / $STRATA_API_KEY): REST's
// `Authorization: Bearer KEY` header on /v1/* and the admin route, gRPC's `authorization`
// metadata on every Inference and Control call.
#pragma once

#include <string_view>

namespace strata::frontend {

// Whether an Authorization value ("Bearer KEY" or "bearer KEY") carries `key`. Compares in time
// independent of where the values differ (the key is a secret).
bool BearerMatches(std::string_view authorization, std::string_view key);
// Whether a bare key header value (Anthropic clients' `x-api-key: KEY`) is `key`, as above.
bool KeyMatches(std::string_view value, std::string_view key);

}  // namespace strata::frontend
