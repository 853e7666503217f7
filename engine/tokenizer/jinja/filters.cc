// The `|filter` implementations (declared in builtins.h).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/internal/absl_view.h"
#include "engine/tokenizer/jinja/builtins.h"
#include "engine/tokenizer/jinja/json_format.h"
#include "engine/tokenizer/jinja/string_util.h"
#include "engine/tokenizer/utf8.h"

namespace strata::engine::jinja {
namespace {

using internal::Av;
using K = Value::Kind;

// Argument index that never matches a positional argument (keyword-only parameters).
constexpr size_t kKeywordOnly = static_cast<size_t>(-1);

absl::Status FilterError(std::string_view filter, std::string_view what) {
  return absl::InvalidArgumentError(internal::Cat("filter '", Av(filter), "': ", Av(what)));
}

bool FlagArg(const CallArgs& args, size_t index, std::string_view name, bool dflt) {
  const Value* v = args.Get(index, name);
  return v == nullptr ? dflt : v->Truthy();
}

// attribute "a.b.0" of an item (objects, namespaces, array indexes); undefined if missing.
Value Attribute(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    const Value* next = nullptr;
    if (v.is_object()) {
      next = v.object().Find(part);
    } else if (v.kind() == K::kNamespace) {
      next = v.ns().Find(part);
    } else if (v.is_array() && !part.empty() &&
               part.find_first_not_of("0123456789") == std::string::npos) {
      const size_t i = std::strtoull(part.c_str(), nullptr, 10);
      if (i < v.array().size()) next = &v.array()[i];
    }
    if (next == nullptr) return Value();
    v = *next;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return v;
}

// Ordering used by sort / dictsort / min / max: numbers, then strings (optionally caseless).
absl::StatusOr<int> Order(const Value& a, const Value& b, bool case_sensitive) {
  const bool an = a.is_number() || a.kind() == K::kBool;
  const bool bn = b.is_number() || b.kind() == K::kBool;
  if (an && bn) return a.number() < b.number() ? -1 : a.number() > b.number() ? 1 : 0;
  if (a.is_string() && b.is_string()) {
    return case_sensitive ? a.str().compare(b.str())
                          : AsciiLower(a.str()).compare(AsciiLower(b.str()));
  }
  if (a.is_none() && b.is_none()) return 0;
  return absl::InvalidArgumentError(
      internal::Cat("cannot compare ", Av(a.TypeName()), " with ", Av(b.TypeName())));
}

absl::StatusOr<Value::Array> Items(const Value& v, std::string_view filter) {
  if (v.is_array()) return v.array();
  if (v.is_undefined()) return Value::Array();
  if (v.is_string()) {
    Value::Array out;
    for (std::string_view cp : SplitCodePoints(v.str()))
      out.push_back(Value::String(std::string(cp)));
    return out;
  }
  if (v.is_object()) {
    Value::Array out;
    for (const auto& [k, item] : v.object().items) out.push_back(Value::String(k));
    return out;
  }
  return FilterError(filter, internal::Cat("expected a sequence, got ", Av(v.TypeName())));
}

absl::StatusOr<Value> ToJsonFilter(const Value& v, CallArgs& args) {
  JsonOptions o;
  if (const Value* indent = args.Get(0, "indent"); indent != nullptr && !indent->is_none()) {
    if (indent->kind() != K::kInt) return FilterError("tojson", "indent must be an integer");
    o.indent = static_cast<int>(indent->int_value());
  }
  o.ensure_ascii = FlagArg(args, 99, "ensure_ascii", false);
  o.sort_keys = FlagArg(args, 99, "sort_keys", false);
  if (const Value* sep = args.Get(kKeywordOnly, "separators"); sep != nullptr && !sep->is_none()) {
    if (!sep->is_array() || sep->array().size() != 2 || !sep->array()[0].is_string() ||
        !sep->array()[1].is_string()) {
      return FilterError("tojson", "separators must be a tuple of two strings");
    }
    o.item_separator = sep->array()[0].str();
    o.key_separator = sep->array()[1].str();
  }
  absl::StatusOr<std::string> json = ToJson(v, o);
  if (!json.ok()) return json.status();
  return Value::String(std::move(*json));
}

absl::StatusOr<Value> Sort(const Value& v, CallArgs& args, std::string_view name) {
  absl::StatusOr<Value::Array> items = Items(v, name);
  if (!items.ok()) return items.status();
  const bool reverse = FlagArg(args, 0, "reverse", false);
  const bool case_sensitive = FlagArg(args, 1, "case_sensitive", false);
  const Value* attribute = args.Get(2, "attribute");
  auto key = [&](const Value& item) {
    return attribute != nullptr && !attribute->is_none()
               ? Attribute(item, ToDisplayString(*attribute))
               : item;
  };
  absl::Status error;
  std::stable_sort(items->begin(), items->end(), [&](const Value& a, const Value& b) {
    absl::StatusOr<int> c = Order(key(a), key(b), case_sensitive);
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  if (!error.ok()) return error;
  return Value::MakeArray(std::move(*items));
}

absl::StatusOr<Value> DictSort(const Value& v, CallArgs& args) {
  if (!v.is_object()) return FilterError("dictsort", "expected a mapping");
  const bool case_sensitive = FlagArg(args, 0, "case_sensitive", false);
  const Value* by = args.Get(1, "by");
  const bool by_value = by != nullptr && by->is_string() && by->str() == "value";
  const bool reverse = FlagArg(args, 2, "reverse", false);
  Value::Array pairs;
  for (const auto& [k, item] : v.object().items) {
    pairs.push_back(Value::MakeArray({Value::String(k), item}, /*tuple=*/true));
  }
  absl::Status error;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    const size_t i = by_value ? 1 : 0;
    absl::StatusOr<int> c = Order(a.array()[i], b.array()[i], case_sensitive);
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  if (!error.ok()) return error;
  return Value::MakeArray(std::move(pairs));
}

// select / reject / selectattr / rejectattr.
absl::StatusOr<Value> Select(Interpreter& interp, const Value& v, CallArgs& args,
                             std::string_view name) {
  absl::StatusOr<Value::Array> items = Items(v, name);
  if (!items.ok()) return items.status();
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep_matches = name == "select" || name == "selectattr";
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty() || !args.positional[0].is_string()) {
      return FilterError(name, "expected an attribute name");
    }
    attr = args.positional[next++].str();
  }
  std::string test;
  if (next < args.positional.size()) test = ToDisplayString(args.positional[next++]);
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<long>(next),
                              args.positional.end());
  Value::Array out;
  for (const Value& item : *items) {
    const Value subject = by_attr ? Attribute(item, attr) : item;
    bool match = subject.Truthy();
    if (!test.empty()) {
      absl::StatusOr<bool> r = ApplyTest(interp, test, subject, test_args);
      if (!r.ok()) return r.status();
      match = *r;
    }
    if (match == keep_matches) out.push_back(item);
  }
  return Value::MakeArray(std::move(out));
}

absl::StatusOr<Value> Map(Interpreter& interp, const Value& v, CallArgs& args) {
  absl::StatusOr<Value::Array> items = Items(v, "map");
  if (!items.ok()) return items.status();
  Value::Array out;
  if (const Value* attribute = args.Get(kKeywordOnly, "attribute")) {
    const Value* dflt = args.Get(kKeywordOnly, "default");
    for (const Value& item : *items) {
      Value a = Attribute(item, ToDisplayString(*attribute));
      out.push_back(a.is_undefined() && dflt != nullptr ? *dflt : a);
    }
    return Value::MakeArray(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return FilterError("map", "expected a filter name or attribute=");
  }
  const std::string filter = args.positional[0].str();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : *items) {
    absl::StatusOr<Value> r = ApplyFilter(interp, filter, item, rest);
    if (!r.ok()) return r;
    out.push_back(std::move(*r));
  }
  return Value::MakeArray(std::move(out));
}

absl::StatusOr<Value> Join(const Value& v, CallArgs& args) {
  absl::StatusOr<Value::Array> items = Items(v, "join");
  if (!items.ok()) return items.status();
  const Value* sep = args.Get(0, "d");
  const Value* attribute = args.Get(1, "attribute");
  std::string out;
  for (size_t i = 0; i < items->size(); ++i) {
    if (i > 0 && sep != nullptr) out += ToDisplayString(*sep);
    out += ToDisplayString(
        attribute != nullptr ? Attribute((*items)[i], ToDisplayString(*attribute)) : (*items)[i]);
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Indent(const Value& v, CallArgs& args) {
  const Value* width = args.Get(0, "width");
  const std::string pad =
      width == nullptr ? std::string(4, ' ')
      : width->kind() == K::kInt
          ? std::string(static_cast<size_t>(std::max<int64_t>(0, width->int_value())), ' ')
          : ToDisplayString(*width);
  const bool first = FlagArg(args, 1, "first", false);
  const bool blank = FlagArg(args, 2, "blank", false);
  const std::string s = ToDisplayString(v);
  std::string out;
  size_t start = 0;
  for (size_t line = 0;; ++line) {
    const size_t nl = s.find('\n', start);
    const std::string_view text =
        std::string_view(s).substr(start, nl == std::string::npos ? nl : nl - start);
    if ((line > 0 || first) && (blank || !text.empty())) out += pad;
    out.append(text);
    if (nl == std::string::npos) break;
    out.push_back('\n');
    start = nl + 1;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> ToNumber(const Value& v, CallArgs& args, bool want_int) {
  const Value* dflt = args.Get(0, "default");
  const Value fallback = dflt != nullptr ? *dflt : want_int ? Value::Int(0) : Value::Float(0.0);
  double d = 0;
  if (v.is_number() || v.kind() == K::kBool) {
    d = v.number();
    if (want_int && v.kind() == K::kInt) return v;
  } else if (v.is_string()) {
    const std::string s = PyStrip(v.str(), nullptr, true, true);
    char* end = nullptr;
    d = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(d)) return fallback;
  } else {
    return fallback;
  }
  if (want_int) return Value::Int(static_cast<int64_t>(std::trunc(d)));
  return Value::Float(d);
}

absl::StatusOr<Value> MinMaxSum(const Value& v, CallArgs& args, std::string_view name) {
  absl::StatusOr<Value::Array> items = Items(v, name);
  if (!items.ok()) return items.status();
  const Value* attribute = args.Get(name == "sum" ? 0 : 1, "attribute");
  auto key = [&](const Value& item) {
    return attribute != nullptr ? Attribute(item, ToDisplayString(*attribute)) : item;
  };
  if (name == "sum") {
    const Value* start = args.Get(1, "start");
    double total = start != nullptr ? start->number() : 0;
    bool is_float = start != nullptr && start->kind() == K::kFloat;
    for (const Value& item : *items) {
      const Value k = key(item);
      if (!k.is_number() && k.kind() != K::kBool) return FilterError(name, "items must be numbers");
      total += k.number();
      is_float = is_float || k.kind() == K::kFloat;
    }
    return is_float ? Value::Float(total) : Value::Int(static_cast<int64_t>(total));
  }
  if (items->empty()) return Value();
  const bool case_sensitive = FlagArg(args, 0, "case_sensitive", false);
  size_t best = 0;
  for (size_t i = 1; i < items->size(); ++i) {
    absl::StatusOr<int> c = Order(key((*items)[i]), key((*items)[best]), case_sensitive);
    if (!c.ok()) return c.status();
    if (name == "min" ? *c < 0 : *c > 0) best = i;
  }
  return (*items)[best];
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<Value> Unique(const Value& v, CallArgs& args) {
  absl::StatusOr<Value::Array> items = Items(v, "unique");
  if (!items.ok()) return items.status();
  const bool case_sensitive = FlagArg(args, 0, "case_sensitive", false);
  const Value* attribute = args.Get(1, "attribute");
  Value::Array out, seen;
  for (const Value& item : *items) {
    Value k = attribute != nullptr ? Attribute(item, ToDisplayString(*attribute)) : item;
    if (!case_sensitive && k.is_string()) k = Value::String(AsciiLower(k.str()));
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, k); })) {
      seen.push_back(k);
      out.push_back(item);
    }
  }
  return Value::MakeArray(std::move(out));
}

}  // namespace

