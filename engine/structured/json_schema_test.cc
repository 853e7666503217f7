// JSON Schema compilation: what each supported keyword admits and rejects (through the
// matcher), and the errors for schemas the grammar cannot enforce.
#include "engine/structured/json_schema.h"

#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "engine/structured/json_matcher.h"
#include "engine/structured/matcher_testing.h"

namespace strata::structured {
namespace {

using testing::ExpectVerdicts;

JsonGrammar MustCompile(const char* schema) {
  absl::StatusOr<JsonGrammar> g = CompileJsonSchema(Json::parse(schema));
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : AnyJsonObjectGrammar();
}

std::string CompileError(const char* schema) {
  absl::StatusOr<JsonGrammar> g = CompileJsonSchema(Json::parse(schema));
  EXPECT_FALSE(g.ok()) << schema;
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(g.status().message());
}

TEST(JsonSchemaTest, PropertiesComeInSchemaOrderOptionalOnesMaySkip) {
  const JsonGrammar g = MustCompile(R"({"type":"object",
      "properties":{"name":{"type":"string"},"age":{"type":"integer"},"nick":{"type":"string"}},
      "required":["name","nick"],"additionalProperties":false})");
  ExpectVerdicts(g,
                 {R"({"name":"Ann","age":31,"nick":"a"})", R"({"name":"Ann","nick":"a"})",
                  "{ \"name\" : \"Ann\" ,\n \"nick\" : \"\" }"},
                 {R"({"name":"Ann"})",                       // nick is required
                  R"({"nick":"a","name":"Ann"})",            // out of order
                  R"({"name":"Ann","age":3.5,"nick":"a"})",  // not an integer
                  R"({"name":"Ann","other":1,"nick":"a"})",  // undeclared key
                  R"({"name":1,"nick":"a"})", R"({"name":"Ann","name":"Bo","nick":"a"})"});
}

TEST(JsonSchemaTest, ScalarsEnumsConstsAndTypeLists) {
  ExpectVerdicts(MustCompile(R"({"enum":["red","green",7,null,{"a":[1]}]})"),
                 {R"("red")", R"("green")", "7", "null", R"({"a":[1]})"},
                 {R"("blue")", "70", R"({"a":[1,2]})", R"("red" )"});
  ExpectVerdicts(MustCompile(R"({"const":"only"})"), {R"("only")"}, {R"("onl")"});
  ExpectVerdicts(MustCompile(R"({"type":["number","null","boolean"]})"),
                 {"-1.5e3", "0", "null", "true", "false"}, {R"("1")", "nul", "[]", "-", "1."});
}

TEST(JsonSchemaTest, LargeEnumsAndWideObjectsKeepEveryCandidate) {
  // More candidates than matcher threads (kMaxThreads): each must stay reachable.
  Json values = Json::array();
  for (int i = 0; i < 1000; ++i) values.push_back(absl::StrCat("v", i));
  values.push_back(7);
  values.push_back(70);  // a number literal that extends another
  absl::StatusOr<JsonGrammar> e = CompileJsonSchema(Json{{"enum", values}});
  ASSERT_TRUE(e.ok()) << e.status();
  ExpectVerdicts(*e, {R"("v0")", R"("v999")", R"("v500")", "7", "70"},
                 {R"("v1000")", R"("v")", "700", "0"});
  Json wide = {{"type", "object"}, {"additionalProperties", false}};
  for (int i = 0; i < 600; ++i) wide["properties"][absl::StrCat("k", i)] = {{"type", "integer"}};
  wide["required"] = {"k300"};
  absl::StatusOr<JsonGrammar> w = CompileJsonSchema(wide);
  ASSERT_TRUE(w.ok()) << w.status();
  ExpectVerdicts(*w, {R"({"k300":1})", R"({"k0":1,"k299":2,"k300":3,"k599":4})"},
                 {R"({"k301":1})",             // skips the required k300
                  R"({"k300":1,"k10":2})",     // out of order
                  R"({"k300":1,"k300":2})"});  // twice
}

TEST(JsonSchemaTest, StringLengthsCountCodePoints) {
  ExpectVerdicts(MustCompile(R"({"type":"string","minLength":2,"maxLength":3})"),
                 {R"("ab")", "\"\xc3\xa9\xc3\xa9\xc3\xa9\"",  // three two-byte code points
                  R"("a\n\u00e9")"},                          // escapes count once each
                 {R"("a")", R"("abcd")"});
}

TEST(JsonSchemaTest, ArraysBoundTheirItems) {
  const JsonGrammar g =
      MustCompile(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2})");
  // Integers fit an int64: at most kMaxIntegerDigits digits, a sign aside.
  const std::string digits(kMaxIntegerDigits, '9');
  ExpectVerdicts(g, {"[1]", "[ 1 , -2 ]", absl::StrCat("[", digits, ",-", digits, "]")},
                 {"[]", "[1,2,3]", "[1,]", "[\"1\"]", absl::StrCat("[", digits, "9]"),
                  absl::StrCat("[-", digits, "9]")});
}

