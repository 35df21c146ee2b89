// softmax / log_softmax and the normalization layers. softmax, log_softmax,
// layer_norm and rms_norm run fused row kernels forward and backward; see
// Note [Fused ops and double backward] for create_graph.
#include <cmath>
#include <limits>

#include "ops/autocast_policy.h"
#include "ops/op_utils.h"
#include "tessera/core/parallel.h"

namespace tessera::ops {
namespace {

// Moves `dim` last and makes the data contiguous: [rows, n].
Tensor to_rows(const Tensor& x, int64_t dim) {
  if (x.dim() == 0) return x.reshape({1});
  if (dim == x.dim() - 1) return x.contiguous();
  return x.transpose(dim, -1).contiguous();
}
Tensor from_rows(const Tensor& r, const Tensor& like, int64_t dim) {
  if (like.dim() == 0) return r.reshape({});
  if (dim == like.dim() - 1) return r;
  return r.transpose(dim, -1).contiguous();
}


void softmax_rows_fwd(const Tensor& x, const Tensor& y, bool is_log) {
  backend::kernels(y).softmax_fwd(x, y, is_log);
}

void softmax_rows_bwd(const Tensor& g, const Tensor& y, const Tensor& gx, bool is_log) {
  backend::kernels(gx).softmax_bwd(g, y, gx, is_log);
}

// The composite fallback of softmax / log_softmax (and their reference).
Tensor softmax_composite(const Tensor& x, int64_t dim, bool is_log) {
  if (x.numel() == 0) return mul(x, 1.0);
  Tensor m = amax(x, {dim}, true).detach();
  m = where(isinf(m), 0, m);
  Tensor z = sub(x, m);
  Tensor lse = log(sum(exp(z), {dim}, true));
  return is_log ? sub(z, lse) : exp(sub(z, lse));
}

Tensor softmax_impl(const Tensor& x_in, int64_t dim, bool is_log) {
  const char* name = is_log ? "log_softmax" : "softmax";
  check_defined(x_in, name, "input");
  TS_CHECK(is_floating(x_in.dtype()), name, ": expected a floating-point input, got ", dtype_name(x_in.dtype()),
           "; convert it with to() first");
  dim = wrap_dim(dim, x_in.dim(), name);
  Tensor xr = to_rows(x_in.detach(), dim);
  Tensor yr = empty(xr.shape(), xr.dtype());
  softmax_rows_fwd(xr, yr, is_log);
  Tensor y = from_rows(yr, x_in, dim);
  if (autograd::any_requires_grad({&x_in})) {
    TensorList outs{y};
    autograd::record(name, {x_in}, outs, [dim, is_log](const VjpArgs& a) -> TensorList {
      if (GradMode::is_enabled())
        return composite_vjp([dim, is_log](const TensorList& in) { return softmax_composite(in[0], dim, is_log); },
                             {a.saved[0]}, a.needs(), a.grads[0]);
      return {softmax_backward(a.grads[0], a.saved[1], dim, is_log)};
    }, {0}, {0});
  }
  return y;
}

// ---- layer_norm / rms_norm --------------------------------------------------------

Tensor layer_norm_composite(const Tensor& x, int64_t k, const Tensor& w, const Tensor& b, double eps, bool rms) {
  Shape dims;
  for (int64_t i = x.dim() - k; i < x.dim(); ++i) dims.push_back(i);
  Tensor xc = rms ? x : sub(x, mean(x, dims, true));
  Tensor y = mul(xc, rsqrt(add(mean(square(xc), dims, true), eps)));
  if (w.defined()) y = mul(y, w);
  if (b.defined()) y = add(y, b);
  return y;
}

// The fused row kernel: y, and the per-row mean and 1/std it normalized with.
struct NormForward {
  Tensor y, mean, rstd;
};
NormForward norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, int64_t n, double eps, bool rms) {
  int64_t rows = n == 0 ? 0 : x.numel() / n;
  DType stat = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  NormForward r{empty(x.shape(), x.dtype()), empty({rows}, stat), empty({rows}, stat)};
  backend::kernels(r.y).layer_norm_fwd(x, w, b, r.y, r.mean, r.rstd, n, eps, rms);
  return r;
}

// {gx, gw, gb} from the statistics of the forward; gw and gb are [n] in x's dtype.
TensorList norm_backward(const Tensor& g_in, const Tensor& x_in, const Tensor& w, const Tensor& mean_t,
                         const Tensor& rstd_t, int64_t n, bool rms, bool need_gx, bool need_gw, bool need_gb) {
  Tensor g = g_in.contiguous();
  Tensor xc = x_in.contiguous();
  int64_t rows = n == 0 ? 0 : xc.numel() / n;
  DType stat = mean_t.dtype();
  Tensor gx = need_gx ? empty(xc.shape(), xc.dtype()) : Tensor();
  // Weight/bias gradients: per fixed block of rows, then summed in order,
  // so the result does not depend on the thread count.
  constexpr int64_t kBlockRows = 64;
  int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  Tensor gw_part = need_gw ? zeros({blocks, n}, stat) : Tensor();
  Tensor gb_part = need_gb ? zeros({blocks, n}, stat) : Tensor();
  Tensor wc = w.defined() ? w.contiguous() : Tensor();
  backend::kernels(xc).layer_norm_bwd(g, xc, wc, mean_t, rstd_t, gx, gw_part, gb_part, n, kBlockRows, rms);
  Tensor gw = gw_part.defined() ? sum(gw_part, {0}).to(xc.dtype()) : Tensor();
  Tensor gb = gb_part.defined() ? sum(gb_part, {0}).to(xc.dtype()) : Tensor();
  return {gx, gw, gb};
}

Tensor norm_impl(const char* name, const Tensor& x_in, IntArrayRef normalized_shape, const Tensor& w_in,
                 const Tensor& b_in, double eps, bool rms) {
  check_defined(x_in, name, "input");
  TS_CHECK(is_floating(x_in.dtype()), name, ": expected a floating-point input, got ", dtype_name(x_in.dtype()));
  int64_t k = static_cast<int64_t>(normalized_shape.size());
  TS_CHECK(k >= 1 && k <= x_in.dim(), name, ": normalized_shape ", shape_str(normalized_shape),
           " must name 1 to ", x_in.dim(), " trailing dimensions of the input of shape ", shape_str(x_in.shape()));
  for (int64_t i = 0; i < k; ++i)
    TS_CHECK(x_in.shape()[x_in.dim() - k + i] == normalized_shape[i], name, ": normalized_shape ",
             shape_str(normalized_shape), " does not match the trailing dimensions of the input of shape ",
             shape_str(x_in.shape()));
  for (const Tensor* p : {&w_in, &b_in}) {
    if (!p->defined()) continue;
    TS_CHECK(IntArrayRef(p->shape()).equals(normalized_shape), name, ": ", p == &w_in ? "weight" : "bias",
             " has shape ", shape_str(p->shape()), " but normalized_shape is ", shape_str(normalized_shape));
    TS_CHECK(p->dtype() == x_in.dtype(), name, ": ", p == &w_in ? "weight" : "bias", " dtype ",
             dtype_name(p->dtype()), " differs from the input dtype ", dtype_name(x_in.dtype()));
  }
  TS_CHECK(eps >= 0, name, ": eps must be non-negative, got ", eps);
  int64_t n = numel_of(normalized_shape);
  Tensor x = x_in.detach().contiguous();
  Tensor w = w_in.defined() ? w_in.detach().contiguous() : Tensor();
  Tensor b = b_in.defined() ? b_in.detach().contiguous() : Tensor();
  NormForward f = norm_forward(x, w, b, n, eps, rms);
  if (autograd::any_requires_grad({&x_in, &w_in, &b_in})) {
    TensorList outs{f.y};
    Shape ns(normalized_shape.begin(), normalized_shape.end());
    autograd::record(name, {x_in, w_in, b_in}, outs, [k, n, eps, rms, ns](const VjpArgs& a) -> TensorList {
      const Tensor& x = a.saved[0];
      const Tensor& w = a.saved[1];
      const Tensor& b = a.saved[2];
      if (GradMode::is_enabled())
        return composite_vjp([k, eps, rms](const TensorList& in) { return layer_norm_composite(in[0], k, in[1], in[2], eps, rms); },
                             {x, w, b}, a.needs(), a.grads[0]);
      TensorList r;
      if (recorder()) {
        // Being captured: the op, which recomputes the statistics from x.
        r = layer_norm_backward(a.grads[0], x, ns, w, eps, rms);
      } else {
        r = norm_backward(a.grads[0], x, w, a.saved[3], a.saved[4], n, rms, a.needs_grad(0), a.needs_grad(1),
                          a.needs_grad(2));
      }
      Tensor gw = a.needs_grad(1) ? r[1].view(w.shape()) : Tensor();
      Tensor gb = a.needs_grad(2) ? r[2].view(b.shape()) : Tensor();
      return {a.needs_grad(0) ? r[0] : Tensor(), gw, gb};
    }, {0, 1, 2}, {}, {f.mean, f.rstd});
  }
  return f.y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  TS_OP_SCOPE(softmax, &x);
  TS_OP_ATTRS({"dim", dim});
  TS_AUTOCAST(softmax, [&](const auto& cast) { return softmax(cast(x), dim); });
  TS_RETURN(softmax_impl(x, dim, false));
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  TS_OP_SCOPE(log_softmax, &x);
  TS_OP_ATTRS({"dim", dim});
  TS_AUTOCAST(log_softmax, [&](const auto& cast) { return log_softmax(cast(x), dim); });
  TS_RETURN(softmax_impl(x, dim, true));
}

Tensor layer_norm(const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  TS_OP_SCOPE(layer_norm, &x, &weight, &bias);
  TS_OP_ATTRS({"normalized_shape", normalized_shape}, {"eps", eps});
  TS_AUTOCAST(layer_norm, [&](const auto& cast) { return layer_norm(cast(x), normalized_shape, cast(weight), cast(bias), eps); });
  TS_RETURN(norm_impl("layer_norm", x, normalized_shape, weight, bias, eps, false));
}

Tensor rms_norm(const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight, std::optional<double> eps) {
  TS_OP_SCOPE(rms_norm, &x, &weight);
  TS_OP_ATTRS({"normalized_shape", normalized_shape}, {"eps", eps});
  TS_AUTOCAST(rms_norm, [&](const auto& cast) { return rms_norm(cast(x), normalized_shape, cast(weight), eps); });
  double e = eps.value_or(0);
  if (!eps) {
    switch (x.dtype()) {
      case DType::F16: e = 0.0009765625; break;
      case DType::BF16: e = 0.0078125; break;
      case DType::F64: e = std::numeric_limits<double>::epsilon(); break;
      default: e = std::numeric_limits<float>::epsilon(); break;
    }
  }
  TS_RETURN(norm_impl("rms_norm", x, normalized_shape, weight, Tensor(), e, true));
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  TS_OP_SCOPE(group_norm, &x, &weight, &bias);
  TS_OP_ATTRS({"num_groups", num_groups}, {"eps", eps});
  TS_AUTOCAST(group_norm, [&](const auto& cast) { return group_norm(cast(x), num_groups, cast(weight), cast(bias), eps); });
  check_defined(x, "group_norm", "input");
  TS_CHECK(x.dim() >= 2, "group_norm: expected an input with at least 2 dimensions [N, C, ...], got shape ",
           shape_str(x.shape()));
  int64_t N = x.shape()[0], C = x.shape()[1];
  TS_CHECK(num_groups > 0 && C % num_groups == 0, "group_norm: the number of channels ", C,
           " must be divisible by num_groups ", num_groups);
  for (const Tensor* p : {&weight, &bias})
    if (p->defined())
      TS_CHECK(p->dim() == 1 && p->shape()[0] == C, "group_norm: ", p == &weight ? "weight" : "bias",
               " must have shape [", C, "], got ", shape_str(p->shape()));
  int64_t per_group = x.numel() / std::max<int64_t>(N * num_groups, 1);
  Tensor y = layer_norm(x.reshape({N, num_groups, per_group}), {per_group}, Tensor(), Tensor(), eps).reshape(x.shape());
  Shape bshape(x.dim(), 1);
  bshape[1] = C;
  if (weight.defined()) y = mul(y, weight.reshape(bshape));
  if (bias.defined()) y = add(y, bias.reshape(bshape));
  TS_RETURN(y);
}

namespace {

// The composite batch norm: the fallback for double backward and for dtypes or
// layouts the fused path does not take; mean and var are the statistics to
// normalize with (batch statistics in training, running ones in eval).
Tensor batch_norm_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, bool training,
                            const Tensor& running_mean, const Tensor& running_var, double eps) {
  const int64_t C = x.shape()[1];
  Shape dims{0};
  for (int64_t i = 2; i < x.dim(); ++i) dims.push_back(i);
  Shape bshape(x.dim(), 1);
  bshape[1] = C;
  Tensor y;
  if (training) {
    Tensor m = mean(x, dims, true);
    y = mul(sub(x, m), rsqrt(add(mean(square(sub(x, m)), dims, true), eps)));
  } else {
    y = mul(sub(x, running_mean.reshape(bshape)), rsqrt(add(running_var.reshape(bshape), eps)));
  }
  if (weight.defined()) y = mul(y, weight.reshape(bshape));
  if (bias.defined()) y = add(y, bias.reshape(bshape));
  return y;
}


}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  TS_OP_SCOPE(batch_norm, &x, &running_mean, &running_var, &weight, &bias);
  TS_OP_ATTRS({"training", training}, {"momentum", momentum}, {"eps", eps});
  TS_AUTOCAST(batch_norm, [&](const auto& cast) { return batch_norm(cast(x), cast(running_mean), cast(running_var), cast(weight), cast(bias), training, momentum, eps); });
  check_defined(x, "batch_norm", "input");
  TS_CHECK(x.dim() >= 2, "batch_norm: expected an input with at least 2 dimensions [N, C, ...], got shape ",
           shape_str(x.shape()));
  check_floating(x, "batch_norm", "input");
  const int64_t C = x.shape()[1];
  for (const Tensor* p : {&running_mean, &running_var, &weight, &bias})
    if (p->defined())
      TS_CHECK(p->dim() == 1 && p->shape()[0] == C, "batch_norm: running stats, weight and bias must have shape [",
               C, "], got ", shape_str(p->shape()));
  const int64_t count = x.numel() / std::max<int64_t>(C, 1);
  if (training)
    TS_CHECK(count > 1, "batch_norm: expected more than 1 value per channel when training, got input of shape ",
             shape_str(x.shape()));
  else
    TS_CHECK(running_mean.defined() && running_var.defined(),
             "batch_norm: running_mean and running_var are required in eval mode (training=false)");

  // statistics (f64, per channel)
  Tensor xc = x.detach().contiguous();
  const bool fused = (x.dtype() == DType::F32 || x.dtype() == DType::F64) && x.numel() > 0 &&
                     (!weight.defined() || weight.dtype() == x.dtype()) && (!bias.defined() || bias.dtype() == x.dtype());
  Tensor mean_t, var_t;
  if (training) {
    if (fused) {
      mean_t = empty({C}, DType::F64), var_t = empty({C}, DType::F64);
      backend::kernels(xc).batch_norm_stats(xc, mean_t, var_t);
    } else {
      Shape dims{0};
      for (int64_t i = 2; i < x.dim(); ++i) dims.push_back(i);
      NoGradGuard ng;
      Tensor xd = xc.to(DType::F64);
      mean_t = mean(xd, dims).reshape({C});
      var_t = var(xd, dims, 0);
    }
    if (running_mean.defined() || running_var.defined()) {
      NoGradGuard ng;
      if (running_mean.defined()) {
        Tensor rm = running_mean;
        rm.mul_(1 - momentum).add_(mul(mean_t, momentum).to(rm.dtype()));
      }
      if (running_var.defined()) {
        Tensor rv = running_var;
        Tensor unbiased = mul(var_t, static_cast<double>(count) / static_cast<double>(count - 1));
        rv.mul_(1 - momentum).add_(mul(unbiased, momentum).to(rv.dtype()));
      }
    }
  } else {
    mean_t = running_mean.detach().to(DType::F64).contiguous().clone();
    var_t = running_var.detach().to(DType::F64).contiguous().clone();
  }
  if (!fused) {
    if (training) TS_RETURN(batch_norm_composite(x, weight, bias, true, Tensor(), Tensor(), eps));
    TS_RETURN(batch_norm_composite(x, weight, bias, false, running_mean.detach(), running_var.detach(), eps));
  }
  Tensor rstd_t = rsqrt(add(var_t, eps));
  Tensor wd = weight.defined() ? weight.detach().to(DType::F64).contiguous() : Tensor();
  Tensor scale = wd.defined() ? mul(rstd_t, wd) : rstd_t;
  Tensor shift = neg(mul(mean_t, scale));
  if (bias.defined()) shift = add(shift, bias.detach().to(DType::F64));
  shift = shift.contiguous();
  Tensor y = empty(x.shape(), x.dtype());
  backend::kernels(y).batch_norm_apply(xc, y, scale.contiguous(), shift);
  if (autograd::any_requires_grad({&x, &weight, &bias})) {
    TensorList outs{y};
    Tensor rm = running_mean.defined() ? running_mean.detach().clone() : Tensor();
    Tensor rv = running_var.defined() ? running_var.detach().clone() : Tensor();
    autograd::record("batch_norm", {x, weight, bias}, outs,
                     [C, training, eps, rm, rv](const VjpArgs& a) -> TensorList {
      const Tensor& xs = a.saved[0];
      const Tensor& w = a.saved[1];
      if (GradMode::is_enabled())
        return composite_vjp([training, eps, rm, rv](const TensorList& in) {
          return batch_norm_composite(in[0], in[1], in[2], training, rm, rv, eps);
        }, {xs, w, a.saved[2]}, a.needs(), a.grads[0]);
      if (recorder()) {
        // Being captured: the op, which recomputes the batch statistics from x.
        TensorList r = training ? batch_norm_backward(a.grads[0], xs, Tensor(), Tensor(), w, true, eps)
                                : batch_norm_backward(a.grads[0], xs, rm, rv, w, false, eps);
        return {a.needs_grad(0) ? r[0] : Tensor(), a.needs_grad(1) ? r[1] : Tensor(), a.needs_grad(2) ? r[2] : Tensor()};
      }
      Tensor g = a.grads[0].contiguous();
      Tensor xc = xs.contiguous();
      const Tensor& mean_t = a.saved[3];
      const Tensor& rstd_t = a.saved[4];
      Tensor wd = w.defined() ? w.to(DType::F64).contiguous() : Tensor();
      Tensor gx = a.needs_grad(0) ? empty(xc.shape(), xc.dtype()) : Tensor();
      Tensor gw = a.needs_grad(1) ? empty({C}, DType::F64) : Tensor();
      Tensor gb = a.needs_grad(2) ? empty({C}, DType::F64) : Tensor();
      backend::kernels(xc).batch_norm_bwd(g, xc, mean_t, rstd_t, wd, training, gx, gw, gb);
      return {gx, gw.defined() ? gw.to(xc.dtype()) : gw, gb.defined() ? gb.to(xc.dtype()) : gb};
    }, {0, 1, 2}, {}, {mean_t.contiguous(), rstd_t.contiguous()});
  }
  TS_RETURN(y);
}

