#include "engine/tokenizer/special_tokens.h"

#include <algorithm>

namespace strata::engine {
namespace {
constexpr uint32_t kNoChild = UINT32_MAX;
}  // namespace

SpecialTokenMatcher::SpecialTokenMatcher(
    const std::vector<std::pair<std::string, int32_t>>& tokens) {
  nodes_.emplace_back();
  for (const auto& [content, id] : tokens) {
    if (content.empty()) continue;
    starts_[static_cast<uint8_t>(content[0])] = true;
    uint32_t node = 0;
    for (char c : content) {
      const uint8_t b = static_cast<uint8_t>(c);
      uint32_t child = Child(node, b);
      if (child == kNoChild) {
        child = static_cast<uint32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& kids = nodes_[node].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, uint32_t{0})),
                    {b, child});
      }
      node = child;
    }
    nodes_[node].id = id;
  }
}

uint32_t SpecialTokenMatcher::Child(uint32_t node, uint8_t byte) const {
  const auto& kids = nodes_[node].children;
  auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, uint32_t{0}));
  return it != kids.end() && it->first == byte ? it->second : kNoChild;
}

std::optional<SpecialTokenMatcher::Match> SpecialTokenMatcher::FindNext(std::string_view text,
                                                                        size_t from) const {
  if (nodes_.size() <= 1) return std::nullopt;
  for (size_t i = from; i < text.size(); ++i) {
    if (!starts_[static_cast<uint8_t>(text[i])]) continue;
    uint32_t node = 0;
    std::optional<Match> best;
    for (size_t j = i; j < text.size(); ++j) {
      node = Child(node, static_cast<uint8_t>(text[j]));
      if (node == kNoChild) break;
      if (nodes_[node].id >= 0) best = Match{i, j + 1 - i, nodes_[node].id};
    }
    if (best.has_value()) return best;
  }
  return std::nullopt;
}

}  // namespace strata::engine
