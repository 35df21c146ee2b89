#pragma once
// Element-wise layers: the activations as modules, Softmax/LogSoftmax, Dropout.
// Each wraps the op of the same name in tessera::ops.
#include <string>

#include "tessera/nn/module.h"

namespace tessera::nn {

#define TESSERA_SIMPLE_ACTIVATION(Name)              \
  struct Name : Module {                             \
    Name() : Module(#Name) {}                        \
    Tensor forward(const Tensor& x) override;        \
  };
TESSERA_SIMPLE_ACTIVATION(ReLU)
TESSERA_SIMPLE_ACTIVATION(SiLU)
TESSERA_SIMPLE_ACTIVATION(Tanh)
TESSERA_SIMPLE_ACTIVATION(Sigmoid)
TESSERA_SIMPLE_ACTIVATION(Mish)
#undef TESSERA_SIMPLE_ACTIVATION

struct GELU : Module {
  std::string approximate;  // "none" or "tanh"
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

struct LeakyReLU : Module {
  double negative_slope;
  explicit LeakyReLU(double negative_slope = 0.01) : Module("LeakyReLU"), negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

struct ELU : Module {
  double alpha;
  explicit ELU(double alpha = 1.0) : Module("ELU"), alpha(alpha) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

struct Softplus : Module {
  double beta, threshold;
  explicit Softplus(double beta = 1.0, double threshold = 20.0) : Module("Softplus"), beta(beta), threshold(threshold) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

struct Hardtanh : Module {
  double min_val, max_val;
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

struct Softmax : Module {
  int64_t dim;
  explicit Softmax(int64_t dim) : Module("Softmax"), dim(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

struct LogSoftmax : Module {
  int64_t dim;
  explicit LogSoftmax(int64_t dim) : Module("LogSoftmax"), dim(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

// Zeroes elements with probability p in training mode (scaling the rest by
// 1 / (1 - p)); the identity in eval mode.
struct Dropout : Module {
  double p;
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

// An activation module by name: relu, gelu, gelu_tanh, silu, tanh, sigmoid,
// mish, leaky_relu, elu, softplus, identity.
ModulePtr make_activation(const std::string& name);

}  // namespace tessera::nn
