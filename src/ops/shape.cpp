// Joining, splitting, padding and rearranging tensors.
#include <numeric>

#include "ops/autocast_policy.h"
#include "ops/op_utils.h"

namespace tessera::ops {

Tensor cat(const TensorList& ts, int64_t dim) {
  TS_OP_SCOPE_LIST(cat, ts);
  TS_OP_ATTRS({"dim", dim});
  TS_AUTOCAST(cat, [&](const auto& cast) { return cat(cast(ts), dim); });
  TS_CHECK(!ts.empty(), "cat: expected a non-empty list of tensors");
  // Like PyTorch, 1-D empty tensors are skipped (legacy behaviour people rely on).
  const Tensor* ref = nullptr;
  for (const Tensor& t : ts) {
    check_defined(t, "cat", "tensors");
    if (!(t.dim() == 1 && t.numel() == 0) && !ref) ref = &t;
  }
  if (!ref) ref = &ts[0];
  TS_CHECK(ref->dim() > 0, "cat: zero-dimensional tensor cannot be concatenated; unsqueeze it or use stack()");
  int64_t nd = ref->dim();
  dim = wrap_dim(dim, nd, "cat");
  DType dt = ts[0].dtype();
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    dt = promote_types(dt, t.dtype());
    if (t.dim() == 1 && t.numel() == 0 && nd != 1) continue;
    TS_CHECK(t.dim() == nd, "cat: tensor ", i, " has ", t.dim(), " dimensions but tensor 0 has ", nd,
             " (all tensors must have the same number of dimensions)");
    for (int64_t d = 0; d < nd; ++d)
      TS_CHECK(d == dim || t.shape()[d] == ref->shape()[d], "cat: sizes of tensors must match except in dimension ",
               dim, ", but tensor ", i, " has shape ", shape_str(t.shape()), " and tensor 0 has shape ",
               shape_str(ref->shape()));
    total += t.shape()[dim];
  }
  Shape out_shape = ref->shape();
  out_shape[dim] = total;
  Tensor out = empty(out_shape, dt);
  int64_t off = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& t : ts) {
    if (t.dim() == 1 && t.numel() == 0 && nd != 1) {
      sizes.push_back(-1);
      continue;
    }
    int64_t n = t.shape()[dim];
    sizes.push_back(n);
    if (n) copy_into(out.detach().slice(dim, off, off + n), t);
    off += n;
  }
  if (autograd::any_requires_grad(ts)) {
    TensorList outs{out};
    autograd::record("cat", ts, outs, [sizes, dim](const VjpArgs& a) -> TensorList {
      TensorList r;
      int64_t o = 0;
      for (int64_t n : sizes) {
        if (n < 0) {
          r.push_back(Tensor());
          continue;
        }
        r.push_back(a.grads[0].slice(dim, o, o + n));
        o += n;
      }
      return r;
    });
  }
  TS_RETURN(out);
}

Tensor stack(const TensorList& ts, int64_t dim) {
  TS_OP_SCOPE_LIST(stack, ts);
  TS_OP_ATTRS({"dim", dim});
  TS_AUTOCAST(stack, [&](const auto& cast) { return stack(cast(ts), dim); });
  TS_CHECK(!ts.empty(), "stack: expected a non-empty list of tensors");
  dim = wrap_dim(dim, ts[0].dim() + 1, "stack");
  TensorList u;
  for (size_t i = 0; i < ts.size(); ++i) {
    TS_CHECK(IntArrayRef(ts[i].shape()).equals(ts[0].shape()), "stack: expects each tensor to be equal size, but got ",
             shape_str(ts[0].shape()), " at entry 0 and ", shape_str(ts[i].shape()), " at entry ", i);
    u.push_back(ts[i].unsqueeze(dim));
  }
  TS_RETURN(cat(u, dim));
}

TensorList split(const Tensor& x, int64_t split_size, int64_t dim) {
  TS_OP_SCOPE(split, &x);
  TS_OP_ATTRS({"split_size", split_size}, {"dim", dim});
  TS_CHECK(x.dim() > 0, "split: cannot split a 0-D tensor");
  dim = wrap_dim(dim, x.dim(), "split");
  int64_t n = x.shape()[dim];
  TS_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be positive, got ", split_size);
  TensorList r;
  if (n == 0) TS_RETURN(TensorList{x});
  check_output_count((n - 1) / split_size + 1, "split");
  for (int64_t s = 0; s < n; s += split_size) r.push_back(x.slice(dim, s, std::min(n, s + split_size)));
  TS_RETURN(r);
}

