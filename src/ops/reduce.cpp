// Reductions over any set of dims. The layout is brought to [rows, len] (or
// [outer, len, inner]) and a row kernel does the work; long rows are split into
// fixed-size chunks so results do not depend on the number of threads.
#include <cmath>
#include <numeric>

#include "ops/autocast_policy.h"
#include "ops/op_utils.h"
#include "tessera/core/parallel.h"

namespace tessera::ops {
namespace {

using RK = backend::ReduceKernel;

// The dtype a row kernel writes for input dtype t.
DType kernel_out_dtype(RK k, DType t) {
  switch (k) {
    case RK::Sum: case RK::Prod:
      if (t == DType::F64) return DType::F64;
      return is_floating(t) ? DType::F32 : DType::I64;
    case RK::Max: case RK::Min: return t;
    default: return DType::Bool;
  }
}

// Runs the row kernel over contiguous [rows, len] data into out (kernel dtype).
void reduce_rows(RK k, const Tensor& x, const Tensor& out, int64_t rows, int64_t len) {
  backend::kernels(out).reduce_rows(k, x, out, rows, len);
}

Shape kept_shape(IntArrayRef shape, uint64_t mask) {
  Shape s = shape.shape();
  for (size_t i = 0; i < s.size(); ++i)
    if (mask >> i & 1) s[i] = 1;
  return s;
}
Shape final_shape(IntArrayRef shape, uint64_t mask, bool keepdim) {
  if (keepdim) return kept_shape(shape, mask);
  Shape s;
  for (size_t i = 0; i < shape.size(); ++i)
    if (!(mask >> i & 1)) s.push_back(shape[i]);
  return s;
}

// Reduces x (any layout) over `mask` with kernel k. Returns kernel-dtype
// values in the keepdim shape.
Tensor reduce_raw(RK k, const Tensor& x, uint64_t mask, const char* name) {
  int64_t nd = x.dim();
  Shape out_shape = kept_shape(x.shape(), mask);
  DType od = kernel_out_dtype(k, x.dtype());
  if (x.numel() == 0) {
    bool empty_reduced = false;
    for (int64_t i = 0; i < nd; ++i)
      if ((mask >> i & 1) && x.shape()[i] == 0) empty_reduced = true;
    if (empty_reduced && (k == RK::Max || k == RK::Min))
      TS_ERROR(name, ": cannot reduce over a zero-size dimension of a tensor of shape ", shape_str(x.shape()),
               " (", k == RK::Max ? "max" : "min", " has no identity); reduce over a non-empty dimension instead");
    double identity = (k == RK::Prod || k == RK::All) ? 1.0 : 0.0;
    return full(out_shape, identity, od);
  }
  Tensor xc = x.contiguous();
  // Is the reduced set one contiguous block of dims (ignoring size-1 dims)?
  int64_t lo = -1, hi = -1;
  bool block = true;
  for (int64_t i = 0; i < nd; ++i) {
    if (!(mask >> i & 1) || xc.shape()[i] == 1) continue;
    if (lo < 0) lo = i;
    else if (hi != i - 1) {
      // A kept dim of size > 1 between two reduced dims breaks the block.
      for (int64_t j = hi + 1; j < i; ++j)
        if (xc.shape()[j] != 1) block = false;
    }
    hi = i;
  }
  Tensor out = empty(out_shape, od);
  if (lo < 0) {  // only size-1 dims reduced: a copy in the kernel dtype
    copy_into(out.view(x.shape()), xc);
    return out;
  }
  if (block) {
    int64_t outer = 1, len = 1, inner = 1;
    for (int64_t i = 0; i < lo; ++i) outer *= xc.shape()[i];
    for (int64_t i = lo; i <= hi; ++i) len *= xc.shape()[i];
    for (int64_t i = hi + 1; i < nd; ++i) inner *= xc.shape()[i];
    if (inner == 1) {
      reduce_rows(k, xc, out, outer, len);
    } else {
      backend::kernels(out).reduce_mid(k, xc, out, outer, len, inner);
    }
    return out;
  }
  // General case: move reduced dims last, copy, reduce rows.
  Shape perm;
  int64_t rows = 1, len = 1;
  for (int64_t i = 0; i < nd; ++i)
    if (!(mask >> i & 1)) {
      perm.push_back(i);
      rows *= xc.shape()[i];
    }
  for (int64_t i = 0; i < nd; ++i)
    if (mask >> i & 1) {
      perm.push_back(i);
      len *= xc.shape()[i];
    }
  Tensor xp = cast(xc, xc.dtype()).permute(perm).contiguous();
  reduce_rows(k, xp, out, rows, len);
  return out;
}

// Gradient of a keepdim-less reduction: put the reduced dims back as size 1.
Tensor unsqueeze_reduced(const Tensor& g, IntArrayRef in_shape, uint64_t mask, bool keepdim) {
  if (keepdim) return g;
  return g.reshape(kept_shape(in_shape, mask));
}

}  // namespace

Tensor sum(const Tensor& x_in, IntArrayRef dims, bool keepdim, std::optional<DType> dtype) {
  TS_OP_SCOPE(sum, &x_in);
  TS_OP_ATTRS({"dim", dims}, {"keepdim", keepdim}, {"dtype", dtype});
  TS_AUTOCAST(sum, [&](const auto& cast) { return sum(cast(x_in), dims, keepdim, dtype); });
  check_defined(x_in, "sum", "input");
  Tensor x = dtype ? cast(x_in, *dtype) : x_in;
  uint64_t mask = dim_mask(dims, x.dim(), "sum");
  DType out_dtype = dtype ? *dtype : (is_floating(x.dtype()) ? x.dtype() : DType::I64);
  Tensor y = cast(reduce_raw(RK::Sum, x, mask, "sum"), out_dtype).reshape(final_shape(x.shape(), mask, keepdim));
  if (is_floating(out_dtype) && autograd::any_requires_grad({&x_in})) {
    TensorList outs{y};
    Shape in_shape = x_in.shape();
    autograd::record("sum", {x_in}, outs, [in_shape, mask, keepdim](const VjpArgs& a) -> TensorList {
      return {expand(unsqueeze_reduced(a.grads[0], in_shape, mask, keepdim), in_shape)};
    });
  }
  TS_RETURN(y);
}

Tensor mean(const Tensor& x, IntArrayRef dims, bool keepdim) {
  TS_OP_SCOPE(mean, &x);
  TS_OP_ATTRS({"dim", dims}, {"keepdim", keepdim});
  TS_AUTOCAST(mean, [&](const auto& cast) { return mean(cast(x), dims, keepdim); });
  check_defined(x, "mean", "input");
  TS_CHECK(is_floating(x.dtype()), "mean: expected a floating-point input, got ", dtype_name(x.dtype()),
           "; convert it with to() first");
  uint64_t mask = dim_mask(dims, x.dim(), "mean");
  int64_t count = 1;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (mask >> i & 1) count *= x.shape()[i];
  TS_RETURN(div(sum(x, dims, keepdim), static_cast<double>(count)));
}

Tensor prod(const Tensor& x, IntArrayRef dims, bool keepdim) {
  TS_OP_SCOPE(prod, &x);
  TS_OP_ATTRS({"dim", dims}, {"keepdim", keepdim});
  TS_AUTOCAST(prod, [&](const auto& cast) { return prod(cast(x), dims, keepdim); });
  check_defined(x, "prod", "input");
  uint64_t mask = dim_mask(dims, x.dim(), "prod");
  DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::I64;
  Tensor y = cast(reduce_raw(RK::Prod, x, mask, "prod"), out_dtype).reshape(final_shape(x.shape(), mask, keepdim));
  if (is_floating(out_dtype) && autograd::any_requires_grad({&x})) {
    TensorList outs{y};
    Shape in_shape = x.shape();
    autograd::record("prod", {x}, outs, [in_shape, mask, keepdim](const VjpArgs& a) -> TensorList {
      // grad_i = g * (product of all other elements): exclusive cumprods from
      // both ends over the flattened reduced dims, exact when x has zeros.
      const Tensor& x = a.saved[0];
      if (x.numel() == 0) return {zeros_like(x)};
      int64_t nd = x.dim();
      Shape perm, inv(nd);
      int64_t rows = 1, len = 1;
      for (int64_t i = 0; i < nd; ++i) if (!(mask >> i & 1)) { perm.push_back(i); rows *= x.shape()[i]; }
      for (int64_t i = 0; i < nd; ++i) if (mask >> i & 1) { perm.push_back(i); len *= x.shape()[i]; }
      for (int64_t i = 0; i < nd; ++i) inv[perm[i]] = i;
      Tensor xf = x.dim() == 0 ? x.reshape({1, 1}) : x.permute(perm).reshape({rows, len});
      Tensor one = ones({rows, 1}, x.dtype());
      Tensor left = cumprod(cat({one, xf.slice(1, 0, len - 1)}, 1), 1);
      Tensor right = flip(cumprod(cat({one, flip(xf, {1}).slice(1, 0, len - 1)}, 1), 1), {1});
      Tensor g = unsqueeze_reduced(a.grads[0], in_shape, mask, keepdim).reshape({rows, 1});
      Tensor gx = mul(mul(left, right), g);
      if (x.dim() == 0) return {gx.reshape({})};
      Shape permuted;
      for (int64_t p : perm) permuted.push_back(x.shape()[p]);
      return {gx.reshape(permuted).permute(inv)};
    }, {0});
  }
  TS_RETURN(y);
}

namespace {
Tensor extreme_all(RK k, const Tensor& x, IntArrayRef dims, bool keepdim, const char* name) {
  check_defined(x, name, "input");
  uint64_t mask = dim_mask(dims, x.dim(), name);
  Tensor y = reduce_raw(k, x, mask, name).reshape(final_shape(x.shape(), mask, keepdim));
  if (is_floating(x.dtype()) && autograd::any_requires_grad({&x})) {
    TensorList outs{y};
    Shape in_shape = x.shape();
    autograd::record(name, {x}, outs, [in_shape, mask, keepdim](const VjpArgs& a) -> TensorList {
      // Ties share the gradient evenly, as in PyTorch's amax/amin.
      Tensor yk = unsqueeze_reduced(a.saved[1], in_shape, mask, keepdim);
      Tensor hit = eq(a.saved[0], yk).to(a.saved[0].dtype());
      Shape dims;
      for (size_t i = 0; i < in_shape.size(); ++i) if (mask >> i & 1) dims.push_back(static_cast<int64_t>(i));
      Tensor count = sum(hit, dims, true);
      Tensor g = unsqueeze_reduced(a.grads[0], in_shape, mask, keepdim);
      return {div(mul(hit, g), count)};
    }, {0}, {0});
  }
  return y;
}
}  // namespace

Tensor amax(const Tensor& x, IntArrayRef dims, bool keepdim) {
  TS_OP_SCOPE(amax, &x);
  TS_OP_ATTRS({"dim", dims}, {"keepdim", keepdim});
  TS_RETURN(extreme_all(RK::Max, x, dims, keepdim, "amax"));
}
Tensor amin(const Tensor& x, IntArrayRef dims, bool keepdim) {
  TS_OP_SCOPE(amin, &x);
  TS_OP_ATTRS({"dim", dims}, {"keepdim", keepdim});
  TS_RETURN(extreme_all(RK::Min, x, dims, keepdim, "amin"));
}
Tensor max(const Tensor& x) {
  TS_OP_SCOPE(max, &x);
  TS_CHECK(x.numel() > 0, "max: the input is empty (shape ", shape_str(x.shape()), "); max of nothing is undefined");
  TS_RETURN(amax(x));
}
Tensor min(const Tensor& x) {
  TS_OP_SCOPE(min, &x);
  TS_CHECK(x.numel() > 0, "min: the input is empty (shape ", shape_str(x.shape()), "); min of nothing is undefined");
  TS_RETURN(amin(x));
}

namespace {
std::tuple<Tensor, Tensor> extreme_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max, const char* name) {
  check_defined(x, name, "input");
  int64_t nd = x.dim();
  dim = wrap_dim(dim, nd, name);
  int64_t len = nd == 0 ? 1 : x.shape()[dim];
  TS_CHECK(len > 0, name, ": cannot take the ", name, " over dimension ", dim, " of size 0 (input shape ",
           shape_str(x.shape()), ")");
  Tensor xt = nd == 0 ? x.reshape({1, 1}) : x.transpose(dim, -1).contiguous();
  int64_t rows = xt.numel() / len;
  Tensor values = empty({rows}, x.dtype());
  Tensor indices = empty({rows}, DType::I64);
  backend::kernels(values).arg_reduce_rows(xt, values, indices, is_max, rows, len);
  Shape kshape = nd == 0 ? Shape{} : x.shape();
  if (nd > 0) kshape[dim] = 1;
  Shape tshape = kshape;  // values came out in the transposed order: rebuild
  if (nd > 0) {
    Shape tr = x.transpose(dim, -1).shape();
    tr.back() = 1;
    values = values.reshape(tr).transpose(dim, -1);
    indices = indices.reshape(tr).transpose(dim, -1);
    if (!keepdim) {
      values = values.squeeze(dim);
      indices = indices.squeeze(dim);
    }
    values = values.contiguous();
    indices = indices.contiguous();
  } else {
    values = values.reshape({});
    indices = indices.reshape({});
  }
  if (is_floating(x.dtype()) && autograd::any_requires_grad({&x})) {
    TensorList outs{values};
    Shape in_shape = x.shape();
    autograd::record(name, {x}, outs, [in_shape, dim, keepdim, nd](const VjpArgs& a) -> TensorList {
      const Tensor& idx = a.saved[0];
      Tensor g = a.grads[0];
      if (nd == 0) return {g};
      Tensor gi = keepdim ? g : g.unsqueeze(dim);
      Tensor ii = keepdim ? idx : idx.unsqueeze(dim);
      return {scatter(zeros(in_shape, g.dtype()), dim, ii, gi)};
    }, {}, {}, {indices});
  }
  return {values, indices};
}
}  // namespace

