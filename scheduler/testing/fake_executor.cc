#include "scheduler/testing/fake_executor.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/splitmix64.h"
#include "kvcache/ids.h"

namespace strata::scheduler::testing {
namespace {

uint64_t Mix(uint64_t x) { return SplitMix64Mix(x); }

}  // namespace

FakeExecutor::FakeExecutor(int32_t num_blocks, int block_size, int32_t num_slots,
                           int32_t num_checkpoints, int32_t vocab_size)
    : block_size_(block_size),
      vocab_size_(vocab_size),
      pages_(static_cast<size_t>(num_blocks), std::vector<int32_t>(block_size, -1)),
      slots_(static_cast<size_t>(num_slots)),
      checkpoints_(static_cast<size_t>(num_checkpoints)) {}

bool FakeExecutor::IsCheckpointId(int32_t id) const {
  return id >= 0 && id < static_cast<int32_t>(checkpoints_.size() + slots_.size());
}

FakeExecutor::State& FakeExecutor::Checkpoint(int32_t id) {
  const auto n = static_cast<int32_t>(checkpoints_.size());
  return id < n ? checkpoints_[static_cast<size_t>(id)] : slots_[static_cast<size_t>(id - n)];
}

uint64_t FakeExecutor::Absorb(uint64_t hash, int32_t token) {
  return Mix(hash ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ull));
}

int32_t FakeExecutor::NextToken(uint64_t context_hash, int32_t vocab_size) {
  return static_cast<int32_t>(Mix(context_hash + 1) % static_cast<uint64_t>(vocab_size));
}

float FakeExecutor::Logprob(int32_t token) { return -0.25f * static_cast<float>(token % 8); }

std::vector<int32_t> FakeExecutor::ExpectedOutput(const Request& request, int32_t vocab_size) {
  uint64_t hash = kEmptyHash;
  for (int32_t t : request.prompt) hash = Absorb(hash, t);
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < request.max_tokens) {
    int32_t t = NextToken(hash, vocab_size);
    out.push_back(t);
    hash = Absorb(hash, t);
    if (!request.ignore_eos && request.eos_token_id >= 0 && t == request.eos_token_id) break;
    const auto& stops = request.stop_token_ids;
    if (std::find(stops.begin(), stops.end(), t) != stops.end()) break;
  }
  return out;
}

void FakeExecutor::Error(const std::string& message) {
  errors_.push_back(absl::StrCat("step ", num_steps_, ": ", message));
}

bool FakeExecutor::ContextHash(const std::vector<int32_t>& block_table, int64_t n, uint64_t* hash) {
  uint64_t h = kEmptyHash;
  for (int64_t p = 0; p < n; ++p) {
    int32_t token = pages_[static_cast<size_t>(block_table[static_cast<size_t>(p / block_size_)])]
                          [static_cast<size_t>(p % block_size_)];
    if (token < 0) return false;
    h = Absorb(h, token);
  }
  *hash = h;
  return true;
}

void FakeExecutor::CopyCacheUnits(const engine::StepPlan& plan, engine::StepResult* result) {
  static_assert(sizeof(State) == kStateBytes);
  const auto num_slots = static_cast<int32_t>(slots_.size());
  // The unit's state, or null (an error) when it names none.
  const auto state_of = [&](engine::CacheUnit unit, int32_t index) -> State* {
    if (unit == engine::CacheUnit::kSlot) {
      return index >= 0 && index < num_slots ? &slots_[static_cast<size_t>(index)] : nullptr;
    }
    return IsCheckpointId(index) ? &Checkpoint(index) : nullptr;
  };
  const auto page_of = [&](int32_t index) -> std::vector<int32_t>* {
    return index >= 0 && index < static_cast<int32_t>(pages_.size())
               ? &pages_[static_cast<size_t>(index)]
               : nullptr;
  };
  result->saved.clear();
  for (const engine::CacheSave& save : plan.cache_saves) {
    std::string bytes;
    if (save.unit == engine::CacheUnit::kBlock) {
      const std::vector<int32_t>* page = page_of(save.index);
      if (page == nullptr) {
        Error(absl::StrCat("cache save of block ", save.index, " out of range"));
        page = &pages_[0];
      }
      bytes.assign(reinterpret_cast<const char*>(page->data()), page->size() * sizeof(int32_t));
    } else {
      State* state = state_of(save.unit, save.index);
      if (state == nullptr) {
        Error(absl::StrCat("cache save of state ", save.index, " out of range"));
        state = &slots_[0];
      }
      bytes.assign(reinterpret_cast<const char*>(state), sizeof(State));
    }
    result->saved.push_back(std::move(bytes));
  }
  for (const engine::CacheLoad& load : plan.cache_loads) {
    // A load beside the step (engine/step.h) may land while the step's sequences run: none of
    // them may touch its unit.
    for (const engine::ScheduledSequence& seq : plan.sequences) {
      const bool touches = load.unit == engine::CacheUnit::kSlot
                               ? seq.slot == load.index
                               : std::find(seq.block_table.begin(), seq.block_table.end(),
                                           load.index) != seq.block_table.end();
      if (load.beside_step && touches) {
        Error(absl::StrCat("a load beside the step into ",
                           load.unit == engine::CacheUnit::kSlot ? "slot " : "block ", load.index,
                           ", which seq ", seq.seq_id, " of the step uses"));
      }
    }
    if (load.unit == engine::CacheUnit::kBlock) {
      std::vector<int32_t>* page = page_of(load.index);
      if (page == nullptr || load.bytes.size() != page->size() * sizeof(int32_t)) {
        Error(absl::StrCat("cache load of block ", load.index, ": bad index or size"));
        continue;
      }
      std::memcpy(page->data(), load.bytes.data(), load.bytes.size());
    } else {
      State* state = state_of(load.unit, load.index);
      if (state == nullptr || load.bytes.size() != sizeof(State)) {
        Error(absl::StrCat("cache load of state ", load.index, ": bad index or size"));
        continue;
      }
      std::memcpy(state, load.bytes.data(), sizeof(State));
    }
  }
}

