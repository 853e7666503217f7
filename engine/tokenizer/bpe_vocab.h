// The mergeable part of a byte-level BPE vocabulary: token bytes <-> rank.
//
// In tiktoken's scheme a token's rank is both its id and its merge priority: adjacent parts
// (a, b) of a word may merge iff bytes(a)+bytes(b) is itself a token, and the pair whose merged
// token has the lowest rank merges first. This class answers both lookups:
//   Rank(bytes)           whole-piece lookup (hash of the bytes)
//   PairRank(left, right) rank of bytes(left)+bytes(right), precomputed for every token that
//                         splits into two tokens, so merging never hashes byte strings.
// Every single byte must be a token (true of all real vocabularies), so every part of a word is
// always a token and BPE can work on ranks alone.
//
// Immutable after construction and shared between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace strata::engine {

class BpeVocab {
 public:
  static constexpr uint32_t kNoRank = UINT32_MAX;

  // Parses the tiktoken text format: one `base64(token bytes) rank` per line, blank lines
  // ignored. Errors name the line: bad base64, bad rank, duplicate token or rank, a missing
  // single-byte token.
  static absl::StatusOr<std::shared_ptr<const BpeVocab>> FromTiktoken(std::string_view text);

  // Builds from tokens listed in rank order (rank = index).
  static absl::StatusOr<std::shared_ptr<const BpeVocab>> FromTokens(
      const std::vector<std::string>& tokens);

  // No tokens at all (rank_end 0): the vocabulary of Tokenizer::WithoutTokens, which never
  // encodes.
  static std::shared_ptr<const BpeVocab> Empty();

  // The tiktoken file text, ranks ascending (byte-identical to OpenAI's files for their
  // vocabularies).
  std::string ToTiktoken() const;

  uint32_t Rank(std::string_view bytes) const {
    auto it = rank_of_.find(bytes);
    return it == rank_of_.end() ? kNoRank : it->second;
  }
  uint32_t ByteRank(uint8_t byte) const { return byte_rank_[byte]; }
  uint32_t PairRank(uint32_t left, uint32_t right) const {
    auto it = pair_rank_.find((uint64_t{left} << 32) | right);
    return it == pair_rank_.end() ? kNoRank : it->second;
  }

  bool HasRank(uint32_t rank) const {
    return rank < offsets_.size() - 1 && offsets_[rank] != offsets_[rank + 1];
  }
  // Bytes of a token; empty when `rank` is not a token.
  std::string_view TokenBytes(uint32_t rank) const {
    if (rank >= offsets_.size() - 1) return {};
    return std::string_view(storage_).substr(offsets_[rank], offsets_[rank + 1] - offsets_[rank]);
  }
  // One past the highest rank (ids of special tokens usually start here).
  uint32_t rank_end() const { return static_cast<uint32_t>(offsets_.size() - 1); }
  size_t num_tokens() const { return rank_of_.size(); }

 private:
  BpeVocab() = default;
  static absl::StatusOr<std::shared_ptr<const BpeVocab>> Build(
      std::vector<std::pair<std::string, uint32_t>> entries);

  std::string storage_;            // token bytes, concatenated in rank order
  std::vector<uint32_t> offsets_;  // [rank_end + 1]; empty range = no token at that rank
  absl::flat_hash_map<std::string_view, uint32_t> rank_of_;  // views into storage_
  absl::flat_hash_map<uint64_t, uint32_t> pair_rank_;        // (left << 32 | right) -> rank
  uint32_t byte_rank_[256] = {};
};

}  // namespace strata::engine
