#include "core/json_limits.h"

#include <algorithm>
#include <cstddef>
#include <deque>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace strata {
namespace {

// The payload that marks a limit error (its value: the path).
constexpr char kLimitPayload[] = "strata.dev/json-limit";

// Debian's Abseil has its own absl::string_view, which absl's functions want.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// A char iterator that publishes how far the lexer has read, so a limit hit inside a SAX
// callback can name its byte offset (nlohmann tells the handler positions only for syntax
// errors).
class TrackedChars {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackedChars(const char* at, const char** furthest) : at_(at), furthest_(furthest) {}
  reference operator*() const { return *at_; }
  TrackedChars& operator++() {
    *furthest_ = ++at_;
    return *this;
  }
  TrackedChars operator++(int) {
    TrackedChars before = *this;
    ++*this;
    return before;
  }
  bool operator==(const TrackedChars& other) const { return at_ == other.at_; }
  bool operator!=(const TrackedChars& other) const { return at_ != other.at_; }

 private:
  const char* at_;
  const char** furthest_;
};

// `text` with each byte that does not belong to a well-formed UTF-8 character replaced by
// U+FFFD: nlohmann's syntax errors quote the bytes read last, which can end inside a character,
// and messages go into JSON error bodies.
std::string WellFormedUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char lead = byte(i);
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the second byte's range
    if (lead < 0x80) {
      length = 1;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;   // no overlong forms
      if (lead == 0xED) high = 0x9F;  // no surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;  // up to U+10FFFF
    }
    bool ok = length > 0 && i + length <= text.size();
    for (size_t k = 1; ok && k < length; ++k) {
      const unsigned char c = byte(i + k);
      ok = k == 1 ? (c >= low && c <= high) : (c & 0xC0) == 0x80;
    }
    if (ok) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

// `key` for a message: at most 48 bytes (cut at a character boundary), then "…".
std::string Shortened(std::string_view key) {
  constexpr size_t kMaxBytes = 48;
  if (key.size() <= kMaxBytes) return std::string(key);
  size_t cut = kMaxBytes;
  while (cut > 0 && (static_cast<unsigned char>(key[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(Av(key.substr(0, cut)), "…");
}

// An object's members while it is open, duplicates kept until it ends. A deque: appending
// never moves the members already read (a vector of ordered_map's pair<const string, json>
// would copy them, subtrees and all, each time it grows).
template <typename BasicJson>
using OpenMembers = std::deque<std::pair<std::string, BasicJson>>;

// Positions 0..n−1 ordered by hash[i] (32 bits), equal hashes in position order: an LSD
// radix sort, three passes of 11 bits (sequential memory, where a hash table would miss the
// cache once per key: ~20 ms for 1,000,000 keys here, where a hash set took ~300).
std::vector<uint32_t> OrderByHash(const std::vector<uint32_t>& hash) {
  constexpr int kBits = 11;
  constexpr size_t kBuckets = size_t{1} << kBits;
  std::vector<uint32_t> order(hash.size()), next(hash.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
  std::vector<size_t> start(kBuckets);
  for (int shift = 0; shift < 32; shift += kBits) {
    std::fill(start.begin(), start.end(), 0);
    for (uint32_t i : order) ++start[(hash[i] >> shift) & (kBuckets - 1)];
    size_t at = 0;
    for (size_t& s : start) at += std::exchange(s, at);
    for (uint32_t i : order) next[start[(hash[i] >> shift) & (kBuckets - 1)]++] = i;
    order.swap(next);
  }
  return order;
}

// Drops the later copies of duplicate keys, moving the last value to the first key's position
// (nlohmann's meaning).
template <typename BasicJson>
void RemoveDuplicateKeys(OpenMembers<BasicJson>* members) {
  OpenMembers<BasicJson>& m = *members;
  std::vector<bool> dropped(m.size(), false);
  bool any = false;
  // Later member i repeats earlier member j: j takes i's value.
  auto merge = [&](size_t j, size_t i) {
    m[j].second = std::move(m[i].second);
    dropped[i] = any = true;
  };
  constexpr size_t kScanBelow = 16;  // small objects: a scan beats sorting
  if (m.size() < kScanBelow) {
    for (size_t i = 1; i < m.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (!dropped[j] && m[j].first == m[i].first) {
          merge(j, i);
          break;
        }
      }
    }
  } else {
    std::vector<uint32_t> hash(m.size());
    for (size_t i = 0; i < m.size(); ++i) {
      hash[i] = static_cast<uint32_t>(absl::Hash<absl::string_view>{}(Av(m[i].first)));
    }
    const std::vector<uint32_t> order = OrderByHash(hash);
    // Each run of equal hashes, in position order: a key merges into the first equal key of its
    // run (`distinct`: those firsts; more than one only when different keys share a hash).
    std::vector<uint32_t> distinct;
    for (size_t begin = 0, end = 0; begin < order.size(); begin = end) {
      end = begin + 1;
      while (end < order.size() && hash[order[end]] == hash[order[begin]]) ++end;
      if (end - begin == 1) continue;
      distinct.assign(1, order[begin]);
      for (size_t a = begin + 1; a < end; ++a) {
        auto same = std::find_if(distinct.begin(), distinct.end(),
                                 [&](uint32_t d) { return m[d].first == m[order[a]].first; });
        if (same != distinct.end()) {
          merge(*same, order[a]);
        } else {
          distinct.push_back(order[a]);
        }
      }
    }
  }
  if (!any) return;
  size_t kept = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    if (dropped[i]) continue;
    if (kept != i) m[kept] = std::move(m[i]);
    ++kept;
  }
  m.resize(kept);
}

// The SAX handler that builds the value (nlohmann's json_sax_dom_parser, bounded).
template <typename BasicJson>
class BoundedBuilder {
 public:
  using number_integer_t = typename BasicJson::number_integer_t;
  using number_unsigned_t = typename BasicJson::number_unsigned_t;
  using number_float_t = typename BasicJson::number_float_t;
  using string_t = typename BasicJson::string_t;
  using binary_t = typename BasicJson::binary_t;
  using object_t = typename BasicJson::object_t;
  using array_t = typename BasicJson::array_t;

  BoundedBuilder(const JsonLimits& limits, const char* begin, const char* const* furthest)
      : limits_(limits), begin_(begin), furthest_(furthest) {}

  bool null() { return Scalar(BasicJson(nullptr)); }
  bool boolean(bool v) { return Scalar(BasicJson(v)); }
  bool number_integer(number_integer_t v) { return Scalar(BasicJson(v)); }
  bool number_unsigned(number_unsigned_t v) { return Scalar(BasicJson(v)); }
  bool number_float(number_float_t v, const string_t& /*text*/) { return Scalar(BasicJson(v)); }
  bool string(string_t& v) { return Scalar(BasicJson(std::move(v))); }
  bool binary(binary_t& /*bytes*/) {  // only binary formats (CBOR, …) have them
    error_ = absl::InvalidArgumentError("binary values are not JSON");
    return false;
  }

  bool start_object(std::size_t /*unknown size*/) { return Open(BasicJson::object()); }
  bool start_array(std::size_t /*unknown size*/) { return Open(BasicJson::array()); }

  bool key(string_t& k) {
    Level& level = levels_[depth_ - 1];
    if (++level.members > limits_.max_object_members) {
      return Fail(
          absl::StrCat("JSON object with more than ", limits_.max_object_members, " members"),
          /*with_key=*/false);
    }
    level.object->emplace_back(std::move(k), BasicJson());
    return true;
  }

  bool end_object() {
    Level& level = levels_[depth_ - 1];
    OpenMembers<BasicJson>& open = *level.object;
    RemoveDuplicateKeys(&open);
    object_t& object = *level.value->template get_ptr<object_t*>();
    if constexpr (requires { typename object_t::Container; }) {  // nlohmann::ordered_map
      // Keys are unique: append to the vector under the map, sized once.
      auto& members = static_cast<typename object_t::Container&>(object);
      members.reserve(open.size());
      for (auto& [k, v] : open) members.emplace_back(std::move(k), std::move(v));
    } else {
      for (auto& [k, v] : open) object.emplace(std::move(k), std::move(v));
    }
    open.clear();
    --depth_;
    return true;
  }

  bool end_array() {
    --depth_;
    return true;
  }

  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) {
    std::string_view what = ex.what();
    // "[json.exception.parse_error.101] parse error at ...": the bracket is for C++ callers.
    if (!what.empty() && what.front() == '[') {
      const size_t close = what.find("] ");
      if (close != std::string_view::npos) what.remove_prefix(close + 2);
    }
    error_ = absl::InvalidArgumentError(WellFormedUtf8(what));
    return false;
  }

  absl::Status error() const { return error_; }
  BasicJson TakeRoot() { return std::move(root_); }

 private:
  struct Level {
    BasicJson* value = nullptr;                // the array or object being filled
    OpenMembers<BasicJson>* object = nullptr;  // objects: their members so far (the last: read now)
    int64_t members = 0;                       // members so far (duplicate keys count again)
  };

  // Where the next value goes: the root, the end of the open array, the open object's member.
  absl::StatusOr<BasicJson*> Place(BasicJson value) {
    if (++values_ > limits_.max_values) {
      return Error(absl::StrCat("JSON text with more than ", limits_.max_values, " values"),
                   /*with_key=*/true);
    }
    if (depth_ == 0) {
      root_ = std::move(value);
      return &root_;
    }
    Level& level = levels_[depth_ - 1];
    if (level.object != nullptr) {
      BasicJson& slot = level.object->back().second;
      slot = std::move(value);
      return &slot;
    }
    ++level.members;
    array_t& array = *level.value->template get_ptr<array_t*>();
    array.push_back(std::move(value));
    return &array.back();
  }

  bool Scalar(BasicJson value) {
    absl::StatusOr<BasicJson*> placed = Place(std::move(value));
    if (!placed.ok()) {
      error_ = placed.status();
      return false;
    }
    return true;
  }

  bool Open(BasicJson container) {
    const bool is_object = container.is_object();
    if (depth_ >= static_cast<size_t>(std::max(limits_.max_depth, 0))) {
      return Fail(absl::StrCat("JSON nesting deeper than ", limits_.max_depth, " levels"),
                  /*with_key=*/true);
    }
    absl::StatusOr<BasicJson*> placed = Place(std::move(container));
    if (!placed.ok()) {
      error_ = placed.status();
      return false;
    }
    if (depth_ == levels_.size()) levels_.emplace_back();
    while (is_object && objects_.size() <= depth_) objects_.emplace_back();
    Level& level = levels_[depth_];
    level.value = *placed;
    level.object = is_object ? &objects_[depth_] : nullptr;
    level.members = 0;
    ++depth_;
    return true;
  }

  // The limit error `what` at the byte the lexer has reached, naming the path of the value
  // being read (`with_key`: an object's current member is part of it).
  absl::Status Error(const std::string& what, bool with_key) const {
    const size_t byte = *furthest_ > begin_ ? static_cast<size_t>(*furthest_ - begin_ - 1) : 0;
    std::string path;
    int parts = 0;
    for (size_t d = 0; d < depth_; ++d) {
      const Level& level = levels_[d];
      const bool innermost = d + 1 == depth_;
      if (innermost && !with_key) break;
      if (++parts > kMaxJsonPathParts) {
        absl::StrAppend(&path, "…");
        break;
      }
      if (level.object != nullptr) {
        absl::StrAppend(&path, path.empty() ? "" : ".", Shortened(level.object->back().first));
      } else {
        // The element being read: the last one, or (innermost) the one about to be added.
        const int64_t index = innermost ? level.members : level.members - 1;
        absl::StrAppend(&path, "[", index, "]");
      }
    }
    absl::Status status = absl::InvalidArgumentError(
        absl::StrCat(what, " at byte ", byte,
                     path.empty() ? "" : absl::StrCat(" (at '", path, "')"), " (the limit)"));
    status.SetPayload(kLimitPayload, absl::Cord(path));
    return status;
  }

  bool Fail(const std::string& what, bool with_key) {
    error_ = Error(what, with_key);
    return false;
  }

  const JsonLimits limits_;
  const char* begin_;
  const char* const* furthest_;
  BasicJson root_;
  // Open containers, outermost first; levels_[depth_..] are spare. A deque: levels point at
  // their objects' members, which must not move when a deeper level is added.
  std::vector<Level> levels_;
  std::deque<OpenMembers<BasicJson>> objects_;  // by depth, reused from object to object
  size_t depth_ = 0;
  int64_t values_ = 0;
  absl::Status error_;
};

template <typename BasicJson>
absl::StatusOr<BasicJson> Parse(std::string_view text, const JsonLimits& limits) {
  const char* furthest = text.data();
  BoundedBuilder<BasicJson> builder(limits, text.data(), &furthest);
  const bool ok = BasicJson::sax_parse(TrackedChars(text.data(), &furthest),
                                       TrackedChars(text.data() + text.size(), &furthest), &builder,
                                       nlohmann::json::input_format_t::json,
                                       /*strict=*/true, /*ignore_comments=*/false);
  if (!ok) {
    absl::Status error = builder.error();
    if (error.ok()) error = absl::InvalidArgumentError("not valid JSON");
    return error;
  }
  return builder.TakeRoot();
}

}  // namespace

absl::StatusOr<nlohmann::ordered_json> ParseBoundedJson(std::string_view text,
                                                        const JsonLimits& limits) {
  return Parse<nlohmann::ordered_json>(text, limits);
}

absl::StatusOr<nlohmann::json> ParseBoundedJsonSorted(std::string_view text,
                                                      const JsonLimits& limits) {
  return Parse<nlohmann::json>(text, limits);
}

bool IsJsonLimitError(const absl::Status& status) {
  return status.GetPayload(kLimitPayload).has_value();
}

std::string JsonLimitPath(const absl::Status& status) {
  const auto path = status.GetPayload(kLimitPayload);  // absl's own optional
  return path.has_value() ? std::string(*path) : std::string();
}

void AppendNewMember(nlohmann::ordered_json* object, std::string key,
                     nlohmann::ordered_json value) {
  if (object->is_null()) *object = nlohmann::ordered_json::object();
  CHECK(object->is_object());
  auto& members = static_cast<nlohmann::ordered_json::object_t::Container&>(
      *object->get_ptr<nlohmann::ordered_json::object_t*>());
  members.emplace_back(std::move(key), std::move(value));
}

}  // namespace strata
