// The Prometheus text exposition of a registry, for the tests of metric families.
#pragma once

#include <sstream>
#include <string>

#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace strata::server {

inline std::string ExpositionText(const prometheus::Registry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

}  // namespace strata::server
