// SplitMix64 (Steele, Lea, Flood 2014; Vigna's splitmix64.c): the one 64-bit mixer every module
// uses for seeds, hashes and deterministic test data. Fully specified, platform-independent.
//   SplitMix64Mix(x)   the finaliser: x ^= x >> 30; x *= 0xbf58476d1ce4e5b9; x ^= x >> 27;
//                      x *= 0x94d049bb133111eb; x ^= x >> 31 (a bijection of 64-bit words)
//   SplitMix64Next(s)  the generator: s += 0x9e3779b97f4a7c15, then the finaliser of s
// (kernels/cuda/device_random.cu has the device copy of the finaliser; core knows no CUDA.)
#pragma once

#include <cstdint>

namespace strata {

inline constexpr uint64_t kSplitMix64Golden = 0x9e3779b97f4a7c15ull;

constexpr uint64_t SplitMix64Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Advances `state` and returns the next output.
constexpr uint64_t SplitMix64Next(uint64_t& state) {
  state += kSplitMix64Golden;
  return SplitMix64Mix(state);
}

}  // namespace strata
