// json_matcher.h: the byte-level JSON matcher.
#include "engine/structured/json_matcher.h"

#include <algorithm>

#include "core/check.h"

namespace strata::structured {
namespace {

// Literals of a kAny value (sorted, as a kLiterals node's).
constexpr std::string_view kAnyLiterals[] = {"false", "null", "true"};

// Of the candidates [lo, hi) (sorted, all sharing their first `pos` bytes), those whose byte
// `pos` is c: a sub-range, found by binary search. text(k) is candidate k's text.
template <typename Text>
std::pair<int32_t, int32_t> Narrow(const Text& text, int32_t lo, int32_t hi, size_t pos,
                                   uint8_t c) {
  if (lo < hi && text(lo).size() == pos) ++lo;  // the one that ends here sorts first
  auto byte = [&](int32_t k) { return static_cast<uint8_t>(text(k)[pos]); };
  int32_t a = lo, b = hi;
  while (a < b) {
    const int32_t m = a + (b - a) / 2;
    if (byte(m) < c) {
      a = m + 1;
    } else {
      b = m;
    }
  }
  const int32_t first = a;
  b = hi;
  while (a < b) {
    const int32_t m = a + (b - a) / 2;
    if (byte(m) <= c) {
      a = m + 1;
    } else {
      b = m;
    }
  }
  return {first, a};
}

constexpr uint8_t kKeyString = 1;  // Frame::flags of a string that is a free object key

// kObject sub-states.
enum ObjectSub : uint8_t { kObjOpen, kObjKeyNext, kObjColon, kObjValue, kObjAfterValue };
// kArray sub-states.
enum ArraySub : uint8_t { kArrOpen, kArrNext, kArrValue, kArrAfterItem };
// kString sub-states.
// kStrPair*: after a \u escape of a high surrogate, its low half (\uDC00–\uDFFF) must follow.
enum StringSub : uint8_t {
  kStrNormal,
  kStrEscape,
  kStrHex,
  kStrPairBackslash,
  kStrPairU,
  kStrPairHex
};
// kNumber sub-states.
enum NumberSub : uint8_t {
  kNumStart,
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumFracStart,
  kNumFrac,
  kNumExpStart,
  kNumExpSign,
  kNumExp
};

bool IsWhitespace(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }
bool IsHex(uint8_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
int HexValue(uint8_t c) { return IsDigit(c) ? c - '0' : (c | 0x20) - 'a' + 10; }
bool NumberCanEnd(uint8_t sub) {
  return sub == kNumZero || sub == kNumInt || sub == kNumFrac || sub == kNumExp;
}

// kNumber flags.
constexpr uint8_t kNumSigned = 1;
constexpr uint8_t kNumBounded = 0x40;
constexpr uint8_t kNumInRange = 0x80;
constexpr int kNumFractionShift = 1;  // bits 1–4: fraction digits of a bounded number

// A number frame may end here: its syntax is complete and, with bounds, its value within them.
bool NumberEnds(const Frame& f) {
  return NumberCanEnd(f.sub) && (!(f.flags & kNumBounded) || (f.flags & kNumInRange));
}

// Bounded numbers: the digits so far as one integer (integer part, then fraction digits).
int64_t BoundedDigits(const Frame& f) {
  return static_cast<int64_t>((static_cast<uint64_t>(static_cast<uint32_t>(f.end)) << 32) |
                              static_cast<uint32_t>(f.b));
}
void SetBoundedDigits(Frame* f, int64_t v) {
  f->b = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
  f->end = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v) >> 32));
}
int FractionDigits(const Frame& f) { return (f.flags >> kNumFractionShift) & 0xF; }

