// View ops: results share storage with their input. Each records a VJP:
// reshapes reshape the gradient back, permutes invert, expand sums, and
// windows (slice, select, diagonal) scatter the gradient into zeros.
#include <numeric>

#include "ops/op_utils.h"

namespace tessera::ops {
namespace {

struct Geom {
  Shape sizes, strides;
  int64_t offset;
};

Tensor make_view(const Tensor& x, Shape sizes, Shape strides, int64_t offset) {
  auto impl = make_intrusive<TensorImpl>(x.storage(), std::move(sizes), std::move(strides), offset, x.dtype());
  impl->is_view = true;
  return Tensor(std::move(impl));
}

// Records a window view: its gradient is scattered into zeros of x's shape.
void record_window(const char* name, const Tensor& x, Tensor& out, Geom contig) {
  if (!autograd::any_requires_grad({&x})) return;
  TensorList outs{out};
  Shape in_shape = x.shape();
  autograd::record(name, {x}, outs, [in_shape, contig](const VjpArgs& a) -> TensorList {
    return {strided_scatter(a.grads[0], in_shape, contig.sizes, contig.strides, contig.offset)};
  });
}

void record_reshape(const char* name, const Tensor& x, Tensor& out) {
  if (!autograd::any_requires_grad({&x})) return;
  TensorList outs{out};
  Shape in_shape = x.shape();
  autograd::record(name, {x}, outs, [in_shape](const VjpArgs& a) -> TensorList {
    return {reshape(a.grads[0], in_shape)};
  });
}

Geom slice_geom(IntArrayRef shape, IntArrayRef strides, int64_t offset, int64_t dim, int64_t start, int64_t end,
                int64_t step) {
  Geom g{shape.shape(), strides.shape(), offset};
  int64_t len = end > start ? (end - start - 1) / step + 1 : 0;  // no overflow for any step
  g.offset += start * strides[dim];
  g.sizes[dim] = len;
  g.strides[dim] = len > 1 ? checked_mul(strides[dim], step, "slice: the step's stride") : strides[dim];
  return g;
}

Geom select_geom(IntArrayRef shape, IntArrayRef strides, int64_t offset, int64_t dim, int64_t index) {
  Geom g{shape.shape(), strides.shape(), offset + index * strides[dim]};
  g.sizes.erase(g.sizes.begin() + dim);
  g.strides.erase(g.strides.begin() + dim);
  return g;
}

Geom diagonal_geom(IntArrayRef shape, IntArrayRef strides, int64_t offset, int64_t off, int64_t d1, int64_t d2) {
  Geom g{shape.shape(), strides.shape(), offset};
  int64_t len;
  if (off >= 0) {
    len = std::max<int64_t>(std::min(shape[d1], shape[d2] - off), 0);
    if (len > 0) g.offset += off * strides[d2];
  } else {
    len = std::max<int64_t>(std::min(shape[d1] + off, shape[d2]), 0);
    if (len > 0) g.offset -= off * strides[d1];
  }
  int64_t diag_stride = strides[d1] + strides[d2];
  int64_t hi = std::max(d1, d2), lo = std::min(d1, d2);
  g.sizes.erase(g.sizes.begin() + hi);
  g.strides.erase(g.strides.begin() + hi);
  g.sizes.erase(g.sizes.begin() + lo);
  g.strides.erase(g.strides.begin() + lo);
  g.sizes.push_back(len);
  g.strides.push_back(diag_stride);
  return g;
}

// PyTorch's computeStride: strides for viewing (shape, strides) as new_shape
// without a copy, or nothing when the memory layout does not allow it.
std::optional<Shape> view_strides(IntArrayRef old_shape, IntArrayRef old_strides, IntArrayRef new_shape) {
  Shape ns(new_shape.size(), 1);
  if (old_shape.empty()) return ns;
  int64_t numel = numel_of(old_shape);
  if (numel == 0) {
    if (old_shape.equals(new_shape)) return old_strides.shape();
    for (int64_t d = static_cast<int64_t>(new_shape.size()) - 1; d >= 0; --d)
      ns[d] = d == static_cast<int64_t>(new_shape.size()) - 1 ? 1 : std::max<int64_t>(new_shape[d + 1], 1) * ns[d + 1];
    return ns;
  }
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = static_cast<int64_t>(old_shape.size()) - 1; td >= 0; --td) {
    tensor_numel *= old_shape[td];
    if (td == 0 || (old_shape[td - 1] != 1 && old_strides[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        ns[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base_stride = old_strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return ns;
}

// Resolves one -1 in `shape` against numel; checks the total.
Shape infer_shape(IntArrayRef shape, int64_t numel, const char* op) {
  Shape s = shape.shape();
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      TS_CHECK(infer < 0, op, ": only one dimension can be -1, got shape ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      TS_CHECK(s[i] >= 0, op, ": invalid dimension ", s[i], " in shape ", shape_str(shape));
      TS_CHECK(!__builtin_mul_overflow(known, s[i], &known), op, ": shape ", shape_str(shape),
               " has more elements than a 64-bit count holds");
    }
  }
  if (infer >= 0) {
    TS_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape), " is invalid for input of size ",
             numel);
    s[infer] = numel / known;
  }
  TS_CHECK(numel_of(s) == numel, op, ": shape ", shape_str(shape), " is invalid for input of size ", numel);
  return s;
}

}  // namespace

Tensor as_strided(const Tensor& x_in, IntArrayRef sizes, IntArrayRef strides, int64_t offset) {
  Tensor x = x_in.contiguous();
  Tensor out = make_view(x, sizes.shape(), strides.shape(), x.offset() + offset);
  if (autograd::any_requires_grad({&x})) {
    TensorList outs{out};
    Shape in_shape = x.shape(), sz = sizes.shape(), st = strides.shape();
    autograd::record("as_strided", {x}, outs, [in_shape, sz, st, offset](const VjpArgs& a) -> TensorList {
      return {strided_scatter(a.grads[0], in_shape, sz, st, offset)};
    });
  }
  return out;
}

Tensor strided_scatter(const Tensor& g, IntArrayRef base_shape, IntArrayRef sizes, IntArrayRef strides,
                       int64_t offset) {
  // An op of its own: it writes into the zeros through a kernel, which a
  // graph could not see if the zeros and the write were recorded apart.
  TS_OP_SCOPE(strided_scatter, &g);
  TS_OP_ATTRS({"base_shape", base_shape}, {"sizes", sizes}, {"strides", strides}, {"offset", offset});
  check_defined(g, "strided_scatter", "grad");
  TS_CHECK(IntArrayRef(g.shape()).equals(sizes) && sizes.size() == strides.size() && offset >= 0, "strided_scatter: ",
           "grad ", shape_str(g.shape()), " must have the window's sizes ", shape_str(sizes), " (strides ",
           shape_str(strides), ", offset ", offset, ")");
  int64_t last = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    TS_CHECK(strides[i] >= 0, "strided_scatter: negative stride in ", shape_str(strides));
    if (sizes[i] > 0) last = checked_add(last, checked_mul(sizes[i] - 1, strides[i], "strided_scatter"), "strided_scatter");
  }
  TS_CHECK(numel_of(sizes) == 0 || last < numel_of(base_shape), "strided_scatter: the window (sizes ",
           shape_str(sizes), ", strides ", shape_str(strides), ", offset ", offset, ") reaches past a tensor of shape ",
           shape_str(base_shape));
  Tensor out = zeros(base_shape, g.dtype());
  Tensor window = make_view(out, sizes.shape(), strides.shape(), offset);
  copy_into(window, g);
  if (autograd::any_requires_grad({&g})) {
    TensorList outs{out};
    Shape sz = sizes.shape(), st = strides.shape();
    autograd::record("strided_scatter", {g}, outs, [sz, st, offset](const VjpArgs& a) -> TensorList {
      return {as_strided(a.grads[0], sz, st, offset)};
    });
  }
  TS_RETURN(out);
}

Tensor view(const Tensor& x, IntArrayRef shape) {
  TS_OP_SCOPE(view, &x);
  TS_OP_ATTRS({"shape", shape});
  Shape s = infer_shape(shape, x.numel(), "view");
  auto st = view_strides(x.shape(), x.strides(), s);
  TS_CHECK(st.has_value(), "view: cannot view a tensor of shape ", shape_str(x.shape()), " and strides ",
           shape_str(x.strides()), " as shape ", shape_str(s),
           " without copying (its memory is not laid out compatibly); use reshape() instead");
  Tensor out = make_view(x, s, *st, x.offset());
  record_reshape("view", x, out);
  TS_RETURN(out);
}

Tensor reshape(const Tensor& x, IntArrayRef shape) {
  TS_OP_SCOPE(reshape, &x);
  TS_OP_ATTRS({"shape", shape});
  Shape s = infer_shape(shape, x.numel(), "reshape");
  if (auto st = view_strides(x.shape(), x.strides(), s)) {
    Tensor out = make_view(x, s, *st, x.offset());
    record_reshape("reshape", x, out);
    TS_RETURN(out);
  }
  TS_RETURN(view(x.contiguous(), s));
}

Tensor permute(const Tensor& x, IntArrayRef dims) {
  TS_OP_SCOPE(permute, &x);
  TS_OP_ATTRS({"dims", dims});
  int64_t n = x.dim();
  TS_CHECK(static_cast<int64_t>(dims.size()) == n, "permute: got ", dims.size(), " dims ", shape_str(dims),
           " for a tensor with ", n, " dimensions (expected a permutation of all of them)");
  Shape sizes(n), strides(n), inverse(n);
  dim_mask(dims, n, "permute");  // rejects repeated or out-of-range dims
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = wrap_dim(dims[i], n, "permute");
    sizes[i] = x.shape()[d];
    strides[i] = x.strides()[d];
    inverse[d] = i;
  }
  Tensor out = make_view(x, sizes, strides, x.offset());
  if (autograd::any_requires_grad({&x})) {
    TensorList outs{out};
    autograd::record("permute", {x}, outs, [inverse](const VjpArgs& a) -> TensorList {
      return {permute(a.grads[0], inverse)};
    });
  }
  TS_RETURN(out);
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  TS_OP_SCOPE(transpose, &x);
  TS_OP_ATTRS({"dim0", d0}, {"dim1", d1});
  int64_t n = x.dim();
  if (n == 0) {
    wrap_dim(d0, 0, "transpose");
    wrap_dim(d1, 0, "transpose");
    TS_RETURN(x);
  }
  d0 = wrap_dim(d0, n, "transpose");
  d1 = wrap_dim(d1, n, "transpose");
  Shape perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  TS_RETURN(permute(x, perm));
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  TS_OP_SCOPE(slice, &x);
  TS_OP_ATTRS({"dim", dim}, {"start", start}, {"end", end}, {"step", step});
  TS_CHECK(x.dim() > 0, "slice: cannot slice a 0-D tensor");
  dim = wrap_dim(dim, x.dim(), "slice");
  TS_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = x.shape()[dim];
  // Python slicing: negative indices count from the end; out-of-range clamps.
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Geom g = slice_geom(x.shape(), x.strides(), x.offset(), dim, start, end, step);
  Tensor out = make_view(x, g.sizes, g.strides, g.offset);
  if (x.requires_grad()) record_window("slice", x, out, slice_geom(x.shape(), contiguous_strides(x.shape()), 0, dim, start, end, step));
  TS_RETURN(out);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  TS_OP_SCOPE(select, &x);
  TS_OP_ATTRS({"dim", dim}, {"index", index});
  TS_CHECK(x.dim() > 0, "select: cannot index a 0-D tensor");
  dim = wrap_dim(dim, x.dim(), "select");
  int64_t n = x.shape()[dim];
  TS_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dimension ", dim,
           " of size ", n);
  if (index < 0) index += n;
  Geom g = select_geom(x.shape(), x.strides(), x.offset(), dim, index);
  Tensor out = make_view(x, g.sizes, g.strides, g.offset);
  if (x.requires_grad()) record_window("select", x, out, select_geom(x.shape(), contiguous_strides(x.shape()), 0, dim, index));
  TS_RETURN(out);
}

