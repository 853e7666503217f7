// Interpreter behaviour beyond the peer-compared templates (expected values follow Python
// Jinja2 where @huggingface/jinja has no such feature).
#include <gtest/gtest.h>

#include <random>

#include "engine/tokenizer/jinja/lexer.h"
#include "engine/tokenizer/jinja/template.h"

namespace strata::engine::jinja {
namespace {

std::string Render(std::string_view source,
                   const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  auto t = Template::Parse(source);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return "";
  auto out = (*t)->Render(context);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "";
}

TEST(JinjaLexerTest, TrimAndLstripBlocksLikeTransformers) {
  EXPECT_EQ(Preprocess("a\n  {% if x %}\nb\n{% endif %}\n"), "a\n{% if x %}b\n{% endif %}");
  EXPECT_EQ(Render("  {{ 'kept' }}\n{% if true %}\n  x\n{% endif %}"), "  kept\n  x\n");
  EXPECT_EQ(Render("a   {{- 'b' -}}   c"), "abc");
  EXPECT_EQ(Render("x {#- note -#} y"), "xy");
  EXPECT_EQ(Render("a {% generation %}b{% endgeneration %} c"), "a b c");
}

TEST(JinjaTest, PythonStringMethodsAndSlicing) {
  EXPECT_EQ(
      Render("{{ '..x..'.strip('.') }}|{{ ' a  b '.split() | join(',') }}|"
             "{{ 'a,b,c'.rsplit(',', 1) | join(';') }}|{{ 'héllo'[::-1] }}|{{ 'abc'.find('c') }}"),
      "x|a,b|a,b;c|olléh|2");
  EXPECT_EQ(Render("{{ 'hELLO wORLD'.title() }} {{ 'hELLO' | capitalize }} {{ 'x' * 3 }}"),
            "Hello World Hello xxx");
}

TEST(JinjaTest, PythonArithmetic) {
  EXPECT_EQ(Render("{{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ 0.1 + 0.2 }}"),
            "-4 2 3.0 0.30000000000000004");
}

TEST(JinjaTest, TestsWithArguments) {
  EXPECT_EQ(Render("{{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 'a' is in ['a'] }} "
                   "{{ 1.5 is float }} {{ none is sameas none }}"),
            "true false true true true");
}

TEST(JinjaTest, NamespacesCarryValuesOutOfLoopsButPlainSetDoesNot) {
  EXPECT_EQ(Render("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for i in range(3) %}"
                   "{% set n = n + 1 %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ n }} {{ ns.n }}"),
            "0 3");
}

TEST(JinjaTest, SyntaxErrorsNameTheLine) {
  auto t = Template::Parse("ok\nok\n{{ 1 + }}");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("line 3"), absl::string_view::npos) << t.status();
  EXPECT_FALSE(Template::Parse("{% unknown %}").ok());
  EXPECT_FALSE(Template::Parse("{{ 'unterminated }}").ok());
  EXPECT_FALSE(Template::Parse("{% for x in y %}no end").ok());
}

TEST(JinjaTest, CallBlockCallerSeesCallSiteScope) {
  EXPECT_EQ(Render("{% macro m() %}[{{ caller(1) }}]{% endmacro %}{% set who = 'site' %}"
                   "{% call(n) m() %}{{ who }}{{ n }}{% endcall %}"),
            "[site1]");
}

// Random token soup must give a status or a rendering, never a crash or a hang.
// tojson is Python's json.dumps as transformers calls it: objects in insertion order (the order
// the request JSON gave, kept by ordered_json and the interpreter's objects), sorted only with
// sort_keys=true (by code point, nested objects too). Expected strings follow json.dumps by hand.
TEST(JinjaTest, TojsonKeepsInsertionOrderAndSortsOnlyWithSortKeys) {
  const nlohmann::ordered_json context = {
      {"tool", nlohmann::ordered_json::parse(
                   R"({"type": "function", "function": {"name": "get_weather",
                       "description": "Weather.", "parameters": {"type": "object",
                       "properties": {"city": {"type": "string"}}, "required": ["city"]}}})")}};
  EXPECT_EQ(Render("{{ tool | tojson }}", context),
            R"({"type": "function", "function": {"name": "get_weather", "description": )"
            R"("Weather.", "parameters": {"type": "object", "properties": {"city": {"type": )"
            R"("string"}}, "required": ["city"]}}})");
  EXPECT_EQ(Render("{{ tool | tojson(sort_keys=true) }}", context),
            R"({"function": {"description": "Weather.", "name": "get_weather", "parameters": )"
            R"({"properties": {"city": {"type": "string"}}, "required": ["city"], "type": )"
            R"("object"}}, "type": "function"})");
  EXPECT_EQ(Render("{{ tool | tojson(sort_keys=false, separators=(',', ':')) }}", context),
            R"({"type":"function","function":{"name":"get_weather","description":"Weather.",)"
            R"("parameters":{"type":"object","properties":{"city":{"type":"string"}},)"
            R"("required":["city"]}}})");
  // Objects the template builds keep their order too; a key set again stays where it was.
  EXPECT_EQ(Render("{% set d = {'b': 1, 'a': 2, 'Z': 3} %}{{ d | tojson }} "
                   "{{ d | tojson(sort_keys=true) }}"),
            R"({"b": 1, "a": 2, "Z": 3} {"Z": 3, "a": 2, "b": 1})");
  EXPECT_EQ(Render("{% set ns = namespace(z=1, a=2) %}{% set ns.z = 3 %}{{ ns | tojson }}"),
            R"({"z": 3, "a": 2})");
}

TEST(JinjaTest, RandomTemplatesNeverCrash) {
  static constexpr const char* kPieces[] = {
      "{{",       "}}",       "{%",    "%}",       "{#",
      "#}",       "-",        "for",   "in",       "if",
      "else",     "elif",     "endif", "endfor",   "set",
      "macro",    "endmacro", "call",  "endcall",  "x",
      "loop",     ".",        "(",     ")",        "[",
      "]",        "{",        "}",     ",",        ":",
      "|",        "'s'",      "\"",    "1",        "0",
      "/",        "//",       "%",     "*",        "**",
      "~",        "+",        "not",   "and",      "or",
      "is",       "defined",  "none",  "range(3)", "namespace(a=1)",
      "tojson",   " ",        "\n",    "caller()", "break",
      "x.y",      "x[0]",     "=",     "==",       "raise_exception('e')",
      "recurse()"};
  std::mt19937 rng(5);
  std::uniform_int_distribution<size_t> pick(0, std::size(kPieces) - 1);
  nlohmann::ordered_json context = {{"x", {{"y", {1, 2}}}}};
  int rendered = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string source = trial % 3 == 0 ? "{% macro recurse() %}{{ recurse() }}{% endmacro %}" : "";
    const int n = 1 + trial % 24;
    for (int i = 0; i < n; ++i) source += kPieces[pick(rng)];
    auto t = Template::Parse(source);
    if (!t.ok()) continue;
    if ((*t)->Render(context).ok()) ++rendered;
  }
  EXPECT_GT(rendered, 100);
}

}  // namespace
}  // namespace strata::engine::jinja
