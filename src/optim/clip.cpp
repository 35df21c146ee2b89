// Gradient clipping: one pass to measure, one to scale, directly on the data.
#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/optim/optimizer.h"
#include "tessera/ops/ops.h"

namespace tessera::optim {

double clip_grad_norm_(const TensorList& params, double max_norm, double norm_type, bool error_if_nonfinite,
                       const std::function<double(double)>& combine, const std::optional<TensorList>& scaled) {
  NoGradGuard no_grad;
  TS_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be non-negative, got ", max_norm);
  TS_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be positive, got ", norm_type);
  TensorList grads;
  for (auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty() && !combine) return 0.0;
  double total = 0;
  const bool inf = std::isinf(norm_type);
  for (auto& g : grads) {
    double n = ops::norm(g.to(DType::F64), norm_type).item<double>();
    total = inf ? std::max(total, n) : total + std::pow(n, norm_type);
  }
  if (combine) total = combine(total);  // every process calls it, with or without gradients
  if (!inf) total = std::pow(total, 1.0 / norm_type);
  TS_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of the gradients is ", total,
           "; pass error_if_nonfinite=false to clip anyway");
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    if (scaled) {
      for (const Tensor& p : *scaled)
        if (p.grad().defined()) p.grad().mul_(coef);
    } else {
      for (auto& g : grads) g.mul_(coef);
    }
  }
  return total;
}

void clip_grad_value_(const TensorList& params, double clip_value) {
  NoGradGuard no_grad;
  TS_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be non-negative, got ", clip_value);
  for (auto& p : params)
    if (p.grad().defined()) {
      Tensor g = p.grad();
      g.clamp_(-clip_value, clip_value);
    }
}

}  // namespace tessera::optim
