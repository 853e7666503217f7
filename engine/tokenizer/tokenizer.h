// Text <-> token ids for a tiktoken-style checkpoint directory:
//   tiktoken.model           mergeable ranks (`base64(bytes) rank` per line)
//   tokenizer_config.json    special tokens, bos/eos, chat template, optional "pat_str"
//   chat_template.jinja      optional; wins over tokenizer_config.json's chat_template
//
// Token ids: a BPE token's id is its rank; special tokens have the ids the config gives them
// (Kimi: right after the last rank). Encoding never fails: ill-formed UTF-8 is kept as raw
// bytes (see PreTokenizer), so DecodeBytes(Encode(s)) == s for every byte string s.
// Immutable after loading; all methods are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/tokenizer/bpe_vocab.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/special_tokens.h"
#include "engine/tokenizer/tokenizer_config.h"

namespace strata::engine {

struct EncodeOptions {
  // vLLM's add_special_tokens: add the BOS / EOS tokens the config asks for (add_bos_token /
  // add_eos_token; both false for Kimi, whose prompts get their markers from the template).
  bool add_special_tokens = false;
  // Recognise special-token text (e.g. "<|im_end|>") in the input as that token's id. When
  // false such text is encoded as ordinary characters (tiktoken's disallowed_special=()).
  bool parse_special = false;
};

// Everything a tokenizer is built from; LoadFromDir fills it from files.
struct TokenizerSpec {
  std::shared_ptr<const BpeVocab> vocab;
  std::string pattern;                           // PCRE2 or Rust-regex syntax
  std::map<int32_t, AddedToken> special_tokens;  // by id
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  bool add_bos_token = false;
  bool add_eos_token = false;
  // tokenization_kimi.py splits input into 400,000-character chunks and then splits runs of
  // more than 25,000 whitespace / non-whitespace characters before encoding.
  bool split_long_runs = false;
};

class Tokenizer {
 public:
  // Errors: vocabulary or config unreadable or malformed, a special id that is also a BPE rank,
  // a pattern PCRE2 rejects.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(TokenizerSpec spec);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> LoadFromDir(const std::string& dir);
  // A tokenizer that knows no token (vocab_size 0): Encode gives no ids, every id is unknown
  // (TokenBytes nullopt, Decode an error). What a model served without its tokenizer holds
  // (strata serve --skip-tokenizer-init: token ids in and out, no text).
  static std::unique_ptr<Tokenizer> WithoutTokens();

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options = {}) const;

  // Raw bytes of the tokens (specials as their text unless skipped). InvalidArgument for an id
  // that is neither a BPE token nor a special token.
  absl::StatusOr<std::string> DecodeBytes(absl::Span<const int32_t> ids,
                                          bool skip_special_tokens = false) const;
  // DecodeBytes with ill-formed UTF-8 replaced by U+FFFD (what clients receive).
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     bool skip_special_tokens = false) const;

  // Bytes of one token; nullopt for an unknown id.
  std::optional<std::string_view> TokenBytes(int32_t id) const;
  // True for ids in the special table (added tokens marked special).
  bool IsSpecial(int32_t id) const;
  std::optional<int32_t> SpecialTokenId(std::string_view content) const;

  // One past the highest id in use.
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  // What EncodeOptions::add_special_tokens adds: BOS first, EOS last (add_bos_token /
  // add_eos_token of the config; both false for Kimi).
  bool adds_bos() const { return add_bos_; }
  bool adds_eos() const { return add_eos_; }
  const BpeVocab& bpe() const { return *vocab_; }
  const PreTokenizer& pretokenizer() const { return *pretokenizer_; }

  // Set by LoadFromDir (empty config for Create): chat templates, token names, flags.
  const TokenizerConfig& config() const { return config_; }

 private:
  Tokenizer() = default;
  void EncodeOrdinary(std::string_view text, std::vector<int32_t>* ids) const;

  std::shared_ptr<const BpeVocab> vocab_;
  std::unique_ptr<PreTokenizer> pretokenizer_;
  std::map<int32_t, AddedToken> specials_;
  std::map<std::string, int32_t, std::less<>> special_ids_;
  SpecialTokenMatcher matcher_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool split_long_runs_ = false;
  int32_t vocab_size_ = 0;
  TokenizerConfig config_;
};

// tokenization_kimi.py's input splitting: chunks of `max_chunk_chars` code points, each split
// further so that no piece holds more than `max_run_chars` consecutive whitespace (Python
// str.isspace) or non-whitespace code points. Pieces concatenate to `text`.
void SplitLongRuns(std::string_view text, size_t max_chunk_chars, size_t max_run_chars,
                   absl::FunctionRef<void(std::string_view)> piece);

}  // namespace strata::engine