// Whether some number of bounded `node` starts with the text of f (and so whether f may go
// on), and whether that text itself is such a number (*ends).
bool BoundedViable(const SchemaNode& node, const Frame& f, bool* ends) {
  const int scale = node.kind == NodeKind::kInteger ? 0 : kMaxBoundedFractionDigits;
  const int max_int_digits = kMaxIntegerDigits - scale;
  const bool negative = f.flags & kNumSigned;
  const int64_t v = BoundedDigits(f);
  const int n = FractionDigits(f);
  // Some value whose magnitude (in units of 10^-scale) lies in [lo, hi] is within the bounds
  // (and a multiple of multiple_scaled).
  auto hits = [&](int64_t lo, int64_t hi) {
    const int64_t a = std::max(negative ? -hi : lo, node.min_scaled);
    const int64_t b = std::min(negative ? -lo : hi, node.max_scaled);
    if (a > b) return false;
    return node.multiple_scaled <= 1 || FirstMultipleAtLeast(a, node.multiple_scaled) <= b;
  };
  *ends = false;
  switch (f.sub) {
    case kNumStart:
    case kNumMinus:
      return hits(0, Pow10(kMaxIntegerDigits) - 1);
    case kNumZero:
      *ends = hits(0, 0);
      return hits(0, Pow10(scale) - 1);
    case kNumInt: {
      *ends = hits(v * Pow10(scale), v * Pow10(scale));
      const int digits = f.a - (negative ? 1 : 0);
      for (int j = 0; j + digits <= max_int_digits; ++j) {
        const int64_t lo = v * Pow10(j) * Pow10(scale);
        if (hits(lo, lo + Pow10(j + scale) - 1)) return true;
      }
      return false;
    }
    case kNumFracStart:
    case kNumFrac: {
      const int64_t lo = v * Pow10(scale - n);
      if (f.sub == kNumFrac) *ends = hits(lo, lo);
      return hits(lo, lo + Pow10(scale - n) - 1);
    }
    default:
      return false;
  }
}

}  // namespace

uint8_t Utf8Next(uint8_t state, uint8_t c) {
  if (state == 0) {
    if (c < 0x80) return 0;
    if (c >= 0xC2 && c <= 0xDF) return 1 << 4;
    if (c == 0xE0) return (2 << 4) | 1;  // next A0–BF (no overlongs)
    if (c == 0xED) return (2 << 4) | 2;  // next 80–9F (no surrogates)
    if (c >= 0xE1 && c <= 0xEF) return 2 << 4;
    if (c == 0xF0) return (3 << 4) | 3;  // next 90–BF (no overlongs)
    if (c == 0xF4) return (3 << 4) | 4;  // next 80–8F (≤ U+10FFFF)
    if (c >= 0xF1 && c <= 0xF3) return 3 << 4;
    return kUtf8Bad;
  }
  uint8_t lo = 0x80, hi = 0xBF;
  switch (state & 0xF) {
    case 1:
      lo = 0xA0;
      break;
    case 2:
      hi = 0x9F;
      break;
    case 3:
      lo = 0x90;
      break;
    case 4:
      hi = 0x8F;
      break;
    default:
      break;
  }
  if (c < lo || c > hi) return kUtf8Bad;
  return static_cast<uint8_t>(((state >> 4) - 1) << 4);
}

// Feeds bytes to the threads of one output state. Every function takes a thread index (the
// thread vector may grow under it when a fork is added) and returns false when that thread
// cannot take the byte.
class Stepper {
 public:
  Stepper(const JsonGrammar& grammar, JsonMatchState* out) : g_(grammar), out_(out) {}

  // Appends a copy of `thread` to the output and feeds it `byte`.
  void FeedCopy(const MatchThread& thread, uint8_t byte) {
    const size_t t = Add();
    if (t == kNoThread) return;
    Copy(thread, &out_->threads_[t]);
    if (!Feed(t, byte)) out_->threads_[t].dead = true;
  }

 private:
  static constexpr size_t kNoThread = static_cast<size_t>(-1);

  MatchThread& T(size_t t) { return out_->threads_[t]; }
  Frame& Top(size_t t) { return T(t).stack.back(); }
  const SchemaNode& Node(int32_t n) const { return g_.nodes[static_cast<size_t>(n)]; }

  static void Copy(const MatchThread& from, MatchThread* to) {
    to->stack.assign(from.stack.begin(), from.stack.end());
    to->ws_run = from.ws_run;
    to->done = from.done;
    to->dead = false;
  }

  // A new live thread slot (capacity reused); kNoThread past kMaxThreads.
  size_t Add() {
    if (out_->size_ >= kMaxThreads) return kNoThread;
    if (out_->size_ == out_->threads_.size()) out_->threads_.emplace_back();
    return out_->size_++;
  }

  // A copy of thread t, for a fork; kNoThread past kMaxThreads.
  size_t Fork(size_t t) {
    const size_t f = Add();
    if (f != kNoThread) Copy(T(t), &T(f));
    return f;
  }