void FakeExecutor::InitSlots(const engine::StepPlan& plan) {
  std::set<int32_t> slots_seen;
  for (const engine::ScheduledSequence& seq : plan.sequences) {
    if (seq.slot < 0) continue;
    if (seq.slot >= static_cast<int32_t>(slots_.size())) {
      Error(absl::StrCat("seq ", seq.seq_id, " slot ", seq.slot, " out of range"));
      continue;
    }
    if (!slots_seen.insert(seq.slot).second) {
      Error(absl::StrCat("slot ", seq.slot, " used twice in one step"));
    }
    State& slot = slots_[static_cast<size_t>(seq.slot)];
    if (seq.slot_init == engine::SlotInit::kZero) {
      if (seq.num_computed_tokens != 0) {
        Error(absl::StrCat("seq ", seq.seq_id, " zeroes its slot at ", seq.num_computed_tokens));
      }
      slot = State{0, kEmptyHash};
    } else if (seq.slot_init == engine::SlotInit::kFromCheckpoint) {
      if (!IsCheckpointId(seq.source_checkpoint)) {
        Error(absl::StrCat("seq ", seq.seq_id, " bad source checkpoint ", seq.source_checkpoint));
        continue;
      }
      slot = Checkpoint(seq.source_checkpoint);
    }
  }
}

void FakeExecutor::RunSequence(const engine::ScheduledSequence& seq, engine::StepResult* result) {
  const int64_t begin = seq.num_computed_tokens;
  const int64_t end = begin + static_cast<int64_t>(seq.token_ids.size());
  const std::string who = absl::StrCat("seq ", seq.seq_id, " [", begin, ", ", end, "): ");
  if (seq.token_ids.empty()) Error(who + "no tokens");
  if (static_cast<int64_t>(seq.block_table.size()) != kvcache::NumBlocksFor(end, block_size_)) {
    Error(absl::StrCat(who, seq.block_table.size(), " blocks"));
    return;
  }
  for (int32_t b : seq.block_table) {
    if (b < 0 || b >= static_cast<int32_t>(pages_.size())) {
      Error(absl::StrCat(who, "block ", b, " out of range"));
      return;
    }
  }
  uint64_t context = kEmptyHash;
  if (!ContextHash(seq.block_table, begin, &context)) Error(who + "reads an unwritten position");
  State* slot = nullptr;
  if (seq.slot >= 0 && seq.slot < static_cast<int32_t>(slots_.size())) {
    slot = &slots_[static_cast<size_t>(seq.slot)];
    if (slot->num_tokens != begin || slot->hash != context) {
      Error(absl::StrCat(who, "slot state holds ", slot->num_tokens,
                         " tokens that differ from the cached context"));
    }
  }
  // The slot absorbs the tokens before the drafts now, the accepted drafts after sampling.
  const int64_t k = seq.num_draft_tokens;
  auto absorb = [&](int64_t from, int64_t to) {
    for (int64_t p = from; p < to && slot != nullptr; ++p) {
      slot->hash = Absorb(slot->hash, seq.token_ids[static_cast<size_t>(p - begin)]);
      ++slot->num_tokens;
    }
  };
  for (int64_t p = begin; p < end; ++p) {
    int32_t token = seq.token_ids[static_cast<size_t>(p - begin)];
    pages_[static_cast<size_t>(seq.block_table[static_cast<size_t>(p / block_size_)])]
          [static_cast<size_t>(p % block_size_)] = token;
  }
  // The slot's state at each checkpoint save (applied after every sequence ran, as the real
  // executor's copies come after every slot init).
  int64_t absorbed = begin;
  for (const engine::CheckpointSave& save : seq.save_checkpoints) {
    const int64_t at = begin + save.num_tokens;
    if (at <= absorbed || at > end - k) Error(who + "checkpoint saves out of order or range");
    if (at % block_size_ != 0) Error(who + "checkpoint not on a block boundary");
    if (slot == nullptr || !IsCheckpointId(save.checkpoint)) {
      Error(who + "bad checkpoint save");
      continue;
    }
    absorb(absorbed, at);
    absorbed = at;
    saved_.push_back({save.checkpoint, *slot});
  }
  if (k > 0 && !seq.save_checkpoints.empty()) Error(who + "checkpoint saves with drafts");
  absorb(absorbed, end - std::max<int64_t>(k, 0));
  if (!seq.score_targets.empty()) ScoreSequence(seq, context, result);
  if (seq.num_draft_tokens > 0 && (!seq.sample || seq.num_draft_tokens >= end - begin)) {
    Error(who + "drafts without sampling or without a token before them");
    return;
  }
  if (!seq.sample) return;
  // Row j is sampled after the context through the token before draft j; the next row only
  // while the sampled token equals its draft.
  for (int64_t j = 0; j <= k; ++j) {
    if (!ContextHash(seq.block_table, end - k + j, &context)) {
      Error(who + "reads an unwritten position");
    }
    engine::SampledToken& out = result->sampled.emplace_back();
    out.seq_id = seq.seq_id;
    out.token_id = NextToken(context, vocab_size_);
    out.logprob = Logprob(out.token_id);
    for (int i = 0; i < seq.num_logprobs; ++i) {
      int32_t t = (out.token_id + i) % vocab_size_;
      out.top_logprobs.push_back({t, Logprob(t)});
    }
    if (j == k || out.token_id != seq.token_ids[static_cast<size_t>(end - begin - k + j)]) break;
    absorb(end - k + j, end - k + j + 1);  // draft j accepted
  }
}

