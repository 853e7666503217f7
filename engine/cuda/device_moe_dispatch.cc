#include "engine/cuda/device_moe_dispatch.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/check.h"
#include "core/status.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/moe.h"

namespace strata::engine::cuda {
namespace kc = kernels::cuda;
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

DeviceExpertParallelExchange::DeviceExpertParallelExchange(dist::Communicator* comm,
                                                           dist::ExpertPlacement placement)
    : comm_(comm),
      placement_(std::move(placement)),
      rank_(comm->rank()),
      world_size_(comm->world_size()) {
  CHECK_EQ(placement_.world_size, world_size_) << "placement built for another group size";
  local_experts_ = placement_.local[static_cast<size_t>(rank_)];
  local_index_.assign(static_cast<size_t>(world_size_),
                      std::vector<int32_t>(static_cast<size_t>(placement_.num_experts), -1));
  for (int r = 0; r < world_size_; ++r) {
    const std::vector<int>& held = placement_.local[static_cast<size_t>(r)];
    for (size_t i = 0; i < held.size(); ++i) {
      local_index_[static_cast<size_t>(r)][static_cast<size_t>(held[i])] = static_cast<int32_t>(i);
    }
  }
  const size_t w = static_cast<size_t>(world_size_);
  for (auto* v : {&send_rows_, &recv_rows_, &send_first_, &fill_, &send_bytes_, &recv_bytes_}) {
    v->assign(w, 0);
  }
  expert_tokens_.assign(static_cast<size_t>(placement_.num_experts), 0);
}

template <typename Fn>
void DeviceExpertParallelExchange::Collective(const char* name, int moe_layer, cudaStream_t stream,
                                              Fn fn) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status =
      kc::CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize before the collective");
  if (status.ok()) status = fn();
  collective_seconds_ += SecondsSince(start);
  if (!status.ok()) dist::ExitOnExchangeFailure(*comm_, name, moe_layer, status);
}

// Destinations in slot order, a row once per destination; records in row order within each
// destination. Stages src_row, the records' local ids and weights, and each row's records.
void DeviceExpertParallelExchange::PlanRecords(const int32_t* ids, const float* weights,
                                               int64_t rows, int top_k) {
  slot_rank_.resize(static_cast<size_t>(rows * top_k));
  std::fill(send_rows_.begin(), send_rows_.end(), 0);
  for (int64_t row = 0; row < rows; ++row) {
    const int32_t* row_ids = ids + row * top_k;
    int32_t* row_rank = slot_rank_.data() + row * top_k;
    for (int j = 0; j < top_k; ++j) {
      CHECK_LT(row_ids[j], placement_.num_experts) << "router emitted an expert id out of range";
      row_rank[j] = row_ids[j] < 0 ? -1 : placement_.RankFor(row_ids[j], rank_, row);
      if (row_rank[j] < 0) continue;
      ++expert_tokens_[static_cast<size_t>(row_ids[j])];
      if (std::find(row_rank, row_rank + j, row_rank[j]) == row_rank + j) {
        ++send_rows_[static_cast<size_t>(row_rank[j])];
      }
    }
  }
  total_send_ = 0;
  for (int d = 0; d < world_size_; ++d) {
    send_first_[static_cast<size_t>(d)] = total_send_;
    total_send_ += send_rows_[static_cast<size_t>(d)];
  }
  auto* src_row = staging_.as<int32_t>();
  int32_t* rec_ids = src_row + total_send_;
  auto* rec_weights = reinterpret_cast<float*>(rec_ids + total_send_ * top_k);
  int32_t* pair_row = reinterpret_cast<int32_t*>(rec_weights + total_send_ * top_k);
  auto* ones = reinterpret_cast<float*>(pair_row + rows * top_k);
  std::fill(fill_.begin(), fill_.end(), 0);
  for (int64_t row = 0; row < rows; ++row) {
    const int32_t* row_rank = slot_rank_.data() + row * top_k;
    int used = 0;
    for (int j = 0; j < top_k; ++j) {
      const int d = row_rank[j];
      if (d < 0 || std::find(row_rank, row_rank + j, d) != row_rank + j) continue;
      const int64_t rec = send_first_[static_cast<size_t>(d)] + fill_[static_cast<size_t>(d)]++;
      src_row[rec] = static_cast<int32_t>(row);
      const std::vector<int32_t>& to_local = local_index_[static_cast<size_t>(d)];
      for (int k = 0; k < top_k; ++k) {
        const bool here = row_rank[k] == d;
        rec_ids[rec * top_k + k] = here ? to_local[static_cast<size_t>(ids[row * top_k + k])] : -1;
        CHECK(!here || rec_ids[rec * top_k + k] >= 0) << "placement sent an expert to a rank "
                                                         "that does not hold it";
        rec_weights[rec * top_k + k] = here ? weights[row * top_k + k] : 0.0f;
      }
      pair_row[row * top_k + used++] = static_cast<int32_t>(rec);
    }
    for (int k = 0; k < top_k; ++k) {
      if (k >= used) pair_row[row * top_k + k] = -1;
      ones[row * top_k + k] = 1.0f;
    }
  }
}