Tensor diagonal(const Tensor& x, int64_t off, int64_t d1, int64_t d2) {
  TS_OP_SCOPE(diagonal, &x);
  TS_OP_ATTRS({"offset", off}, {"dim1", d1}, {"dim2", d2});
  TS_CHECK(x.dim() >= 2, "diagonal: expected a tensor with at least 2 dimensions, got ", x.dim());
  d1 = wrap_dim(d1, x.dim(), "diagonal");
  d2 = wrap_dim(d2, x.dim(), "diagonal");
  TS_CHECK(d1 != d2, "diagonal: dim1 and dim2 must differ, both are ", d1);
  Geom g = diagonal_geom(x.shape(), x.strides(), x.offset(), off, d1, d2);
  Tensor out = make_view(x, g.sizes, g.strides, g.offset);
  if (x.requires_grad())
    record_window("diagonal", x, out, diagonal_geom(x.shape(), contiguous_strides(x.shape()), 0, off, d1, d2));
  TS_RETURN(out);
}

Tensor expand(const Tensor& x, IntArrayRef shape) {
  TS_OP_SCOPE(expand, &x);
  TS_OP_ATTRS({"shape", shape});
  int64_t n = static_cast<int64_t>(shape.size());
  TS_CHECK(n >= x.dim(), "expand: the target shape ", shape_str(shape), " has fewer dimensions than the input ",
           shape_str(x.shape()));
  Shape sizes(n), strides(n);
  for (int64_t i = n - 1; i >= 0; --i) {
    int64_t xi = i - (n - x.dim());
    int64_t want = shape[i];
    if (xi >= 0) {
      int64_t have = x.shape()[xi];
      if (want == -1) want = have;
      TS_CHECK(want >= 0, "expand: negative size ", want, " in the target shape ", shape_str(shape));
      TS_CHECK(have == want || have == 1, "expand: the input size ", have, " at dimension ", xi,
               " must match the target size ", want, " or be 1 (input ", shape_str(x.shape()), ", target ",
               shape_str(shape), ")");
      sizes[i] = want;
      strides[i] = have == want ? x.strides()[xi] : 0;
    } else {
      TS_CHECK(want >= 0, "expand: -1 is not allowed for a new leading dimension (target ", shape_str(shape), ")");
      sizes[i] = want;
      strides[i] = 0;
    }
  }
  if (IntArrayRef(sizes).equals(x.shape())) TS_RETURN(x);
  Tensor out = make_view(x, sizes, strides, x.offset());
  if (autograd::any_requires_grad({&x})) {
    TensorList outs{out};
    Shape in_shape = x.shape();
    autograd::record("expand", {x}, outs, [in_shape](const VjpArgs& a) -> TensorList {
      return {sum_to(a.grads[0], in_shape)};
    });
  }
  TS_RETURN(out);
}

