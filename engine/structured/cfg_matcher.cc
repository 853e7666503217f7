// cfg_matcher.h: stacks are built as linked nodes in a per-thread arena while a byte is taken
// (rule expansion then shares the part below the top instead of copying it), then written out
// flat, sorted and without repeats.
#include "engine/structured/cfg_matcher.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace strata::structured {
namespace {

struct Link {
  int32_t pos = 0;
  int32_t below = -1;  // the link under this one; −1: the bottom
};

struct Arena {
  std::vector<Link> links;
  std::vector<int32_t> raw;                       // emitted stacks, positions bottom to top
  std::vector<std::pair<size_t, size_t>> stacks;  // (offset, depth) into raw
  int64_t expansions = 0;

  void Clear() {
    links.clear();
    raw.clear();
    stacks.clear();
    expansions = 0;
  }
  int32_t Push(int32_t pos, int32_t below) {
    links.push_back({pos, below});
    return static_cast<int32_t>(links.size() - 1);
  }
};

Arena& ThreadArena() {
  thread_local Arena arena;
  return arena;
}

// Records the stack whose top is `link` (−1: the empty stack).
void Emit(int32_t link, Arena& a) {
  size_t depth = 0;
  for (int32_t l = link; l >= 0; l = a.links[static_cast<size_t>(l)].below) {
    if (++depth > static_cast<size_t>(kMaxCfgStackDepth)) return;
  }
  const size_t offset = a.raw.size();
  a.raw.resize(offset + depth);
  size_t i = offset + depth;
  for (int32_t l = link; l >= 0; l = a.links[static_cast<size_t>(l)].below) {
    a.raw[--i] = a.links[static_cast<size_t>(l)].pos;
  }
  a.stacks.emplace_back(offset, depth);
}

// Emits the stacks `link` stands for once every rule on top is replaced by its alternatives.
void Expand(const CfgGrammar& g, int32_t link, Arena& a) {
  if (link < 0) {
    Emit(link, a);
    return;
  }
  const Link top = a.links[static_cast<size_t>(link)];
  const CfgElement& e = g.elements[static_cast<size_t>(top.pos)];
  if (e.kind == CfgElement::kBytes) {
    Emit(link, a);
    return;
  }
  // e is a kRule here.
  int32_t then = top.below;
  if (g.elements[static_cast<size_t>(top.pos) + 1].kind != CfgElement::kEnd) {
    then = a.Push(top.pos + 1, top.below);
  }
  for (int32_t start : g.alternatives[static_cast<size_t>(e.rule)]) {
    if (++a.expansions > kMaxCfgExpansions) return;
    Expand(g,
           g.elements[static_cast<size_t>(start)].kind == CfgElement::kEnd ? then
                                                                           : a.Push(start, then),
           a);
  }
}

// Writes the arena's stacks into *data: sorted, without repeats, at most kMaxCfgStacks.
void Collect(Arena& a, std::vector<int32_t>* data, bool* can_finish) {
  auto span = [&a](const std::pair<size_t, size_t>& s) {
    return std::make_pair(a.raw.begin() + static_cast<ptrdiff_t>(s.first),
                          a.raw.begin() + static_cast<ptrdiff_t>(s.first + s.second));
  };
  auto less = [&](const auto& x, const auto& y) {
    auto [xb, xe] = span(x);
    auto [yb, ye] = span(y);
    return std::lexicographical_compare(xb, xe, yb, ye);
  };
  auto equal = [&](const auto& x, const auto& y) {
    auto [xb, xe] = span(x);
    auto [yb, ye] = span(y);
    return std::equal(xb, xe, yb, ye);
  };
  if (a.stacks.size() > 1) {
    std::sort(a.stacks.begin(), a.stacks.end(), less);
    a.stacks.erase(std::unique(a.stacks.begin(), a.stacks.end(), equal), a.stacks.end());
  }
  if (a.stacks.size() > kMaxCfgStacks) a.stacks.resize(kMaxCfgStacks);
  data->clear();
  *can_finish = false;
  for (const auto& s : a.stacks) {
    data->push_back(static_cast<int32_t>(s.second));
    auto [b, e] = span(s);
    data->insert(data->end(), b, e);
    *can_finish = *can_finish || s.second == 0;
  }
}

}  // namespace

CfgMatchState CfgMatchState::Start(const CfgGrammar& g) {
  Arena& a = ThreadArena();
  a.Clear();
  for (int32_t start : g.alternatives[static_cast<size_t>(g.root)]) {
    Expand(g,
           g.elements[static_cast<size_t>(start)].kind == CfgElement::kEnd ? -1 : a.Push(start, -1),
           a);
  }
  CfgMatchState s;
  Collect(a, &s.data_, &s.can_finish_);
  return s;
}

bool CfgMatchState::Advance(const CfgGrammar& g, uint8_t byte, CfgMatchState* next) const {
  Arena& a = ThreadArena();
  a.Clear();
  for (size_t off = 0; off < data_.size();) {
    const auto depth = static_cast<size_t>(data_[off]);
    const int32_t* pos = data_.data() + off + 1;
    off += 1 + depth;
    if (depth == 0) continue;
    const int32_t top = pos[depth - 1];
    const CfgElement& e = g.elements[static_cast<size_t>(top)];
    if (byte < e.lo || byte > e.hi) continue;
    int32_t link = -1;
    for (size_t i = 0; i + 1 < depth; ++i) link = a.Push(pos[i], link);
    if (g.elements[static_cast<size_t>(top) + 1].kind != CfgElement::kEnd) {
      link = a.Push(top + 1, link);
    }
    Expand(g, link, a);
  }
  Collect(a, &next->data_, &next->can_finish_);
  return !next->data_.empty();
}

bool CfgMatchState::AdvanceBytes(const CfgGrammar& g, std::string_view bytes, CfgMatchState* out,
                                 CfgMatchState* scratch) const {
  if (bytes.empty()) {
    *out = *this;
    return true;
  }
  // Alternate between the buffers so that the last byte lands in *out.
  CfgMatchState* bufs[2] = {bytes.size() % 2 == 1 ? out : scratch,
                            bytes.size() % 2 == 1 ? scratch : out};
  const CfgMatchState* from = this;
  for (size_t i = 0; i < bytes.size(); ++i) {
    CfgMatchState* to = bufs[i % 2];
    if (!from->Advance(g, static_cast<uint8_t>(bytes[i]), to)) return false;
    from = to;
  }
  return true;
}

}  // namespace strata::structured
