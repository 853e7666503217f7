// JSON Schema compilation: what each supported keyword admits and rejects (through the
// matcher), and the errors for schemas the grammar cannot enforce.
#include "engine/structured/json_schema.h"

#include <random>
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

TEST(JsonSchemaTest, PatternsMatchTheDecodedString) {
  ExpectVerdicts(MustCompile(R"({"type":"string","pattern":"^[a-z]+@[a-z]+\\.com$"})"),
                 {R"("ab@cd.com")"},
                 {R"("ab@cd")", R"("AB@cd.com")", R"("ab@cd.com ")",
                  R"("ab@cd\u002ecom")"});  // \u escapes only for control characters
  // JSON Schema patterns are not anchored unless they say so.
  ExpectVerdicts(MustCompile(R"({"pattern":"ab"})"), {R"("xxabyy")", R"("ab")"},
                 {R"("ba")", R"("")", "1"});
  // Escapes step the pattern by the character they stand for.
  ExpectVerdicts(MustCompile(R"({"type":"string","pattern":"^a\nb\"/\\\\$"})"),
                 {R"("a\nb\"/\\")", R"("a\u000ab\"\/\\")", R"("a\u000Ab\"/\\")"},
                 {R"("a\tb\"/\\")", R"("anb\"/\\")", R"("a\u0062")"});
  // Lengths still count code points, and a byte is refused as soon as the pattern could only
  // match past maxLength.
  const JsonGrammar bounded = MustCompile(R"({"type":"string","pattern":"^a+b?$","maxLength":3})");
  ExpectVerdicts(bounded, {R"("aaa")", R"("aab")", R"("a")"}, {R"("aaaa")", R"("")"});
  JsonMatchState state;
  EXPECT_TRUE(testing::Feed(bounded, R"("aa)", &state));
  EXPECT_FALSE(testing::Feed(bounded, R"("aaab)", &state));
  // minLength: a byte is refused as soon as the pattern could only match short of it.
  const JsonGrammar at_least =
      MustCompile(R"({"type":"string","pattern":"^(a|bbb)c?$","minLength":3})");
  ExpectVerdicts(at_least, {R"("bbb")", R"("bbbc")"}, {R"("ac")", R"("a")"});
  EXPECT_FALSE(testing::Feed(at_least, R"("a)", &state));
  EXPECT_NE(CompileError(R"({"type":"string","pattern":"^a{1,2}$","minLength":3})")
                .find("at least 'minLength'"),
            std::string::npos);
  ExpectVerdicts(MustCompile(R"({"type":"string","pattern":"^é+$","minLength":2})"),
                 {"\"\xc3\xa9\xc3\xa9\""}, {"\"\xc3\xa9\"", "\"e\""});
  // Only string values: keys and other types are untouched.
  ExpectVerdicts(
      MustCompile(R"({"type":"object","additionalProperties":{"type":["string","integer"],
                                   "pattern":"^x"}})"),
      {R"({"any key":"x1","k":7})"}, {R"({"k":"y"})"});
}

TEST(JsonSchemaTest, KnownFormatsAreEnforcedOthersAreAnnotations) {
  ExpectVerdicts(MustCompile(R"({"type":"string","format":"date-time"})"),
                 {R"("2026-11-30T14:05:00Z")", R"("2026-11-30t14:05:59.123+01:00")"},
                 {R"("2026-13-30T14:05:00Z")", R"("2026-11-30 14:05:00Z")",
                  R"("2026-11-30T24:00:00Z")", R"("2026-11-30")"});
  ExpectVerdicts(MustCompile(R"({"type":"string","format":"date"})"), {R"("2026-02-28")"},
                 {R"("2026-2-28")", R"("2026-02-32")"});
  ExpectVerdicts(MustCompile(R"({"type":"string","format":"time"})"), {R"("23:59:60-08:00")"},
                 {R"("23:59")"});
  ExpectVerdicts(
      MustCompile(R"({"type":"string","format":"uuid"})"),
      {R"("123e4567-e89b-12d3-a456-426614174000")"},
      {R"("123e4567-e89b-12d3-a456-42661417400")", R"("g23e4567-e89b-12d3-a456-426614174000")"});
  ExpectVerdicts(MustCompile(R"({"type":"string","format":"email"})"),
                 {R"("ann.lee+x@mail.example.com")"},
                 {R"("ann@localhost")", R"("@x.com")", R"("a b@x.com")"});
  ExpectVerdicts(MustCompile(R"({"type":"string","format":"ipv4"})"), {R"("10.0.0.255")"},
                 {R"("256.1.1.1")", R"("1.2.3")", R"("01.2.3.4")"});
  ExpectVerdicts(MustCompile(R"({"type":"string","format":"hostname"})"),
                 {R"("api.example-1.com")", R"("localhost")"}, {R"("-x.com")", R"("a..b")"});
  ExpectVerdicts(MustCompile(R"({"type":["string","null"],"format":"date"})"),
                 {"null", R"("2026-11-30")"}, {R"("soon")"});
  ExpectVerdicts(MustCompile(R"({"type":"string","format":"color"})"), {R"("any text")"}, {"1"});
}

TEST(JsonSchemaTest, NumberBoundsHoldForEveryValueWritten) {
  ExpectVerdicts(MustCompile(R"({"type":"integer","minimum":0,"maximum":120})"),
                 {"0", "7", "120", "-0"}, {"-1", "121", "1200", "1.0", "1e2"});
  ExpectVerdicts(MustCompile(R"({"type":"integer","exclusiveMinimum":0})"), {"1", "99999"},
                 {"0", "-5"});
  ExpectVerdicts(MustCompile(R"({"type":"integer","minimum":5,"exclusiveMinimum":true})"), {"6"},
                 {"5"});  // draft 4's boolean form
  ExpectVerdicts(MustCompile(R"({"type":"integer","minimum":-2.5,"maximum":2.5})"), {"-2", "2"},
                 {"-3", "3"});
  ExpectVerdicts(MustCompile(R"({"type":"number","minimum":0,"maximum":1})"),
                 {"0", "0.5", "1", "1.000", "0.999999999"},
                 {"1.000000001", "1.5", "-0.1", "2", "1e0", "0.1234567891"});
  ExpectVerdicts(MustCompile(R"({"type":"number","minimum":0.1,"exclusiveMaximum":1.5})"),
                 {"0.1", "1.4999", "1"}, {"0.09", "1.5", "0.099999999"});
  ExpectVerdicts(MustCompile(R"({"maximum":-3})"), {"-3", "-3.5", "-100"}, {"-2.9", "0"});
  // multipleOf: a digit is taken only while some multiple within the bounds starts with it.
  const JsonGrammar fives = MustCompile(R"({"type":"integer","multipleOf":5,"minimum":0,
                                            "maximum":100})");
  ExpectVerdicts(fives, {"0", "5", "95", "100"}, {"3", "105", "-5", "99"});
  JsonMatchState state;
  EXPECT_TRUE(testing::Feed(fives, "9", &state));    // 90, 95
  EXPECT_FALSE(testing::Feed(fives, "99", &state));  // none
  ExpectVerdicts(MustCompile(R"({"type":"number","multipleOf":0.25,"minimum":0,"maximum":1})"),
                 {"0", "0.25", "0.5", "0.750", "1"}, {"0.3", "0.125", "1.25"});
  EXPECT_NE(CompileError(R"({"type":"integer","multipleOf":2.5})").find("a whole number"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"type":"integer","multipleOf":10,"minimum":1,"maximum":9})")
                .find("no multiple"),
            std::string::npos);
  const JsonGrammar sevens =
      MustCompile(R"({"type":"integer","multipleOf":7,"minimum":-50,"maximum":200})");
  // Random values against the bounds as a consumer compares them (doubles).
  const JsonGrammar ints = MustCompile(R"({"type":"integer","minimum":-17,"maximum":123})");
  const JsonGrammar nums = MustCompile(R"({"type":"number","minimum":-2.5,"maximum":3.25})");
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    const int v = std::uniform_int_distribution<int>(-300, 300)(rng);
    EXPECT_EQ(testing::Accepts(ints, std::to_string(v)), v >= -17 && v <= 123) << v;
    EXPECT_EQ(testing::Accepts(sevens, std::to_string(v)), v >= -50 && v <= 200 && v % 7 == 0) << v;
    const int digits = std::uniform_int_distribution<int>(0, 4)(rng);
    std::string text = std::to_string(std::uniform_int_distribution<int>(-4, 4)(rng));
    if (text == "0" && rng() % 2) text = "-0";
    if (digits > 0) {
      text += '.';
      for (int d = 0; d < digits; ++d) text += static_cast<char>('0' + rng() % 10);
    }
    const double x = std::stod(text);
    EXPECT_EQ(testing::Accepts(nums, text), x >= -2.5 && x <= 3.25) << text;
  }
}

