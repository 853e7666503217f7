#include "engine/tokenizer/jinja/interpreter.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/internal/absl_view.h"
#include "engine/tokenizer/jinja/builtins.h"
#include "engine/tokenizer/jinja/json_format.h"
#include "engine/tokenizer/utf8.h"

namespace strata::engine::jinja {
namespace {

using internal::Av;
using K = Value::Kind;

constexpr int kMaxCallDepth = 100;
constexpr char kRaisedPayload[] = "strata.jinja/raised";

absl::Status Err(int line, std::string_view message) {
  return absl::InvalidArgumentError(
      internal::Cat("template error at line ", line, ": ", Av(message)));
}

bool IsNumeric(const Value& v) { return v.is_number() || v.kind() == K::kBool; }

// Code points of a string (ill-formed bytes count as one each).
std::vector<std::string_view> CodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const size_t len = DecodeUtf8Step(s.substr(i)).length;
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

// Python's index normalisation; nullopt when out of range.
std::optional<size_t> NormaliseIndex(int64_t index, size_t size) {
  const int64_t n = static_cast<int64_t>(size);
  if (index < 0) index += n;
  if (index < 0 || index >= n) return std::nullopt;
  return static_cast<size_t>(index);
}

absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b, int line) {
  const bool ints = a.kind() != K::kFloat && b.kind() != K::kFloat;
  const double x = a.number(), y = b.number();
  const int64_t i = a.kind() == K::kFloat ? 0 : static_cast<int64_t>(x);
  const int64_t j = b.kind() == K::kFloat ? 0 : static_cast<int64_t>(y);
  int64_t r = 0;
  if (op == "+" || op == "-" || op == "*") {
    if (!ints) return Value::Float(op == "+" ? x + y : op == "-" ? x - y : x * y);
    const bool overflow = op == "+"   ? __builtin_add_overflow(i, j, &r)
                          : op == "-" ? __builtin_sub_overflow(i, j, &r)
                                      : __builtin_mul_overflow(i, j, &r);
    if (overflow) return Err(line, "integer overflow");
    return Value::Int(r);
  }
  if ((op == "/" || op == "//" || op == "%") && y == 0) return Err(line, "division by zero");
  if (op == "/") return Value::Float(x / y);
  if (op == "//") {
    if (!ints) return Value::Float(std::floor(x / y));
    r = i / j;
    if ((i % j != 0) && ((i < 0) != (j < 0))) --r;
    return Value::Int(r);
  }
  if (op == "%") {
    if (!ints) {
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::Float(m);
    }
    r = i % j;
    if (r != 0 && ((r < 0) != (j < 0))) r += j;
    return Value::Int(r);
  }
  if (op == "**") {
    if (ints && j >= 0) {
      int64_t result = 1;
      for (int64_t k = 0; k < j; ++k) {
        if (__builtin_mul_overflow(result, i, &result)) return Err(line, "integer overflow");
      }
      return Value::Int(result);
    }
    if (x == 0 && y < 0) return Err(line, "0.0 cannot be raised to a negative power");
    return Value::Float(std::pow(x, y));
  }
  return Err(line, internal::Cat("unknown operator '", op, "'"));
}

absl::StatusOr<bool> Contains(const Value& needle, const Value& haystack, int line) {
  switch (haystack.kind()) {
    case K::kUndefined:
      return false;
    case K::kString:
      if (!needle.is_string()) break;
      return absl::StrContains(haystack.str(), needle.str());
    case K::kArray:
      for (const Value& item : haystack.array()) {
        if (Equal(item, needle)) return true;
      }
      return false;
    case K::kObject:
    case K::kNamespace: {
      if (!needle.is_string()) return false;
      const ObjectData& data = haystack.kind() == K::kObject ? haystack.object() : haystack.ns();
      return data.Find(needle.str()) != nullptr;
    }
    default:
      break;
  }
  return Err(line, internal::Cat("'in' is not supported between ", needle.TypeName(), " and ",
                                 haystack.TypeName()));
}

absl::StatusOr<Value> Compare(const std::string& op, const Value& a, const Value& b, int line) {
  int cmp = 0;
  if (IsNumeric(a) && IsNumeric(b)) {
    cmp = a.number() < b.number() ? -1 : a.number() > b.number() ? 1 : 0;
  } else if (a.is_string() && b.is_string()) {
    cmp = a.str().compare(b.str());
  } else {
    return Err(line, internal::Cat("cannot compare ", a.TypeName(), " with ", b.TypeName()));
  }
  if (op == "<") return Value::Bool(cmp < 0);
  if (op == ">") return Value::Bool(cmp > 0);
  if (op == "<=") return Value::Bool(cmp <= 0);
  return Value::Bool(cmp >= 0);
}

}  // namespace

