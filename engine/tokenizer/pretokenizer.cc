#include "engine/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/tokenizer/internal/absl_view.h"
#include "engine/tokenizer/utf8.h"

namespace strata::engine {
namespace {

using internal::Av;

// `\s` as Rust's regex crate and Python's tiktoken see it: the Unicode White_Space property.
// PCRE2's own \s under PCRE2_UCP also matches U+180E (Mongolian vowel separator), which stopped
// being White_Space in Unicode 6.3, so the patterns below spell the class out.
#define STRATA_WS \
  R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})"

// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]: letters that are not lower-case, and marks,
// outside the Han script. The general categories partition the code space into L (Lu Ll Lt Lm
// Lo), M, N, P, S, Z and C, so the complement of "Lu|Lt|Lm|Lo|M" is "Ll|N|P|S|Z|C" and the
// intersection is one negated class, no per-character lookahead (checked code point by code
// point against the lookahead form in pretokenizer_test.cc).
#define STRATA_KIMI_UPPER R"([^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}])"
// [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
#define STRATA_KIMI_LOWER R"([^\p{Lu}\p{Lt}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}])"
#define STRATA_CONTRACTIONS R"((?i:'s|'t|'re|'ve|'m|'ll|'d))"

constexpr char kKimiPattern[] =
    R"([\p{sc:Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?)" STRATA_KIMI_UPPER "*" STRATA_KIMI_LOWER "+" STRATA_CONTRACTIONS
    "?"
    R"(|[^\r\n\p{L}\p{N}]?)" STRATA_KIMI_UPPER "+" STRATA_KIMI_LOWER "*" STRATA_CONTRACTIONS
    "?"
    R"(|\p{N}{1,3})"
    R"(| ?[^)" STRATA_WS R"(\p{L}\p{N}]+[\r\n]*)"
    R"(|[)" STRATA_WS R"(]*[\r\n]+)"
    R"(|[)" STRATA_WS R"(]+(?![^)" STRATA_WS R"(]))"
    R"(|[)" STRATA_WS R"(]+)";

constexpr char kKimiPatternOriginal[] =
    R"([\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*)"
    R"([\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+)"
    R"([\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// tiktoken's cl100k_base and o200k_base patterns (openai_public.py), \s spelled out.
constexpr char kCl100kPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^)" STRATA_WS R"(\p{L}\p{N}]+[\r\n]*)"
    R"(|[)" STRATA_WS R"(]*[\r\n]+)"
    R"(|[)" STRATA_WS R"(]+(?![^)" STRATA_WS R"(]))"
    R"(|[)" STRATA_WS R"(]+)";

constexpr char kO200kPattern[] =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)" STRATA_CONTRACTIONS
    "?"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)" STRATA_CONTRACTIONS
    "?"
    R"(|\p{N}{1,3})"
    R"(| ?[^)" STRATA_WS R"(\p{L}\p{N}]+[\r\n/]*)"
    R"(|[)" STRATA_WS R"(]*[\r\n]+)"
    R"(|[)" STRATA_WS R"(]+(?![^)" STRATA_WS R"(]))"
    R"(|[)" STRATA_WS R"(]+)";

constexpr std::string_view kWhiteSpaceItems = STRATA_WS;

#undef STRATA_WS
#undef STRATA_KIMI_UPPER
#undef STRATA_KIMI_LOWER
#undef STRATA_CONTRACTIONS

// Short general-category names and PCRE2 specials that keep their meaning unqualified.
bool IsCategoryName(std::string_view name) {
  static constexpr std::array<std::string_view, 44> kNames = {
      "C",  "Cc", "Cf", "Cn", "Co", "Cs", "L",  "Ll", "Lm", "Lo",  "Lt",  "Lu",  "L&",  "Lc", "M",
      "Mc", "Me", "Mn", "N",  "Nd", "Nl", "No", "P",  "Pc", "Pd",  "Pe",  "Pf",  "Pi",  "Po", "Ps",
      "S",  "Sc", "Sk", "Sm", "So", "Z",  "Zl", "Zp", "Zs", "Any", "Xan", "Xps", "Xsp", "Xwd"};
  for (std::string_view n : kNames) {
    if (n == name) return true;
  }
  return false;
}

