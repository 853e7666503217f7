#include "kernels/reference/glu.h"

#include <cmath>

#include "core/check.h"
#include "kernels/reference/internal/scalar_math.h"

namespace strata::kernels {
namespace {

// β·tanh(z/β): a smooth cap to (−β, β); the identity when β ≤ 0 (no cap).
double SoftCap(double z, double beta) { return beta > 0.0 ? beta * std::tanh(z / beta) : z; }

}  // namespace

void GluReference(const float* gate, const float* up, int64_t n, const GluParams& params,
                  float* out) {
  CHECK_GE(n, 0);
  if (params.kind == GluKind::kSitu) {
    CHECK_GT(params.beta1, 0.0f) << "SiTU needs β1 > 0";
  }
  const double beta1 = params.beta1;
  const double beta2 = params.beta2;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double u = up[i];
    double value;
    if (params.kind == GluKind::kSwiGlu) {
      value = internal::Silu(g) * u;
    } else {
      value = SoftCap(g, beta1) * internal::Sigmoid(g) * SoftCap(u, beta2);
    }
    out[i] = static_cast<float>(value);
  }
}

}  // namespace strata::kernels
