// Model-based random test of BlockPool + StateSlotPool + PrefixCache driven the way the
// scheduler and executor drive them (prefix_cache.h, "Use within one engine step").
//
// The harness keeps an independent model: each live sequence's tokens, block table, slot and
// in-flight step, plus simulated device memory, where every page, slot and checkpoint row
// holds the exact token prefix it was computed from (token vectors, not hashes). After every
// operation it checks:
//   * the classes' own CheckInvariants();
//   * ref_count(b) == number of live block tables holding b, for every block;
//   * free + held == total, and no block is both free and referenced;
//   * no slot is held by two live sequences; slot usage == number of running sequences;
//   * pending checkpoints == in-flight steps that save one;
// and on every prefix hit that each matched page and the checkpoint hold exactly the prompt's
// prefix; on every page write that no other sequence references the page. At the end every
// sequence is aborted or finished and all memory must be back.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kvcache/block_hash.h"
#include "kvcache/block_pool.h"
#include "kvcache/prefix_cache.h"
#include "kvcache/state_slot_pool.h"

namespace strata::kvcache {
namespace {

using TokenIds = std::vector<int32_t>;

struct Config {
  int block_size;
  int32_t num_blocks;
  int32_t num_slots;
  int32_t num_checkpoints;
  int every_n_blocks;
  bool needs_checkpoints;
};

struct Seq {
  TokenIds tokens;
  int64_t prompt_len = 0;
  uint64_t salt = 0;
  bool running = false;
  int64_t num_computed = 0;
  std::vector<BlockId> table;
  int32_t num_cached_blocks = 0;  // table[0, num_cached_blocks) went through CacheFullBlock
  SlotId slot = -1;
  int64_t inflight_end = -1;  // num_computed after the in-flight step; -1: none
  CheckpointId inflight_checkpoint = -1;
};

// Coverage counters: the test fails if the random walk did not reach the interesting paths.
struct Coverage {
  int64_t hits_with_checkpoint = 0;
  int64_t hits = 0;
  int64_t checkpoints_committed = 0;
  int64_t checkpoints_cancelled = 0;
  int64_t preemptions = 0;
  int64_t shared_blocks_seen = 0;
  int64_t allocation_failures = 0;
};

TokenIds Prefix(const TokenIds& tokens, int64_t n) {
  return TokenIds(tokens.begin(), tokens.begin() + n);
}

class Harness {
 public:
  Harness(const Config& config, uint32_t seed)
      : config_(config),
        pool_(config.num_blocks),
        slots_(config.num_slots),
        cache_(&pool_, config.num_checkpoints, config.every_n_blocks, config.block_size,
               config.needs_checkpoints),
        rng_(seed),
        page_content_(static_cast<size_t>(config.num_blocks)),
        slot_content_(static_cast<size_t>(config.num_slots)),
        checkpoint_content_(static_cast<size_t>(config.num_checkpoints)) {
    for (auto& base : family_) {
      base.resize(40);
      for (int32_t& t : base) t = Uniform(0, 5);
    }
  }

  void Run(int num_ops, Coverage* coverage) {
    coverage_ = coverage;
    for (int op = 0; op < num_ops && !::testing::Test::HasFatalFailure(); ++op) {
      RandomOp();
      CheckAll();
    }
    for (size_t i = seqs_.size(); i-- > 0;) {
      if (seqs_[i].running && seqs_[i].inflight_end < 0 && Uniform(0, 1) == 0) {
        Finish(i);
      } else {
        Abort(i);
      }
      CheckAll();
    }
    ExpectEverythingReturned();
  }

 private:
  int64_t Uniform(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(rng_() % static_cast<uint64_t>(hi - lo + 1));
  }

  void RandomOp() {
    int64_t r = Uniform(0, 99);
    if (r < 12) return AddSequence();
    if (seqs_.empty()) return;
    size_t i = static_cast<size_t>(Uniform(0, static_cast<int64_t>(seqs_.size()) - 1));
    Seq& seq = seqs_[i];
    if (r < 30) {
      if (!seq.running) Admit(seq);
    } else if (r < 60) {
      if (seq.running && seq.inflight_end < 0) ScheduleStep(seq);
    } else if (r < 85) {
      if (seq.inflight_end >= 0) CommitStep(seq);
    } else if (r < 89) {
      Abort(i);
    } else if (r < 93) {
      if (seq.running) Preempt(seq);
    } else if (r < 98) {
      if (seq.running && seq.inflight_end < 0) Finish(i);
    } else if (r < 99) {
      QueryOnly();
    } else {
      pool_.DropCachedFreeBlocks();
    }
  }

