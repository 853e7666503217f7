#include "engine/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace strata::engine {
namespace {

using Json = nlohmann::ordered_json;

std::string Render(std::string_view source, const ChatTemplateInputs& inputs,
                   ChatTemplateOptions options = {}) {
  auto t = ChatTemplate::Create(source, {}, options);
  EXPECT_TRUE(t.ok()) << t.status();
  auto out = t->Render(inputs);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::string();
}

TEST(ChatTemplateTest, BuiltinKimiTemplateRendersApiShape) {
  ChatTemplateInputs in;
  in.messages = Json::parse(R"([{"role": "user", "content": "Hi"}])");
  in.tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])");
  in.add_generation_prompt = true;
  EXPECT_EQ(Render(BuiltinKimiChatTemplate(), in),
            "<|im_system|>tool_declare<|im_middle|>"
            R"([{"type":"function","function":{"name":"f","parameters":{}}}])"
            "<|im_end|><|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by "
            "Moonshot AI.<|im_end|><|im_user|>user<|im_middle|>Hi<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>");
}

TEST(ChatTemplateTest, BuiltinTemplateEqualsThePeerTestedCopy) {
  // tests/js/tokenizer/templates/strata_builtin_kimi.jinja is what the peer test renders.
  std::ifstream in(std::string(STRATA_SOURCE_DIR) +
                   "/tests/js/tokenizer/templates/strata_builtin_kimi.jinja");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), std::string(BuiltinKimiChatTemplate()));
}

TEST(ChatTemplateTest, ToolCallArgumentsAreParsedLikeVllm) {
  ChatTemplateInputs in;
  in.messages = Json::parse(R"([{"role": "assistant", "content": null, "tool_calls": [
      {"id": "functions.f:0", "type": "function",
       "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [true]}"}}]}])");
  const char* source =
      "{{ messages[0].tool_calls[0].function.arguments is mapping }} "
      "{{ messages[0].tool_calls[0].function.arguments | tojson }}";
  EXPECT_EQ(Render(source, in), R"(true {"b": 1, "a": [true]})");
  EXPECT_EQ(Render(source, in, {.parse_tool_arguments = false}),
            R"(false "{\"b\": 1, \"a\": [true]}")");
}

TEST(ChatTemplateTest, KimiSortsToolKeysDeeply) {
  ChatTemplateInputs in;
  in.tools = Json::parse(
      R"([{"type": "function", "function": {"parameters": {"z": 1, "a": 2}, "name": "f"}}])");
  EXPECT_EQ(Render("{{ tools | tojson(separators=(',', ':')) }}", in, {.sort_tool_keys = true}),
            R"([{"function":{"name":"f","parameters":{"a":2,"z":1}},"type":"function"}])");
}

TEST(ChatTemplateTest, KwargsBecomeVariablesButCannotReplaceMessages) {
  ChatTemplateInputs in;
  in.messages = Json::parse(R"([{"role": "user", "content": "x"}])");
  in.kwargs = Json::parse(R"({"thinking": true, "messages": []})");
  EXPECT_EQ(Render("{{ thinking }} {{ messages | length }} {{ tools is none }}", in),
            "true 1 true");
}

TEST(ChatTemplateTest, ErrorsAreStatusesWithTheTemplatesMessage) {
  ChatTemplateInputs in;
  auto raising = ChatTemplate::Create("{{ raise_exception('Roles must alternate') }}", {});
  ASSERT_TRUE(raising.ok());
  absl::Status s = raising->Render(in).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "Roles must alternate");

  auto bad_syntax = ChatTemplate::Create("line one\n{% if x %}never closed", {});
  ASSERT_FALSE(bad_syntax.ok());
  EXPECT_NE(bad_syntax.status().message().find("line 2"), absl::string_view::npos)
      << bad_syntax.status();

  auto runtime = ChatTemplate::Create("{{ 1 / 0 }}", {});
  ASSERT_TRUE(runtime.ok());
  EXPECT_NE(runtime->Render(in).status().message().find("division by zero"),
            absl::string_view::npos);

  in.messages = Json::parse(R"([{"content": "no role"}])");
  EXPECT_NE(runtime->Render(in).status().message().find("messages[0]"), absl::string_view::npos);
}

TEST(ChatTemplateTest, HostileTemplatesFailInsteadOfCrashing) {
  ChatTemplateInputs in;
  auto recursive =
      ChatTemplate::Create("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {});
  ASSERT_TRUE(recursive.ok());
  EXPECT_NE(recursive->Render(in).status().message().find("nested deeper"),
            absl::string_view::npos);
  EXPECT_FALSE(ChatTemplate::Create(
                   "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", {})
                   .ok());
  auto huge = ChatTemplate::Create("{{ range(100000000) | length }}", {});
  ASSERT_TRUE(huge.ok());
  EXPECT_FALSE(huge->Render(in).ok());
}

}  // namespace
}  // namespace strata::engine
