// The disk tier: offloaded entries as files in one directory (--kv-offload-dir) under a byte
// budget (--kv-offload-disk), least recently used first out, that outlive a restart.
//
// Files: one per entry, written atomically and checksummed (disk_entry.h; docs/kv-offload.md).
// Every file name and header carries the identity fingerprint, so a server of another
// checkpoint, cache dtype or parallel layout never opens another's files, and leaves them.
//
// Start-up: Open locks the directory (one server per directory), removes this identity's `.tmp`
// leftovers of a crash and rebuilds the index from the files' 64-byte headers, oldest mtime
// first in the LRU order: one open + one small read per file, no payload read. A file of this
// identity that is truncated, zeroed, swapped or otherwise bad is logged and deleted.
//
// Budget: the sum of file sizes (header + payload) of the indexed entries, including the ones
// still queued for writing, never exceeds capacity_bytes; Put evicts least recently used
// entries (their files are deleted by the writer thread, before any later write).
//
// Threading: every public method may be called from any thread, but the design is that the
// engine loop thread calls them all and none of them waits for disk I/O except Get, Flush and
// WaitForPrefetches (and Open and the destructor). Two internal threads own the I/O:
//   writer  takes write and delete jobs in FIFO order from a bounded queue; a Put that finds the
//           queue full is dropped (counted) instead of waiting
//   reader  serves Prefetch requests; results wait in memory until TakePrefetched
//
// Read-ahead protocol (the engine thread never blocks on a read):
//   step n:    Prefetch({keys the scheduler will need})       queued, returns at once
//   step n+k:  TakePrefetched(key) → nullopt                  still loading: ask next step
//                                  → bytes                    load them into the cache
//                                  → NotFound / DataLoss      recompute (a DataLoss entry is gone)
//   abort:     CancelPrefetch(key)                            frees a result nobody will take
// Every Prefetch of a key present in the tier must be followed by TakePrefetched or
// CancelPrefetch of it: a result held until then counts in prefetched_bytes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/durable_file.h"
#include "kvcache/offload/load_latency.h"
#include "kvcache/offload/offload_key.h"

