// regex.h: pattern → syntax tree → NFA over UTF-8 bytes → DFA (subset construction over byte
// classes) → pruned to the states that can still accept.
#include "engine/structured/regex.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <deque>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "engine/structured/code_points.h"
#include "engine/tokenizer/utf8.h"

namespace strata::structured {
namespace {

constexpr int kMaxGroupDepth = 128;

CpSet Digits() { return {{'0', '9'}}; }
CpSet WordChars() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
// ECMA-262 WhiteSpace and LineTerminator.
CpSet Spaces() {
  return {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
          {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}
CpSet AnyButLineTerminators() { return Complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}); }

struct Node {
  enum Kind : uint8_t { kEmpty, kSet, kConcat, kAlt, kRepeat };
  Kind kind = kEmpty;
  CpSet set;                  // kSet
  std::vector<int32_t> kids;  // kConcat, kAlt; kRepeat: one
  int32_t min = 0;
  int32_t max = 0;  // kRepeat: −1 unbounded
};

class RegexParser {
 public:
  explicit RegexParser(std::string_view pattern) : p_(pattern) {}

  // The whole pattern: top-level alternatives, each anchored by `^` / `$` or (kSearch) free
  // to sit anywhere in the text.
  absl::StatusOr<int32_t> ParsePattern(RegexAnchoring anchoring) {
    std::vector<int32_t> alternatives;
    while (true) {
      const bool at_start = Eat('^') || anchoring == RegexAnchoring::kFullMatch;
      absl::StatusOr<int32_t> body = ParseConcat(0);
      if (!body.ok()) return body.status();
      const bool at_end = Eat('$') || anchoring == RegexAnchoring::kFullMatch;
      if (pos_ < p_.size() && p_[pos_] != '|') {
        return Error(p_[pos_] == ')' ? "unbalanced ')'"
                                     : "'$' is supported only at the end of the pattern (or of "
                                       "a top-level alternative)");
      }
      std::vector<int32_t> parts;
      if (!at_start) parts.push_back(AnyRun());
      parts.push_back(*body);
      if (!at_end) parts.push_back(AnyRun());
      alternatives.push_back(Add({Node::kConcat, {}, std::move(parts)}));
      if (!Eat('|')) break;
    }
    if (alternatives.size() == 1) return alternatives[0];
    return Add({Node::kAlt, {}, std::move(alternatives)});
  }

  std::vector<Node> TakeNodes() { return std::move(nodes_); }