TensorList split(const Tensor& x, IntArrayRef sizes, int64_t dim) {
  TS_OP_SCOPE(split, &x);
  TS_OP_ATTRS({"sizes", sizes}, {"dim", dim});
  TS_CHECK(x.dim() > 0, "split: cannot split a 0-D tensor");
  dim = wrap_dim(dim, x.dim(), "split");
  check_output_count(static_cast<int64_t>(sizes.size()), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    TS_CHECK(s >= 0, "split: sizes must be non-negative, got ", shape_str(sizes));
    total = checked_add(total, s, "split: the sizes' sum");
  }
  TS_CHECK(total == x.shape()[dim], "split: sizes ", shape_str(sizes), " sum to ", total,
           " but dimension ", dim, " has size ", x.shape()[dim]);
  TensorList r;
  int64_t o = 0;
  for (int64_t s : sizes) {
    r.push_back(x.slice(dim, o, o + s));
    o += s;
  }
  TS_RETURN(r);
}

TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  TS_OP_SCOPE(chunk, &x);
  TS_OP_ATTRS({"chunks", chunks}, {"dim", dim});
  TS_CHECK(chunks > 0, "chunk: number of chunks must be positive, got ", chunks);
  TS_CHECK(x.dim() > 0, "chunk: cannot chunk a 0-D tensor");
  int64_t n = x.shape()[wrap_dim(dim, x.dim(), "chunk")];
  int64_t size = std::max<int64_t>((n + chunks - 1) / chunks, n == 0 ? 0 : 1);
  if (size == 0) {
    check_output_count(chunks, "chunk");
    TS_RETURN(TensorList(chunks, x));
  }
  TS_RETURN(split(x, size, dim));
}

TensorList unbind(const Tensor& x, int64_t dim) {
  TS_OP_SCOPE(unbind, &x);
  TS_OP_ATTRS({"dim", dim});
  TS_CHECK(x.dim() > 0, "unbind: cannot unbind a 0-D tensor");
  dim = wrap_dim(dim, x.dim(), "unbind");
  check_output_count(x.shape()[dim], "unbind");
  TensorList r;
  for (int64_t i = 0; i < x.shape()[dim]; ++i) r.push_back(x.select(dim, i));
  TS_RETURN(r);
}