  // A new prompt: a family prefix + a random suffix, or the continuation of a finished
  // sequence (a multi-turn conversation), with salt 0 most of the time.
  void AddSequence() {
    if (seqs_.size() >= 12) return;
    Seq seq;
    if (!history_.empty() && Uniform(0, 2) == 0) {
      seq.tokens = history_[Uniform(0, static_cast<int64_t>(history_.size()) - 1)];
    } else {
      const TokenIds& base = family_[Uniform(0, 2)];
      seq.tokens = Prefix(base, Uniform(0, static_cast<int64_t>(base.size())));
    }
    for (int64_t n = Uniform(1, 10); n > 0; --n) seq.tokens.push_back(Uniform(0, 5));
    seq.prompt_len = static_cast<int64_t>(seq.tokens.size());
    seq.salt = Uniform(0, 4) == 0 ? 1 : 0;
    seqs_.push_back(std::move(seq));
  }

  // Looks up tokens[0, n - 1) (at least one token is left to compute) and checks the match
  // against simulated memory.
  PrefixMatch LookupAndVerify(const TokenIds& tokens, uint64_t salt) {
    TokenIds query = Prefix(tokens, static_cast<int64_t>(tokens.size()) - 1);
    PrefixMatch match = cache_.Lookup(HashFullBlocks(query, config_.block_size, salt));
    EXPECT_EQ(match.num_tokens, static_cast<int64_t>(match.blocks.size()) * config_.block_size);
    EXPECT_LT(match.num_tokens, static_cast<int64_t>(tokens.size()));
    for (size_t k = 0; k < match.blocks.size(); ++k) {
      EXPECT_EQ(page_content_[match.blocks[k]],
                Prefix(tokens, static_cast<int64_t>(k + 1) * config_.block_size))
          << "page " << match.blocks[k] << " holds another prefix";
    }
    if (match.num_tokens > 0 && config_.needs_checkpoints) {
      EXPECT_GE(match.checkpoint, 0);
      if (match.checkpoint >= 0) {
        EXPECT_EQ(checkpoint_content_[match.checkpoint], Prefix(tokens, match.num_tokens));
      }
    } else {
      EXPECT_EQ(match.checkpoint, -1);
    }
    return match;
  }

  void QueryOnly() {
    if (history_.empty()) return;
    LookupAndVerify(history_[Uniform(0, static_cast<int64_t>(history_.size()) - 1)], 0);
  }

  void Admit(Seq& seq) {
    PrefixMatch match = LookupAndVerify(seq.tokens, seq.salt);
    std::optional<SlotId> slot = slots_.Allocate();
    if (!slot) return;
    cache_.Acquire(match);
    seq.running = true;
    seq.slot = *slot;
    seq.table = match.blocks;
    seq.num_cached_blocks = static_cast<int32_t>(match.blocks.size());
    seq.num_computed = match.num_tokens;
    // The executor's copy: checkpoint row -> private slot (or a fresh slot at 0 tokens).
    slot_content_[*slot] = match.checkpoint >= 0 ? checkpoint_content_[match.checkpoint]
                                                 : Prefix(seq.tokens, match.num_tokens);
    if (match.num_tokens > 0) {
      ++coverage_->hits;
      if (match.checkpoint >= 0) ++coverage_->hits_with_checkpoint;
    }
  }

  // Independent statement of the checkpoint placement rule.
  bool IsCheckpointPoint(int64_t b, int64_t prompt_len) const {
    if (!config_.needs_checkpoints || config_.num_checkpoints == 0) return false;
    if (b <= 0 || b % config_.block_size != 0) return false;
    int64_t blocks = b / config_.block_size;
    if (config_.every_n_blocks > 0 && blocks % config_.every_n_blocks == 0) return true;
    return b == prompt_len / config_.block_size * config_.block_size ||
           (prompt_len > 0 && b == (prompt_len - 1) / config_.block_size * config_.block_size);
  }

