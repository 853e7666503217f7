// ReadResponseFormat (openai_request.h): the output constraint a request asks for → the grammar
// the output must follow (engine/structured/). OpenAI's response_format, vLLM's extras for the
// same thing: guided_json / guided_choice / guided_regex / guided_grammar (older) and
// structured_outputs {json, json_object, choice, regex, grammar}, llama.cpp's `grammar` and
// `json_schema`, SGLang's `ebnf`, `json_schema` and `regex` (GBNF, as vLLM's grammars).
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "server/frontend/api_error.h"
#include "server/frontend/json_fields.h"
#include "server/frontend/openai_request.h"

namespace strata::frontend {

// A JSON Schema (an object, or its JSON text as vLLM's guided_json also takes) at `param`.
absl::StatusOr<std::shared_ptr<const structured::JsonGrammar>> CompileSchemaField(
    const Json& schema, const std::string& param) {
  Json parsed;
  const Json* s = &schema;
  if (schema.is_string()) {
    ASSIGN_OR_RETURN(parsed, ParseJsonField(schema.get_ref<const std::string&>(), param));
    s = &parsed;
  }
  absl::StatusOr<structured::JsonGrammar> grammar = structured::CompileJsonSchema(*s);
  if (!grammar.ok()) {
    return InvalidField(param, absl::StrCat(param, ": ", grammar.status().message()));
  }
  return std::make_shared<structured::JsonGrammar>(*std::move(grammar));
}

namespace {

using GrammarPtr = std::shared_ptr<const structured::JsonGrammar>;
using CfgPtr = std::shared_ptr<const structured::CfgGrammar>;

// What one source of the request asks for: one of the two, or neither (free text).
struct OutputGrammar {
  GrammarPtr json;
  CfgPtr cfg;

  OutputGrammar() = default;
  OutputGrammar(GrammarPtr j) : json(std::move(j)) {}  // NOLINT: the common case
  OutputGrammar(CfgPtr c) : cfg(std::move(c)) {}       // NOLINT
  bool any() const { return json != nullptr || cfg != nullptr; }
};

// The whole output is a `root` of the GBNF grammar at `param` (gbnf.h).
absl::StatusOr<CfgPtr> GbnfGrammar(const Json& text, const std::string& param) {
  if (!text.is_string() || text.get_ref<const std::string&>().empty()) {
    return InvalidType(param, "a non-empty string (a GBNF grammar)");
  }
  absl::StatusOr<structured::CfgGrammar> g =
      structured::CompileGbnf(text.get_ref<const std::string&>());
  if (!g.ok()) return InvalidField(param, absl::StrCat(param, ": ", g.status().message()));
  return std::make_shared<structured::CfgGrammar>(*std::move(g));
}

// The output is exactly one of the strings at `param` (vLLM's guided_choice).
absl::StatusOr<GrammarPtr> ChoiceGrammar(const Json& choices, const std::string& param) {
  if (!choices.is_array() || choices.empty()) {
    return InvalidType(param, "a non-empty array of strings");
  }
  std::vector<std::string> texts;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (!choices[i].is_string() || choices[i].get_ref<const std::string&>().empty()) {
      return InvalidType(absl::StrCat(param, "[", i, "]"), "a non-empty string");
    }
    texts.push_back(choices[i].get<std::string>());
  }
  return std::make_shared<structured::JsonGrammar>(structured::ExactTextGrammar(texts));
}

// The whole output matches the regular expression at `param` (vLLM's guided_regex).
absl::StatusOr<GrammarPtr> RegexGrammar(const Json& regex, const std::string& param) {
  if (!regex.is_string()) return InvalidType(param, "a string (a regular expression)");
  absl::StatusOr<structured::ByteDfa> dfa = structured::CompileRegex(
      regex.get_ref<const std::string&>(), structured::RegexAnchoring::kFullMatch);
  if (!dfa.ok()) return InvalidField(param, absl::StrCat(param, ": ", dfa.status().message()));
  return std::make_shared<structured::JsonGrammar>(structured::RegexTextGrammar(*std::move(dfa)));
}

absl::StatusOr<GrammarPtr> FromResponseFormat(const Json& format) {
  if (!format.is_object()) return InvalidType("response_format", "an object");
  auto type_it = format.find("type");
  if (type_it == format.end() || type_it->is_null()) return MissingField("response_format.type");
  if (!type_it->is_string()) return InvalidType("response_format.type", "a string");
  const std::string& type = type_it->get_ref<const std::string&>();
  if (type == "text") return GrammarPtr();
  if (type == "json_object") {
    return std::make_shared<structured::JsonGrammar>(structured::AnyJsonObjectGrammar());
  }
  if (type != "json_schema") {
    return InvalidField("response_format.type",
                        absl::StrCat("unknown response_format type '", type,
                                     "' (expected text, json_object or json_schema)"));
  }
  auto spec = format.find("json_schema");
  if (spec == format.end() || spec->is_null()) return MissingField("response_format.json_schema");
  if (!spec->is_object()) return InvalidType("response_format.json_schema", "an object");
  auto name = spec->find("name");
  if (name != spec->end() && !name->is_null() && !name->is_string()) {
    return InvalidType("response_format.json_schema.name", "a string");
  }
  auto strict = spec->find("strict");
  if (strict != spec->end() && !strict->is_null() && !strict->is_boolean()) {
    return InvalidType("response_format.json_schema.strict", "a boolean");
  }
  // OpenAI makes `schema` optional: without one, any JSON value.
  auto schema = spec->find("schema");
  if (schema == spec->end() || schema->is_null()) {
    return CompileSchemaField(Json::object(), "response_format.json_schema.schema");
  }
  if (!schema->is_object() && !schema->is_boolean()) {
    return InvalidType("response_format.json_schema.schema", "a JSON Schema object");
  }
  return CompileSchemaField(*schema, "response_format.json_schema.schema");
}

absl::StatusOr<OutputGrammar> FromStructuredOutputs(const Json& so) {
  if (!so.is_object()) return InvalidType("structured_outputs", "an object");
  OutputGrammar grammar;
  int kinds = 0;
  for (const auto& [key, value] : so.items()) {
    if (value.is_null()) continue;
    if (key == "json") {
      ++kinds;
      ASSIGN_OR_RETURN(grammar, CompileSchemaField(value, "structured_outputs.json"));
    } else if (key == "choice") {
      ++kinds;
      ASSIGN_OR_RETURN(grammar, ChoiceGrammar(value, "structured_outputs.choice"));
    } else if (key == "json_object") {
      if (!value.is_boolean()) return InvalidType("structured_outputs.json_object", "a boolean");
      if (!value.get<bool>()) continue;
      ++kinds;
      grammar =
          GrammarPtr(std::make_shared<structured::JsonGrammar>(structured::AnyJsonObjectGrammar()));
    } else if (key == "regex") {
      ++kinds;
      ASSIGN_OR_RETURN(grammar, RegexGrammar(value, "structured_outputs.regex"));
    } else if (key == "grammar") {
      ++kinds;
      ASSIGN_OR_RETURN(grammar, GbnfGrammar(value, "structured_outputs.grammar"));
    } else if (key == "structural_tag") {
      return InvalidField("structured_outputs.structural_tag",
                          "structured_outputs.structural_tag is not supported (json, json_object, "
                          "choice, regex and grammar are)",
                          "unsupported_value");
    }
  }
  if (kinds > 1) {
    return InvalidField(
        "structured_outputs",
        "structured_outputs takes one of json, json_object, choice, regex or grammar");
  }
  return grammar;
}

}  // namespace

