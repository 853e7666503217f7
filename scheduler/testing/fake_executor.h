// FakeExecutor: a deterministic stand-in for the model executor, for scheduler tests. It
// simulates the device caches with token ids, so a test can tell whether the plans keep every
// sequence's context intact across chunking, prefix hits and preemption.
//
// Simulated device memory:
//   pages[num_blocks][block_size]      token id at each MLA cache position (-1: never written)
//   slots[num_slots], checkpoints[n]   a "KDA state": (tokens absorbed, rolling hash of them);
//                                      checkpoint ids n + s are slot s (a live slot lent to the
//                                      prefix cache, as CacheLayout::CheckpointRow maps them)
// Execute(plan), in the order the real executor must follow:
//   0. the offload copies: every cache save (a block's token ids, a checkpoint's state, as
//      bytes: BlockBytes, kStateBytes), then every load (bytes of the wrong size are an error);
//   1. every slot_init, in plan order: kZero resets the slot, kFromCheckpoint copies the
//      checkpoint in (so a lent slot zeroed before its checkpoint is copied is caught);
//   2. per sequence: the block table must cover exactly [0, num_computed + new); the slot
//      state (with KDA) must equal the context read back from the pages [0, num_computed);
//      the new tokens are written to the pages and absorbed into the slot; when `sample`,
//      the token is NextToken(hash of the pages [0, num_computed + new)) — with drafts, the
//      row before each draft is sampled while the previous row's token equals its draft, and
//      the slot absorbs only the tokens before the drafts and the accepted drafts; score
//      target i gets
//      Score(hash of the context through new token i, target);
//   3. every checkpoint save copies the slot's state after its num_tokens new tokens (which
//      must end on a block boundary), after every sequence ran.
// So a sampled token depends on the whole context exactly as the caches hold it: a wrong
// block, a stale checkpoint or a missing state carry changes the output. Violations of the
// plan contract are recorded in errors().
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/step.h"
#include "scheduler/request.h"

namespace strata::scheduler::testing {

class FakeExecutor {
 public:
  FakeExecutor(int32_t num_blocks, int block_size, int32_t num_slots, int32_t num_checkpoints,
               int32_t vocab_size);

  engine::StepResult Execute(const engine::StepPlan& plan);

  // The unit sizes of the offload copies (Scheduler::SetOffloadTiers).
  static int64_t BlockBytes(int block_size) { return int64_t{4} * block_size; }
  static constexpr int64_t kStateBytes = 16;  // num_tokens, hash

  // Hash of an empty context, and of a context extended by one token.
  static constexpr uint64_t kEmptyHash = 0x2545f4914f6cdd1dull;
  static uint64_t Absorb(uint64_t hash, int32_t token);
  // The model: the next token after a context with hash `context_hash`.
  static int32_t NextToken(uint64_t context_hash, int32_t vocab_size);
  // The fake logprob reported for `token`, and its top-n list (n = num_logprobs).
  static float Logprob(int32_t token);
  // The fake score of prompt token `target` after a context with hash `context_hash` (top n),
  // and the scores a request with prompt_logprobs >= 0 must receive (prompt tokens 1..).
  static engine::TokenScore Score(uint64_t context_hash, int32_t target, int n);
  static std::vector<engine::TokenScore> ExpectedPromptScores(const Request& request);
  // What a request must produce (run alone, to its stop condition).
  static std::vector<int32_t> ExpectedOutput(const Request& request, int32_t vocab_size);

  const std::vector<std::string>& errors() const { return errors_; }
  int64_t num_steps() const { return num_steps_; }

 private:
  struct State {
    int64_t num_tokens = -1;  // -1: never initialised
    uint64_t hash = kEmptyHash;
  };

  bool IsCheckpointId(int32_t id) const;
  State& Checkpoint(int32_t id);  // checkpoints_[id], or the lent slot id − n
  void CopyCacheUnits(const engine::StepPlan& plan, engine::StepResult* result);
  void InitSlots(const engine::StepPlan& plan);
  void RunSequence(const engine::ScheduledSequence& seq, engine::StepResult* result);
  // Scores seq.score_targets; `context` hashes the tokens before the step's first.
  void ScoreSequence(const engine::ScheduledSequence& seq, uint64_t context,
                     engine::StepResult* result);
  // Hash of the first `n` tokens read back from the pages of `block_table`; false on a hole.
  bool ContextHash(const std::vector<int32_t>& block_table, int64_t n, uint64_t* hash);
  void Error(const std::string& message);

  int block_size_;
  int32_t vocab_size_;
  std::vector<std::vector<int32_t>> pages_;
  std::vector<State> slots_;
  std::vector<State> checkpoints_;
  std::vector<std::pair<int32_t, State>> saved_;  // this step's saves: (checkpoint, state)
  std::vector<std::string> errors_;
  int64_t num_steps_ = 0;
};

}  // namespace strata::scheduler::testing
