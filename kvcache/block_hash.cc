#include "kvcache/block_hash.h"

#include "core/check.h"
#include "core/splitmix64.h"

namespace strata::kvcache {
namespace {

constexpr uint64_t Absorb(uint64_t h, uint64_t word) {
  return SplitMix64Mix((h ^ word) + kSplitMix64Golden);
}

}  // namespace

BlockHash HashBlock(BlockHash parent, const int32_t* token_ids, int n, uint64_t cache_salt) {
  CHECK_GE(n, 0);
  uint64_t h = Absorb(Absorb(Absorb(0, parent), cache_salt), static_cast<uint64_t>(n));
  int i = 0;
  for (; i + 1 < n; i += 2) {
    uint64_t lo = static_cast<uint32_t>(token_ids[i]);
    uint64_t hi = static_cast<uint32_t>(token_ids[i + 1]);
    h = Absorb(h, lo | (hi << 32));
  }
  if (i < n) h = Absorb(h, static_cast<uint32_t>(token_ids[i]));
  return h;
}

uint64_t BlockSalt(uint64_t cache_salt, int64_t index, int block_size,
                   absl::Span<const MediaKeySpan> media) {
  const int64_t begin = index * block_size, end = begin + block_size;
  uint64_t salt = cache_salt;
  for (const MediaKeySpan& m : media) {
    if (m.begin < end && m.end > begin) salt = Absorb(salt, m.key);
  }
  return salt;
}

std::vector<BlockHash> HashFullBlocks(const std::vector<int32_t>& tokens, int block_size,
                                      uint64_t salt, absl::Span<const MediaKeySpan> media) {
  CHECK_GT(block_size, 0);
  size_t num_full = tokens.size() / static_cast<size_t>(block_size);
  std::vector<BlockHash> hashes;
  hashes.reserve(num_full);
  BlockHash parent = kRootHash;
  for (size_t b = 0; b < num_full; ++b) {
    parent = HashBlock(parent, tokens.data() + b * block_size, block_size,
                       BlockSalt(salt, static_cast<int64_t>(b), block_size, media));
    hashes.push_back(parent);
  }
  return hashes;
}

}  // namespace strata::kvcache
