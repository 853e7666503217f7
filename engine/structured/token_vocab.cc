// token_vocab.h: the tries and the plain-token mask.
#include "engine/structured/token_vocab.h"

#include <algorithm>

#include "engine/structured/json_matcher.h"

namespace strata::structured {
namespace {

class TrieBuilder {
 public:
  TrieBuilder(const std::vector<std::string>& bytes, TokenTrie* trie)
      : bytes_(bytes), trie_(trie) {}

  // `ids` sorted by their bytes (ties by id).
  void Build(const std::vector<int32_t>& ids) {
    trie_->nodes.clear();
    trie_->children.clear();
    trie_->child_bytes.clear();
    trie_->nodes.emplace_back();
    Fill(0, ids, 0, ids.size(), 0);
  }

 private:
  const std::string& B(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

  // Fills node `n`, the prefix of length `depth` shared by ids[lo, hi).
  void Fill(int32_t n, const std::vector<int32_t>& ids, size_t lo, size_t hi, size_t depth) {
    if (lo < hi && B(ids[lo]).size() == depth) {
      trie_->nodes[static_cast<size_t>(n)].token = ids[lo];
      while (lo < hi && B(ids[lo]).size() == depth) ++lo;  // same bytes: the lowest id wins
    }
    // Children: one per distinct byte at `depth`, their slots reserved before recursing.
    std::vector<std::pair<size_t, size_t>> groups;
    for (size_t i = lo; i < hi;) {
      size_t j = i + 1;
      while (j < hi && B(ids[j])[depth] == B(ids[i])[depth]) ++j;
      groups.emplace_back(i, j);
      i = j;
    }
    const auto first = static_cast<int32_t>(trie_->children.size());
    trie_->nodes[static_cast<size_t>(n)].first_child = first;
    trie_->nodes[static_cast<size_t>(n)].num_children = static_cast<int32_t>(groups.size());
    trie_->children.resize(trie_->children.size() + groups.size());
    trie_->child_bytes.resize(trie_->children.size());
    for (size_t k = 0; k < groups.size(); ++k) {
      const auto child = static_cast<int32_t>(trie_->nodes.size());
      trie_->nodes.emplace_back();
      trie_->children[static_cast<size_t>(first) + k] = child;
      trie_->child_bytes[static_cast<size_t>(first) + k] =
          static_cast<uint8_t>(B(ids[groups[k].first])[depth]);
      Fill(child, ids, groups[k].first, groups[k].second, depth + 1);
    }
  }

  const std::vector<std::string>& bytes_;
  TokenTrie* trie_;
};

// Plain bytes, well-formed UTF-8 from a code point boundary (possibly ending inside one).
bool IsPlain(const std::string& bytes) {
  uint8_t utf8 = 0;
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    if (!IsPlainStringByte(b)) return false;
    utf8 = Utf8Next(utf8, b);
    if (utf8 == kUtf8Bad) return false;
  }
  return !bytes.empty();
}

}  // namespace

TokenVocab::TokenVocab(std::vector<std::string> token_bytes) : bytes_(std::move(token_bytes)) {
  std::vector<int32_t> all, non_plain;
  plain_mask_.assign((bytes_.size() + 63) / 64, 0);
  plain_code_points_.assign(bytes_.size(), 0);
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (bytes_[id].empty()) continue;
    all.push_back(static_cast<int32_t>(id));
    if (IsPlain(bytes_[id])) {
      plain_mask_[id / 64] |= uint64_t{1} << (id % 64);
      int leads = 0;
      for (char c : bytes_[id]) leads += (static_cast<uint8_t>(c) & 0xC0) != 0x80 ? 1 : 0;
      plain_code_points_[id] = static_cast<uint8_t>(std::min(leads, 255));
    } else {
      non_plain.push_back(static_cast<int32_t>(id));
    }
  }
  auto by_bytes = [this](int32_t a, int32_t b) {
    const int c = bytes(a).compare(bytes(b));
    return c != 0 ? c < 0 : a < b;
  };
  std::sort(all.begin(), all.end(), by_bytes);
  std::sort(non_plain.begin(), non_plain.end(), by_bytes);
  TrieBuilder(bytes_, &all_).Build(all);
  TrieBuilder(bytes_, &non_plain_).Build(non_plain);
  // Ids with equal bytes are adjacent in `all` (ties by id): only the lowest is ever allowed.
  for (size_t k = 1; k < all.size(); ++k) {
    if (bytes(all[k]) == bytes(all[k - 1])) {
      const auto id = static_cast<size_t>(all[k]);
      plain_mask_[id / 64] &= ~(uint64_t{1} << (id % 64));
    }
  }
}

}  // namespace strata::structured