std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  TS_OP_SCOPE(max, &x);
  TS_OP_ATTRS({"dim", dim}, {"keepdim", keepdim});
  TS_RETURN(extreme_dim(x, dim, keepdim, true, "max"));
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  TS_OP_SCOPE(min, &x);
  TS_OP_ATTRS({"dim", dim}, {"keepdim", keepdim});
  TS_RETURN(extreme_dim(x, dim, keepdim, false, "min"));
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  TS_OP_SCOPE(argmax, &x);
  TS_OP_ATTRS({"dim", dim}, {"keepdim", keepdim});
  if (!dim) {
    TS_CHECK(x.numel() > 0, "argmax: the input is empty; argmax of nothing is undefined");
    Tensor r = std::get<1>(extreme_dim(x.detach().reshape({-1}), 0, false, true, "argmax"));
    TS_RETURN(keepdim ? r.reshape(Shape(x.dim(), 1)) : r);
  }
  TS_RETURN(std::get<1>(extreme_dim(x.detach(), *dim, keepdim, true, "argmax")));
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  TS_OP_SCOPE(argmin, &x);
  TS_OP_ATTRS({"dim", dim}, {"keepdim", keepdim});
  if (!dim) {
    TS_CHECK(x.numel() > 0, "argmin: the input is empty; argmin of nothing is undefined");
    Tensor r = std::get<1>(extreme_dim(x.detach().reshape({-1}), 0, false, false, "argmin"));
    TS_RETURN(keepdim ? r.reshape(Shape(x.dim(), 1)) : r);
  }
  TS_RETURN(std::get<1>(extreme_dim(x.detach(), *dim, keepdim, false, "argmin")));
}

