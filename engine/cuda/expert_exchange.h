// Expert parallelism on the device: the seam CudaModel::Moe calls when the routed experts are
// spread over ranks (dist/device_moe_dispatch.h implements it over a dist::Communicator).
//
// Per MoE layer and step every rank of the group calls Exchange once, in the same order, with
// its own rows (a rank without work passes 0 rows and still takes part: the others may send it
// rows for its experts). Exchange sends each row to the ranks that run its experts, runs this
// rank's experts on what arrived (through `run`, CudaModel's grouped GEMMs over the local
// experts), brings the weighted partial sums back and adds them up, so that on return `routed`
// [rows, width] f32 holds what the single-rank path computes (up to f32 summation order).
//
// The exchange synchronises the stream (the row counts must reach the host), so steps of an
// expert-parallel executor are not graph-captured.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "engine/cuda/cuda_model.h"

namespace strata::engine::cuda {

class DeviceExpertExchange {
 public:
  virtual ~DeviceExpertExchange() = default;

  // Global ids of the experts this rank holds, ascending: the device weights keep only these,
  // and ids handed to `run` index this list.
  virtual const std::vector<int>& local_experts() const = 0;

  // run(z [rows, width] bf16, rows ≥ 1, ids [rows, top_k] local indices or −1, weights
  // [rows, top_k], out [rows, width] f32): out[r] = Σ_j weights[r, j] · Expert_{ids[r, j]}(z[r]).
  using RunLocalExperts = absl::FunctionRef<absl::Status(
      const uint16_t* z, int64_t rows, int32_t* ids, const float* weights, float* out)>;

  // z [rows, width] bf16, ids [rows, top_k] global expert ids, weights [rows, top_k] f32 (all
  // device); routed [rows, width] f32 (device). Scratch comes from ctx.scratch.
  virtual absl::Status Exchange(int moe_layer, const uint16_t* z, int64_t rows, int64_t width,
                                int top_k, const int32_t* ids, const float* weights, float* routed,
                                const DeviceContext& ctx, RunLocalExperts run) = 0;

  // (row, expert) pairs this rank's rows sent to each expert since the previous call, summed
  // over MoE layers: [num_experts] (the group's total is the sum over ranks).
  virtual void TakeExpertTokens(std::vector<int64_t>* expert_tokens) = 0;
};

}  // namespace strata::engine::cuda
