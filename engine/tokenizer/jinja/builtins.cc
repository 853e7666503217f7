// Global functions, tests and methods. Filters are in filters.cc.
#include "engine/tokenizer/jinja/builtins.h"

#include <ctime>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/internal/absl_view.h"
#include "engine/tokenizer/jinja/json_format.h"
#include "engine/tokenizer/jinja/string_util.h"
#include "engine/tokenizer/utf8.h"

namespace strata::engine::jinja {
namespace {

using internal::Av;
using K = Value::Kind;

constexpr int64_t kMaxRange = 1'000'000;

absl::Status ArgError(std::string_view fn, std::string_view what) {
  return absl::InvalidArgumentError(internal::Cat(Av(fn), ": ", Av(what)));
}

absl::StatusOr<Value> Range(Interpreter&, CallArgs& args) {
  std::vector<int64_t> v;
  for (const Value& a : args.positional) {
    if (a.kind() != K::kInt) return ArgError("range", "arguments must be integers");
    v.push_back(a.int_value());
  }
  if (v.empty() || v.size() > 3) return ArgError("range", "expected 1 to 3 arguments");
  const int64_t start = v.size() == 1 ? 0 : v[0];
  const int64_t stop = v.size() == 1 ? v[0] : v[1];
  const int64_t step = v.size() == 3 ? v[2] : 1;
  if (step == 0) return ArgError("range", "step must not be zero");
  Value::Array items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxRange) {
      return ArgError("range", internal::Cat("more than ", kMaxRange, " items"));
    }
    items.push_back(Value::Int(i));
  }
  return Value::MakeArray(std::move(items));
}

// namespace(mapping?, **kwargs) and dict(mapping?, **kwargs).
absl::StatusOr<ObjectData> MappingFromArgs(std::string_view fn, CallArgs& args) {
  ObjectData data;
  if (args.positional.size() > 1) return ArgError(fn, "expected at most one positional argument");
  if (args.positional.size() == 1) {
    const Value& src = args.positional[0];
    if (src.is_object()) {
      data = src.object();
    } else if (src.is_array()) {
      for (const Value& pair : src.array()) {
        if (!pair.is_array() || pair.array().size() != 2 || !pair.array()[0].is_string()) {
          return ArgError(fn, "expected a mapping or (key, value) pairs");
        }
        data.Set(pair.array()[0].str(), pair.array()[1]);
      }
    } else {
      return ArgError(fn, "expected a mapping or (key, value) pairs");
    }
  }
  for (auto& [k, v] : args.keyword) data.Set(k, v);
  return data;
}

absl::StatusOr<Value> StrftimeNow(Interpreter&, CallArgs& args) {
  const Value* format = args.Get(0, "format");
  if (format == nullptr || !format->is_string()) {
    return ArgError("strftime_now", "expected a format string");
  }
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[512];
  const size_t n = std::strftime(buf, sizeof(buf), format->str().c_str(), &local);
  return Value::String(std::string(buf, n));
}

// --- methods ---------------------------------------------------------------------------------

const std::string* OptionalString(const CallArgs& args, size_t index, std::string_view name) {
  const Value* v = args.Get(index, name);
  return v != nullptr && v->is_string() ? &v->str() : nullptr;
}

int64_t OptionalInt(const CallArgs& args, size_t index, std::string_view name, int64_t dflt) {
  const Value* v = args.Get(index, name);
  return v != nullptr && v->kind() == K::kInt ? v->int_value() : dflt;
}

Value StringList(std::vector<std::string> parts) {
  Value::Array items;
  for (std::string& p : parts) items.push_back(Value::String(std::move(p)));
  return Value::MakeArray(std::move(items));
}

