// Indexing ops: gather/scatter, index_select/index_add, masks, sorting.
// Indices are validated before use; an index out of range is an error naming
// the op, the index and the valid range.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/op_utils.h"
#include "tessera/core/parallel.h"

namespace tessera::ops {
namespace {

Tensor as_index(const Tensor& index, const char* op) {
  check_defined(index, op, "index");
  TS_CHECK(index.dtype() == DType::I64 || index.dtype() == DType::I32, op,
           ": index must be an integer tensor (i64 or i32), got ", dtype_name(index.dtype()));
  return cast(index, DType::I64).contiguous();
}

// Index values are data: the backend checks them (on meta, nothing to check).
void check_range(const Tensor& idx, int64_t n, int64_t dim, const char* op) {
  backend::kernels(idx).index_check(idx, n, dim, op);
}

void check_gather_shapes(const Tensor& x, int64_t dim, const Tensor& index, const Tensor* src, const char* op) {
  TS_CHECK(index.dim() == x.dim() || (x.dim() == 0 && index.dim() <= 1), op, ": index has ", index.dim(),
           " dimensions but the input has ", x.dim(), " (they must match)");
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (d != dim)
      TS_CHECK(index.shape()[d] <= x.shape()[d], op, ": index size ", index.shape()[d], " exceeds the input size ",
               x.shape()[d], " at dimension ", d, " (index ", shape_str(index.shape()), ", input ",
               shape_str(x.shape()), ")");
    if (src)
      TS_CHECK(index.shape()[d] <= src->shape()[d], op, ": index size ", index.shape()[d],
               " exceeds the src size ", src->shape()[d], " at dimension ", d);
  }
}

// Core of scatter / scatter_add: out (contiguous, a copy of x) gets src values.
void scatter_into(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src, bool accumulate) {
  backend::kernels(out).scatter(out, dim, idx, src.contiguous(), accumulate);
}

// Gradient for scatter's src: the gathered output gradient, zero-padded where
// src is larger than index (those src elements were never used).
Tensor src_grad(const Tensor& g, int64_t dim, const Tensor& idx, const Shape& src_shape) {
  Tensor gs = gather(g, dim, idx);
  if (IntArrayRef(gs.shape()).equals(src_shape)) return gs;
  std::vector<int64_t> p;
  for (int64_t d = gs.dim() - 1; d >= 0; --d) {
    p.push_back(0);
    p.push_back(src_shape[d] - gs.shape()[d]);
  }
  return pad(gs, p);
}

}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index_in) {
  TS_OP_SCOPE(gather, &x, &index_in);
  TS_OP_ATTRS({"dim", dim});
  check_defined(x, "gather", "input");
  Tensor idx = as_index(index_in, "gather");
  dim = wrap_dim(dim, x.dim(), "gather");
  check_gather_shapes(x, dim, idx, nullptr, "gather");
  int64_t n = x.dim() == 0 ? 1 : x.shape()[dim];
  check_range(idx, n, dim, "gather");
  Tensor xc = x.contiguous();
  Tensor out = empty(idx.shape(), x.dtype());
  backend::kernels(out).gather(out, xc, dim, idx);
  if (autograd::any_requires_grad({&x})) {
    TensorList outs{out};
    Shape xs = x.shape();
    autograd::record("gather", {x}, outs, [xs, dim](const VjpArgs& a) -> TensorList {
      return {scatter_add(zeros(xs, a.grads[0].dtype()), dim, a.saved[0], a.grads[0])};
    }, {}, {}, {idx});
  }
  TS_RETURN(out);
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index_in, const Tensor& src) {
  TS_OP_SCOPE(scatter, &x, &index_in, &src);
  TS_OP_ATTRS({"dim", dim});
  check_defined(x, "scatter", "input");
  check_defined(src, "scatter", "src");
  Tensor idx = as_index(index_in, "scatter");
  dim = wrap_dim(dim, x.dim(), "scatter");
  check_gather_shapes(x, dim, idx, &src, "scatter");
  check_range(idx, x.dim() == 0 ? 1 : x.shape()[dim], dim, "scatter");
  Tensor out = x.detach().clone();
  scatter_into(out, dim, idx, cast(src, x.dtype()), false);
  if (autograd::any_requires_grad({&x, &src})) {
    TensorList outs{out};
    Shape ss = src.shape();
    autograd::record("scatter", {x, src}, outs, [dim, ss](const VjpArgs& a) -> TensorList {
      const Tensor& g = a.grads[0];
      const Tensor& idx = a.saved[0];
      Tensor gx = a.needs_grad(0) ? scatter(g, dim, idx, 0) : Tensor();
      Tensor gs = a.needs_grad(1) ? src_grad(g, dim, idx, ss) : Tensor();
      return {gx, gs};
    }, {}, {}, {idx});
  }
  TS_RETURN(out);
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value) {
  TS_OP_SCOPE(scatter, &x, &index);
  TS_OP_ATTRS({"dim", dim}, {"value", value});
  Tensor idx = as_index(index, "scatter");
  Tensor src = full(idx.shape(), value, x.dtype());
  if (!autograd::any_requires_grad({&x})) TS_RETURN(scatter(x, dim, idx, src));
  Tensor out = scatter(x.detach(), dim, idx, src);
  TensorList outs{out};
  autograd::record("scatter", {x}, outs, [dim](const VjpArgs& a) -> TensorList {
    return {scatter(a.grads[0], dim, a.saved[0], 0)};
  }, {}, {}, {idx});
  TS_RETURN(out);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index_in, const Tensor& src) {
  TS_OP_SCOPE(scatter_add, &x, &index_in, &src);
  TS_OP_ATTRS({"dim", dim});
  check_defined(x, "scatter_add", "input");
  check_defined(src, "scatter_add", "src");
  Tensor idx = as_index(index_in, "scatter_add");
  dim = wrap_dim(dim, x.dim(), "scatter_add");
  check_gather_shapes(x, dim, idx, &src, "scatter_add");
  check_range(idx, x.dim() == 0 ? 1 : x.shape()[dim], dim, "scatter_add");
  Tensor out = x.detach().clone();
  scatter_into(out, dim, idx, cast(src, x.dtype()), true);
  if (autograd::any_requires_grad({&x, &src})) {
    TensorList outs{out};
    Shape ss = src.shape();
    autograd::record("scatter_add", {x, src}, outs, [dim, ss](const VjpArgs& a) -> TensorList {
      const Tensor& g = a.grads[0];
      Tensor gs = a.needs_grad(1) ? src_grad(g, dim, a.saved[0], ss) : Tensor();
      return {a.needs_grad(0) ? g : Tensor(), gs};
    }, {}, {}, {idx});
  }
  TS_RETURN(out);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index_in) {
  TS_OP_SCOPE(index_select, &x, &index_in);
  TS_OP_ATTRS({"dim", dim});
  check_defined(x, "index_select", "input");
  Tensor idx = as_index(index_in, "index_select");
  TS_CHECK(idx.dim() <= 1, "index_select: index must be 0-D or 1-D, got shape ", shape_str(idx.shape()));
  dim = wrap_dim(dim, x.dim(), "index_select");
  int64_t n = x.dim() == 0 ? 1 : x.shape()[dim];
  check_range(idx, n, dim, "index_select");
  if (x.dim() == 0) TS_RETURN(x.clone());
  Tensor xc = x.contiguous();
  Shape os = x.shape();
  os[dim] = idx.numel();
  Tensor out = empty(os, x.dtype());
  backend::kernels(out).index_select(out, xc, dim, idx);
  if (autograd::any_requires_grad({&x})) {
    TensorList outs{out};
    Shape xs = x.shape();
    autograd::record("index_select", {x}, outs, [xs, dim](const VjpArgs& a) -> TensorList {
      return {index_add(zeros(xs, a.grads[0].dtype()), dim, a.saved[0], a.grads[0])};
    }, {}, {}, {idx});
  }
  TS_RETURN(out);
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index_in, const Tensor& src_in, const Scalar& alpha) {
  TS_OP_SCOPE(index_add, &x, &index_in, &src_in);
  TS_OP_ATTRS({"dim", dim}, {"alpha", alpha});
  check_defined(x, "index_add", "input");
  check_defined(src_in, "index_add", "source");
  Tensor idx = as_index(index_in, "index_add");
  TS_CHECK(idx.dim() <= 1, "index_add: index must be 0-D or 1-D, got shape ", shape_str(idx.shape()));
  dim = wrap_dim(dim, x.dim(), "index_add");
  int64_t n = x.dim() == 0 ? 1 : x.shape()[dim];
  check_range(idx, n, dim, "index_add");
  Shape expect = x.shape();
  if (x.dim() > 0) expect[dim] = idx.numel();
  TS_CHECK(IntArrayRef(src_in.shape()).equals(expect) || (x.dim() == 0 && src_in.numel() == idx.numel()),
           "index_add: source has shape ", shape_str(src_in.shape()), " but expected ", shape_str(expect),
           " (the input's shape with dimension ", dim, " set to the number of indices)");
  Tensor src = cast(alpha.to_double() == 1.0 ? src_in.detach() : mul(src_in.detach(), alpha), x.dtype()).contiguous();
  Tensor out = x.detach().clone();
  backend::kernels(out).index_add(out, dim, idx, src);
  if (autograd::any_requires_grad({&x, &src_in})) {
    TensorList outs{out};
    double al = alpha.to_double();
    autograd::record("index_add", {x, src_in}, outs, [dim, al](const VjpArgs& a) -> TensorList {
      const Tensor& g = a.grads[0];
      Tensor gs;
      if (a.needs_grad(1)) {
        gs = index_select(g, dim, a.saved[0]);
        if (al != 1.0) gs = mul(gs, al);
      }
      return {a.needs_grad(0) ? g : Tensor(), gs};
    }, {}, {}, {idx});
  }
  TS_RETURN(out);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  TS_OP_SCOPE(masked_fill, &x, &mask);
  TS_OP_ATTRS({"value", value});
  check_defined(mask, "masked_fill", "mask");
  TS_CHECK(mask.dtype() == DType::Bool, "masked_fill: mask must be a bool tensor, got ", dtype_name(mask.dtype()));
  Shape b = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  TS_CHECK(IntArrayRef(b).equals(x.shape()), "masked_fill: mask of shape ", shape_str(mask.shape()),
           " does not broadcast to the input's shape ", shape_str(x.shape()));
  TS_CHECK(!(value.is_floating() && !is_floating(x.dtype())), "masked_fill: cannot fill a ", dtype_name(x.dtype()),
           " tensor with the float value ", value);
  TS_RETURN(where(mask, scalar_tensor(value, x.dtype()), x));
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value) {
  TS_OP_SCOPE(masked_fill, &x, &mask, &value);
  TS_CHECK(value.dim() == 0, "masked_fill: value must be a 0-D tensor, got shape ", shape_str(value.shape()));
  TS_CHECK(mask.dtype() == DType::Bool, "masked_fill: mask must be a bool tensor, got ", dtype_name(mask.dtype()));
  TS_RETURN(where(mask, value.to(x.dtype()), x));
}

