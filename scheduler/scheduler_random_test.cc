// Model-based random test: thousands of random operations (add with prompts sharing prefixes,
// step through the FakeExecutor, abort, abort while a step is in flight) on caches so small
// that preemption, slot shortage and prefix hits happen all the time. After every operation:
// Scheduler::CheckInvariants() (free + held == total, ref counts == references, no block both
// free and referenced, no shared slot, ...) and the FakeExecutor's contract checks (block
// tables, slot starts, checkpoint contents). Every emitted token must match what the fake
// model defines for the request, so preemption, recompute and prefix hits can never corrupt
// output, and prompt scores (prompt_logprobs) arrive whole with the first token. At the end
// everything is drained: each request ended exactly once and every block,
// slot and checkpoint reservation is back. With speculative decoding the fake model has a
// 4-token vocabulary, so prompt-lookup drafts are often accepted and often rejected: outputs
// must still be exactly the model's, and every rollback must leave caches and slots intact.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kvcache/ids.h"
#include "kvcache/offload/offload_testing.h"
#include "kvcache/offload/offload_tiers.h"
#include "scheduler/scheduler.h"
#include "scheduler/testing/fake_executor.h"

namespace strata::scheduler {
namespace {

using testing::FakeExecutor;

constexpr int32_t kRandomVocab = 24;
constexpr int32_t kEos = 5;
constexpr int32_t kSpecVocab = 4;  // with speculative decoding: drafts often right
constexpr int32_t kSpecEos = 3;

struct Tracked {
  Request request;
  std::vector<int32_t> expected;  // the full output when not aborted
  std::vector<int32_t> emitted;
  int num_finish_events = 0;
  std::optional<FinishReason> reason;
};

class RandomOpsRun {
 public:
  // With `tiers`, the scheduler spills to them and hits in them (and the run corrupts disk files
  // now and then: `tier_dir`).
  RandomOpsRun(const SchedulerConfig& config, uint64_t seed, kvcache::OffloadTiers* tiers = nullptr,
               std::string tier_dir = "")
      : config_(config),
        tiers_(tiers),
        tier_dir_(std::move(tier_dir)),
        vocab_(config.num_speculative_tokens > 0 ? kSpecVocab : kRandomVocab),
        eos_(config.num_speculative_tokens > 0 ? kSpecEos : kEos),
        rng_(seed),
        scheduler_(config),
        executor_(config.num_blocks, config.block_size,
                  config.has_kda_layers ? config.num_slots : 0, config.num_checkpoint_slots,
                  vocab_) {
    for (auto& base : bases_) {
      for (int i = 0; i < 28; ++i) base.push_back(Uniform(0, 2 * kRandomVocab));
    }
    if (tiers_ != nullptr) {
      scheduler_.SetOffloadTiers(tiers_, FakeExecutor::BlockBytes(config.block_size),
                                 FakeExecutor::kStateBytes);
    }
  }

  void RunRandomOps(int num_ops) {
    for (int op = 0; op < num_ops && !::testing::Test::HasFailure(); ++op) {
      int r = Uniform(0, 99);
      if (r < 30) {
        Add();
      } else if (r < 85) {
        Step(/*abort_in_flight=*/false);
      } else if (r < 95) {
        AbortRandom();
      } else if (r < 97 && !tier_dir_.empty()) {
        CorruptRandomFile();
      } else {
        Step(/*abort_in_flight=*/true);
      }
      Check(absl::StrCat("after op ", op));
    }
  }

  // The graceful stop's write-down (EngineLoop::WriteDownCaches): every plan executed and
  // committed; returns the units written.
  int64_t WriteDown() {
    int64_t units = 0;
    while (const engine::StepPlan* plan = scheduler_.PlanWriteDown(int64_t{256} << 20)) {
      engine::StepResult result = executor_.Execute(*plan);
      result.step_id = plan->step_id;
      scheduler_.Commit(&result);
      units += static_cast<int64_t>(plan->cache_saves.size());
    }
    return units;
  }

