#include "dist/testing/fake_communicator.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/check.h"
#include "core/status.h"

namespace strata::dist::testing {
namespace {

enum Kind {
  kAllToAllV = 1,
  kAllToAll,
  kAllReduceI64,
  kAllReduceF32,
  kAllGather,
  kBroadcast,
  kBarrier
};

const char* KindName(int kind) {
  switch (kind) {
    case kAllToAllV:
      return "all-to-all-v";
    case kAllToAll:
      return "all-to-all";
    case kAllReduceI64:
      return "all-reduce(int64)";
    case kAllReduceF32:
      return "all-reduce(float)";
    case kAllGather:
      return "all-gather";
    case kBroadcast:
      return "broadcast";
    case kBarrier:
      return "barrier";
    default:
      return "?";
  }
}

void HostCopy(void* dst, const void* src, int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

template <typename T>
void Reduce(T* acc, const T* in, int64_t count, ReduceOp op) {
  for (int64_t i = 0; i < count; ++i) {
    acc[i] = op == ReduceOp::kSum ? acc[i] + in[i] : std::max(acc[i], in[i]);
  }
}

}  // namespace

class FakeGroup::RankCommunicator : public Communicator {
 public:
  RankCommunicator(FakeGroup* group, int rank) : group_(group), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size_; }
  std::string backend() const override { return "fake"; }

  absl::Status AllToAllV(const void* send, const int64_t* send_bytes, void* recv,
                         const int64_t* recv_bytes) override {
    Post post{.kind = kAllToAllV,
              .send = send,
              .recv = recv,
              .send_bytes = send_bytes,
              .recv_bytes = recv_bytes};
    return Run(post, [&] {
      int64_t at = 0;
      for (int s = 0; s < world_size(); ++s) {
        const Post& from = group_->posts_[static_cast<size_t>(s)];
        int64_t offset = 0;
        for (int r = 0; r < rank_; ++r) offset += from.send_bytes[r];
        group_->CopyBytes(static_cast<char*>(recv) + at,
                          static_cast<const char*>(from.send) + offset, recv_bytes[s]);
        at += recv_bytes[s];
      }
    });
  }

  absl::Status AllToAll(const void* send, void* recv, int64_t bytes_per_rank) override {
    Post post{.kind = kAllToAll, .bytes = bytes_per_rank, .send = send, .recv = recv};
    return Run(post, [&] {
      for (int s = 0; s < world_size(); ++s) {
        const Post& from = group_->posts_[static_cast<size_t>(s)];
        group_->CopyBytes(static_cast<char*>(recv) + s * bytes_per_rank,
                          static_cast<const char*>(from.send) + rank_ * bytes_per_rank,
                          bytes_per_rank);
      }
    });
  }

  absl::Status AllReduce(int64_t* data, int64_t count, ReduceOp op) override {
    return AllReduceT(kAllReduceI64, data, count, op, scratch_i64_);
  }
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    return AllReduceT(kAllReduceF32, data, count, op, scratch_f32_);
  }

  absl::Status AllGather(const void* send, int64_t bytes, void* recv) override {
    Post post{.kind = kAllGather, .bytes = bytes, .send = send, .recv = recv};
    return Run(post, [&] {
      for (int s = 0; s < world_size(); ++s) {
        group_->CopyBytes(static_cast<char*>(recv) + s * bytes,
                          group_->posts_[static_cast<size_t>(s)].send, bytes);
      }
    });
  }

  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    Post post{.kind = kBroadcast, .bytes = bytes, .root = root, .recv = data};
    return Run(post, [&] {
      if (rank_ != root)
        group_->CopyBytes(data, group_->posts_[static_cast<size_t>(root)].recv, bytes);
    });
  }

  absl::Status Barrier() override {
    return Run(Post{.kind = kBarrier}, [] {});
  }

 private:
  template <typename T>
  absl::Status AllReduceT(int kind, T* data, int64_t count, ReduceOp op, std::vector<T>& scratch) {
    Post post{.kind = kind, .bytes = count, .op = static_cast<int>(op), .recv = data};
    return Run(
        post,
        [&] {
          scratch.assign(static_cast<const T*>(group_->posts_[0].recv),
                         static_cast<const T*>(group_->posts_[0].recv) + count);
          for (int s = 1; s < world_size(); ++s) {
            Reduce(scratch.data(),
                   static_cast<const T*>(group_->posts_[static_cast<size_t>(s)].recv), count, op);
          }
        },
        [&] { std::copy_n(scratch.data(), count, data); });
  }

  // Publishes `post`, waits for every rank, checks that the posts match, runs `copy` (reads
  // peers' buffers), waits again, then runs `finish` (writes only this rank's buffers).
  template <typename CopyFn, typename FinishFn = void (*)()>
  absl::Status Run(
      const Post& post, CopyFn copy, FinishFn finish = [] {}) {
    const int64_t index = num_collectives_++;
    const char* name = KindName(post.kind);
    group_->posts_[static_cast<size_t>(rank_)] = post;
    RETURN_IF_ERROR(group_->Arrive(rank_, name, index));
    const absl::Status matched = group_->CheckPosts(name, index);
    if (matched.ok()) copy();
    RETURN_IF_ERROR(group_->Arrive(rank_, name, index));
    if (!matched.ok()) return group_->Break(matched);
    finish();
    return absl::OkStatus();
  }

  FakeGroup* group_;
  const int rank_;
  int64_t num_collectives_ = 0;
  std::vector<int64_t> scratch_i64_;
  std::vector<float> scratch_f32_;
};

