#include "engine/tokenizer/jinja/lexer.h"

#include <array>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/internal/absl_view.h"
#include "engine/tokenizer/python_json.h"
#include "engine/tokenizer/utf8.h"

namespace strata::engine::jinja {
namespace {

// JavaScript's \s (what @huggingface/jinja strips with): ASCII space and controls, NBSP,
// Unicode spaces, line/paragraph separators and U+FEFF.
bool IsJsSpace(char32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0xA0 || c == 0x1680 || c == 0x2028 ||
      c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF) {
    return true;
  }
  return c >= 0x2000 && c <= 0x200A;
}

// Length of the whitespace character at s[i] (0 if none).
size_t SpaceAt(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return IsJsSpace(c) ? 1 : 0;
  const Utf8Step step = DecodeUtf8Step(s.substr(i));
  return step.status == Utf8Status::kChar && IsJsSpace(step.code_point) ? step.length : 0;
}

// Length of a whitespace character ending at s[end - 1] (0 if none).
size_t SpaceBefore(std::string_view s, size_t end) {
  for (size_t len = 1; len <= 3 && len <= end; ++len) {
    if (SpaceAt(s, end - len) == len) return len;
  }
  return 0;
}

// Length of `s` without its trailing whitespace.
size_t TrimmedLength(std::string_view s) {
  size_t end = s.size();
  while (size_t n = SpaceBefore(s, end)) end -= n;
  return end;
}

bool IsLineBreakEnd(std::string_view s, size_t i) {
  // JavaScript's multiline ^ matches after \n, \r, U+2028 and U+2029.
  if (i == 0) return true;
  const char c = s[i - 1];
  if (c == '\n' || c == '\r') return true;
  return i >= 3 && s.substr(i - 3, 2) == "\xE2\x80" && (s[i - 1] == '\xA8' || s[i - 1] == '\xA9');
}

std::string LstripBlocks(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (IsLineBreakEnd(s, i)) {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j > i && j + 1 < s.size() && s[j] == '{' &&
          (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) {
        i = j;
      }
    }
    out.push_back(s[i]);
    ++i;
  }
  return out;
}

std::string TrimBlocks(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    out.push_back(s[i]);
    if (s[i] == '}' && i > 0 && (s[i - 1] == '#' || s[i - 1] == '%' || s[i - 1] == '-') &&
        i + 1 < s.size() && s[i + 1] == '\n') {
      ++i;
    }
  }
  return out;
}

// Removes `{%-? (end)?generation -?%}` with the whitespace its dashes ask to strip.
std::string RemoveGenerationTags(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (s.compare(i, 2, "{%") != 0) {
      out.push_back(s[i++]);
      continue;
    }
    size_t j = i + 2;
    const bool lstrip = j < s.size() && s[j] == '-';
    if (lstrip) ++j;
    while (size_t n = SpaceAt(s, j)) j += n;
    if (s.compare(j, 3, "end") == 0 && s.compare(j + 3, 10, "generation") == 0) j += 3;
    if (s.compare(j, 10, "generation") != 0) {
      out.push_back(s[i++]);
      continue;
    }
    j += 10;
    while (size_t n = SpaceAt(s, j)) j += n;
    const bool rstrip = j < s.size() && s[j] == '-';
    if (rstrip) ++j;
    if (s.compare(j, 2, "%}") != 0) {
      out.push_back(s[i++]);
      continue;
    }
    j += 2;
    if (lstrip) out.erase(TrimmedLength(out));
    if (rstrip) {
      while (size_t n = SpaceAt(s, j)) j += n;
    }
    i = j;
  }
  return out;
}

struct Operator {
  std::string_view text;
  TokenType type;
};

