// What names an offloaded entry: the key (which block or checkpoint) and the identity (whose
// cache it is). An entry written under one identity is never read under another, so a
// different checkpoint, cache dtype or parallel layout finds nothing and recomputes.
//
//   OffloadKey       block-hash chain value (block_hash.h) + what the bytes are
//   OffloadIdentity  checkpoint weights, cache dtype, block size, TP/CP layout; its 64-bit
//                    fingerprint (with kOffloadFormatVersion folded in) is in every disk file
//                    header and file name
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvcache/ids.h"

namespace strata::kvcache {

// Version of the disk entry format (docs/kv-offload.md) and of the identity definition. Bump it
// when either changes: files of another version then belong to a foreign identity.
inline constexpr uint32_t kOffloadFormatVersion = 1;

// What an entry's bytes are. The numbers are written to disk: never renumber.
enum class OffloadKind : uint8_t {
  kLatentBlock = 1,    // one rank's share of one full MLA latent block (all MLA layers)
  kKdaCheckpoint = 2,  // one rank's share of the KDA state checkpoint ending at that block
};

// "latent_block" / "kda_checkpoint" / "unknown".
const char* OffloadKindName(OffloadKind kind);
// Whether `value` is one of the OffloadKind numbers.
bool IsOffloadKind(uint8_t value);

struct OffloadKey {
  BlockHash hash = 0;  // the chained hash naming the prefix up to the block's end
  OffloadKind kind = OffloadKind::kLatentBlock;

  friend bool operator==(const OffloadKey&, const OffloadKey&) = default;
  template <typename H>
  friend H AbslHashValue(H state, const OffloadKey& key) {
    return H::combine(std::move(state), key.hash, static_cast<uint8_t>(key.kind));
  }
};

// An entry handed between tiers (host tier evictions spilled to the disk tier).
struct OffloadEntry {
  OffloadKey key;
  std::string bytes;
};

// Everything that decides what the bytes of an entry mean. Two servers may share entries only
// if all fields are equal.
struct OffloadIdentity {
  std::string checkpoint_fingerprint;  // CheckpointFingerprint(model_dir)
  std::string cache_dtype;             // e.g. "bf16", "f32", "fp8_e4m3"
  int block_size = 0;                  // tokens per block
  int tensor_parallel_size = 1;
  int tensor_parallel_rank = 0;
  int context_parallel_size = 1;
  int context_parallel_rank = 0;
};

// InvalidArgument naming the field and its limit when a field is empty or out of range.
absl::Status ValidateOffloadIdentity(const OffloadIdentity& identity);

// The identity's 64-bit fingerprint: ContentHasher over kOffloadFormatVersion and every field
// (strings length-prefixed, integers as 64-bit words), in declaration order.
uint64_t OffloadIdentityFingerprint(const OffloadIdentity& identity);

// Windows of tensor data sampled per *.safetensors file by CheckpointFingerprint.
inline constexpr int kFingerprintSamplesPerFile = 8;
inline constexpr int64_t kFingerprintSampleBytes = int64_t{64} << 10;
// The largest safetensors header CheckpointFingerprint reads (as the checkpoint loader).
inline constexpr int64_t kFingerprintMaxHeaderBytes = int64_t{100} << 20;
inline constexpr int64_t kFingerprintMaxConfigBytes = int64_t{16} << 20;

// The identity of the weights in checkpoint directory `model_dir`, not of its path: 32 hex
// digits (128 bits) of a ContentHasher over config.json's bytes and, for every *.safetensors
// file directly in the directory (by name), its name, size, JSON header and
// kFingerprintSamplesPerFile windows of kFingerprintSampleBytes of tensor data at evenly spaced
// offsets (all of it when shorter). Two checkpoints of equal shapes but different weights
// differ; a copy at another path is equal. Reads at most 16 MiB + files * (100 MiB + 512 KiB)
// and typically config + headers + 512 KiB per file (tens of MiB for a multi-TB checkpoint),
// whatever the weights' size.
// Checkpoints that differ only outside the sampled windows (headers and config equal) are not
// told apart. Errors name the path: NotFound (no directory, no config.json, no *.safetensors),
// DataLoss (a file shorter than its header says, a header over the limit).
absl::StatusOr<std::string> CheckpointFingerprint(const std::string& model_dir);

}  // namespace strata::kvcache
