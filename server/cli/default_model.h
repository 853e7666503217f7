// The embedded default model: a small random-weight demo checkpoint (with its trained
// tokenizer) generated deterministically on first use into a cache directory, so a new user
// gets a working `strata` without downloading anything.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace strata::cli {

// $STRATA_CACHE_DIR, else $XDG_CACHE_HOME/strata, else $HOME/.cache/strata, else ./.cache/strata.
std::string CacheDir();

// The demo checkpoint's directory, generating it first when absent (atomic: written to a
// temporary directory, then renamed).
absl::StatusOr<std::string> EnsureDefaultModel();

// `--model` when given, else the embedded default.
absl::StatusOr<std::string> ResolveModelDir(const std::string& flag_value);

}  // namespace strata::cli
