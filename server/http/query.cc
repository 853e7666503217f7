// query.h
#include "server/http/query.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace strata::http {

std::string QueryParam(std::string_view target, std::string_view key) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return "";
  for (absl::string_view pair :
       absl::StrSplit(absl::string_view(target.data() + q + 1, target.size() - q - 1), '&')) {
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != absl::string_view(key.data(), key.size())) continue;
    if (eq == absl::string_view::npos) return "";
    std::string out;
    const absl::string_view v = pair.substr(eq + 1);
    for (size_t i = 0; i < v.size(); ++i) {
      int hex = 0;
      if (v[i] == '%' && i + 2 < v.size() && absl::SimpleHexAtoi(v.substr(i + 1, 2), &hex)) {
        out += static_cast<char>(hex);
        i += 2;
      } else {
        out += v[i] == '+' ? ' ' : v[i];
      }
    }
    return out;
  }
  return "";
}

}  // namespace strata::http
