// engine_request.h: the engine request and decoding options of one choice.
#include "server/frontend/engine_request.h"

#include "absl/strings/str_cat.h"
#include "server/frontend/generation_response.h"

namespace strata::frontend {

scheduler::Request EngineRequest(const ServedModel& model, const GenerationFields& gen,
                                 const std::vector<int32_t>& prompt, int64_t max_tokens,
                                 const std::string& id, int i, bool chat) {
  scheduler::Request r;
  r.request_id = absl::StrCat(id, "-", i);
  r.prompt = prompt;
  r.sampling = gen.sampling;
  if (r.sampling.seed) r.sampling.seed = *r.sampling.seed + static_cast<uint64_t>(i);
  r.max_tokens = max_tokens;
  r.stop_token_ids = gen.stop_token_ids;
  if (chat && !gen.ignore_eos) {
    for (int32_t stop : model.chat_stop_token_ids) r.stop_token_ids.push_back(stop);
  }
  r.eos_token_id = model.eos_token_id;
  r.ignore_eos = gen.ignore_eos;
  r.priority = gen.priority;
  r.cache_salt = CacheSaltHash(gen.cache_salt);
  r.num_logprobs = gen.num_logprobs;
  r.fallback_seed = RandomSeed();
  return r;
}

ChoiceOptions OptionsFor(const GenerationFields& gen, const scheduler::Request& r,
                         bool parse_tool_calls) {
  ChoiceOptions o;
  o.detokenizer.skip_special_tokens = parse_tool_calls ? false : gen.skip_special_tokens;
  o.detokenizer.stop = gen.stop;
  o.detokenizer.include_stop_str_in_output = gen.include_stop_str_in_output;
  o.parse_tool_calls = parse_tool_calls;
  o.logprobs = gen.num_logprobs >= 0;
  o.hidden_stop_ids = r.stop_token_ids;
  if (r.eos_token_id >= 0) o.hidden_stop_ids.push_back(static_cast<int32_t>(r.eos_token_id));
  return o;
}

}  // namespace strata::frontend
