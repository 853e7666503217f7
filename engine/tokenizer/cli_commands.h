// The `strata tokenize | detokenize | chat-template` subcommands. `args` is everything after the
// subcommand name; output goes to stdout, errors to stderr. Return 0 on success, 1 on a
// runtime error (unreadable model, bad ids, template error), 2 on a usage error.
//
//   strata tokenize --model DIR --text-file F [--add-special-tokens] [--parse-special]
//       Prints the ids as one JSON array and a newline. --add-special-tokens adds the BOS/EOS
//       the config asks for and recognises special-token text (like vLLM's /tokenize);
//       --parse-special only recognises special-token text. F may be "-" for stdin.
//   strata detokenize --model DIR --ids 1,2,3 [--skip-special-tokens]
//       Prints the text exactly (no newline added); ill-formed UTF-8 becomes U+FFFD.
//   strata chat-template --model DIR --messages-file F.json [--add-generation-prompt]
//                        [--tools-file T.json] [--kwargs-file K.json]
//       Prints the rendered prompt exactly (no newline added). F holds a messages array (or an
//       object with "messages" and optionally "tools"); K holds chat_template_kwargs.
#pragma once

#include <string>
#include <vector>

namespace strata::engine {

int TokenizeCommand(const std::vector<std::string>& args);
int DetokenizeCommand(const std::vector<std::string>& args);
int ChatTemplateCommand(const std::vector<std::string>& args);

}  // namespace strata::engine