Tensor nonzero(const Tensor& x) {
  TS_OP_SCOPE(nonzero, &x);
  check_defined(x, "nonzero", "input");
  Tensor nz = ne(x, 0).contiguous();
  TS_CHECK(has_values(nz), "nonzero: the output's size depends on the input's values, and a tensor on ", nz.device(),
           " has none");
  TS_RETURN(backend::kernels(nz).nonzero(nz));
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  TS_OP_SCOPE(masked_select, &x, &mask);
  check_defined(mask, "masked_select", "mask");
  TS_CHECK(mask.dtype() == DType::Bool, "masked_select: mask must be a bool tensor, got ", dtype_name(mask.dtype()));
  Shape b = broadcast_shapes(x.shape(), mask.shape(), "masked_select");
  Tensor flat_mask = mask.expand(b).reshape({-1});
  Tensor idx = nonzero(flat_mask).reshape({-1});
  TS_RETURN(index_select(x.expand(b).reshape({-1}), 0, idx));
}

Tensor one_hot(const Tensor& x, int64_t num_classes) {
  TS_OP_SCOPE(one_hot, &x);
  TS_OP_ATTRS({"num_classes", num_classes});
  check_defined(x, "one_hot", "input");
  TS_CHECK(x.dtype() == DType::I64 || x.dtype() == DType::I32, "one_hot: expected an integer class tensor, got ",
           dtype_name(x.dtype()));
  Tensor xi = cast(x, DType::I64).contiguous();
  if (num_classes == -1) {
    TS_CHECK(xi.numel() > 0, "one_hot: cannot infer num_classes from an empty tensor; pass it explicitly");
    num_classes = amax(xi).item<int64_t>() + 1;
  }
  if (xi.numel() > 0 && has_values(xi)) {
    TS_CHECK(amin(xi).item<int64_t>() >= 0, "one_hot: class values must be non-negative");
    int64_t mx = amax(xi).item<int64_t>();
    TS_CHECK(mx < num_classes, "one_hot: class value ", mx, " is out of range for num_classes ", num_classes);
  }
  Shape s = xi.shape();
  s.push_back(num_classes);
  Tensor out = zeros(s, DType::I64);
  TS_RETURN(scatter(out, -1, xi.unsqueeze(-1), 1));
}