Tensor var(const Tensor& x, IntArrayRef dims, double correction, bool keepdim) {
  TS_OP_SCOPE(var, &x);
  TS_OP_ATTRS({"dim", dims}, {"keepdim", keepdim}, {"correction", correction});
  TS_AUTOCAST(var, [&](const auto& cast) { return var(cast(x), dims, correction, keepdim); });
  check_defined(x, "var", "input");
  TS_CHECK(is_floating(x.dtype()), "var: expected a floating-point input, got ", dtype_name(x.dtype()));
  uint64_t mask = dim_mask(dims, x.dim(), "var");
  int64_t n = 1;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (mask >> i & 1) n *= x.shape()[i];
  Tensor d = sub(x, mean(x, dims, true));
  // n - correction <= 0 gives inf/nan, as in PyTorch.
  TS_RETURN(div(sum(square(d), dims, keepdim), std::max(0.0, static_cast<double>(n) - correction)));
}

Tensor std(const Tensor& x, IntArrayRef dims, double correction, bool keepdim) {
  TS_OP_SCOPE(std, &x);
  TS_OP_ATTRS({"dim", dims}, {"keepdim", keepdim}, {"correction", correction});
  TS_AUTOCAST(std, [&](const auto& cast) { return std(cast(x), dims, correction, keepdim); });
  TS_RETURN(sqrt(var(x, dims, correction, keepdim)));
}

