// `strata serve`: the OpenAI-compatible HTTP server (server/http + server/frontend) over one
// engine loop.
//
// Lifecycle: bind the port first (so /health answers while loading), load the model (the
// embedded demo model when --model is absent), plan the cache memory, start the engine loop,
// mark ready and print a curl line. SIGINT / SIGTERM: readiness goes to 503 and new requests
// are refused, requests in flight finish (up to --drain-timeout seconds), then exit 0. A second
// signal during the drain exits at once (still 0, requests left are aborted).
#pragma once

#include <string>
#include <vector>

#include "core/command_line.h"

namespace strata::cli {

// Its one-line description and flags (core/command_line.h).
const CommandSpec& ServeSpec();
int ServeCommand(const std::vector<std::string>& args);

}  // namespace strata::cli
