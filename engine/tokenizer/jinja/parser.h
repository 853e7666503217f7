// Recursive-descent parser for the Jinja subset chat templates use. The grammar (precedence,
// from loosest): `a if c else b` / `a if c`, or, and, not, comparisons (== != < > <= >= in,
// not in), + - ~, * / // %, **, `is` tests, `|` filters, unary sign, then primaries with
// member access, subscripts, slices and calls. Statements: if/elif/else, for (with `if`
// filter and else), set (expression and block form, tuple and namespace targets), macro,
// call blocks, filter blocks, break, continue.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja/ast.h"
#include "engine/tokenizer/jinja/lexer.h"

namespace strata::engine::jinja {

// Errors name the line and what was expected.
absl::StatusOr<Block> Parse(const std::vector<Token>& tokens);

}  // namespace strata::engine::jinja