TEST(JsonSchemaTest, UnenforceableSchemasAreRefusedNamingTheKeywordAndPlace) {
  EXPECT_NE(
      CompileError(R"({"type":"object","properties":{"age":{"type":"integer","not":{"const":2}}}})")
          .find("'#/properties/age': keyword 'not' is not supported"),
      std::string::npos);
  EXPECT_NE(CompileError(R"js({"properties":{"a":{"type":"string","pattern":"(?=a)"}}})js")
                .find("'#/properties/a': 'pattern': pattern at byte 0: lookaround"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"type":"string","pattern":"^a{5}$","maxLength":4})")
                .find("at most 'maxLength'"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"type":"string","pattern":"a","format":"uuid"})")
                .find("'pattern' next to an enforced 'format'"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"type":"integer","minimum":1.2,"maximum":1.8})")
                .find("no integer satisfies"),
            std::string::npos);
  EXPECT_NE(CompileError(R"({"type":"number","minimum":"1"})").find("'minimum' must be a number"),
            std::string::npos);
  // Many distinct large patterns: bounded in all, not only each.
  // Each: ~2,080 states (the last 11 letters) times 64 byte classes (30 separated characters):
  // ~133k transitions, so about 32 fit.
  std::string letters;
  for (char c : std::string("ACEGIKMOQSUWYcegikmoqsuwy02468")) {
    absl::StrAppend(&letters, "|", std::string(1, c));
  }
  Json many = {{"type", "object"}};
  for (int i = 0; i < 40; ++i) {
    many["properties"][absl::StrCat("p", i)] = {
        {"type", "string"},
        {"pattern", absl::StrCat("^((a|b)*a(a|b){10}", std::string(static_cast<size_t>(i + 1), 'z'),
                                 letters, ")$")}};
  }
  absl::StatusOr<JsonGrammar> too_many = CompileJsonSchema(many);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("automaton transitions in all"), std::string::npos)
      << too_many.status();
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
