#include "core/json_limits.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

std::string Nested(int levels, std::string_view inner = "") {
  return std::string(static_cast<size_t>(levels), '[') + std::string(inner) +
         std::string(static_cast<size_t>(levels), ']');
}

// {"k0": 0, "k1": 1, ...}
std::string WideObject(int keys) {
  std::string text = "{";
  for (int i = 0; i < keys; ++i) {
    if (i > 0) text += ",";
    text += "\"k" + std::to_string(i) + "\":" + std::to_string(i);
  }
  return text + "}";
}

TEST(JsonLimitsTest, ParsesAsNlohmannDoes) {
  const std::string texts[] = {
      R"({"b": 1, "a": [true, null, -2, 18446744073709551615, 1.5e3, "x\u00e9"], "c": {}})",
      "[]",
      "\"s\"",
      "  7 ",
      R"({"a": {"b": {"c": [[], [{}]]}}})",
      WideObject(100),
  };
  for (const std::string& text : texts) {
    absl::StatusOr<Json> parsed = ParseBoundedJson(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_EQ(*parsed, Json::parse(text)) << text;
    EXPECT_EQ(parsed->dump(), Json::parse(text).dump()) << text;  // key order too
    absl::StatusOr<nlohmann::json> sorted = ParseBoundedJsonSorted(text);
    ASSERT_TRUE(sorted.ok()) << text;
    EXPECT_EQ(*sorted, nlohmann::json::parse(text)) << text;
  }
}

TEST(JsonLimitsTest, DuplicateKeysKeepTheFirstPositionAndTheLastValue) {
  // Small objects (scanned) and large ones (hashed) alike.
  std::string large = R"({"dup": 1, )";
  for (int i = 0; i < 40; ++i)
    large += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ", ";
  large += R"("dup": [2], "k3": "three", "dup": {"v": 3}})";
  for (const std::string& text :
       {std::string(R"({"a": 1, "b": 2, "a": {"x": [3]}, "b": 4})"), large}) {
    absl::StatusOr<Json> parsed = ParseBoundedJson(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->dump(), Json::parse(text).dump());
  }
  absl::StatusOr<Json> parsed = ParseBoundedJson(large);
  EXPECT_EQ(parsed->size(), 41u);
  EXPECT_EQ(parsed->begin().key(), "dup");
  EXPECT_EQ((*parsed)["dup"], Json::parse(R"({"v": 3})"));
  EXPECT_EQ((*parsed)["k3"], "three");
}

TEST(JsonLimitsTest, DepthIsBoundedWhereverTheValueIs) {
  EXPECT_TRUE(ParseBoundedJson(Nested(kMaxJsonDepth, "1")).ok());
  const std::string cases[] = {
      Nested(kMaxJsonDepth + 1),
      Nested(100000),
      std::string(100000, '['),  // never closed: the limit is met before the syntax error
      R"({"model": )" + Nested(60000) + "}",
      R"({"messages": [{"role": "user", "content": )" + Nested(100000) + "}]}",
  };
  for (const std::string& text : cases) {
    absl::StatusOr<Json> parsed = ParseBoundedJson(text);
    ASSERT_FALSE(parsed.ok());
    EXPECT_TRUE(IsJsonLimitError(parsed.status()));
    EXPECT_THAT(parsed.status().message(),
                HasSubstr("JSON nesting deeper than 256 levels at byte"));
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status()));
  }
  absl::StatusOr<Json> model = ParseBoundedJson(cases[3]);
  EXPECT_THAT(model.status().message(),
              HasSubstr("at byte 265 (at 'model[0][0][0][0][0][0][0]…')"));
  EXPECT_EQ(JsonLimitPath(model.status()), "model[0][0][0][0][0][0][0]…");
  absl::StatusOr<Json> content = ParseBoundedJson(cases[4]);
  EXPECT_THAT(JsonLimitPath(content.status()), ::testing::StartsWith("messages[0].content[0]"));

  JsonLimits shallow;
  shallow.max_depth = 2;
  EXPECT_TRUE(ParseBoundedJson(R"({"a": [1]})", shallow).ok());
  absl::StatusOr<Json> deep = ParseBoundedJson(R"({"a": [1, {"b": 2}]})", shallow);
  EXPECT_EQ(std::string(deep.status().message()),
            "JSON nesting deeper than 2 levels at byte 10 (at 'a[1]') (the limit)");
}

