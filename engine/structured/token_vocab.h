// The vocabulary as bytes, arranged for masking logits with a byte-level matcher: a trie of
// every token (tokens sharing a prefix share its matcher steps) and a second trie of only the
// tokens that are not "plain" string content, with the plain ones as a bit set (inside a JSON
// string every plain token is acceptable, so only the others need a walk).
//
//   trie: node 0 = empty prefix;  node.children → [first_child, first_child + num_children)
//         of `children` (node ids) and `child_bytes` (the edge labels), byte-ascending
//
// Built once per served model; immutable and shared by every request after that.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::structured {

struct TokenTrie {
  struct Node {
    int32_t token = -1;  // the token whose bytes end here, or −1
    int32_t first_child = 0;
    int32_t num_children = 0;
  };
  std::vector<Node> nodes;
  std::vector<int32_t> children;
  std::vector<uint8_t> child_bytes;
};

class TokenVocab {
 public:
  // token_bytes[id]: the bytes of token `id`; empty for ids a constraint never allows (special
  // tokens, unused ids). If two ids share their bytes, only the lower one is ever allowed.
  explicit TokenVocab(std::vector<std::string> token_bytes);

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  const TokenTrie& all() const { return all_; }
  const TokenTrie& non_plain() const { return non_plain_; }
  // Bit `id` (word id / 64) set when token `id` is non-empty, every byte is plain
  // (IsPlainStringByte) and they are well-formed UTF-8 from a code point boundary (the tokens
  // JsonMatchState::PlainStringRoom describes).
  const std::vector<uint64_t>& plain_mask() const { return plain_mask_; }
  // Code points a plain token starts (its UTF-8 lead bytes), saturating at 255; 0 for others.
  uint8_t plain_code_points(int32_t id) const {
    return plain_code_points_[static_cast<size_t>(id)];
  }

 private:
  std::vector<std::string> bytes_;
  TokenTrie all_;
  TokenTrie non_plain_;
  std::vector<uint64_t> plain_mask_;
  std::vector<uint8_t> plain_code_points_;
};

}  // namespace strata::structured