  bool Push(size_t t, Frame frame) {
    if (T(t).stack.size() >= kMaxDepth) return false;
    T(t).stack.push_back(frame);
    return true;
  }

  static Frame ValueFrame(int32_t node) {
    Frame f;
    f.kind = FrameKind::kValue;
    f.node = node;
    return f;
  }

  // Gap whitespace: allowed while the run stays within kMaxWhitespaceRun.
  bool Whitespace(size_t t, int run) {
    if (run >= kMaxWhitespaceRun) return false;
    T(t).ws_run = run + 1;
    return true;
  }

  bool Feed(size_t t, uint8_t c) {
    MatchThread& th = T(t);
    if (th.done) return false;
    const int run = th.ws_run;
    th.ws_run = 0;
    switch (th.stack.back().kind) {
      case FrameKind::kValue:
        return FeedValue(t, c, run);
      case FrameKind::kObject:
        return FeedObject(t, c, run);
      case FrameKind::kKey:
        return FeedKey(t, c);
      case FrameKind::kArray:
        return FeedArray(t, c, run);
      case FrameKind::kString:
        return FeedString(t, c);
      case FrameKind::kNumber:
        return FeedNumber(t, c);
      case FrameKind::kLiteral:
        return FeedLiteral(t, c);
      case FrameKind::kText:
        return FeedText(t, c);
    }
    return false;
  }

  bool FeedText(size_t t, uint8_t c) {
    Frame& f = Top(t);
    const ByteDfa& dfa = g_.patterns[static_cast<size_t>(Node(f.node).pattern)];
    const int32_t next = dfa.Next(f.end, c);
    if (next == ByteDfa::kDead) return false;
    f.end = next;
    f.a = dfa.Accepting(next) ? 1 : 0;
    return true;
  }

  // The value on top is complete: pop it and advance its container.
  bool ValueDone(size_t t) {
    MatchThread& th = T(t);
    th.stack.pop_back();
    if (th.stack.empty()) {
      th.done = true;
      return true;
    }
    Frame& parent = th.stack.back();
    if (parent.kind == FrameKind::kObject) {
      parent.sub = kObjAfterValue;
    } else {
      CHECK(parent.kind == FrameKind::kArray);
      ++parent.a;
      parent.sub = kArrAfterItem;
    }
    return true;
  }

  bool FeedValue(size_t t, uint8_t c, int run) {
    if (IsWhitespace(c)) {
      if (T(t).stack.size() == 1 && !g_.root_whitespace) return false;
      return Whitespace(t, run);
    }
    const int32_t node = Top(t).node;
    const SchemaNode& n = Node(node);
    if (n.kind == NodeKind::kAnyOf) {
      // One thread per alternative, each fed this first byte (alternatives are never anyOf).
      for (size_t i = 1; i < n.alternatives.size(); ++i) {
        const size_t f = Fork(t);
        if (f == kNoThread) break;
        Top(f).node = n.alternatives[i];
        if (!StartValue(f, c)) T(f).dead = true;
      }
      Top(t).node = n.alternatives[0];
    }
    return StartValue(t, c);
  }

  // Replaces the kValue frame on top by the frame its first byte `c` opens.
  bool StartValue(size_t t, uint8_t c) {
    Frame& f = Top(t);
    const int32_t node = f.node;
    const NodeKind kind = Node(node).kind;
    const bool any = kind == NodeKind::kAny;
    if (c == '{' && (any || kind == NodeKind::kObject)) {
      f = Frame{FrameKind::kObject, kObjOpen, 0, node, 0, 0};
      return true;
    }
    if (c == '[' && (any || kind == NodeKind::kArray)) {
      f = Frame{FrameKind::kArray, kArrOpen, 0, node, 0, 0};
      return true;
    }
    if (c == '"' && (any || kind == NodeKind::kString)) {
      const ByteDfa* dfa = any ? nullptr : Pattern(node);
      f = Frame{FrameKind::kString, kStrNormal, 0, any ? -1 : node, 0, 0, dfa ? dfa->start : 0};
      return true;
    }
    if ((c == '-' || IsDigit(c)) &&
        (any || kind == NodeKind::kNumber || kind == NodeKind::kInteger)) {
      const uint8_t flags = !any && Node(node).bounded ? kNumBounded : 0;
      f = Frame{FrameKind::kNumber, kNumStart, flags, node, 0, 0};
      return FeedNumber(t, c);
    }
    if (kind != NodeKind::kLiterals && !any) return false;
    const int32_t count = any ? 3 : static_cast<int32_t>(Node(node).literals.size());
    f = Frame{FrameKind::kLiteral, 0, 0, node, 0, 0, count};
    return FeedLiteral(t, c);
  }

