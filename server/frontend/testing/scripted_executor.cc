#include "server/frontend/testing/scripted_executor.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <thread>

#include "core/check.h"
#include "core/splitmix64.h"
#include "engine/step_sampling.h"
#include "scheduler/scheduler.h"

namespace strata::frontend::testing {
namespace {

uint64_t Mix(uint64_t x) { return SplitMix64Mix(x + kSplitMix64Golden); }

uint64_t HashIds(const std::vector<int32_t>& ids) {
  uint64_t h = 0x1234;
  for (int32_t id : ids) h = Mix(h ^ static_cast<uint32_t>(id));
  return h;
}

// Bytes 0..255, then `merges`, with Kimi's pre-tokenizer pattern; no special tokens yet.
engine::TokenizerSpec ByteLevelSpec(std::initializer_list<const char*> merges) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* t : merges) tokens.emplace_back(t);
  engine::TokenizerSpec spec;
  spec.vocab = *engine::BpeVocab::FromTokens(tokens);
  spec.pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  return spec;
}

std::unique_ptr<engine::Tokenizer> CreateTokenizer(engine::TokenizerSpec spec) {
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> tokenizer =
      engine::Tokenizer::Create(std::move(spec));
  CHECK(tokenizer.ok()) << tokenizer.status();
  return std::move(*tokenizer);
}

}  // namespace

void ScriptedExecutor::SetScript(Script script) {
  std::lock_guard<std::mutex> lock(mu_);
  script_ = std::move(script);
}

void ScriptedExecutor::SetStepDelay(absl::Duration delay) {
  std::lock_guard<std::mutex> lock(mu_);
  step_delay_ = delay;
}

engine::SampledToken ScriptedExecutor::Sample(const engine::ScheduledSequence& seq,
                                              SeqState& state) {
  if (!state.prompt) {
    state.prompt = state.context;
    if (script_) state.script = script_(*state.prompt);
  }
  const int64_t k = state.num_sampled++;
  const uint64_t base = Mix(HashIds(*state.prompt) ^ static_cast<uint64_t>(k));
  std::vector<float> logits(vocab_size_);
  for (int32_t v = 0; v < vocab_size_; ++v) {
    logits[v] = static_cast<float>(Mix(base ^ static_cast<uint64_t>(v)) % 2001) / 1000.0f - 1.0f;
  }
  if (k < static_cast<int64_t>(state.script.size())) logits[state.script[k]] += 40.0f;
  engine::SampledToken out;
  out.seq_id = seq.seq_id;
  if (seq.num_logprobs >= 0) {
    const float max = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l - max));
    const float log_z = max + static_cast<float>(std::log(sum));
    std::vector<engine::TokenLogprob> all;
    for (int32_t v = 0; v < vocab_size_; ++v) all.push_back({v, logits[v] - log_z});
    std::stable_sort(all.begin(), all.end(),
                     [](const auto& a, const auto& b) { return a.logprob > b.logprob; });
    all.resize(std::min<size_t>(all.size(), static_cast<size_t>(seq.num_logprobs)));
    out.top_logprobs = std::move(all);
    std::vector<float> raw = logits;
    CHECK(seq.sampler != nullptr);
    out.token_id = seq.sampler->Sample(logits.data(), vocab_size_);
    out.logprob = raw[out.token_id] - log_z;
  } else {
    CHECK(seq.sampler != nullptr);
    out.token_id = seq.sampler->Sample(logits.data(), vocab_size_);
  }
  return out;
}

engine::StepResult ScriptedExecutor::Execute(const engine::StepPlan& plan) {
  absl::Duration delay;
  {
    std::lock_guard<std::mutex> lock(mu_);
    delay = step_delay_;
  }
  if (delay > absl::ZeroDuration()) std::this_thread::sleep_for(absl::ToChronoNanoseconds(delay));
  num_steps_++;
  std::lock_guard<std::mutex> lock(mu_);
  engine::StepResult result;
  result.step_id = plan.step_id;
  for (const engine::ScheduledSequence& seq : plan.sequences) {
    SeqState& state = seqs_[seq.seq_id];
    if (seq.num_computed_tokens == 0) state = SeqState();
    state.context.resize(seq.num_computed_tokens);
    state.context.insert(state.context.end(), seq.token_ids.begin(), seq.token_ids.end());
    if (!seq.score_targets.empty()) result.scored.push_back(Score(seq, state));
    if (seq.sample) result.sampled.push_back(Sample(seq, state));
  }
  return result;
}

