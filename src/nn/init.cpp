#include "tessera/nn/init.h"

#include <cmath>
#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"

namespace tessera::nn::init {

namespace {
Tensor& fill_from(Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
  return t;
}

void check_floating(const Tensor& t, const char* fn) {
  TS_CHECK(t.defined() && t.is_floating_point(), "init::", fn, ": needs a floating-point tensor");
}

double fan_for(const Tensor& t, const std::string& mode) {
  auto [fan_in, fan_out] = fans(t);
  TS_CHECK(mode == "fan_in" || mode == "fan_out", "init: mode must be 'fan_in' or 'fan_out', got '", mode, "'");
  return static_cast<double>(mode == "fan_in" ? fan_in : fan_out);
}
}  // namespace

std::pair<int64_t, int64_t> fans(const Tensor& t) {
  TS_CHECK(t.dim() >= 2, "init: fan in and fan out need a tensor with at least 2 dimensions, got shape ",
           shape_str(t.shape()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "identity" || nl == "sigmoid" || nl.rfind("conv", 0) == 0) return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 0.75;
  TS_ERROR("init::calculate_gain: unknown nonlinearity '", nl,
           "' (expected linear, conv1d, conv2d, sigmoid, tanh, relu, leaky_relu or selu)");
}

// Draws are made on the tensor's own device: on meta they allocate nothing
// but advance the generator exactly as on the CPU, which is how a model on
// meta is materialized a piece at a time (distributed::ZeroRedundancy).
Tensor& uniform_(Tensor& t, double a, double b, Generator* gen) {
  check_floating(t, "uniform_");
  return fill_from(t, ops::uniform(t.shape(), a, b, TensorOptions(t.dtype(), t.device()), gen));
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  check_floating(t, "normal_");
  return fill_from(t, ops::normal(t.shape(), mean, std, TensorOptions(t.dtype(), t.device()), gen));
}

Tensor& trunc_normal_(Tensor& t, double mean, double std, double a, double b, Generator* gen) {
  check_floating(t, "trunc_normal_");
  TS_CHECK(a < b, "init::trunc_normal_: needs a < b, got a=", a, ", b=", b);
  TS_CHECK(b > mean - 6 * std && a < mean + 6 * std, "init::trunc_normal_: [a, b] = [", a, ", ", b,
           "] is too far from the mean for redrawing to terminate");
  TS_CHECK(!t.device().is_meta(), "init::trunc_normal_: cannot draw into a meta tensor (how many numbers it "
           "takes depends on their values); give the tensor memory first, or use normal_");
  NoGradGuard no_grad;
  Tensor v = ops::normal(t.shape(), mean, std, DType::F64, gen);
  for (;;) {
    Tensor bad = ops::logical_or(ops::lt(v, a), ops::gt(v, b));
    if (!ops::any(bad).item<bool>()) break;
    v = ops::where(bad, ops::normal(t.shape(), mean, std, DType::F64, gen), v);
  }
  return fill_from(t, v);
}

Tensor& constant_(Tensor& t, double value) {
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& kaiming_uniform_(Tensor& t, double a, const std::string& mode, const std::string& nl, Generator* gen) {
  double bound = std::sqrt(3.0) * calculate_gain(nl, a) / std::sqrt(fan_for(t, mode));
  return uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, const std::string& mode, const std::string& nl, Generator* gen) {
  return normal_(t, 0.0, calculate_gain(nl, a) / std::sqrt(fan_for(t, mode)), gen);
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  auto [fi, fo] = fans(t);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(fi + fo));
  return uniform_(t, -bound, bound, gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  auto [fi, fo] = fans(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fi + fo)), gen);
}

// Householder QR of a normal matrix; Q's columns, signs fixed by diag(R) so
// that the result is uniformly distributed (as torch.nn.init.orthogonal_).
Tensor& orthogonal_(Tensor& t, double gain, Generator* gen) {
  check_floating(t, "orthogonal_");
  TS_CHECK(t.dim() >= 2, "init::orthogonal_: needs at least 2 dimensions, got shape ", shape_str(t.shape()));
  const int64_t rows = t.size(0), cols = t.numel() / rows;
  const bool flip = rows < cols;
  const int64_t m = flip ? cols : rows, n = flip ? rows : cols;  // m >= n
  if (t.device().is_meta()) {  // the same draw, so the generator moves on as it would
    ops::normal({m, n}, 0.0, 1.0, TensorOptions(DType::F64, t.device()), gen);
    return t;
  }
  std::vector<double> a = ops::normal({m, n}, 0.0, 1.0, DType::F64, gen).to_vector<double>();
  std::vector<double> q(m * n, 0.0), v(m);
  std::vector<std::vector<double>> hs;  // Householder vectors
  std::vector<double> rdiag(n);
  for (int64_t k = 0; k < n; ++k) {
    double norm = 0;
    for (int64_t i = k; i < m; ++i) norm += a[i * n + k] * a[i * n + k];
    norm = std::sqrt(norm);
    double alpha = a[k * n + k] > 0 ? -norm : norm;
    std::vector<double> h(m, 0.0);
    for (int64_t i = k; i < m; ++i) h[i] = a[i * n + k];
    h[k] -= alpha;
    double hn = 0;
    for (int64_t i = k; i < m; ++i) hn += h[i] * h[i];
    if (hn > 0)
      for (int64_t j = k; j < n; ++j) {
        double dot = 0;
        for (int64_t i = k; i < m; ++i) dot += h[i] * a[i * n + j];
        for (int64_t i = k; i < m; ++i) a[i * n + j] -= 2 * h[i] * dot / hn;
      }
    rdiag[k] = a[k * n + k];
    hs.push_back(std::move(h));
  }
  // Q = H_0 H_1 ... H_{n-1} applied to the first n columns of the identity.
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) v[i] = i == j ? 1.0 : 0.0;
    for (int64_t k = n - 1; k >= 0; --k) {
      const auto& h = hs[k];
      double hn = 0, dot = 0;
      for (int64_t i = k; i < m; ++i) hn += h[i] * h[i], dot += h[i] * v[i];
      if (hn > 0)
        for (int64_t i = k; i < m; ++i) v[i] -= 2 * h[i] * dot / hn;
    }
    double s = rdiag[j] < 0 ? -1.0 : 1.0;
    for (int64_t i = 0; i < m; ++i) q[i * n + j] = v[i] * s * gain;
  }
  Tensor qt = from_buffer(q.data(), {m, n}, DType::F64);
  if (flip) qt = qt.t();
  return fill_from(t, qt.reshape(t.shape()));
}

}  // namespace tessera::nn::init
