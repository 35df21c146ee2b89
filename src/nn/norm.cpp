#include "tessera/nn/norm.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/nn/init.h"
#include "tessera/ops/ops.h"

namespace tessera::nn {

BatchNorm::BatchNorm(const char* type, int64_t n, double eps, std::optional<double> momentum, bool affine, bool track)
    : Module(type), num_features(n), eps(eps), momentum(momentum), affine(affine), track_running_stats(track) {
  TS_CHECK(n > 0, type, ": num_features must be positive, got ", n);
  TS_CHECK(eps > 0, type, ": eps must be positive, got ", eps);
  if (affine) {
    weight = register_parameter("weight", ones({n}));
    bias = register_parameter("bias", zeros({n}));
  }
  if (track) {
    running_mean = register_buffer("running_mean", zeros({n}));
    running_var = register_buffer("running_var", ones({n}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::I64));
  }
}

void BatchNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
  if (running_mean.defined()) {
    init::zeros_(running_mean);
    init::ones_(running_var);
    num_batches_tracked.zero_();
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  check_input(x);
  TS_CHECK(x.size(1) == num_features, type_name(), "(", num_features, "): expected ", num_features,
           " channels in dim 1, got shape ", shape_str(x.shape()));
  double factor = momentum.value_or(0.0);
  if (training_ && track_running_stats) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    if (!momentum) factor = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
  }
  const bool batch_stats = training_ || !track_running_stats;
  if (batch_stats && replica_sum) return forward_across_replicas(x, factor);
  return ops::batch_norm(x, running_mean, running_var, weight, bias, batch_stats, factor, eps);
}

// The statistics of every replica's batch together, in two passes as one
// process computes them: the mean, then the mean squared deviation from it
// (not E[x^2] - E[x]^2, which cancels when the mean is large). Two small
// sums across replicas per call; autograd differentiates through them.
Tensor BatchNorm::forward_across_replicas(const Tensor& x, double factor) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Shape bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = num_features;
  Tensor count = full({1}, static_cast<double>(x.numel() / num_features), TensorOptions(x.dtype(), x.device()));
  Tensor sums = replica_sum(ops::cat({ops::sum(x, dims), count}));
  Tensor n = sums.narrow(0, num_features, 1);
  Tensor mean = ops::div(sums.narrow(0, 0, num_features), n);
  Tensor centered = ops::sub(x, mean.reshape(bshape));
  Tensor var = ops::div(replica_sum(ops::sum(ops::mul(centered, centered), dims)), n);  // biased
  Tensor y = ops::mul(centered, ops::rsqrt(ops::add(var, eps)).reshape(bshape));
  if (weight.defined()) y = ops::add(ops::mul(y, weight.reshape(bshape)), bias.reshape(bshape));
  if (training_ && track_running_stats) {
    NoGradGuard no_grad;
    const double total = n.item<double>();
    TS_CHECK(total > 1, type_name(), ": the replicas' batches hold ", total,
             " value per channel together; the variance needs at least 2");
    running_mean.mul_(1 - factor).add_(ops::mul(mean.detach().to(running_mean.dtype()), factor));
    running_var.mul_(1 - factor).add_(ops::mul(var.detach().to(running_var.dtype()), factor * total / (total - 1)));
  }
  return y;
}

std::string BatchNorm::extra_repr() const {
  return detail::str(num_features, ", eps=", eps, ", momentum=", momentum ? detail::str(*momentum) : std::string("None"),
             ", affine=", affine ? "True" : "False", ", track_running_stats=", track_running_stats ? "True" : "False",
             replica_sum ? ", synchronized across replicas" : "");
}

void BatchNorm1d::check_input(const Tensor& x) const {
  TS_CHECK(x.dim() == 2 || x.dim() == 3, "BatchNorm1d: expected a 2-D [N, C] or 3-D [N, C, L] input, got shape ",
           shape_str(x.shape()));
}

void BatchNorm2d::check_input(const Tensor& x) const {
  TS_CHECK(x.dim() == 4, "BatchNorm2d: expected a 4-D [N, C, H, W] input, got shape ", shape_str(x.shape()));
}

LayerNorm::LayerNorm(IntArrayRef shape, double eps, bool affine, bool with_bias)
    : Module("LayerNorm"), normalized_shape(shape.shape()), eps(eps), elementwise_affine(affine) {
  TS_CHECK(!shape.empty(), "LayerNorm: normalized_shape must not be empty");
  for (int64_t d : shape) TS_CHECK(d > 0, "LayerNorm: normalized_shape must be positive, got ", shape_str(shape));
  if (affine) {
    weight = register_parameter("weight", ones(shape));
    if (with_bias) bias = register_parameter("bias", zeros(shape));
  }
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& x) { return ops::layer_norm(x, normalized_shape, weight, bias, eps); }

std::string LayerNorm::extra_repr() const {
  return detail::str(shape_str(normalized_shape), ", eps=", eps, ", elementwise_affine=", elementwise_affine ? "True" : "False");
}

RMSNorm::RMSNorm(IntArrayRef shape, std::optional<double> eps, bool affine)
    : Module("RMSNorm"), normalized_shape(shape.shape()), eps(eps), elementwise_affine(affine) {
  TS_CHECK(!shape.empty(), "RMSNorm: normalized_shape must not be empty");
  if (affine) weight = register_parameter("weight", ones(shape));
}

void RMSNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
}

Tensor RMSNorm::forward(const Tensor& x) { return ops::rms_norm(x, normalized_shape, weight, eps); }

std::string RMSNorm::extra_repr() const {
  return detail::str(shape_str(normalized_shape), ", eps=", eps ? detail::str(*eps) : std::string("None"),
             ", elementwise_affine=", elementwise_affine ? "True" : "False");
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps, bool affine)
    : Module("GroupNorm"), num_groups(groups), num_channels(channels), eps(eps), affine(affine) {
  TS_CHECK(groups > 0 && channels > 0 && channels % groups == 0, "GroupNorm: num_channels=", channels,
           " must be divisible by num_groups=", groups);
  if (affine) {
    weight = register_parameter("weight", ones({channels}));
    bias = register_parameter("bias", zeros({channels}));
  }
}

void GroupNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor GroupNorm::forward(const Tensor& x) { return ops::group_norm(x, num_groups, weight, bias, eps); }

std::string GroupNorm::extra_repr() const {
  return detail::str(num_groups, ", ", num_channels, ", eps=", eps, ", affine=", affine ? "True" : "False");
}

}  // namespace tessera::nn