  void Drain() {
    int steps = 0;
    while (scheduler_.HasWork() && steps < 5000 && !::testing::Test::HasFailure()) {
      Step(false);
      // Nothing runnable: a request waits for its prefix to be read from disk. The engine loop
      // sleeps then; here wait for the reads, or a loaded machine starves the reader thread
      // for longer than the steps last.
      if (!last_step_ran_ && tiers_ != nullptr && tiers_->disk() != nullptr) {
        tiers_->disk()->WaitForPrefetches();
      }
      Check(absl::StrCat("drain step ", steps++));
    }
    EXPECT_FALSE(scheduler_.HasWork());
    for (const auto& [id, t] : tracked_) {
      ASSERT_EQ(t.num_finish_events, 1) << id;
      if (*t.reason == FinishReason::kAbort) {
        ASSERT_LE(t.emitted.size(), t.expected.size()) << id;
        EXPECT_TRUE(std::equal(t.emitted.begin(), t.emitted.end(), t.expected.begin())) << id;
      } else {
        EXPECT_EQ(t.emitted, t.expected) << id;
        bool by_length = static_cast<int64_t>(t.expected.size()) == t.request.max_tokens;
        const int32_t last = t.expected.back();
        bool stop_token =
            (!t.request.ignore_eos && last == t.request.eos_token_id) ||
            std::count(t.request.stop_token_ids.begin(), t.request.stop_token_ids.end(), last) > 0;
        EXPECT_EQ(*t.reason, stop_token ? FinishReason::kStop : FinishReason::kLength) << id;
        EXPECT_TRUE(stop_token || by_length) << id;
      }
    }
    const auto& pool = scheduler_.block_pool();
    EXPECT_EQ(pool.num_free(), pool.num_blocks());  // cached blocks count as free
    // Idle live slots may hold checkpoints (lent to the prefix cache), no sequence's state.
    EXPECT_EQ(scheduler_.slot_pool().num_free() + scheduler_.prefix_cache().num_lent_slots(),
              scheduler_.slot_pool().num_slots());
    EXPECT_EQ(scheduler_.prefix_cache().num_pending_checkpoints(), 0);
    EXPECT_EQ(scheduler_.num_running(), 0);
    EXPECT_EQ(scheduler_.num_waiting(), 0);
    if (tiers_ != nullptr && tiers_->disk() != nullptr) {  // every read taken or cancelled
      tiers_->disk()->WaitForPrefetches();
      const kvcache::DiskTierStats disk = tiers_->disk()->stats();
      EXPECT_EQ(disk.prefetches_pending, 0);
      EXPECT_EQ(disk.prefetched_bytes, 0);
      EXPECT_LE(disk.bytes_used, disk.capacity_bytes);
    }
    if (tiers_ != nullptr && tiers_->host() != nullptr) {
      const kvcache::HostTierStats host = tiers_->host()->stats();
      EXPECT_LE(host.bytes_used, host.capacity_bytes);
    }
  }

  const Scheduler& scheduler() const { return scheduler_; }
  int num_requests() const { return static_cast<int>(tracked_.size()); }
  int num_scored_prompts() const { return num_scored_prompts_; }
  int64_t num_aligned_chunks() const { return num_aligned_chunks_; }
  int num_corrupted() const { return num_corrupted_; }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  void Add() {
    Request r;
    r.request_id = absl::StrCat("r", next_id_++);
    const auto& base = bases_[static_cast<size_t>(Uniform(0, 2))];
    int shared = Uniform(0, 24);
    r.prompt.assign(base.begin(), base.begin() + shared);
    for (int i = Uniform(shared == 0 ? 1 : 0, 6); i > 0; --i) r.prompt.push_back(Uniform(0, 40));
    if (r.prompt.empty()) r.prompt.push_back(1);
    const int64_t room = config_.max_model_len - static_cast<int64_t>(r.prompt.size());
    r.max_tokens = Uniform(1, 12);
    if (Uniform(0, 19) == 0) r.max_tokens = room + 1;  // invalid: too long
    r.eos_token_id = Uniform(0, 9) < 3 ? eos_ : -1;
    r.ignore_eos = Uniform(0, 9) < 2;
    if (Uniform(0, 9) < 2) r.stop_token_ids = {Uniform(0, vocab_ - 1)};
    r.priority = Uniform(0, 2);
    r.cache_salt = Uniform(0, 9) == 0 ? 1 : 0;
    if (Uniform(0, 4) == 0) r.prompt_logprobs = Uniform(0, 3);
    absl::StatusOr<SequenceId> id = scheduler_.Add(r);
    if (r.max_tokens > room) {
      ASSERT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
      return;
    }
    ASSERT_TRUE(id.ok()) << id.status();
    Tracked& t = tracked_[r.request_id];
    t.expected = FakeExecutor::ExpectedOutput(r, vocab_);
    t.request = std::move(r);
    live_.insert(t.request.request_id);
  }

