// `strata parse-output` (commands.h): a model's generated text → reasoning_content, content and
// tool_calls, through the parsers the server's chat endpoints use, for checks from outside.
//
//   strata parse-output --model DIR --thinking true|false --tools true|false
//                       --tool-choice auto|none [--chunk N]
//
// Reads the generated text (control tokens kept, as the detokenizer writes them) on stdin and
// prints one JSON object and a newline:
//   {"reasoning_content": STRING|null, "content": STRING|null,
//    "tool_calls": [{"name": NAME, "arguments": JSON-TEXT}, ...]}
// null where the text has none (as vLLM's parsers answer None); content is also null when it is
// only whitespace beside tool calls (vLLM's kimi_k3 parser). --thinking: the prompt opened the
// reasoning; --tools / --tool-choice: calls are parsed only with tools and tool_choice auto.
//
// A Kimi K3 checkpoint (engine::RepliesInXtml) is read with engine::XtmlOutputStreamParser
// (docs/k3-format.md "Output"); --chunk N feeds it N characters at a time. Any other checkpoint
// is read as Kimi K2: the text is encoded (special-token text becoming its token) and decoded by
// the server's ChoiceDecoder (`<think>` … `</think>` reasoning, Kimi's tool-call tokens);
// --chunk N feeds it N tokens at a time. Whatever the chunking, the result is the same.
// Exit status: 0, 1 when the model cannot be read, 2 for a bad flag (naming the accepted values).
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/xtml_output_parser.h"
#include "server/cli/commands.h"
#include "server/frontend/choice_decoder.h"

namespace strata::cli {
namespace {

using Json = nlohmann::ordered_json;

struct ParsedReply {
  std::string reasoning;
  std::string content;
  std::vector<engine::ToolCall> tool_calls;
};

absl::StatusOr<bool> ReadBool(const Flags& flags, const std::string& name) {
  const std::string value = *flags.Get(name);
  if (value == "true") return true;
  if (value == "false") return false;
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, " must be true or false; got '", value, "'"));
}

// `text` in pieces of `chunk` characters (UTF-8 code points; a stray byte counts as one).
std::vector<std::string_view> Characters(std::string_view text, int64_t chunk) {
  std::vector<std::string_view> pieces;
  size_t start = 0;
  int64_t count = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool continuation = (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
    if (continuation || i == start) continue;
    if (++count == chunk) {
      pieces.push_back(text.substr(start, i - start));
      start = i;
      count = 0;
    }
  }
  if (start < text.size()) pieces.push_back(text.substr(start));
  return pieces;
}

ParsedReply ParseXtml(std::string_view text, bool thinking, bool tools, int64_t chunk) {
  engine::XtmlOutputStreamParser parser({.thinking = thinking, .tools = tools});
  ParsedReply reply;
  auto take = [&reply](engine::XtmlOutput&& out) {
    reply.reasoning += out.reasoning;
    reply.content += out.content;
    for (engine::ToolCall& call : out.tool_calls) reply.tool_calls.push_back(std::move(call));
  };
  if (chunk <= 0) {
    take(parser.Add(text));
  } else {
    for (std::string_view piece : Characters(text, chunk)) take(parser.Add(piece));
  }
  take(parser.Finish());
  return reply;
}

