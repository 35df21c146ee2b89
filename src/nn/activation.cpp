#include "tessera/nn/activation.h"

#include "tessera/nn/linear.h"
#include "tessera/ops/ops.h"

namespace tessera::nn {

Tensor ReLU::forward(const Tensor& x) { return ops::relu(x); }
Tensor SiLU::forward(const Tensor& x) { return ops::silu(x); }
Tensor Tanh::forward(const Tensor& x) { return ops::tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) { return ops::sigmoid(x); }
Tensor Mish::forward(const Tensor& x) { return ops::mish(x); }

GELU::GELU(std::string approximate) : Module("GELU"), approximate(std::move(approximate)) {
  TS_CHECK(this->approximate == "none" || this->approximate == "tanh",
           "GELU: approximate must be 'none' or 'tanh', got '", this->approximate, "'");
}
Tensor GELU::forward(const Tensor& x) { return ops::gelu(x, approximate); }
std::string GELU::extra_repr() const { return "approximate='" + approximate + "'"; }

Tensor LeakyReLU::forward(const Tensor& x) { return ops::leaky_relu(x, negative_slope); }
std::string LeakyReLU::extra_repr() const { return detail::str("negative_slope=", negative_slope); }

Tensor ELU::forward(const Tensor& x) { return ops::elu(x, alpha); }
std::string ELU::extra_repr() const { return detail::str("alpha=", alpha); }

Tensor Softplus::forward(const Tensor& x) { return ops::softplus(x, beta, threshold); }
std::string Softplus::extra_repr() const { return detail::str("beta=", beta, ", threshold=", threshold); }

Hardtanh::Hardtanh(double lo, double hi) : Module("Hardtanh"), min_val(lo), max_val(hi) {
  TS_CHECK(lo < hi, "Hardtanh: min_val (", lo, ") must be less than max_val (", hi, ")");
}
Tensor Hardtanh::forward(const Tensor& x) { return ops::hardtanh(x, min_val, max_val); }
std::string Hardtanh::extra_repr() const { return detail::str("min_val=", min_val, ", max_val=", max_val); }

Tensor Softmax::forward(const Tensor& x) { return ops::softmax(x, dim); }
std::string Softmax::extra_repr() const { return detail::str("dim=", dim); }
Tensor LogSoftmax::forward(const Tensor& x) { return ops::log_softmax(x, dim); }
std::string LogSoftmax::extra_repr() const { return detail::str("dim=", dim); }

Dropout::Dropout(double p) : Module("Dropout"), p(p) {
  TS_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p);
}
Tensor Dropout::forward(const Tensor& x) { return ops::dropout(x, p, training_); }
std::string Dropout::extra_repr() const { return detail::str("p=", p); }

ModulePtr make_activation(const std::string& name) {
  if (name == "relu") return std::make_shared<ReLU>();
  if (name == "gelu") return std::make_shared<GELU>();
  if (name == "gelu_tanh") return std::make_shared<GELU>("tanh");
  if (name == "silu" || name == "swish") return std::make_shared<SiLU>();
  if (name == "tanh") return std::make_shared<Tanh>();
  if (name == "sigmoid") return std::make_shared<Sigmoid>();
  if (name == "mish") return std::make_shared<Mish>();
  if (name == "leaky_relu") return std::make_shared<LeakyReLU>();
  if (name == "elu") return std::make_shared<ELU>();
  if (name == "softplus") return std::make_shared<Softplus>();
  if (name == "identity") return std::make_shared<Identity>();
  TS_ERROR("unknown activation '", name,
           "' (expected relu, gelu, gelu_tanh, silu, tanh, sigmoid, mish, leaky_relu, elu, softplus or identity)");
}

}  // namespace tessera::nn