absl::Status DeviceExpertParallelExchange::Exchange(int moe_layer, const uint16_t* z, int64_t rows,
                                                    int64_t width, int top_k, const int32_t* ids,
                                                    const float* weights, float* routed,
                                                    const DeviceContext& ctx, RunLocalExperts run) {
  CHECK_GE(rows, 0);
  const auto start = std::chrono::steady_clock::now();
  collective_seconds_ = 0;
  cudaStream_t stream = ctx.stream;
  const int64_t pairs = rows * top_k;
  // 1. The routes to the host, then the records.
  RETURN_IF_ERROR(routes_host_.Reserve(pairs * 8, "expert exchange routes (host)"));
  auto* host_ids = routes_host_.as<int32_t>();
  auto* host_weights = reinterpret_cast<float*>(host_ids + pairs);
  if (rows > 0) {
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host_ids, ids, pairs * 4, cudaMemcpyDeviceToHost, stream),
        "expert ids cudaMemcpyAsync");
    STRATA_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host_weights, weights, pairs * 4, cudaMemcpyDeviceToHost, stream),
        "expert weights cudaMemcpyAsync");
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "expert routes cudaStreamSynchronize");
  // Staging bound: every pair its own record.
  RETURN_IF_ERROR(staging_.Reserve((pairs + 2 * pairs * top_k + 2 * pairs) * 4,
                                   "expert exchange records (host)"));
  PlanRecords(host_ids, host_weights, rows, top_k);
  const int64_t staged_words = total_send_ * (1 + 2 * top_k) + 2 * pairs;

  // 2. Row counts.
  ASSIGN_OR_RETURN(int64_t * counts, ctx.scratch->Take<int64_t>(2 * world_size_));
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(counts, send_rows_.data(), world_size_ * 8, cudaMemcpyHostToDevice, stream),
      "row counts cudaMemcpyAsync");
  Collective("all-to-all (dispatch row counts)", moe_layer, stream,
             [&] { return comm_->AllToAll(counts, counts + world_size_, sizeof(int64_t)); });
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(recv_rows_.data(), counts + world_size_, world_size_ * 8, cudaMemcpyDeviceToHost),
      "row counts cudaMemcpy");
  total_recv_ = 0;
  for (int64_t n : recv_rows_) total_recv_ += n;

  // 3. Dispatch: the records' metadata in one upload, the z rows gathered on the device.
  ASSIGN_OR_RETURN(int32_t * meta, ctx.scratch->Take<int32_t>(staged_words));
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(meta, staging_.get(), staged_words * 4, cudaMemcpyHostToDevice, stream),
      "expert records cudaMemcpyAsync");
  const int32_t* src_row = meta;
  int32_t* send_ids = meta + total_send_;
  auto* send_weights = reinterpret_cast<float*>(send_ids + total_send_ * top_k);
  const int32_t* pair_row = reinterpret_cast<int32_t*>(send_weights + total_send_ * top_k);
  const auto* ones = reinterpret_cast<const float*>(pair_row + pairs);
  ASSIGN_OR_RETURN(uint16_t * send_z, ctx.scratch->Take<uint16_t>(total_send_ * width));
  if (total_send_ > 0) {
    RETURN_IF_ERROR(kc::MoeGatherRows(z, src_row, total_send_, width, send_z, stream));
  }
  ASSIGN_OR_RETURN(uint16_t * recv_z, ctx.scratch->Take<uint16_t>(total_recv_ * width));
  ASSIGN_OR_RETURN(int32_t * recv_ids, ctx.scratch->Take<int32_t>(total_recv_ * top_k));
  ASSIGN_OR_RETURN(float* recv_weights, ctx.scratch->Take<float>(total_recv_ * top_k));
  int64_t bytes_sent = 0, bytes_received = 0;
  auto all_to_all = [&](const char* name, const void* send, void* recv, int64_t bytes_per_send_row,
                        const std::vector<int64_t>& send_n, const std::vector<int64_t>& recv_n) {
    for (int r = 0; r < world_size_; ++r) {
      send_bytes_[static_cast<size_t>(r)] = send_n[static_cast<size_t>(r)] * bytes_per_send_row;
      recv_bytes_[static_cast<size_t>(r)] = recv_n[static_cast<size_t>(r)] * bytes_per_send_row;
      if (r == rank_) continue;
      bytes_sent += send_bytes_[static_cast<size_t>(r)];
      bytes_received += recv_bytes_[static_cast<size_t>(r)];
    }
    Collective(name, moe_layer, stream, [&] {
      return comm_->AllToAllV(send, send_bytes_.data(), recv, recv_bytes_.data());
    });
  };
  all_to_all("all-to-all-v (dispatch rows)", send_z, recv_z, width * 2, send_rows_, recv_rows_);
  all_to_all("all-to-all-v (dispatch ids)", send_ids, recv_ids, int64_t{top_k} * 4, send_rows_,
             recv_rows_);
  all_to_all("all-to-all-v (dispatch weights)", send_weights, recv_weights, int64_t{top_k} * 4,
             send_rows_, recv_rows_);

  // 4. This rank's experts over everything that arrived.
  ASSIGN_OR_RETURN(float* expert_out, ctx.scratch->Take<float>(total_recv_ * width));
  const auto experts_start = std::chrono::steady_clock::now();
  if (total_recv_ > 0) {
    CHECK(!local_experts_.empty()) << "rank " << rank_ << " received rows but holds no expert";
    RETURN_IF_ERROR(run(recv_z, total_recv_, recv_ids, recv_weights, expert_out));
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "experts cudaStreamSynchronize");
  const double expert_seconds = SecondsSince(experts_start);

  // 5–6. The partial sums back, in the order they came; each row sums its destinations.
  ASSIGN_OR_RETURN(float* combined, ctx.scratch->Take<float>(total_send_ * width));
  all_to_all("all-to-all-v (combine)", expert_out, combined, width * 4, recv_rows_, send_rows_);
  if (rows > 0) {
    RETURN_IF_ERROR(kc::MoeCombine(combined, pair_row, ones, rows, top_k, width, routed, stream));
  }

  absl::MutexLock lock(&stats_mu_);
  dist::ExpertExchangeStats& s = stats_;
  ++s.num_exchanges;
  s.rows_dispatched += total_send_;
  s.rows_to_self += send_rows_[static_cast<size_t>(rank_)];
  s.rows_received += total_recv_;
  s.bytes_sent += bytes_sent + (world_size_ - 1) * 8;
  s.bytes_received += bytes_received + (world_size_ - 1) * 8;
  s.all_to_all_seconds += collective_seconds_;
  s.expert_seconds += expert_seconds;
  s.exchange_seconds += SecondsSince(start);
  return absl::OkStatus();
}

void DeviceExpertParallelExchange::TakeExpertTokens(std::vector<int64_t>* expert_tokens) {
  *expert_tokens = expert_tokens_;
  std::fill(expert_tokens_.begin(), expert_tokens_.end(), 0);
}

dist::ExpertExchangeStats DeviceExpertParallelExchange::stats() {
  absl::MutexLock lock(&stats_mu_);
  dist::ExpertExchangeStats out = stats_;
  stats_ = dist::ExpertExchangeStats{};
  return out;
}

}  // namespace strata::engine::cuda