// Rewrites Rust-regex constructs PCRE2 reads differently: \s/\S (White_Space), bare script names
// in \p{..} (Script, not Script_Extensions) and `[A&&[^B]]` class intersections.
std::string TranslateGeneric(std::string_view p) {
  std::string out;
  int class_depth = 0;  // nesting of [...] (Rust allows nested classes)
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 's') {
        out += class_depth > 0 ? std::string(kWhiteSpaceItems)
                               : absl::StrCat("[", Av(kWhiteSpaceItems), "]");
        ++i;
      } else if (e == 'S' && class_depth == 0) {
        absl::StrAppend(&out, "[^", Av(kWhiteSpaceItems), "]");
        ++i;
      } else if ((e == 'p' || e == 'P') && i + 2 < p.size() && p[i + 2] == '{') {
        const size_t close = p.find('}', i + 3);
        if (close == std::string_view::npos) {
          out.append(p.substr(i));
          break;
        }
        std::string_view name = p.substr(i + 3, close - i - 3);
        const bool qualified = name.find_first_of(":=") != std::string_view::npos;
        absl::StrAppend(&out, "\\", Av(std::string_view(&e, 1)), "{",
                        qualified || IsCategoryName(name) ? "" : "sc:", Av(name), "}");
        i = close;
      } else {
        out.push_back(c);
        out.push_back(e);
        ++i;
      }
      continue;
    }
    if (c == '[') {
      // `[A&&[^B]]` -> `(?:(?![B])[A])`
      if (class_depth == 0) {
        const size_t amp = p.find("&&[^", i);
        const size_t end = amp == std::string_view::npos ? amp : p.find("]]", amp);
        const size_t next_open = p.find('[', i + 1);
        if (amp != std::string_view::npos && end != std::string_view::npos &&
            next_open == amp + 2) {
          const std::string a =
              TranslateGeneric(absl::StrCat("[", Av(p.substr(i + 1, amp - i - 1)), "]"));
          const std::string b =
              TranslateGeneric(absl::StrCat("[", Av(p.substr(amp + 4, end - amp - 4)), "]"));
          absl::StrAppend(&out, "(?:(?!", b, ")", a, ")");
          i = end + 1;
          continue;
        }
      }
      ++class_depth;
    } else if (c == ']' && class_depth > 0 && !(!out.empty() && out.back() == '[')) {
      --class_depth;
    }
    out.push_back(c);
  }
  return out;
}

// Per-thread JIT stack (grows on demand up to 16 MiB) attached to a match context.
struct ThreadMatchContext {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  ThreadMatchContext() {
    stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    if (stack != nullptr && context != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchContext() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

}  // namespace

std::string_view KimiPattern() { return kKimiPattern; }
std::string_view KimiPatternOriginal() { return kKimiPatternOriginal; }
std::string_view Cl100kPattern() { return kCl100kPattern; }
std::string_view O200kPattern() { return kO200kPattern; }

std::string TranslateRustPattern(std::string_view pattern) { return TranslateGeneric(pattern); }

std::string TranslatePattern(std::string_view pattern) {
  if (pattern == kKimiPatternOriginal) return kKimiPattern;
  return TranslateGeneric(pattern);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(std::string_view pattern) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  pre->pattern_ = TranslatePattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pre->pattern_.data()), pre->pattern_.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat(
        "pre-tokenizer pattern: ", reinterpret_cast<const char*>(message), " at offset ", offset));
  }
  pre->code_ = code;
  pre->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return pre;
}

PreTokenizer::~PreTokenizer() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void PreTokenizer::Split(std::string_view text,
                         absl::FunctionRef<void(std::string_view)> piece) const {
  if (text.empty()) return;
  auto* code = static_cast<pcre2_code*>(code_);
  thread_local ThreadMatchContext tls;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t pos = 0;
  while (pos < n) {
    int rc = jit_ ? pcre2_jit_match(code, subject, n, pos, 0, md, tls.context)
                  : PCRE2_ERROR_JIT_STACKLIMIT;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, subject, n, pos, PCRE2_NO_JIT, md, tls.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) {
      piece(text.substr(pos));
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (rc < 0 || ov[1] == ov[0]) {
      // A resource limit or an empty match: emit one character and carry on, so the contract
      // (pieces cover the text) holds for any pattern.
      const size_t start = rc < 0 ? pos : ov[0];
      if (start > pos) piece(text.substr(pos, start - pos));
      if (start >= n) break;
      const size_t len = DecodeUtf8Step(text.substr(start)).length;
      piece(text.substr(start, len));
      pos = start + len;
      continue;
    }
    if (ov[0] > pos) piece(text.substr(pos, ov[0] - pos));
    piece(text.substr(ov[0], ov[1] - ov[0]));
    pos = ov[1];
  }
  pcre2_match_data_free(md);
}

}  // namespace strata::engine