engine::ScoredSequence ScriptedExecutor::Score(const engine::ScheduledSequence& seq,
                                               const SeqState& state) const {
  // Row i: noise from the hash of the context through new token i; scored as the executors do.
  const size_t rows = seq.score_targets.size();
  std::vector<float> logits(rows * static_cast<size_t>(vocab_size_));
  std::vector<int32_t> context(state.context.begin(),
                               state.context.begin() + seq.num_computed_tokens);
  for (size_t i = 0; i < rows; ++i) {
    context.push_back(seq.token_ids[i]);
    const uint64_t base = Mix(HashIds(context));
    for (int32_t v = 0; v < vocab_size_; ++v) {
      logits[i * static_cast<size_t>(vocab_size_) + static_cast<size_t>(v)] =
          static_cast<float>(Mix(base ^ static_cast<uint64_t>(v)) % 2001) / 1000.0f - 1.0f;
    }
  }
  engine::ScoredSequence out;
  engine::ScoreTargets(seq, logits.data(), vocab_size_, &out);
  return out;
}

std::unique_ptr<engine::Tokenizer> MakeTestTokenizer() {
  engine::TokenizerSpec spec = ByteLevelSpec({"he", "ll", "hell", "hello", " w", "or", "ld"});
  const char* specials[] = {"<|im_end|>",
                            "<|im_user|>",
                            "<|im_assistant|>",
                            "<|im_system|>",
                            "<|im_middle|>",
                            "<|tool_calls_section_begin|>",
                            "<|tool_calls_section_end|>",
                            "<|tool_call_begin|>",
                            "<|tool_call_argument_begin|>",
                            "<|tool_call_end|>"};
  for (int i = 0; i < 10; ++i) spec.special_tokens[kImEnd + i] = {specials[i], true};
  spec.special_tokens[kThinkBegin] = {"<think>", false};
  spec.special_tokens[kThinkEnd] = {"</think>", false};
  spec.eos_token = "<|im_end|>";
  return CreateTokenizer(std::move(spec));
}

std::unique_ptr<engine::Tokenizer> MakeK3TestTokenizer(K3TestEos eos) {
  engine::TokenizerSpec spec = ByteLevelSpec({"th", "ink", "think", "re", "sp", "on", "se"});
  spec.special_tokens[kK3EndOfMessage] = {"<|end_of_msg|>", true};
  spec.special_tokens[kK3Open] = {"<|open|>", true};
  spec.special_tokens[kK3Close] = {"<|close|>", true};
  spec.special_tokens[kK3Sep] = {"<|sep|>", true};
  if (eos == K3TestEos::kSeparate) {
    spec.special_tokens[kK3SeparateEos] = {"[EOS]", true};
    spec.eos_token = "[EOS]";
  } else {
    spec.eos_token = "<|end_of_msg|>";
  }
  return CreateTokenizer(std::move(spec));
}

Fixture::Fixture(FixtureOptions options)
    : tokenizer_(options.kimi_k3 ? MakeK3TestTokenizer(K3TestEos::kEndOfMessage)
                                 : MakeTestTokenizer()) {
  chat_template_ = options.kimi_k3
                       ? engine::ChatTemplate::Xtml()
                       : *engine::ChatTemplate::Create(engine::BuiltinKimiChatTemplate(), {});
  scheduler::SchedulerConfig config;
  config.max_num_seqs = options.max_num_seqs;
  config.max_num_batched_tokens = 512;
  config.max_model_len = options.max_model_len;
  config.block_size = 16;
  config.num_blocks = static_cast<int32_t>(options.max_model_len / 16) * 8;
  config.num_slots = options.max_num_seqs;
  config.num_checkpoint_slots = options.enable_prefix_caching ? 8 : 0;
  config.enable_prefix_caching = options.enable_prefix_caching;
  auto scheduler = scheduler::Scheduler::Create(config);
  CHECK(scheduler.ok()) << scheduler.status();
  auto executor = std::make_unique<ScriptedExecutor>(kModelVocab);
  executor_ = executor.get();
  server::EngineLoopOptions loop_options;
  loop_options.max_queued_requests = options.max_queued_requests;
  engine_ = std::make_unique<server::EngineLoop>(std::move(*scheduler), std::move(executor),
                                                 loop_options);
  engine_->Start();
  served_.names = {"test-model", "alias"};
  served_.root = "/models/test";
  served_.created = 1700000000;
  served_.max_model_len = options.max_model_len;
  served_.vocab_size = kModelVocab;
  served_.tokenizer = tokenizer_.get();
  served_.chat_template = &*chat_template_;
  served_.chat_template_tools = &*chat_template_;
  served_.eos_token_id = options.kimi_k3 ? kK3EndOfMessage : kImEnd;
  served_.token_vocab = ConstraintVocab(*tokenizer_);
  served_.tool_call_tokens = ToolCallMarkers(*tokenizer_);
  served_.think_begin_id = tokenizer_->SpecialTokenId("<think>").value_or(-1);
  served_.think_end_id = tokenizer_->SpecialTokenId("</think>").value_or(-1);
  served_.engine = engine_.get();
}

Fixture::~Fixture() { engine_->Stop(); }

std::vector<int32_t> Fixture::Ids(const std::string& text) const {
  return tokenizer_->Encode(text, {.add_special_tokens = false, .parse_special = true});
}

}  // namespace strata::frontend::testing