Tensor logsumexp(const Tensor& x, IntArrayRef dims, bool keepdim) {
  TS_OP_SCOPE(logsumexp, &x);
  TS_OP_ATTRS({"dim", dims}, {"keepdim", keepdim});
  TS_AUTOCAST(logsumexp, [&](const auto& cast) { return logsumexp(cast(x), dims, keepdim); });
  check_defined(x, "logsumexp", "input");
  Tensor xf = is_floating(x.dtype()) ? x : x.to(default_float_dtype());
  if (xf.numel() == 0) TS_RETURN(log(sum(exp(xf), dims, keepdim)));
  Tensor m = amax(xf, dims, true).detach();
  m = where(isinf(m), 0, m);  // all -inf rows: keep -inf, not nan
  Tensor r = add(log(sum(exp(sub(xf, m)), dims, true)), m);
  if (!keepdim) {
    uint64_t mask = dim_mask(dims, x.dim(), "logsumexp");
    r = r.reshape(final_shape(x.shape(), mask, false));
  }
  TS_RETURN(r);
}

Tensor norm(const Tensor& x, double p, IntArrayRef dims, bool keepdim) {
  TS_OP_SCOPE(norm, &x);
  TS_OP_ATTRS({"p", p}, {"dim", dims}, {"keepdim", keepdim});
  TS_AUTOCAST(norm, [&](const auto& cast) { return norm(cast(x), p, dims, keepdim); });
  check_defined(x, "norm", "input");
  check_floating(x, "norm", "input");
  if (p == 1) TS_RETURN(sum(abs(x), dims, keepdim));
  if (std::isinf(p) && p > 0) TS_RETURN(amax(abs(x), dims, keepdim));
  TS_CHECK(p == 2, "norm: p must be 1, 2 or inf, got ", p);
  Tensor y = sqrt(sum(square(x.detach()), dims, keepdim));
  if (autograd::any_requires_grad({&x})) {
    TensorList outs{y};
    Shape in_shape = x.shape();
    uint64_t mask = dim_mask(dims, x.dim(), "norm");
    autograd::record("norm", {x}, outs, [in_shape, mask, keepdim](const VjpArgs& a) -> TensorList {
      // g * x / ||x||, and 0 where the norm is 0 (PyTorch's subgradient).
      Tensor n = unsqueeze_reduced(a.saved[1], in_shape, mask, keepdim);
      Tensor g = unsqueeze_reduced(a.grads[0], in_shape, mask, keepdim);
      return {where(eq(n, 0), 0, div(mul(a.saved[0], g), n))};
    }, {0}, {0});
  }
  TS_RETURN(y);
}

