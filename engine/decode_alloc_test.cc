// Steady-state decode allocates nothing: after prefill and a few warm-up steps, further decode
// steps of a reused plan (only token ids and num_computed_tokens change) run
// CpuExecutor::ExecuteInto — Model::Forward, sampling, log-probabilities — without one heap
// allocation, on tiny K3-shaped (MLA + KDA + AttnRes + LatentMoE) and Kimi-Linear-shaped
// checkpoints, greedy and sampled, with and without log-probabilities.
//
// This binary replaces the global operator new/delete (every variant) and the C allocation
// functions with counting versions. Debugging a failure: STRATA_ALLOC_BACKTRACE=1 prints a
// backtrace of every counted allocation to stderr (symbolise with addr2line or gdb).
#include <execinfo.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/demo/checkpoint_generator.h"
#include "engine/executor.h"
#include "engine/model.h"
#include "engine/sampling.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STRATA_COUNT_ALLOCATIONS 0  // the sanitizers own malloc and operator new
#else
#define STRATA_COUNT_ALLOCATIONS 1
#endif

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
std::atomic<int64_t> g_frees{0};
std::atomic<bool> g_in_backtrace{false};
const bool g_backtrace = std::getenv("STRATA_ALLOC_BACKTRACE") != nullptr;

void NoteAllocation() {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (g_backtrace && !g_in_backtrace.exchange(true)) {
    void* frames[48];
    const int n = backtrace(frames, 48);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    const char line[] = "---- end of allocation backtrace\n";
    (void)!write(STDERR_FILENO, line, sizeof(line) - 1);
    g_in_backtrace.store(false);
  }
}

