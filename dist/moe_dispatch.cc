#include "dist/moe_dispatch.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/check.h"
#include "core/log.h"

namespace strata::dist {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

// Sizes and buffers of one Exchange call (buffers in the caller's workspace).
struct ExpertParallelExchange::Plan {
  int64_t num_rows = 0;
  int64_t top_k = 0;
  int64_t width = 0;                   // expert input/output width (floats per z row)
  int64_t record = 0;                  // 4-byte words per dispatched row: width + 2 · top_k
  int64_t total_send = 0;              // records this rank dispatches (all destinations)
  int64_t total_recv = 0;              // records this rank's experts run
  int64_t bytes_sent = 0;              // to other ranks: counts, dispatch, combine
  int64_t bytes_received = 0;          // from other ranks: counts, dispatch, combine
  const int32_t* slot_rank = nullptr;  // [num_rows, top_k] destination of each slot, −1: none
  float* send = nullptr;               // [total_send, record], by destination
  int64_t* origin_row = nullptr;       // [total_send] local row of each dispatched record
  float* recv = nullptr;               // [total_recv, record], by source
  float* recv_z = nullptr;             // [total_recv, width]
  int32_t* recv_ids = nullptr;         // [total_recv, top_k]
  float* recv_weights = nullptr;       // [total_recv, top_k]
  float* expert_out = nullptr;         // [total_recv, width] weighted partial sums, by source
  float* combined = nullptr;           // [total_send, width] partial sums back, by destination
};

ExpertParallelExchange::ExpertParallelExchange(Communicator* comm, ExpertPlacement placement)
    : comm_(comm),
      placement_(std::move(placement)),
      rank_(comm->rank()),
      world_size_(comm->world_size()) {
  CHECK_EQ(placement_.world_size, world_size_) << "placement built for another group size";
  const size_t w = static_cast<size_t>(world_size_);
  for (auto* v :
       {&send_rows_, &recv_rows_, &send_first_, &recv_first_, &fill_, &send_bytes_, &recv_bytes_}) {
    v->assign(w, 0);
  }
  step_tokens_.assign(static_cast<size_t>(placement_.num_experts), 0);
  absl::MutexLock lock(&stats_mu_);
  stats_.expert_tokens.assign(static_cast<size_t>(placement_.num_experts), 0);
}

void ExitOnCollectiveFailure(const Communicator& comm, absl::string_view what,
                             const absl::Status& status) {
  const std::string message =
      absl::StrCat(what, " failed on rank ", comm.rank(), " of ", comm.world_size(), " (",
                   comm.backend(), "): ", status.message(), "; exiting with status ",
                   kExpertExchangeFailureExitCode, " so that the orchestrator restarts the group");
  if (log::Enabled(log::Level::kError)) {
    LOG_ERROR("dist", "{}", message);
    log::Logger().flush();
  } else {  // logging off: a fatal exit still says why
    std::fprintf(stderr, "strata: %s\n", message.c_str());
  }
  std::fflush(stderr);
  std::_Exit(kExpertExchangeFailureExitCode);
}

void ExitOnExchangeFailure(const Communicator& comm, const char* collective, int moe_layer,
                           const absl::Status& status) {
  ExitOnCollectiveFailure(
      comm, absl::StrCat("expert exchange: ", collective, " of MoE layer ", moe_layer), status);
}

void ExpertParallelExchange::Fail(const char* collective, int moe_layer,
                                  const absl::Status& status) const {
  ExitOnExchangeFailure(*comm_, collective, moe_layer, status);
}

template <typename Fn>
void ExpertParallelExchange::Collective(const char* name, int moe_layer, Fn fn) {
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = fn();
  step_collective_seconds_ += SecondsSince(start);
  if (!status.ok()) Fail(name, moe_layer, status);
}

// slot_rank[i] = rank that runs (row, slot) i; send_rows_[d] = rows with ≥1 slot on rank d.
void ExpertParallelExchange::AssignDestinations(const int32_t* ids, int64_t num_rows, int top_k,
                                                int32_t* slot_rank) {
  std::fill(send_rows_.begin(), send_rows_.end(), 0);
  for (int64_t row = 0; row < num_rows; ++row) {
    const int32_t* row_ids = ids + row * top_k;
    int32_t* row_rank = slot_rank + row * top_k;
    for (int j = 0; j < top_k; ++j) {
      if (row_ids[j] < 0) {
        row_rank[j] = -1;
        continue;
      }
      CHECK_LT(row_ids[j], placement_.num_experts);
      const int d = placement_.RankFor(row_ids[j], rank_, row);
      row_rank[j] = d;
      if (std::find(row_rank, row_rank + j, d) == row_rank + j) ++send_rows_[d];
    }
  }
}

void ExpertParallelExchange::Pack(const Plan& p, const float* z, const int32_t* ids,
                                  const float* weights) {
  std::fill(fill_.begin(), fill_.end(), 0);
  for (int64_t row = 0; row < p.num_rows; ++row) {
    const int32_t* row_rank = p.slot_rank + row * p.top_k;
    for (int64_t j = 0; j < p.top_k; ++j) {
      const int32_t d = row_rank[j];
      if (d < 0 || std::find(row_rank, row_rank + j, d) != row_rank + j) continue;
      const int64_t n = send_rows_[d], pos = fill_[d]++;
      float* segment = p.send + send_first_[d] * p.record;
      std::memcpy(segment + pos * p.width, z + row * p.width, p.width * sizeof(float));
      int32_t* seg_ids = reinterpret_cast<int32_t*>(segment + n * p.width) + pos * p.top_k;
      float* seg_weights = segment + n * (p.width + p.top_k) + pos * p.top_k;
      for (int64_t k = 0; k < p.top_k; ++k) {
        const bool here = row_rank[k] == d;
        seg_ids[k] = here ? ids[row * p.top_k + k] : -1;
        seg_weights[k] = here ? weights[row * p.top_k + k] : 0.0f;
      }
      p.origin_row[send_first_[d] + pos] = row;
    }
  }
}

void ExpertParallelExchange::Unpack(const Plan& p) {
  for (int s = 0; s < world_size_; ++s) {
    const int64_t n = recv_rows_[s], first = recv_first_[s];
    if (n == 0) continue;
    const float* segment = p.recv + first * p.record;
    std::memcpy(p.recv_z + first * p.width, segment, n * p.width * sizeof(float));
    std::memcpy(p.recv_ids + first * p.top_k, segment + n * p.width, n * p.top_k * sizeof(float));
    std::memcpy(p.recv_weights + first * p.top_k, segment + n * (p.width + p.top_k),
                n * p.top_k * sizeof(float));
  }
}

void ExpertParallelExchange::Combine(const Plan& p, float* routed) {
  std::fill_n(routed, p.num_rows * p.width, 0.0f);
  for (int64_t i = 0; i < p.total_send; ++i) {
    float* dst = routed + p.origin_row[i] * p.width;
    const float* src = p.combined + i * p.width;
#pragma omp simd
    for (int64_t c = 0; c < p.width; ++c) dst[c] += src[c];
  }
}

// Steps 1–3 (see the header): destinations, row counts, packed dispatch; leaves the received
// rows unpacked in p.recv_z / recv_ids / recv_weights.
void ExpertParallelExchange::Dispatch(Plan& p, int moe_layer, const float* z, const int32_t* ids,
                                      const float* weights, engine::Workspace& ws) {
  int32_t* slot_rank = ws.Array<int32_t>(p.num_rows * p.top_k);
  AssignDestinations(ids, p.num_rows, static_cast<int>(p.top_k), slot_rank);
  p.slot_rank = slot_rank;
  Collective("all-to-all (dispatch row counts)", moe_layer, [&] {
    return comm_->AllToAll(send_rows_.data(), recv_rows_.data(), sizeof(int64_t));
  });
  for (int r = 0; r < world_size_; ++r) {
    send_first_[r] = p.total_send;
    recv_first_[r] = p.total_recv;
    p.total_send += send_rows_[r];
    p.total_recv += recv_rows_[r];
  }

  p.send = ws.Floats(p.total_send * p.record);
  p.origin_row = ws.Array<int64_t>(p.total_send);
  p.recv = ws.Floats(p.total_recv * p.record);
  Pack(p, z, ids, weights);
  for (int r = 0; r < world_size_; ++r) {
    send_bytes_[r] = send_rows_[r] * p.record * int64_t{sizeof(float)};
    recv_bytes_[r] = recv_rows_[r] * p.record * int64_t{sizeof(float)};
    if (r == rank_) continue;
    p.bytes_sent += send_bytes_[r] + int64_t{sizeof(int64_t)};
    p.bytes_received += recv_bytes_[r] + int64_t{sizeof(int64_t)};
  }
  Collective("all-to-all-v (dispatch)", moe_layer, [&] {
    return comm_->AllToAllV(p.send, send_bytes_.data(), p.recv, recv_bytes_.data());
  });
  p.recv_z = ws.Floats(p.total_recv * p.width);
  p.recv_ids = ws.Array<int32_t>(p.total_recv * p.top_k);
  p.recv_weights = ws.Floats(p.total_recv * p.top_k);
  Unpack(p);
}

void ExpertParallelExchange::Exchange(const engine::ModelConfig& cfg, const engine::MoeWeights& w,
                                      int moe_layer, const float* z, int64_t num_rows,
                                      const int32_t* ids, const float* weights, float* routed,
                                      int64_t* expert_tokens, engine::Workspace& ws) {
  const auto start = std::chrono::steady_clock::now();
  const engine::MoeConfig& m = cfg.moe;
  CHECK_EQ(m.num_experts, placement_.num_experts) << "placement built for another model";
  CHECK_GE(num_rows, 0);
  engine::WorkspaceScope scope(ws);
  Plan p;
  p.num_rows = num_rows;
  p.top_k = m.num_experts_per_token;
  p.width = m.is_latent() ? m.routed_expert_hidden_size : cfg.hidden_size;
  p.record = p.width + 2 * p.top_k;
  step_collective_seconds_ = 0;
  Dispatch(p, moe_layer, z, ids, weights, ws);

  p.expert_out = ws.Floats(p.total_recv * p.width);
  std::fill(step_tokens_.begin(), step_tokens_.end(), 0);
  const auto experts_start = std::chrono::steady_clock::now();
  engine::MoeRunExperts(cfg, w, p.recv_z, p.total_recv, p.recv_ids, p.recv_weights, p.expert_out,
                        step_tokens_.data(), ws);
  const double expert_seconds = SecondsSince(experts_start);

  // Combine: the partial sums go back to their origins, each in the order it arrived.
  p.combined = ws.Floats(p.total_send * p.width);
  for (int r = 0; r < world_size_; ++r) {
    send_bytes_[r] = recv_rows_[r] * p.width * int64_t{sizeof(float)};
    recv_bytes_[r] = send_rows_[r] * p.width * int64_t{sizeof(float)};
    if (r == rank_) continue;
    p.bytes_sent += send_bytes_[r];
    p.bytes_received += recv_bytes_[r];
  }
  Collective("all-to-all-v (combine)", moe_layer, [&] {
    return comm_->AllToAllV(p.expert_out, send_bytes_.data(), p.combined, recv_bytes_.data());
  });
  Combine(p, routed);

  if (expert_tokens != nullptr) {
    for (int e = 0; e < placement_.num_experts; ++e) expert_tokens[e] += step_tokens_[e];
  }
  absl::MutexLock lock(&stats_mu_);
  ExpertExchangeStats& s = stats_;
  ++s.num_exchanges;
  s.rows_dispatched += p.total_send;
  s.rows_to_self += send_rows_[rank_];
  s.rows_received += p.total_recv;
  s.bytes_sent += p.bytes_sent;
  s.bytes_received += p.bytes_received;
  s.all_to_all_seconds += step_collective_seconds_;
  s.expert_seconds += expert_seconds;
  s.exchange_seconds += SecondsSince(start);
  for (int e = 0; e < placement_.num_experts; ++e) s.expert_tokens[e] += step_tokens_[e];
}

ExpertExchangeStats ExpertParallelExchange::stats() {
  absl::MutexLock lock(&stats_mu_);
  ExpertExchangeStats out = stats_;
  std::vector<int64_t> tokens = std::move(stats_.expert_tokens);
  std::fill(tokens.begin(), tokens.end(), 0);
  stats_ = ExpertExchangeStats{};
  stats_.expert_tokens = std::move(tokens);
  return out;
}

}  // namespace strata::dist