namespace {
// Sorting along `dim`: rows are the other dims; NaN sorts as the largest value.
std::tuple<Tensor, Tensor> sort_impl(const Tensor& x, int64_t dim, bool descending, bool stable, int64_t k,
                                     bool sorted, const char* name) {
  check_defined(x, name, "input");
  int64_t nd = x.dim();
  dim = wrap_dim(dim, nd, name);
  int64_t len = nd == 0 ? 1 : x.shape()[dim];
  if (k < 0) k = len;
  TS_CHECK(k <= len, name, ": k (", k, ") is larger than the size ", len, " of dimension ", dim);
  Tensor xt = nd == 0 ? x.reshape({1}) : x.transpose(dim, -1).contiguous();
  int64_t rows = len == 0 ? 0 : xt.numel() / len;
  Shape os = xt.shape();
  if (!os.empty()) os.back() = k;
  Tensor values = empty(os, x.dtype());
  Tensor indices = empty(os, DType::I64);
  backend::kernels(values).sort_rows(xt, values, indices, rows, len, k, descending, stable, sorted);
  if (nd == 0) {
    values = values.reshape({});
    indices = indices.reshape({});
  } else {
    values = values.transpose(dim, -1).contiguous();
    indices = indices.transpose(dim, -1).contiguous();
  }
  if (is_floating(x.dtype()) && autograd::any_requires_grad({&x})) {
    TensorList outs{values};
    Shape xs = x.shape();
    autograd::record(name, {x}, outs, [xs, dim, nd](const VjpArgs& a) -> TensorList {
      if (nd == 0) return {a.grads[0]};
      return {scatter(zeros(xs, a.grads[0].dtype()), dim, a.saved[0], a.grads[0])};
    }, {}, {}, {indices});
  }
  return {values, indices};
}
}  // namespace

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  TS_OP_SCOPE(topk, &x);
  TS_OP_ATTRS({"k", k}, {"dim", dim}, {"largest", largest}, {"sorted", sorted});
  TS_CHECK(k >= 0, "topk: k must be non-negative, got ", k);
  TS_RETURN(sort_impl(x, dim, largest, false, k, sorted, "topk"));
}
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  TS_OP_SCOPE(sort, &x);
  TS_OP_ATTRS({"dim", dim}, {"descending", descending}, {"stable", stable});
  TS_RETURN(sort_impl(x, dim, descending, stable, -1, true, "sort"));
}
Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  TS_OP_SCOPE(argsort, &x);
  TS_OP_ATTRS({"dim", dim}, {"descending", descending}, {"stable", stable});
  TS_RETURN(std::get<1>(sort_impl(x.detach(), dim, descending, stable, -1, true, "argsort")));
}

