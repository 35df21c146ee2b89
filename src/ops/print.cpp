// Printing tensors the way PyTorch does, summarized when large, so a tensor in
// a test failure is readable. Declared in core (tensor.h), defined here: it
// converts with ops and names the autograd node.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "tessera/core/numbers.h"
#include "tessera/core/tensor.h"
#include "tessera/autograd/node.h"
#include "tessera/ops/ops.h"

namespace tessera {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool floating = false;
  bool sci = false;
  bool ints_only = false;  // floats that are all whole numbers print as "1."
  int width = 1;
  int precision = 4;

  std::string fmt(double v) const {
    // format_double: the same digits whatever the process's locale.
    if (!floating) return std::to_string(saturating_int64(v));
    if (sci) return format_double(v, 'e', precision);
    if (ints_only && std::isfinite(v)) return format_double(v, 'f', 0) + ".";
    return format_double(v, 'f', precision);
  }
};

void print_rec(std::ostringstream& os, const Tensor& t, const Formatter& f, int64_t indent, bool summarize,
               const std::vector<double>& flat, const std::vector<int64_t>& strides, int64_t base, int64_t d,
               bool is_bool) {
  int64_t n = t.size(d);
  auto item = [&](int64_t i) {
    double v = flat[base + i * strides[d]];
    std::string s = is_bool ? (v != 0 ? "True" : "False") : f.fmt(v);
    if (static_cast<int>(s.size()) < f.width) s = std::string(f.width - s.size(), ' ') + s;
    return s;
  };
  os << "[";
  bool cut = summarize && n > 2 * kEdgeItems;
  for (int64_t i = 0; i < n; ++i) {
    if (cut && i == kEdgeItems) {
      if (d == t.dim() - 1) os << "...";
      else os << "...";
      i = n - kEdgeItems;
      if (d == t.dim() - 1) os << ", ";
      else os << ",\n" << std::string(indent + 1, ' ');
    }
    if (d == t.dim() - 1) {
      os << item(i);
      if (i + 1 < n) os << ", ";
    } else {
      print_rec(os, t, f, indent + 1, summarize, flat, strides, base + i * strides[d], d + 1, is_bool);
      if (i + 1 < n) os << "," << std::string(t.dim() - d - 1, '\n') << std::string(indent + 1, ' ');
    }
  }
  os << "]";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  Tensor x = to(DType::F64).contiguous().detach();
  const double* p = x.data_ptr<double>();
  std::vector<double> flat(p, p + x.numel());
  Formatter f;
  f.floating = is_floating_point();
  bool is_bool = dtype() == DType::Bool;
  if (f.floating) {
    double amax = 0, amin = INFINITY;
    bool all_int = true;
    for (double v : flat) {
      if (!std::isfinite(v)) continue;
      amax = std::max(amax, std::fabs(v));
      if (v != 0) amin = std::min(amin, std::fabs(v));
      if (v != std::floor(v)) all_int = false;
    }
    f.ints_only = all_int;
    f.sci = amax >= 1e8 || (amin < 1e-4 && amin > 0) || (amin != INFINITY && amax / amin > 1000 && !all_int);
  }
  for (double v : flat) f.width = std::max<int>(f.width, is_bool ? (v != 0 ? 4 : 5) : f.fmt(v).size());
  if (dim() == 0) {
    os << (is_bool ? (flat[0] != 0 ? "True" : "False") : f.fmt(flat[0]));
  } else {
    std::vector<int64_t> st(x.strides().begin(), x.strides().end());
    print_rec(os, x, f, 7, numel() > kSummarizeAbove, flat, st, 0, 0, is_bool);
  }
  if (numel() == 0) os << ", size=" << shape_str(shape());
  if (dtype() != DType::F32 && dtype() != DType::I64 && dtype() != DType::Bool) os << ", dtype=" << dtype_name(dtype());
  if (requires_grad()) {
    if (grad_fn()) os << ", grad_fn=<" << grad_fn()->name() << ">";
    else os << ", requires_grad=True";
  }
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace tessera
