#include "engine/tokenizer/jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/internal/absl_view.h"

namespace strata::engine::jinja {
namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  absl::StatusOr<Block> ParseTemplate() {
    Block block;
    while (pos_ < t_.size()) {
      if (absl::Status s = ParseAny(&block); !s.ok()) return s;
    }
    return block;
  }

 private:
  using ExprOr = absl::StatusOr<ExprPtr>;

  bool Is(TokenType type, size_t ahead = 0) const {
    return pos_ + ahead < t_.size() && t_[pos_ + ahead].type == type;
  }
  bool IsWord(std::string_view word, size_t ahead = 0) const {
    return Is(TokenType::kIdentifier, ahead) && t_[pos_ + ahead].value == word;
  }
  bool IsStatement(std::initializer_list<std::string_view> names) const {
    if (!Is(TokenType::kOpenStatement)) return false;
    for (std::string_view n : names) {
      if (IsWord(n, 1)) return true;
    }
    return false;
  }
  int Line() const { return pos_ < t_.size() ? t_[pos_].line : (t_.empty() ? 1 : t_.back().line); }
  absl::Status Error(std::string_view what) const {
    std::string got =
        pos_ < t_.size() ? internal::Cat("'", t_[pos_].value, "'") : "end of template";
    return absl::InvalidArgumentError(
        internal::Cat("syntax error at line ", Line(), ": ", what, ", got ", got));
  }
  absl::Status Expect(TokenType type, std::string_view what) {
    if (!Is(type)) return Error(internal::Cat("expected ", what));
    ++pos_;
    return absl::OkStatus();
  }
  absl::Status ExpectWord(std::string_view word) {
    if (!IsWord(word)) return Error(internal::Cat("expected '", word, "'"));
    ++pos_;
    return absl::OkStatus();
  }
  ExprPtr NewExpr(Expr::Kind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = Line();
    return e;
  }

  absl::Status ParseAny(Block* out);
  absl::Status ParseStatement(Block* out);
  absl::Status ParseBlockUntil(std::initializer_list<std::string_view> ends, Block* out);
  absl::Status ParseEnd(std::string_view name);
  absl::Status ParseIf(Stmt* stmt);
  absl::Status ParseFor(Stmt* stmt);
  absl::Status ParseSet(Stmt* stmt);
  absl::Status ParseParams(std::vector<Param>* params);

  ExprOr ParseExpression();
  ExprOr ParseSequence(bool primary_only);
  ExprOr ParseOr();
  ExprOr ParseAnd();
  ExprOr ParseNot();
  ExprOr ParseComparison();
  ExprOr ParseAdditive();
  ExprOr ParseMultiplicative();
  ExprOr ParsePower();
  ExprOr ParseTest();
  ExprOr ParseFilter();
  ExprOr ParseUnary();
  ExprOr ParsePostfix(ExprPtr object);
  ExprOr ParseSubscript(ExprPtr object);
  ExprOr ParsePrimary();
  absl::Status ParseArgs(std::vector<Arg>* args);
  ExprOr Binary(ExprOr (Parser::*next)(), std::initializer_list<TokenType> types,
                std::initializer_list<std::string_view> words);

  // Bounds recursion on hostile input ("((((...", deeply nested blocks).
  class DepthGuard {
   public:
    explicit DepthGuard(Parser* p) : p_(p) { ++p_->depth_; }
    ~DepthGuard() { --p_->depth_; }
    bool too_deep() const { return p_->depth_ > kMaxDepth; }

