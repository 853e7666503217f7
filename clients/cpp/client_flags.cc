// client_flags.h.
#include "clients/cpp/client_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace strata::client {

absl::StatusOr<ClientFlags> ClientFlags::Parse(const std::vector<std::string>& args,
                                               const std::set<std::string>& with_value,
                                               const std::set<std::string>& switches) {
  ClientFlags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", args[i], "'"));
    }
    const std::string name = args[i].substr(2);
    if (switches.count(name)) {
      flags.values_[name] = "";
    } else if (with_value.count(name)) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      flags.values_[name] = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
  }
  return flags;
}

std::optional<std::string> ClientFlags::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::optional<double>> ClientFlags::GetDouble(const std::string& name) const {
  std::optional<std::string> text = Get(name);
  if (!text) return std::optional<double>();
  double v = 0;
  if (!absl::SimpleAtod(*text, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be a number"));
  }
  return std::optional<double>(v);
}

absl::StatusOr<std::optional<int64_t>> ClientFlags::GetInt(const std::string& name) const {
  std::optional<std::string> text = Get(name);
  if (!text) return std::optional<int64_t>();
  int64_t v = 0;
  if (!absl::SimpleAtoi(*text, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be an integer"));
  }
  return std::optional<int64_t>(v);
}

absl::StatusOr<std::vector<int32_t>> ClientFlags::GetIds(const std::string& name) const {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(Get(name).value_or(""), ',', absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be comma-separated token ids"));
    }
    ids.push_back(id);
  }
  return ids;
}

}  // namespace strata::client
