// ReadResponseFormat (openai_request.h): response_format → the JSON grammar the output must
// follow (engine/structured/).
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "server/frontend/api_error.h"
#include "server/frontend/openai_request.h"

namespace strata::frontend {

absl::Status ReadResponseFormat(const Json& body, GenerationFields* g) {
  auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) return InvalidType("response_format", "an object");
  auto type_it = it->find("type");
  if (type_it == it->end() || type_it->is_null()) return MissingField("response_format.type");
  if (!type_it->is_string()) return InvalidType("response_format.type", "a string");
  const std::string& type = type_it->get_ref<const std::string&>();
  if (type == "text") return absl::OkStatus();
  if (type == "json_object") {
    g->json_grammar = std::make_shared<structured::JsonGrammar>(structured::AnyJsonObjectGrammar());
    return absl::OkStatus();
  }
  if (type != "json_schema") {
    return InvalidField("response_format.type",
                        absl::StrCat("unknown response_format type '", type,
                                     "' (expected text, json_object or json_schema)"));
  }
  auto spec = it->find("json_schema");
  if (spec == it->end() || spec->is_null()) return MissingField("response_format.json_schema");
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
  const Json any_value = Json::object();
  const Json& s = schema == spec->end() || schema->is_null() ? any_value : *schema;
  absl::StatusOr<structured::JsonGrammar> grammar = structured::CompileJsonSchema(s);
  if (!grammar.ok()) {
    return InvalidField(
        "response_format.json_schema.schema",
        absl::StrCat("response_format.json_schema.schema: ", grammar.status().message()));
  }
  g->json_grammar = std::make_shared<structured::JsonGrammar>(*std::move(grammar));
  return absl::OkStatus();
}

}  // namespace strata::frontend