void NoteFree(void* p) {
  if (p != nullptr && g_counting.load(std::memory_order_relaxed)) {
    g_frees.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace

#if STRATA_COUNT_ALLOCATIONS
// glibc's implementations behind the public names (exported by libc.so.6).
extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void __libc_free(void* p);

void* malloc(size_t size) noexcept {
  NoteAllocation();
  return __libc_malloc(size);
}
void* calloc(size_t count, size_t size) noexcept {
  NoteAllocation();
  return __libc_calloc(count, size);
}
void* realloc(void* p, size_t size) noexcept {
  NoteAllocation();
  return __libc_realloc(p, size);
}
void* memalign(size_t alignment, size_t size) noexcept {
  NoteAllocation();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(size_t alignment, size_t size) noexcept {
  NoteAllocation();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  NoteAllocation();
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(size_t size) noexcept {
  NoteAllocation();
  return __libc_memalign(static_cast<size_t>(sysconf(_SC_PAGESIZE)), size);
}
void free(void* p) noexcept {
  NoteFree(p);
  __libc_free(p);
}
}  // extern "C"

namespace {

void* Allocate(std::size_t size) {
  NoteAllocation();
  void* p = __libc_malloc(size == 0 ? 1 : size);
  if (p == nullptr) std::abort();  // the test never runs out of memory
  return p;
}

void* AllocateAligned(std::size_t size, std::align_val_t alignment) {
  NoteAllocation();
  const size_t a = std::max(static_cast<size_t>(alignment), sizeof(void*));
  void* p = __libc_memalign(a, size == 0 ? 1 : size);
  if (p == nullptr) std::abort();
  return p;
}

void Release(void* p) {
  NoteFree(p);
  __libc_free(p);
}

}  // namespace

void* operator new(std::size_t n) { return Allocate(n); }
void* operator new[](std::size_t n) { return Allocate(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return Allocate(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return Allocate(n); }
void* operator new(std::size_t n, std::align_val_t a) { return AllocateAligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return AllocateAligned(n, a); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return AllocateAligned(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return AllocateAligned(n, a);
}
void operator delete(void* p) noexcept { Release(p); }
void operator delete[](void* p) noexcept { Release(p); }
void operator delete(void* p, std::size_t) noexcept { Release(p); }
void operator delete[](void* p, std::size_t) noexcept { Release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { Release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { Release(p); }
void operator delete(void* p, std::align_val_t) noexcept { Release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { Release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { Release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { Release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { Release(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { Release(p); }
#endif  // STRATA_COUNT_ALLOCATIONS

namespace strata::engine {
namespace {

constexpr int kBlockSize = 16;
constexpr int kBlocksPerSequence = 4;  // 64 positions: prompt + 4 warm-up + 8 counted steps
constexpr int kWarmupSteps = 4;
constexpr int kCountedSteps = 8;

struct SamplingCase {
  std::string name;
  SamplingParams params;
  int num_logprobs;
};

std::vector<SamplingCase> SamplingCases() {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams top;  // top-k and top-p on the candidate set
  top.temperature = 0.8f;
  top.top_k = 20;
  top.top_p = 0.9f;
  SamplingParams penalised;  // the whole vocabulary, min-p, every penalty and a bias
  penalised.temperature = 1.0f;
  penalised.min_p = 0.05f;
  penalised.repetition_penalty = 1.3f;
  penalised.presence_penalty = 0.5f;
  penalised.frequency_penalty = 0.25f;
  penalised.logit_bias = {{3, 2.0f}};
  std::vector<SamplingCase> cases;
  for (int logprobs : {-1, 0, 3}) {
    const std::string suffix = logprobs < 0 ? "" : " logprobs=" + std::to_string(logprobs);
    cases.push_back({"greedy" + suffix, greedy, logprobs});
    cases.push_back({"top-k/top-p" + suffix, top, logprobs});
    cases.push_back({"min-p+penalties" + suffix, penalised, logprobs});
  }
  return cases;
}

class DecodeAllocTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "/decode_alloc_" + GetParam() + "_" + std::to_string(::getpid());
    engine::demo::GeneratorOptions options;
    options.family = GetParam();
    options.preset = "tiny";
    options.seed = 11;
    auto generated = engine::demo::GenerateCheckpoint(options, dir_);
    ASSERT_TRUE(generated.ok()) << generated.status();
    auto model = Model::Load(dir_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  kvcache::CacheLayout Layout(int num_sequences) const {
    return kvcache::LayoutWithPools(CacheSpecFor(model_->config()), kBlockSize,
                                    num_sequences * kBlocksPerSequence, num_sequences, 0);
  }

  // Three sequences of different prompt lengths, prefilled in one step.
  StepPlan PrefillPlan(const SamplingCase& c, bool has_kda) const {
    const int64_t vocab = model_->config().vocab_size;
    StepPlan plan;
    for (int s = 0; s < 3; ++s) {
      ScheduledSequence seq;
      seq.seq_id = s;
      for (int i = 0; i < 3 + 4 * s; ++i) {
        seq.token_ids.push_back(static_cast<int32_t>((i * 31 + s * 7 + 1) % vocab));
      }
      for (int b = 0; b < kBlocksPerSequence; ++b) {
        seq.block_table.push_back(s * kBlocksPerSequence + b);
      }
      seq.slot = has_kda ? s : -1;
      seq.slot_init = SlotInit::kZero;
      seq.sample = true;
      seq.sampler = std::make_shared<Sampler>(c.params, 100 + s, seq.token_ids);
      seq.num_logprobs = c.num_logprobs;
      plan.sequences.push_back(std::move(seq));
    }
    return plan;
  }

  std::string dir_;
  std::unique_ptr<Model> model_;
};

// The next decode step of the same plan: one new token (the sampled one) per sequence.
void Advance(StepPlan& plan, const StepResult& result) {
  ++plan.step_id;
  for (size_t s = 0; s < plan.sequences.size(); ++s) {
    ScheduledSequence& seq = plan.sequences[s];
    seq.num_computed_tokens += static_cast<int64_t>(seq.token_ids.size());
    seq.token_ids.resize(1);  // never grows: no allocation
    seq.token_ids[0] = result.sampled[s].token_id;
    seq.slot_init = SlotInit::kCarry;
  }
}

void CheckResult(const StepResult& result, const SamplingCase& c, int64_t vocab) {
  ASSERT_EQ(result.sampled.size(), 3u);
  for (const SampledToken& t : result.sampled) {
    EXPECT_TRUE(t.token_id >= 0 && t.token_id < vocab) << t.token_id;
    if (c.num_logprobs < 0) continue;
    EXPECT_TRUE(std::isfinite(t.logprob) && t.logprob <= 0.0f) << t.logprob;
    ASSERT_EQ(t.top_logprobs.size(), static_cast<size_t>(c.num_logprobs));
    for (size_t i = 1; i < t.top_logprobs.size(); ++i) {
      EXPECT_GE(t.top_logprobs[i - 1].logprob, t.top_logprobs[i].logprob);
    }
  }
}

TEST_P(DecodeAllocTest, SteadyStateDecodeStepsAllocateNothing) {
  if (!STRATA_COUNT_ALLOCATIONS) GTEST_SKIP() << "allocation counting is off under sanitizers";
  {
    void* frames[4];
    backtrace(frames, 4);  // loads the unwinder now, not inside a counted step
  }
  const int64_t vocab = model_->config().vocab_size;
  const bool has_kda = model_->geometry().num_kda_layers > 0;
  for (const SamplingCase& c : SamplingCases()) {
    SCOPED_TRACE(c.name);
    CpuExecutor executor(*model_, Layout(3));
    StepPlan plan = PrefillPlan(c, has_kda);
    StepResult result;
    executor.ExecuteInto(plan, &result);
    CheckResult(result, c, vocab);
    for (int step = 0; step < kWarmupSteps; ++step) {
      Advance(plan, result);
      executor.ExecuteInto(plan, &result);
    }
    g_allocations = 0;
    g_frees = 0;
    g_counting = true;
    for (int step = 0; step < kCountedSteps; ++step) {
      Advance(plan, result);
      executor.ExecuteInto(plan, &result);
    }
    g_counting = false;
    EXPECT_EQ(g_allocations.load(), 0) << "heap allocations in " << kCountedSteps
                                       << " decode steps (STRATA_ALLOC_BACKTRACE=1 shows where)";
    EXPECT_EQ(g_frees.load(), 0) << "frees in " << kCountedSteps << " decode steps";
    CheckResult(result, c, vocab);
  }
}

// The counters see allocations at all (a test that cannot fail is no test).
TEST(DecodeAllocCounterTest, CountsOperatorNewAndMalloc) {
  if (!STRATA_COUNT_ALLOCATIONS) GTEST_SKIP() << "allocation counting is off under sanitizers";
  g_allocations = 0;
  g_counting = true;
  auto v = std::make_unique<std::vector<int>>(100);
  void* p = std::malloc(16);
  asm volatile("" : : "g"(v.get()), "g"(p) : "memory");  // keep both allocations
  g_counting = false;
  std::free(p);
  EXPECT_EQ(g_allocations.load(), 3);  // the vector object, its elements, the malloc
}

INSTANTIATE_TEST_SUITE_P(Families, DecodeAllocTest, testing::Values("k3", "kimi-linear"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param == "k3" ? std::string("k3") : "kimi_linear";
                         });

}  // namespace
}  // namespace strata::engine
