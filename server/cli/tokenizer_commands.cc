// `strata tokenize | detokenize | chat-template` (commands.h): the checkpoint's tokenizer and chat
// template from the command line. Output goes to stdout, errors to stderr. Exit status 0 on
// success, 1 on a runtime error (unreadable model or file, bad ids, template error), 2 on a usage
// error.
//
//   strata tokenize --model DIR --text-file F [--add-special-tokens] [--parse-special]
//       Prints the ids as one JSON array and a newline. --add-special-tokens adds the BOS/EOS
//       the config asks for and recognises special-token text (like vLLM's /tokenize);
//       --parse-special only recognises special-token text. F may be "-" for stdin.
//   strata detokenize --model DIR --ids 1,2,3 [--skip-special-tokens]
//       Prints the text exactly (no newline added); ill-formed UTF-8 becomes U+FFFD.
//   strata chat-template --model DIR --messages-file F.json [--add-generation-prompt]
//                        [--tools-file T.json] [--kwargs-file K.json] [--token-ids]
//       Prints the rendered prompt exactly (no newline added), in the checkpoint's format: its
//       Jinja template, or Kimi K3's XTML (docs/k3-format.md). F holds a messages array (or an
//       object with "messages" and optionally "tools"); K holds chat_template_kwargs (for K3
//       also tool_choice and response_format). --token-ids prints the prompt's ids instead, as
//       one JSON array and a newline, encoded as the server encodes it (K3: segment by segment).
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/cli/commands.h"

namespace strata::cli {
namespace {

using Json = nlohmann::ordered_json;
using engine::Tokenizer;

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  std::stringstream buffer;
  if (path == "-") {
    buffer << std::cin.rdbuf();
    return buffer.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot open " + path);
  buffer << in.rdbuf();
  return buffer.str();
}

absl::StatusOr<Json> ReadJson(const std::string& path) {
  absl::StatusOr<std::string> text = ReadInput(path);
  if (!text.ok()) return text.status();
  Json json = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError(path + " is not valid JSON");
  return json;
}

// A runtime error (whatever its code: a malformed file is not a malformed command line).
int Fail(const CommandSpec& command, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", command.Name().c_str(), std::string(status.message()).c_str());
  return 1;
}

void WriteExact(const std::string& text) {
  std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::cout.flush();
}

// "1,2,3" into ids; InvalidArgument naming the entry that is not an id.
absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& list) {
  std::vector<int32_t> ids;
  for (size_t start = 0; start < list.size();) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    int32_t id = 0;
    auto [ptr, ec] = std::from_chars(list.data() + start, list.data() + end, id);
    if (ec != std::errc() || ptr != list.data() + end) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ids: '", list.substr(start, end - start), "' is not a token id"));
    }
    ids.push_back(id);
    start = end + 1;
  }
  return ids;
}

const FlagSpec kModelFlag = {"model", true, "checkpoint directory with the tokenizer (required)"};

}  // namespace

const CommandSpec& TokenizeSpec() {
  static const CommandSpec spec{
      .program = "strata",
      .command = "tokenize",
      .description = "print the token ids of --text-file as one JSON array",
      .flags = {kModelFlag,
                {"text-file", true, "the text to encode, read as bytes; - for stdin (required)"},
                {"add-special-tokens", false,
                 "add the BOS/EOS the config asks for and recognise special-token text (as "
                 "vLLM's /tokenize)"},
                {"parse-special", false, "recognise special-token text only"}},
      .required = {"model", "text-file"},
      .synopsis = "--model DIR --text-file F [--add-special-tokens] [--parse-special]"};
  return spec;
}

int TokenizeCommand(const std::vector<std::string>& args) {
  const CommandSpec& command = TokenizeSpec();
  CommandLine line = ReadCommandLine(command, args);
  if (line.exit_code) return *line.exit_code;
  const Flags& flags = line.flags;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::LoadFromDir(*flags.Get("model"));
  if (!tok.ok()) return Fail(command, tok.status());
  absl::StatusOr<std::string> text = ReadInput(*flags.Get("text-file"));
  if (!text.ok()) return Fail(command, text.status());
  const bool add = flags.Has("add-special-tokens");
  engine::EncodeOptions options{.add_special_tokens = add,
                                .parse_special = add || flags.Has("parse-special")};
  WriteExact(Json((*tok)->Encode(*text, options)).dump() + "\n");
  return 0;
}

