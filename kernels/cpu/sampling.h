// Vectorised helpers for token sampling and log-probabilities over a logits row [n] (f32):
// max / argmax, Σ exp for log-sum-exp and tail masses, exact top-k selection without sorting
// the row, and the repetition / presence / frequency penalties over dense per-token arrays.
// AVX-512 or AVX2 by ActiveIsa() (the scalar ISA uses the AVX2 baseline code: these helpers
// have no separate reference). No heap allocation; callers pass scratch.
// Inputs must not contain NaN unless stated.
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

// A candidate token. Ranking order ("better"): value descending, then id ascending. Branch-free
// (the comparisons' outcomes are random in partitions and sorts).
struct ScoredId {
  float value;
  int32_t id;
};
inline bool Better(const ScoredId& a, const ScoredId& b) {
  return (a.value > b.value) | ((a.value == b.value) & (a.id < b.id));
}

// max x[0, n), n ≥ 1.
float Max(const float* x, int64_t n);

// The lowest index of the maximum (std::max_element's choice), n ≥ 1.
int64_t Argmax(const float* x, int64_t n);

// Σ exp((x_i − shift) · scale) over the x_i < `below` (f32 exp, ≤ 2 ulp each; f64 sum of f32
// block partials), and how many x_i == below. below = +inf sums every finite x_i.
struct ExpSum {
  double sum = 0.0;
  int64_t num_equal = 0;
};
ExpSum SumExpBelow(const float* x, int64_t n, float shift, float scale, float below);

// out_i = exp((x_i − shift) · scale): the f32 exp SumExpBelow sums (≤ 2 ulp), 0 where x_i or
// the product is NaN. out may be x.
void ExpShifted(const float* x, int64_t n, float shift, float scale, float* out);

// log Σ exp(x_i) = max + log Σ exp(x_i − max), n ≥ 1.
double LogSumExp(const float* x, int64_t n);

// Scratch elements TopK needs for k.
constexpr int64_t TopKScratchSize(int64_t k) { return 2 * k + 32; }

// The k best entries of x[0, n) (1 ≤ k ≤ n) into scratch[0, k), sorted best first (exactly the
// first k of a full sort by Better). scratch: TopKScratchSize(k) elements. NaN ranks last.
// Cost: one vector pass over x plus O(k log k) work per ~k entries that beat the running k-th.
void TopK(const float* x, int64_t n, int64_t k, ScoredId* scratch);

// x_i = seen_i ? (x_i > 0 ? x_i / penalty : x_i · penalty) : x_i   (seen_i ∈ {0, 1})
void ApplyRepetitionPenalty(float* x, const uint8_t* seen, int64_t n, float penalty);

// x_i −= fma(frequency, count_i, presence) where count_i > 0 (count_i ≥ 0).
void ApplyPresenceFrequencyPenalty(float* x, const int32_t* counts, int64_t n, float presence,
                                   float frequency);

}  // namespace strata::kernels::cpu