// Kimi K2: the server's decoder over the text's tokens, `chunk` tokens an event (0: one event).
ParsedReply ParseKimiK2(const engine::Tokenizer& tokenizer, std::string_view text, bool thinking,
                        bool tools, int64_t chunk) {
  frontend::ChoiceOptions options;
  options.parse_tool_calls = tools;
  options.detokenizer.skip_special_tokens = !tools;
  options.think_begin_id = tokenizer.SpecialTokenId("<think>").value_or(-1);
  options.think_end_id = tokenizer.SpecialTokenId("</think>").value_or(-1);
  options.reasoning_open = thinking && options.think_begin_id >= 0;
  frontend::ChoiceDecoder decoder(tokenizer, options);
  const std::vector<int32_t> ids =
      tokenizer.Encode(text, {.add_special_tokens = false, .parse_special = true});
  const size_t step = chunk > 0 ? static_cast<size_t>(chunk) : std::max<size_t>(ids.size(), 1);
  ParsedReply reply;
  std::vector<engine::ToolCallDelta> deltas;
  for (size_t start = 0; start < ids.size() || start == 0; start += step) {
    server::StreamEvent event;
    const size_t end = std::min(ids.size(), start + step);
    event.token_ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(start),
                           ids.begin() + static_cast<std::ptrdiff_t>(end));
    event.num_output_tokens = static_cast<int64_t>(end);
    if (end == ids.size()) event.finish = server::FinishReason::kLength;
    frontend::ChoiceDelta delta = decoder.Apply(event);
    reply.reasoning += delta.reasoning;
    reply.content += delta.text;
    for (engine::ToolCallDelta& d : delta.tool_calls) deltas.push_back(std::move(d));
    if (end == ids.size()) break;
  }
  for (const engine::ToolCallDelta& d : deltas) {
    if (d.index < 0) continue;
    if (static_cast<size_t>(d.index) >= reply.tool_calls.size()) {
      reply.tool_calls.resize(static_cast<size_t>(d.index) + 1);
    }
    engine::ToolCall& call = reply.tool_calls[static_cast<size_t>(d.index)];
    if (d.id) call.id = *d.id;
    if (d.name) call.name = *d.name;
    call.arguments += d.arguments;
  }
  return reply;
}

Json ReplyJson(const ParsedReply& reply) {
  Json calls = Json::array();
  for (const engine::ToolCall& call : reply.tool_calls) {
    calls.push_back({{"name", call.name}, {"arguments", call.arguments}});
  }
  const bool no_content =
      reply.content.empty() ||
      (!reply.tool_calls.empty() && absl::StripAsciiWhitespace(reply.content).empty());
  return Json{{"reasoning_content", reply.reasoning.empty() ? Json() : Json(reply.reasoning)},
              {"content", no_content ? Json() : Json(reply.content)},
              {"tool_calls", std::move(calls)}};
}

absl::Status Run(const Flags& flags) {
  ASSIGN_OR_RETURN(const bool thinking, ReadBool(flags, "thinking"));
  ASSIGN_OR_RETURN(const bool tools, ReadBool(flags, "tools"));
  const std::string tool_choice = *flags.Get("tool-choice");
  if (tool_choice != "auto" && tool_choice != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--tool-choice must be auto or none; got '", tool_choice, "'"));
  }
  ASSIGN_OR_RETURN(const int64_t chunk, flags.GetInt("chunk", 0, 1, int64_t{1} << 30));
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> tokenizer =
      engine::Tokenizer::LoadFromDir(*flags.Get("model"));
  if (!tokenizer.ok()) {  // the model, not the command line: exit 1
    return absl::FailedPreconditionError(tokenizer.status().message());
  }
  const std::string text((std::istreambuf_iterator<char>(std::cin)),
                         std::istreambuf_iterator<char>());
  const bool parse_calls = tools && tool_choice == "auto";
  const ParsedReply reply = engine::RepliesInXtml(**tokenizer)
                                ? ParseXtml(text, thinking, parse_calls, chunk)
                                : ParseKimiK2(**tokenizer, text, thinking, parse_calls, chunk);
  std::cout << ReplyJson(reply).dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  std::cout.flush();
  return absl::OkStatus();
}

}  // namespace

const CommandSpec& ParseOutputSpec() {
  static const CommandSpec spec{
      .program = "strata",
      .command = "parse-output",
      .description = "parse generated text (stdin) into reasoning_content, content and tool_calls",
      .flags = {{"model", true, "checkpoint directory with the tokenizer (required)"},
                {"thinking", true, "true | false: the prompt opened the reasoning (required)"},
                {"tools", true, "true | false: the request declared tools (required)"},
                {"tool-choice", true, "auto | none (required)"},
                {"chunk", true,
                 "feed the streaming parser N characters at a time (Kimi K2: N tokens); the "
                 "result equals the whole-text parse"}},
      .required = {"model", "thinking", "tools", "tool-choice"},
      .synopsis =
          "--model DIR --thinking true|false --tools true|false --tool-choice auto|none "
          "[--chunk N] < generated.txt",
      .notes =
          "Prints {\"reasoning_content\", \"content\", \"tool_calls\": [{\"name\", "
          "\"arguments\"}]} as one JSON line; empty fields are null."};
  return spec;
}

int ParseOutputCommand(const std::vector<std::string>& args) {
  return RunCommand(ParseOutputSpec(), args, Run);
}

}  // namespace strata::cli