Tensor all(const Tensor& x, IntArrayRef dims, bool keepdim) {
  TS_OP_SCOPE(all, &x);
  TS_OP_ATTRS({"dim", dims}, {"keepdim", keepdim});
  check_defined(x, "all", "input");
  uint64_t mask = dim_mask(dims, x.dim(), "all");
  TS_RETURN(reduce_raw(RK::All, x, mask, "all").reshape(final_shape(x.shape(), mask, keepdim)));
}
Tensor any(const Tensor& x, IntArrayRef dims, bool keepdim) {
  TS_OP_SCOPE(any, &x);
  TS_OP_ATTRS({"dim", dims}, {"keepdim", keepdim});
  check_defined(x, "any", "input");
  uint64_t mask = dim_mask(dims, x.dim(), "any");
  TS_RETURN(reduce_raw(RK::Any, x, mask, "any").reshape(final_shape(x.shape(), mask, keepdim)));
}

namespace {
Tensor scan(const Tensor& x, int64_t dim, bool is_prod) {
  const char* name = is_prod ? "cumprod" : "cumsum";
  check_defined(x, name, "input");
  int64_t nd = x.dim();
  dim = wrap_dim(dim, nd, name);
  DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::I64;
  Tensor xt = nd == 0 ? x.reshape({1}) : x.transpose(dim, -1).contiguous();
  Tensor out = empty(xt.shape(), out_dtype);
  backend::kernels(out).cumulative(xt, out, is_prod);
  Tensor y = nd == 0 ? out.reshape({}) : out.transpose(dim, -1).contiguous();
  if (is_floating(out_dtype) && autograd::any_requires_grad({&x})) {
    TensorList outs{y};
    autograd::record(name, {x}, outs, [dim, is_prod, nd](const VjpArgs& a) -> TensorList {
      const Tensor& g = a.grads[0];
      if (nd == 0) return {is_prod ? mul(g, 1.0) : g};
      if (!is_prod) return {flip(cumsum(flip(g, {dim}), dim), {dim})};
      // See the CPU backend's cumprod_backward (backend/cpu/scan.cpp): exact with zeros; not differentiable again.
      TS_CHECK(!GradMode::is_enabled(), "cumprod: double backward (create_graph=true through cumprod) is not "
               "supported: its backward is an exact kernel, not differentiable ops");
      Tensor xt = a.saved[0].transpose(dim, -1).contiguous();
      Tensor yt = a.saved[1].transpose(dim, -1).contiguous();
      Tensor gt = g.transpose(dim, -1).contiguous();
      Tensor gx = empty(xt.shape(), xt.dtype());
      backend::kernels(gx).cumprod_backward(xt, yt, gt, gx);
      return {gx.transpose(dim, -1).contiguous()};
    }, {0}, {0});
  }
  return y;
}
}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  TS_OP_SCOPE(cumsum, &x);
  TS_OP_ATTRS({"dim", dim});
  TS_AUTOCAST(cumsum, [&](const auto& cast) { return cumsum(cast(x), dim); });
  TS_RETURN(scan(x, dim, false));
}
Tensor cumprod(const Tensor& x, int64_t dim) {
  TS_OP_SCOPE(cumprod, &x);
  TS_OP_ATTRS({"dim", dim});
  TS_AUTOCAST(cumprod, [&](const auto& cast) { return cumprod(cast(x), dim); });
  TS_RETURN(scan(x, dim, true));
}