absl::StatusOr<Value> AffixTest(const std::string& s, const CallArgs& args, bool prefix,
                                std::string_view fn) {
  const Value* arg = args.Get(0, "prefix");
  if (arg == nullptr) return ArgError(fn, "expected an argument");
  auto matches = [&](const std::string& affix) {
    return prefix ? absl::StartsWith(s, affix) : absl::EndsWith(s, affix);
  };
  if (arg->is_string()) return Value::Bool(matches(arg->str()));
  if (arg->is_array()) {
    for (const Value& item : arg->array()) {
      if (!item.is_string()) return ArgError(fn, "tuple elements must be strings");
      if (matches(item.str())) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  return ArgError(fn, "argument must be a string or a tuple of strings");
}

// Code point index of byte offset `pos` in `s`.
int64_t CodePointIndex(const std::string& s, size_t pos) {
  return static_cast<int64_t>(CountCodePoints(std::string_view(s).substr(0, pos)));
}

absl::StatusOr<Value> CallStringMethod(const std::string& s, std::string_view name,
                                       CallArgs& args) {
  if (name == "upper") return Value::String(AsciiUpper(s));
  if (name == "lower") return Value::String(AsciiLower(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Value::String(
        PyStrip(s, OptionalString(args, 0, "chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    return AffixTest(s, args, name == "startswith", name);
  }
  if (name == "split" || name == "rsplit") {
    const std::string* sep = OptionalString(args, 0, "sep");
    if (sep != nullptr && sep->empty()) return ArgError(name, "empty separator");
    return StringList(PySplit(s, sep, OptionalInt(args, 1, "maxsplit", -1), name == "rsplit"));
  }
  if (name == "splitlines") {
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\n' && s[i] != '\r') continue;
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
    if (start < s.size()) lines.push_back(s.substr(start));
    return StringList(std::move(lines));
  }
  if (name == "replace") {
    const std::string* from = OptionalString(args, 0, "old");
    const std::string* to = OptionalString(args, 1, "new");
    if (from == nullptr || to == nullptr) return ArgError(name, "expected two strings");
    return Value::String(PyReplace(s, *from, *to, OptionalInt(args, 2, "count", -1)));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    const std::string* sub = OptionalString(args, 0, "sub");
    if (sub == nullptr) return ArgError(name, "expected a string");
    if (name == "count") {
      if (sub->empty()) return Value::Int(static_cast<int64_t>(CountCodePoints(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(*sub); p != std::string::npos; p = s.find(*sub, p + sub->size())) ++n;
      return Value::Int(n);
    }
    const size_t pos = name == "find" ? s.find(*sub) : s.rfind(*sub);
    return Value::Int(pos == std::string::npos ? -1 : CodePointIndex(s, pos));
  }
  if (name == "join") {
    const Value* items = args.Get(0, "iterable");
    if (items == nullptr || !items->is_array()) return ArgError(name, "expected a list");
    std::string out;
    for (size_t i = 0; i < items->array().size(); ++i) {
      if (i > 0) out += s;
      out += ToDisplayString(items->array()[i]);
    }
    return Value::String(std::move(out));
  }
  auto all = [&](auto pred) {
    if (s.empty()) return Value::Bool(false);
    for (char c : s) {
      if (!pred(c)) return Value::Bool(false);
    }
    return Value::Bool(true);
  };
  if (name == "isdigit") return all([](char c) { return c >= '0' && c <= '9'; });
  if (name == "isalpha") {
    return all([](char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; });
  }
  if (name == "isspace") return Value::Bool(!s.empty() && PyStrip(s, nullptr, true, true).empty());
  if (name == "islower") return Value::Bool(AsciiLower(s) == s && AsciiUpper(s) != s);
  if (name == "isupper") return Value::Bool(AsciiUpper(s) == s && AsciiLower(s) != s);
  return ArgError(name, "unknown string method");
}

absl::StatusOr<Value> CallObjectMethod(const ObjectData& data, std::string_view name,
                                       CallArgs& args) {
  if (name == "get") {
    const Value* key = args.Get(0, "key");
    if (key == nullptr || !key->is_string()) return ArgError("get", "key must be a string");
    if (const Value* v = data.Find(key->str())) return *v;
    const Value* dflt = args.Get(1, "default");
    return dflt != nullptr ? *dflt : Value::None();
  }
  Value::Array items;
  for (const auto& [k, v] : data.items) {
    if (name == "items") {
      items.push_back(Value::MakeArray({Value::String(k), v}, /*tuple=*/true));
    } else if (name == "keys") {
      items.push_back(Value::String(k));
    } else {
      items.push_back(v);
    }
  }
  return Value::MakeArray(std::move(items));
}

bool IsStringMethod(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "upper",    "lower",   "title",   "capitalize", "strip",   "lstrip", "rstrip", "startswith",
      "endswith", "split",   "rsplit",  "splitlines", "replace", "find",   "rfind",  "count",
      "join",     "isdigit", "isalpha", "isspace",    "islower", "isupper"};
  for (std::string_view n : kNames) {
    if (n == name) return true;
  }
  return false;
}

}  // namespace

void InstallGlobals(ObjectData* globals) {
  globals->Set("range", Value::MakeCallable("range", Range));
  globals->Set("namespace", Value::MakeCallable("namespace", [](Interpreter&, CallArgs& args) {
                 absl::StatusOr<ObjectData> data = MappingFromArgs("namespace", args);
                 if (!data.ok()) return absl::StatusOr<Value>(data.status());
                 return absl::StatusOr<Value>(Value::MakeNamespace(std::move(*data)));
               }));
  globals->Set("dict", Value::MakeCallable("dict", [](Interpreter&, CallArgs& args) {
                 absl::StatusOr<ObjectData> data = MappingFromArgs("dict", args);
                 if (!data.ok()) return absl::StatusOr<Value>(data.status());
                 return absl::StatusOr<Value>(Value::MakeObject(std::move(*data)));
               }));
  globals->Set("raise_exception",
               Value::MakeCallable("raise_exception", [](Interpreter&, CallArgs& args) {
                 const Value* message = args.Get(0, "message");
                 return absl::StatusOr<Value>(
                     RaisedError(message != nullptr ? ToDisplayString(*message) : "error"));
               }));
  globals->Set("strftime_now", Value::MakeCallable("strftime_now", StrftimeNow));
  for (const char* name : {"true", "True"}) globals->Set(name, Value::Bool(true));
  for (const char* name : {"false", "False"}) globals->Set(name, Value::Bool(false));
  for (const char* name : {"none", "None"}) globals->Set(name, Value::None());
}

std::optional<Value> BoundMethod(const Value& receiver, std::string_view name) {
  if (receiver.is_string() && IsStringMethod(name)) {
    std::string s = receiver.str();
    std::string method(name);
    return Value::MakeCallable(method, [s = std::move(s), method](Interpreter&, CallArgs& args) {
      return CallStringMethod(s, method, args);
    });
  }
  if (receiver.is_object() &&
      (name == "get" || name == "items" || name == "keys" || name == "values")) {
    std::string method(name);
    return Value::MakeCallable(method, [receiver, method](Interpreter&, CallArgs& args) {
      return CallObjectMethod(receiver.object(), method, args);
    });
  }
  return std::nullopt;
}

absl::StatusOr<bool> ApplyTest(Interpreter&, std::string_view name, const Value& v,
                               CallArgs& args) {
  const Value* arg = args.Get(0, "other");
  auto need_arg = [&]() -> absl::Status {
    return arg == nullptr ? ArgError(name, "test needs an argument") : absl::OkStatus();
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.bool_value();
  if (name == "false") return v.kind() == K::kBool && !v.bool_value();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "mapping") return v.is_object();
  if (name == "iterable") return v.is_array() || v.is_object() || v.is_string();
  if (name == "sequence") return v.is_array() || v.is_object() || v.is_string();
  if (name == "callable") return v.kind() == K::kCallable;
  if (name == "lower") return v.is_string() && AsciiLower(v.str()) == v.str();
  if (name == "upper") return v.is_string() && AsciiUpper(v.str()) == v.str();
  if (name == "odd" || name == "even") {
    if (v.kind() != K::kInt)
      return ArgError(name, internal::Cat("needs an integer, got ", v.TypeName()));
    return (v.int_value() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    if (absl::Status s = need_arg(); !s.ok()) return s;
    if (v.kind() != K::kInt || arg->kind() != K::kInt || arg->int_value() == 0) {
      return ArgError(name, "needs non-zero integers");
    }
    return v.int_value() % arg->int_value() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=") {
    if (absl::Status s = need_arg(); !s.ok()) return s;
    return Equal(v, *arg) == (name != "ne" && name != "!=");
  }
  if (name == "sameas") {
    if (absl::Status s = need_arg(); !s.ok()) return s;
    return v.kind() == arg->kind() && Equal(v, *arg);
  }
  if (name == "in") {
    if (absl::Status s = need_arg(); !s.ok()) return s;
    if (arg->is_array()) {
      for (const Value& item : arg->array()) {
        if (Equal(item, v)) return true;
      }
      return false;
    }
    if (arg->is_string() && v.is_string()) return absl::StrContains(arg->str(), v.str());
    if (arg->is_object() && v.is_string()) return arg->object().Find(v.str()) != nullptr;
    return ArgError(name, "unsupported container");
  }
  for (auto [names, op] :
       {std::pair{std::pair{"lt", "<"}, 0}, std::pair{std::pair{"le", "<="}, 1},
        std::pair{std::pair{"gt", ">"}, 2}, std::pair{std::pair{"ge", ">="}, 3}}) {
    if (name != names.first && name != names.second) continue;
    if (absl::Status s = need_arg(); !s.ok()) return s;
    int cmp;
    if (v.is_string() && arg->is_string()) {
      cmp = v.str().compare(arg->str());
    } else if ((v.is_number() || v.kind() == K::kBool) &&
               (arg->is_number() || arg->kind() == K::kBool)) {
      cmp = v.number() < arg->number() ? -1 : v.number() > arg->number() ? 1 : 0;
    } else {
      return ArgError(name, "cannot compare these values");
    }
    return op == 0 ? cmp < 0 : op == 1 ? cmp <= 0 : op == 2 ? cmp > 0 : cmp >= 0;
  }
  return absl::InvalidArgumentError(internal::Cat("unknown test '", Av(name), "'"));
}

}  // namespace strata::engine::jinja
