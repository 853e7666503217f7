#include "dist/expert_placement.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "core/file.h"
#include "core/status.h"

namespace strata::dist {

bool ExpertPlacement::Holds(int rank, int expert) const {
  const std::vector<int>& ranks = replicas[static_cast<size_t>(expert)];
  return std::binary_search(ranks.begin(), ranks.end(), rank);
}

int ExpertPlacement::RankFor(int expert, int origin_rank, int64_t row) const {
  const std::vector<int>& ranks = replicas[static_cast<size_t>(expert)];
  if (ranks.size() == 1) return ranks[0];
  if (std::binary_search(ranks.begin(), ranks.end(), origin_rank)) return origin_rank;
  const int64_t n = static_cast<int64_t>(ranks.size());
  return ranks[static_cast<size_t>((origin_rank + row) % n)];
}

int ExpertPlacement::num_copies() const {
  int n = 0;
  for (const auto& r : replicas) n += static_cast<int>(r.size());
  return n;
}

std::string ExpertPlacement::DebugString() const {
  std::vector<std::string> parts;
  for (int r = 0; r < world_size; ++r) {
    parts.push_back(
        absl::StrCat("rank ", r, ": [", absl::StrJoin(local[static_cast<size_t>(r)], ","), "]"));
  }
  return absl::StrJoin(parts, " | ");
}

absl::StatusOr<ExpertPlacement> PlacementFromReplicas(std::vector<std::vector<int>> replicas,
                                                      int world_size, const std::string& what) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": world_size ", world_size, " < 1"));
  }
  if (replicas.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": no experts (need at least 1)"));
  }
  ExpertPlacement p;
  p.num_experts = static_cast<int>(replicas.size());
  p.world_size = world_size;
  p.local.resize(static_cast<size_t>(world_size));
  for (int e = 0; e < p.num_experts; ++e) {
    std::vector<int>& ranks = replicas[static_cast<size_t>(e)];
    if (ranks.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": expert ", e, " is on no rank"));
    }
    std::sort(ranks.begin(), ranks.end());
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= world_size) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": expert ", e, " on rank ", ranks[i],
                                                       ", outside [0, ", world_size, ")"));
      }
      if (i > 0 && ranks[i] == ranks[i - 1]) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": expert ", e, " placed twice on rank ", ranks[i]));
      }
      p.local[static_cast<size_t>(ranks[i])].push_back(e);
    }
  }
  p.replicas = std::move(replicas);
  return p;
}

ExpertPlacement EvenPlacement(int num_experts, int world_size) {
  CHECK_GE(num_experts, 1);
  CHECK_GE(world_size, 1);
  std::vector<std::vector<int>> replicas(static_cast<size_t>(num_experts));
  const int base = num_experts / world_size, extra = num_experts % world_size;
  int e = 0;
  for (int r = 0; r < world_size; ++r) {
    const int count = base + (r < extra ? 1 : 0);
    for (int i = 0; i < count; ++i) replicas[static_cast<size_t>(e++)] = {r};
  }
  auto placement = PlacementFromReplicas(std::move(replicas), world_size);
  CHECK(placement.ok()) << placement.status();
  return *std::move(placement);
}

namespace {

using nlohmann::json;

absl::Status Bad(const std::string& source, const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, " ", what));
}

// An integer field within [lo, hi).
absl::StatusOr<int> IntIn(const json& value, const std::string& source, const std::string& field,
                          int lo, int hi, const std::string& limit_name) {
  if (!value.is_number_integer()) return Bad(source, field, "must be an integer");
  const int64_t v = value.get<int64_t>();
  if (v < lo || v >= hi) {
    return Bad(source, field,
               absl::StrCat("= ", v, " is outside [", lo, ", ", hi, ") (", limit_name, ")"));
  }
  return static_cast<int>(v);
}

