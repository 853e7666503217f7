// Finds special-token strings (e.g. "<|im_end|>") in text: leftmost occurrence, longest token
// at that position. A byte trie walked only from bytes that start some token.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::engine {

class SpecialTokenMatcher {
 public:
  struct Match {
    size_t pos;
    size_t length;
    int32_t id;
  };

  SpecialTokenMatcher() = default;
  // `tokens`: (content, id); empty contents are ignored, later duplicates win.
  explicit SpecialTokenMatcher(const std::vector<std::pair<std::string, int32_t>>& tokens);

  // The first special token starting at or after `from`, or nullopt.
  std::optional<Match> FindNext(std::string_view text, size_t from) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, uint32_t>> children;  // sorted by byte
    int32_t id = -1;                                     // token ending here, -1 if none
  };
  uint32_t Child(uint32_t node, uint8_t byte) const;
  std::vector<Node> nodes_;
  bool starts_[256] = {};
};

}  // namespace strata::engine