Tensor pad(const Tensor& x, IntArrayRef p, const std::string& mode, double value) {
  TS_OP_SCOPE(pad, &x);
  TS_OP_ATTRS({"pad", p}, {"mode", mode}, {"value", value});
  check_defined(x, "pad", "input");
  TS_CHECK(p.size() % 2 == 0, "pad: the padding must have an even length (pairs of before/after), got ", shape_str(p));
  int64_t npad = static_cast<int64_t>(p.size()) / 2;
  TS_CHECK(npad <= x.dim(), "pad: ", npad, " padded dimensions requested for a tensor with ", x.dim(),
           " dimensions");
  if (mode == "constant") {
    // Negative padding crops first; the rest is a fill plus a copy into the middle.
    Tensor src = x;
    Shape out_shape = x.shape();
    std::vector<std::pair<int64_t, int64_t>> where;
    for (int64_t i = 0; i < npad; ++i) {
      int64_t d = x.dim() - 1 - i;
      int64_t before = p[2 * i], after = p[2 * i + 1];
      int64_t n = src.shape()[d];
      TS_CHECK(before >= -n && after >= -n && (before >= 0 || after >= 0 || before + after >= -n), "pad: padding ",
               shape_str(p), " would make dimension ", d, " of size ", n, " negative");
      int64_t cb = before < 0 ? -before : 0, ca = after < 0 ? -after : 0;
      if (cb || ca) src = src.slice(d, cb, n - ca);
      int64_t pb = std::max<int64_t>(before, 0), pa = std::max<int64_t>(after, 0);
      out_shape[d] = checked_add(checked_add(src.shape()[d], pb, "pad"), pa, "pad");
      where.push_back({d, pb});
    }
    Tensor out = full(out_shape, value, x.dtype());
    Tensor window = out.detach();
    for (auto [d, pb] : where) window = window.slice(d, pb, pb + src.shape()[d]);
    copy_into(window, src);
    if (autograd::any_requires_grad({&src})) {
      TensorList outs{out};
      Shape ss = src.shape();
      autograd::record("pad", {src}, outs, [where, ss](const VjpArgs& a) -> TensorList {
        Tensor g = a.grads[0];
        for (auto [d, pb] : where) g = g.slice(d, pb, pb + ss[d]);
        return {g};
      });
    }
    TS_RETURN(out);
  }
  TS_CHECK(mode == "reflect" || mode == "replicate", "pad: mode must be 'constant', 'reflect' or 'replicate', got '",
           mode, "'");
  Tensor r = x;
  for (int64_t i = 0; i < npad; ++i) {
    int64_t d = x.dim() - 1 - i;
    int64_t before = p[2 * i], after = p[2 * i + 1], n = x.shape()[d];
    TS_CHECK(before >= 0 && after >= 0, "pad: ", mode, " padding must be non-negative, got ", shape_str(p));
    if (mode == "reflect")
      TS_CHECK(before < n && after < n, "pad: reflect padding (", before, ", ", after,
               ") must be smaller than the size ", n, " of dimension ", d);
    else
      TS_CHECK(n > 0 || (before == 0 && after == 0), "pad: cannot replicate-pad an empty dimension ", d);
    // The source index of every output position; its size is checked like any tensor's.
    // Made on the CPU from sizes alone, then moved to the input's device.
    Tensor idx = empty({checked_add(checked_add(n, before, "pad"), after, "pad")}, TensorOptions(DType::I64, Device::cpu()));
    int64_t* q = idx.data_ptr<int64_t>();
    for (int64_t j = -before; j < n + after; ++j) {
      int64_t k = j;
      if (mode == "reflect") k = j < 0 ? -j : (j >= n ? 2 * (n - 1) - j : j);
      else k = std::clamp<int64_t>(j, 0, n - 1);
      *q++ = k;
    }
    r = index_select(r, d, idx.to(x.device()));
  }
  TS_RETURN(r);
}

namespace {
Tensor make_negative_view(const Tensor& x, IntArrayRef dims) {
  Shape st = x.strides();
  int64_t off = x.offset();
  for (int64_t d : dims) {
    if (x.shape()[d] > 0) off += (x.shape()[d] - 1) * st[d];
    st[d] = -st[d];
  }
  auto impl = make_intrusive<TensorImpl>(x.storage(), x.shape(), st, off, x.dtype());
  return Tensor(std::move(impl));
}
}  // namespace

Tensor flip(const Tensor& x, IntArrayRef dims) {
  TS_OP_SCOPE(flip, &x);
  TS_OP_ATTRS({"dims", dims});
  check_defined(x, "flip", "input");
  uint64_t mask = dim_mask(dims, x.dim(), "flip");
  if (dims.empty()) mask = 0;
  Shape wrapped;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (mask >> d & 1) wrapped.push_back(d);
  Tensor out = empty(x.shape(), x.dtype());
  copy_into(out, make_negative_view(x, wrapped));
  if (autograd::any_requires_grad({&x})) {
    TensorList outs{out};
    autograd::record("flip", {x}, outs, [wrapped](const VjpArgs& a) -> TensorList { return {flip(a.grads[0], wrapped)}; });
  }
  TS_RETURN(out);
}

Tensor roll(const Tensor& x, IntArrayRef shifts, IntArrayRef dims) {
  TS_OP_SCOPE(roll, &x);
  TS_OP_ATTRS({"shifts", shifts}, {"dims", dims});
  check_defined(x, "roll", "input");
  if (dims.empty()) {
    TS_CHECK(shifts.size() == 1, "roll: without dims, shifts must have one value, got ", shape_str(shifts));
    TS_RETURN(roll(x.flatten(), shifts, {0}).view(x.shape()));
  }
  TS_CHECK(shifts.size() == dims.size(), "roll: shifts ", shape_str(shifts), " and dims ", shape_str(dims),
           " must have the same length");
  Tensor r = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], x.dim(), "roll");
    int64_t n = x.shape()[d];
    if (n == 0) continue;
    int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    r = cat({r.slice(d, n - s, n), r.slice(d, 0, n - s)}, d);
  }
  TS_RETURN(r.is_same(x) ? x.clone() : r);
}