std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& x, bool sorted, bool return_inverse, bool return_counts) {
  TS_OP_SCOPE(unique, &x);
  TS_OP_ATTRS({"sorted", sorted}, {"return_inverse", return_inverse}, {"return_counts", return_counts});
  check_defined(x, "unique", "input");
  (void)sorted;  // always sorted, as PyTorch's CPU implementation
  Tensor flat = x.detach().reshape({-1});
  auto [sv, si] = sort(flat, 0, false, true);
  int64_t n = flat.numel();
  Tensor eqprev = n > 1 ? eq(sv.slice(0, 1, n), sv.slice(0, 0, n - 1)) : zeros({0}, DType::Bool);
  Tensor newgroup = cat({ones({std::min<int64_t>(n, 1)}, DType::Bool), logical_not(eqprev)});
  Tensor group = sub(cumsum(newgroup.to(DType::I64), 0), 1);  // group id of each sorted element
  Tensor starts = nonzero(newgroup).reshape({-1});
  Tensor values = index_select(sv, 0, starts);
  Tensor inverse, counts;
  if (return_inverse) inverse = scatter(zeros({n}, DType::I64), 0, si, group).reshape(x.shape());
  if (return_counts) {
    int64_t g = values.numel();
    counts = index_add(zeros({g}, DType::I64), 0, group, ones({n}, DType::I64));
  }
  TS_RETURN(std::tuple<Tensor, Tensor, Tensor>{values, inverse, counts});
}

