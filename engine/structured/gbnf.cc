// gbnf.h: text → rules of alternatives (groups, multi-sequence classes and repetitions become
// rules of their own) → checks (defined, root, can finish, no left recursion) → flat elements.
#include "engine/structured/gbnf.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "engine/structured/code_points.h"
#include "engine/tokenizer/utf8.h"

namespace strata::structured {
namespace {

using Seq = std::vector<CfgElement>;
using Alts = std::vector<Seq>;

constexpr size_t kNowhere = std::string_view::npos;

struct RuleDef {
  std::string name;
  Alts alts;
  bool defined = false;
  size_t offset = kNowhere;  // where it is defined, or first used while undefined
};

CfgElement Byte(uint8_t lo, uint8_t hi) { return {CfgElement::kBytes, lo, hi, -1}; }
CfgElement Ref(int32_t rule) { return {CfgElement::kRule, 0, 0, rule}; }

bool IsNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : t_(text) {}

  absl::StatusOr<std::vector<RuleDef>> Parse() {
    SkipSpace();
    while (pos_ < t_.size()) {
      const size_t start = pos_;
      const std::string_view name = Name();
      if (name.empty()) return Error("expected a rule name (letters, digits, '-' and '_')");
      SkipSpace();
      if (!t_.substr(pos_).starts_with("::=")) {
        return Error(absl::StrCat("expected '::=' after the rule name '", std::string(name), "'"));
      }
      pos_ += 3;
      const int32_t id = RuleId(name, start);
      if (rules_[static_cast<size_t>(id)].defined) {
        return ErrorAt(
            start, absl::StrCat("rule '", std::string(name), "' is defined twice (first on line ",
                                LineOf(rules_[static_cast<size_t>(id)].offset), ")"));
      }
      rules_[static_cast<size_t>(id)].defined = true;
      rules_[static_cast<size_t>(id)].offset = start;
      current_ = id;
      ASSIGN_OR_RETURN(Alts alts, Alternates(0));
      if (pos_ < t_.size()) {
        // Alternates stops at ')' or at the next rule; only the first is out of place here.
        if (t_[pos_] == ')') return Error("')' closes no group");
      }
      stored_elements_ += CountElements(alts);
      rules_[static_cast<size_t>(id)].alts = std::move(alts);
    }
    return std::move(rules_);
  }

  absl::Status ErrorAt(size_t offset, std::string_view message) const {
    const size_t line_start = t_.rfind('\n', offset == 0 ? 0 : offset - 1);
    const size_t column = line_start == kNowhere || offset == 0 ? offset + 1 : offset - line_start;
    return absl::InvalidArgumentError(absl::StrCat("grammar line ", LineOf(offset), ", column ",
                                                   column, ": ", std::string(message)));
  }

  int LineOf(size_t offset) const {
    return 1 +
           static_cast<int>(std::count(
               t_.begin(), t_.begin() + static_cast<ptrdiff_t>(std::min(offset, t_.size())), '\n'));
  }

 private:
  absl::Status Error(std::string_view message) const { return ErrorAt(pos_, message); }

  // The character at `offset` for a message: its UTF-8 bytes, or \xNN for a byte that starts
  // none (messages go into JSON error bodies, which must be UTF-8).
  std::string CharAt(size_t offset) const {
    const engine::Utf8Step step = engine::DecodeUtf8Step(t_.substr(offset));
    if (step.status == engine::Utf8Status::kChar)
      return std::string(t_.substr(offset, step.length));
    constexpr char kHex[] = "0123456789ABCDEF";
    const auto byte = static_cast<unsigned char>(t_[offset]);
    return {'\\', 'x', kHex[byte >> 4], kHex[byte & 15]};
  }

  static size_t CountElements(const Alts& alts) {
    size_t n = 0;
    for (const Seq& s : alts) n += s.size() + 1;
    return n;
  }