absl::StatusOr<Value> ApplyFilter(Interpreter& interp, std::string_view name, const Value& v,
                                  CallArgs& args) {
  if (name == "tojson") return ToJsonFilter(v, args);
  if (name == "safe") return v;
  if (name == "string") return Value::String(ToDisplayString(v));
  if (name == "default" || name == "d") {
    const Value* dflt = args.Get(0, "default_value");
    const bool boolean = FlagArg(args, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.Truthy()))
      return dflt != nullptr ? *dflt : Value::String("");
    return v;
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value::Int(static_cast<int64_t>(CountCodePoints(v.str())));
    if (v.is_array()) return Value::Int(static_cast<int64_t>(v.array().size()));
    if (v.is_object()) return Value::Int(static_cast<int64_t>(v.object().items.size()));
    if (v.kind() == K::kNamespace) return Value::Int(static_cast<int64_t>(v.ns().items.size()));
    if (v.is_undefined()) return Value::Int(0);
    return FilterError(name, internal::Cat("object of type ", Av(v.TypeName()), " has no length"));
  }
  if (name == "trim") {
    const Value* chars = args.Get(0, "chars");
    const std::string* set = chars != nullptr && chars->is_string() ? &chars->str() : nullptr;
    return Value::String(PyStrip(ToDisplayString(v), set, true, true));
  }
  if (name == "upper") return Value::String(AsciiUpper(ToDisplayString(v)));
  if (name == "lower") return Value::String(AsciiLower(ToDisplayString(v)));
  if (name == "title") return Value::String(PyTitle(ToDisplayString(v)));
  if (name == "capitalize") return Value::String(PyCapitalize(ToDisplayString(v)));
  if (name == "e" || name == "escape") return Value::String(HtmlEscape(ToDisplayString(v)));
  if (name == "replace") {
    const Value* from = args.Get(0, "old");
    const Value* to = args.Get(1, "new");
    if (from == nullptr || to == nullptr) return FilterError(name, "expected old and new strings");
    const Value* count = args.Get(2, "count");
    return Value::String(
        PyReplace(ToDisplayString(v), ToDisplayString(*from), ToDisplayString(*to),
                  count != nullptr && count->kind() == K::kInt ? count->int_value() : -1));
  }
  if (name == "join") return Join(v, args);
  if (name == "indent") return Indent(v, args);
  if (name == "int" || name == "float") return ToNumber(v, args, name == "int");
  if (name == "abs") {
    if (v.kind() == K::kInt) return Value::Int(v.int_value() < 0 ? -v.int_value() : v.int_value());
    if (v.kind() == K::kFloat) return Value::Float(std::fabs(v.float_value()));
    return FilterError(name, "expected a number");
  }
  if (name == "round") {
    if (!v.is_number()) return FilterError(name, "expected a number");
    const Value* precision = args.Get(0, "precision");
    const double scale = std::pow(10.0, precision != nullptr ? precision->number() : 0.0);
    const Value* method = args.Get(1, "method");
    const std::string m = method != nullptr ? ToDisplayString(*method) : "common";
    const double x = v.number() * scale;
    const double r = m == "floor" ? std::floor(x) : m == "ceil" ? std::ceil(x) : std::round(x);
    return Value::Float(r / scale);
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::MakeArray({});
    if (!v.is_object()) return FilterError(name, "expected a mapping");
    Value::Array pairs;
    for (const auto& [k, item] : v.object().items) {
      pairs.push_back(Value::MakeArray({Value::String(k), item}, /*tuple=*/true));
    }
    return Value::MakeArray(std::move(pairs));
  }
  if (name == "list") {
    absl::StatusOr<Value::Array> items = Items(v, name);
    if (!items.ok()) return items.status();
    return Value::MakeArray(std::move(*items));
  }
  if (name == "first" || name == "last" || name == "reverse") {
    absl::StatusOr<Value::Array> items = Items(v, name);
    if (!items.ok()) return items.status();
    if (name == "reverse") {
      std::reverse(items->begin(), items->end());
      if (v.is_string()) {
        std::string s;
        for (const Value& c : *items) s += c.str();
        return Value::String(std::move(s));
      }
      return Value::MakeArray(std::move(*items));
    }
    if (items->empty()) return Value();
    return name == "first" ? items->front() : items->back();
  }
  if (name == "sort") return Sort(v, args, name);
  if (name == "dictsort") return DictSort(v, args);
  if (name == "unique") return Unique(v, args);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return Select(interp, v, args, name);
  }
  if (name == "map") return Map(interp, v, args);
  if (name == "min" || name == "max" || name == "sum") return MinMaxSum(v, args, name);
  return absl::InvalidArgumentError(internal::Cat("unknown filter '", Av(name), "'"));
}

}  // namespace strata::engine::jinja
