#include "engine/tokenizer/cli_commands.h"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace strata::engine {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kOk = 0;
constexpr int kRuntimeError = 1;
constexpr int kUsageError = 2;

// --name value / --name=value options and --flag switches.
struct ParsedArgs {
  std::map<std::string, std::string> values;
  std::set<std::string> flags;
};

bool Parse(const std::vector<std::string>& args, const std::set<std::string>& value_options,
           const std::set<std::string>& flag_options, const char* usage, ParsedArgs* out) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (flag_options.count(name) && !inline_value) {
      out->flags.insert(name);
    } else if (value_options.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) {
          std::cerr << name << " needs a value\n" << usage;
          return false;
        }
        value = args[++i];
      }
      out->values[name] = value;
    } else {
      std::cerr << "unknown argument '" << args[i] << "'\n" << usage;
      return false;
    }
  }
  return true;
}

bool Require(const ParsedArgs& parsed, std::initializer_list<const char*> names,
             const char* usage) {
  for (const char* n : names) {
    if (!parsed.values.count(n)) {
      std::cerr << "missing " << n << "\n" << usage;
      return false;
    }
  }
  return true;
}

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

int Fail(const absl::Status& status) {
  std::cerr << "error: " << status.message() << "\n";
  return kRuntimeError;
}

void WriteExact(const std::string& text) {
  std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::cout.flush();
}

constexpr char kTokenizeUsage[] =
    "usage: strata tokenize --model DIR --text-file F [--add-special-tokens] [--parse-special]\n";
constexpr char kDetokenizeUsage[] =
    "usage: strata detokenize --model DIR --ids 1,2,3 [--skip-special-tokens]\n";
constexpr char kChatTemplateUsage[] =
    "usage: strata chat-template --model DIR --messages-file F.json [--add-generation-prompt]\n"
    "                            [--tools-file T.json] [--kwargs-file K.json]\n";

}  // namespace

int TokenizeCommand(const std::vector<std::string>& args) {
  ParsedArgs p;
  if (!Parse(args, {"--model", "--text-file"}, {"--add-special-tokens", "--parse-special"},
             kTokenizeUsage, &p) ||
      !Require(p, {"--model", "--text-file"}, kTokenizeUsage)) {
    return kUsageError;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::LoadFromDir(p.values["--model"]);
  if (!tok.ok()) return Fail(tok.status());
  absl::StatusOr<std::string> text = ReadInput(p.values["--text-file"]);
  if (!text.ok()) return Fail(text.status());
  const bool add = p.flags.count("--add-special-tokens") > 0;
  EncodeOptions options{.add_special_tokens = add,
                        .parse_special = add || p.flags.count("--parse-special") > 0};
  WriteExact(Json((*tok)->Encode(*text, options)).dump() + "\n");
  return kOk;
}

int DetokenizeCommand(const std::vector<std::string>& args) {
  ParsedArgs p;
  if (!Parse(args, {"--model", "--ids"}, {"--skip-special-tokens"}, kDetokenizeUsage, &p) ||
      !Require(p, {"--model", "--ids"}, kDetokenizeUsage)) {
    return kUsageError;
  }
  std::vector<int32_t> ids;
  const std::string& list = p.values["--ids"];
  for (size_t start = 0; start < list.size();) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    int32_t id = 0;
    auto [ptr, ec] = std::from_chars(list.data() + start, list.data() + end, id);
    if (ec != std::errc() || ptr != list.data() + end) {
      std::cerr << "--ids: '" << list.substr(start, end - start) << "' is not a token id\n"
                << kDetokenizeUsage;
      return kUsageError;
    }
    ids.push_back(id);
    start = end + 1;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::LoadFromDir(p.values["--model"]);
  if (!tok.ok()) return Fail(tok.status());
  absl::StatusOr<std::string> text =
      (*tok)->Decode(ids, p.flags.count("--skip-special-tokens") > 0);
  if (!text.ok()) return Fail(text.status());
  WriteExact(*text);
  return kOk;
}

int ChatTemplateCommand(const std::vector<std::string>& args) {
  ParsedArgs p;
  if (!Parse(args, {"--model", "--messages-file", "--tools-file", "--kwargs-file"},
             {"--add-generation-prompt"}, kChatTemplateUsage, &p) ||
      !Require(p, {"--model", "--messages-file"}, kChatTemplateUsage)) {
    return kUsageError;
  }
  ChatTemplateInputs inputs;
  absl::StatusOr<Json> messages = ReadJson(p.values["--messages-file"]);
  if (!messages.ok()) return Fail(messages.status());
  if (messages->is_object()) {
    if (messages->contains("tools")) inputs.tools = (*messages)["tools"];
    inputs.messages = messages->value("messages", Json::array());
  } else {
    inputs.messages = std::move(*messages);
  }
  for (auto [option, target] :
       {std::pair{"--tools-file", &inputs.tools}, std::pair{"--kwargs-file", &inputs.kwargs}}) {
    if (!p.values.count(option)) continue;
    absl::StatusOr<Json> json = ReadJson(p.values[option]);
    if (!json.ok()) return Fail(json.status());
    *target = std::move(*json);
  }
  inputs.add_generation_prompt = p.flags.count("--add-generation-prompt") > 0;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::LoadFromDir(p.values["--model"]);
  if (!tok.ok()) return Fail(tok.status());
  const bool with_tools = inputs.tools.is_array() && !inputs.tools.empty();
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::ForTokenizer(**tok, with_tools);
  if (!tmpl.ok()) return Fail(tmpl.status());
  absl::StatusOr<std::string> prompt = tmpl->Render(inputs);
  if (!prompt.ok()) return Fail(prompt.status());
  WriteExact(*prompt);
  return kOk;
}

}  // namespace strata::engine
