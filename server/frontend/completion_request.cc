// ParseCompletionRequest (openai_request.h): prompt as a string, a list of strings, token ids
// or a list of token-id lists; echo; suffix is refused (400), as best_of other than n is
// (ParseGenerationFields).
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "server/frontend/api_error.h"
#include "server/frontend/json_fields.h"
#include "server/frontend/openai_request.h"

namespace strata::frontend {
namespace {

constexpr int kMaxPrompts = 256;  // prompts × n at most, per request

// Every field a completions request may carry: the shared ones and its own.
const std::vector<std::string_view>& CompletionFields() {
  static const std::vector<std::string_view> fields =
      WithGenerationFields({"prompt", "echo", "suffix"});
  return fields;
}

bool IsTokenIdArray(const Json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const Json& x : v) {
    if (!x.is_number_integer()) return false;
  }
  return true;
}

absl::Status ReadIds(const Json& list, const std::string& path, int64_t vocab,
                     std::vector<int32_t>* out) {
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& id = list[i];
    const bool in_range = id.is_number_unsigned()
                              ? id.get<uint64_t>() < static_cast<uint64_t>(vocab)
                              : id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab;
    if (!in_range) {
      return InvalidField(path, absl::StrCat("token id ", id.dump(), " at ", path, "[", i,
                                             "] is outside the vocabulary [0, ", vocab, ")"));
    }
    out->push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return absl::OkStatus();
}

absl::Status ReadPrompts(const Json& body, const RequestLimits& limits,
                         std::vector<PromptInput>* prompts) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return MissingField("prompt");
  const Json& prompt = *it;
  constexpr char kShapes[] =
      "a string, an array of strings, an array of token ids or an array of token-id arrays";
  if (prompt.is_string()) {
    prompts->push_back({prompt.get<std::string>(), {}});
  } else if (IsTokenIdArray(prompt)) {
    PromptInput input;
    RETURN_IF_ERROR(ReadIds(prompt, "prompt", limits.vocab_size, &input.token_ids));
    prompts->push_back(std::move(input));
  } else if (prompt.is_array() && !prompt.empty()) {
    if (prompt.size() > static_cast<size_t>(kMaxPrompts)) {
      return InvalidField("prompt", absl::StrCat("'prompt' has ", prompt.size(),
                                                 " prompts; at most ", kMaxPrompts));
    }
    for (size_t i = 0; i < prompt.size(); ++i) {
      const std::string path = absl::StrCat("prompt[", i, "]");
      if (prompt[i].is_string()) {
        prompts->push_back({prompt[i].get<std::string>(), {}});
      } else if (IsTokenIdArray(prompt[i])) {
        PromptInput input;
        RETURN_IF_ERROR(ReadIds(prompt[i], path, limits.vocab_size, &input.token_ids));
        prompts->push_back(std::move(input));
      } else {
        return InvalidType(path, "a string or a non-empty array of token ids");
      }
    }
  } else if (prompt.is_array()) {
    return InvalidField("prompt", "'prompt' must not be empty");
  } else {
    return InvalidType("prompt", kShapes);
  }
  for (size_t i = 0; i < prompts->size(); ++i) {
    if ((*prompts)[i].text && (*prompts)[i].text->empty()) {
      return InvalidField(prompts->size() == 1 ? "prompt" : absl::StrCat("prompt[", i, "]"),
                          "the prompt must not be empty");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CompletionRequest> ParseCompletionRequest(const Json& body,
                                                         const RequestLimits& limits) {
  CompletionRequest req;
  RETURN_IF_ERROR(ReadPrompts(body, limits, &req.prompts));
  ASSIGN_OR_RETURN(req.gen, ParseGenerationFields(body, limits, /*logprobs_style_chat=*/false));
  FieldReader r(body);
  ASSIGN_OR_RETURN(auto echo, r.Bool("echo"));
  req.echo = echo.value_or(false);
  if (req.gen.max_tokens == 0 && !req.echo) {
    return InvalidField("max_tokens",
                        "'max_tokens' must be at least 1 (0 only with 'echo': true, which scores "
                        "the prompt alone)");
  }
  ASSIGN_OR_RETURN(auto suffix, r.String("suffix"));
  if (suffix && !suffix->empty()) {
    return InvalidField("suffix", "'suffix' is not supported", "unsupported_value");
  }
  if (static_cast<int64_t>(req.prompts.size()) * req.gen.n > kMaxPrompts) {
    return InvalidField("n", absl::StrCat(req.prompts.size(), " prompts x n = ", req.gen.n,
                                          " exceeds ", kMaxPrompts, " choices per request"));
  }
  NoteUnknownFields(body, CompletionFields());
  return req;
}

}  // namespace strata::frontend
