#include "engine/tokenizer/known_encodings.h"

#include "engine/tokenizer/pretokenizer.h"

namespace strata::engine {

const KnownEncoding* FindKnownEncoding(std::string_view sha256_hex) {
  // Kimi's tiktoken.model is not listed: Kimi's pattern is the fallback anyway, and its special
  // tokens come from its tokenizer_config.json.
  static const std::vector<KnownEncoding>* const kTable = new std::vector<KnownEncoding>{
      {"cl100k_base",
       "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
       Cl100kPattern(),
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}}},
      {"o200k_base",
       "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
       O200kPattern(),
       {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
  };
  for (const KnownEncoding& e : *kTable) {
    if (e.sha256 == sha256_hex) return &e;
  }
  return nullptr;
}

}  // namespace strata::engine