engine::TokenScore FakeExecutor::Score(uint64_t context_hash, int32_t target, int n) {
  engine::TokenScore score;
  score.token_id = target;
  const uint64_t h = Absorb(context_hash, target);
  score.logprob = -static_cast<float>(h % 1000) / 100.0f;
  score.rank = 1 + static_cast<int64_t>(h % 7);
  for (int i = 0; i < n; ++i) score.top.push_back({i, -static_cast<float>(i)});
  return score;
}

std::vector<engine::TokenScore> FakeExecutor::ExpectedPromptScores(const Request& request) {
  std::vector<engine::TokenScore> out;
  uint64_t context = kEmptyHash;
  for (size_t p = 0; p + 1 < request.prompt.size(); ++p) {
    context = Absorb(context, request.prompt[p]);
    out.push_back(Score(context, request.prompt[p + 1], request.prompt_logprobs));
  }
  return out;
}

void FakeExecutor::ScoreSequence(const engine::ScheduledSequence& seq, uint64_t context,
                                 engine::StepResult* result) {
  const std::string who = absl::StrCat("seq ", seq.seq_id, ": ");
  const size_t n = seq.token_ids.size();
  if (seq.score_targets.size() > n) Error(who + "more score targets than tokens");
  engine::ScoredSequence& out = result->scored.emplace_back();
  out.seq_id = seq.seq_id;
  for (size_t i = 0; i < seq.score_targets.size() && i < n; ++i) {
    if (i + 1 < n && seq.score_targets[i] != seq.token_ids[i + 1]) {
      Error(absl::StrCat(who, "score target ", i, " is not the next token"));
    }
    context = Absorb(context, seq.token_ids[i]);
    out.scores.push_back(Score(context, seq.score_targets[i], seq.num_score_logprobs));
  }
}

engine::StepResult FakeExecutor::Execute(const engine::StepPlan& plan) {
  ++num_steps_;
  engine::StepResult result;
  result.step_id = plan.step_id;
  CopyCacheUnits(plan, &result);
  InitSlots(plan);
  std::set<int32_t> written;  // blocks written this step: no two sequences may share one
  for (const engine::ScheduledSequence& seq : plan.sequences) {
    for (int64_t p = seq.num_computed_tokens;
         p < seq.num_computed_tokens + static_cast<int64_t>(seq.token_ids.size()); ++p) {
      size_t index = static_cast<size_t>(p / block_size_);
      if (index >= seq.block_table.size()) break;
      if (p % block_size_ == 0 || p == seq.num_computed_tokens) {
        if (!written.insert(seq.block_table[index]).second) {
          Error(absl::StrCat("block ", seq.block_table[index], " written by two sequences"));
        }
      }
    }
    RunSequence(seq, &result);
  }
  for (const auto& [checkpoint, state] : saved_) Checkpoint(checkpoint) = state;
  saved_.clear();
  return result;
}

}  // namespace strata::scheduler::testing
