// Runtime values of the Jinja interpreter.
//
// Kinds follow @huggingface/jinja's runtime (the reference the chat-template tests compare
// against): undefined, none, bool, int, float, string, array (or tuple), object (ordered by
// insertion, like JSON input and Python dicts), namespace (the one mutable kind, shared by
// reference so `{% set ns.x = ... %}` is seen outside loops), and callable (macros, globals,
// bound methods). Arrays and objects are immutable and shared, so copies are cheap.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace strata::engine::jinja {

class Value;
class Interpreter;

struct ObjectData {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, unique keys
  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);  // replaces an existing key in place
};

// Arguments of a call: positional, then keyword (in call order).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword argument `name`, or positional argument `index`, or nullptr.
  const Value* Get(size_t index, std::string_view name) const;
};

using NativeFunction = std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)>;

struct CallableData {
  std::string name;
  NativeFunction fn;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kArray,
    kObject,
    kNamespace,
    kCallable
  };
  using Array = std::vector<Value>;

  Value() = default;  // undefined
  static Value None() { return Value(std::nullptr_t{}); }
  static Value Bool(bool b) { return Value(b); }
  static Value Int(int64_t i) { return Value(i); }
  static Value Float(double f) { return Value(f); }
  static Value String(std::string s) { return Value(std::move(s)); }
  static Value MakeArray(Array items, bool tuple = false);
  static Value MakeObject(ObjectData data);
  static Value MakeNamespace(ObjectData data);
  static Value MakeCallable(std::string name, NativeFunction fn);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_number() const { return kind() == Kind::kInt || kind() == Kind::kFloat; }
  bool is_array() const { return kind() == Kind::kArray; }
  bool is_object() const { return kind() == Kind::kObject; }
  bool is_tuple() const { return is_array() && tuple_; }

  bool bool_value() const { return std::get<bool>(data_); }
  int64_t int_value() const { return std::get<int64_t>(data_); }
  double float_value() const { return std::get<double>(data_); }
  // Int or float as double (bool counts as 0/1).
  double number() const;
  const std::string& str() const { return std::get<std::string>(data_); }
  const Array& array() const { return *std::get<std::shared_ptr<const Array>>(data_); }
  const ObjectData& object() const { return *std::get<std::shared_ptr<const ObjectData>>(data_); }
  ObjectData& ns() const { return *std::get<std::shared_ptr<ObjectData>>(data_); }
  const CallableData& callable() const {
    return *std::get<std::shared_ptr<const CallableData>>(data_);
  }

  // Python truthiness: undefined, none, false, 0, 0.0, "", [], {} are false.
  bool Truthy() const;
  // Kind name for error messages ("string", "array", ...).
  std::string_view TypeName() const;

 private:
  template <typename T>
  explicit Value(T v) : data_(std::move(v)) {}

  std::variant<std::monostate, std::nullptr_t, bool, int64_t, double, std::string,
               std::shared_ptr<const Array>, std::shared_ptr<const ObjectData>,
               std::shared_ptr<ObjectData>, std::shared_ptr<const CallableData>>
      data_;
  bool tuple_ = false;
};

// Python-style equality: numbers by value (1 == 1.0 == true), strings, arrays and objects
// deeply; undefined equals only undefined, none only none.
bool Equal(const Value& a, const Value& b);

// JSON input -> Value (objects keep key order). Errors beyond `max_depth` nesting.
absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& json, int max_depth = 256);

}  // namespace strata::engine::jinja