  // Truncates, zeroes or swaps the bytes of a random tier file (a load of it must fail and
  // the sequence compute instead).
  void CorruptRandomFile() {
    tiers_->Flush();
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(tier_dir_)) {
      if (e.is_regular_file() && e.path().extension() == ".kvo") files.push_back(e.path());
    }
    if (files.empty()) return;
    const std::filesystem::path& f =
        files[static_cast<size_t>(Uniform(0, static_cast<int>(files.size()) - 1))];
    std::error_code ec;
    const auto size = std::filesystem::file_size(f, ec);
    if (ec) return;
    if (Uniform(0, 1) == 0) {
      std::filesystem::resize_file(f, size / 2, ec);
    } else {
      std::FILE* out = std::fopen(f.c_str(), "r+b");
      if (out == nullptr) return;
      std::fseek(out, static_cast<long>(size) - 8, SEEK_SET);
      const char zeros[8] = {};
      std::fwrite(zeros, 1, sizeof(zeros), out);
      std::fclose(out);
    }
    ++num_corrupted_;
  }

  void AbortRandom() {
    if (live_.empty() || Uniform(0, 9) == 0) {
      scheduler_.Abort("no-such-request");
      return;
    }
    auto it = live_.begin();
    std::advance(it, Uniform(0, static_cast<int>(live_.size()) - 1));
    scheduler_.Abort(*it);
  }

  // Sets last_step_ran_: whether the step ran a sequence.
  void Step(bool abort_in_flight) {
    engine::StepPlan plan = scheduler_.Schedule();
    last_step_ran_ = !plan.sequences.empty();
    ASSERT_LE(plan.num_tokens(), config_.max_num_batched_tokens);
    ASSERT_LE(static_cast<int32_t>(plan.sequences.size()), config_.max_num_seqs);
    for (const auto& s : plan.sequences) {  // written blocks are private (no copy-on-write)
      const int64_t end = s.num_computed_tokens + static_cast<int64_t>(s.token_ids.size());
      for (int64_t b = s.num_computed_tokens / config_.block_size;
           b < kvcache::NumBlocksFor(end, config_.block_size); ++b) {
        ASSERT_EQ(scheduler_.block_pool().ref_count(s.block_table[static_cast<size_t>(b)]), 1)
            << "seq " << s.seq_id << " writes a shared block";
      }
      // A chunk leaving tokens for later ends on the alignment grid (every cap on a chunk here
      // is at least the alignment, so a sequence waits for a step that reaches it).
      const int64_t align = config_.prefill_chunk_alignment;
      if (align > 1 && !s.sample) {
        ASSERT_EQ(end % align, 0) << "seq " << s.seq_id << " chunk [" << s.num_computed_tokens
                                  << ", " << end << ")";
        ++num_aligned_chunks_;
      }
    }
    Check("after Schedule");
    if (abort_in_flight) AbortRandom();
    engine::StepResult result = executor_.Execute(plan);
    for (const SequenceEvent& e : scheduler_.Commit(&result)) Record(e);
  }

