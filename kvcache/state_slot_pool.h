// StateSlotPool: fixed-size KDA state slots, one per live sequence. A slot is the row index of
// that sequence's recurrent state S and conv cache in every KDA layer's state arrays
// (cache_layout.h); its size does not depend on sequence length, so this is a plain free list,
// not pages. Copying state bytes (checkpoint -> slot) is the executor's job; this class only
// hands out and takes back indices.
//
// Reuse order is LIFO (the most recently freed slot is reused first: its rows are likeliest to
// be warm); a fresh pool hands out 0, 1, 2, ...
//
// Not thread-safe: owned by the engine loop thread.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "kvcache/ids.h"

namespace strata::kvcache {

class StateSlotPool {
 public:
  explicit StateSlotPool(int32_t num_slots);

  // A free slot, or nullopt when all are held.
  std::optional<SlotId> Allocate();
  // Returns a held slot; CHECK-fails on a slot that is not held.
  void Free(SlotId slot);

  bool is_allocated(SlotId slot) const;
  int32_t num_slots() const { return static_cast<int32_t>(allocated_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_held() const { return num_slots() - num_free(); }
  // Fraction of slots held, in [0, 1] (0 for an empty pool).
  double usage() const;

  absl::Status CheckInvariants() const;

 private:
  std::vector<SlotId> free_;        // stack; back() is handed out next
  std::vector<uint8_t> allocated_;  // [num_slots]
};

}  // namespace strata::kvcache