  // Whitespace (newlines too) and comments.
  void SkipSpace() {
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view Name() {
    const size_t start = pos_;
    while (pos_ < t_.size() && IsNameChar(t_[pos_])) ++pos_;
    return t_.substr(start, pos_ - start);
  }

  // A name followed by '::=' starts the next rule.
  bool AtRuleStart() {
    const size_t saved = pos_;
    Name();
    SkipSpace();
    const bool start = t_.substr(pos_).starts_with("::=");
    pos_ = saved;
    return start;
  }

  int32_t RuleId(std::string_view name, size_t offset) {
    auto [it, added] = ids_.try_emplace(std::string(name), static_cast<int32_t>(rules_.size()));
    if (added) rules_.push_back({std::string(name), {}, false, offset});
    return it->second;
  }

  int32_t NewRule(Alts alts) {
    stored_elements_ += CountElements(alts);
    rules_.push_back({absl::StrCat(rules_[static_cast<size_t>(current_)].name, "_", ++generated_),
                      std::move(alts), true, pos_});
    return static_cast<int32_t>(rules_.size() - 1);
  }

  absl::Status CheckSize(size_t pending_elements) const {
    if (stored_elements_ + pending_elements > kMaxGrammarElements) {
      return Error(absl::StrCat("the grammar expands to more than ", kMaxGrammarElements,
                                " elements (the limit; large repetition counts multiply)"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Alts> Alternates(int depth) {
    Alts alts;
    for (;;) {
      ASSIGN_OR_RETURN(Seq seq, Sequence(depth));
      alts.push_back(std::move(seq));
      if (pos_ >= t_.size() || t_[pos_] != '|') return alts;
      ++pos_;
    }
  }

  absl::StatusOr<Seq> Sequence(int depth) {
    Seq seq;
    size_t last = 0;  // where the last symbol's elements start
    bool have_last = false;
    for (;;) {
      SkipSpace();
      if (pos_ >= t_.size()) break;
      const char c = t_[pos_];
      if (c == '|' || c == ')') break;
      if (IsNameChar(c) && AtRuleStart()) break;
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) return Error(absl::StrCat("'", std::string(1, c), "' repeats nothing"));
        RETURN_IF_ERROR(Repeat(&seq, last));
        have_last = false;
      } else {
        last = seq.size();
        have_last = true;
        if (c == '"') {
          RETURN_IF_ERROR(Literal(&seq));
        } else if (c == '[') {
          RETURN_IF_ERROR(Class(&seq));
        } else if (c == '.') {
          ++pos_;
          AppendSet({{0, kMaxCodePoint}}, &seq);
        } else if (c == '(') {
          if (depth + 1 > kMaxGrammarNesting) {
            return Error(
                absl::StrCat("groups nest deeper than ", kMaxGrammarNesting, " (the limit)"));
          }
          const size_t open = pos_++;
          ASSIGN_OR_RETURN(Alts alts, Alternates(depth + 1));
          if (pos_ >= t_.size() || t_[pos_] != ')') {
            return Error(
                absl::StrCat("expected ')' to close the group opened on line ", LineOf(open)));
          }
          ++pos_;
          seq.push_back(Ref(NewRule(std::move(alts))));
        } else if (IsNameChar(c)) {
          const size_t at = pos_;
          seq.push_back(Ref(RuleId(Name(), at)));
        } else if (c == '<') {
          return Error("token references ('<…>') are not supported");
        } else {
          return Error(absl::StrCat("unexpected '", CharAt(pos_), "'"));
        }
      }
      RETURN_IF_ERROR(CheckSize(seq.size()));
    }
    return seq;
  }

  // One code point of a literal or class, escapes decoded.
  absl::StatusOr<uint32_t> Char() {
    if (t_[pos_] != '\\') {
      const engine::Utf8Step step = engine::DecodeUtf8Step(t_.substr(pos_));
      if (step.status != engine::Utf8Status::kChar) {
        return Error("the grammar is not well-formed UTF-8");
      }
      pos_ += step.length;
      return static_cast<uint32_t>(step.code_point);
    }
    const size_t at = pos_++;
    if (pos_ >= t_.size()) return ErrorAt(at, "a '\\' ends the grammar");
    const char e = t_[pos_++];
    switch (e) {
      case 'n':
        return uint32_t{'\n'};
      case 'r':
        return uint32_t{'\r'};
      case 't':
        return uint32_t{'\t'};
      case 'x':
      case 'u':
      case 'U': {
        const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
          const char h = pos_ < t_.size() ? t_[pos_] : '\0';
          if (!absl::ascii_isxdigit(static_cast<unsigned char>(h))) {
            return ErrorAt(
                at, absl::StrCat("'\\", std::string(1, e), "' takes ", digits, " hex digits"));
          }
          v = v * 16 + static_cast<uint32_t>(
                           absl::ascii_isdigit(static_cast<unsigned char>(h))
                               ? h - '0'
                               : absl::ascii_tolower(static_cast<unsigned char>(h)) - 'a' + 10);
          ++pos_;
        }
        if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) {
          return ErrorAt(at,
                         "the escape is not a Unicode scalar value (surrogates and values "
                         "past U+10FFFF are not)");
        }
        return v;
      }
      default:
        if (absl::ascii_ispunct(static_cast<unsigned char>(e)))
          return uint32_t{static_cast<unsigned char>(e)};
        return ErrorAt(at, absl::StrCat("unknown escape '\\", CharAt(pos_ - 1), "'"));
    }
  }

  absl::Status Literal(Seq* seq) {
    const size_t open = pos_++;
    while (pos_ < t_.size() && t_[pos_] != '"') {
      ASSIGN_OR_RETURN(uint32_t cp, Char());
      std::string bytes;
      engine::AppendUtf8(cp, &bytes);
      for (char b : bytes) seq->push_back(Byte(static_cast<uint8_t>(b), static_cast<uint8_t>(b)));
    }
    if (pos_ >= t_.size()) return ErrorAt(open, "the string literal is not closed");
    ++pos_;
    return absl::OkStatus();
  }

  absl::Status Class(Seq* seq) {
    const size_t open = pos_++;
    const bool negated = pos_ < t_.size() && t_[pos_] == '^';
    if (negated) ++pos_;
    CpSet set;
    while (pos_ < t_.size() && t_[pos_] != ']') {
      ASSIGN_OR_RETURN(uint32_t lo, Char());
      uint32_t hi = lo;
      if (pos_ + 1 < t_.size() && t_[pos_] == '-' && t_[pos_ + 1] != ']') {
        ++pos_;
        ASSIGN_OR_RETURN(hi, Char());
        if (hi < lo) return ErrorAt(open, "a range in the class runs backwards");
      }
      set.push_back({lo, hi});
    }
    if (pos_ >= t_.size()) return ErrorAt(open, "the character class is not closed");
    ++pos_;
    set = Normalize(std::move(set));
    if (negated) set = Complement(set);
    if (Utf8Sequences(set).empty()) return ErrorAt(open, "the character class matches nothing");
    AppendSet(set, seq);
    return absl::OkStatus();
  }

  // One code point of `set`: inline when one sequence of byte ranges encodes it, else a rule
  // with one alternative per sequence.
  void AppendSet(const CpSet& set, Seq* seq) {
    std::vector<ByteSeq> sequences = Utf8Sequences(set);
    if (sequences.size() == 1) {
      for (ByteRange r : sequences[0]) seq->push_back(Byte(r.lo, r.hi));
      return;
    }
    Alts alts;
    for (const ByteSeq& s : sequences) {
      Seq alt;
      for (ByteRange r : s) alt.push_back(Byte(r.lo, r.hi));
      alts.push_back(std::move(alt));
    }
    seq->push_back(Ref(NewRule(std::move(alts))));
  }

  absl::StatusOr<int> Count() {
    int n = 0;
    const size_t start = pos_;
    while (pos_ < t_.size() && absl::ascii_isdigit(static_cast<unsigned char>(t_[pos_]))) {
      n = n * 10 + (t_[pos_++] - '0');
      if (n > kMaxGrammarRepeat) {
        return ErrorAt(
            start, absl::StrCat("a repetition count is over ", kMaxGrammarRepeat, " (the limit)"));
      }
    }
    return pos_ == start ? -1 : n;
  }

  // The quantifier at pos_ applied to the symbol at seq[last…].
  absl::Status Repeat(Seq* seq, size_t last) {
    const size_t at = pos_;
    int min = 0;
    int max = -1;  // unbounded
    switch (t_[pos_++]) {
      case '*':
        break;
      case '+':
        min = 1;
        break;
      case '?':
        max = 1;
        break;
      default: {  // '{'
        ASSIGN_OR_RETURN(const int m, Count());
        int n = m;
        if (pos_ < t_.size() && t_[pos_] == ',') {
          ++pos_;
          ASSIGN_OR_RETURN(n, Count());
        } else if (m < 0) {
          return ErrorAt(at, "expected {m}, {m,}, {m,n} or {,n}");
        }
        if (pos_ >= t_.size() || t_[pos_] != '}') {
          return ErrorAt(at, "expected {m}, {m,}, {m,n} or {,n}");
        }
        ++pos_;
        min = std::max(m, 0);
        max = n;
        if (max >= 0 && max < min)
          return ErrorAt(at, "the repetition's maximum is below its minimum");
      }
    }
    Seq atom(seq->begin() + static_cast<ptrdiff_t>(last), seq->end());
    seq->resize(last);
    if (atom.size() != 1) atom = {Ref(NewRule({std::move(atom)}))};
    const CfgElement one = atom[0];
    // Each optional copy is a rule of 3 elements; the unbounded tail one of 4.
    RETURN_IF_ERROR(CheckSize(seq->size() + static_cast<size_t>(min) +
                              3 * static_cast<size_t>(std::max(max - min, 2))));
    for (int i = 0; i < min; ++i) seq->push_back(one);
    if (max < 0) {
      // R ::= one R | ε (right recursion: the matcher's stacks do not grow with it).
      const auto r = static_cast<int32_t>(rules_.size());
      NewRule({{one, Ref(r)}, {}});
      seq->push_back(Ref(r));
    } else if (max > min) {
      // (one (one (…)?)?)? — each optional nested in the previous, so one parse per text.
      int32_t inner = -1;
      for (int k = 0; k < max - min; ++k) {
        Seq body = {one};
        if (inner >= 0) body.push_back(Ref(inner));
        inner = NewRule({std::move(body), {}});
      }
      seq->push_back(Ref(inner));
    }
    return absl::OkStatus();
  }

  std::string_view t_;
  size_t pos_ = 0;
  std::vector<RuleDef> rules_;
  std::map<std::string, int32_t, std::less<>> ids_;
  int32_t current_ = 0;
  int generated_ = 0;
  size_t stored_elements_ = 0;
};

// Rules some alternative of which finishes using `ok` rules only, to a fixed point: with
// `empty_only`, those that may match the empty text.
std::vector<bool> FixedPoint(const std::vector<RuleDef>& rules, bool empty_only) {
  std::vector<bool> ok(rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (ok[r]) continue;
      for (const Seq& alt : rules[r].alts) {
        const bool all = std::all_of(alt.begin(), alt.end(), [&](const CfgElement& e) {
          return e.kind == CfgElement::kRule ? ok[static_cast<size_t>(e.rule)] : !empty_only;
        });
        if (all) {
          ok[r] = changed = true;
          break;
        }
      }
    }
  }
  return ok;
}

// A cycle of rules each of which may start with the next (past rules that may match nothing),
// as names joined by " → ", or empty.
std::string LeftRecursion(const std::vector<RuleDef>& rules, const std::vector<bool>& nullable) {
  std::vector<std::vector<int32_t>> starts(rules.size());
  for (size_t r = 0; r < rules.size(); ++r) {
    for (const Seq& alt : rules[r].alts) {
      for (const CfgElement& e : alt) {
        if (e.kind != CfgElement::kRule) break;
        starts[r].push_back(e.rule);
        if (!nullable[static_cast<size_t>(e.rule)]) break;
      }
    }
  }
  enum Color : uint8_t { kWhite, kGrey, kBlack };
  std::vector<Color> color(rules.size(), kWhite);
  std::vector<int32_t> path;
  std::string cycle;
  // Iterative DFS: (rule, next edge index) frames.
  for (size_t root = 0; root < rules.size() && cycle.empty(); ++root) {
    if (color[root] != kWhite) continue;
    std::vector<std::pair<int32_t, size_t>> frames = {{static_cast<int32_t>(root), 0}};
    color[root] = kGrey;
    while (!frames.empty() && cycle.empty()) {
      auto& [r, edge] = frames.back();
      const std::vector<int32_t>& next = starts[static_cast<size_t>(r)];
      if (edge == next.size()) {
        color[static_cast<size_t>(r)] = kBlack;
        frames.pop_back();
        continue;
      }
      const int32_t s = next[edge++];
      if (color[static_cast<size_t>(s)] == kGrey) {
        std::vector<std::string> names;
        bool on = false;
        for (const auto& f : frames) {
          on = on || f.first == s;
          if (on) names.push_back(rules[static_cast<size_t>(f.first)].name);
        }
        names.push_back(rules[static_cast<size_t>(s)].name);
        cycle = absl::StrJoin(names, " → ");
      } else if (color[static_cast<size_t>(s)] == kWhite) {
        color[static_cast<size_t>(s)] = kGrey;
        frames.push_back({s, 0});
      }
    }
  }
  return cycle;
}

}  // namespace

