// Jinja lexer with the whitespace rules Hugging Face chat templates are rendered with
// (transformers and @huggingface/jinja both use trim_blocks and lstrip_blocks):
//   * one trailing newline of the template is dropped;
//   * lstrip_blocks: spaces/tabs between a line start and `{%` / `{#` are dropped;
//   * trim_blocks: the newline right after `%}` / `#}` is dropped;
//   * `{%-` `{{-` `{#-` strip whitespace before the tag, `-%}` `-}}` `-#}` after it;
//   * transformers' `{% generation %}` / `{% endgeneration %}` markers are removed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::engine::jinja {

enum class TokenType {
  kText,
  kNumber,
  kString,
  kIdentifier,
  kEquals,
  kOpenParen,
  kCloseParen,
  kOpenStatement,
  kCloseStatement,
  kOpenExpression,
  kCloseExpression,
  kOpenBracket,
  kCloseBracket,
  kOpenBrace,
  kCloseBrace,
  kComma,
  kDot,
  kColon,
  kPipe,
  kAdditive,
  kMultiplicative,
  kPower,
  kComparison,
  kUnary,
  kComment,
};

struct Token {
  TokenType type;
  std::string value;  // text, literal value (strings unescaped), operator or name
  int line;           // 1-based line, counted after the whitespace preprocessing
};

// Errors (unterminated string or comment, unknown character) name the line.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

// The text after the whitespace preprocessing above (exposed for tests).
std::string Preprocess(std::string_view source);

}  // namespace strata::engine::jinja
