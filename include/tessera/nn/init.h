#pragma once
// Parameter initialisation, in place and without recording autograd, with
// PyTorch's names and formulas (torch.nn.init). `gen` defaults to the global
// generator, so manual_seed() makes a model's initial weights reproducible.
#include <string>

#include "tessera/core/generator.h"
#include "tessera/core/tensor.h"

namespace tessera::nn::init {

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field.
std::pair<int64_t, int64_t> fans(const Tensor& t);
// Recommended gain for a nonlinearity: linear/conv*/sigmoid 1, tanh 5/3,
// relu sqrt(2), leaky_relu sqrt(2 / (1 + a^2)), selu 3/4.
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

Tensor& uniform_(Tensor& t, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
// Normal(mean, std) redrawn until inside [a, b].
Tensor& trunc_normal_(Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0,
                      Generator* gen = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
// mode: "fan_in" or "fan_out"; nonlinearity as in calculate_gain (a = its param).
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                         const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
Tensor& xavier_normal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// A (semi-)orthogonal matrix over t viewed as [size(0), numel / size(0)], times gain.
Tensor& orthogonal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);

}  // namespace tessera::nn::init
