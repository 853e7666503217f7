// Chained block hashes for prefix caching.
//
// A full block's hash covers its own token ids, the hash of the block before it (so it names
// the whole prefix up to the block's end) and a `cache_salt` (tenant / LoRA / media key: equal
// tokens under different salts never share cache entries).
//
// The function is fixed and platform-independent (defined on integer values, not on memory
// layout; no std::hash), so hashes are stable across processes, builds and machines:
//
//   Mix(x)      = splitmix64 finaliser:  x ^= x >> 30; x *= 0xbf58476d1ce4e5b9;
//                                        x ^= x >> 27; x *= 0x94d049bb133111eb; x ^= x >> 31
//   Absorb(h,w) = Mix((h ^ w) + 0x9e3779b97f4a7c15)                  (all arithmetic mod 2^64)
//   h = Absorb(Absorb(Absorb(0, parent), cache_salt), n)
//   for each pair of tokens (t[i], t[i+1]), i = 0, 2, 4, ...:
//     h = Absorb(h, uint32(t[i]) | uint32(t[i+1]) << 32)    (an odd last token: high half 0)
//   HashBlock = h
//
// The first block of a sequence has parent kRootHash (0).
//
// Not cryptographic: Mix is invertible, so anyone who knows the salt can construct two token
// blocks with the same hash. A multi-tenant server must therefore fold a per-process secret
// into every `cache_salt` (e.g. salt = HashBlock(secret, tenant_key...)), which makes hash
// values unpredictable from outside. Blocks that contain media placeholder tokens must fold a
// content hash of the media into the salt of those blocks (the placeholder ids are identical
// for different images).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "kvcache/ids.h"

namespace strata::kvcache {

inline constexpr BlockHash kRootHash = 0;

// Hash of one block of `n` >= 0 token ids whose prefix hashes to `parent`.
BlockHash HashBlock(BlockHash parent, const int32_t* token_ids, int n, uint64_t cache_salt);

// Tokens [begin, end) hold a media item with this content key (an image's rows).
struct MediaKeySpan {
  int64_t begin = 0;
  int64_t end = 0;
  uint64_t key = 0;
};

// The salt of block `index`: `cache_salt` with the key of every span of `media` (ascending)
// that overlaps the block folded in; `cache_salt` itself when none does.
uint64_t BlockSalt(uint64_t cache_salt, int64_t index, int block_size,
                   absl::Span<const MediaKeySpan> media);

// Chained hashes of the full blocks of `tokens` (floor(size / block_size) of them; a trailing
// partial block is not hashed), each under its BlockSalt. Element i names tokens
// [0, (i + 1) * block_size).
std::vector<BlockHash> HashFullBlocks(const std::vector<int32_t>& tokens, int block_size,
                                      uint64_t salt, absl::Span<const MediaKeySpan> media = {});

}  // namespace strata::kvcache
