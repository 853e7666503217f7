// Test helpers of the offload tiers' tests: a scoped temporary directory, identities, keys and
// deterministic payloads.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/splitmix64.h"
#include "kvcache/offload/offload_key.h"

namespace strata::kvcache::testing {

// A fresh directory under the test temp dir, removed with everything in it at scope end.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& name) {
    static std::atomic<int> counter{0};
    std::string root = ::testing::TempDir();
    if (!root.empty() && root.back() == '/') root.pop_back();
    path_ = absl::StrCat(root, "/strata_kv_offload_", name, "_", ::getpid(), "_", counter++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline OffloadIdentity TestIdentity() {
  OffloadIdentity identity;
  identity.checkpoint_fingerprint = "0123456789abcdef0123456789abcdef";
  identity.cache_dtype = "f32";
  identity.block_size = 16;
  identity.tensor_parallel_size = 2;
  identity.tensor_parallel_rank = 1;
  return identity;
}

// Key number `i`: well spread hashes, as real block hashes are.
inline OffloadKey TestKey(uint64_t i, OffloadKind kind = OffloadKind::kLatentBlock) {
  return OffloadKey{SplitMix64Mix(i + 1), kind};
}

// `size_bytes` deterministic bytes that depend on `seed`.
inline std::string TestPayload(uint64_t seed, size_t size_bytes) {
  std::string bytes(size_bytes, '\0');
  uint64_t state = seed * 1000003 + size_bytes;
  for (size_t i = 0; i < size_bytes; ++i) {
    bytes[i] = static_cast<char>(SplitMix64Next(state) & 0xff);
  }
  return bytes;
}

}  // namespace strata::kvcache::testing
