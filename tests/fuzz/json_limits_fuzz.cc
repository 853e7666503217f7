// libFuzzer target: the bounded JSON parser of request bodies (core/json_limits.h), against
// nlohmann's own parser (built by tests/fuzz/run_fuzz.sh). Input: JSON text. Small limits
// (depth 8, 64 values, 16 members an object) so that inputs reach them. The bounded parser
// refuses a text for a limit exactly when a plain count of the text (nlohmann's SAX events)
// breaks one; otherwise both parsers agree on what is JSON, and on the value, key order and
// the last of duplicate keys included.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/json_limits.h"

namespace {

using Json = nlohmann::ordered_json;

// Counts what the limits bound, from nlohmann's SAX events (duplicate keys count again).
struct Counter : nlohmann::json_sax<Json> {
  int depth = 0, max_depth = 0;
  int64_t values = 0, widest = 0;
  std::vector<int64_t> members;  // of each open object (-1: an array)

  bool Value() {
    ++values;
    return true;
  }
  bool Open(bool object) {
    Value();
    max_depth = std::max(max_depth, ++depth);
    members.push_back(object ? 0 : -1);
    return true;
  }
  bool Close() {
    --depth;
    members.pop_back();
    return true;
  }
  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Open(true); }
  bool key(string_t&) override {
    widest = std::max(widest, ++members.back());
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(false); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  strata::JsonLimits limits;
  limits.max_depth = 8;
  limits.max_values = 64;
  limits.max_object_members = 16;
  const absl::StatusOr<Json> bounded = strata::ParseBoundedJson(text, limits);
  const Json reference = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  Counter count;
  const bool valid = Json::sax_parse(text, &count);
  const bool over = count.max_depth > limits.max_depth || count.values > limits.max_values ||
                    count.widest > limits.max_object_members;
  if (bounded.ok()) {
    CHECK(valid && !over);
    CHECK(!reference.is_discarded());
    CHECK(*bounded == reference);
    CHECK(bounded->dump() == reference.dump());  // key order too
    const absl::StatusOr<nlohmann::json> sorted = strata::ParseBoundedJsonSorted(text, limits);
    CHECK(sorted.ok());
    CHECK(*sorted == nlohmann::json::parse(text));
    return 0;
  }
  CHECK(!bounded.status().message().empty());
  if (strata::IsJsonLimitError(bounded.status())) {
    CHECK(over);  // counted up to where the bounded parser stopped, or past it
  } else {
    CHECK(!valid && reference.is_discarded());  // a syntax error, a number beyond a double
    CHECK(!over);  // the events before the error broke no limit (both saw the same ones)
  }
  return 0;
}
