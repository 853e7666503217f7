#include "server/frontend/response_store.h"

#include <utility>

#include "core/check.h"

namespace strata::frontend {

ResponseStore::ResponseStore(int64_t capacity_bytes) : responses_(capacity_bytes) {
  CHECK_GE(capacity_bytes, 1);
}

bool ResponseStore::Put(const std::string& id, StoredResponse stored) {
  const auto bytes = static_cast<int64_t>(id.size() + stored.response.dump().size() +
                                          stored.messages.dump().size());
  return responses_.Put(id, std::move(stored), bytes);
}

}  // namespace strata::frontend
