// Tree-walking interpreter for parsed templates.
//
// Scoping follows @huggingface/jinja: the template root sees the render context and globals;
// a for loop opens a scope (variables set inside stay inside, `loop` and the loop variables
// live there); a macro call opens a scope on top of its caller's (dynamic scoping); a call
// block's caller() runs in the scope of the call statement. Namespaces are the way to carry
// values out of loops. Unknown variables are undefined (printing nothing), not errors.
//
// Errors are absl::Status: InvalidArgument with "template error at line N: ..." for runtime
// errors, and the template's own message, unprefixed, for raise_exception(). Recursion (macro
// calls) is bounded, so hostile templates fail instead of exhausting the stack.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja/ast.h"
#include "engine/tokenizer/jinja/value.h"

namespace strata::engine::jinja {

class Interpreter {
 public:
  // `globals` holds the render context and the global functions (see builtins.h).
  explicit Interpreter(ObjectData globals);

  absl::StatusOr<std::string> Render(const Block& program);

  // Calls a callable value (used by filters such as map and by builtins).
  absl::StatusOr<Value> Call(const Value& callee, CallArgs& args, int line);

 private:
  struct Scope {
    ObjectData vars;
    Scope* parent;
  };
  enum class Flow { kNormal, kBreak, kContinue };

  Value Lookup(std::string_view name) const;
  void Assign(std::string name, Value value) {
    current_->vars.Set(std::move(name), std::move(value));
  }

  absl::StatusOr<Flow> ExecBlock(const Block& block, std::string* out);
  absl::StatusOr<Flow> Exec(const Stmt& stmt, std::string* out);
  absl::StatusOr<Flow> ExecFor(const Stmt& stmt, std::string* out);
  absl::Status ExecSet(const Stmt& stmt, Value value);
  absl::Status ExecCallBlock(const Stmt& stmt, std::string* out);
  Value MakeMacro(const Stmt& stmt);
  absl::StatusOr<Value> InvokeMacro(const Stmt& stmt, CallArgs& args, Scope* parent);

  absl::StatusOr<Value> Eval(const Expr& expr);
  absl::StatusOr<Value> EvalBinary(const Expr& expr);
  absl::StatusOr<Value> EvalMember(const Expr& expr);
  absl::StatusOr<Value> EvalSlice(const Expr& expr);
  absl::StatusOr<Value> EvalCall(const Expr& expr);
  absl::StatusOr<CallArgs> EvalArgs(const std::vector<Arg>& args);
  absl::StatusOr<Value> EvalFilter(const Expr& expr, const Value& operand);

  Scope root_;
  Scope* current_;
  int call_depth_ = 0;
};

// Returns `status` with "template error at line N: " prepended unless it already carries a
// location or is a raise_exception() message.
absl::Status WithLine(absl::Status status, int line);

// The status raise_exception(message) produces, and the test for it.
absl::Status RaisedError(std::string_view message);
bool IsRaisedError(const absl::Status& status);

}  // namespace strata::engine::jinja