Tensor squeeze(const Tensor& x, std::optional<int64_t> dim) {
  TS_OP_SCOPE(squeeze, &x);
  TS_OP_ATTRS({"dim", dim});
  Shape s;
  if (dim) {
    int64_t d = wrap_dim(*dim, x.dim(), "squeeze");
    if (x.dim() == 0 || x.shape()[d] != 1) TS_RETURN(x);
    s = x.shape();
    s.erase(s.begin() + d);
  } else {
    for (int64_t v : x.shape())
      if (v != 1) s.push_back(v);
    if (s.size() == x.shape().size()) TS_RETURN(x);
  }
  TS_RETURN(view(x, s));
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  TS_OP_SCOPE(unsqueeze, &x);
  TS_OP_ATTRS({"dim", dim});
  dim = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape s = x.shape(), st = x.strides();
  int64_t new_stride = dim < x.dim() ? x.strides()[dim] * x.shape()[dim] : 1;
  s.insert(s.begin() + dim, 1);
  st.insert(st.begin() + dim, new_stride);
  Tensor out = make_view(x, s, st, x.offset());
  record_reshape("unsqueeze", x, out);
  TS_RETURN(out);
}

Tensor detach(const Tensor& x) {
  TS_OP_SCOPE(detach, &x);
  check_defined(x, "detach", "input");
  const TensorImpl* src = x.impl();
  auto impl = make_intrusive<TensorImpl>(src->storage, src->shape, src->strides, src->offset, src->dtype);
  impl->is_view = src->is_view;
  TS_RETURN(Tensor(std::move(impl)));
}

