#include "core/check.h"
#include "engine/glu_ffn.h"
#include "engine/mixers.h"
#include "kernels/cpu/matmul_glu.h"

namespace strata::engine {

kernels::GluParams GluFromConfig(const ModelConfig& cfg) {
  kernels::GluParams params;
  params.kind =
      cfg.activation == FfnActivation::kSitu ? kernels::GluKind::kSitu : kernels::GluKind::kSwiGlu;
  params.beta1 = cfg.situ_beta;
  params.beta2 = cfg.situ_linear_beta;
  return params;
}

void GluFfn(const kernels::GluParams& act, const Linear& gate, const Linear& up, const Linear& down,
            const float* x, int64_t num_rows, float* out, Workspace& ws) {
  CHECK(!gate.empty() && !up.empty() && !down.empty());
  WorkspaceScope scope(ws);
  float* h = ws.Floats(num_rows * gate.out_features);
  kernels::cpu::MatmulGlu(KernelWeights(gate), KernelWeights(up), act, x, num_rows, h);
  LinearForward(down, h, num_rows, out);
}

void MlpForward(const ModelConfig& cfg, const MlpWeights& w, const float* x, int64_t num_rows,
                float* out, Workspace& ws) {
  GluFfn(GluFromConfig(cfg), w.gate_proj, w.up_proj, w.down_proj, x, num_rows, out, ws);
}

}  // namespace strata::engine