absl::Status WithLine(absl::Status status, int line) {
  if (status.ok() || status.GetPayload(kRaisedPayload).has_value() ||
      absl::StartsWith(status.message(), "template error") ||
      absl::StartsWith(status.message(), "syntax error")) {
    return status;
  }
  return Err(line, internal::Sv(status.message()));
}

absl::Status RaisedError(std::string_view message) {
  absl::Status status = absl::InvalidArgumentError(Av(message));
  status.SetPayload(kRaisedPayload, absl::Cord("1"));
  return status;
}

bool IsRaisedError(const absl::Status& status) {
  return status.GetPayload(kRaisedPayload).has_value();
}

Interpreter::Interpreter(ObjectData globals)
    : root_{std::move(globals), nullptr}, current_(&root_) {}

absl::StatusOr<std::string> Interpreter::Render(const Block& program) {
  std::string out;
  absl::StatusOr<Flow> flow = ExecBlock(program, &out);
  if (!flow.ok()) return flow.status();
  return out;
}

Value Interpreter::Lookup(std::string_view name) const {
  for (const Scope* s = current_; s != nullptr; s = s->parent) {
    if (const Value* v = s->vars.Find(name)) return *v;
  }
  return Value();
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecBlock(const Block& block, std::string* out) {
  for (const StmtPtr& stmt : block) {
    absl::StatusOr<Flow> flow = Exec(*stmt, out);
    if (!flow.ok() || *flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<Interpreter::Flow> Interpreter::Exec(const Stmt& stmt, std::string* out) {
  switch (stmt.kind) {
    case Stmt::Kind::kText:
      out->append(stmt.text);
      return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      absl::StatusOr<Value> v = Eval(*stmt.expr);
      if (!v.ok()) return v.status();
      out->append(ToDisplayString(*v));
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf: {
      absl::StatusOr<Value> test = Eval(*stmt.expr);
      if (!test.ok()) return test.status();
      return ExecBlock(test->Truthy() ? stmt.body : stmt.else_body, out);
    }
    case Stmt::Kind::kFor:
      return ExecFor(stmt, out);
    case Stmt::Kind::kSet: {
      absl::StatusOr<Value> v = Eval(*stmt.expr);
      if (!v.ok()) return v.status();
      if (absl::Status s = ExecSet(stmt, std::move(*v)); !s.ok()) return s;
      return Flow::kNormal;
    }
    case Stmt::Kind::kSetBlock: {
      std::string captured;
      if (absl::StatusOr<Flow> f = ExecBlock(stmt.body, &captured); !f.ok()) return f.status();
      if (absl::Status s = ExecSet(stmt, Value::String(std::move(captured))); !s.ok()) return s;
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro:
      Assign(stmt.name, MakeMacro(stmt));
      return Flow::kNormal;
    case Stmt::Kind::kCallBlock:
      if (absl::Status s = ExecCallBlock(stmt, out); !s.ok()) return s;
      return Flow::kNormal;
    case Stmt::Kind::kFilterBlock: {
      std::string body;
      if (absl::StatusOr<Flow> f = ExecBlock(stmt.body, &body); !f.ok()) return f.status();
      absl::StatusOr<Value> v = EvalFilter(*stmt.expr, Value::String(std::move(body)));
      if (!v.ok()) return v.status();
      out->append(ToDisplayString(*v));
      return Flow::kNormal;
    }
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

absl::Status Interpreter::ExecSet(const Stmt& stmt, Value value) {
  const Expr& target = *stmt.target;
  if (target.kind == Expr::Kind::kIdentifier) {
    Assign(target.name, std::move(value));
    return absl::OkStatus();
  }
  if (target.kind == Expr::Kind::kTuple) {
    if (!value.is_array()) return Err(stmt.line, "cannot unpack a non-sequence in set");
    if (value.array().size() != target.elements.size()) {
      return Err(stmt.line, internal::Cat("set expects ", target.elements.size(), " values, got ",
                                          value.array().size()));
    }
    for (size_t i = 0; i < target.elements.size(); ++i) {
      if (target.elements[i]->kind != Expr::Kind::kIdentifier) {
        return Err(stmt.line, "can only unpack into names");
      }
      Assign(target.elements[i]->name, value.array()[i]);
    }
    return absl::OkStatus();
  }
  // Namespace attribute: {% set ns.name = value %}
  absl::StatusOr<Value> object = Eval(*target.a);
  if (!object.ok()) return object.status();
  if (object->kind() != K::kNamespace || target.b != nullptr) {
    return Err(stmt.line, "cannot assign attribute on non-namespace object");
  }
  object->ns().Set(target.name, std::move(value));
  return absl::OkStatus();
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecFor(const Stmt& stmt, std::string* out) {
  Scope scope{{}, current_};
  current_ = &scope;
  struct Restore {
    Interpreter* self;
    Scope* parent;
    ~Restore() { self->current_ = parent; }
  } restore{this, scope.parent};

  absl::StatusOr<Value> iterable = Eval(*stmt.expr);
  if (!iterable.ok()) return iterable.status();
  Value::Array items;
  if (iterable->is_array()) {
    items = iterable->array();
  } else if (iterable->is_object()) {
    for (const auto& [k, v] : iterable->object().items) items.push_back(Value::String(k));
  } else if (iterable->is_string()) {
    for (std::string_view cp : CodePoints(iterable->str()))
      items.push_back(Value::String(std::string(cp)));
  } else if (!iterable->is_undefined()) {
    return Err(stmt.line, internal::Cat("cannot iterate over ", iterable->TypeName()));
  }
  auto bind = [&](const Value& item) -> absl::Status {
    const Expr& target = *stmt.target;
    if (target.kind == Expr::Kind::kIdentifier) {
      Assign(target.name, item);
      return absl::OkStatus();
    }
    if (!item.is_array() || item.array().size() != target.elements.size()) {
      return Err(stmt.line, "cannot unpack loop item into the loop variables");
    }
    for (size_t i = 0; i < target.elements.size(); ++i) {
      Assign(target.elements[i]->name, item.array()[i]);
    }
    return absl::OkStatus();
  };
  if (stmt.filter != nullptr) {  // for x in xs if cond: filter before counting
    Value::Array kept;
    for (const Value& item : items) {
      if (absl::Status s = bind(item); !s.ok()) return s;
      absl::StatusOr<Value> keep = Eval(*stmt.filter);
      if (!keep.ok()) return keep.status();
      if (keep->Truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    ObjectData loop;
    loop.items = {{"index", Value::Int(i + 1)},
                  {"index0", Value::Int(i)},
                  {"revindex", Value::Int(n - i)},
                  {"revindex0", Value::Int(n - i - 1)},
                  {"first", Value::Bool(i == 0)},
                  {"last", Value::Bool(i == n - 1)},
                  {"length", Value::Int(n)},
                  {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value()},
                  {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value()}};
    Assign("loop", Value::MakeObject(std::move(loop)));
    if (absl::Status s = bind(items[static_cast<size_t>(i)]); !s.ok()) return s;
    absl::StatusOr<Flow> flow = ExecBlock(stmt.body, out);
    if (!flow.ok()) return flow.status();
    if (*flow == Flow::kBreak) break;
  }
  if (n == 0) {
    absl::StatusOr<Flow> flow = ExecBlock(stmt.else_body, out);
    if (!flow.ok()) return flow.status();
  }
  return Flow::kNormal;
}

Value Interpreter::MakeMacro(const Stmt& stmt) {
  const Stmt* def = &stmt;
  return Value::MakeCallable(stmt.name, [def](Interpreter& in, CallArgs& args) {
    return in.InvokeMacro(*def, args, in.current_);
  });
}

absl::StatusOr<Value> Interpreter::InvokeMacro(const Stmt& stmt, CallArgs& args, Scope* parent) {
  if (call_depth_ >= kMaxCallDepth) {
    return Err(stmt.line, internal::Cat("macro calls nested deeper than ", kMaxCallDepth));
  }
  Scope scope{{}, parent};
  Scope* saved = current_;
  current_ = &scope;
  ++call_depth_;
  struct Restore {
    Interpreter* self;
    Scope* saved;
    ~Restore() {
      self->current_ = saved;
      --self->call_depth_;
    }
  } restore{this, saved};

  std::vector<bool> bound(stmt.params.size(), false);
  Value::Array varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < stmt.params.size()) {
      Assign(stmt.params[i].name, args.positional[i]);
      bound[i] = true;
    } else {
      varargs.push_back(args.positional[i]);
    }
  }
  ObjectData kwargs;
  for (auto& [name, value] : args.keyword) {
    size_t k = 0;
    while (k < stmt.params.size() && stmt.params[k].name != name) ++k;
    if (k == stmt.params.size()) {
      kwargs.Set(name, value);
    } else if (bound[k]) {
      return Err(stmt.line,
                 internal::Cat("macro '", stmt.name, "' got multiple values for '", name, "'"));
    } else {
      Assign(name, value);
      bound[k] = true;
    }
  }
  for (size_t k = 0; k < stmt.params.size(); ++k) {
    if (bound[k]) continue;
    Value v;
    if (stmt.params[k].default_value != nullptr) {
      absl::StatusOr<Value> d = Eval(*stmt.params[k].default_value);
      if (!d.ok()) return d.status();
      v = std::move(*d);
    }
    Assign(stmt.params[k].name, std::move(v));
  }
  Assign("varargs", Value::MakeArray(std::move(varargs)));
  Assign("kwargs", Value::MakeObject(std::move(kwargs)));
  std::string out;
  absl::StatusOr<Flow> flow = ExecBlock(stmt.body, &out);
  if (!flow.ok()) return flow.status();
  return Value::String(std::move(out));
}

absl::Status Interpreter::ExecCallBlock(const Stmt& stmt, std::string* out) {
  const Expr& call = *stmt.expr;
  absl::StatusOr<Value> callee = Eval(*call.a);
  if (!callee.ok()) return callee.status();
  absl::StatusOr<CallArgs> args = EvalArgs(call.args);
  if (!args.ok()) return args.status();
  // caller() runs the block body in this statement's scope; it refuses to run once the block
  // is over (a template could have stored it in a namespace).
  auto alive = std::make_shared<bool>(true);
  Scope* call_scope = current_;
  const Stmt* def = &stmt;
  const Value caller = Value::MakeCallable(
      "caller", [def, call_scope, alive](Interpreter& in, CallArgs& caller_args) {
        if (!*alive)
          return absl::StatusOr<Value>(Err(def->line, "caller() used outside its call block"));
        return in.InvokeMacro(*def, caller_args, call_scope);
      });
  // The macro runs with `caller` visible in a scope between it and the call site.
  Scope with_caller{{}, current_};
  with_caller.vars.Set("caller", caller);
  Scope* saved = current_;
  current_ = &with_caller;
  absl::StatusOr<Value> result = Call(*callee, *args, stmt.line);
  current_ = saved;
  *alive = false;
  if (!result.ok()) return result.status();
  out->append(ToDisplayString(*result));
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::Call(const Value& callee, CallArgs& args, int line) {
  if (callee.kind() != K::kCallable) {
    return Err(line, internal::Cat("cannot call a value of type ", callee.TypeName()));
  }
  absl::StatusOr<Value> result = callee.callable().fn(*this, args);
  if (!result.ok()) return WithLine(result.status(), line);
  return result;
}

absl::StatusOr<CallArgs> Interpreter::EvalArgs(const std::vector<Arg>& args) {
  CallArgs out;
  for (const Arg& arg : args) {
    absl::StatusOr<Value> v = Eval(*arg.value);
    if (!v.ok()) return v.status();
    switch (arg.kind) {
      case Arg::Kind::kPositional:
        out.positional.push_back(std::move(*v));
        break;
      case Arg::Kind::kKeyword:
        out.keyword.emplace_back(arg.name, std::move(*v));
        break;
      case Arg::Kind::kSpread:
        if (!v->is_array()) return Err(arg.value->line, "'*' needs a sequence");
        for (const Value& item : v->array()) out.positional.push_back(item);
        break;
      case Arg::Kind::kKeywordSpread:
        if (!v->is_object()) return Err(arg.value->line, "'**' needs a mapping");
        for (const auto& [k, item] : v->object().items) out.keyword.emplace_back(k, item);
        break;
    }
  }
  return out;
}

absl::StatusOr<Value> Interpreter::EvalFilter(const Expr& expr, const Value& operand) {
  absl::StatusOr<CallArgs> args = EvalArgs(expr.args);
  if (!args.ok()) return args.status();
  absl::StatusOr<Value> v = ApplyFilter(*this, expr.name, operand, *args);
  if (!v.ok()) return WithLine(v.status(), expr.line);
  return v;
}

absl::StatusOr<Value> Interpreter::Eval(const Expr& expr) {
  switch (expr.kind) {
    case Expr::Kind::kLiteral:
      return expr.literal;
    case Expr::Kind::kIdentifier:
      return Lookup(expr.name);
    case Expr::Kind::kArray:
    case Expr::Kind::kTuple: {
      Value::Array items;
      for (const ExprPtr& e : expr.elements) {
        absl::StatusOr<Value> v = Eval(*e);
        if (!v.ok()) return v;
        items.push_back(std::move(*v));
      }
      return Value::MakeArray(std::move(items), expr.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kObject: {
      ObjectData data;
      for (const auto& [key_expr, value_expr] : expr.pairs) {
        absl::StatusOr<Value> key = Eval(*key_expr);
        if (!key.ok()) return key;
        if (!key->is_string()) return Err(expr.line, "object keys must be strings");
        absl::StatusOr<Value> value = Eval(*value_expr);
        if (!value.ok()) return value;
        data.Set(key->str(), std::move(*value));
      }
      return Value::MakeObject(std::move(data));
    }
    case Expr::Kind::kUnary: {
      absl::StatusOr<Value> v = Eval(*expr.a);
      if (!v.ok()) return v;
      if (expr.name == "not") return Value::Bool(!v->Truthy());
      if (!IsNumeric(*v)) return Err(expr.line, internal::Cat("bad operand for unary ", expr.name));
      const bool neg = expr.name == "-";
      if (v->kind() == K::kFloat) return Value::Float(neg ? -v->float_value() : v->float_value());
      const int64_t i = static_cast<int64_t>(v->number());
      return Value::Int(neg ? -i : i);
    }
    case Expr::Kind::kBinary:
      return EvalBinary(expr);
    case Expr::Kind::kMember:
      return EvalMember(expr);
    case Expr::Kind::kSlice:
      return EvalSlice(expr);
    case Expr::Kind::kCall:
      return EvalCall(expr);
    case Expr::Kind::kFilter: {
      absl::StatusOr<Value> operand = Eval(*expr.a);
      if (!operand.ok()) return operand;
      return EvalFilter(expr, *operand);
    }
    case Expr::Kind::kTest: {
      absl::StatusOr<Value> operand = Eval(*expr.a);
      if (!operand.ok()) return operand;
      absl::StatusOr<CallArgs> args = EvalArgs(expr.args);
      if (!args.ok()) return args.status();
      absl::StatusOr<bool> result = ApplyTest(*this, expr.name, *operand, *args);
      if (!result.ok()) return WithLine(result.status(), expr.line);
      return Value::Bool(*result != expr.negate);
    }
    case Expr::Kind::kTernary: {
      absl::StatusOr<Value> test = Eval(*expr.a);
      if (!test.ok()) return test;
      return Eval(test->Truthy() ? *expr.b : *expr.c);
    }
    case Expr::Kind::kSelect: {
      absl::StatusOr<Value> test = Eval(*expr.b);
      if (!test.ok()) return test;
      return test->Truthy() ? Eval(*expr.a) : absl::StatusOr<Value>(Value());
    }
  }
  return Value();
}

absl::StatusOr<Value> Interpreter::EvalBinary(const Expr& expr) {
  const std::string& op = expr.name;
  absl::StatusOr<Value> left = Eval(*expr.a);
  if (!left.ok()) return left;
  if (op == "and") return left->Truthy() ? Eval(*expr.b) : left;
  if (op == "or") return left->Truthy() ? left : Eval(*expr.b);
  absl::StatusOr<Value> right = Eval(*expr.b);
  if (!right.ok()) return right;
  const Value& a = *left;
  const Value& b = *right;
  if (op == "==") return Value::Bool(Equal(a, b));
  if (op == "!=") return Value::Bool(!Equal(a, b));
  if (op == "in" || op == "not in") {
    absl::StatusOr<bool> in = Contains(a, b, expr.line);
    if (!in.ok()) return in.status();
    return Value::Bool(*in == (op == "in"));
  }
  if (op == "~") return Value::String(ToConcatString(a) + ToConcatString(b));
  if (a.is_undefined() || b.is_undefined() || a.is_none() || b.is_none()) {
    return Err(expr.line,
               internal::Cat("cannot apply '", op, "' to ", a.TypeName(), " and ", b.TypeName()));
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") return Compare(op, a, b, expr.line);
  if (IsNumeric(a) && IsNumeric(b)) return Arithmetic(op, a, b, expr.line);
  if (op == "+" && a.is_array() && b.is_array()) {
    Value::Array items = a.array();
    items.insert(items.end(), b.array().begin(), b.array().end());
    return Value::MakeArray(std::move(items));
  }
  if (op == "+" && (a.is_string() || b.is_string())) {
    return Value::String(ToConcatString(a) + ToConcatString(b));
  }
  if (op == "*" && (a.is_string() || a.is_array()) && b.kind() == K::kInt) {
    const int64_t times = std::max<int64_t>(0, b.int_value());
    if (a.is_string()) {
      if (static_cast<double>(a.str().size()) * static_cast<double>(times) > 64e6) {
        return Err(expr.line, "string repetition too large");
      }
      std::string s;
      for (int64_t k = 0; k < times; ++k) s += a.str();
      return Value::String(std::move(s));
    }
    Value::Array items;
    for (int64_t k = 0; k < times && items.size() < 1000000; ++k) {
      items.insert(items.end(), a.array().begin(), a.array().end());
    }
    return Value::MakeArray(std::move(items));
  }
  return Err(expr.line, internal::Cat("unsupported operand types for '", op, "': ", a.TypeName(),
                                      " and ", b.TypeName()));
}

absl::StatusOr<Value> Interpreter::EvalMember(const Expr& expr) {
  absl::StatusOr<Value> object = Eval(*expr.a);
  if (!object.ok()) return object;
  Value key = Value::String(expr.name);
  if (expr.b != nullptr) {
    absl::StatusOr<Value> k = Eval(*expr.b);
    if (!k.ok()) return k;
    key = std::move(*k);
  }
  const Value& obj = *object;
  if (key.is_string()) {
    if (obj.is_object()) {
      if (const Value* v = obj.object().Find(key.str())) return *v;
    } else if (obj.kind() == K::kNamespace) {
      if (const Value* v = obj.ns().Find(key.str())) return *v;
      return Value();
    } else if ((obj.is_array() || obj.is_string()) && key.str() == "length") {
      return Value::Int(
          static_cast<int64_t>(obj.is_array() ? obj.array().size() : CountCodePoints(obj.str())));
    }
    std::optional<Value> method = BoundMethod(obj, key.str());
    return method.has_value() ? *method : Value();
  }
  if (key.kind() == K::kInt && obj.is_array()) {
    std::optional<size_t> i = NormaliseIndex(key.int_value(), obj.array().size());
    return i.has_value() ? obj.array()[*i] : Value();
  }
  if (key.kind() == K::kInt && obj.is_string()) {
    std::vector<std::string_view> cps = CodePoints(obj.str());
    std::optional<size_t> i = NormaliseIndex(key.int_value(), cps.size());
    return i.has_value() ? Value::String(std::string(cps[*i])) : Value();
  }
  if (obj.is_undefined() || obj.is_none()) return Value();
  return Err(expr.line, internal::Cat("cannot index ", obj.TypeName(), " with ", key.TypeName()));
}

absl::StatusOr<Value> Interpreter::EvalSlice(const Expr& expr) {
  absl::StatusOr<Value> object = Eval(*expr.a);
  if (!object.ok()) return object;
  std::optional<int64_t> parts[3];
  for (int k = 0; k < 3; ++k) {
    if (expr.elements[k] == nullptr) continue;
    absl::StatusOr<Value> v = Eval(*expr.elements[k]);
    if (!v.ok()) return v;
    if (v->is_none() || v->is_undefined()) continue;
    if (v->kind() != K::kInt) return Err(expr.line, "slice indices must be integers");
    parts[k] = v->int_value();
  }
  const int64_t step = parts[2].value_or(1);
  if (step == 0) return Err(expr.line, "slice step cannot be zero");
  std::vector<std::string_view> cps;
  if (object->is_string()) {
    cps = CodePoints(object->str());
  } else if (!object->is_array()) {
    return Err(expr.line, internal::Cat("cannot slice ", object->TypeName()));
  }
  const int64_t n = static_cast<int64_t>(object->is_string() ? cps.size() : object->array().size());
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v.has_value()) return dflt;
    int64_t x = *v < 0 ? *v + n : *v;
    return step > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t start = clamp(parts[0], step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(parts[1], step > 0 ? n : -1);
  std::string s;
  Value::Array items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (object->is_string()) {
      s.append(cps[static_cast<size_t>(i)]);
    } else {
      items.push_back(object->array()[static_cast<size_t>(i)]);
    }
  }
  return object->is_string() ? Value::String(std::move(s)) : Value::MakeArray(std::move(items));
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& expr) {
  absl::StatusOr<Value> callee = Eval(*expr.a);
  if (!callee.ok()) return callee;
  if (callee->is_undefined()) {
    const std::string name = expr.a->kind == Expr::Kind::kIdentifier ? expr.a->name
                             : expr.a->kind == Expr::Kind::kMember   ? expr.a->name
                                                                     : std::string("value");
    return Err(expr.line, internal::Cat("'", name, "' is undefined or not callable"));
  }
  absl::StatusOr<CallArgs> args = EvalArgs(expr.args);
  if (!args.ok()) return args.status();
  return Call(*callee, *args, expr.line);
}

}  // namespace strata::engine::jinja
