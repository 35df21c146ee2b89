#include "tessera/nn/loss.h"

#include "tessera/ops/ops.h"

namespace tessera::nn {

Loss::Loss(const char* type, std::string r) : Module(type) {
  reduction = std::move(r);
  bool kl = std::string(type) == "KLDivLoss";
  TS_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none" || (kl && reduction == "batchmean"),
           type, ": reduction must be 'mean', 'sum' or 'none'", kl ? " or 'batchmean'" : "", ", got '", reduction,
           "'");
}

CrossEntropyLoss::CrossEntropyLoss(Tensor w, int64_t ignore, std::string r, double smoothing)
    : Loss("CrossEntropyLoss", std::move(r)), ignore_index(ignore), label_smoothing(smoothing) {
  if (w.defined()) weight = register_buffer("weight", w);
}
Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return ops::cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing);
}

NLLLoss::NLLLoss(Tensor w, int64_t ignore, std::string r) : Loss("NLLLoss", std::move(r)), ignore_index(ignore) {
  if (w.defined()) weight = register_buffer("weight", w);
}
Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  return ops::nll_loss(input, target, weight, ignore_index, reduction);
}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) { return ops::mse_loss(input, target, reduction); }
Tensor L1Loss::forward(const Tensor& input, const Tensor& target) { return ops::l1_loss(input, target, reduction); }
Tensor SmoothL1Loss::forward(const Tensor& input, const Tensor& target) {
  return ops::smooth_l1_loss(input, target, reduction, beta);
}

BCELoss::BCELoss(Tensor w, std::string r) : Loss("BCELoss", std::move(r)) {
  if (w.defined()) weight = register_buffer("weight", w);
}
Tensor BCELoss::forward(const Tensor& input, const Tensor& target) {
  return ops::binary_cross_entropy(input, target, weight, reduction);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(Tensor w, std::string r, Tensor pw) : Loss("BCEWithLogitsLoss", std::move(r)) {
  if (w.defined()) weight = register_buffer("weight", w);
  if (pw.defined()) pos_weight = register_buffer("pos_weight", pw);
}
Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return ops::binary_cross_entropy_with_logits(input, target, weight, reduction, pos_weight);
}

Tensor KLDivLoss::forward(const Tensor& input, const Tensor& target) {
  return ops::kl_div(input, target, reduction, log_target);
}

}  // namespace tessera::nn