absl::Status CheckKeys(const json& object, const std::string& source, const std::string& where,
                       const std::vector<std::string>& allowed) {
  for (const auto& item : object.items()) {
    if (std::find(allowed.begin(), allowed.end(), item.key()) == allowed.end()) {
      return Bad(source, where + item.key(),
                 absl::StrCat("is not a known key (known: ", absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCount(const json& root, const char* key, int expected,
                        const std::string& source) {
  if (!root.contains(key)) return absl::OkStatus();
  const json& v = root[key];
  if (!v.is_number_integer() || v.get<int64_t>() != expected) {
    return Bad(source, key,
               absl::StrCat("= ", v.dump(), " does not match the ", key, " ", expected,
                            " of the model/group"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<int>>> ParseHome(const json& root, const std::string& source,
                                                        int num_experts, int world_size) {
  if (!root.contains("home")) return EvenPlacement(num_experts, world_size).replicas;
  std::vector<std::vector<int>> replicas(static_cast<size_t>(num_experts));
  const json& home = root["home"];
  if (!home.is_array() || home.size() != static_cast<size_t>(num_experts)) {
    return Bad(source, "home",
               absl::StrCat("must be an array of ", num_experts, " ranks (one per expert)"));
  }
  for (int e = 0; e < num_experts; ++e) {
    ASSIGN_OR_RETURN(const int rank,
                     IntIn(home[static_cast<size_t>(e)], source, absl::StrCat("home[", e, "]"), 0,
                           world_size, "world_size"));
    replicas[static_cast<size_t>(e)] = {rank};
  }
  return replicas;
}

absl::Status ParseReplicas(const json& root, const std::string& source, int num_experts,
                           int world_size, std::vector<std::vector<int>>& replicas) {
  if (!root.contains("replicas")) return absl::OkStatus();
  const json& list = root["replicas"];
  if (!list.is_array()) return Bad(source, "replicas", "must be an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = absl::StrCat("replicas[", i, "]");
    const json& item = list[i];
    if (!item.is_object()) return Bad(source, where, "must be an object {expert, ranks}");
    RETURN_IF_ERROR(CheckKeys(item, source, where + ".", {"expert", "ranks"}));
    if (!item.contains("expert") || !item.contains("ranks")) {
      return Bad(source, where, "needs both \"expert\" and \"ranks\"");
    }
    ASSIGN_OR_RETURN(const int expert, IntIn(item["expert"], source, where + ".expert", 0,
                                             num_experts, "num_experts"));
    const json& ranks = item["ranks"];
    if (!ranks.is_array()) return Bad(source, where + ".ranks", "must be an array of ranks");
    std::vector<int>& holders = replicas[static_cast<size_t>(expert)];
    for (size_t j = 0; j < ranks.size(); ++j) {
      const std::string field = absl::StrCat(where, ".ranks[", j, "]");
      ASSIGN_OR_RETURN(const int rank, IntIn(ranks[j], source, field, 0, world_size, "world_size"));
      if (std::find(holders.begin(), holders.end(), rank) != holders.end()) {
        return Bad(source, field, absl::StrCat("= ", rank, ": rank already holds expert ", expert));
      }
      holders.push_back(rank);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExpertPlacement> ParsePlacement(const std::string& json_text,
                                               const std::string& source, int num_experts,
                                               int world_size) {
  if (num_experts < 1 || world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": need num_experts >= 1 and ",
                                                   "world_size >= 1 (got ", num_experts, ", ",
                                                   world_size, ")"));
  }
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError(source + ": not valid JSON");
  if (!root.is_object()) return absl::InvalidArgumentError(source + ": must be a JSON object");
  RETURN_IF_ERROR(CheckKeys(root, source, "", {"num_experts", "world_size", "home", "replicas"}));
  RETURN_IF_ERROR(CheckCount(root, "num_experts", num_experts, source));
  RETURN_IF_ERROR(CheckCount(root, "world_size", world_size, source));
  ASSIGN_OR_RETURN(std::vector<std::vector<int>> replicas,
                   ParseHome(root, source, num_experts, world_size));
  RETURN_IF_ERROR(ParseReplicas(root, source, num_experts, world_size, replicas));
  return PlacementFromReplicas(std::move(replicas), world_size, source);
}

absl::StatusOr<ExpertPlacement> LoadPlacement(const std::string& path, int num_experts,
                                              int world_size) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat(path, ": cannot read the placement file"));
  }
  return ParsePlacement(*text, path, num_experts, world_size);
}

std::string PlacementToJson(const ExpertPlacement& placement) {
  json root;
  root["num_experts"] = placement.num_experts;
  root["world_size"] = placement.world_size;
  json home = json::array(), replicas = json::array();
  for (int e = 0; e < placement.num_experts; ++e) {
    const std::vector<int>& ranks = placement.replicas[static_cast<size_t>(e)];
    home.push_back(ranks[0]);
    if (ranks.size() > 1) {
      replicas.push_back(
          {{"expert", e}, {"ranks", std::vector<int>(ranks.begin() + 1, ranks.end())}});
    }
  }
  root["home"] = home;
  root["replicas"] = replicas;
  return root.dump(2) + "\n";
}

ExpertPlacement PlaceWithReplicas(const std::vector<int64_t>& measured_tokens, int world_size,
                                  int num_replicas) {
  const int num_experts = static_cast<int>(measured_tokens.size());
  ExpertPlacement p = EvenPlacement(num_experts, world_size);
  std::vector<std::vector<int>> replicas = p.replicas;
  auto per_copy = [&](int e) {
    return static_cast<double>(measured_tokens[static_cast<size_t>(e)]) /
           static_cast<double>(replicas[static_cast<size_t>(e)].size());
  };
  for (int added = 0; added < num_replicas; ++added) {
    int hot = -1;
    for (int e = 0; e < num_experts; ++e) {
      CHECK_GE(measured_tokens[static_cast<size_t>(e)], 0) << "expert " << e;
      if (replicas[static_cast<size_t>(e)].size() == static_cast<size_t>(world_size)) continue;
      if (hot < 0 || per_copy(e) > per_copy(hot)) hot = e;
    }
    if (hot < 0) break;  // every rank holds every expert
    std::vector<double> load(static_cast<size_t>(world_size), 0.0);
    for (int e = 0; e < num_experts; ++e) {
      for (int r : replicas[static_cast<size_t>(e)]) load[static_cast<size_t>(r)] += per_copy(e);
    }
    std::vector<int>& holders = replicas[static_cast<size_t>(hot)];
    int best = -1;
    for (int r = 0; r < world_size; ++r) {
      if (std::find(holders.begin(), holders.end(), r) != holders.end()) continue;
      if (best < 0 || load[static_cast<size_t>(r)] < load[static_cast<size_t>(best)]) best = r;
    }
    holders.push_back(best);
    std::sort(holders.begin(), holders.end());
  }
  auto placed = PlacementFromReplicas(std::move(replicas), world_size);
  CHECK(placed.ok()) << placed.status();
  return *std::move(placed);
}

}  // namespace strata::dist