 private:
  absl::Status Error(absl::string_view what) const { return ErrorAt(pos_, what); }
  static absl::Status ErrorAt(size_t at, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("pattern at byte ", at, ": ", what));
  }
  int32_t Add(Node n) {
    nodes_.push_back(std::move(n));
    return static_cast<int32_t>(nodes_.size() - 1);
  }
  bool Eat(char c) {
    if (pos_ < p_.size() && p_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Ahead(std::string_view s) const { return p_.substr(pos_).starts_with(s); }

  // Any text: what an unanchored side of a search pattern may hold.
  int32_t AnyRun() {
    const int32_t any = Add({Node::kSet, {{0, kMaxCodePoint}}, {}});
    return Add({Node::kRepeat, {}, {any}, 0, -1});
  }

  absl::StatusOr<int32_t> ParseAlternation(int depth) {
    std::vector<int32_t> alternatives;
    do {
      absl::StatusOr<int32_t> a = ParseConcat(depth);
      if (!a.ok()) return a.status();
      alternatives.push_back(*a);
    } while (Eat('|'));
    if (alternatives.size() == 1) return alternatives[0];
    return Add({Node::kAlt, {}, std::move(alternatives)});
  }

  absl::StatusOr<int32_t> ParseConcat(int depth) {
    std::vector<int32_t> parts;
    while (pos_ < p_.size()) {
      const char c = p_[pos_];
      if (c == '|' || c == ')') break;
      if (c == '$' && depth == 0) break;  // the top level checks it ends an alternative
      absl::StatusOr<int32_t> item = ParseRepeat(depth);
      if (!item.ok()) return item.status();
      parts.push_back(*item);
    }
    if (parts.size() == 1) return parts[0];
    return Add({Node::kConcat, {}, std::move(parts)});
  }

  // {n}, {n,}, {n,m} at pos_ (past the '{'): false when the text is not a quantifier (a
  // literal '{', as ECMA's Annex B reads it).
  bool ReadBraces(int32_t* min, int32_t* max, bool* too_big) {
    size_t at = pos_ + 1;
    auto number = [&](int32_t* out) {
      const size_t begin = at;
      int64_t v = 0;
      while (at < p_.size() && p_[at] >= '0' && p_[at] <= '9') {
        v = std::min<int64_t>(v * 10 + (p_[at] - '0'), int64_t{1} << 40);
        ++at;
      }
      if (v > kMaxRegexRepeat) *too_big = true;
      *out = static_cast<int32_t>(std::min<int64_t>(v, kMaxRegexRepeat + 1));
      return at > begin;
    };
    if (!number(min)) return false;
    *max = *min;
    if (at < p_.size() && p_[at] == ',') {
      ++at;
      if (!number(max)) *max = -1;
    }
    if (at >= p_.size() || p_[at] != '}') return false;
    pos_ = at + 1;
    return true;
  }

  absl::StatusOr<int32_t> ParseRepeat(int depth) {
    absl::StatusOr<int32_t> atom = ParseAtom(depth);
    if (!atom.ok()) return atom.status();
    if (pos_ >= p_.size()) return atom;
    int32_t min = 0, max = -1;
    const char c = p_[pos_];
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      ++pos_;
      min = 1;
    } else if (c == '?') {
      ++pos_;
      max = 1;
    } else if (c == '{') {
      bool too_big = false;
      if (!ReadBraces(&min, &max, &too_big)) return atom;
      if (too_big) {
        return Error(absl::StrCat("a repetition count above ", kMaxRegexRepeat, " (the limit)"));
      }
      if (max >= 0 && max < min) return Error("a repetition {n,m} with m < n");
    } else {
      return atom;
    }
    Eat('?');  // lazy: same language
    if (pos_ < p_.size() && (p_[pos_] == '*' || p_[pos_] == '+' || p_[pos_] == '?')) {
      return Error("nothing to repeat (a quantifier after a quantifier)");
    }
    return Add({Node::kRepeat, {}, {*atom}, min, max});
  }

  absl::StatusOr<int32_t> ParseAtom(int depth) {
    const char c = p_[pos_];
    switch (c) {
      case '(':
        return ParseGroup(depth);
      case '[': {
        absl::StatusOr<CpSet> set = ParseClass();
        if (!set.ok()) return set.status();
        return Add({Node::kSet, *std::move(set), {}});
      }
      case '.':
        ++pos_;
        return Add({Node::kSet, AnyButLineTerminators(), {}});
      case '*':
      case '+':
      case '?':
        return Error("nothing to repeat");
      case '^':
        return Error(
            "'^' is supported only at the start of the pattern (or of a top-level alternative)");
      case '$':
        return Error(
            "'$' is supported only at the end of the pattern (or of a top-level alternative)");
      case '\\': {
        absl::StatusOr<CpSet> set = ParseEscape(/*in_class=*/false);
        if (!set.ok()) return set.status();
        return Add({Node::kSet, *std::move(set), {}});
      }
      default: {
        absl::StatusOr<uint32_t> cp = ReadCodePoint();
        if (!cp.ok()) return cp.status();
        return Add({Node::kSet, {{*cp, *cp}}, {}});
      }
    }
  }

  absl::StatusOr<int32_t> ParseGroup(int depth) {
    if (depth + 1 >= kMaxGroupDepth) {
      return Error(absl::StrCat("groups nest deeper than ", kMaxGroupDepth, " (the limit)"));
    }
    const size_t open = pos_;
    ++pos_;
    if (Ahead("?=") || Ahead("?!") || Ahead("?<=") || Ahead("?<!")) {
      return ErrorAt(open, "lookaround assertions are not supported");
    }
    if (Ahead("?:")) {
      pos_ += 2;
    } else if (Ahead("?<")) {
      const size_t close = p_.find('>', pos_);
      if (close == std::string_view::npos) return Error("a group name without its '>'");
      pos_ = close + 1;
    } else if (Ahead("?")) {
      return ErrorAt(open, "inline flags and other '(?' groups are not supported");
    }
    absl::StatusOr<int32_t> body = ParseAlternation(depth + 1);
    if (!body.ok()) return body.status();
    if (!Eat(')')) {
      pos_ = open;
      return Error("'(' without its ')'");
    }
    return body;
  }

  absl::StatusOr<CpSet> ParseClass() {
    const size_t open = pos_;
    ++pos_;
    const bool negated = Eat('^');
    CpSet set;
    while (true) {
      if (pos_ >= p_.size()) {
        pos_ = open;
        return Error("'[' without its ']'");
      }
      if (Eat(']')) break;
      absl::StatusOr<CpSet> lo = ClassAtom();
      if (!lo.ok()) return lo.status();
      if (pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        absl::StatusOr<CpSet> hi = ClassAtom();
        if (!hi.ok()) return hi.status();
        if (lo->size() != 1 || hi->size() != 1 || (*lo)[0].lo != (*lo)[0].hi ||
            (*hi)[0].lo != (*hi)[0].hi) {
          return Error("a class range whose end is a class escape (\\d, \\w, \\s)");
        }
        if ((*hi)[0].lo < (*lo)[0].lo) return Error("a class range out of order");
        set.push_back({(*lo)[0].lo, (*hi)[0].lo});
      } else {
        set.insert(set.end(), lo->begin(), lo->end());
      }
    }
    set = Normalize(std::move(set));
    return negated ? Complement(set) : set;
  }

  absl::StatusOr<CpSet> ClassAtom() {
    if (p_[pos_] == '\\') return ParseEscape(/*in_class=*/true);
    absl::StatusOr<uint32_t> cp = ReadCodePoint();
    if (!cp.ok()) return cp.status();
    return CpSet{{*cp, *cp}};
  }

  // `count` hex digits (or, with count 0, a {…} run of 1–6) → a code point.
  absl::StatusOr<uint32_t> Hex(int count) {
    auto digit = [&](char h) -> int {
      if (h >= '0' && h <= '9') return h - '0';
      if (h >= 'a' && h <= 'f') return h - 'a' + 10;
      if (h >= 'A' && h <= 'F') return h - 'A' + 10;
      return -1;
    };
    uint32_t v = 0;
    if (count == 0) {
      ++pos_;  // '{'
      int n = 0;
      while (pos_ < p_.size() && p_[pos_] != '}') {
        const int d = digit(p_[pos_]);
        if (d < 0 || ++n > 6) return Error("a bad \\u{…} escape");
        v = v * 16 + static_cast<uint32_t>(d);
        ++pos_;
      }
      if (n == 0 || !Eat('}') || v > kMaxCodePoint) return Error("a bad \\u{…} escape");
      return v;
    }
    for (int i = 0; i < count; ++i) {
      const int d = pos_ < p_.size() ? digit(p_[pos_]) : -1;
      if (d < 0) return Error("an escape without its hex digits");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  absl::StatusOr<CpSet> ParseEscape(bool in_class) {
    const size_t start = pos_;
    ++pos_;  // '\'
    if (pos_ >= p_.size()) return ErrorAt(start, "a pattern ending in '\\'");
    const char c = p_[pos_];
    auto one = [](uint32_t cp) { return CpSet{{cp, cp}}; };
    static constexpr std::pair<char, uint32_t> kControls[] = {
        {'t', '\t'}, {'n', '\n'}, {'r', '\r'}, {'f', '\f'}, {'v', '\v'}};
    for (const auto& [name, cp] : kControls) {
      if (c == name) {
        ++pos_;
        return one(cp);
      }
    }
    switch (c) {
      case 'd':
      case 'D':
      case 'w':
      case 'W':
      case 's':
      case 'S': {
        ++pos_;
        const char lower = static_cast<char>(c | 0x20);
        CpSet set = lower == 'd' ? Digits() : lower == 'w' ? WordChars() : Spaces();
        return c == lower ? set : Complement(set);
      }
      case 'b':
        if (in_class) {
          ++pos_;
          return one('\b');
        }
        return ErrorAt(start, "word boundaries (\\b) are not supported");
      case 'B':
        return ErrorAt(start, "word boundaries (\\B) are not supported");
      case '0':
        ++pos_;
        if (pos_ < p_.size() && p_[pos_] >= '0' && p_[pos_] <= '9') {
          return ErrorAt(start, "octal escapes are not supported");
        }
        return one(0);
      case 'x': {
        ++pos_;
        absl::StatusOr<uint32_t> v = Hex(2);
        if (!v.ok()) return v.status();
        return one(*v);
      }
      case 'u': {
        ++pos_;
        absl::StatusOr<uint32_t> v = (pos_ < p_.size() && p_[pos_] == '{') ? Hex(0) : Hex(4);
        if (!v.ok()) return v.status();
        if (*v >= 0xD800 && *v <= 0xDFFF) {
          return ErrorAt(start, "surrogate code points (\\uD800–\\uDFFF) are not supported");
        }
        return one(*v);
      }
      case 'c':
        if (pos_ + 1 < p_.size() && std::isalpha(static_cast<unsigned char>(p_[pos_ + 1]))) {
          pos_ += 2;
          return one(static_cast<uint32_t>(p_[pos_ - 1]) % 32);
        }
        return ErrorAt(start, "a bad \\c escape");
      case 'k':
        return ErrorAt(start, "backreferences are not supported");
      case 'p':
      case 'P':
        return ErrorAt(start, "Unicode property escapes (\\p, \\P) are not supported");
      default:
        break;
    }
    if (c >= '1' && c <= '9') return ErrorAt(start, "backreferences are not supported");
    if (std::isalnum(static_cast<unsigned char>(c))) {
      return ErrorAt(start, absl::StrCat("unknown escape '\\", std::string(1, c), "'"));
    }
    absl::StatusOr<uint32_t> cp = ReadCodePoint();  // escaped punctuation (or any non-ASCII)
    if (!cp.ok()) return cp.status();
    return one(*cp);
  }

  // The UTF-8 code point at pos_.
  absl::StatusOr<uint32_t> ReadCodePoint() {
    const engine::Utf8Step step = engine::DecodeUtf8Step(p_.substr(pos_));
    if (step.status != engine::Utf8Status::kChar) {
      return Error("the pattern is not well-formed UTF-8");
    }
    pos_ += step.length;
    return static_cast<uint32_t>(step.code_point);
  }

  std::string_view p_;
  size_t pos_ = 0;
  std::vector<Node> nodes_;
};

struct NfaEdge {
  ByteRange bytes;
  int32_t to = 0;
};

class NfaBuilder {
 public:
  explicit NfaBuilder(const std::vector<Node>& nodes) : nodes_(nodes) {}

  // The NFA from state 0 to the returned accepting state; false past kMaxRegexNfaStates.
  bool Build(int32_t root, int32_t* accept) {
    const int32_t start = New();
    *accept = Emit(root, start);
    return !overflow_;
  }
  std::vector<std::vector<int32_t>> eps;
  std::vector<std::vector<NfaEdge>> edges;

 private:
  int32_t New() {
    if (static_cast<int>(eps.size()) >= kMaxRegexNfaStates) {
      overflow_ = true;
      return 0;
    }
    eps.emplace_back();
    edges.emplace_back();
    return static_cast<int32_t>(eps.size() - 1);
  }

  // Emits node n starting at state `from`; returns the state where it ends.
  int32_t Emit(int32_t n, int32_t from) {
    if (overflow_) return from;
    const Node& node = nodes_[static_cast<size_t>(n)];
    switch (node.kind) {
      case Node::kEmpty:
        return from;
      case Node::kSet: {
        const int32_t to = New();
        for (const ByteSeq& seq : Utf8Sequences(node.set)) {
          int32_t s = from;
          for (size_t i = 0; i < seq.size() && !overflow_; ++i) {
            const int32_t t = i + 1 == seq.size() ? to : New();
            edges[static_cast<size_t>(s)].push_back({seq[i], t});
            s = t;
          }
        }
        return to;
      }
      case Node::kConcat: {
        int32_t at = from;
        for (int32_t kid : node.kids) at = Emit(kid, at);
        return at;
      }
      case Node::kAlt: {
        const int32_t to = New();
        for (int32_t kid : node.kids) {
          const int32_t end = Emit(kid, from);
          eps[static_cast<size_t>(end)].push_back(to);
        }
        return to;
      }
      case Node::kRepeat: {
        int32_t at = from;
        for (int32_t i = 0; i < node.min && !overflow_; ++i) at = Emit(node.kids[0], at);
        if (node.max < 0) {
          const int32_t loop = New();
          eps[static_cast<size_t>(at)].push_back(loop);
          const int32_t end = Emit(node.kids[0], loop);
          eps[static_cast<size_t>(end)].push_back(loop);
          return loop;
        }
        // Optional copies as (x(x(x)?)?)?: each may stop straight to the end, so after k
        // copies the automaton is at copy k only (x?x?x? would keep every later copy open).
        if (node.max == node.min) return at;
        const int32_t end = New();
        for (int32_t i = node.min; i < node.max && !overflow_; ++i) {
          eps[static_cast<size_t>(at)].push_back(end);
          at = Emit(node.kids[0], at);
        }
        eps[static_cast<size_t>(at)].push_back(end);
        return end;
      }
    }
    return from;
  }

  const std::vector<Node>& nodes_;
  bool overflow_ = false;
};

// Subset construction over byte classes. A DFA state is the sorted set of the NFA states its
// epsilon closure holds that matter: those with byte edges, and the accepting one (the others
// only lead on by epsilon, so two closures that agree on these accept the same texts).
// Every step is counted (edges scanned, states visited, set elements sorted, hashed and
// compared), and the construction stops past kMaxWork of them, kMaxRegexDfaStates states or
// kMaxRegexDfaCells transitions: a request thread compiles patterns, so the cost is bounded
// whatever the pattern.
class DfaBuilder {
 public:
  static constexpr uint64_t kMaxWork = 50'000'000;
  enum class Outcome : uint8_t { kBuilt, kTooManyStates, kTooManyCells, kTooMuchWork };

  DfaBuilder(const NfaBuilder& nfa, int32_t accept) : nfa_(nfa), accept_(accept) {
    const size_t n = nfa.eps.size();
    kept_.resize(n);
    for (size_t q = 0; q < n; ++q) {
      kept_[q] = !nfa.edges[q].empty() || static_cast<int32_t>(q) == accept ? 1 : 0;
      if (kept_[q] != 0) kept_list_.push_back(static_cast<int32_t>(q));
    }
    seen_.assign(n, 0);
  }

  Outcome Build(ByteDfa* dfa) {
    ClassifyBytes(dfa);
    const auto classes = static_cast<size_t>(dfa->num_classes);
    moved_.resize(classes);
    segment_of_.resize(classes);
    targets_.resize(classes);
    memo_.assign(kMemoSlots, {});
    Close({0});
    Intern();
    for (size_t s = 0; s < num_sets(); ++s) {
      if (Outcome o = Check(classes); o != Outcome::kBuilt) return o;
      const size_t segments = Segment(s, *dfa);
      ++memo_stamp_;
      for (size_t g = 0; g < segments; ++g) {
        targets_[g] = Target(g);
        if (work_ > kMaxWork) return Outcome::kTooMuchWork;
      }
      for (size_t c = 0; c < classes; ++c) next_.push_back(targets_[segment_of_[c]]);
    }
    if (Outcome o = Check(classes); o != Outcome::kBuilt) return o;
    dfa->next = std::move(next_);
    dfa->accepting.resize(num_sets());
    for (size_t s = 0; s < num_sets(); ++s) {
      const auto first = members_.begin() + static_cast<ptrdiff_t>(begin_[s]);
      const auto last = members_.begin() + static_cast<ptrdiff_t>(begin_[s + 1]);
      dfa->accepting[s] = std::binary_search(first, last, accept_) ? 1 : 0;
    }
    dfa->start = 0;
    return Outcome::kBuilt;
  }

 private:
  static constexpr size_t kMemoSlots = 512;  // a power of two, twice the most runs (256)
  struct MemoSlot {
    uint64_t stamp = 0;
    uint64_t hash = 0;
    int32_t segment = 0;
  };

  size_t num_sets() const { return begin_.size() - 1; }

  Outcome Check(size_t classes) const {
    if (num_sets() > static_cast<size_t>(kMaxRegexDfaStates)) return Outcome::kTooManyStates;
    if (num_sets() * classes > kMaxRegexDfaCells) return Outcome::kTooManyCells;
    if (work_ > kMaxWork) return Outcome::kTooMuchWork;
    return Outcome::kBuilt;
  }

  // Byte classes: bytes between consecutive edge boundaries behave alike.
  void ClassifyBytes(ByteDfa* dfa) {
    std::array<bool, 257> boundary{};
    for (const auto& list : nfa_.edges) {
      for (const NfaEdge& e : list) {
        boundary[e.bytes.lo] = true;
        boundary[static_cast<size_t>(e.bytes.hi) + 1] = true;
      }
    }
    int32_t c = -1;
    for (int b = 0; b < 256; ++b) {
      if (b == 0 || boundary[static_cast<size_t>(b)]) ++c;
      dfa->byte_class[static_cast<size_t>(b)] = static_cast<uint8_t>(c);
    }
    dfa->num_classes = c + 1;
  }

  // Splits the classes into runs that set s's edges do not tell apart (segment_of_), and
  // gathers the NFA states each run moves to (moved_, in the order of the set's edges, so two
  // runs that the same edges cover get equal lists). Returns the number of runs.
  size_t Segment(size_t s, const ByteDfa& dfa) {
    const size_t classes = segment_of_.size();
    cut_.assign(classes + 1, 0);
    for (size_t i = begin_[s]; i < begin_[s + 1]; ++i) {
      for (const NfaEdge& e : nfa_.edges[static_cast<size_t>(members_[i])]) {
        cut_[dfa.byte_class[e.bytes.lo]] = 1;
        cut_[static_cast<size_t>(dfa.byte_class[e.bytes.hi]) + 1] = 1;
      }
    }
    size_t segments = 0;
    for (size_t c = 0; c < classes; ++c) {
      if (c == 0 || cut_[c] != 0) moved_[segments++].clear();
      segment_of_[c] = static_cast<int32_t>(segments - 1);
    }
    work_ += classes;
    for (size_t i = begin_[s]; i < begin_[s + 1]; ++i) {
      for (const NfaEdge& e : nfa_.edges[static_cast<size_t>(members_[i])]) {
        const auto first = static_cast<size_t>(segment_of_[dfa.byte_class[e.bytes.lo]]);
        const auto last = static_cast<size_t>(segment_of_[dfa.byte_class[e.bytes.hi]]);
        for (size_t g = first; g <= last; ++g) moved_[g].push_back(e.to);
        work_ += 2 + last - first;
      }
    }
    return segments;
  }

  // The state run g moves to: kDead when nothing can follow, the state of an earlier run with
  // the same moved list, else the interned closure.
  int32_t Target(size_t g) {
    const std::vector<int32_t>& moved = moved_[g];
    if (moved.empty()) return ByteDfa::kDead;
    const uint64_t hash = Hash(moved.data(), moved.size());
    work_ += moved.size();
    const size_t mask = memo_.size() - 1;
    size_t at = hash & mask;
    for (; memo_[at].stamp == memo_stamp_; at = (at + 1) & mask) {
      const MemoSlot& slot = memo_[at];
      if (slot.hash == hash && moved_[static_cast<size_t>(slot.segment)] == moved) {
        work_ += moved.size();
        return targets_[static_cast<size_t>(slot.segment)];
      }
    }
    memo_[at] = {memo_stamp_, hash, static_cast<int32_t>(g)};
    Close(moved);
    return closed_.empty() ? ByteDfa::kDead : Intern();
  }

  // closed_ ← the kept states of the epsilon closure of `from`, sorted.
  void Close(const std::vector<int32_t>& from) {
    ++stamp_;
    todo_.assign(from.begin(), from.end());
    closed_.clear();
    while (!todo_.empty()) {
      const int32_t q = todo_.back();
      todo_.pop_back();
      if (seen_[static_cast<size_t>(q)] == stamp_) continue;
      seen_[static_cast<size_t>(q)] = stamp_;
      if (kept_[static_cast<size_t>(q)] != 0) closed_.push_back(q);
      const std::vector<int32_t>& eps = nfa_.eps[static_cast<size_t>(q)];
      todo_.insert(todo_.end(), eps.begin(), eps.end());
      work_ += 1 + eps.size();
    }
    // Sorted: by sorting, or (when that costs more) by reading the kept states in order.
    const size_t sort_cost = closed_.size() * (1 + std::bit_width(closed_.size()));
    if (sort_cost <= kept_list_.size()) {
      std::sort(closed_.begin(), closed_.end());
      work_ += sort_cost;
    } else {
      closed_.clear();
      for (int32_t q : kept_list_) {
        if (seen_[static_cast<size_t>(q)] == stamp_) closed_.push_back(q);
      }
      work_ += kept_list_.size();
    }
  }

  static uint64_t Hash(const int32_t* v, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15u ^ n;
    for (size_t i = 0; i < n; ++i) {
      h = (h ^ static_cast<uint32_t>(v[i])) * 0xFF51AFD7ED558CCDu;
      h ^= h >> 32;
    }
    return h;
  }

  // The id of the DFA state closed_ is, added when new.
  int32_t Intern() {
    const uint64_t hash = Hash(closed_.data(), closed_.size());
    work_ += closed_.size();
    if (2 * (num_sets() + 1) > slots_.size()) Rehash();
    const size_t mask = slots_.size() - 1;
    size_t at = hash & mask;
    for (; slots_[at] >= 0; at = (at + 1) & mask) {
      const auto id = static_cast<size_t>(slots_[at]);
      if (hashes_[id] != hash || begin_[id + 1] - begin_[id] != closed_.size()) continue;
      work_ += closed_.size();
      if (std::equal(closed_.begin(), closed_.end(),
                     members_.begin() + static_cast<ptrdiff_t>(begin_[id]))) {
        return static_cast<int32_t>(id);
      }
    }
    const auto id = static_cast<int32_t>(num_sets());
    slots_[at] = id;
    hashes_.push_back(hash);
    members_.insert(members_.end(), closed_.begin(), closed_.end());
    begin_.push_back(members_.size());
    return id;
  }

  void Rehash() {
    slots_.assign(std::max<size_t>(64, 2 * slots_.size()), -1);
    const size_t mask = slots_.size() - 1;
    for (size_t id = 0; id < num_sets(); ++id) {
      size_t at = hashes_[id] & mask;
      while (slots_[at] >= 0) at = (at + 1) & mask;
      slots_[at] = static_cast<int32_t>(id);
    }
    work_ += slots_.size();
  }

  const NfaBuilder& nfa_;
  const int32_t accept_;
  std::vector<uint8_t> kept_;       // per NFA state: it has byte edges or accepts
  std::vector<int32_t> kept_list_;  // the kept states in order
  // The DFA states: state s is members_[begin_[s], begin_[s + 1]); an open-addressing table
  // (slots_: ids, −1 empty) over their hashes finds a set's id.
  std::vector<int32_t> members_;
  std::vector<size_t> begin_ = {0};
  std::vector<uint64_t> hashes_;
  std::vector<int32_t> slots_;
  std::vector<int32_t> next_;
  // Scratch of one state's transitions.
  std::vector<uint8_t> cut_;
  std::vector<int32_t> segment_of_;
  std::vector<std::vector<int32_t>> moved_;
  std::vector<int32_t> targets_;
  std::vector<MemoSlot> memo_;
  uint64_t memo_stamp_ = 0;
  // Scratch of a closure.
  std::vector<int32_t> todo_;
  std::vector<int32_t> closed_;
  std::vector<uint32_t> seen_;
  uint32_t stamp_ = 0;
  uint64_t work_ = 0;
};

bool IsLeadByte(uint8_t b) { return b < 0x80 || b >= 0xC0; }

// max_code_points of a pruned automaton (every state can accept): the longest way to an
// accepting state counted in lead bytes, by a depth-first search without recursion; a state
// that can reach a loop is unbounded.
void LongestPaths(ByteDfa* dfa, const std::vector<uint8_t>& lead) {
  const int32_t n = dfa->num_states();
  const int32_t k = dfa->num_classes;
  enum : uint8_t { kNew, kOpen, kDone };
  std::vector<uint8_t> mark(static_cast<size_t>(n), kNew);
  std::vector<int64_t> longest(static_cast<size_t>(n), 0);
  constexpr int64_t kLoop = INT64_MAX;
  std::vector<std::pair<int32_t, int32_t>> stack;  // (state, next class to look at)
  for (int32_t root = 0; root < n; ++root) {
    if (mark[static_cast<size_t>(root)] != kNew) continue;
    stack.emplace_back(root, 0);
    mark[static_cast<size_t>(root)] = kOpen;
    while (!stack.empty()) {
      auto& [s, c] = stack.back();
      if (c == k) {
        mark[static_cast<size_t>(s)] = kDone;
        stack.pop_back();
        continue;
      }
      const int32_t cls = c++;
      const int32_t t = dfa->next[static_cast<size_t>(s * k + cls)];
      if (t == ByteDfa::kDead) continue;
      int64_t& best = longest[static_cast<size_t>(s)];
      switch (mark[static_cast<size_t>(t)]) {
        case kOpen:  // a loop
          best = kLoop;
          break;
        case kDone: {
          const int64_t via = longest[static_cast<size_t>(t)];
          best = std::max(best, via == kLoop ? kLoop : via + lead[static_cast<size_t>(cls)]);
          break;
        }
        default:
          mark[static_cast<size_t>(t)] = kOpen;
          --c;  // look at this class again once t is done
          stack.emplace_back(t, 0);
          break;
      }
    }
  }
  dfa->max_code_points.resize(static_cast<size_t>(n));
  for (int32_t s = 0; s < n; ++s) {
    const int64_t v = longest[static_cast<size_t>(s)];
    dfa->max_code_points[static_cast<size_t>(s)] =
        v >= ByteDfa::kUnbounded ? ByteDfa::kUnbounded : static_cast<int32_t>(v);
  }
}

// Drops the states that cannot reach an accepting one and computes min_code_points (a 0-1
// breadth-first search backwards: a lead byte costs one code point, a continuation none).
// Returns false when the start state itself is dropped (nothing matches).
bool Prune(ByteDfa* dfa) {
  const int32_t n = dfa->num_states();
  const int32_t k = dfa->num_classes;
  std::vector<uint8_t> lead(static_cast<size_t>(k), 0);
  for (int b = 0; b < 256; ++b) {
    if (IsLeadByte(static_cast<uint8_t>(b))) lead[dfa->byte_class[static_cast<size_t>(b)]] = 1;
  }
  // The transitions backwards, grouped by target (a counting sort): back[back_begin[t] …
  // back_begin[t + 1]) are the (source << 1 | lead) of the transitions into t; a run of
  // classes that a state sends to the same target with the same lead counts once.
  auto for_each_transition = [&](auto&& fn) {
    for (int32_t s = 0; s < n; ++s) {
      int32_t last = ByteDfa::kDead;
      for (int32_t c = 0; c < k; ++c) {
        const int32_t t = dfa->next[static_cast<size_t>(s * k + c)];
        const int32_t edge = s << 1 | lead[static_cast<size_t>(c)];
        if (t != ByteDfa::kDead &&
            (t != last || c == 0 ||
             lead[static_cast<size_t>(c - 1)] != lead[static_cast<size_t>(c)])) {
          fn(t, edge);
        }
        last = t;
      }
    }
  };
  std::vector<int32_t> back_begin(static_cast<size_t>(n) + 1, 0);
  for_each_transition([&](int32_t t, int32_t) { ++back_begin[static_cast<size_t>(t) + 1]; });
  for (size_t t = 0; t < static_cast<size_t>(n); ++t) back_begin[t + 1] += back_begin[t];
  std::vector<int32_t> back(static_cast<size_t>(back_begin[static_cast<size_t>(n)]));
  std::vector<int32_t> fill(back_begin.begin(), back_begin.end() - 1);
  for_each_transition([&](int32_t t, int32_t edge) {
    back[static_cast<size_t>(fill[static_cast<size_t>(t)]++)] = edge;
  });
  constexpr int32_t kFar = INT32_MAX;
  std::vector<int32_t> dist(static_cast<size_t>(n), kFar);
  std::deque<int32_t> todo;
  for (int32_t s = 0; s < n; ++s) {
    if (dfa->Accepting(s)) {
      dist[static_cast<size_t>(s)] = 0;
      todo.push_back(s);
    }
  }
  while (!todo.empty()) {
    const int32_t t = todo.front();
    todo.pop_front();
    for (int32_t i = back_begin[static_cast<size_t>(t)]; i < back_begin[static_cast<size_t>(t) + 1];
         ++i) {
      const int32_t s = back[static_cast<size_t>(i)] >> 1;
      const int32_t w = back[static_cast<size_t>(i)] & 1;
      const int32_t d = dist[static_cast<size_t>(t)] + w;
      if (d >= dist[static_cast<size_t>(s)]) continue;
      dist[static_cast<size_t>(s)] = d;
      if (w == 0) {
        todo.push_front(s);
      } else {
        todo.push_back(s);
      }
    }
  }
  if (dist[static_cast<size_t>(dfa->start)] == kFar) return false;
  std::vector<int32_t> remap(static_cast<size_t>(n), ByteDfa::kDead);
  int32_t live = 0;
  for (int32_t s = 0; s < n; ++s) {
    if (dist[static_cast<size_t>(s)] != kFar) remap[static_cast<size_t>(s)] = live++;
  }
  // Compacted in place: a state's new row is never after its old one.
  std::vector<uint8_t> accepting(static_cast<size_t>(live));
  std::vector<int32_t> min_cp(static_cast<size_t>(live));
  for (int32_t s = 0; s < n; ++s) {
    const int32_t r = remap[static_cast<size_t>(s)];
    if (r == ByteDfa::kDead) continue;
    for (int32_t c = 0; c < k; ++c) {
      const int32_t t = dfa->next[static_cast<size_t>(s * k + c)];
      dfa->next[static_cast<size_t>(r * k + c)] =
          t == ByteDfa::kDead ? ByteDfa::kDead : remap[static_cast<size_t>(t)];
    }
    accepting[static_cast<size_t>(r)] = dfa->accepting[static_cast<size_t>(s)];
    min_cp[static_cast<size_t>(r)] = dist[static_cast<size_t>(s)];
  }
  dfa->next.resize(static_cast<size_t>(live * k));
  dfa->accepting = std::move(accepting);
  dfa->min_code_points = std::move(min_cp);
  dfa->start = remap[static_cast<size_t>(dfa->start)];
  LongestPaths(dfa, lead);
  return true;
}

}  // namespace

absl::StatusOr<ByteDfa> CompileRegex(std::string_view pattern, RegexAnchoring anchoring) {
  if (pattern.size() > kMaxRegexBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the pattern is ", pattern.size(),
                                                   " bytes long; the limit is ", kMaxRegexBytes));
  }
  RegexParser parser(pattern);
  absl::StatusOr<int32_t> root = parser.ParsePattern(anchoring);
  if (!root.ok()) return root.status();
  const std::vector<Node> nodes = parser.TakeNodes();
  NfaBuilder nfa(nodes);
  int32_t accept = 0;
  if (!nfa.Build(*root, &accept)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the pattern expands to more than ", kMaxRegexNfaStates, " automaton states (the limit)"));
  }
  ByteDfa dfa;
  switch (DfaBuilder(nfa, accept).Build(&dfa)) {
    case DfaBuilder::Outcome::kBuilt:
      break;
    case DfaBuilder::Outcome::kTooManyStates:
      return absl::InvalidArgumentError(
          absl::StrCat("the pattern's deterministic automaton is too large: more than ",
                       kMaxRegexDfaStates, " states (the limit)"));
    case DfaBuilder::Outcome::kTooManyCells:
      return absl::InvalidArgumentError(
          absl::StrCat("the pattern's deterministic automaton is too large: more than ",
                       kMaxRegexDfaCells, " transitions (the limit)"));
    case DfaBuilder::Outcome::kTooMuchWork:
      return absl::InvalidArgumentError(absl::StrCat(
          "the pattern's deterministic automaton is too large: building it takes more than ",
          DfaBuilder::kMaxWork, " steps (the limit)"));
  }
  if (!Prune(&dfa)) return absl::InvalidArgumentError("the pattern matches no string");
  return dfa;
}

}  // namespace strata::structured