// Longest match first where prefixes collide ("**" before "*", "//" before "/").
constexpr std::array<Operator, 26> kOperators = {{
    {"{%", TokenType::kOpenStatement},  {"%}", TokenType::kCloseStatement},
    {"{{", TokenType::kOpenExpression}, {"}}", TokenType::kCloseExpression},
    {"(", TokenType::kOpenParen},       {")", TokenType::kCloseParen},
    {"{", TokenType::kOpenBrace},       {"}", TokenType::kCloseBrace},
    {"[", TokenType::kOpenBracket},     {"]", TokenType::kCloseBracket},
    {",", TokenType::kComma},           {".", TokenType::kDot},
    {":", TokenType::kColon},           {"|", TokenType::kPipe},
    {"<=", TokenType::kComparison},     {">=", TokenType::kComparison},
    {"==", TokenType::kComparison},     {"!=", TokenType::kComparison},
    {"<", TokenType::kComparison},      {">", TokenType::kComparison},
    {"+", TokenType::kAdditive},        {"-", TokenType::kAdditive},
    {"~", TokenType::kAdditive},        {"**", TokenType::kPower},
    {"*", TokenType::kMultiplicative},  {"//", TokenType::kMultiplicative},
}};

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}
  absl::StatusOr<std::vector<Token>> Run();

 private:
  bool At(std::string_view s) const { return src_.compare(pos_, s.size(), s) == 0; }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  void Push(TokenType type, std::string value) {
    tokens_.push_back({type, std::move(value), line_});
  }
  void Advance(size_t n) {
    for (size_t k = 0; k < n && pos_ < src_.size(); ++k, ++pos_) {
      if (src_[pos_] == '\n') ++line_;
    }
  }
  void SkipSpace() {
    while (size_t n = SpaceAt(src_, pos_)) Advance(n);
  }
  void StripTrailingSpaceOfText() {
    if (tokens_.empty() || tokens_.back().type != TokenType::kText) return;
    std::string& text = tokens_.back().value;
    text.erase(TrimmedLength(text));
    if (text.empty()) tokens_.pop_back();
  }
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(internal::Cat("syntax error at line ", line_, ": ", what));
  }
  bool InText() const {
    return tokens_.empty() || tokens_.back().type == TokenType::kCloseStatement ||
           tokens_.back().type == TokenType::kCloseExpression ||
           tokens_.back().type == TokenType::kComment;
  }
  absl::Status LexComment();
  absl::StatusOr<std::string> LexString(char quote);
  absl::Status LexInTag();

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  int brace_depth_ = 0;
  std::vector<Token> tokens_;
};

absl::Status Lexer::LexComment() {
  Advance(2);
  const bool strip_before = Peek() == '-';
  if (strip_before) Advance(1);
  const size_t end = src_.find("#}", pos_);
  if (end == std::string::npos) return Error("missing end of comment tag");
  std::string body = src_.substr(pos_, end - pos_);
  const bool strip_after = !body.empty() && body.back() == '-';
  if (strip_after) body.pop_back();
  if (strip_before) StripTrailingSpaceOfText();
  Push(TokenType::kComment, std::move(body));
  Advance(end + 2 - pos_);
  if (strip_after) SkipSpace();
  return absl::OkStatus();
}

absl::StatusOr<std::string> Lexer::LexString(char quote) {
  Advance(1);
  std::string out;
  while (pos_ < src_.size() && src_[pos_] != quote) {
    char c = src_[pos_];
    if (c != '\\') {
      out.push_back(c);
      Advance(1);
      continue;
    }
    const char e = Peek(1);
    Advance(2);
    if (const std::optional<char> escaped = SimpleEscapeChar(e)) {
      out.push_back(*escaped);
      continue;
    }
    switch (e) {
      case 'v':
        out.push_back('\v');
        break;
      case '\'':
        out.push_back(e);
        break;
      case 'x':
      case 'u': {
        const size_t len = e == 'x' ? 2 : 4;
        const std::string_view digits = std::string_view(src_).substr(pos_, len);
        const std::optional<uint32_t> cp =
            digits.size() == len ? ParseHexDigits(digits) : std::nullopt;
        if (!cp) return Error("invalid hexadecimal escape in string literal");
        Advance(len);
        AppendUtf8(*cp >= 0xD800 && *cp <= 0xDFFF ? kReplacementChar : *cp, &out);
        break;
      }
      default:  // Python keeps unknown escapes verbatim ('\d' is backslash, d).
        out.push_back('\\');
        out.push_back(e);
    }
  }
  if (pos_ >= src_.size()) return Error("unterminated string literal");
  Advance(1);
  return out;
}