  std::string_view LiteralText(int32_t node, int32_t k) const {
    const SchemaNode& n = Node(node);
    if (n.kind == NodeKind::kAny) return kAnyLiterals[k];
    return n.literals[static_cast<size_t>(k)];
  }

  bool FeedLiteral(size_t t, uint8_t c) {
    Frame& f = Top(t);
    const int32_t node = f.node;
    auto text = [&](int32_t k) { return LiteralText(node, k); };
    const auto [lo, hi] = Narrow(text, f.b, f.end, static_cast<size_t>(f.a), c);
    if (lo == hi) return false;
    f.b = lo;
    f.end = hi;
    ++f.a;
    if (text(lo).size() != static_cast<size_t>(f.a)) return true;
    // Literal lo is complete; longer ones (a number such as 10 after 1) go on in a fork.
    if (hi - lo > 1) {
      const size_t more = Fork(t);
      if (more != kNoThread) Top(more).b = lo + 1;
    }
    return ValueDone(t);
  }

  // Object of node n: free keys (no declared properties) or the declared ones in order.
  bool FreeKeys(const SchemaNode& n) const { return n.properties.empty(); }
  int32_t FreeValueNode(int32_t node) const {
    const SchemaNode& n = Node(node);
    return n.kind == NodeKind::kAny ? node : n.additional;
  }
  bool CanClose(const Frame& f) const {
    const auto& props = Node(f.node).properties;
    for (size_t i = static_cast<size_t>(f.a); i < props.size(); ++i) {
      if (props[i].required) return false;
    }
    return true;
  }
  bool MoreKeys(const Frame& f) const {
    const SchemaNode& n = Node(f.node);
    if (FreeKeys(n)) return FreeValueNode(f.node) >= 0;
    return static_cast<size_t>(f.a) < n.properties.size();
  }

  bool FeedObject(size_t t, uint8_t c, int run) {
    Frame& f = Top(t);
    switch (f.sub) {
      case kObjOpen:
      case kObjKeyNext:
        if (IsWhitespace(c)) return Whitespace(t, run);
        if (c == '}' && f.sub == kObjOpen && CanClose(f)) return ValueDone(t);
        if (c == '"') return StartKey(t);
        return false;
      case kObjColon:
        if (IsWhitespace(c)) return Whitespace(t, run);
        if (c != ':') return false;
        f.sub = kObjValue;
        return Push(t, ValueFrame(f.b >= 0 ? Node(f.node).properties[static_cast<size_t>(f.b)].value
                                           : FreeValueNode(f.node)));
      case kObjAfterValue:
        if (IsWhitespace(c)) return Whitespace(t, run);
        if (c == '}' && CanClose(f)) return ValueDone(t);
        if (c == ',' && MoreKeys(f)) {
          f.sub = kObjKeyNext;
          return true;
        }
        return false;
      default:
        return false;
    }
  }

  // After the opening quote of a key: a free key string, or one thread per declared property
  // that may come next (from `a` up to and including the next required one).
  bool StartKey(size_t t) {
    const Frame obj = Top(t);
    const SchemaNode& n = Node(obj.node);
    if (FreeKeys(n)) {
      if (FreeValueNode(obj.node) < 0) return false;
      return Push(t, Frame{FrameKind::kString, kStrNormal, kKeyString, -1, 0, 0});
    }
    if (LastCandidate(n, obj.a) < obj.a) return false;
    return Push(
        t, Frame{FrameKind::kKey, 0, 0, obj.node, 0, 0, static_cast<int32_t>(n.properties.size())});
  }

  // The last declared property that may come next after property a − 1: up to and including
  // the next required one (< a: none may).
  static int32_t LastCandidate(const SchemaNode& n, int32_t a) {
    const auto count = static_cast<int32_t>(n.properties.size());
    int32_t last = a;
    while (last < count && !n.properties[static_cast<size_t>(last)].required) ++last;
    return last == count ? count - 1 : last;
  }

