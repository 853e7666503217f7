#include "engine/tokenizer/jinja/string_util.h"

#include <algorithm>

#include "engine/tokenizer/utf8.h"

namespace strata::engine::jinja {
namespace {

bool IsSpaceAt(std::string_view cp) {
  const Utf8Step step = DecodeUtf8Step(cp);
  return step.status == Utf8Status::kChar && IsPythonSpace(step.code_point);
}

bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

}  // namespace

std::vector<std::string_view> SplitCodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const size_t len = DecodeUtf8Step(s.substr(i)).length;
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<std::string_view> cps = SplitCodePoints(s);
  std::vector<std::string_view> strip_set;
  if (chars != nullptr) strip_set = SplitCodePoints(*chars);
  auto strip = [&](std::string_view cp) {
    if (chars == nullptr) return IsSpaceAt(cp);
    return std::find(strip_set.begin(), strip_set.end(), cp) != strip_set.end();
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strip(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip(cps[end - 1])) --end;
  }
  std::string out;
  for (size_t i = begin; i < end; ++i) out.append(cps[i]);
  return out;
}

std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit,
                                 bool from_right) {
  std::vector<std::string> parts;
  if (sep == nullptr) {
    // Whitespace runs; leading/trailing whitespace yields no empty parts.
    std::vector<std::string_view> cps = SplitCodePoints(s);
    std::vector<std::pair<size_t, size_t>> words;  // code point ranges
    for (size_t i = 0; i < cps.size();) {
      while (i < cps.size() && IsSpaceAt(cps[i])) ++i;
      if (i == cps.size()) break;
      size_t j = i;
      while (j < cps.size() && !IsSpaceAt(cps[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    auto join = [&](size_t from, size_t to) {
      std::string out;
      for (size_t k = from; k < to; ++k) out.append(cps[k]);
      return out;
    };
    if (maxsplit >= 0 && static_cast<size_t>(maxsplit) < words.size()) {
      const size_t keep = static_cast<size_t>(maxsplit);
      if (!from_right) {
        for (size_t w = 0; w < keep; ++w) parts.push_back(join(words[w].first, words[w].second));
        parts.push_back(join(words[keep].first, cps.size()));  // keeps trailing space
      } else {
        const size_t first = words.size() - keep;
        parts.push_back(join(0, words[first - 1].second));  // keeps leading space
        for (size_t w = first; w < words.size(); ++w) {
          parts.push_back(join(words[w].first, words[w].second));
        }
      }
      return parts;
    }
    for (const auto& [a, b] : words) parts.push_back(join(a, b));
    return parts;
  }
  std::vector<size_t> hits;
  for (size_t pos = s.find(*sep); pos != std::string_view::npos;
       pos = s.find(*sep, pos + sep->size())) {
    hits.push_back(pos);
  }
  if (maxsplit >= 0 && static_cast<size_t>(maxsplit) < hits.size()) {
    if (from_right) {
      hits.erase(hits.begin(), hits.end() - maxsplit);
    } else {
      hits.resize(static_cast<size_t>(maxsplit));
    }
  }
  size_t start = 0;
  for (size_t pos : hits) {
    parts.emplace_back(s.substr(start, pos - start));
    start = pos + sep->size();
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

std::string PyReplace(std::string_view s, std::string_view from, std::string_view to,
                      int64_t count) {
  std::string out;
  if (from.empty()) {
    std::vector<std::string_view> cps = SplitCodePoints(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(to);
        ++done;
      }
      if (i < cps.size()) out.append(cps[i]);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t pos = s.find(from, start);
    if (pos == std::string_view::npos) break;
    out.append(s.substr(start, pos - start));
    out.append(to);
    start = pos + from.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

std::string AsciiUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string PyTitle(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    if (IsAsciiAlpha(c)) {
      c = prev_cased ? AsciiLower(std::string(1, c))[0] : AsciiUpper(std::string(1, c))[0];
      prev_cased = true;
    } else {
      prev_cased = static_cast<unsigned char>(c) >= 0x80 && prev_cased;
    }
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::string out = AsciiLower(s);
  if (!out.empty()) out[0] = AsciiUpper(out.substr(0, 1))[0];
  return out;
}

}  // namespace strata::engine::jinja