// ---- backward kernels as ops -----------------------------------------------------

Tensor softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim, bool log) {
  TS_OP_SCOPE(softmax_backward, &grad, &output);
  TS_OP_ATTRS({"dim", dim}, {"log", log});
  const char* name = "softmax_backward";
  check_defined(grad, name, "grad");
  check_defined(output, name, "output");
  TS_CHECK(is_floating(output.dtype()), name, ": expected a floating-point output, got ", dtype_name(output.dtype()));
  TS_CHECK(IntArrayRef(grad.shape()).equals(output.shape()), name, ": grad of shape ", shape_str(grad.shape()),
           " does not match the output of shape ", shape_str(output.shape()));
  dim = wrap_dim(dim, output.dim(), name);
  Tensor gr = to_rows(grad.detach().to(output.dtype()), dim), yr = to_rows(output.detach(), dim);
  Tensor gx = empty(yr.shape(), yr.dtype());
  softmax_rows_bwd(gr, yr, gx, log);
  TS_RETURN(from_rows(gx, output, dim));
}

TensorList layer_norm_backward(const Tensor& grad, const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight,
                               double eps, bool rms) {
  TS_OP_SCOPE(layer_norm_backward, &grad, &x, &weight);
  TS_OP_ATTRS({"normalized_shape", normalized_shape}, {"eps", eps}, {"rms", rms});
  const char* name = "layer_norm_backward";
  check_defined(grad, name, "grad");
  check_defined(x, name, "input");
  TS_CHECK(is_floating(x.dtype()), name, ": expected a floating-point input, got ", dtype_name(x.dtype()));
  TS_CHECK(IntArrayRef(grad.shape()).equals(x.shape()) && grad.dtype() == x.dtype(), name, ": grad (",
           dtype_name(grad.dtype()), " ", shape_str(grad.shape()), ") must match the input (", dtype_name(x.dtype()),
           " ", shape_str(x.shape()), ")");
  int64_t k = static_cast<int64_t>(normalized_shape.size());
  TS_CHECK(k >= 1 && k <= x.dim() &&
               IntArrayRef(x.shape().data() + (x.dim() - k), static_cast<size_t>(k)).equals(normalized_shape),
           name,
           ": normalized_shape ", shape_str(normalized_shape), " does not match the trailing dimensions of the input ",
           shape_str(x.shape()));
  if (weight.defined())
    TS_CHECK(IntArrayRef(weight.shape()).equals(normalized_shape) && weight.dtype() == x.dtype(), name,
             ": weight must be ", dtype_name(x.dtype()), " ", shape_str(normalized_shape), ", got ",
             dtype_name(weight.dtype()), " ", shape_str(weight.shape()));
  int64_t n = numel_of(normalized_shape);
  Tensor xc = x.detach().contiguous();
  Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  NormForward f = norm_forward(xc, Tensor(), Tensor(), n, eps, rms);
  TensorList r = norm_backward(grad.detach(), xc, w, f.mean, f.rstd, n, rms, true, true, true);
  Shape ns(normalized_shape.begin(), normalized_shape.end());
  TS_RETURN((TensorList{r[0], r[1].view(ns), r[2].view(ns)}));
}