  void ScheduleStep(Seq& seq) {
    if (seq.num_computed == static_cast<int64_t>(seq.tokens.size())) {
      seq.tokens.push_back(static_cast<int32_t>(Uniform(0, 5)));  // the last sampled token
    }
    int64_t begin = seq.num_computed;
    int64_t end =
        begin + std::min<int64_t>(Uniform(1, 9), static_cast<int64_t>(seq.tokens.size()) - begin);
    std::vector<int64_t> boundaries = cache_.CheckpointBoundaries(begin, end, seq.prompt_len);
    std::vector<int64_t> expected;
    for (int64_t b = begin + 1; b <= end; ++b) {
      if (IsCheckpointPoint(b, seq.prompt_len)) expected.push_back(b);
    }
    EXPECT_EQ(boundaries, expected);
    if (!boundaries.empty()) end = boundaries.front();  // cut the chunk at a checkpoint point
    EXPECT_EQ(cache_.ShouldCheckpoint(end, seq.prompt_len), IsCheckpointPoint(end, seq.prompt_len));

    int32_t need = NumBlocksFor(end, config_.block_size) - static_cast<int32_t>(seq.table.size());
    if (need > 0) {
      std::optional<std::vector<BlockId>> blocks = pool_.Allocate(need);
      if (!blocks) {
        ++coverage_->allocation_failures;
        return;
      }
      seq.table.insert(seq.table.end(), blocks->begin(), blocks->end());
    }
    seq.inflight_end = end;
    if (cache_.ShouldCheckpoint(end, seq.prompt_len)) {
      BlockHash hash = HashFullBlocks(Prefix(seq.tokens, end), config_.block_size, seq.salt).back();
      std::optional<CheckpointId> id = cache_.ReserveCheckpoint(hash);
      seq.inflight_checkpoint = id.value_or(-1);
    }
  }

  void CommitStep(Seq& seq) {
    const int64_t begin = seq.num_computed, end = seq.inflight_end;
    const int bs = config_.block_size;
    // The executor writes pages for positions [begin, end); the pages must be private.
    for (int64_t k = begin / bs; k < NumBlocksFor(end, bs); ++k) {
      BlockId b = seq.table[k];
      EXPECT_EQ(pool_.ref_count(b), 1) << "writing shared page " << b;
      page_content_[b] = Prefix(seq.tokens, std::min<int64_t>((k + 1) * bs, end));
    }
    EXPECT_EQ(slot_content_[seq.slot], Prefix(seq.tokens, begin)) << "slot state out of step";
    slot_content_[seq.slot] = Prefix(seq.tokens, end);
    seq.num_computed = end;
    seq.inflight_end = -1;
    // Commit(): cache the newly full blocks, then publish the checkpoint.
    std::vector<BlockHash> hashes = HashFullBlocks(Prefix(seq.tokens, end), bs, seq.salt);
    for (size_t k = seq.num_cached_blocks; k < hashes.size(); ++k) {
      pool_.CacheFullBlock(seq.table[k], hashes[k]);
    }
    seq.num_cached_blocks = static_cast<int32_t>(hashes.size());
    if (seq.inflight_checkpoint >= 0) {
      checkpoint_content_[seq.inflight_checkpoint] = slot_content_[seq.slot];
      bool committed = cache_.CommitCheckpoint(seq.inflight_checkpoint);
      EXPECT_EQ(committed, pool_.FindCached(hashes.back()).has_value());
      if (committed) ++coverage_->checkpoints_committed;
      seq.inflight_checkpoint = -1;
    }
  }

  void Release(Seq& seq) {
    if (seq.inflight_checkpoint >= 0) {
      cache_.CancelCheckpoint(seq.inflight_checkpoint);
      ++coverage_->checkpoints_cancelled;
    }
    seq.inflight_checkpoint = -1;
    seq.inflight_end = -1;
    if (!seq.running) return;
    pool_.Free(seq.table);
    slots_.Free(seq.slot);
    seq.table.clear();
    seq.num_cached_blocks = 0;
    seq.slot = -1;
    seq.num_computed = 0;
    seq.running = false;
  }

