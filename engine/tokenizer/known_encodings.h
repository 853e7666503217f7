// Well-known vocabularies, recognised by the sha256 of their tiktoken file: the pre-tokenizer
// pattern and special tokens their own libraries hard-code (tiktoken's openai_public.py).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::engine {

struct KnownEncoding {
  std::string_view name;    // "cl100k_base"
  std::string_view sha256;  // of the tiktoken.model file, lower-case hex
  std::string_view pattern;
  std::vector<std::pair<std::string, int32_t>> special_tokens;
};

// nullptr when the digest is not in the table.
const KnownEncoding* FindKnownEncoding(std::string_view sha256_hex);

}  // namespace strata::engine
