// Whole-file reads for the small text files a checkpoint and the flags name (config.json,
// tokenizer files, generation_config.json, placement files).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace strata {

// The file's bytes. NotFound "cannot open PATH" when it cannot be opened, DataLoss "cannot read
// PATH" on a read error.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Whether `path` can be opened for reading.
bool FileExists(const std::string& path);

}  // namespace strata
