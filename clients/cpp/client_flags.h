// Command-line flags of strata-client: `--name value` and `--switch`, nothing positional.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::client {

class ClientFlags {
 public:
  // `with_value`: flags taking a value; `switches`: flags without one. Unknown flags and
  // missing values are InvalidArgument.
  static absl::StatusOr<ClientFlags> Parse(const std::vector<std::string>& args,
                                           const std::set<std::string>& with_value,
                                           const std::set<std::string>& switches);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> Get(const std::string& name) const;
  absl::StatusOr<std::optional<double>> GetDouble(const std::string& name) const;
  absl::StatusOr<std::optional<int64_t>> GetInt(const std::string& name) const;
  // "1,2,3" → ids.
  absl::StatusOr<std::vector<int32_t>> GetIds(const std::string& name) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace strata::client
