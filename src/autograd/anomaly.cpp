#include "tessera/autograd/anomaly.h"

#include <atomic>
#include <cmath>
#include <sstream>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/trace.h"

namespace tessera::autograd {
namespace {

std::atomic<int> g_guards{0};

struct Counts {
  int64_t nan = 0, inf = 0;
  double lo = INFINITY, hi = -INFINITY;
};

Counts count(const Tensor& t) {
  Counts c;
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return c;
  NoGradGuard no_grad;
  Tensor x = t.detach().to(DType::F64).contiguous();
  const double* p = x.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = p[i];
    if (std::isnan(v)) c.nan++;
    else if (std::isinf(v)) c.inf++;
    else {
      c.lo = std::min(c.lo, v);
      c.hi = std::max(c.hi, v);
    }
  }
  return c;
}

bool finite(const Tensor& t) {
  const Counts c = count(t);
  return c.nan == 0 && c.inf == 0;
}

std::string where(const char* path) {
  return path && *path ? std::string(" in module '") + path + "'" : std::string(" (outside any module)");
}

}  // namespace

std::string summarize(const Tensor& t) {
  if (!t.defined()) return "undefined";
  std::ostringstream os;
  os << "shape " << shape_str(t.shape()) << " " << dtype_name(t.dtype());
  if (!is_floating(t.dtype())) return os.str();
  Counts c = count(t);
  if (c.lo <= c.hi) os << ", min " << c.lo << ", max " << c.hi;
  os << ", " << c.nan << " NaN, " << c.inf << " Inf";
  return os.str();
}

struct DetectAnomalyGuard::Impl : trace::Listener {
  void op_outputs(const char* op, bool backward, const char* path, const Tensor* ins, int n_in, const Tensor* outs,
                  int n_out) override {
    for (int i = 0; i < n_out; ++i) {
      if (finite(outs[i])) continue;
      std::ostringstream os;
      Counts c = count(outs[i]);
      const char* what = c.nan ? "NaN" : "Inf";
      if (backward) {
        os << "anomaly: the backward of '" << op << "'" << where(path) << " returned " << what
           << " in the gradient for its input " << i << " (" << summarize(outs[i]) << ")";
        for (int j = 0; j < n_in; ++j) os << "\n  incoming gradient " << j << ": " << summarize(ins[j]);
      } else {
        int bad_in = -1;
        for (int j = 0; j < n_in && bad_in < 0; ++j)
          if (!finite(ins[j])) bad_in = j;
        if (bad_in >= 0)
          os << "anomaly: " << what << " was already in input " << bad_in << " of '" << op << "'" << where(path)
             << ": it came from outside the recorded graph (data, or an op run without grad)";
        else
          os << "anomaly: the forward of '" << op << "'" << where(path) << " produced " << what << " in output "
             << i << " (" << summarize(outs[i]) << ")";
        for (int j = 0; j < n_in; ++j) os << "\n  input " << j << ": " << summarize(ins[j]);
      }
      TS_ERROR(os.str());
    }
  }
};

DetectAnomalyGuard::DetectAnomalyGuard() : impl_(new Impl()) {
  trace::add_listener(impl_);
  g_guards.fetch_add(1);
}

DetectAnomalyGuard::~DetectAnomalyGuard() {
  trace::remove_listener(impl_);
  g_guards.fetch_sub(1);
  delete impl_;
}

bool anomaly_mode_enabled() { return g_guards.load() > 0; }

}  // namespace tessera::autograd
