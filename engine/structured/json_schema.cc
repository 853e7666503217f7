// json_schema.h: JSON Schema → JsonGrammar.
#include "engine/structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "engine/structured/json_matcher.h"

namespace strata::structured {
namespace {

constexpr char kSupported[] =
    "type, enum, const, properties, required, additionalProperties, items, prefixItems, "
    "minItems, maxItems, minLength, maxLength, pattern, format, minimum, maximum, "
    "exclusiveMinimum, exclusiveMaximum, multipleOf, anyOf, oneOf, allOf (one member), $ref, "
    "$defs";

const std::set<std::string_view>& KnownKeywords() {
  static const std::set<std::string_view> known = {"type",
                                                   "enum",
                                                   "const",
                                                   "properties",
                                                   "required",
                                                   "additionalProperties",
                                                   "items",
                                                   "prefixItems",
                                                   "minItems",
                                                   "maxItems",
                                                   "minLength",
                                                   "maxLength",
                                                   "pattern",
                                                   "format",
                                                   "minimum",
                                                   "maximum",
                                                   "exclusiveMinimum",
                                                   "exclusiveMaximum",
                                                   "multipleOf",
                                                   "anyOf",
                                                   "oneOf",
                                                   "allOf",
                                                   "$ref",
                                                   "$defs",
                                                   "definitions"};
  return known;
}

const std::set<std::string_view>& Annotations() {
  static const std::set<std::string_view> ignored = {
      "title",    "description", "default",  "examples",  "$schema",      "$id",
      "$comment", "deprecated",  "readOnly", "writeOnly", "discriminator"};
  return ignored;
}

// The regular expression (full match) of each enforced format: RFC 3339 date, time
// and date-time, RFC 4122 uuid text, an RFC 5321 dot-atom mailbox, dotted-quad IPv4, RFC 1123
// host names.
const char* FormatRegex(std::string_view format) {
  if (format == "date") return R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
  if (format == "time") {
    return R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d))";
  }
  if (format == "date-time") {
    return R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt])"
           R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d))";
  }
  if (format == "uuid") {
    return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  }
  if (format == "email") {
    return R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*)"
           R"(@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+)";
  }
  if (format == "ipv4") {
    return R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  }
  if (format == "hostname") {
    return R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*)";
  }
  return nullptr;
}

