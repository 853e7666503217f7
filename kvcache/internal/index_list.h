// IndexList: a doubly linked list over the integer ids 0..capacity-1, kept in two arrays, so
// that push, pop, remove-from-the-middle and membership are O(1) and nothing is allocated after
// construction. Each id is in the list at most once. Used for the block pool's free queue and
// the checkpoint LRU list. Not thread-safe (the engine loop thread owns the caches).
#pragma once

#include <cstdint>
#include <vector>

#include "core/check.h"

namespace strata::kvcache::internal {

class IndexList {
 public:
  static constexpr int32_t kNone = -1;

  explicit IndexList(int32_t capacity)
      : prev_(static_cast<size_t>(capacity) + 1, kNone),
        next_(static_cast<size_t>(capacity) + 1, kNone),
        sentinel_(capacity) {
    CHECK_GE(capacity, 0);
    prev_[sentinel_] = sentinel_;
    next_[sentinel_] = sentinel_;
  }

  int32_t capacity() const { return sentinel_; }
  int32_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  bool Contains(int32_t id) const {
    CHECK(id >= 0 && id < sentinel_) << "id " << id;
    return next_[id] != kNone;
  }

  // First / last id, or kNone when empty.
  int32_t Front() const { return empty() ? kNone : next_[sentinel_]; }
  int32_t Back() const { return empty() ? kNone : prev_[sentinel_]; }
  // The id after `id` (which must be in the list), or kNone at the end.
  int32_t Next(int32_t id) const {
    CHECK(Contains(id));
    return next_[id] == sentinel_ ? kNone : next_[id];
  }

  void PushBack(int32_t id) { InsertAfter(prev_[sentinel_], id); }
  void PushFront(int32_t id) { InsertAfter(sentinel_, id); }

  int32_t PopFront() {
    CHECK(!empty());
    int32_t id = next_[sentinel_];
    Remove(id);
    return id;
  }

  void Remove(int32_t id) {
    CHECK(Contains(id)) << "id " << id << " is not in the list";
    next_[prev_[id]] = next_[id];
    prev_[next_[id]] = prev_[id];
    prev_[id] = kNone;
    next_[id] = kNone;
    --size_;
  }

 private:
  void InsertAfter(int32_t at, int32_t id) {
    CHECK(!Contains(id)) << "id " << id << " is already in the list";
    prev_[id] = at;
    next_[id] = next_[at];
    prev_[next_[at]] = id;
    next_[at] = id;
    ++size_;
  }

  // Node `sentinel_` (== capacity) closes the ring: next_[sentinel_] is the front,
  // prev_[sentinel_] the back. An id not in the list has prev_ == next_ == kNone.
  std::vector<int32_t> prev_;
  std::vector<int32_t> next_;
  int32_t sentinel_;
  int32_t size_ = 0;
};

}  // namespace strata::kvcache::internal
