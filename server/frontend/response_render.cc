#include "server/frontend/response_render.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace strata::frontend {
namespace {

// JSON has no infinities; vLLM reports -inf log-probabilities as -9999.0.
double FiniteLogprob(float logprob) {
  return std::isfinite(logprob) ? static_cast<double>(logprob) : -9999.0;
}

Json BaseObject(const ResponseMeta& meta, std::string_view object) {
  Json out = Json::object();
  out["id"] = meta.id;
  out["object"] = object;
  out["created"] = meta.created;
  out["model"] = meta.model;
  return out;
}

}  // namespace

Json UsageJson(const Usage& usage) {
  Json out = Json::object();
  out["prompt_tokens"] = usage.prompt_tokens;
  out["completion_tokens"] = usage.completion_tokens;
  out["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  out["prompt_tokens_details"] = Json{{"cached_tokens", usage.cached_tokens}};
  return out;
}

Json PromptLogprobsJson(const engine::Tokenizer& tokenizer,
                        const std::vector<engine::TokenScore>& scores, int n) {
  Json out = Json::array({nullptr});  // the first prompt token: no context scores it
  for (const engine::TokenScore& score : scores) {
    Json entry = Json::object();
    auto add = [&](int32_t id, float logprob, int64_t rank) {
      const std::string key = std::to_string(id);
      if (entry.contains(key)) return;
      entry[key] = Json{{"logprob", FiniteLogprob(logprob)},
                        {"rank", rank},
                        {"decoded_token", TokenText(tokenizer, id)}};
    };
    add(score.token_id, score.logprob, score.rank);
    const size_t top = std::min(score.top.size(), static_cast<size_t>(std::max(n, 0)));
    for (size_t i = 0; i < top; ++i) {
      add(score.top[i].token_id, score.top[i].logprob, static_cast<int64_t>(i) + 1);
    }
    out.push_back(std::move(entry));
  }
  return out;
}

std::vector<TokenLogprobEntry> PromptLogprobEntries(int32_t first_token,
                                                    const std::vector<engine::TokenScore>& scores,
                                                    int n) {
  std::vector<TokenLogprobEntry> out;
  out.reserve(scores.size() + 1);
  TokenLogprobEntry first;
  first.token_id = first_token;
  first.scored = false;
  out.push_back(std::move(first));
  for (const engine::TokenScore& score : scores) {
    TokenLogprobEntry e;
    e.token_id = score.token_id;
    e.logprob = score.logprob;
    const size_t top = std::min(score.top.size(), static_cast<size_t>(std::max(n, 0)));
    e.top.assign(score.top.begin(), score.top.begin() + static_cast<std::ptrdiff_t>(top));
    out.push_back(std::move(e));
  }
  return out;
}

Json ChatLogprobsJson(const engine::Tokenizer& tokenizer,
                      const std::vector<TokenLogprobEntry>& entries) {
  Json content = Json::array();
  for (const TokenLogprobEntry& e : entries) {
    Json item = Json::object();
    item["token"] = TokenText(tokenizer, e.token_id);
    item["logprob"] = FiniteLogprob(e.logprob);
    item["bytes"] = TokenBytes(tokenizer, e.token_id);
    Json top = Json::array();
    for (const engine::TokenLogprob& t : e.top) {
      Json alt = Json::object();
      alt["token"] = TokenText(tokenizer, t.token_id);
      alt["logprob"] = FiniteLogprob(t.logprob);
      alt["bytes"] = TokenBytes(tokenizer, t.token_id);
      top.push_back(std::move(alt));
    }
    item["top_logprobs"] = std::move(top);
    content.push_back(std::move(item));
  }
  return Json{{"content", std::move(content)}};
}

Json ToolCallDeltasJson(const std::vector<engine::ToolCallDelta>& deltas) {
  Json out = Json::array();
  for (const engine::ToolCallDelta& d : deltas) {
    Json item = Json::object();
    item["index"] = d.index;
    Json function = Json::object();
    if (d.id) {
      item["id"] = *d.id;
      item["type"] = "function";
    }
    if (d.name) function["name"] = *d.name;
    function["arguments"] = d.arguments;
    item["function"] = std::move(function);
    out.push_back(std::move(item));
  }
  return out;
}

Json ToolCallsJson(const std::vector<ToolCall>& calls) {
  Json out = Json::array();
  for (const ToolCall& call : calls) {
    Json item = Json::object();
    item["id"] = call.id;
    item["type"] = "function";
    item["function"] = Json{{"name", call.name}, {"arguments", call.arguments}};
    out.push_back(std::move(item));
  }
  return out;
}

Json ChatCompletionJson(const ResponseMeta& meta, const engine::Tokenizer& tokenizer,
                        const std::vector<FinalChoice>& choices, const Usage& usage) {
  Json out = BaseObject(meta, "chat.completion");
  Json list = Json::array();
  for (const FinalChoice& c : choices) {
    Json message = Json::object();
    message["role"] = "assistant";
    if (c.text.empty() && !c.tool_calls.empty()) {
      message["content"] = nullptr;
    } else {
      message["content"] = c.text;
    }
    if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
    if (!c.tool_calls.empty()) message["tool_calls"] = ToolCallsJson(c.tool_calls);
    Json choice = Json::object();
    choice["index"] = c.index;
    choice["message"] = std::move(message);
    choice["logprobs"] =
        c.logprobs_requested ? ChatLogprobsJson(tokenizer, c.logprobs) : Json(nullptr);
    choice["finish_reason"] = c.finish_reason;
    if (c.token_ids) choice["token_ids"] = *c.token_ids;
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  if (!choices.empty() && choices.front().prompt_token_ids) {
    out["prompt_token_ids"] = *choices.front().prompt_token_ids;
  }
  // vLLM: one list for the request (every choice shares the prompt).
  if (!choices.empty() && !choices.front().prompt_logprobs.is_null()) {
    out["prompt_logprobs"] = choices.front().prompt_logprobs;
  }
  out["usage"] = UsageJson(usage);
  return out;
}

Json ChatChunkJson(const ResponseMeta& meta, int index, Json delta, Json logprobs,
                   const std::optional<std::string>& finish_reason) {
  Json out = BaseObject(meta, "chat.completion.chunk");
  Json choice = Json::object();
  choice["index"] = index;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason ? Json(*finish_reason) : Json(nullptr);
  out["choices"] = Json::array({std::move(choice)});
  return out;
}

Json CompletionLogprobsJson(const engine::Tokenizer& tokenizer,
                            const std::vector<TokenLogprobEntry>& entries, int64_t text_offset) {
  Json tokens = Json::array();
  Json token_logprobs = Json::array();
  Json top_logprobs = Json::array();
  Json offsets = Json::array();
  for (const TokenLogprobEntry& e : entries) {
    const std::string text = TokenText(tokenizer, e.token_id);
    tokens.push_back(text);
    if (!e.scored) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
    } else {
      token_logprobs.push_back(FiniteLogprob(e.logprob));
      // Keyed by text: tokens that show the same text (byte pieces of one character all show
      // U+FFFD) share a key, which keeps the best of their logprobs — so a greedy token's own
      // entry is never replaced by a worse token's.
      Json top = Json::object();
      for (const engine::TokenLogprob& t : e.top) {
        const std::string key = TokenText(tokenizer, t.token_id);
        const double logprob = FiniteLogprob(t.logprob);
        auto it = top.find(key);
        if (it == top.end() || it->get<double>() < logprob) top[key] = logprob;
      }
      top_logprobs.push_back(std::move(top));
    }
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(text.size());
  }
  Json out = Json::object();
  out["tokens"] = std::move(tokens);
  out["token_logprobs"] = std::move(token_logprobs);
  out["top_logprobs"] = std::move(top_logprobs);
  out["text_offset"] = std::move(offsets);
  return out;
}

Json CompletionJson(const ResponseMeta& meta, const engine::Tokenizer& tokenizer,
                    const std::vector<FinalChoice>& choices, const Usage& usage) {
  Json out = BaseObject(meta, "text_completion");
  Json list = Json::array();
  for (const FinalChoice& c : choices) {
    Json choice = Json::object();
    choice["index"] = c.index;
    choice["text"] = c.text;
    choice["logprobs"] =
        c.logprobs_requested ? CompletionLogprobsJson(tokenizer, c.logprobs, 0) : Json(nullptr);
    choice["finish_reason"] = c.finish_reason;
    if (!c.prompt_logprobs.is_null()) choice["prompt_logprobs"] = c.prompt_logprobs;
    if (c.prompt_token_ids) choice["prompt_token_ids"] = *c.prompt_token_ids;
    if (c.token_ids) choice["token_ids"] = *c.token_ids;
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = UsageJson(usage);
  return out;
}

Json CompletionChunkJson(const ResponseMeta& meta, int index, const std::string& text,
                         Json logprobs, const std::optional<std::string>& finish_reason) {
  Json out = BaseObject(meta, "text_completion");
  Json choice = Json::object();
  choice["index"] = index;
  choice["text"] = text;
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason ? Json(*finish_reason) : Json(nullptr);
  out["choices"] = Json::array({std::move(choice)});
  return out;
}

Json UsageChunkJson(const ResponseMeta& meta, std::string_view object, const Usage& usage) {
  Json out = BaseObject(meta, object);
  out["choices"] = Json::array();
  out["usage"] = UsageJson(usage);
  return out;
}

std::string JsonText(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string SseData(const Json& json) { return absl::StrCat("data: ", JsonText(json), "\n\n"); }

}  // namespace strata::frontend