Tensor sum_to(const Tensor& x, IntArrayRef shape) {
  TS_OP_SCOPE(sum_to, &x);
  TS_OP_ATTRS({"shape", shape});
  if (IntArrayRef(x.shape()).equals(shape)) TS_RETURN(x);
  int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  TS_CHECK(lead >= 0, "sum_to: cannot sum a tensor of shape ", shape_str(x.shape()), " to the larger shape ",
           shape_str(shape));
  Shape dims;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < lead) dims.push_back(i);
    else if (shape[i - lead] == 1 && x.shape()[i] != 1) dims.push_back(i);
  }
  Tensor r = dims.empty() ? x : sum(x, dims, true);
  TS_RETURN(r.reshape(shape));
}

// ---- invokers (graph nodes run ops through these) ----
TS_OP_INVOKER(sum) { return {sum(in[0], a.ints("dim"), a.b("keepdim"), a.opt_dtype("dtype"))}; }
TS_OP_INVOKER(mean) { return {mean(in[0], a.ints("dim"), a.b("keepdim"))}; }
TS_OP_INVOKER(prod) { return {prod(in[0], a.ints("dim"), a.b("keepdim"))}; }
TS_OP_INVOKER(amax) { return {amax(in[0], a.ints("dim"), a.b("keepdim"))}; }
TS_OP_INVOKER(amin) { return {amin(in[0], a.ints("dim"), a.b("keepdim"))}; }
// max and min: over all elements (one output), or along "dim" (values, indices).
TS_OP_INVOKER(max) {
  if (!a.has("dim")) return {max(in[0])};
  auto [v, i] = max(in[0], a.i("dim"), a.b("keepdim"));
  return {v, i};
}
TS_OP_INVOKER(min) {
  if (!a.has("dim")) return {min(in[0])};
  auto [v, i] = min(in[0], a.i("dim"), a.b("keepdim"));
  return {v, i};
}
TS_OP_INVOKER(argmax) { return {argmax(in[0], a.opt_i("dim"), a.b("keepdim"))}; }
TS_OP_INVOKER(argmin) { return {argmin(in[0], a.opt_i("dim"), a.b("keepdim"))}; }
TS_OP_INVOKER(var) { return {var(in[0], a.ints("dim"), a.f("correction"), a.b("keepdim"))}; }
TS_OP_INVOKER(std) { return {std(in[0], a.ints("dim"), a.f("correction"), a.b("keepdim"))}; }
TS_OP_INVOKER(logsumexp) { return {logsumexp(in[0], a.ints("dim"), a.b("keepdim"))}; }
TS_OP_INVOKER(norm) { return {norm(in[0], a.f("p"), a.ints("dim"), a.b("keepdim"))}; }
TS_OP_INVOKER(all) { return {all(in[0], a.ints("dim"), a.b("keepdim"))}; }
TS_OP_INVOKER(any) { return {any(in[0], a.ints("dim"), a.b("keepdim"))}; }
TS_OP_INVOKER(cumsum) { return {cumsum(in[0], a.i("dim"))}; }
TS_OP_INVOKER(cumprod) { return {cumprod(in[0], a.i("dim"))}; }
TS_OP_INVOKER(sum_to) { return {sum_to(in[0], a.ints("shape"))}; }

}  // namespace tessera::ops