FakeGroup::FakeGroup(int world_size, std::chrono::milliseconds timeout, CopyFn copy)
    : world_size_(world_size), timeout_(timeout), copy_(copy != nullptr ? copy : HostCopy) {
  CHECK_GE(world_size, 1);
  posts_.resize(static_cast<size_t>(world_size));
  arrived_.assign(static_cast<size_t>(world_size), 0);
  for (int r = 0; r < world_size; ++r) {
    ranks_.push_back(std::make_unique<RankCommunicator>(this, r));
  }
}

FakeGroup::~FakeGroup() = default;

Communicator* FakeGroup::rank(int r) {
  CHECK(r >= 0 && r < world_size_) << "rank " << r;
  return ranks_[static_cast<size_t>(r)].get();
}

absl::Status FakeGroup::Break(const absl::Status& error) {
  absl::MutexLock lock(&mu_);
  if (broken_.empty()) broken_ = std::string(error.message());
  return error;
}

absl::Status FakeGroup::Arrive(int rank, const char* collective, int64_t index) {
  absl::MutexLock lock(&mu_);
  if (!broken_.empty()) {
    return absl::UnavailableError(absl::StrCat("communicator unusable after: ", broken_));
  }
  const int64_t generation = generation_;
  arrived_[static_cast<size_t>(rank)] = 1;
  if (++num_arrived_ == world_size_) {
    num_arrived_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), 0);
    ++generation_;
    cv_.SignalAll();
    return absl::OkStatus();
  }
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout_);
  while (generation_ == generation && broken_.empty()) {
    if (cv_.WaitWithDeadline(&mu_, deadline) && generation_ == generation && broken_.empty()) {
      std::vector<int> missing;
      for (int r = 0; r < world_size_; ++r) {
        if (!arrived_[static_cast<size_t>(r)]) missing.push_back(r);
      }
      broken_ = absl::StrCat(collective, " (collective #", index, "): rank",
                             missing.size() > 1 ? "s " : " ", absl::StrJoin(missing, ", "),
                             " did not answer within ", timeout_.count(), " ms");
      cv_.SignalAll();
      return absl::DeadlineExceededError(broken_);
    }
  }
  if (generation_ != generation) return absl::OkStatus();
  return absl::UnavailableError(broken_);
}

absl::Status FakeGroup::CheckPosts(const char* collective, int64_t index) const {
  const Post& first = posts_[0];
  for (int r = 1; r < world_size_; ++r) {
    const Post& p = posts_[static_cast<size_t>(r)];
    if (p.kind != first.kind || p.bytes != first.bytes || p.root != first.root ||
        p.op != first.op) {
      return absl::InternalError(absl::StrCat(collective, " (collective #", index, "): rank ", r,
                                              " called ", KindName(p.kind), " (size ", p.bytes,
                                              ") while rank 0 called ", KindName(first.kind),
                                              " (size ", first.bytes, ")"));
    }
  }
  if (first.kind == kBroadcast && (first.root < 0 || first.root >= world_size_)) {
    return absl::InvalidArgumentError(absl::StrCat(collective, " (collective #", index, "): root ",
                                                   first.root, " outside [0, ", world_size_, ")"));
  }
  if (first.kind != kAllToAllV) return absl::OkStatus();
  for (int s = 0; s < world_size_; ++s) {
    for (int r = 0; r < world_size_; ++r) {
      const int64_t sent = posts_[static_cast<size_t>(s)].send_bytes[r];
      const int64_t received = posts_[static_cast<size_t>(r)].recv_bytes[s];
      if (sent != received || sent < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(collective, " (collective #", index, "): rank ", s, " sends ", sent,
                         " bytes to rank ", r, ", which expects ", received));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace strata::dist::testing
