#include "engine/tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/file.h"
#include "core/sha256.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/known_encodings.h"
#include "engine/tokenizer/utf8.h"

namespace strata::engine {
namespace {

constexpr size_t kKimiMaxChunkChars = 400'000;
constexpr size_t kKimiMaxRunChars = 25'000;
constexpr int32_t kKimiNumReservedSpecials = 256;

// `model_type` of the checkpoint's config.json (or of its text_config), "" when the file or the
// key is absent. A config.json that is not JSON is an error naming it.
absl::StatusOr<std::string> ReadModelType(const std::string& dir) {
  const std::string path = dir + "/config.json";
  if (!FileExists(path)) return std::string();
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  const nlohmann::json config = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON"));
  for (const nlohmann::json* where :
       {&config,
        config.is_object() && config.contains("text_config") ? &config["text_config"] : nullptr}) {
    if (where == nullptr || !where->is_object()) continue;
    auto it = where->find("model_type");
    if (it != where->end() && it->is_string()) return it->get<std::string>();
  }
  return std::string();
}

}  // namespace

void SplitLongRuns(std::string_view text, size_t max_chunk_chars, size_t max_run_chars,
                   absl::FunctionRef<void(std::string_view)> piece) {
  size_t chunk_start = 0;
  while (chunk_start < text.size()) {
    // One chunk of at most max_chunk_chars code points, split into runs.
    size_t pos = chunk_start;
    size_t slice_start = chunk_start;
    size_t run_len = 0;
    bool run_is_space = false;
    for (size_t chars = 0; chars < max_chunk_chars && pos < text.size(); ++chars) {
      const Utf8Step step = DecodeUtf8Step(text.substr(pos));
      const bool is_space = step.status == Utf8Status::kChar && IsPythonSpace(step.code_point);
      if (chars == 0) run_is_space = is_space;
      if (is_space != run_is_space) {
        run_len = 1;
        run_is_space = is_space;
      } else if (++run_len > max_run_chars) {
        piece(text.substr(slice_start, pos - slice_start));
        slice_start = pos;
        run_len = 1;
      }
      pos += step.length;
    }
    piece(text.substr(slice_start, pos - slice_start));
    chunk_start = pos;
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(TokenizerSpec spec) {
  if (spec.vocab == nullptr) return absl::InvalidArgumentError("tokenizer needs a vocabulary");
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->vocab_ = std::move(spec.vocab);
  absl::StatusOr<std::unique_ptr<PreTokenizer>> pre = PreTokenizer::Create(spec.pattern);
  if (!pre.ok()) return pre.status();
  tok->pretokenizer_ = std::move(*pre);
  tok->vocab_size_ = static_cast<int32_t>(tok->vocab_->rank_end());
  std::vector<std::pair<std::string, int32_t>> matchable;
  for (auto& [id, token] : spec.special_tokens) {
    if (id < 0 || tok->vocab_->HasRank(static_cast<uint32_t>(id))) {
      return absl::InvalidArgumentError(
          absl::StrCat("special token ", id, " '", token.content, "' collides with a BPE token"));
    }
    if (token.content.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("special token ", id, " has no text"));
    }
    tok->special_ids_[token.content] = id;
    matchable.emplace_back(token.content, id);
    tok->vocab_size_ = std::max(tok->vocab_size_, id + 1);
  }
  tok->specials_ = std::move(spec.special_tokens);
  tok->matcher_ = SpecialTokenMatcher(matchable);
  for (auto [name, out] :
       {std::pair{&spec.bos_token, &tok->bos_id_}, std::pair{&spec.eos_token, &tok->eos_id_}}) {
    if (name->has_value()) *out = tok->SpecialTokenId(**name);
  }
  tok->add_bos_ = spec.add_bos_token;
  tok->add_eos_ = spec.add_eos_token;
  if (tok->add_bos_ && !tok->bos_id_.has_value()) {
    return absl::InvalidArgumentError("add_bos_token is set but bos_token is not a special token");
  }
  if (tok->add_eos_ && !tok->eos_id_.has_value()) {
    return absl::InvalidArgumentError("add_eos_token is set but eos_token is not a special token");
  }
  tok->split_long_runs_ = spec.split_long_runs;
  return tok;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadFromDir(const std::string& dir) {
  absl::StatusOr<std::string> vocab_text = ReadFileToString(dir + "/tiktoken.model");
  if (!vocab_text.ok()) return vocab_text.status();
  absl::StatusOr<std::shared_ptr<const BpeVocab>> vocab = BpeVocab::FromTiktoken(*vocab_text);
  if (!vocab.ok()) {
    return absl::Status(vocab.status().code(),
                        absl::StrCat(dir, "/tiktoken.model: ", vocab.status().message()));
  }
  TokenizerConfig config;
  const std::string config_path = dir + "/tokenizer_config.json";
  if (FileExists(config_path)) {
    absl::StatusOr<std::string> text = ReadFileToString(config_path);
    if (!text.ok()) return text.status();
    absl::StatusOr<TokenizerConfig> parsed = ParseTokenizerConfig(*text);
    if (!parsed.ok()) return parsed.status();
    config = std::move(*parsed);
  }
  absl::StatusOr<std::string> model_type = ReadModelType(dir);
  if (!model_type.ok()) return model_type.status();
  config.model_type = std::move(*model_type);
  if (FileExists(dir + "/chat_template.jinja")) {
    absl::StatusOr<std::string> text = ReadFileToString(dir + "/chat_template.jinja");
    if (!text.ok()) return text.status();
    config.chat_templates["default"] = std::move(*text);
  }

  TokenizerSpec spec;
  spec.vocab = *vocab;
  const KnownEncoding* known = FindKnownEncoding(Sha256Hex(*vocab_text));
  spec.pattern = config.pat_str.has_value() ? *config.pat_str
                 : known != nullptr         ? std::string(known->pattern)
                                            : std::string(KimiPatternOriginal());
  if (known != nullptr) {
    for (const auto& [content, id] : known->special_tokens)
      spec.special_tokens[id] = {content, true};
  }
  for (const auto& [id, token] : config.added_tokens) spec.special_tokens[id] = token;
  if (config.kimi_tokenizer) {
    // tokenization_kimi.py: the 256 ids after the BPE ranks are special; unnamed ones are
    // "<|reserved_token_{id}|>". (Some copies of that file reserve two more ids, which lie
    // beyond the model's vocab_size and are left out here.)
    const int32_t num_base = static_cast<int32_t>((*vocab)->num_tokens());
    for (int32_t id = num_base; id < num_base + kKimiNumReservedSpecials; ++id) {
      if (!spec.special_tokens.count(id)) {
        spec.special_tokens[id] = {absl::StrCat("<|reserved_token_", id, "|>"), true};
      }
    }
  }
  spec.bos_token = config.bos_token;
  spec.eos_token = config.eos_token;
  spec.add_bos_token = config.add_bos_token;
  spec.add_eos_token = config.add_eos_token;
  spec.split_long_runs = config.kimi_tokenizer;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Create(std::move(spec));
  if (!tok.ok()) return tok.status();
  (*tok)->config_ = std::move(config);
  return tok;
}

std::unique_ptr<Tokenizer> Tokenizer::WithoutTokens() {
  TokenizerSpec spec;
  spec.vocab = BpeVocab::Empty();
  spec.pattern = std::string(KimiPatternOriginal());
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Create(std::move(spec));
  CHECK(tok.ok()) << tok.status();  // the fixed pattern compiles
  return *std::move(tok);
}

void Tokenizer::EncodeOrdinary(std::string_view text, std::vector<int32_t>* ids) const {
  pretokenizer_->Split(text, [&](std::string_view piece) { BpeEncodePiece(*vocab_, piece, ids); });
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int32_t> ids;
  if (vocab_size_ == 0) return ids;  // WithoutTokens: no byte has a token
  ids.reserve(text.size() / 3 + 2);
  if (options.add_special_tokens && add_bos_) ids.push_back(*bos_id_);
  auto encode_chunk = [&](std::string_view chunk) {
    size_t pos = 0;
    if (options.parse_special) {
      while (std::optional<SpecialTokenMatcher::Match> m = matcher_.FindNext(chunk, pos)) {
        EncodeOrdinary(chunk.substr(pos, m->pos - pos), &ids);
        ids.push_back(m->id);
        pos = m->pos + m->length;
      }
    }
    EncodeOrdinary(chunk.substr(pos), &ids);
  };
  if (split_long_runs_) {
    SplitLongRuns(text, kKimiMaxChunkChars, kKimiMaxRunChars, encode_chunk);
  } else {
    encode_chunk(text);
  }
  if (options.add_special_tokens && add_eos_) ids.push_back(*eos_id_);
  return ids;
}

std::optional<std::string_view> Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0) return std::nullopt;
  if (vocab_->HasRank(static_cast<uint32_t>(id)))
    return vocab_->TokenBytes(static_cast<uint32_t>(id));
  auto it = specials_.find(id);
  if (it == specials_.end()) return std::nullopt;
  return std::string_view(it->second.content);
}

bool Tokenizer::IsSpecial(int32_t id) const {
  auto it = specials_.find(id);
  return it != specials_.end() && it->second.special;
}

std::optional<int32_t> Tokenizer::SpecialTokenId(std::string_view content) const {
  auto it = special_ids_.find(content);
  if (it == special_ids_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::string> Tokenizer::DecodeBytes(absl::Span<const int32_t> ids,
                                                   bool skip_special_tokens) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (int32_t id : ids) {
    std::optional<std::string_view> bytes = TokenBytes(id);
    if (!bytes.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is out of range (vocabulary size ", vocab_size_, ")"));
    }
    if (skip_special_tokens && IsSpecial(id)) continue;
    out.append(*bytes);
  }
  return out;
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids,
                                              bool skip_special_tokens) const {
  absl::StatusOr<std::string> bytes = DecodeBytes(ids, skip_special_tokens);
  if (!bytes.ok()) return bytes.status();
  return SanitizeUtf8(*bytes);
}

}  // namespace strata::engine