TensorList batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& running_mean,
                               const Tensor& running_var, const Tensor& weight, bool training, double eps) {
  TS_OP_SCOPE(batch_norm_backward, &grad, &x, &running_mean, &running_var, &weight);
  TS_OP_ATTRS({"training", training}, {"eps", eps});
  const char* name = "batch_norm_backward";
  check_defined(grad, name, "grad");
  check_defined(x, name, "input");
  TS_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64, name, ": f32 or f64 only, got ",
           dtype_name(x.dtype()));
  TS_CHECK(x.dim() >= 2 && IntArrayRef(grad.shape()).equals(x.shape()) && grad.dtype() == x.dtype(), name,
           ": grad (", dtype_name(grad.dtype()), " ", shape_str(grad.shape()), ") must match the input (",
           dtype_name(x.dtype()), " ", shape_str(x.shape()), "), which needs at least 2 dimensions");
  const int64_t C = x.shape()[1];
  for (const Tensor* p : {&running_mean, &running_var, &weight})
    if (p->defined())
      TS_CHECK(p->dim() == 1 && p->shape()[0] == C, name, ": running stats and weight must have shape [", C,
               "], got ", shape_str(p->shape()));
  const int64_t count = x.numel() / std::max<int64_t>(C, 1);
  Tensor xc = x.detach().contiguous(), g = grad.detach().contiguous();
  Tensor mean_t, var_t;
  if (training) {
    TS_CHECK(count > 1, name, ": expected more than 1 value per channel when training, got input of shape ",
             shape_str(x.shape()));
    mean_t = empty({C}, DType::F64), var_t = empty({C}, DType::F64);
    backend::kernels(xc).batch_norm_stats(xc, mean_t, var_t);
  } else {
    TS_CHECK(running_mean.defined() && running_var.defined(), name,
             ": running_mean and running_var are required in eval mode (training=false)");
    mean_t = running_mean.detach().to(DType::F64).contiguous().clone();
    var_t = running_var.detach().to(DType::F64).contiguous().clone();
  }
  Tensor rstd_t = rsqrt(add(var_t, eps)).contiguous();
  Tensor wd = weight.defined() ? weight.detach().to(DType::F64).contiguous() : Tensor();
  Tensor gx = empty(xc.shape(), xc.dtype()), gw = empty({C}, DType::F64), gb = empty({C}, DType::F64);
  backend::kernels(xc).batch_norm_bwd(g, xc, mean_t, rstd_t, wd, training, gx, gw, gb);
  TS_RETURN((TensorList{gx, gw.to(xc.dtype()), gb.to(xc.dtype())}));
}