Tensor contiguous(const Tensor& x) {
  TS_OP_SCOPE(contiguous, &x);
  if (x.is_contiguous()) TS_RETURN(x);
  TS_RETURN(clone(x));
}

Tensor clone(const Tensor& x) {
  TS_OP_SCOPE(clone, &x);
  Tensor out = empty(x.shape(), x.dtype());
  copy_into(out, x);
  if (autograd::any_requires_grad({&x})) {
    TensorList outs{out};
    autograd::record("clone", {x}, outs, [](const VjpArgs& a) -> TensorList { return {a.grads[0]}; });
  }
  TS_RETURN(out);
}

Tensor to_dtype(const Tensor& x, DType dtype) {
  TS_OP_SCOPE(to_dtype, &x);
  TS_OP_ATTRS({"dtype", dtype});
  if (x.dtype() == dtype) TS_RETURN(x);
  Tensor out = cast(x, dtype);
  if (is_floating(dtype) && is_floating(x.dtype()) && autograd::any_requires_grad({&x})) {
    TensorList outs{out};
    DType from = x.dtype();
    autograd::record("to", {x}, outs, [from](const VjpArgs& a) -> TensorList { return {to_dtype(a.grads[0], from)}; });
  }
  TS_RETURN(out);
}

// ---- invokers (graph nodes run ops through these) ----
TS_OP_INVOKER(strided_scatter) {
  return {strided_scatter(in[0], a.ints("base_shape"), a.ints("sizes"), a.ints("strides"), a.i("offset"))};
}
TS_OP_INVOKER(view) { return {view(in[0], a.ints("shape"))}; }
TS_OP_INVOKER(reshape) { return {reshape(in[0], a.ints("shape"))}; }
TS_OP_INVOKER(permute) { return {permute(in[0], a.ints("dims"))}; }
TS_OP_INVOKER(transpose) { return {transpose(in[0], a.i("dim0"), a.i("dim1"))}; }
TS_OP_INVOKER(slice) { return {slice(in[0], a.i("dim"), a.i("start"), a.i("end"), a.i("step"))}; }
TS_OP_INVOKER(select) { return {select(in[0], a.i("dim"), a.i("index"))}; }
TS_OP_INVOKER(diagonal) { return {diagonal(in[0], a.i("offset"), a.i("dim1"), a.i("dim2"))}; }
TS_OP_INVOKER(expand) { return {expand(in[0], a.ints("shape"))}; }
TS_OP_INVOKER(squeeze) { return {squeeze(in[0], a.opt_i("dim"))}; }
TS_OP_INVOKER(unsqueeze) { return {unsqueeze(in[0], a.i("dim"))}; }
TS_OP_INVOKER(detach) { return {detach(in[0])}; }
TS_OP_INVOKER(contiguous) { return {contiguous(in[0])}; }
TS_OP_INVOKER(clone) { return {clone(in[0])}; }
TS_OP_INVOKER(to_dtype) { return {to_dtype(in[0], a.dtype("dtype"))}; }

}  // namespace tessera::ops

