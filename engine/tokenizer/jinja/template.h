// A parsed Jinja template: parse once, render many times (thread-safe: rendering only reads the
// syntax tree).
//
//   absl::StatusOr<std::shared_ptr<const jinja::Template>> t = jinja::Template::Parse(text);
//   absl::StatusOr<std::string> out = (*t)->Render({{"messages", ...}});
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja/ast.h"

namespace strata::engine::jinja {

class Template {
 public:
  // Syntax errors: InvalidArgument "syntax error at line N: ...".
  static absl::StatusOr<std::shared_ptr<const Template>> Parse(std::string_view source);

  // `context` must be a JSON object; its keys become template variables (next to the globals).
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;
  absl::StatusOr<std::string> Render(const ObjectData& context) const;

 private:
  Block program_;
};

}  // namespace strata::engine::jinja