  // Key text matched to its closing quote: the object now expects ':'.
  bool KeyDone(size_t t, int32_t property) {
    MatchThread& th = T(t);
    th.stack.pop_back();
    Frame& obj = th.stack.back();
    obj.sub = kObjColon;
    obj.b = property;
    if (property >= 0) obj.a = property + 1;
    return true;
  }

  // Narrows the key candidates by c; they must keep one that may come next (declared order).
  bool FeedKey(size_t t, uint8_t c) {
    MatchThread& th = T(t);
    Frame& f = th.stack.back();
    const Frame& obj = th.stack[th.stack.size() - 2];
    const SchemaNode& n = Node(f.node);
    auto text = [&](int32_t k) -> std::string_view {
      return n.properties[static_cast<size_t>(n.keys_sorted[static_cast<size_t>(k)])].key_text;
    };
    const auto [lo, hi] = Narrow(text, f.b, f.end, static_cast<size_t>(f.a), c);
    const int32_t first = obj.a, last = LastCandidate(n, obj.a);
    bool any = false;
    for (int32_t k = lo; k < hi && !any; ++k) {
      const int32_t j = n.keys_sorted[static_cast<size_t>(k)];
      any = j >= first && j <= last;
    }
    if (!any) return false;
    f.b = lo;
    f.end = hi;
    ++f.a;
    // Key texts end with their closing quote, so none is a prefix of another: a complete one
    // is the only candidate left.
    if (text(lo).size() == static_cast<size_t>(f.a))
      return KeyDone(t, n.keys_sorted[static_cast<size_t>(lo)]);
    return true;
  }

  bool FeedArray(size_t t, uint8_t c, int run) {
    Frame& f = Top(t);
    const SchemaNode& n = Node(f.node);
    // The node of item number f.a (the one a value would open now).
    const int32_t items = n.kind == NodeKind::kAny ? f.node
                          : static_cast<size_t>(f.a) < n.prefix_items.size()
                              ? n.prefix_items[static_cast<size_t>(f.a)]
                              : n.items;
    const int64_t min_items = n.kind == NodeKind::kAny ? 0 : n.min_items;
    const int64_t max_items = n.kind == NodeKind::kAny ? -1 : n.max_items;
    if (IsWhitespace(c) && f.sub != kArrValue) return Whitespace(t, run);
    switch (f.sub) {
      case kArrOpen:
        if (c == ']') return min_items == 0 ? ValueDone(t) : false;
        if (max_items == 0) return false;
        [[fallthrough]];
      case kArrNext:
        if (items < 0) return false;
        f.sub = kArrValue;
        if (!Push(t, ValueFrame(items))) return false;
        return FeedValue(t, c, 0);
      case kArrAfterItem:
        if (c == ']' && f.a >= min_items) return ValueDone(t);
        if (c == ',' && (max_items < 0 || f.a < max_items)) {
          f.sub = kArrNext;
          return true;
        }
        return false;
      default:
        return false;
    }
  }

  // The pattern of string node `node` (nullptr: none; node −1 is an unconstrained string).
  const ByteDfa* Pattern(int32_t node) const {
    if (node < 0) return nullptr;
    const int32_t p = Node(node).pattern;
    return p < 0 ? nullptr : &g_.patterns[static_cast<size_t>(p)];
  }

  // Steps string frame f's pattern by a decoded byte: false when the pattern cannot take it, or
  // could then only match past maxLength or short of minLength (f.a already counts the byte's
  // code point). With both lengths set, a pattern whose match lengths have gaps may still
  // leave no length within them (not checked).
  bool PatternStep(Frame* f, const ByteDfa& dfa, uint8_t byte) const {
    const int32_t next = dfa.Next(f->end, byte);
    if (next == ByteDfa::kDead) return false;
    const SchemaNode& node = Node(f->node);
    const auto at = static_cast<size_t>(next);
    if (node.max_length >= 0 && f->a + dfa.min_code_points[at] > node.max_length) return false;
    if (dfa.max_code_points[at] != ByteDfa::kUnbounded &&
        f->a + dfa.max_code_points[at] < node.min_length) {
      return false;
    }
    f->end = next;
    return true;
  }

