// Deterministic random weights for generated checkpoints.
//
// Every tensor draws from its own generator, seeded from (checkpoint seed, tensor name), so a
// tensor's bytes do not depend on which other tensors exist, on their order or on sharding.
// The generator (SplitMix64) and the normal sampler (Box–Muller) are implemented here rather
// than taken from <random>: std::normal_distribution differs between standard libraries, and
// the same options must give byte-identical files everywhere.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace strata::engine::demo {

// SplitMix64 (Steele, Lea, Flood 2014): 64-bit state, full period, fully specified.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next();
  // Uniform in [0, 1), 53 random bits.
  double Uniform();
  // Standard normal by the Box–Muller transform (both outputs of a pair are used).
  double Normal();

 private:
  uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// The seed of tensor `name` in a checkpoint generated with `seed` (FNV-1a of the name, mixed).
uint64_t TensorSeed(uint64_t seed, std::string_view name);

// How a tensor's values are drawn.
struct InitSpec {
  enum class Kind {
    kNormal,   // N(a, b²)
    kUniform,  // U[a, b)
  };
  Kind kind = Kind::kNormal;
  double a = 0.0;
  double b = 1.0;
  // When ≥ 0, only the first `num_random` values are drawn; the rest are 0 (K3's zero-padded
  // A_log). Negative: all values are drawn.
  int64_t num_random = -1;

  static InitSpec Normal(double mean, double stddev) { return {Kind::kNormal, mean, stddev}; }
  static InitSpec Uniform(double low, double high) { return {Kind::kUniform, low, high}; }
};

// `count` values drawn per `init` from a generator seeded with `seed`.
std::vector<float> SampleValues(const InitSpec& init, int64_t count, uint64_t seed);

// Little-endian bytes of `values` in `dtype` (kF32 or kBF16; bf16 rounds to nearest even).
std::vector<uint8_t> EncodeValues(const std::vector<float>& values, DType dtype);

}  // namespace strata::engine::demo