// ---- invokers (graph nodes run ops through these) ----
TS_OP_INVOKER(softmax) { return {softmax(in[0], a.i("dim"))}; }
TS_OP_INVOKER(log_softmax) { return {log_softmax(in[0], a.i("dim"))}; }
TS_OP_INVOKER(layer_norm) { return {layer_norm(in[0], a.ints("normalized_shape"), in[1], in[2], a.f("eps"))}; }
TS_OP_INVOKER(rms_norm) { return {rms_norm(in[0], a.ints("normalized_shape"), in[1], a.opt_f("eps"))}; }
TS_OP_INVOKER(group_norm) { return {group_norm(in[0], a.i("num_groups"), in[1], in[2], a.f("eps"))}; }
TS_OP_INVOKER(softmax_backward) { return {softmax_backward(in[0], in[1], a.i("dim"), a.b("log"))}; }
TS_OP_INVOKER(layer_norm_backward) {
  return layer_norm_backward(in[0], in[1], a.ints("normalized_shape"), in[2], a.f("eps"), a.b("rms"));
}
TS_OP_INVOKER(batch_norm_backward) {
  return batch_norm_backward(in[0], in[1], in[2], in[3], in[4], a.b("training"), a.f("eps"));
}
TS_OP_INVOKER(batch_norm) {
  return {batch_norm(in[0], in[1], in[2], in[3], in[4], a.b("training"), a.f("momentum"), a.f("eps"))};
}

}  // namespace tessera::ops