  // Whether the pattern takes one of the decoded bytes [lo, hi] (an escape may go on).
  bool PatternTakesAny(const Frame& f, const ByteDfa& dfa, int lo, int hi) const {
    for (int byte = lo; byte <= hi; ++byte) {
      Frame probe = f;
      if (PatternStep(&probe, dfa, static_cast<uint8_t>(byte))) return true;
    }
    return false;
  }

  // The byte a one-character JSON escape stands for (0: not an escape).
  static uint8_t EscapedByte(uint8_t c) {
    switch (c) {
      case '"':
      case '\\':
      case '/':
        return c;
      case 'b':
        return '\b';
      case 'f':
        return '\f';
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      default:
        return 0;
    }
  }

  bool FeedString(size_t t, uint8_t c) {
    Frame& f = Top(t);
    const int64_t min_length = f.node >= 0 ? Node(f.node).min_length : 0;
    const int64_t max_length = f.node >= 0 ? Node(f.node).max_length : -1;
    const ByteDfa* dfa = Pattern(f.node);
    switch (f.sub) {
      case kStrNormal: {
        if (f.b != 0) {  // inside a multi-byte code point (b: the UTF-8 state)
          const uint8_t next = Utf8Next(static_cast<uint8_t>(f.b), c);
          if (next == kUtf8Bad) return false;
          if (dfa && !PatternStep(&f, *dfa, c)) return false;
          f.b = next;
          return true;
        }
        if (c == '"') {
          if (f.a < min_length) return false;
          if (dfa && !dfa->Accepting(f.end)) return false;
          if (f.flags & kKeyString) return KeyDone(t, -1);
          return ValueDone(t);
        }
        const uint8_t next = Utf8Next(0, c);
        if (c < 0x20 || next == kUtf8Bad) return false;
        if (max_length >= 0 && f.a >= max_length) return false;
        ++f.a;
        if (c == '\\') {
          // Escapes decode to '"', '\', '/' or a control character (with a pattern, \u
          // escapes are taken only for those).
          if (dfa && !PatternTakesAny(f, *dfa, 0, 0x1F) && !PatternTakesAny(f, *dfa, '"', '"') &&
              !PatternTakesAny(f, *dfa, '/', '/') && !PatternTakesAny(f, *dfa, '\\', '\\')) {
            return false;
          }
          f.sub = kStrEscape;
          return true;
        }
        if (dfa && !PatternStep(&f, *dfa, c)) return false;
        f.b = next;
        return true;
      }
      case kStrEscape:
        if (c == 'u') {
          if (dfa && !PatternTakesAny(f, *dfa, 0, 0x1F)) return false;
          f.sub = kStrHex;
          f.b = 4;  // hex digits still due | value so far << 4
          return true;
        }
        if (const uint8_t byte = EscapedByte(c); byte != 0) {
          if (dfa && !PatternStep(&f, *dfa, byte)) return false;
          f.sub = kStrNormal;
          return true;
        }
        return false;
      case kStrPairBackslash:
      case kStrPairU:
        if (c != (f.sub == kStrPairBackslash ? '\\' : 'u')) return false;
        f.sub = f.sub == kStrPairBackslash ? kStrPairU : kStrPairHex;
        if (f.sub == kStrPairHex) f.b = 4;
        return true;  // the pair is one code point: counted at its first half
      case kStrHex:
      case kStrPairHex: {
        if (!IsHex(c)) return false;
        const int due = (f.b & 0xF) - 1;
        const int value = (f.b >> 4) * 16 + HexValue(c);
        // Surrogates (D800–DFFF) only as a pair: high (D800–DBFF), then low (DC00–DFFF).
        if (due == 2) {
          const bool low = value >= 0xDC && value <= 0xDF;
          if (f.sub == kStrPairHex ? !low : low) return false;
        } else if (due == 3 && f.sub == kStrPairHex && value != 0xD) {
          return false;
        }
        if (dfa) {
          // The code points this escape can still name: [value << 4·due, (value + 1) << 4·due).
          const int lo = value << (4 * due), hi = ((value + 1) << (4 * due)) - 1;
          if (lo > 0x1F) return false;
          if (due == 0) {
            if (!PatternStep(&f, *dfa, static_cast<uint8_t>(value))) return false;
          } else if (!PatternTakesAny(f, *dfa, lo, std::min(hi, 0x1F))) {
            return false;
          }
        }
        if (due == 0) {
          const bool high = f.sub == kStrHex && value >= 0xD800 && value <= 0xDBFF;
          f.sub = high ? kStrPairBackslash : kStrNormal;
          f.b = 0;
        } else {
          f.b = due | (value << 4);
        }
        return true;
      }
      default:
        return false;
    }
  }