absl::Status Lexer::LexInTag() {
  SkipSpace();
  if (pos_ >= src_.size()) return absl::OkStatus();
  if (At("-%}") || At("-}}")) {
    Push(At("-%}") ? TokenType::kCloseStatement : TokenType::kCloseExpression,
         At("-%}") ? "%}" : "}}");
    Advance(3);
    SkipSpace();
    return absl::OkStatus();
  }
  const char c = Peek();
  if (c == '-' || c == '+') {
    const TokenType last = tokens_.empty() ? TokenType::kText : tokens_.back().type;
    if (last == TokenType::kText)
      return Error(internal::Cat("unexpected character '", std::string(1, c), "'"));
    if (last != TokenType::kIdentifier && last != TokenType::kNumber &&
        last != TokenType::kString && last != TokenType::kCloseParen &&
        last != TokenType::kCloseBracket) {
      // A sign: part of a numeric literal, or a unary operator.
      Advance(1);
      std::string num;
      while (Peek() >= '0' && Peek() <= '9') num.push_back(src_[pos_]), Advance(1);
      if (!num.empty() && Peek() == '.' && Peek(1) >= '0' && Peek(1) <= '9') {
        num.push_back('.');
        Advance(1);
        while (Peek() >= '0' && Peek() <= '9') num.push_back(src_[pos_]), Advance(1);
      }
      num.insert(num.begin(), c);
      Push(num.size() == 1 ? TokenType::kUnary : TokenType::kNumber, std::move(num));
      return absl::OkStatus();
    }
  }
  for (const Operator& op : kOperators) {
    if (op.text == "}}" && brace_depth_ > 0) continue;
    if (!At(op.text)) continue;
    if (op.type == TokenType::kOpenExpression) brace_depth_ = 0;
    if (op.type == TokenType::kOpenBrace) ++brace_depth_;
    if (op.type == TokenType::kCloseBrace) --brace_depth_;
    Push(op.type, std::string(op.text));
    Advance(op.text.size());
    return absl::OkStatus();
  }
  // "/", "%" and "=" come after the two-character operators that start with them.
  if (c == '/' || c == '%') {
    Push(TokenType::kMultiplicative, std::string(1, c));
    Advance(1);
    return absl::OkStatus();
  }
  if (c == '=') {
    Push(TokenType::kEquals, "=");
    Advance(1);
    return absl::OkStatus();
  }
  if (c == '\'' || c == '"') {
    absl::StatusOr<std::string> s = LexString(c);
    if (!s.ok()) return s.status();
    Push(TokenType::kString, std::move(*s));
    return absl::OkStatus();
  }
  if (c >= '0' && c <= '9') {
    std::string num;
    while (Peek() >= '0' && Peek() <= '9') num.push_back(src_[pos_]), Advance(1);
    const bool after_dot = !tokens_.empty() && tokens_.back().type == TokenType::kDot;
    if (!after_dot && Peek() == '.' && Peek(1) >= '0' && Peek(1) <= '9') {
      num.push_back('.');
      Advance(1);
      while (Peek() >= '0' && Peek() <= '9') num.push_back(src_[pos_]), Advance(1);
    }
    Push(TokenType::kNumber, std::move(num));
    return absl::OkStatus();
  }
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
    std::string word;
    while (true) {
      const char w = Peek();
      if (!((w >= 'a' && w <= 'z') || (w >= 'A' && w <= 'Z') || (w >= '0' && w <= '9') ||
            w == '_')) {
        break;
      }
      word.push_back(w);
      Advance(1);
    }
    Push(TokenType::kIdentifier, std::move(word));
    return absl::OkStatus();
  }
  return Error(internal::Cat("unexpected character '", std::string(1, c), "'"));
}

absl::StatusOr<std::vector<Token>> Lexer::Run() {
  while (pos_ < src_.size()) {
    if (InText()) {
      size_t end = pos_;
      while (end < src_.size() &&
             !(src_[end] == '{' && end + 1 < src_.size() &&
               (src_[end + 1] == '%' || src_[end + 1] == '{' || src_[end + 1] == '#'))) {
        ++end;
      }
      if (end > pos_) {
        const int line = line_;
        std::string text = src_.substr(pos_, end - pos_);
        Advance(end - pos_);
        tokens_.push_back({TokenType::kText, std::move(text), line});
        continue;
      }
    }
    if (At("{#")) {
      if (absl::Status s = LexComment(); !s.ok()) return s;
      continue;
    }
    if (At("{%-") || At("{{-")) {
      StripTrailingSpaceOfText();
      const bool statement = At("{%-");
      Push(statement ? TokenType::kOpenStatement : TokenType::kOpenExpression,
           statement ? "{%" : "{{");
      if (!statement) brace_depth_ = 0;
      Advance(3);
      continue;
    }
    if (absl::Status s = LexInTag(); !s.ok()) return s;
  }
  return std::move(tokens_);
}

}  // namespace

std::string Preprocess(std::string_view source) {
  if (!source.empty() && source.back() == '\n') source.remove_suffix(1);
  return RemoveGenerationTags(TrimBlocks(LstripBlocks(source)));
}

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) {
  return Lexer(Preprocess(source)).Run();
}

}  // namespace strata::engine::jinja
