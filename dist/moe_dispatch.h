// Expert parallelism: the MoE dispatch and combine over a Communicator (docs/architecture.md,
// "Parallelism"; the seam is engine::MoeExpertExchange in engine/moe.h).
//
// Per MoE layer and step, on every rank of the group, in lockstep:
//
//   1. route   each local (row, slot) to the rank that runs expert ids[row, slot]
//              (ExpertPlacement::RankFor: own replica first, else spread over the replicas)
//   2. counts  AllToAll of int64 row counts: rank d learns how many rows each rank sends it
//   3. dispatch AllToAllV: one record per (row, destination rank owning ≥1 of its experts)
//   4. experts engine::MoeRunExperts once over every received row (grouped by expert inside)
//   5. combine AllToAllV of the weighted partial sums, back in the order they came
//   6. sum     routed[row] = Σ over the row's destinations of their partial sums
//
// Dispatch payload, per destination rank d (n_d rows, K = top-k, W = expert input width):
//
//   | z rows [n_d, W] f32 | ids [n_d, K] int32 | weights [n_d, K] f32 |
//
// where the ids of experts that d does not run are −1 (weights 0), so d runs exactly the
// (row, slot) pairs assigned to it. Combine payload to origin rank s: [n_s, W] f32.
// A row whose top-k experts all run on its own rank still goes through the communicator
// (a local copy) so that every expert reads its weights once per step for all rows.
//
// The result equals MoeRunExperts on one rank holding all experts up to the order of the
// per-row summation (≈1e-7 relative). Every replica of an expert must hold the same weights.
//
// Failure: a communicator error (a peer died or hung past the timeout, a backend error) makes
// the group unusable, and the engine cannot finish the step without the missing experts. The
// exchange then logs one error line naming the collective, this rank, the MoE layer and the
// communicator's message, flushes the log and ends the process with
// kExpertExchangeFailureExitCode (std::_Exit: no destructors, no hang in other threads), so the
// orchestrator restarts the whole group. There is no recoverable error path by design.
//
// Memory: every per-step buffer comes from the caller's Workspace (or from members sized once
// at construction / first use), so a warm step allocates nothing.
//
// Thread-safety: Exchange is called by one thread at a time (the engine loop of this rank);
// stats() may be called from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "dist/communicator.h"
#include "dist/expert_placement.h"
#include "engine/moe.h"

namespace strata::dist {

// Process exit status after a failed collective (EX_TEMPFAIL: "try again", i.e. restart).
inline constexpr int kExpertExchangeFailureExitCode = 75;

// Accumulated since the previous stats() call.
struct ExpertExchangeStats {
  int64_t num_exchanges = 0;           // Exchange calls (MoE layers × steps)
  int64_t rows_dispatched = 0;         // (row, destination) records this rank sent, itself included
  int64_t rows_to_self = 0;            // of which stayed on this rank
  int64_t rows_received = 0;           // records this rank's experts ran on, itself included
  int64_t bytes_sent = 0;              // to other ranks: counts + dispatch + combine payloads
  int64_t bytes_received = 0;          // from other ranks: counts + dispatch + combine payloads
  double all_to_all_seconds = 0;       // wall time inside the three collectives (incl. waiting)
  double expert_seconds = 0;           // wall time in MoeRunExperts
  double exchange_seconds = 0;         // wall time of whole Exchange calls
  std::vector<int64_t> expert_tokens;  // [num_experts] (row, slot) pairs each expert ran here
};

// Logs one error line "<what> failed on rank R of N (backend): <message>; exiting ...", flushes
// the log and ends the process with kExpertExchangeFailureExitCode: the failure contract above,
// shared by every collective inside a forward (tensor parallelism too).
[[noreturn]] void ExitOnCollectiveFailure(const Communicator& comm, absl::string_view what,
                                          const absl::Status& status);

// Logs one error line naming the collective, this rank, the MoE layer and the communicator's
// message, flushes the log and ends the process with kExpertExchangeFailureExitCode (see the
// failure contract above; the CUDA exchange, engine/cuda/device_moe_dispatch.h, shares it).
[[noreturn]] void ExitOnExchangeFailure(const Communicator& comm, const char* collective,
                                        int moe_layer, const absl::Status& status);

class ExpertParallelExchange : public engine::MoeExpertExchange {
 public:
  // `comm` must outlive the exchange; placement.world_size == comm->world_size() (CHECKed).
  ExpertParallelExchange(Communicator* comm, ExpertPlacement placement);

  // See engine::MoeExpertExchange. CHECKs that the model's expert count equals the placement's.
  // `expert_tokens` (may be null) is incremented by the pairs this rank's experts ran.
  void Exchange(const engine::ModelConfig& cfg, const engine::MoeWeights& w, int moe_layer,
                const float* z, int64_t num_rows, const int32_t* ids, const float* weights,
                float* routed, int64_t* expert_tokens, engine::Workspace& ws) override;

  const ExpertPlacement& placement() const { return placement_; }
  // Returns the statistics accumulated since the previous call and resets them.
  ExpertExchangeStats stats();

 private:
  struct Plan;  // per-call pointers into the workspace (moe_dispatch.cc)

  void Dispatch(Plan& p, int moe_layer, const float* z, const int32_t* ids, const float* weights,
                engine::Workspace& ws);
  void AssignDestinations(const int32_t* ids, int64_t num_rows, int top_k, int32_t* slot_rank);
  void Pack(const Plan& plan, const float* z, const int32_t* ids, const float* weights);
  void Unpack(const Plan& plan);
  void Combine(const Plan& plan, float* routed);
  // Runs one collective, timing it; on error logs and exits the process (see above).
  template <typename Fn>
  void Collective(const char* name, int moe_layer, Fn fn);
  [[noreturn]] void Fail(const char* collective, int moe_layer, const absl::Status& status) const;

  Communicator* const comm_;
  const ExpertPlacement placement_;
  const int rank_;
  const int world_size_;

  // [world_size] row counts and byte counts; sized at construction.
  std::vector<int64_t> send_rows_, recv_rows_, send_first_, recv_first_, fill_;
  std::vector<int64_t> send_bytes_, recv_bytes_;
  std::vector<int64_t> step_tokens_;  // [num_experts]
  double step_collective_seconds_ = 0;

  absl::Mutex stats_mu_;
  ExpertExchangeStats stats_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace strata::dist