TEST(JsonSchemaTest, ArraysWithoutItemsTuplesAndClosedTuples) {
  ExpectVerdicts(MustCompile(R"({"type":"array"})"), {"[]", R"([1,"a",{"b":[null]}])"},
                 {"[1,]", "{}"});
  // Pydantic's Tuple[int, str]: prefixItems, closed by min/maxItems.
  ExpectVerdicts(MustCompile(R"({"type":"array","prefixItems":[{"type":"integer"},
                               {"type":"string"}],"minItems":2,"maxItems":2})"),
                 {R"([1,"a"])"}, {R"(["a",1])", "[1]", R"([1,"a",2])"});
  // items: false closes the tuple after its prefix; items: a schema types the rest.
  ExpectVerdicts(MustCompile(R"({"prefixItems":[{"type":"boolean"}],"items":false})"),
                 {"[]", "[true]"}, {"[true,false]", "[1]"});
  ExpectVerdicts(MustCompile(R"({"prefixItems":[{"type":"boolean"}],"items":{"type":"null"}})"),
                 {"[true,null,null]"}, {"[true,true]", "[null]"});
  // A Pydantic tagged union: discriminator is an annotation, the alternatives fix the tag.
  ExpectVerdicts(MustCompile(R"({"oneOf":[
                     {"type":"object","properties":{"kind":{"const":"cat"},"lives":{"type":"integer"}},
                      "required":["kind","lives"]},
                     {"type":"object","properties":{"kind":{"const":"dog"}},"required":["kind"]}],
                   "discriminator":{"propertyName":"kind"}})"),
                 {R"({"kind":"cat","lives":9})", R"({"kind":"dog"})"},
                 {R"({"kind":"dog","lives":1})", R"({"kind":"cat"})"});
}

TEST(JsonSchemaTest, AnyOfRefsAndRecursion) {
  const JsonGrammar g = MustCompile(R"({
      "$defs":{"node":{"type":"object","properties":{
          "v":{"type":"integer"},
          "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
        "required":["v"],"additionalProperties":false}},
      "anyOf":[{"$ref":"#/$defs/node"},{"type":"string","maxLength":1}]})");
  ExpectVerdicts(g, {R"({"v":1})", R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3}]})", R"("x")"},
                 {R"("xy")", R"({"v":1,"kids":[{"kids":[]}]})"});
  // A self-referencing root and nested anyOf lists.
  ExpectVerdicts(MustCompile(R"({"anyOf":[{"type":"null"},
                                          {"anyOf":[{"type":"array","items":{"$ref":"#"}}]}]})"),
                 {"[[null,[]],null]"}, {"[1]"});
}

TEST(JsonSchemaTest, FreeObjectsAndEmptySchemas) {
  ExpectVerdicts(MustCompile(R"({"type":"object","additionalProperties":{"type":"boolean"}})"),
                 {R"({"a":true,"b":false})"}, {R"({"a":1})"});
  ExpectVerdicts(MustCompile(R"({"type":"object","additionalProperties":false})"), {"{}"},
                 {R"({"a":1})"});
  ExpectVerdicts(MustCompile("{}"), {"1", "\"s\"", "[{}]", "null"}, {"nul"});
  ExpectVerdicts(MustCompile(R"({"title":"T","description":"d","type":"string","format":"date",
                                 "default":"x"})"),
                 {"\"2026-11-30\""}, {"2026"});
}

TEST(JsonSchemaTest, UnenforceableSchemasAreRefusedNamingTheKeywordAndPlace) {
  EXPECT_NE(CompileError(R"({"type":"object","properties":{"age":{"type":"integer","minimum":0}}})")
                .find("'#/properties/age': keyword 'minimum' is not supported"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"type":"string","pattern":"^a"})").find("'pattern'"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"$ref":"#/$defs/missing"})").find("does not resolve"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"$ref":"http://x/schema"})").find("only local references"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"properties":{"a":{}},"required":["b"]})").find("'b'"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"type":"string","minLength":3,"maxLength":2})").find("below"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"prefixItems":[{}],"items":false,"minItems":2})").find("below"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"type":"date"})").find("unknown type 'date'"), std::string::npos);
  EXPECT_NE(CompileError("false").find("accepts no value"), std::string::npos);
  EXPECT_NE(CompileError(R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"})")
                .find("no value matches"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"properties":{"a":{}},"additionalProperties":true})")
                .find("additionalProperties"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"enum":[]})").find("non-empty"), std::string::npos);
  EXPECT_NE(CompileError("[1]").find("must be an object or a boolean"), std::string::npos);
  // Nesting is bounded (the compiler recurses per level): schemas and enum values alike.
  std::string deep = "{}";
  for (int i = 0; i < kMaxSchemaDepth; ++i) deep = absl::StrCat(R"({"items":)", deep, "}");
  EXPECT_NE(CompileError(deep.c_str()).find("deeper than 128 levels"), std::string::npos);
  const std::string value = absl::StrCat(std::string(200000, '['), "1", std::string(200000, ']'));
  EXPECT_NE(CompileError(absl::StrCat(R"({"enum":[)", value, "]}").c_str()).find("deeper than"),
            std::string::npos);
}

}  // namespace
}  // namespace strata::structured