namespace tessera {

Tensor Tensor::view(IntArrayRef s) const { return ops::view(*this, s); }
Tensor Tensor::reshape(IntArrayRef s) const { return ops::reshape(*this, s); }
Tensor Tensor::permute(IntArrayRef d) const { return ops::permute(*this, d); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return ops::transpose(*this, a, b); }
Tensor Tensor::t() const {
  TS_CHECK(dim() <= 2, "t: expects a tensor with at most 2 dimensions, got ", dim(), "; use transpose() or mT()");
  return dim() < 2 ? *this : ops::transpose(*this, 0, 1);
}
Tensor Tensor::mT() const {
  TS_CHECK(dim() >= 2, "mT: expects a tensor with at least 2 dimensions, got ", dim());
  return ops::transpose(*this, -2, -1);
}
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  TS_CHECK(dim() > 0, "narrow: cannot narrow a 0-D tensor");
  int64_t n = size(d);
  if (start < 0) start += n;
  TS_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: start ", start, " with length ", length,
           " exceeds dimension ", d, " of size ", n);
  return ops::slice(*this, d, start, start + length, 1);
}
Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  return ops::slice(*this, d, start, end, step);
}
Tensor Tensor::select(int64_t d, int64_t i) const { return ops::select(*this, d, i); }
Tensor Tensor::expand(IntArrayRef s) const { return ops::expand(*this, s); }
Tensor Tensor::squeeze() const { return ops::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return ops::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return ops::unsqueeze(*this, d); }
Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start, dim(), "flatten");
  end = wrap_dim(end, dim(), "flatten");
  TS_CHECK(start <= end, "flatten: start_dim ", start, " cannot come after end_dim ", end);
  Shape s;
  for (int64_t i = 0; i < start; ++i) s.push_back(size(i));
  int64_t m = 1;
  for (int64_t i = start; i <= end; ++i) m *= size(i);
  s.push_back(m);
  for (int64_t i = end + 1; i < dim(); ++i) s.push_back(size(i));
  return reshape(s);
}
Tensor Tensor::unflatten(int64_t d, IntArrayRef sizes) const {
  d = wrap_dim(d, dim(), "unflatten");
  Shape s;
  for (int64_t i = 0; i < d; ++i) s.push_back(size(i));
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) infer = static_cast<int64_t>(s.size());
    else known *= sizes[i];
    s.push_back(sizes[i]);
  }
  if (infer >= 0 && known > 0) s[infer] = size(d) / known;
  TS_CHECK(numel_of(IntArrayRef(s.data() + d, sizes.size())) == size(d), "unflatten: sizes ", shape_str(sizes),
           " do not multiply to the size ", size(d), " of dimension ", d);
  for (int64_t i = d + 1; i < dim(); ++i) s.push_back(size(i));
  return view(s);
}
Tensor Tensor::diagonal(int64_t o, int64_t a, int64_t b) const { return ops::diagonal(*this, o, a, b); }
Tensor Tensor::contiguous() const { return ops::contiguous(*this); }
Tensor Tensor::clone() const { return ops::clone(*this); }
Tensor Tensor::to(DType t) const { return ops::to_dtype(*this, t); }

// Not recorded by autograd: Module::to moves parameters keeping their
// identity (set_data), and the seam's first devices need no gradient across.
Tensor Tensor::to(Device device) const {
  TS_CHECK(defined(), "to(", device, "): the tensor is undefined");
  if (this->device() == device) return *this;
  const backend::Backend& dst = backend::get(device.type);  // an error if the device is not in this build
  Tensor out = empty(shape(), TensorOptions(dtype(), device));
  if (device.is_meta()) return out;  // shape, dtype and strides only
  TS_CHECK(!is_meta(), "to(", device, "): a meta tensor has no data to copy; allocate on ", device,
           " with empty_like or Module::to_empty instead");
  Tensor src = contiguous();
  if (src.nbytes() == 0) return out;
  if (src.device().is_cpu()) {
    dst.copy_from_cpu(out.raw_data(), src.raw_data(), src.nbytes());
  } else if (device.is_cpu()) {
    backend::get(src.device().type).copy_to_cpu(out.raw_data(), src.raw_data(), src.nbytes());
  } else {  // between two devices: through the CPU
    Tensor host = src.to(Device::cpu());
    dst.copy_from_cpu(out.raw_data(), host.raw_data(), host.nbytes());
  }
  return out;
}

}  // namespace tessera