absl::StatusOr<CfgGrammar> CompileGbnf(std::string_view text) {
  if (text.size() > kMaxGrammarBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the grammar is ", text.size(), " bytes; the limit is ", kMaxGrammarBytes));
  }
  Parser parser(text);
  ASSIGN_OR_RETURN(std::vector<RuleDef> rules, parser.Parse());
  int32_t root = -1;
  for (size_t r = 0; r < rules.size(); ++r) {
    if (!rules[r].defined) {
      return parser.ErrorAt(rules[r].offset,
                            absl::StrCat("rule '", rules[r].name, "' is used but not defined"));
    }
    if (rules[r].name == "root") root = static_cast<int32_t>(r);
  }
  if (root < 0) {
    return absl::InvalidArgumentError(
        "the grammar has no rule named 'root' (generation starts there)");
  }
  const std::vector<bool> finishes = FixedPoint(rules, /*empty_only=*/false);
  for (size_t r = 0; r < rules.size(); ++r) {
    if (!finishes[r]) {
      return parser.ErrorAt(
          rules[r].offset,
          absl::StrCat("rule '", rules[r].name,
                       "' can never finish: every alternative needs itself again (or a rule that "
                       "never finishes)"));
    }
  }
  const std::string cycle = LeftRecursion(rules, FixedPoint(rules, /*empty_only=*/true));
  if (!cycle.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the grammar is left-recursive (", cycle,
        "; a repetition of something that may match nothing counts too): put the repetition "
        "on the right, e.g. 'list ::= item (\",\" item)*' for 'list ::= list \",\" item | "
        "item'"));
  }
  CfgGrammar g;
  g.root = root;
  g.alternatives.resize(rules.size());
  for (size_t r = 0; r < rules.size(); ++r) {
    g.rule_names.push_back(rules[r].name);
    for (const Seq& alt : rules[r].alts) {
      g.alternatives[r].push_back(static_cast<int32_t>(g.elements.size()));
      g.elements.insert(g.elements.end(), alt.begin(), alt.end());
      g.elements.push_back(CfgElement{});
    }
  }
  return g;
}

}  // namespace strata::structured
