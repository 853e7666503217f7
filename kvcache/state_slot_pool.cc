#include "kvcache/state_slot_pool.h"

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace strata::kvcache {

StateSlotPool::StateSlotPool(int32_t num_slots) : allocated_(static_cast<size_t>(num_slots), 0) {
  CHECK_GE(num_slots, 0);
  free_.reserve(static_cast<size_t>(num_slots));
  for (SlotId s = num_slots - 1; s >= 0; --s) free_.push_back(s);
}

std::optional<SlotId> StateSlotPool::Allocate() {
  if (free_.empty()) return std::nullopt;
  SlotId slot = free_.back();
  free_.pop_back();
  allocated_[slot] = 1;
  return slot;
}

void StateSlotPool::Free(SlotId slot) {
  CHECK(slot >= 0 && slot < num_slots()) << "slot " << slot << " of " << num_slots();
  CHECK(allocated_[slot]) << "double free of state slot " << slot;
  allocated_[slot] = 0;
  free_.push_back(slot);
}

bool StateSlotPool::is_allocated(SlotId slot) const {
  CHECK(slot >= 0 && slot < num_slots()) << "slot " << slot << " of " << num_slots();
  return allocated_[slot] != 0;
}

double StateSlotPool::usage() const {
  if (num_slots() == 0) return 0.0;
  return static_cast<double>(num_held()) / static_cast<double>(num_slots());
}

absl::Status StateSlotPool::CheckInvariants() const {
  std::vector<uint8_t> in_free(allocated_.size(), 0);
  for (SlotId s : free_) {
    if (s < 0 || s >= num_slots()) return absl::InternalError(absl::StrCat("bad slot ", s));
    if (in_free[s]) return absl::InternalError(absl::StrCat("slot ", s, " freed twice"));
    if (allocated_[s]) return absl::InternalError(absl::StrCat("slot ", s, " free and held"));
    in_free[s] = 1;
  }
  for (SlotId s = 0; s < num_slots(); ++s) {
    if (!allocated_[s] && !in_free[s]) {
      return absl::InternalError(absl::StrCat("slot ", s, " is neither free nor held"));
    }
  }
  return absl::OkStatus();
}

}  // namespace strata::kvcache
