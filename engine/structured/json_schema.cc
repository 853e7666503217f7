// json_schema.h: JSON Schema → JsonGrammar.
#include "engine/structured/json_schema.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace strata::structured {
namespace {

constexpr char kSupported[] =
    "type, enum, const, properties, required, additionalProperties, items, prefixItems, "
    "minItems, maxItems, minLength, maxLength, anyOf, oneOf, allOf (one member), $ref, $defs";

const std::set<std::string_view>& KnownKeywords() {
  static const std::set<std::string_view> known = {
      "type",  "enum",        "const",    "properties", "required",  "additionalProperties",
      "items", "prefixItems", "minItems", "maxItems",   "minLength", "maxLength",
      "anyOf", "oneOf",       "allOf",    "$ref",       "$defs",     "definitions"};
  return known;
}

const std::set<std::string_view>& Annotations() {
  static const std::set<std::string_view> ignored = {
      "title", "description", "default",    "examples", "format",    "$schema",
      "$id",   "$comment",    "deprecated", "readOnly", "writeOnly", "discriminator"};
  return ignored;
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
    if (schema.contains("minLength") || schema.contains("maxLength")) {
      return TypedAs(schema, "string", path);
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
    for (const Json& v : values) {
      RETURN_IF_ERROR(CheckLiteral(v, path));
      std::string text = v.dump();
      if (std::find(node.literals.begin(), node.literals.end(), text) == node.literals.end()) {
        node.literals.push_back(std::move(text));
      }
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
    } else if (type == "number") {
      node.kind = NodeKind::kNumber;
    } else if (type == "integer") {
      node.kind = NodeKind::kInteger;
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
  std::map<std::string, int32_t> refs_;  // "$ref" target → node
  int depth_ = 0;                        // Compile calls open
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

absl::StatusOr<JsonGrammar> CompileJsonSchema(const Json& schema) { return Compiler(schema).Run(); }

}  // namespace strata::structured