absl::Status ReadResponseFormat(const Json& body, GenerationFields* g) {
  // Each source that is present (and not "text"), in the order they are documented.
  std::vector<std::pair<const char*, OutputGrammar>> found;
  auto add = [&](const char* name, auto grammar) -> absl::Status {
    if (!grammar.ok()) return grammar.status();
    OutputGrammar g(*std::move(grammar));
    if (g.any()) found.emplace_back(name, std::move(g));
    return absl::OkStatus();
  };
  auto present = [&](const char* key) -> const Json* {
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const Json* f = present("response_format"))
    RETURN_IF_ERROR(add("response_format", FromResponseFormat(*f)));
  if (const Json* s = present("structured_outputs")) {
    RETURN_IF_ERROR(add("structured_outputs", FromStructuredOutputs(*s)));
  }
  if (const Json* j = present("guided_json"))
    RETURN_IF_ERROR(add("guided_json", CompileSchemaField(*j, "guided_json")));
  if (const Json* c = present("guided_choice")) {
    RETURN_IF_ERROR(add("guided_choice", ChoiceGrammar(*c, "guided_choice")));
  }
  if (const Json* r = present("guided_regex")) {
    RETURN_IF_ERROR(add("guided_regex", RegexGrammar(*r, "guided_regex")));
  }
  // llama.cpp's and SGLang's names for a schema and (SGLang's) a regex.
  if (const Json* j = present("json_schema")) {
    RETURN_IF_ERROR(add("json_schema", CompileSchemaField(*j, "json_schema")));
  }
  if (const Json* r = present("regex")) RETURN_IF_ERROR(add("regex", RegexGrammar(*r, "regex")));
  // vLLM's, llama.cpp's and SGLang's names for a GBNF grammar.
  for (const char* key : {"guided_grammar", "grammar", "ebnf"}) {
    if (const Json* text = present(key)) RETURN_IF_ERROR(add(key, GbnfGrammar(*text, key)));
  }
  if (found.size() > 1) {
    return InvalidField(found[1].first, absl::StrCat("'", found[0].first, "' and '", found[1].first,
                                                     "' both constrain the output; give one"));
  }
  if (!found.empty()) {
    g->json_grammar = std::move(found[0].second.json);
    g->cfg_grammar = std::move(found[0].second.cfg);
  }
  return absl::OkStatus();
}

}  // namespace strata::frontend
