#pragma once
// Normalisation layers. BatchNorm keeps running statistics as buffers
// (running_mean, running_var, num_batches_tracked) and uses them in eval().
#include <functional>
#include <optional>

#include "tessera/nn/module.h"

namespace tessera::nn {

// BatchNorm over channel dim 1 of [N, C] / [N, C, L] (1d) or [N, C, H, W] (2d).
// momentum: weight of the new batch in the running average; nullopt = a
// cumulative average (1 / num_batches_tracked), as in PyTorch.
struct BatchNorm : Module {
  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  // Statistics across replicas (data parallelism): when set, training-mode
  // statistics are those of every replica's batch together. It sums a tensor
  // over the replicas and is differentiable (distributed::convert_sync_batch_norm
  // sets an all-reduce); nn knows nothing of process groups.
  std::function<Tensor(const Tensor&)> replica_sum;
  void reset_parameters() override;
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 protected:
  BatchNorm(const char* type, int64_t num_features, double eps, std::optional<double> momentum, bool affine,
            bool track_running_stats);
  virtual void check_input(const Tensor& x) const = 0;

 private:
  Tensor forward_across_replicas(const Tensor& x, double factor);
};

struct BatchNorm1d : BatchNorm {
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm("BatchNorm1d", num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input(const Tensor& x) const override;
};

struct BatchNorm2d : BatchNorm {
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm("BatchNorm2d", num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input(const Tensor& x) const override;
};

// Normalises over the trailing normalized_shape dims. bias=false keeps the weight only.
struct LayerNorm : Module {
  Shape normalized_shape;
  double eps;
  bool elementwise_affine;
  Tensor weight, bias;
  explicit LayerNorm(IntArrayRef normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  void reset_parameters() override;
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

// x / sqrt(mean(x^2) + eps) * weight. eps nullopt = machine epsilon of the dtype.
struct RMSNorm : Module {
  Shape normalized_shape;
  std::optional<double> eps;
  bool elementwise_affine;
  Tensor weight;
  explicit RMSNorm(IntArrayRef normalized_shape, std::optional<double> eps = {}, bool elementwise_affine = true);
  void reset_parameters() override;
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

struct GroupNorm : Module {
  int64_t num_groups, num_channels;
  double eps;
  bool affine;
  Tensor weight, bias;
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  void reset_parameters() override;
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

}  // namespace tessera::nn