  void Abort(size_t i) {
    Release(seqs_[i]);
    seqs_.erase(seqs_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void Preempt(Seq& seq) {
    Release(seq);  // back to waiting; recomputes (or hits) its prefix when readmitted
    ++coverage_->preemptions;
  }

  void Finish(size_t i) {
    Seq& seq = seqs_[i];
    if (seq.num_computed >= 2) history_.push_back(Prefix(seq.tokens, seq.num_computed));
    if (history_.size() > 32) history_.erase(history_.begin());
    Abort(i);
  }

  void CheckAll() {
    ASSERT_TRUE(pool_.CheckInvariants().ok()) << pool_.CheckInvariants();
    ASSERT_TRUE(slots_.CheckInvariants().ok()) << slots_.CheckInvariants();
    ASSERT_TRUE(cache_.CheckInvariants().ok()) << cache_.CheckInvariants();
    std::vector<int32_t> refs(static_cast<size_t>(config_.num_blocks), 0);
    std::vector<int> slot_users(static_cast<size_t>(config_.num_slots), 0);
    int32_t running = 0, pending = 0;
    for (const Seq& seq : seqs_) {
      if (seq.inflight_checkpoint >= 0) ++pending;
      if (!seq.running) {
        EXPECT_TRUE(seq.table.empty());
        continue;
      }
      ++running;
      for (BlockId b : seq.table) ++refs[b];
      ASSERT_GE(seq.slot, 0);
      EXPECT_TRUE(slots_.is_allocated(seq.slot));
      EXPECT_EQ(++slot_users[seq.slot], 1) << "slot " << seq.slot << " shared";
      EXPECT_EQ(pool_.CountFree(seq.table), 0) << "a referenced block is free";
    }
    int32_t held = 0;
    for (BlockId b = 0; b < config_.num_blocks; ++b) {
      ASSERT_EQ(pool_.ref_count(b), refs[b]) << "block " << b;
      held += refs[b] > 0 ? 1 : 0;
      if (refs[b] > 1) ++coverage_->shared_blocks_seen;
    }
    EXPECT_EQ(pool_.num_free() + held, config_.num_blocks);
    EXPECT_EQ(slots_.num_held(), running);
    EXPECT_EQ(cache_.num_pending_checkpoints(), pending);
  }

  void ExpectEverythingReturned() {
    EXPECT_TRUE(seqs_.empty());
    EXPECT_EQ(pool_.num_free(), config_.num_blocks);
    EXPECT_EQ(slots_.num_free(), config_.num_slots);
    EXPECT_EQ(cache_.num_pending_checkpoints(), 0);
    // Cached blocks and checkpoints may remain; dropping the cache must drop them all.
    pool_.DropCachedFreeBlocks();
    EXPECT_EQ(pool_.num_cached(), 0);
    EXPECT_EQ(cache_.num_checkpoints(), 0);
    EXPECT_EQ(cache_.num_free_checkpoint_slots(), config_.num_checkpoints);
    EXPECT_TRUE(pool_.CheckInvariants().ok());
    EXPECT_TRUE(cache_.CheckInvariants().ok());
  }

  Config config_;
  BlockPool pool_;
  StateSlotPool slots_;
  PrefixCache cache_;
  std::mt19937_64 rng_;
  Coverage* coverage_ = nullptr;
  TokenIds family_[3];
  std::vector<TokenIds> history_;
  std::vector<Seq> seqs_;
  std::vector<TokenIds> page_content_;        // [num_blocks]
  std::vector<TokenIds> slot_content_;        // [num_slots]
  std::vector<TokenIds> checkpoint_content_;  // [num_checkpoints]
};

// Four shards (ctest runs them in parallel), 150 random configurations x 2,000 operations each.
class KvCacheRandomTest : public ::testing::TestWithParam<int> {};

TEST_P(KvCacheRandomTest, InvariantsHoldUnderRandomOperations) {
  constexpr int kRunsPerShard = 150;
  constexpr int kOpsPerRun = 2000;
  const int shard = GetParam();
  Coverage coverage;
  std::mt19937 config_rng(20260101u + static_cast<uint32_t>(shard));
  for (int i = 0; i < kRunsPerShard && !HasFatalFailure(); ++i) {
    const int run = shard * kRunsPerShard + i;
    Config config;
    config.block_size = std::vector<int>{1, 2, 4, 4, 8}[config_rng() % 5];
    config.num_blocks = static_cast<int32_t>(8 + config_rng() % 57);
    config.num_slots = static_cast<int32_t>(1 + config_rng() % 8);
    config.num_checkpoints = static_cast<int32_t>(config_rng() % 7);
    config.every_n_blocks = static_cast<int>(config_rng() % 4);
    config.needs_checkpoints = config_rng() % 5 != 0;
    SCOPED_TRACE(::testing::Message()
                 << "run " << run << " block_size " << config.block_size << " blocks "
                 << config.num_blocks << " slots " << config.num_slots << " checkpoints "
                 << config.num_checkpoints << " every " << config.every_n_blocks << " kda "
                 << config.needs_checkpoints);
    Harness(config, static_cast<uint32_t>(run)).Run(kOpsPerRun, &coverage);
  }
  // The walk must reach the interesting paths (observed counts are ~3x these bounds).
  EXPECT_GT(coverage.hits, 750);
  EXPECT_GT(coverage.hits_with_checkpoint, 375);
  EXPECT_GT(coverage.checkpoints_committed, 750);
  EXPECT_GT(coverage.checkpoints_cancelled, 250);
  EXPECT_GT(coverage.preemptions, 1250);
  EXPECT_GT(coverage.shared_blocks_seen, 25000);
  EXPECT_GT(coverage.allocation_failures, 500);
}

INSTANTIATE_TEST_SUITE_P(Shards, KvCacheRandomTest, ::testing::Range(0, 4));

}  // namespace
}  // namespace strata::kvcache
