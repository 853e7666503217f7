#include "engine/step_codec.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "engine/tensor_parallel.h"

namespace strata::engine {
namespace {

constexpr uint32_t kMagic = 0x53545031;  // "STP1"

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void Put(T value) {
    const size_t at = out_->size();
    out_->resize(at + sizeof(T));
    std::memcpy(out_->data() + at, &value, sizeof(T));
  }
  template <typename T>
  void PutVector(const std::vector<T>& v) {
    PutBytes(v.data(), v.size(), sizeof(T));
  }
  void PutString(const std::string& s) { PutBytes(s.data(), s.size(), 1); }

 private:
  void PutBytes(const void* data, size_t n, size_t size_of) {
    Put<uint64_t>(n);
    const size_t at = out_->size();
    out_->resize(at + n * size_of);
    if (n > 0) std::memcpy(out_->data() + at, data, n * size_of);
  }

  std::vector<uint8_t>* out_;
};

class Reader {
 public:
  explicit Reader(absl::Span<const uint8_t> bytes) : bytes_(bytes) {}
  template <typename T>
  bool Get(T* value) {
    if (bytes_.size() - at_ < sizeof(T)) return false;
    std::memcpy(value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  template <typename T>
  bool GetVector(std::vector<T>* v) {
    return GetBytes(v, sizeof(T));
  }
  bool GetString(std::string* s) { return GetBytes(s, 1); }
  bool done() const { return at_ == bytes_.size(); }
  size_t remaining() const { return bytes_.size() - at_; }

 private:
  // A count, then that many items of `size_of` bytes into `v` (a vector or a string).
  template <typename Container>
  bool GetBytes(Container* v, size_t size_of) {
    uint64_t n = 0;
    if (!Get(&n) || n > (bytes_.size() - at_) / size_of) return false;
    v->resize(n);
    if (n > 0) std::memcpy(v->data(), bytes_.data() + at_, n * size_of);
    at_ += n * size_of;
    return true;
  }

  absl::Span<const uint8_t> bytes_;
  size_t at_ = 0;
};

// The images of a sequence as EncodeStepPlan writes them (rows stay null).
bool GetMedia(Reader& r, std::vector<MediaEmbedding>* media) {
  // position, num_rows, content_key: a count of more than what is left is malformed.
  constexpr size_t kBytesPerImage = 2 * sizeof(int64_t) + sizeof(uint64_t);
  uint64_t n = 0;
  if (!r.Get(&n) || n > r.remaining() / kBytesPerImage) return false;
  media->resize(n);
  for (MediaEmbedding& m : *media) {
    if (!r.Get(&m.position) || !r.Get(&m.num_rows) || !r.Get(&m.content_key) || m.position < 0 ||
        m.num_rows < 1) {
      return false;
    }
  }
  return true;
}

// A unit's kind and index as EncodeStepPlan writes them.
bool GetUnit(Reader& r, CacheUnit* unit, int32_t* index) {
  uint8_t kind = 0;
  if (!r.Get(&kind) || !r.Get(index) || kind > static_cast<uint8_t>(CacheUnit::kSlot) ||
      *index < 0) {
    return false;
  }
  *unit = static_cast<CacheUnit>(kind);
  return true;
}

}  // namespace

void EncodeStepPlan(const StepPlan& plan, std::vector<uint8_t>* out) {
  out->clear();
  Writer w(out);
  w.Put(kMagic);
  w.Put<int64_t>(plan.step_id);
  w.Put<uint64_t>(plan.sequences.size());
  for (const ScheduledSequence& s : plan.sequences) {
    w.Put<int64_t>(s.seq_id);
    w.PutVector(s.token_ids);
    w.Put<int64_t>(s.num_computed_tokens);
    w.PutVector(s.block_table);
    w.Put<int32_t>(s.slot);
    w.Put<uint8_t>(static_cast<uint8_t>(s.slot_init));
    w.Put<int32_t>(s.source_checkpoint);
    w.PutVector(s.save_checkpoints);
    w.Put<uint8_t>(s.sample ? 1 : 0);
    w.Put<int32_t>(s.num_draft_tokens);
    w.Put<int32_t>(s.num_logprobs);
    w.PutVector(s.score_targets);
    w.Put<int32_t>(s.num_score_logprobs);
    // Images: where they are, not their rows. The group sums its ranks' embeddings and only the
    // rank holding the vocabulary's start (the lead, which has the rows) writes an image's rows;
    // the others write zeros there instead of their share of the placeholder's embedding.
    w.Put<uint64_t>(s.media.size());
    for (const MediaEmbedding& m : s.media) {
      w.Put<int64_t>(m.position);
      w.Put<int64_t>(m.num_rows);
      w.Put<uint64_t>(m.content_key);
    }
  }
  // Offload copies: every rank copies its own share of each unit (engine/cache_copy.h); a load
  // carries the tier entry, every share.
  w.Put<uint64_t>(plan.cache_saves.size());
  for (const CacheSave& save : plan.cache_saves) {
    w.Put<uint8_t>(static_cast<uint8_t>(save.unit));
    w.Put<int32_t>(save.index);
  }
  w.Put<uint64_t>(plan.cache_loads.size());
  for (const CacheLoad& load : plan.cache_loads) {
    w.Put<uint8_t>(static_cast<uint8_t>(load.unit));
    w.Put<int32_t>(load.index);
    w.Put<uint8_t>(load.beside_step ? 1 : 0);
    w.PutString(load.bytes);
  }
}

absl::StatusOr<StepPlan> DecodeStepPlan(absl::Span<const uint8_t> bytes) {
  Reader r(bytes);
  StepPlan plan;
  uint32_t magic = 0;
  uint64_t n = 0;
  auto bad = [&](const char* what) {
    return absl::InvalidArgumentError(
        absl::StrCat("step plan bytes (", bytes.size(), " bytes): malformed at ", what));
  };
  if (!r.Get(&magic) || magic != kMagic) return bad("the header");
  if (!r.Get(&plan.step_id) || !r.Get(&n) || n > bytes.size()) return bad("the sequence count");
  plan.sequences.resize(n);
  for (ScheduledSequence& s : plan.sequences) {
    uint8_t slot_init = 0, sample = 0;
    if (!r.Get(&s.seq_id) || !r.GetVector(&s.token_ids) || !r.Get(&s.num_computed_tokens) ||
        !r.GetVector(&s.block_table) || !r.Get(&s.slot) || !r.Get(&slot_init) ||
        !r.Get(&s.source_checkpoint) || !r.GetVector(&s.save_checkpoints) || !r.Get(&sample) ||
        !r.Get(&s.num_draft_tokens) || !r.Get(&s.num_logprobs) || !r.GetVector(&s.score_targets) ||
        !r.Get(&s.num_score_logprobs) ||
        slot_init > static_cast<uint8_t>(SlotInit::kFromCheckpoint) || !GetMedia(r, &s.media)) {
      return bad(absl::StrCat("sequence ", &s - plan.sequences.data()).c_str());
    }
    s.slot_init = static_cast<SlotInit>(slot_init);
    s.sample = sample != 0;
  }
  // A save is 5 bytes, a load at least 14: a count above what is left is malformed.
  if (!r.Get(&n) || n > r.remaining() / 5) return bad("the cache save count");
  plan.cache_saves.resize(n);
  for (CacheSave& save : plan.cache_saves) {
    if (!GetUnit(r, &save.unit, &save.index)) return bad("a cache save");
  }
  if (!r.Get(&n) || n > r.remaining() / 14) return bad("the cache load count");
  plan.cache_loads.resize(n);
  for (CacheLoad& load : plan.cache_loads) {
    uint8_t beside = 0;
    if (!GetUnit(r, &load.unit, &load.index) || !r.Get(&beside) || beside > 1 ||
        !r.GetString(&load.bytes)) {
      return bad("a cache load");
    }
    load.beside_step = beside != 0;
  }
  if (!r.done()) return bad("the end (trailing bytes)");
  return plan;
}

void SendStepPlan(TensorParallelGroup& group, const StepPlan& plan, std::vector<uint8_t>* bytes) {
  CHECK_EQ(group.rank(), 0) << "only the lead rank of a tensor-parallel group sends plans";
  EncodeStepPlan(plan, bytes);
  int64_t size = static_cast<int64_t>(bytes->size());
  group.BroadcastFromLead(&size, sizeof(size));
  group.BroadcastFromLead(bytes->data(), size);
}

std::optional<StepPlan> ReceiveStepPlan(TensorParallelGroup& group, std::vector<uint8_t>* bytes) {
  CHECK_NE(group.rank(), 0) << "the lead rank of a tensor-parallel group sends plans";
  int64_t size = 0;
  group.BroadcastFromLead(&size, sizeof(size));
  if (size < 0) return std::nullopt;  // EndStepPlans
  bytes->resize(static_cast<size_t>(size));
  group.BroadcastFromLead(bytes->data(), size);
  absl::StatusOr<StepPlan> plan = DecodeStepPlan(*bytes);
  CHECK(plan.ok()) << "rank " << group.rank() << ": " << plan.status();  // same binary both ends
  return *std::move(plan);
}

void EndStepPlans(TensorParallelGroup& group) {
  CHECK_EQ(group.rank(), 0) << "only the lead rank of a tensor-parallel group ends the plans";
  int64_t end = -1;
  group.BroadcastFromLead(&end, sizeof(end));
}

}  // namespace strata::engine