  void Record(const SequenceEvent& e) {
    auto it = tracked_.find(e.request_id);
    ASSERT_NE(it, tracked_.end()) << e.request_id;
    Tracked& t = it->second;
    ASSERT_EQ(t.num_finish_events, 0) << e.request_id << " got an event after its end";
    if (e.token.has_value()) {
      size_t i = t.emitted.size();
      ASSERT_LT(i, t.expected.size()) << e.request_id;
      ASSERT_EQ(*e.token, t.expected[i]) << e.request_id << " token " << i;
      t.emitted.push_back(*e.token);
    }
    // Prompt scores arrive whole with the first token, exactly as the fake model scores them.
    if (e.token.has_value() && t.emitted.size() == 1 && t.request.prompt_logprobs >= 0) {
      const std::vector<engine::TokenScore> want = FakeExecutor::ExpectedPromptScores(t.request);
      ASSERT_EQ(e.prompt_scores.size(), want.size()) << e.request_id;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(e.prompt_scores[i].token_id, want[i].token_id) << e.request_id << " " << i;
        ASSERT_EQ(e.prompt_scores[i].logprob, want[i].logprob) << e.request_id << " " << i;
        ASSERT_EQ(e.prompt_scores[i].rank, want[i].rank) << e.request_id << " " << i;
        ASSERT_EQ(e.prompt_scores[i].top.size(), want[i].top.size()) << e.request_id;
      }
      if (!want.empty()) ++num_scored_prompts_;
    } else {
      ASSERT_TRUE(e.prompt_scores.empty()) << e.request_id;
    }
    ASSERT_EQ(e.num_output_tokens, static_cast<int64_t>(t.emitted.size())) << e.request_id;
    ASSERT_EQ(e.num_prompt_tokens, static_cast<int64_t>(t.request.prompt.size()));
    ASSERT_EQ(e.num_cached_tokens % config_.block_size, 0);
    ASSERT_LT(e.num_cached_tokens, e.num_prompt_tokens);
    if (e.finished.has_value()) {
      ++t.num_finish_events;
      t.reason = e.finished;
      live_.erase(e.request_id);
    }
  }

  void Check(const std::string& where) {
    absl::Status s = scheduler_.CheckInvariants();
    ASSERT_TRUE(s.ok()) << where << ": " << s;
    ASSERT_TRUE(executor_.errors().empty()) << where << ": " << executor_.errors().front();
  }

  SchedulerConfig config_;
  kvcache::OffloadTiers* tiers_;
  std::string tier_dir_;
  int num_corrupted_ = 0;
  bool last_step_ran_ = false;
  const int32_t vocab_;
  const int32_t eos_;
  std::mt19937_64 rng_;
  Scheduler scheduler_;
  FakeExecutor executor_;
  std::vector<int32_t> bases_[3];
  std::map<std::string, Tracked> tracked_;
  std::set<std::string> live_;
  int next_id_ = 0;
  int num_scored_prompts_ = 0;
  int64_t num_aligned_chunks_ = 0;  // non-final chunks ending on the alignment grid
};

// (policy, has_kda_layers, enable_prefix_caching, long_prefill_token_threshold,
//  num_speculative_tokens)
using Params = std::tuple<Policy, bool, bool, int, int>;

class SchedulerRandomTest : public ::testing::TestWithParam<Params> {};

SchedulerConfig RandomConfig(const Params& p) {
  SchedulerConfig c;
  c.policy = std::get<0>(p);
  c.has_kda_layers = std::get<1>(p);
  c.enable_prefix_caching = std::get<2>(p);
  c.long_prefill_token_threshold = std::get<3>(p);
  c.max_num_seqs = 5;
  c.max_num_batched_tokens = 12;
  c.max_model_len = 40;
  c.block_size = 4;
  c.num_blocks = 12;  // 48 tokens for up to 5 sequences of up to 40: constant pressure
  c.num_slots = 4;    // fewer than max_num_seqs: slot-limited admission too
  c.num_checkpoint_slots = 3;
  c.checkpoint_every_n_blocks = 2;
  c.max_scored_tokens_per_step = 7;  // prompt scoring cuts chunks too
  c.num_speculative_tokens = std::get<4>(p);
  c.prompt_lookup_min = 1;
  c.prompt_lookup_max = 3;
  // The priority runs also end chunks at multiples of 3 tokens where they can (the CUDA
  // engine's prefill_chunk_alignment, scaled to these budgets).
  c.prefill_chunk_alignment = c.policy == Policy::kPriority ? 3 : 0;
  return c;
}

