// A map from string keys to values with a cost each, bounded by the total cost: the least
// recently used entries go first. Thread-safe.
#pragma once

#include <cstdint>
#include <iterator>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace strata::frontend::internal {

template <typename V>
class LruMap {
 public:
  explicit LruMap(int64_t capacity) : capacity_(capacity) {}

  // Keeps `value` under `key` (replacing what the key held), evicting the least recently used
  // entries until the total fits (their keys appended to `evicted` where given); an entry
  // costing more than the capacity is not kept (false, and the key then holds nothing).
  bool Put(std::string key, V value, int64_t cost, std::vector<std::string>* evicted = nullptr) {
    absl::MutexLock lock(&mu_);
    EraseLocked(key);
    if (cost > capacity_) return false;
    while (cost_ + cost > capacity_) {
      if (evicted != nullptr) evicted->push_back(lru_.back().key);
      EraseEntry(std::prev(lru_.end()));
    }
    lru_.push_front(Entry{std::move(key), std::move(value), cost});
    index_[lru_.front().key] = lru_.begin();
    cost_ += cost;
    return true;
  }
  // A copy of the value under `key`, refreshed as recently used.
  std::optional<V> Find(std::string_view key) {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->value;
  }
  bool Erase(std::string_view key) {
    absl::MutexLock lock(&mu_);
    return EraseLocked(key);
  }

  int64_t capacity() const { return capacity_; }
  int64_t cost() const {
    absl::MutexLock lock(&mu_);
    return cost_;
  }
  int64_t size() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int64_t>(lru_.size());
  }

 private:
  struct Entry {
    std::string key;
    V value;
    int64_t cost = 0;
  };
  bool EraseLocked(std::string_view key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    EraseEntry(it->second);
    return true;
  }
  void EraseEntry(typename std::list<Entry>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    cost_ -= it->cost;
    index_.erase(std::string_view(it->key));
    lru_.erase(it);
  }

  const int64_t capacity_;
  mutable absl::Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  // Keys view the entries' own strings (list nodes never move).
  absl::flat_hash_map<std::string_view, typename std::list<Entry>::iterator> index_
      ABSL_GUARDED_BY(mu_);
  int64_t cost_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata::frontend::internal