// ---- invokers (graph nodes run ops through these) ----
TS_OP_INVOKER(gather) { return {gather(in[0], a.i("dim"), in[1])}; }
TS_OP_INVOKER(scatter) {
  if (in.size() == 3) return {scatter(in[0], a.i("dim"), in[1], in[2])};
  return {scatter(in[0], a.i("dim"), in[1], a.scalar("value"))};
}
TS_OP_INVOKER(scatter_add) { return {scatter_add(in[0], a.i("dim"), in[1], in[2])}; }
TS_OP_INVOKER(index_select) { return {index_select(in[0], a.i("dim"), in[1])}; }
TS_OP_INVOKER(index_add) { return {index_add(in[0], a.i("dim"), in[1], in[2], a.scalar("alpha"))}; }
TS_OP_INVOKER(masked_fill) {
  if (in.size() == 3) return {masked_fill(in[0], in[1], in[2])};
  return {masked_fill(in[0], in[1], a.scalar("value"))};
}
TS_OP_INVOKER(masked_select) { return {masked_select(in[0], in[1])}; }
TS_OP_INVOKER(nonzero) { return {nonzero(in[0])}; }
TS_OP_INVOKER(one_hot) { return {one_hot(in[0], a.i("num_classes"))}; }
TS_OP_INVOKER(topk) {
  auto [v, i] = topk(in[0], a.i("k"), a.i("dim"), a.b("largest"), a.b("sorted"));
  return {v, i};
}
TS_OP_INVOKER(sort) {
  auto [v, i] = sort(in[0], a.i("dim"), a.b("descending"), a.b("stable"));
  return {v, i};
}
TS_OP_INVOKER(argsort) { return {argsort(in[0], a.i("dim"), a.b("descending"), a.b("stable"))}; }
TS_OP_INVOKER(unique) {
  auto [v, inv, c] = unique(in[0], a.b("sorted"), a.b("return_inverse"), a.b("return_counts"));
  return {v, inv, c};
}

}  // namespace tessera::ops