// JSON Pointer escaping of one reference token (RFC 6901).
std::string PointerToken(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// Sorts literals and indexes keys (the matcher narrows candidate ranges by binary search).
void FinalizeNodes(JsonGrammar* g) {
  for (SchemaNode& n : g->nodes) {
    std::sort(n.literals.begin(), n.literals.end());
    n.literals.erase(std::unique(n.literals.begin(), n.literals.end()), n.literals.end());
    n.keys_sorted.resize(n.properties.size());
    for (size_t i = 0; i < n.keys_sorted.size(); ++i) n.keys_sorted[i] = static_cast<int32_t>(i);
    std::sort(n.keys_sorted.begin(), n.keys_sorted.end(), [&n](int32_t x, int32_t y) {
      return n.properties[static_cast<size_t>(x)].key_text <
             n.properties[static_cast<size_t>(y)].key_text;
    });
  }
}

// Nesting depth of `value` (a scalar is 0), counted without recursion; stops counting past
// `limit`.
int NestingDepth(const Json& value, int limit) {
  std::vector<std::pair<const Json*, int>> todo = {{&value, 0}};
  int deepest = 0;
  while (!todo.empty()) {
    const auto [v, depth] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    deepest = std::max(deepest, depth + 1);
    if (deepest > limit) return deepest;
    for (const Json& child : *v) todo.emplace_back(&child, depth + 1);
  }
  return deepest;
}

class Compiler {
 public:
  explicit Compiler(const Json& root) : root_(root) {}

  absl::StatusOr<JsonGrammar> Run() {
    ASSIGN_OR_RETURN(grammar_.root, Compile(root_, ""));
    RETURN_IF_ERROR(FlattenAlternatives());
    FinalizeNodes(&grammar_);
    return std::move(grammar_);
  }

 private:
  absl::Status Error(const std::string& path, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("schema at '", path.empty() ? "#" : absl::StrCat("#", path), "': ", what));
  }

  absl::StatusOr<int32_t> NewNode(const std::string& path) {
    if (static_cast<int64_t>(grammar_.nodes.size()) >= kMaxSchemaNodes) {
      return Error(path, absl::StrCat("the schema compiles to more than ", kMaxSchemaNodes,
                                      " nodes (the limit)"));
    }
    grammar_.nodes.emplace_back();
    return static_cast<int32_t>(grammar_.nodes.size() - 1);
  }

  absl::StatusOr<int32_t> AddNode(const std::string& path, SchemaNode node) {
    ASSIGN_OR_RETURN(int32_t id, NewNode(path));
    grammar_.nodes[static_cast<size_t>(id)] = std::move(node);
    return id;
  }

  absl::StatusOr<int64_t> Count(const Json& schema, const char* key, const std::string& path) {
    const Json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Error(path, absl::StrCat("'", key, "' must be a non-negative integer"));
    }
    return v.get<int64_t>();
  }

  absl::StatusOr<int32_t> Compile(const Json& schema, const std::string& path) {
    // The compiler recurses per level (and so would printing an enum value): bound the depth.
    if (depth_ >= kMaxSchemaDepth) {
      return Error(path, absl::StrCat("the schema nests deeper than ", kMaxSchemaDepth,
                                      " levels (the limit)"));
    }
    ++depth_;
    absl::StatusOr<int32_t> node = CompileLevel(schema, path);
    --depth_;
    return node;
  }

  absl::StatusOr<int32_t> CompileLevel(const Json& schema, const std::string& path) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) return Error(path, "the schema 'false' accepts no value");
      return AddNode(path, SchemaNode{});
    }
    if (!schema.is_object()) return Error(path, "a schema must be an object or a boolean");
    for (const auto& [key, value] : schema.items()) {
      if (KnownKeywords().count(key) == 0 && Annotations().count(key) == 0) {
        return Error(path, absl::StrCat("keyword '", key,
                                        "' is not supported (supported: ", kSupported, ")"));
      }
    }
    if (schema.contains("$ref")) {
      if (schema.size() > 1) {
        for (const auto& [key, value] : schema.items()) {
          if (key != "$ref" && KnownKeywords().count(key) != 0 && key != "$defs" &&
              key != "definitions") {
            return Error(path, absl::StrCat("'$ref' next to '", key, "' is not supported"));
          }
        }
      }
      return Ref(schema["$ref"], path);
    }
    if (schema.contains("allOf")) return AllOf(schema, path);
    if (schema.contains("anyOf") || schema.contains("oneOf")) return AnyOf(schema, path);
    if (schema.contains("const")) {
      RETURN_IF_ERROR(CheckLiteral(schema["const"], path));
      SchemaNode node;
      node.kind = NodeKind::kLiterals;
      node.literals.push_back(schema["const"].dump());
      return AddNode(path, std::move(node));
    }
    if (schema.contains("enum")) return Enum(schema["enum"], path);
    if (schema.contains("type")) return Typed(schema, path);
    // No type: infer it from the keywords present (an empty schema is any value).
    if (schema.contains("properties") || schema.contains("required") ||
        schema.contains("additionalProperties")) {
      return TypedAs(schema, "object", path);
    }
    if (schema.contains("items") || schema.contains("prefixItems") || schema.contains("minItems") ||
        schema.contains("maxItems")) {
      return TypedAs(schema, "array", path);
    }
    if (schema.contains("minLength") || schema.contains("maxLength") ||
        schema.contains("pattern")) {
      return TypedAs(schema, "string", path);
    }
    if (schema.contains("minimum") || schema.contains("maximum") ||
        schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum") ||
        schema.contains("multipleOf")) {
      return TypedAs(schema, "number", path);
    }
    return AddNode(path, SchemaNode{});
  }

  absl::Status CheckLiteral(const Json& value, const std::string& path) const {
    if (depth_ + NestingDepth(value, kMaxSchemaDepth) > kMaxSchemaDepth) {
      return Error(path, absl::StrCat("an enum or const value nests deeper than ", kMaxSchemaDepth,
                                      " levels (the limit)"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int32_t> Ref(const Json& ref, const std::string& path) {
    if (!ref.is_string()) return Error(path, "'$ref' must be a string");
    const std::string& target = ref.get_ref<const std::string&>();
    if (auto it = refs_.find(target); it != refs_.end()) {
      return it->second;
    }
    if (target.empty() || target[0] != '#') {
      return Error(path, absl::StrCat("'$ref' ", target,
                                      " is not supported (only local references: #, "
                                      "#/$defs/NAME, #/definitions/NAME)"));
    }
    const Json* at = &root_;
    std::string pointer = target.substr(1);
    if (!pointer.empty()) {
      const Json* found = nullptr;
      try {
        found = &root_.at(Json::json_pointer(pointer));
      } catch (const nlohmann::json::exception&) {
        found = nullptr;
      }
      if (found == nullptr) {
        return Error(path, absl::StrCat("'$ref' ", target, " does not resolve in the schema"));
      }
      at = found;
    }
    // Reserve the node first so that a reference back to it (recursion) finds it.
    ASSIGN_OR_RETURN(int32_t id, NewNode(path));
    refs_[target] = id;
    absl::StatusOr<int32_t> body = Compile(*at, pointer);
    if (!body.ok()) return body.status();
    grammar_.nodes[static_cast<size_t>(id)] = grammar_.nodes[static_cast<size_t>(*body)];
    return id;
  }

  absl::StatusOr<int32_t> AllOf(const Json& schema, const std::string& path) {
    const Json& all = schema["allOf"];
    if (!all.is_array() || all.size() != 1 || schema.size() != 1) {
      return Error(path, "'allOf' is supported only with exactly one member and no other keywords");
    }
    return Compile(all[0], absl::StrCat(path, "/allOf/0"));
  }

  absl::StatusOr<int32_t> AnyOf(const Json& schema, const std::string& path) {
    const char* key = schema.contains("anyOf") ? "anyOf" : "oneOf";
    if (schema.contains("anyOf") && schema.contains("oneOf")) {
      return Error(path, "'anyOf' and 'oneOf' together are not supported");
    }
    const Json& list = schema[key];
    if (!list.is_array() || list.empty()) {
      return Error(path, absl::StrCat("'", key, "' must be a non-empty array of schemas"));
    }
    for (const auto& [k, v] : schema.items()) {
      if (k != key && KnownKeywords().count(k) != 0 && k != "$defs" && k != "definitions") {
        return Error(path, absl::StrCat("'", key, "' next to '", k, "' is not supported"));
      }
    }
    SchemaNode node;
    node.kind = NodeKind::kAnyOf;
    for (size_t i = 0; i < list.size(); ++i) {
      ASSIGN_OR_RETURN(int32_t alt, Compile(list[i], absl::StrCat(path, "/", key, "/", i)));
      node.alternatives.push_back(alt);
    }
    return AddNode(path, std::move(node));
  }

  absl::StatusOr<int32_t> Enum(const Json& values, const std::string& path) {
    if (!values.is_array() || values.empty()) {
      return Error(path, "'enum' must be a non-empty array");
    }
    SchemaNode node;
    node.kind = NodeKind::kLiterals;
    // Duplicates are dropped when the node is finalized (sorted, then unique): a search here
    // per value made a 100,000-value enum take 12 s.
    node.literals.reserve(values.size());
    for (const Json& v : values) {
      RETURN_IF_ERROR(CheckLiteral(v, path));
      node.literals.push_back(v.dump());
    }
    return AddNode(path, std::move(node));
  }

  absl::StatusOr<int32_t> Typed(const Json& schema, const std::string& path) {
    const Json& type = schema["type"];
    if (type.is_string()) return TypedAs(schema, type.get_ref<const std::string&>(), path);
    if (!type.is_array() || type.empty()) {
      return Error(path, "'type' must be a type name or a non-empty array of them");
    }
    SchemaNode node;
    node.kind = NodeKind::kAnyOf;
    for (const Json& t : type) {
      if (!t.is_string()) return Error(path, "'type' must list type names");
      ASSIGN_OR_RETURN(int32_t alt, TypedAs(schema, t.get_ref<const std::string&>(), path));
      node.alternatives.push_back(alt);
    }
    if (node.alternatives.size() == 1) return node.alternatives[0];
    return AddNode(path, std::move(node));
  }

  absl::StatusOr<int32_t> TypedAs(const Json& schema, const std::string& type,
                                  const std::string& path) {
    SchemaNode node;
    if (type == "object") {
      node.kind = NodeKind::kObject;
      RETURN_IF_ERROR(Object(schema, path, &node));
    } else if (type == "array") {
      node.kind = NodeKind::kArray;
      RETURN_IF_ERROR(Array(schema, path, &node));
    } else if (type == "string") {
      node.kind = NodeKind::kString;
      if (schema.contains("minLength")) {
        ASSIGN_OR_RETURN(node.min_length, Count(schema, "minLength", path));
      }
      if (schema.contains("maxLength")) {
        ASSIGN_OR_RETURN(node.max_length, Count(schema, "maxLength", path));
        if (node.max_length < node.min_length) {
          return Error(path, "'maxLength' is below 'minLength': no string satisfies both");
        }
      }
      RETURN_IF_ERROR(StringPattern(schema, path, &node));
    } else if (type == "number") {
      node.kind = NodeKind::kNumber;
      RETURN_IF_ERROR(NumberBounds(schema, path, &node));
    } else if (type == "integer") {
      node.kind = NodeKind::kInteger;
      RETURN_IF_ERROR(NumberBounds(schema, path, &node));
    } else if (type == "boolean") {
      node.kind = NodeKind::kLiterals;
      node.literals = {"true", "false"};
    } else if (type == "null") {
      node.kind = NodeKind::kLiterals;
      node.literals = {"null"};
    } else {
      return Error(path, absl::StrCat("unknown type '", type,
                                      "' (expected object, array, string, number, integer, "
                                      "boolean or null)"));
    }
    return AddNode(path, std::move(node));
  }

  // `pattern` (search semantics, as JSON Schema's ECMA-262 regexes have) or an enforced
  // `format` (whole string).
  absl::Status StringPattern(const Json& schema, const std::string& path, SchemaNode* node) {
    std::string regex;
    RegexAnchoring anchoring = RegexAnchoring::kSearch;
    if (schema.contains("pattern")) {
      if (!schema["pattern"].is_string()) return Error(path, "'pattern' must be a string");
      regex = schema["pattern"].get<std::string>();
    }
    if (schema.contains("format") && schema["format"].is_string()) {
      if (const char* format = FormatRegex(schema["format"].get_ref<const std::string&>())) {
        if (!regex.empty()) {
          return Error(path, "'pattern' next to an enforced 'format' is not supported");
        }
        regex = format;
        anchoring = RegexAnchoring::kFullMatch;
      }
    }
    if (!schema.contains("pattern") && regex.empty()) return absl::OkStatus();
    const std::string key = absl::StrCat(anchoring == RegexAnchoring::kSearch ? "s:" : "f:", regex);
    if (auto it = patterns_.find(key); it != patterns_.end()) {
      node->pattern = it->second;
    } else {
      absl::StatusOr<ByteDfa> dfa = CompileRegex(regex, anchoring);
      if (!dfa.ok()) {
        return Error(path, absl::StrCat(schema.contains("pattern") ? "'pattern'" : "'format'", ": ",
                                        dfa.status().message()));
      }
      pattern_cells_ += dfa->next.size();
      if (pattern_cells_ > kMaxPatternCells) {
        return Error(path,
                     absl::StrCat("the schema's patterns and formats need more than ",
                                  kMaxPatternCells, " automaton transitions in all (the limit)"));
      }
      node->pattern = static_cast<int32_t>(grammar_.patterns.size());
      grammar_.patterns.push_back(*std::move(dfa));
      patterns_[key] = node->pattern;
    }
    // A pattern that needs more code points than maxLength allows matches nothing.
    const ByteDfa& dfa = grammar_.patterns[static_cast<size_t>(node->pattern)];
    if (node->max_length >= 0 &&
        dfa.min_code_points[static_cast<size_t>(dfa.start)] > node->max_length) {
      return Error(path, "no string of at most 'maxLength' code points matches the pattern");
    }
    const int32_t longest = dfa.max_code_points[static_cast<size_t>(dfa.start)];
    if (longest != ByteDfa::kUnbounded && longest < node->min_length) {
      return Error(path, "no string of at least 'minLength' code points matches the pattern");
    }
    return absl::OkStatus();
  }

  // One bound in units of 10^-scale: `up` rounds toward +inf (a lower bound), else toward
  // -inf; `exclusive` moves an exact bound one unit inward. Clamped to what the fixed-point
  // form can write.
  absl::StatusOr<int64_t> ScaledBound(const Json& v, int scale, bool up, bool exclusive,
                                      const std::string& path, const char* key) {
    if (!v.is_number()) return Error(path, absl::StrCat("'", key, "' must be a number"));
    const int64_t limit = Pow10(kMaxIntegerDigits) - 1;
    const long double x = v.is_number_integer()    ? static_cast<long double>(v.get<int64_t>())
                          : v.is_number_unsigned() ? static_cast<long double>(v.get<uint64_t>())
                                                   : static_cast<long double>(v.get<double>());
    const long double scaled = x * static_cast<long double>(Pow10(scale));
    if (scaled > static_cast<long double>(limit)) return up ? limit + 1 : limit;
    if (scaled < -static_cast<long double>(limit)) return up ? -limit : -limit - 1;
    const long double nearest = std::nearbyint(scaled);
    const bool exact = std::fabs(scaled - nearest) < 1e-4L;  // decimal bounds written exactly
    int64_t b = static_cast<int64_t>(exact ? nearest : up ? std::ceil(scaled) : std::floor(scaled));
    if (exact && exclusive) b += up ? 1 : -1;
    return b;
  }

  absl::Status NumberBounds(const Json& schema, const std::string& path, SchemaNode* node) {
    const bool integer = node->kind == NodeKind::kInteger;
    const int scale = integer ? 0 : kMaxBoundedFractionDigits;
    const int64_t limit = Pow10(kMaxIntegerDigits) - 1;  // in units of 10^-scale
    int64_t lo = -limit, hi = limit;
    // A lower (or upper) bound from `key` and its exclusive form `exclusive_key`.
    auto bound = [&](const char* key, const char* exclusive_key, bool lower) -> absl::Status {
      for (const char* k : {key, exclusive_key}) {
        if (!schema.contains(k) || schema[k].is_boolean()) continue;
        // Draft 4 writes the exclusive form as a boolean next to the bound.
        const bool exclusive = k == exclusive_key || (schema.contains(exclusive_key) &&
                                                      schema[exclusive_key].is_boolean() &&
                                                      schema[exclusive_key].get<bool>());
        ASSIGN_OR_RETURN(int64_t b, ScaledBound(schema[k], scale, lower, exclusive, path, k));
        if (lower) {
          lo = std::max(lo, b);
        } else {
          hi = std::min(hi, b);
        }
        node->bounded = true;
      }
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(bound("minimum", "exclusiveMinimum", true));
    RETURN_IF_ERROR(bound("maximum", "exclusiveMaximum", false));
    if (schema.contains("multipleOf")) {
      // Exact in the fixed-point units, or refused (0.1 for numbers is 10^8 units; 2.5 for
      // integers would need fractions).
      const Json& m = schema["multipleOf"];
      if (!m.is_number() || m.get<double>() <= 0) {
        return Error(path, "'multipleOf' must be a number above 0");
      }
      const long double units =
          static_cast<long double>(m.get<double>()) * static_cast<long double>(Pow10(scale));
      const long double whole = std::nearbyint(units);
      if (units > static_cast<long double>(limit) || whole < 1 ||
          std::fabs(units - whole) > 1e-4L) {
        return Error(path, absl::StrCat("'multipleOf' must be ",
                                        integer ? "a whole number" : "a multiple of 1e-9",
                                        " below 1e", kMaxIntegerDigits - scale));
      }
      node->multiple_scaled = static_cast<int64_t>(whole);
      node->bounded = true;
    }
    if (!node->bounded) return absl::OkStatus();
    if (lo > hi) {
      return Error(path,
                   absl::StrCat("no ", integer ? "integer" : "number",
                                " satisfies the minimum and maximum bounds",
                                integer ? ""
                                        : absl::StrCat(" (numbers with bounds are written "
                                                       "in fixed point: at most ",
                                                       kMaxIntegerDigits - scale, " integer and ",
                                                       scale, " fraction digits)")));
    }
    node->min_scaled = lo;
    node->max_scaled = hi;
    if (node->multiple_scaled > 1) {
      if (FirstMultipleAtLeast(lo, node->multiple_scaled) > hi) {
        return Error(path, "no multiple of 'multipleOf' lies within the minimum and maximum");
      }
    }
    return absl::OkStatus();
  }

  absl::Status Object(const Json& schema, const std::string& path, SchemaNode* node) {
    std::set<std::string> required;
    if (schema.contains("required")) {
      const Json& r = schema["required"];
      if (!r.is_array()) return Error(path, "'required' must be an array of property names");
      for (const Json& name : r) {
        if (!name.is_string()) return Error(path, "'required' must list property names");
        required.insert(name.get<std::string>());
      }
    }
    const bool has_properties = schema.contains("properties");
    if (has_properties) {
      const Json& props = schema["properties"];
      if (!props.is_object()) return Error(path, "'properties' must be an object");
      for (const auto& [name, sub] : props.items()) {
        const std::string sub_path = absl::StrCat(path, "/properties/", PointerToken(name));
        ASSIGN_OR_RETURN(int32_t value, Compile(sub, sub_path));
        SchemaProperty p;
        p.key_text = Json(name).dump().substr(1);  // escaped, closing quote kept
        p.value = value;
        p.required = required.erase(name) != 0;
        node->properties.push_back(std::move(p));
      }
    }
    if (!required.empty()) {
      return Error(path, absl::StrCat("'required' names '", *required.begin(),
                                      "', which is not in 'properties'"));
    }
    if (schema.contains("additionalProperties")) {
      const Json& extra = schema["additionalProperties"];
      const bool none = extra.is_boolean() && !extra.get<bool>();
      if (!none && has_properties) {
        return Error(path,
                     "'additionalProperties' other than false next to 'properties' is not "
                     "supported (the output lists exactly the declared properties)");
      }
      if (!none) {
        ASSIGN_OR_RETURN(node->additional,
                         Compile(extra, absl::StrCat(path, "/additionalProperties")));
      }
    } else if (!has_properties) {
      ASSIGN_OR_RETURN(node->additional, AddNode(path, SchemaNode{}));
    }
    return absl::OkStatus();
  }

  absl::Status Array(const Json& schema, const std::string& path, SchemaNode* node) {
    if (schema.contains("prefixItems")) {
      const Json& prefix = schema["prefixItems"];
      if (!prefix.is_array()) return Error(path, "'prefixItems' must be an array of schemas");
      for (size_t i = 0; i < prefix.size(); ++i) {
        ASSIGN_OR_RETURN(int32_t item, Compile(prefix[i], absl::StrCat(path, "/prefixItems/", i)));
        node->prefix_items.push_back(item);
      }
    }
    // Items after the prefix: `items` (absent or true: any value; false: none).
    const bool closed =
        schema.contains("items") && schema["items"].is_boolean() && !schema["items"].get<bool>();
    if (closed) {
      node->items = -1;
      node->max_items = static_cast<int64_t>(node->prefix_items.size());
    } else if (schema.contains("items")) {
      ASSIGN_OR_RETURN(node->items, Compile(schema["items"], absl::StrCat(path, "/items")));
    } else {
      ASSIGN_OR_RETURN(node->items, AddNode(path, SchemaNode{}));
    }
    if (schema.contains("minItems")) {
      ASSIGN_OR_RETURN(node->min_items, Count(schema, "minItems", path));
    }
    if (schema.contains("maxItems")) {
      ASSIGN_OR_RETURN(int64_t max_items, Count(schema, "maxItems", path));
      node->max_items = node->max_items < 0 ? max_items : std::min(node->max_items, max_items);
    }
    if (node->max_items >= 0 && node->max_items < node->min_items) {
      return Error(path,
                   "'maxItems' (or a closed 'prefixItems') is below 'minItems': no array "
                   "satisfies both");
    }
    return absl::OkStatus();
  }

  // Replaces each anyOf's alternatives by the non-anyOf nodes they reach through anyOf nodes
  // only (nested lists, $ref to an anyOf, anyOf cycles), so the matcher never meets an anyOf
  // alternative. An anyOf that reaches none (a pure cycle) accepts no value.
  absl::Status FlattenAlternatives() {
    std::vector<std::vector<int32_t>> flat(grammar_.nodes.size());
    for (size_t i = 0; i < grammar_.nodes.size(); ++i) {
      if (grammar_.nodes[i].kind != NodeKind::kAnyOf) continue;
      std::vector<bool> seen(grammar_.nodes.size(), false);
      std::vector<int32_t> todo = {static_cast<int32_t>(i)};
      while (!todo.empty()) {
        const int32_t n = todo.back();
        todo.pop_back();
        if (seen[static_cast<size_t>(n)]) continue;
        seen[static_cast<size_t>(n)] = true;
        const SchemaNode& node = grammar_.nodes[static_cast<size_t>(n)];
        if (node.kind != NodeKind::kAnyOf) {
          flat[i].push_back(n);
          continue;
        }
        for (auto it = node.alternatives.rbegin(); it != node.alternatives.rend(); ++it) {
          todo.push_back(*it);
        }
      }
      if (flat[i].empty()) return Error("", "an anyOf only refers to itself: no value matches");
    }
    for (size_t i = 0; i < grammar_.nodes.size(); ++i) {
      if (grammar_.nodes[i].kind == NodeKind::kAnyOf) {
        grammar_.nodes[i].alternatives = std::move(flat[i]);
      }
    }
    return absl::OkStatus();
  }

  const Json& root_;
  JsonGrammar grammar_;
  std::map<std::string, int32_t> refs_;      // "$ref" target → node
  std::map<std::string, int32_t> patterns_;  // anchoring + regex → index in grammar_.patterns
  size_t pattern_cells_ = 0;                 // transitions of grammar_.patterns, all together
  int depth_ = 0;                            // Compile calls open
};

}  // namespace

JsonGrammar AnyJsonObjectGrammar() {
  JsonGrammar g;
  g.nodes.resize(2);
  g.nodes[0].kind = NodeKind::kObject;
  g.nodes[0].additional = 1;  // free keys, any values
  g.nodes[1].kind = NodeKind::kAny;
  g.root = 0;
  return g;
}

JsonGrammar ExactTextGrammar(std::vector<std::string> texts) {
  JsonGrammar g;
  g.nodes.resize(1);
  g.nodes[0].kind = NodeKind::kLiterals;
  g.nodes[0].literals = std::move(texts);
  g.root_whitespace = false;
  FinalizeNodes(&g);
  return g;
}

JsonGrammar RegexTextGrammar(ByteDfa dfa) {
  JsonGrammar g;
  g.nodes.resize(1);
  g.nodes[0].kind = NodeKind::kText;
  g.nodes[0].pattern = 0;
  g.patterns.push_back(std::move(dfa));
  g.root_whitespace = false;
  return g;
}

absl::StatusOr<JsonGrammar> CompileJsonSchema(const Json& schema) { return Compiler(schema).Run(); }

}  // namespace strata::structured