  bool FeedNumber(size_t t, uint8_t c) {
    Frame& f = Top(t);
    const bool integer = Node(f.node).kind == NodeKind::kInteger;
    uint8_t next = 0xFF;
    switch (f.sub) {
      case kNumStart:
        if (c == '-') next = kNumMinus;
        [[fallthrough]];
      case kNumMinus:
        if (c == '0') next = kNumZero;
        if (c >= '1' && c <= '9') next = kNumInt;
        break;
      case kNumInt:
        if (IsDigit(c)) next = kNumInt;
        [[fallthrough]];
      case kNumZero:
        if (!integer && c == '.') next = kNumFracStart;
        if (!integer && (c == 'e' || c == 'E')) next = kNumExpStart;
        break;
      case kNumFracStart:
      case kNumFrac:
        if (IsDigit(c)) next = kNumFrac;
        if (f.sub == kNumFrac && (c == 'e' || c == 'E')) next = kNumExpStart;
        break;
      case kNumExpStart:
        if (c == '+' || c == '-') next = kNumExpSign;
        [[fallthrough]];
      case kNumExpSign:
      case kNumExp:
        if (IsDigit(c)) next = kNumExp;
        break;
      default:
        break;
    }
    if (next != 0xFF) {
      if (f.a >= kMaxNumberBytes) return false;
      if (c == '-' && f.sub == kNumStart) f.flags |= kNumSigned;
      const int sign = f.flags & kNumSigned;
      if (integer && f.a - sign >= kMaxIntegerDigits) return false;
      if (f.flags & kNumBounded) return FeedBoundedNumber(&f, c, next);
      // Exponent digits (unbounded numbers: b counts them) within the grammar's limit.
      if (next == kNumExp && ++f.b > g_.max_exponent_digits) return false;
      ++f.a;
      f.sub = next;
      return true;
    }
    // The number ends before c: c belongs to the container.
    if (!NumberEnds(f)) return false;
    ValueDone(t);
    return Feed(t, c);
  }

  // A byte of a number with bounds (next: its sub-state): fixed point, and only while some
  // value within the bounds starts with the text.
  bool FeedBoundedNumber(Frame* f, uint8_t c, uint8_t next) {
    const SchemaNode& node = Node(f->node);
    const int scale = node.kind == NodeKind::kInteger ? 0 : kMaxBoundedFractionDigits;
    if (next == kNumExpStart) return false;
    if (IsDigit(c)) {
      if (next == kNumFrac) {
        const int n = FractionDigits(*f);
        if (n >= scale) return false;
        f->flags = static_cast<uint8_t>((f->flags & ~(0xF << kNumFractionShift)) |
                                        ((n + 1) << kNumFractionShift));
      } else if (f->a - (f->flags & kNumSigned) >= kMaxIntegerDigits - scale) {
        return false;
      }
      SetBoundedDigits(f, BoundedDigits(*f) * 10 + (c - '0'));
    }
    ++f->a;
    f->sub = next;
    bool ends = false;
    if (!BoundedViable(node, *f, &ends)) return false;
    f->flags = static_cast<uint8_t>(ends ? f->flags | kNumInRange : f->flags & ~kNumInRange);
    return true;
  }

  const JsonGrammar& g_;
  JsonMatchState* out_;
};

JsonMatchState JsonMatchState::Start(const JsonGrammar& grammar) {
  CHECK(!grammar.nodes.empty());
  JsonMatchState s;
  s.threads_.emplace_back();
  Frame root;
  root.kind = FrameKind::kValue;
  root.node = grammar.root;
  const SchemaNode& node = grammar.nodes[static_cast<size_t>(grammar.root)];
  if (node.kind == NodeKind::kText) {  // raw text: no value to open
    const ByteDfa& dfa = grammar.patterns[static_cast<size_t>(node.pattern)];
    root.kind = FrameKind::kText;
    root.end = dfa.start;
    root.a = dfa.Accepting(dfa.start) ? 1 : 0;
  }
  s.threads_[0].stack.push_back(root);
  s.size_ = 1;
  return s;
}

