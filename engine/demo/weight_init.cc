#include "engine/demo/weight_init.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "core/check.h"
#include "core/splitmix64.h"

namespace strata::engine::demo {

uint64_t SplitMix64::Next() { return SplitMix64Next(state_); }

double SplitMix64::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

double SplitMix64::Normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // u1 in (0, 1] so that log(u1) is finite.
  const double u1 = static_cast<double>((Next() >> 11) + 1) * 0x1.0p-53;
  const double u2 = Uniform();
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  spare_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

uint64_t TensorSeed(uint64_t seed, std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a 64
  for (char c : name) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 0x100000001b3ULL;
  }
  SplitMix64 mix(seed ^ hash);
  return mix.Next();
}

std::vector<float> SampleValues(const InitSpec& init, int64_t count, uint64_t seed) {
  CHECK_GE(count, 0);
  std::vector<float> values(static_cast<size_t>(count), 0.0f);
  const int64_t num_random = init.num_random < 0 ? count : std::min(init.num_random, count);
  SplitMix64 rng(seed);
  for (int64_t i = 0; i < num_random; ++i) {
    double value = 0.0;
    switch (init.kind) {
      case InitSpec::Kind::kNormal:
        value = init.a + init.b * rng.Normal();
        break;
      case InitSpec::Kind::kUniform:
        value = init.a + (init.b - init.a) * rng.Uniform();
        break;
    }
    values[static_cast<size_t>(i)] = static_cast<float>(value);
  }
  return values;
}

std::vector<uint8_t> EncodeValues(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> bytes;
  if (dtype == DType::kF32) {
    bytes.resize(values.size() * 4);
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], 4);
      for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<uint8_t>(bits >> (8 * b));
    }
    return bytes;
  }
  CHECK(dtype == DType::kBF16) << "unsupported dtype " << DTypeName(dtype);
  bytes.resize(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = F32ToBf16(values[i]);
    bytes[2 * i] = static_cast<uint8_t>(bits & 0xff);
    bytes[2 * i + 1] = static_cast<uint8_t>(bits >> 8);
  }
  return bytes;
}

}  // namespace strata::engine::demo