TEST_P(SchedulerRandomTest, InvariantsHoldAndOutputsAreExact) {
  const SchedulerConfig config = RandomConfig(GetParam());
  int64_t preempted = 0, hits = 0, aborted = 0, finished = 0, scored = 0;
  int64_t drafts = 0, draft_tokens = 0, accepted = 0, aligned = 0;
  for (uint64_t seed : {1u, 2u, 3u}) {
    RandomOpsRun run(config, seed);
    run.RunRandomOps(2500);
    run.Drain();
    if (HasFailure()) return;
    SchedulerStats s = run.scheduler().stats();
    preempted += s.num_preempted_total;
    hits += s.num_prefix_hits;
    aborted += s.num_aborted_total;
    finished += s.num_finished_total;
    scored += run.num_scored_prompts();
    drafts += s.num_spec_drafts_total;
    draft_tokens += s.num_spec_draft_tokens_total;
    accepted += s.num_spec_accepted_tokens_total;
    aligned += run.num_aligned_chunks();
    EXPECT_EQ(s.num_aborted_total + s.num_finished_total, run.num_requests());
  }
  // The run must have exercised the interesting paths.
  EXPECT_GT(preempted, 20);
  EXPECT_GT(aborted, 20);
  EXPECT_GT(finished, 100);
  EXPECT_GT(scored, 20);
  if (config.enable_prefix_caching) {
    EXPECT_GT(hits, 10);
  } else {
    EXPECT_EQ(hits, 0);
  }
  if (config.prefill_chunk_alignment > 1) {
    EXPECT_GT(aligned, 100);
  }
  if (config.num_speculative_tokens > 0) {  // both accepted and rejected drafts, many times
    EXPECT_GT(drafts, 200);
    EXPECT_GT(accepted, 100);
    EXPECT_GT(draft_tokens - accepted, 100);
  } else {
    EXPECT_EQ(drafts, 0);
  }
  std::cout << "preempted " << preempted << ", prefix hits " << hits << ", drafts " << drafts
            << " (" << accepted << "/" << draft_tokens << " tokens accepted)\n";
}

INSTANTIATE_TEST_SUITE_P(AllModes, SchedulerRandomTest,
                         ::testing::Combine(::testing::Values(Policy::kFcfs, Policy::kPriority),
                                            ::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(0, 5), ::testing::Values(0, 4)),
                         [](const ::testing::TestParamInfo<Params>& info) {
                           // The priority runs align their chunks (RandomConfig).
                           return absl::StrCat(PolicyName(std::get<0>(info.param)),
                                               std::get<1>(info.param) ? "_kda" : "_mla",
                                               std::get<2>(info.param) ? "_prefix" : "_noprefix",
                                               "_threshold", std::get<3>(info.param),
                                               std::get<4>(info.param) > 0 ? "_spec" : "");
                         });

// The offload tiers under the same random operations (issue 48): what the prefix cache evicts
// goes down, admissions hit there (host at once, disk after read-ahead while others run), tier
// files are corrupted now and then, and loads race with aborts (also while reads are in flight)
// and preemptions. Outputs must stay exact, the pools consistent, and at the end no read is left
// pending and no tier is over its budget. (has_kda_layers, tiers: 0 host, 1 disk, 2 host over disk)
using OffloadParams = std::tuple<bool, int>;

class SchedulerRandomOffloadTest : public ::testing::TestWithParam<OffloadParams> {};

