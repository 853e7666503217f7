#include "engine/tokenizer/jinja/value.h"

namespace strata::engine::jinja {

const Value* ObjectData::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ObjectData::Set(std::string key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::Get(size_t index, std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return index < positional.size() ? &positional[index] : nullptr;
}

Value Value::MakeArray(Array items, bool tuple) {
  Value v(std::shared_ptr<const Array>(std::make_shared<Array>(std::move(items))));
  v.tuple_ = tuple;
  return v;
}

Value Value::MakeObject(ObjectData data) {
  return Value(std::shared_ptr<const ObjectData>(std::make_shared<ObjectData>(std::move(data))));
}

Value Value::MakeNamespace(ObjectData data) {
  return Value(std::make_shared<ObjectData>(std::move(data)));
}

Value Value::MakeCallable(std::string name, NativeFunction fn) {
  return Value(std::shared_ptr<const CallableData>(
      std::make_shared<CallableData>(CallableData{std::move(name), std::move(fn)})));
}

double Value::number() const {
  switch (kind()) {
    case Kind::kInt:
      return static_cast<double>(int_value());
    case Kind::kFloat:
      return float_value();
    case Kind::kBool:
      return bool_value() ? 1.0 : 0.0;
    default:
      return 0.0;
  }
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return bool_value();
    case Kind::kInt:
      return int_value() != 0;
    case Kind::kFloat:
      return float_value() != 0.0;
    case Kind::kString:
      return !str().empty();
    case Kind::kArray:
      return !array().empty();
    case Kind::kObject:
      return !object().items.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string_view Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "none";
    case Kind::kBool:
      return "boolean";
    case Kind::kInt:
      return "integer";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "string";
    case Kind::kArray:
      return is_tuple() ? "tuple" : "array";
    case Kind::kObject:
      return "object";
    case Kind::kNamespace:
      return "namespace";
    case Kind::kCallable:
      return "callable";
  }
  return "?";
}

bool Equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  const bool a_num = a.is_number() || a.kind() == K::kBool;
  const bool b_num = b.is_number() || b.kind() == K::kBool;
  if (a_num && b_num) {
    if (a.kind() == K::kInt && b.kind() == K::kInt) return a.int_value() == b.int_value();
    return a.number() == b.number();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.str() == b.str();
    case K::kArray: {
      if (a.array().size() != b.array().size()) return false;
      for (size_t i = 0; i < a.array().size(); ++i) {
        if (!Equal(a.array()[i], b.array()[i])) return false;
      }
      return true;
    }
    case K::kObject: {
      const auto& x = a.object().items;
      if (x.size() != b.object().items.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = b.object().Find(k);
        if (other == nullptr || !Equal(v, *other)) return false;
      }
      return true;
    }
    case K::kNamespace:
      return &a.ns() == &b.ns();
    case K::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& json, int max_depth) {
  if (max_depth < 0) return absl::InvalidArgumentError("JSON input is nested too deeply");
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value::Bool(json.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::Int(json.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value::Int(static_cast<int64_t>(json.get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value::Float(json.get<double>());
    case nlohmann::json::value_t::string:
      return Value::String(json.get<std::string>());
    case nlohmann::json::value_t::array: {
      Value::Array items;
      items.reserve(json.size());
      for (const auto& item : json) {
        absl::StatusOr<Value> v = FromJson(item, max_depth - 1);
        if (!v.ok()) return v.status();
        items.push_back(std::move(*v));
      }
      return Value::MakeArray(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      ObjectData data;
      data.items.reserve(json.size());
      for (const auto& [key, item] : json.items()) {
        absl::StatusOr<Value> v = FromJson(item, max_depth - 1);
        if (!v.ok()) return v.status();
        data.items.emplace_back(key, std::move(*v));
      }
      return Value::MakeObject(std::move(data));
    }
    default:
      return Value::None();  // binary / discarded: not produced by JSON text
  }
}

}  // namespace strata::engine::jinja
