// Syntax tree of a parsed template. Plain structs owned by unique_ptr; the interpreter walks
// them read-only, so one parsed template serves concurrent renders.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/jinja/value.h"

namespace strata::engine::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Arg {
  enum class Kind { kPositional, kKeyword, kSpread, kKeywordSpread };
  Kind kind = Kind::kPositional;
  std::string name;  // kKeyword
  ExprPtr value;
};

struct Expr {
  enum class Kind {
    kLiteral,     // literal
    kIdentifier,  // name
    kArray,       // elements = items
    kTuple,       // elements = items
    kObject,      // pairs
    kUnary,       // name = "not" | "-" | "+"; a = operand
    kBinary,      // name = operator ("and", "in", "not in", "+", ...); a, b
    kMember,      // a = object; name (attribute) or b = key expression (subscript)
    kSlice,       // a = object; elements = {start, stop, step}, each may be null
    kCall,        // a = callee; args
    kFilter,      // a = operand; name = filter; args
    kTest,        // a = operand; name = test; args; negate
    kTernary,     // a = condition, b = value if true, c = value if false
    kSelect,      // `a if b` without else: b = condition, undefined when false
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> elements;
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;
  std::vector<Arg> args;
  bool negate = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Block = std::vector<StmtPtr>;

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // expr; body; else_body (elif chains nest an kIf in else_body)
    kFor,          // target (identifier or tuple); expr = iterable; filter (may be null);
                   // body; else_body (runs when nothing was iterated)
    kSet,          // target (identifier, tuple or namespace attribute); expr
    kSetBlock,     // target; body rendered to a string
    kMacro,        // name; params; body
    kCallBlock,    // expr = call expression; params = caller's parameters; body
    kFilterBlock,  // expr = filter expression with a null operand; body
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  std::string text;
  std::string name;
  ExprPtr expr;
  ExprPtr target;
  ExprPtr filter;
  std::vector<Param> params;
  Block body;
  Block else_body;
};

}  // namespace strata::engine::jinja