   private:
    Parser* p_;
  };
  static constexpr int kMaxDepth = 200;

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

absl::Status Parser::ParseAny(Block* out) {
  const Token& tok = t_[pos_];
  switch (tok.type) {
    case TokenType::kComment:
      ++pos_;
      return absl::OkStatus();
    case TokenType::kText: {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kText;
      s->line = tok.line;
      s->text = tok.value;
      ++pos_;
      out->push_back(std::move(s));
      return absl::OkStatus();
    }
    case TokenType::kOpenExpression: {
      ++pos_;
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kOutput;
      s->line = tok.line;
      ExprOr e = ParseExpression();
      if (!e.ok()) return e.status();
      s->expr = std::move(*e);
      if (absl::Status st = Expect(TokenType::kCloseExpression, "'}}'"); !st.ok()) return st;
      out->push_back(std::move(s));
      return absl::OkStatus();
    }
    case TokenType::kOpenStatement:
      return ParseStatement(out);
    default:
      return Error("unexpected token");
  }
}

absl::Status Parser::ParseBlockUntil(std::initializer_list<std::string_view> ends, Block* out) {
  while (!IsStatement(ends)) {
    if (pos_ >= t_.size()) {
      std::string names;
      for (std::string_view e : ends) internal::Append(&names, names.empty() ? "" : " or ", e);
      return Error(internal::Cat("expected {% ", names, " %}"));
    }
    if (absl::Status s = ParseAny(out); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseEnd(std::string_view name) {
  if (absl::Status s = Expect(TokenType::kOpenStatement, "'{%'"); !s.ok()) return s;
  if (absl::Status s = ExpectWord(name); !s.ok()) return s;
  return Expect(TokenType::kCloseStatement, "'%}'");
}

absl::Status Parser::ParseStatement(Block* out) {
  DepthGuard guard(this);
  if (guard.too_deep()) return Error("statements nested too deeply");
  ++pos_;  // {%
  if (!Is(TokenType::kIdentifier)) return Error("expected a statement name");
  const std::string name = t_[pos_].value;
  auto stmt = std::make_unique<Stmt>();
  stmt->line = Line();
  ++pos_;
  absl::Status status;
  if (name == "if") {
    status = ParseIf(stmt.get());
    if (status.ok()) status = ParseEnd("endif");
  } else if (name == "for") {
    status = ParseFor(stmt.get());
    if (status.ok()) status = ParseEnd("endfor");
  } else if (name == "set") {
    status = ParseSet(stmt.get());
  } else if (name == "macro") {
    stmt->kind = Stmt::Kind::kMacro;
    if (!Is(TokenType::kIdentifier)) return Error("expected a macro name");
    stmt->name = t_[pos_++].value;
    status = ParseParams(&stmt->params);
    if (status.ok()) status = Expect(TokenType::kCloseStatement, "'%}'");
    if (status.ok()) status = ParseBlockUntil({"endmacro"}, &stmt->body);
    if (status.ok()) status = ParseEnd("endmacro");
  } else if (name == "call") {
    stmt->kind = Stmt::Kind::kCallBlock;
    if (Is(TokenType::kOpenParen)) status = ParseParams(&stmt->params);
    ExprOr call = status.ok() ? ParseExpression() : ExprOr(status);
    if (!call.ok()) return call.status();
    if ((*call)->kind != Expr::Kind::kCall) return Error("expected a macro call after 'call'");
    stmt->expr = std::move(*call);
    status = Expect(TokenType::kCloseStatement, "'%}'");
    if (status.ok()) status = ParseBlockUntil({"endcall"}, &stmt->body);
    if (status.ok()) status = ParseEnd("endcall");
  } else if (name == "filter") {
    stmt->kind = Stmt::Kind::kFilterBlock;
    auto filter = NewExpr(Expr::Kind::kFilter);
    if (!Is(TokenType::kIdentifier)) return Error("expected a filter name");
    filter->name = t_[pos_++].value;
    if (Is(TokenType::kOpenParen)) status = ParseArgs(&filter->args);
    stmt->expr = std::move(filter);
    if (status.ok()) status = Expect(TokenType::kCloseStatement, "'%}'");
    if (status.ok()) status = ParseBlockUntil({"endfilter"}, &stmt->body);
    if (status.ok()) status = ParseEnd("endfilter");
  } else if (name == "break" || name == "continue") {
    stmt->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    status = Expect(TokenType::kCloseStatement, "'%}'");
  } else {
    --pos_;
    return Error("unknown statement");
  }
  if (!status.ok()) return status;
  out->push_back(std::move(stmt));
  return absl::OkStatus();
}

absl::Status Parser::ParseIf(Stmt* stmt) {
  stmt->kind = Stmt::Kind::kIf;
  ExprOr test = ParseExpression();
  if (!test.ok()) return test.status();
  stmt->expr = std::move(*test);
  if (absl::Status s = Expect(TokenType::kCloseStatement, "'%}'"); !s.ok()) return s;
  if (absl::Status s = ParseBlockUntil({"elif", "else", "endif"}, &stmt->body); !s.ok()) return s;
  if (IsStatement({"elif"})) {
    pos_ += 2;
    auto nested = std::make_unique<Stmt>();
    nested->line = Line();
    if (absl::Status s = ParseIf(nested.get()); !s.ok()) return s;
    stmt->else_body.push_back(std::move(nested));
  } else if (IsStatement({"else"})) {
    pos_ += 2;
    if (absl::Status s = Expect(TokenType::kCloseStatement, "'%}'"); !s.ok()) return s;
    if (absl::Status s = ParseBlockUntil({"endif"}, &stmt->else_body); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseFor(Stmt* stmt) {
  stmt->kind = Stmt::Kind::kFor;
  ExprOr target = ParseSequence(/*primary_only=*/true);
  if (!target.ok()) return target.status();
  if ((*target)->kind != Expr::Kind::kIdentifier && (*target)->kind != Expr::Kind::kTuple) {
    return Error("expected a loop variable or tuple");
  }
  stmt->target = std::move(*target);
  if (absl::Status s = ExpectWord("in"); !s.ok()) return s;
  ExprOr iterable = ParseExpression();
  if (!iterable.ok()) return iterable.status();
  if ((*iterable)->kind == Expr::Kind::kSelect) {  // for x in xs if cond
    stmt->filter = std::move((*iterable)->b);
    stmt->expr = std::move((*iterable)->a);
  } else {
    stmt->expr = std::move(*iterable);
  }
  if (absl::Status s = Expect(TokenType::kCloseStatement, "'%}'"); !s.ok()) return s;
  if (absl::Status s = ParseBlockUntil({"endfor", "else"}, &stmt->body); !s.ok()) return s;
  if (IsStatement({"else"})) {
    pos_ += 2;
    if (absl::Status s = Expect(TokenType::kCloseStatement, "'%}'"); !s.ok()) return s;
    if (absl::Status s = ParseBlockUntil({"endfor"}, &stmt->else_body); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseSet(Stmt* stmt) {
  ExprOr target = ParseSequence(/*primary_only=*/false);
  if (!target.ok()) return target.status();
  const Expr::Kind k = (*target)->kind;
  if (k != Expr::Kind::kIdentifier && k != Expr::Kind::kTuple && k != Expr::Kind::kMember) {
    return Error("expected a variable, tuple or namespace attribute to set");
  }
  stmt->target = std::move(*target);
  if (Is(TokenType::kEquals)) {
    ++pos_;
    stmt->kind = Stmt::Kind::kSet;
    ExprOr value = ParseSequence(/*primary_only=*/false);
    if (!value.ok()) return value.status();
    stmt->expr = std::move(*value);
    return Expect(TokenType::kCloseStatement, "'%}'");
  }
  stmt->kind = Stmt::Kind::kSetBlock;
  if (absl::Status s = Expect(TokenType::kCloseStatement, "'%}'"); !s.ok()) return s;
  if (absl::Status s = ParseBlockUntil({"endset"}, &stmt->body); !s.ok()) return s;
  return ParseEnd("endset");
}

absl::Status Parser::ParseParams(std::vector<Param>* params) {
  if (absl::Status s = Expect(TokenType::kOpenParen, "'('"); !s.ok()) return s;
  bool saw_default = false;
  while (!Is(TokenType::kCloseParen)) {
    if (!Is(TokenType::kIdentifier)) return Error("expected a parameter name");
    Param p;
    p.name = t_[pos_++].value;
    for (const Param& other : *params) {
      if (other.name == p.name) return Error(internal::Cat("duplicate parameter '", p.name, "'"));
    }
    if (Is(TokenType::kEquals)) {
      ++pos_;
      ExprOr value = ParseExpression();
      if (!value.ok()) return value.status();
      p.default_value = std::move(*value);
      saw_default = true;
    } else if (saw_default) {
      return Error("non-default parameter follows default parameter");
    }
    params->push_back(std::move(p));
    if (Is(TokenType::kComma)) {
      ++pos_;
    } else if (!Is(TokenType::kCloseParen)) {
      return Error("expected ',' or ')'");
    }
  }
  ++pos_;
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> Parser::ParseExpression() {
  DepthGuard guard(this);
  if (guard.too_deep()) return Error("expression nested too deeply");
  ExprOr value = ParseOr();
  if (!value.ok() || !IsWord("if")) return value;
  ++pos_;
  ExprOr test = ParseOr();
  if (!test.ok()) return test;
  if (IsWord("else")) {
    ++pos_;
    ExprOr otherwise = ParseExpression();
    if (!otherwise.ok()) return otherwise;
    auto e = NewExpr(Expr::Kind::kTernary);
    e->a = std::move(*test);
    e->b = std::move(*value);
    e->c = std::move(*otherwise);
    return e;
  }
  auto e = NewExpr(Expr::Kind::kSelect);
  e->a = std::move(*value);
  e->b = std::move(*test);
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseSequence(bool primary_only) {
  ExprOr first = primary_only ? ParsePrimary() : ParseExpression();
  if (!first.ok() || !Is(TokenType::kComma)) return first;
  auto tuple = NewExpr(Expr::Kind::kTuple);
  tuple->elements.push_back(std::move(*first));
  while (Is(TokenType::kComma)) {
    ++pos_;
    ExprOr next = primary_only ? ParsePrimary() : ParseExpression();
    if (!next.ok()) return next;
    tuple->elements.push_back(std::move(*next));
  }
  return tuple;
}

absl::StatusOr<ExprPtr> Parser::Binary(ExprOr (Parser::*next)(),
                                       std::initializer_list<TokenType> types,
                                       std::initializer_list<std::string_view> words) {
  ExprOr left = (this->*next)();
  if (!left.ok()) return left;
  while (true) {
    bool match = false;
    for (TokenType type : types) match = match || Is(type);
    for (std::string_view w : words) match = match || IsWord(w);
    if (!match) return left;
    auto e = NewExpr(Expr::Kind::kBinary);
    e->name = t_[pos_++].value;
    ExprOr right = (this->*next)();
    if (!right.ok()) return right;
    e->a = std::move(*left);
    e->b = std::move(*right);
    left = std::move(e);
  }
}

absl::StatusOr<ExprPtr> Parser::ParseOr() { return Binary(&Parser::ParseAnd, {}, {"or"}); }
absl::StatusOr<ExprPtr> Parser::ParseAnd() { return Binary(&Parser::ParseNot, {}, {"and"}); }

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  DepthGuard guard(this);
  if (guard.too_deep()) return Error("expression nested too deeply");
  if (!IsWord("not")) return ParseComparison();
  auto e = NewExpr(Expr::Kind::kUnary);
  e->name = "not";
  ++pos_;
  ExprOr operand = ParseNot();
  if (!operand.ok()) return operand;
  e->a = std::move(*operand);
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseComparison() {
  ExprOr left = ParseAdditive();
  if (!left.ok()) return left;
  while (true) {
    std::string op;
    if (IsWord("not") && IsWord("in", 1)) {
      op = "not in";
      pos_ += 2;
    } else if (IsWord("in") || Is(TokenType::kComparison)) {
      op = t_[pos_++].value;
    } else {
      return left;
    }
    auto e = NewExpr(Expr::Kind::kBinary);
    e->name = op;
    ExprOr right = ParseAdditive();
    if (!right.ok()) return right;
    e->a = std::move(*left);
    e->b = std::move(*right);
    left = std::move(e);
  }
}

absl::StatusOr<ExprPtr> Parser::ParseAdditive() {
  return Binary(&Parser::ParseMultiplicative, {TokenType::kAdditive}, {});
}
absl::StatusOr<ExprPtr> Parser::ParseMultiplicative() {
  return Binary(&Parser::ParsePower, {TokenType::kMultiplicative}, {});
}
absl::StatusOr<ExprPtr> Parser::ParsePower() {
  return Binary(&Parser::ParseTest, {TokenType::kPower}, {});
}

absl::StatusOr<ExprPtr> Parser::ParseTest() {
  ExprOr operand = ParseFilter();
  if (!operand.ok()) return operand;
  while (IsWord("is")) {
    ++pos_;
    auto e = NewExpr(Expr::Kind::kTest);
    if (IsWord("not")) {
      e->negate = true;
      ++pos_;
    }
    // Test names may be keywords ("none", "true", "in").
    if (!Is(TokenType::kIdentifier)) return Error("expected a test name after 'is'");
    e->name = t_[pos_++].value;
    if (Is(TokenType::kOpenParen)) {
      if (absl::Status s = ParseArgs(&e->args); !s.ok()) return s;
    } else if (Is(TokenType::kNumber) || Is(TokenType::kString) || Is(TokenType::kOpenBracket) ||
               Is(TokenType::kOpenBrace) ||
               (Is(TokenType::kIdentifier) && !IsWord("and") && !IsWord("or") && !IsWord("else") &&
                !IsWord("if") && !IsWord("is") && !IsWord("not") && !IsWord("in"))) {
      // Jinja's argument without parentheses: `x is divisibleby 3`, `x is sameas y`.
      ExprOr arg = ParseFilter();
      if (!arg.ok()) return arg;
      e->args.push_back(Arg{Arg::Kind::kPositional, "", std::move(*arg)});
    }
    e->a = std::move(*operand);
    operand = std::move(e);
  }
  return operand;
}

absl::StatusOr<ExprPtr> Parser::ParseFilter() {
  ExprOr operand = ParseUnary();
  if (!operand.ok()) return operand;
  while (Is(TokenType::kPipe)) {
    ++pos_;
    if (!Is(TokenType::kIdentifier)) return Error("expected a filter name after '|'");
    auto e = NewExpr(Expr::Kind::kFilter);
    e->name = t_[pos_++].value;
    if (Is(TokenType::kOpenParen)) {
      if (absl::Status s = ParseArgs(&e->args); !s.ok()) return s;
    }
    e->a = std::move(*operand);
    operand = std::move(e);
  }
  return operand;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary() {
  DepthGuard guard(this);
  if (guard.too_deep()) return Error("expression nested too deeply");
  if ((Is(TokenType::kUnary) || Is(TokenType::kAdditive)) &&
      (t_[pos_].value == "-" || t_[pos_].value == "+")) {
    auto e = NewExpr(Expr::Kind::kUnary);
    e->name = t_[pos_++].value;
    ExprOr operand = ParseUnary();
    if (!operand.ok()) return operand;
    e->a = std::move(*operand);
    return e;
  }
  ExprOr primary = ParsePrimary();
  if (!primary.ok()) return primary;
  return ParsePostfix(std::move(*primary));
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr object) {
  while (true) {
    if (Is(TokenType::kDot)) {
      ++pos_;
      auto e = NewExpr(Expr::Kind::kMember);
      if (Is(TokenType::kIdentifier)) {
        e->name = t_[pos_++].value;
      } else if (Is(TokenType::kNumber)) {
        auto key = NewExpr(Expr::Kind::kLiteral);
        key->literal = Value::Int(std::atoll(t_[pos_++].value.c_str()));
        e->b = std::move(key);
      } else {
        return Error("expected an attribute name after '.'");
      }
      e->a = std::move(object);
      object = std::move(e);
    } else if (Is(TokenType::kOpenBracket)) {
      ExprOr sub = ParseSubscript(std::move(object));
      if (!sub.ok()) return sub;
      object = std::move(*sub);
    } else if (Is(TokenType::kOpenParen)) {
      auto e = NewExpr(Expr::Kind::kCall);
      if (absl::Status s = ParseArgs(&e->args); !s.ok()) return s;
      e->a = std::move(object);
      object = std::move(e);
    } else {
      return object;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr object) {
  ++pos_;  // [
  std::vector<ExprPtr> parts(1);
  bool slice = false;
  while (!Is(TokenType::kCloseBracket)) {
    if (pos_ >= t_.size()) return Error("expected ']'");
    if (Is(TokenType::kColon)) {
      ++pos_;
      slice = true;
      parts.emplace_back();
      if (parts.size() > 3) return Error("a slice takes at most three parts");
      continue;
    }
    if (parts.back() != nullptr) return Error("expected ':' or ']'");
    ExprOr part = ParseExpression();
    if (!part.ok()) return part;
    parts.back() = std::move(*part);
  }
  ++pos_;
  if (!slice && parts[0] == nullptr) return Error("expected a subscript");
  auto e = NewExpr(slice ? Expr::Kind::kSlice : Expr::Kind::kMember);
  e->a = std::move(object);
  if (slice) {
    parts.resize(3);
    e->elements = std::move(parts);
  } else {
    e->b = std::move(parts[0]);
  }
  return e;
}

absl::Status Parser::ParseArgs(std::vector<Arg>* args) {
  ++pos_;  // (
  bool saw_keyword = false;
  while (!Is(TokenType::kCloseParen)) {
    if (pos_ >= t_.size()) return Error("expected ')'");
    Arg arg;
    if (Is(TokenType::kPower)) {
      ++pos_;
      arg.kind = Arg::Kind::kKeywordSpread;
    } else if (Is(TokenType::kMultiplicative) && t_[pos_].value == "*") {
      ++pos_;
      arg.kind = Arg::Kind::kSpread;
    } else if (Is(TokenType::kIdentifier) && Is(TokenType::kEquals, 1)) {
      arg.kind = Arg::Kind::kKeyword;
      arg.name = t_[pos_].value;
      pos_ += 2;
      saw_keyword = true;
    } else if (saw_keyword) {
      return Error("positional argument follows keyword argument");
    }
    ExprOr value = ParseExpression();
    if (!value.ok()) return value.status();
    arg.value = std::move(*value);
    args->push_back(std::move(arg));
    if (Is(TokenType::kComma)) {
      ++pos_;
    } else if (!Is(TokenType::kCloseParen)) {
      return Error("expected ',' or ')'");
    }
  }
  ++pos_;
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  if (pos_ >= t_.size()) return Error("expected an expression");
  const Token& tok = t_[pos_];
  switch (tok.type) {
    case TokenType::kNumber: {
      ++pos_;
      auto e = NewExpr(Expr::Kind::kLiteral);
      if (tok.value.find('.') != std::string::npos) {
        e->literal = Value::Float(std::strtod(tok.value.c_str(), nullptr));
      } else {
        int64_t v = 0;
        auto [p, ec] = std::from_chars(tok.value.data(), tok.value.data() + tok.value.size(), v);
        if (ec != std::errc()) return Error("integer literal out of range");
        e->literal = Value::Int(v);
      }
      return e;
    }
    case TokenType::kString: {
      auto e = NewExpr(Expr::Kind::kLiteral);
      std::string s;
      while (Is(TokenType::kString)) s += t_[pos_++].value;  // adjacent literals concatenate
      e->literal = Value::String(std::move(s));
      return e;
    }
    case TokenType::kIdentifier: {
      ++pos_;
      auto e = NewExpr(Expr::Kind::kIdentifier);
      e->name = tok.value;
      return e;
    }
    case TokenType::kOpenParen: {
      ++pos_;
      ExprOr inner = ParseSequence(/*primary_only=*/false);
      if (!inner.ok()) return inner;
      if (absl::Status s = Expect(TokenType::kCloseParen, "')'"); !s.ok()) return s;
      return inner;
    }
    case TokenType::kOpenBracket: {
      ++pos_;
      auto e = NewExpr(Expr::Kind::kArray);
      while (!Is(TokenType::kCloseBracket)) {
        ExprOr item = ParseExpression();
        if (!item.ok()) return item;
        e->elements.push_back(std::move(*item));
        if (Is(TokenType::kComma)) {
          ++pos_;
        } else if (!Is(TokenType::kCloseBracket)) {
          return Error("expected ',' or ']'");
        }
      }
      ++pos_;
      return e;
    }
    case TokenType::kOpenBrace: {
      ++pos_;
      auto e = NewExpr(Expr::Kind::kObject);
      while (!Is(TokenType::kCloseBrace)) {
        ExprOr key = ParseExpression();
        if (!key.ok()) return key;
        if (absl::Status s = Expect(TokenType::kColon, "':'"); !s.ok()) return s;
        ExprOr value = ParseExpression();
        if (!value.ok()) return value;
        e->pairs.emplace_back(std::move(*key), std::move(*value));
        if (Is(TokenType::kComma)) {
          ++pos_;
        } else if (!Is(TokenType::kCloseBrace)) {
          return Error("expected ',' or '}'");
        }
      }
      ++pos_;
      return e;
    }
    default:
      return Error("expected an expression");
  }
}

}  // namespace

absl::StatusOr<Block> Parse(const std::vector<Token>& tokens) {
  return Parser(tokens).ParseTemplate();
}

}  // namespace strata::engine::jinja