const CommandSpec& DetokenizeSpec() {
  static const CommandSpec spec{
      .program = "strata",
      .command = "detokenize",
      .description = "print the text of --ids",
      .flags = {kModelFlag,
                {"ids", true, "token ids, comma separated (required)"},
                {"skip-special-tokens", false, "leave special tokens out of the text"}},
      .required = {"model", "ids"},
      .synopsis = "--model DIR --ids 1,2,3 [--skip-special-tokens]"};
  return spec;
}

int DetokenizeCommand(const std::vector<std::string>& args) {
  const CommandSpec& command = DetokenizeSpec();
  CommandLine line = ReadCommandLine(command, args);
  if (line.exit_code) return *line.exit_code;
  const Flags& flags = line.flags;
  absl::StatusOr<std::vector<int32_t>> ids = ParseIds(*flags.Get("ids"));
  if (!ids.ok()) return UsageError(command, ids.status());
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::LoadFromDir(*flags.Get("model"));
  if (!tok.ok()) return Fail(command, tok.status());
  absl::StatusOr<std::string> text = (*tok)->Decode(*ids, flags.Has("skip-special-tokens"));
  if (!text.ok()) return Fail(command, text.status());
  WriteExact(*text);
  return 0;
}

const CommandSpec& ChatTemplateSpec() {
  static const CommandSpec spec{
      .program = "strata",
      .command = "chat-template",
      .description =
          "render --messages-file with the checkpoint's chat template (Kimi K3: its XTML "
          "format)",
      .flags = {kModelFlag,
                {"messages-file", true,
                 "JSON: a messages array, or an object with \"messages\" and optionally "
                 "\"tools\" (required)"},
                {"tools-file", true, "JSON array of tools"},
                {"kwargs-file", true, "JSON object of chat_template_kwargs"},
                {"add-generation-prompt", false, "end with the assistant turn's opening"},
                {"token-ids", false,
                 "print the prompt's token ids (one JSON array) instead of its text"}},
      .required = {"model", "messages-file"},
      .synopsis =
          "--model DIR --messages-file F.json [--add-generation-prompt] "
          "[--tools-file T.json] [--kwargs-file K.json] [--token-ids]"};
  return spec;
}

int ChatTemplateCommand(const std::vector<std::string>& args) {
  const CommandSpec& command = ChatTemplateSpec();
  CommandLine line = ReadCommandLine(command, args);
  if (line.exit_code) return *line.exit_code;
  const Flags& flags = line.flags;
  engine::ChatTemplateInputs inputs;
  absl::StatusOr<Json> messages = ReadJson(*flags.Get("messages-file"));
  if (!messages.ok()) return Fail(command, messages.status());
  if (messages->is_object()) {
    if (messages->contains("tools")) inputs.tools = (*messages)["tools"];
    inputs.messages = messages->value("messages", Json::array());
  } else {
    inputs.messages = std::move(*messages);
  }
  for (auto [flag, target] :
       {std::pair{"tools-file", &inputs.tools}, std::pair{"kwargs-file", &inputs.kwargs}}) {
    const std::optional<std::string> path = flags.Get(flag);
    if (!path) continue;
    absl::StatusOr<Json> json = ReadJson(*path);
    if (!json.ok()) return Fail(command, json.status());
    *target = std::move(*json);
  }
  inputs.add_generation_prompt = flags.Has("add-generation-prompt");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::LoadFromDir(*flags.Get("model"));
  if (!tok.ok()) return Fail(command, tok.status());
  const bool with_tools = inputs.tools.is_array() && !inputs.tools.empty();
  absl::StatusOr<engine::ChatTemplate> tmpl = engine::ChatTemplate::ForTokenizer(**tok, with_tools);
  if (!tmpl.ok()) return Fail(command, tmpl.status());
  absl::StatusOr<engine::RenderedPrompt> prompt = tmpl->RenderPrompt(inputs);
  if (!prompt.ok()) return Fail(command, prompt.status());
  if (flags.Has("token-ids")) {
    WriteExact(Json(engine::EncodePrompt(**tok, *prompt)).dump() + "\n");
  } else {
    WriteExact(prompt->text);
  }
  return 0;
}

}  // namespace strata::cli