TEST(JsonLimitsTest, ValuesAndObjectMembersAreBounded) {
  JsonLimits limits;
  limits.max_values = 5;
  EXPECT_TRUE(ParseBoundedJson("[1, 2, [3]]", limits).ok());  // 5 values
  absl::StatusOr<Json> many = ParseBoundedJson(R"({"a": [1, 2, 3, 4, 5]})", limits);
  ASSERT_FALSE(many.ok());
  EXPECT_TRUE(IsJsonLimitError(many.status()));
  EXPECT_EQ(std::string(many.status().message()),
            "JSON text with more than 5 values at byte 17 (at 'a[3]') (the limit)");

  limits = JsonLimits{};
  limits.max_object_members = 3;
  EXPECT_TRUE(
      ParseBoundedJson(R"({"x": {"a": 1, "b": 2, "c": 3}, "y": [1, 2, 3, 4, 5]})", limits).ok());
  absl::StatusOr<Json> wide =
      ParseBoundedJson(R"({"x": {"a": 1, "b": 2, "c": 3, "d": 4}})", limits);
  ASSERT_FALSE(wide.ok());
  EXPECT_EQ(std::string(wide.status().message()),
            "JSON object with more than 3 members at byte 33 (at 'x') (the limit)");
  EXPECT_EQ(JsonLimitPath(wide.status()), "x");

  // The defaults: a logit_bias over a 262,144-token vocabulary is one object.
  const std::string full_vocabulary = WideObject(static_cast<int>(kMaxJsonObjectMembers));
  EXPECT_TRUE(ParseBoundedJson(full_vocabulary).ok());
  absl::StatusOr<Json> over =
      ParseBoundedJson(WideObject(static_cast<int>(kMaxJsonObjectMembers) + 1));
  EXPECT_THAT(over.status().message(), HasSubstr("JSON object with more than 262144 members"));
}

TEST(JsonLimitsTest, SyntaxErrorsAreNotLimitErrors) {
  const std::string texts[] = {
      "", "{", R"({"a": })", "{} x", "[1,]", R"({"n": 1e999})", "\"\xff\"", "// c\n{}"};
  for (const std::string& text : texts) {
    absl::StatusOr<Json> parsed = ParseBoundedJson(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status()));
    EXPECT_FALSE(IsJsonLimitError(parsed.status())) << text;
    EXPECT_EQ(JsonLimitPath(parsed.status()), "");
    EXPECT_EQ(parsed.status().message().find("[json.exception"), std::string::npos);
  }
  EXPECT_THAT(ParseBoundedJson(R"({"n": 1e999})").status().message(),
              HasSubstr("number overflow parsing '1e999'"));
  EXPECT_THAT(ParseBoundedJson("{").status().message(), HasSubstr("parse error at line 1"));
  // The bytes nlohmann quotes ("last read: ...") stop inside a character here: the message is
  // still UTF-8 (it goes into a JSON error body).
  const std::string message(ParseBoundedJson("[{\xd6\x8d]").status().message());
  EXPECT_THAT(message, HasSubstr("last read: '[{\xef\xbf\xbd'"));
  EXPECT_NO_THROW((void)Json(message).dump());
}

TEST(JsonLimitsTest, LongKeysAreShortenedInThePath) {
  JsonLimits limits;
  limits.max_depth = 1;
  const std::string key(1000, 'k');
  absl::StatusOr<Json> parsed = ParseBoundedJson("{\"" + key + "\": [1]}", limits);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(JsonLimitPath(parsed.status()), std::string(48, 'k') + "…");
}

TEST(JsonLimitsTest, AppendNewMemberKeepsOrder) {
  Json object;
  for (int i = 0; i < 1000; ++i) AppendNewMember(&object, std::to_string(999 - i), i);
  ASSERT_TRUE(object.is_object());
  EXPECT_EQ(object.size(), 1000u);
  EXPECT_EQ(object.begin().key(), "999");
  EXPECT_EQ(object["0"], 999);
}

}  // namespace
}  // namespace strata