namespace strata::kvcache {

struct DiskTierOptions {
  // Bounds of the writer queue (payload bytes and jobs waiting for the writer thread); a Put
  // beyond either is dropped, except into an empty queue (so no entry is too big to queue).
  int64_t max_queued_write_bytes = int64_t{256} << 20;
  int max_queued_writes = 4096;
  // fsync each file before its rename: entries then outlive a power loss, not just the process.
  bool fsync = false;
};

struct DiskTierStats {
  int64_t num_entries = 0;
  int64_t bytes_used = 0;  // header + payload bytes of the indexed entries (queued ones too)
  int64_t capacity_bytes = 0;
  int64_t hits = 0;               // loads (Get, prefetches) that returned bytes
  int64_t misses = 0;             // loads of an absent key, or whose file was bad or gone
  int64_t bytes_written = 0;      // file bytes written by the writer thread
  int64_t bytes_read = 0;         // payload bytes returned by loads
  int64_t write_failures = 0;     // writes that failed (disk full, I/O error): entry dropped
  int64_t dropped_puts = 0;       // Puts dropped because the writer queue was full
  int64_t refused_puts = 0;       // Puts of an entry bigger than the capacity
  int64_t evictions = 0;          // entries deleted to make room (at Put, or at Open for a smaller
                                  // capacity)
  int64_t corrupt_entries = 0;    // this identity's bad files: skipped at Open or found by a load
  int64_t foreign_files = 0;      // files of other identities (or unknown names) left alone at Open
  int64_t tmp_files_removed = 0;  // this identity's unfinished writes removed at Open
  int64_t queued_writes = 0;
  int64_t queued_write_bytes = 0;
  int64_t prefetches_pending = 0;  // requested and not loaded yet
  int64_t prefetched_bytes = 0;    // loaded and not taken yet
  double open_scan_seconds = 0;    // time Open took to rebuild the index
  LoadLatency load_latency;        // file read + verification per load
};

class DiskTier {
 public:
  // Opens (creating it where missing) `dir` for the entries of `identity` with a budget of
  // `capacity_bytes`. Errors: InvalidArgument for a bad identity or capacity_bytes <= header
  // size; FailedPrecondition "--kv-offload-dir DIR is in use by another process" when another
  // DiskTier (in any process) holds the directory; InvalidArgument / Internal naming the flag and
  // path when the directory cannot be created or locked.
  static absl::StatusOr<std::unique_ptr<DiskTier>> Open(const std::string& dir,
                                                        int64_t capacity_bytes,
                                                        const OffloadIdentity& identity,
                                                        const DiskTierOptions& options = {});
  // Waits for queued writes (Flush), stops the threads, releases the directory lock.
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Queues `bytes` to be written under `key` and indexes it at once (a Prefetch or Get before
  // the write is done is served from memory). Evicts least recently used entries to fit. An
  // entry already present only becomes most recently used (its bytes are the same by
  // construction: the key names the prefix). Never waits for I/O. Errors (nothing stored):
  // InvalidArgument when header + payload exceed the capacity; ResourceExhausted when the
  // writer queue is full (counted in dropped_puts).
  absl::Status Put(const OffloadKey& key, std::string bytes);

  // Whether `key` is indexed (written or queued). No effect on recency or stats.
  bool Contains(const OffloadKey& key) const;

  // Reads `key` on the calling thread (tests, tools; the engine uses Prefetch): the bytes and
  // the entry becomes most recently used, NotFound when absent, DataLoss naming the file when it
  // is corrupt or truncated (the entry is then dropped and its file deleted).
  absl::StatusOr<std::string> Get(const OffloadKey& key);

  // Asks the reader thread to load each present key that has no request yet (the key becomes
  // most recently used). Absent keys count as misses and get no request.
  void Prefetch(absl::Span<const OffloadKey> keys);
  // nullopt while `key`'s load is still running; else its result, handed over once: the bytes,
  // NotFound when it was not requested (or absent, or evicted before it was read), DataLoss as
  // for Get.
  std::optional<absl::StatusOr<std::string>> TakePrefetched(const OffloadKey& key);
  // Forgets `key`'s request or result (an aborted sequence).
  void CancelPrefetch(const OffloadKey& key);

  // Removes `key` (its file is deleted by the writer thread); returns whether it was present.
  bool Erase(const OffloadKey& key);

  // Waits until every queued write and delete is done (tests, shutdown).
  void Flush();
  // Waits until every requested prefetch is loaded or dropped (tests).
  void WaitForPrefetches();

  // Tests only: while paused, the writer and reader threads take no new job (Flush and
  // WaitForPrefetches would wait until unpaused; the destructor unpauses).
  void SetPausedForTesting(bool paused);

  DiskTierStats stats() const;
  const std::string& dir() const { return dir_; }
  int64_t capacity_bytes() const { return capacity_bytes_; }
  // The writer queue's limits: a Put beyond either is dropped (counted in dropped_puts).
  int max_queued_writes() const { return options_.max_queued_writes; }
  int64_t max_queued_write_bytes() const { return options_.max_queued_write_bytes; }
  uint64_t identity_fingerprint() const { return identity_fingerprint_; }
  // The file that holds (or will hold) `key`.
  std::string PathOf(const OffloadKey& key) const;

 private:
  struct IndexEntry {
    int64_t file_bytes = 0;
    uint64_t generation = 0;  // distinguishes this entry from an earlier one of the same key
    // The payload while its write is queued or running; null once the file is written.
    std::shared_ptr<const std::string> pending;
    std::list<OffloadKey>::iterator lru;
  };
  struct WriteJob {
    bool is_delete = false;
    OffloadKey key;
    uint64_t generation = 0;
    std::shared_ptr<const std::string> bytes;  // null for a delete
  };
  struct Prefetched {
    bool ready = false;
    absl::StatusOr<std::string> result = absl::UnknownError("not loaded");
  };

  DiskTier(std::string dir, int64_t capacity_bytes, uint64_t identity_fingerprint,
           const DiskTierOptions& options, std::unique_ptr<DirectoryLock> lock);
  void RebuildIndex();
  void StartThreads();
  void WriterLoop();
  void ReaderLoop();

  // What a load needs, taken from the index under mu_ and used without it.
  struct LoadTicket {
    OffloadKey key;
    uint64_t generation = 0;
    int64_t payload_bytes = 0;
    std::shared_ptr<const std::string> pending;
  };
  // Reads the ticket's bytes (from memory while its write is queued, else from its file).
  absl::StatusOr<std::string> Load(const LoadTicket& ticket) const;

  // The following require mu_ held.
  void InsertLocked(const OffloadKey& key, int64_t file_bytes,
                    std::shared_ptr<const std::string> pending);
  // Drops `key` from the index; with `delete_file` the writer thread deletes its file. (By
  // value: callers pass lru_.front(), which this erases.)
  void RemoveLocked(OffloadKey key, bool delete_file);
  std::optional<LoadTicket> TicketLocked(const OffloadKey& key);
  // Counts a load's outcome; drops the entry when its file was bad or gone.
  void RecordLoadLocked(const LoadTicket& ticket, const absl::StatusOr<std::string>& result,
                        double seconds);
  void FinishWriteLocked(const WriteJob& job, const absl::Status& status);

  const std::string dir_;
  const int64_t capacity_bytes_;
  const uint64_t identity_fingerprint_;
  const DiskTierOptions options_;
  const std::unique_ptr<DirectoryLock> lock_;

  mutable std::mutex mu_;
  std::condition_variable writer_wake_;  // a write job was queued, or stopping
  std::condition_variable writer_idle_;  // the write queue became empty
  std::condition_variable reader_wake_;  // a read job was queued, or stopping
  std::condition_variable reader_idle_;  // the read queue became empty
  absl::flat_hash_map<OffloadKey, IndexEntry> index_;
  std::list<OffloadKey> lru_;  // least recently used first
  int64_t bytes_used_ = 0;
  uint64_t next_generation_ = 1;
  std::deque<WriteJob> write_queue_;
  bool writer_busy_ = false;
  std::deque<OffloadKey> read_queue_;  // keys to prefetch
  bool reader_busy_ = false;
  absl::flat_hash_map<OffloadKey, Prefetched> prefetches_;
  bool stopping_ = false;
  bool paused_ = false;
  DiskTierStats stats_;

  std::thread writer_;
  std::thread reader_;
};

}  // namespace strata::kvcache