TEST_P(SchedulerRandomOffloadTest, InvariantsHoldAndOutputsAreExact) {
  SchedulerConfig config = RandomConfig(Params{Policy::kFcfs, std::get<0>(GetParam()), true, 0, 0});
  const int tiers_kind = std::get<1>(GetParam());
  int64_t tier_hits = 0, load_failures = 0, waits = 0, stored = 0, corrupted = 0, staged = 0;
  for (uint64_t seed : {1u, 2u, 3u}) {
    // Seeds 2 and 3 carry one unit of loads a step: hits load over several steps (racing with
    // aborts and preemptions), and their loads go beside the steps of the others.
    config.max_tier_load_bytes_per_step = seed == 1 ? int64_t{1} << 20 : 1;
    kvcache::testing::ScopedTempDir dir("random_offload");
    std::unique_ptr<kvcache::HostTier> host;
    std::unique_ptr<kvcache::DiskTier> disk;
    // Small tiers: a few dozen blocks, so they evict too.
    if (tiers_kind != 1) host = std::make_unique<kvcache::HostTier>(tiers_kind == 0 ? 4096 : 512);
    if (tiers_kind != 0) {
      kvcache::OffloadIdentity identity = kvcache::testing::TestIdentity();
      identity.block_size = config.block_size;
      auto opened = kvcache::DiskTier::Open(dir.path(), 64 * 1024, identity);
      ASSERT_TRUE(opened.ok()) << opened.status();
      disk = std::move(*opened);
    }
    kvcache::OffloadTiers tiers(std::move(host), std::move(disk));
    RandomOpsRun run(config, seed, &tiers, tiers_kind != 0 ? dir.path() : "");
    run.RunRandomOps(2500);
    run.Drain();
    if (HasFailure()) return;
    const SchedulerStats s = run.scheduler().stats();
    tier_hits += s.num_tier_hits;
    load_failures += s.num_tier_load_failures;
    waits += s.num_tier_waits;
    stored += s.num_tier_stored_units;
    staged += s.num_tier_staged_hits;
    corrupted += run.num_corrupted();
    EXPECT_EQ(s.num_aborted_total + s.num_finished_total, run.num_requests());
  }
  EXPECT_GT(stored, 100);
  EXPECT_GT(tier_hits, 20);
  EXPECT_GT(staged, 10);
  if (tiers_kind != 0) {
    EXPECT_GT(waits, 20);  // disk hits read ahead while the step goes on
    EXPECT_GT(corrupted, 10);
    EXPECT_GT(load_failures, 0);
  } else {
    EXPECT_EQ(waits, 0);
  }
  std::cout << "tier hits " << tier_hits << ", stored " << stored << ", waits " << waits
            << ", load failures " << load_failures << " (" << corrupted
            << " files corrupted), loaded over several steps " << staged << "\n";
}

// The graceful stop writes down what the device cache holds in batches the disk tier's writer
// queue takes whole: with a queue of 3 entries (far fewer than the cached units) nothing is
// dropped, and every unit listed reaches the tier.
TEST(SchedulerWriteDownTest, BatchesFitTheWriterQueue) {
  SchedulerConfig config = RandomConfig(Params{Policy::kFcfs, true, true, 0, 0});
  kvcache::testing::ScopedTempDir dir("write_down");
  kvcache::OffloadIdentity identity = kvcache::testing::TestIdentity();
  identity.block_size = config.block_size;
  kvcache::DiskTierOptions options;
  options.max_queued_writes = 3;
  auto opened = kvcache::DiskTier::Open(dir.path(), int64_t{64} << 20, identity, options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  kvcache::DiskTier* disk = opened->get();
  kvcache::OffloadTiers tiers(nullptr, std::move(*opened));
  RandomOpsRun run(config, 7, &tiers);
  run.RunRandomOps(400);
  run.Drain();
  tiers.Flush();
  const int64_t stored_before = run.scheduler().stats().num_tier_stored_units;
  const int64_t dropped_before = disk->stats().dropped_puts;  // spills under the small queue
  const int64_t written = run.WriteDown();
  tiers.Flush();
  EXPECT_GT(written, 3) << "too few cached units to cross the queue limit";
  EXPECT_EQ(disk->stats().dropped_puts, dropped_before);
  EXPECT_EQ(run.scheduler().stats().num_tier_stored_units, stored_before + written);
  EXPECT_EQ(run.WriteDown(), 0) << "everything was written down";
}

std::string OffloadName(const ::testing::TestParamInfo<OffloadParams>& info) {
  const int tiers = std::get<1>(info.param);
  return absl::StrCat(std::get<0>(info.param) ? "kda_" : "mla_",
                      tiers == 0 ? "host" : (tiers == 1 ? "disk" : "host_disk"));
}

INSTANTIATE_TEST_SUITE_P(Tiers, SchedulerRandomOffloadTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(0, 1, 2)),
                         OffloadName);

}  // namespace
}  // namespace strata::scheduler
