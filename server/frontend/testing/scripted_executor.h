// Test doubles for the front end: a StepExecutor whose "model" follows a script, a small
// tokenizer with Kimi's chat and tool-call special tokens (and one with Kimi K3's XTML control
// tokens), and a fixture that wires them into a
// real scheduler + EngineLoop behind a ServedModel.
//
// ScriptedExecutor: for each sampled position it builds logits from a deterministic hash of
// (the sequence's prompt, position, token) in [-1, 1]; when the script has a token for that
// position, that token's logit gets +40, so every sampler setting picks it. Logits then go
// through the sequence's real Sampler (seeds, temperature, penalties behave as in production)
// and log-probabilities are those of the raw logits. With no script the output is "noise"
// that depends on the prompt and, when sampling, on the seed. Prompt positions it scores
// (prompt_logprobs) get noise logits from the hash of the context through them, scored by
// engine::ScoreTargets.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/time/time.h"
#include "engine/executor.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/engine_loop.h"
#include "server/frontend/served_model.h"

namespace strata::frontend::testing {

// The scripted output for a prompt (token ids); empty: free-running noise.
using Script = std::function<std::vector<int32_t>(const std::vector<int32_t>& prompt)>;

class ScriptedExecutor : public engine::StepExecutor {
 public:
  explicit ScriptedExecutor(int32_t vocab_size) : vocab_size_(vocab_size) {}

  engine::StepResult Execute(const engine::StepPlan& plan) override;

  // Thread-safe setters (the engine thread calls Execute).
  void SetScript(Script script);
  void SetStepDelay(absl::Duration delay);
  int64_t num_steps() const { return num_steps_.load(); }

 private:
  struct SeqState {
    std::vector<int32_t> context;
    std::optional<std::vector<int32_t>> prompt;  // the context at the first sample
    std::vector<int32_t> script;
    int64_t num_sampled = 0;
  };
  engine::SampledToken Sample(const engine::ScheduledSequence& seq, SeqState& state);
  engine::ScoredSequence Score(const engine::ScheduledSequence& seq, const SeqState& state) const;

  const int32_t vocab_size_;
  std::mutex mu_;
  Script script_;
  absl::Duration step_delay_ = absl::ZeroDuration();
  std::unordered_map<engine::SequenceId, SeqState> seqs_;
  std::atomic<int64_t> num_steps_{0};
};

// Ids of the test tokenizer: 0..255 bytes, then merges, then these specials.
inline constexpr int32_t kImEnd = 300;
inline constexpr int32_t kImUser = 301;
inline constexpr int32_t kImAssistant = 302;
inline constexpr int32_t kImSystem = 303;
inline constexpr int32_t kImMiddle = 304;
inline constexpr int32_t kSectionBegin = 305;
inline constexpr int32_t kSectionEnd = 306;
inline constexpr int32_t kCallBegin = 307;
inline constexpr int32_t kArgumentBegin = 308;
inline constexpr int32_t kCallEnd = 309;
inline constexpr int32_t kThinkBegin = 310;  // <think>, an added token that is not special
inline constexpr int32_t kThinkEnd = 311;    // </think>, likewise
inline constexpr int32_t kTokenizerVocab = 312;
inline constexpr int32_t kModelVocab = 320;  // ids 312..319 have no text

// Bytes, a few merges ("he", "ll", "hello", " w", "or", "ld"), Kimi specials, <think> and
// </think>; EOS <|im_end|>.
std::unique_ptr<engine::Tokenizer> MakeTestTokenizer();

// Ids of the Kimi K3 test tokenizer: 0..255 bytes, then merges, then the XTML control tokens.
inline constexpr int32_t kK3EndOfMessage = 300;  // <|end_of_msg|>
inline constexpr int32_t kK3Open = 301;          // <|open|>
inline constexpr int32_t kK3Close = 302;         // <|close|>
inline constexpr int32_t kK3Sep = 303;           // <|sep|>
inline constexpr int32_t kK3SeparateEos = 304;   // [EOS], with K3TestEos::kSeparate only

enum class K3TestEos {
  kEndOfMessage,  // EOS is <|end_of_msg|>
  kSeparate,      // EOS is a special token [EOS] of its own (kK3SeparateEos)
};

// A K3-shaped tokenizer: bytes, a few merges ("th", "ink", "think", "re", "sp", "on", "se"),
// the XTML control tokens and no chat template.
std::unique_ptr<engine::Tokenizer> MakeK3TestTokenizer(K3TestEos eos);

struct FixtureOptions {
  int64_t max_model_len = 512;
  int64_t max_queued_requests = 1024;
  int32_t max_num_seqs = 16;
  bool enable_prefix_caching = false;
  // A Kimi K3 model instead: MakeK3TestTokenizer(K3TestEos::kEndOfMessage), the XTML prompt
  // (engine::ChatTemplate::Xtml()) and EOS <|end_of_msg|>; no tool-call markers or <think>.
  bool kimi_k3 = false;
};

// A served model on the test tokenizer, the built-in Kimi chat template (with kimi_k3: the K3
// test tokenizer and the XTML prompt), a real scheduler and the scripted executor, with its
// engine loop started.
class Fixture {
 public:
  explicit Fixture(FixtureOptions options = {});
  ~Fixture();

  const ServedModel& served() const { return served_; }
  // Before the first request (e.g. to give the model a generation_config).
  ServedModel& mutable_served() { return served_; }
  ScriptedExecutor& executor() { return *executor_; }
  server::EngineLoop& engine() { return *engine_; }
  const engine::Tokenizer& tokenizer() const { return *tokenizer_; }
  // Token ids of `text` (special-token text parsed).
  std::vector<int32_t> Ids(const std::string& text) const;

 private:
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  std::optional<engine::ChatTemplate> chat_template_;
  ScriptedExecutor* executor_ = nullptr;  // owned by the engine loop
  std::unique_ptr<server::EngineLoop> engine_;
  ServedModel served_;
};

}  // namespace strata::frontend::testing