Tensor repeat(const Tensor& x, IntArrayRef repeats) {
  TS_OP_SCOPE(repeat, &x);
  TS_OP_ATTRS({"repeats", repeats});
  check_defined(x, "repeat", "input");
  TS_CHECK(static_cast<int64_t>(repeats.size()) >= x.dim(), "repeat: number of repeats ", repeats.size(),
           " cannot be smaller than the number of dimensions ", x.dim());
  for (int64_t r : repeats) TS_CHECK(r >= 0, "repeat: repeats must be non-negative, got ", shape_str(repeats));
  int64_t n = static_cast<int64_t>(repeats.size());
  Shape padded(n - x.dim(), 1);
  for (int64_t s : x.shape()) padded.push_back(s);
  Shape inter, expanded, final_shape;
  for (int64_t i = 0; i < n; ++i) {
    inter.push_back(1);
    inter.push_back(padded[i]);
    expanded.push_back(repeats[i]);
    expanded.push_back(padded[i]);
    final_shape.push_back(checked_mul(repeats[i], padded[i], "repeat"));
  }
  TS_RETURN(x.reshape(inter).expand(expanded).contiguous().reshape(final_shape));
}

Tensor tile(const Tensor& x, IntArrayRef reps) {
  TS_OP_SCOPE(tile, &x);
  TS_OP_ATTRS({"reps", reps});
  Shape r(std::max<int64_t>(0, x.dim() - static_cast<int64_t>(reps.size())), 1);
  for (int64_t v : reps) r.push_back(v);
  TS_RETURN(repeat(x, r));
}

namespace {
Tensor triangle(const Tensor& x, int64_t k, bool lower, const char* name) {
  check_defined(x, name, "input");
  TS_CHECK(x.dim() >= 2, name, ": expected a tensor with at least 2 dimensions, got shape ", shape_str(x.shape()));
  int64_t rows = x.shape()[x.dim() - 2], cols = x.shape()[x.dim() - 1];
  Tensor r = arange(rows).view({rows, 1});
  Tensor c = arange(cols).view({1, cols});
  Tensor diff = sub(c, r);  // col - row
  Tensor keep = lower ? le(diff, k) : ge(diff, k);
  return where(keep, x, scalar_tensor(0, x.dtype()));
}
}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  TS_OP_SCOPE(tril, &x);
  TS_OP_ATTRS({"diagonal", diagonal});
  TS_RETURN(triangle(x, diagonal, true, "tril"));
}
Tensor triu(const Tensor& x, int64_t diagonal) {
  TS_OP_SCOPE(triu, &x);
  TS_OP_ATTRS({"diagonal", diagonal});
  TS_RETURN(triangle(x, diagonal, false, "triu"));
}

// ---- invokers (graph nodes run ops through these) ----
TS_OP_INVOKER(cat) { return {cat(in, a.i("dim"))}; }
TS_OP_INVOKER(stack) { return {stack(in, a.i("dim"))}; }
TS_OP_INVOKER(split) {
  if (a.has("sizes")) return split(in[0], IntArrayRef(a.ints("sizes")), a.i("dim"));
  return split(in[0], a.i("split_size"), a.i("dim"));
}
TS_OP_INVOKER(chunk) { return chunk(in[0], a.i("chunks"), a.i("dim")); }
TS_OP_INVOKER(unbind) { return unbind(in[0], a.i("dim")); }
TS_OP_INVOKER(pad) { return {pad(in[0], a.ints("pad"), a.s("mode"), a.f("value"))}; }
TS_OP_INVOKER(flip) { return {flip(in[0], a.ints("dims"))}; }
TS_OP_INVOKER(roll) { return {roll(in[0], a.ints("shifts"), a.ints("dims"))}; }
TS_OP_INVOKER(repeat) { return {repeat(in[0], a.ints("repeats"))}; }
TS_OP_INVOKER(tile) { return {tile(in[0], a.ints("reps"))}; }
TS_OP_INVOKER(tril) { return {tril(in[0], a.i("diagonal"))}; }
TS_OP_INVOKER(triu) { return {triu(in[0], a.i("diagonal"))}; }

}  // namespace tessera::ops