bool JsonMatchState::Advance(const JsonGrammar& grammar, uint8_t byte, JsonMatchState* out) const {
  CHECK(out != this);
  out->size_ = 0;
  Stepper stepper(grammar, out);
  for (size_t i = 0; i < size_; ++i) stepper.FeedCopy(threads_[i], byte);
  // Drop dead threads and duplicates, keeping the order (swaps keep every slot's capacity).
  size_t live = 0;
  for (size_t i = 0; i < out->size_; ++i) {
    MatchThread& th = out->threads_[i];
    if (th.dead) continue;
    bool duplicate = false;
    for (size_t j = 0; j < live && !duplicate; ++j) {
      const MatchThread& o = out->threads_[j];
      duplicate = o.done == th.done && o.ws_run == th.ws_run && o.stack == th.stack;
    }
    if (duplicate) continue;
    if (i != live) std::swap(out->threads_[live], th);
    ++live;
  }
  out->size_ = live;
  return live > 0;
}

bool JsonMatchState::AdvanceBytes(const JsonGrammar& grammar, std::string_view bytes,
                                  JsonMatchState* out, JsonMatchState* scratch) const {
  if (bytes.empty()) {
    *out = *this;
    return size_ > 0;
  }
  // Alternate between *out and *scratch so that the last byte lands in *out.
  JsonMatchState* bufs[2] = {out, scratch};
  const JsonMatchState* from = this;
  size_t which = (bytes.size() % 2 == 1) ? 0 : 1;
  for (size_t i = 0; i < bytes.size(); ++i) {
    JsonMatchState* to = bufs[which];
    if (!from->Advance(grammar, static_cast<uint8_t>(bytes[i]), to)) {
      out->size_ = 0;
      return false;
    }
    from = to;
    which ^= 1;
  }
  return true;
}

bool JsonMatchState::CanFinish() const {
  for (size_t i = 0; i < size_; ++i) {
    const MatchThread& th = threads_[i];
    if (th.done) return true;
    if (th.stack.size() != 1) continue;
    const Frame& f = th.stack[0];
    if (f.kind == FrameKind::kNumber && NumberEnds(f)) return true;
    if (f.kind == FrameKind::kText && f.a == 1) return true;
  }
  return false;
}

int64_t JsonMatchState::PlainStringRoom(const JsonGrammar& grammar) const {
  if (size_ == 0) return -1;
  int64_t room = -1;
  for (size_t i = 0; i < size_; ++i) {
    const MatchThread& th = threads_[i];
    if (th.done || th.stack.empty()) return -1;
    const Frame& f = th.stack.back();
    if (f.kind != FrameKind::kString || f.sub != kStrNormal || f.b != 0) return -1;
    if (f.node >= 0 && grammar.nodes[static_cast<size_t>(f.node)].pattern >= 0) return -1;
    const int64_t max_length =
        f.node >= 0 ? grammar.nodes[static_cast<size_t>(f.node)].max_length : -1;
    room = std::max(room, max_length < 0 ? kUnbounded : max_length - f.a);
  }
  return room;
}

}  // namespace strata::structured

namespace strata::structured {

bool JsonMatchState::PatternSpot(const JsonGrammar& grammar, int32_t* pattern,
                                 int32_t* pattern_state) const {
  if (size_ == 0) return false;
  for (size_t i = 0; i < size_; ++i) {
    const MatchThread& th = threads_[i];
    if (th.done || th.stack.empty()) return false;
    const Frame& f = th.stack.back();
    if (f.kind != FrameKind::kString || f.sub != kStrNormal || f.b != 0 || f.node < 0) return false;
    const SchemaNode& node = grammar.nodes[static_cast<size_t>(f.node)];
    if (node.pattern < 0 || node.max_length >= 0) return false;
    if (i == 0) {
      *pattern = node.pattern;
      *pattern_state = f.end;
    } else if (node.pattern != *pattern || f.end != *pattern_state) {
      return false;
    }
  }
  return true;
}

}  // namespace strata::structured
