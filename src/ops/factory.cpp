// Tensor factories: filled, ranged and identity tensors, and *_like forms.
#include <cmath>

#include "ops/op_utils.h"

namespace tessera {

Tensor zeros(IntArrayRef shape, TensorOptions opts) { return full(shape, 0, opts); }
Tensor ones(IntArrayRef shape, TensorOptions opts) { return full(shape, 1, opts); }

Tensor full(IntArrayRef shape, const Scalar& value, TensorOptions opts) {
  TS_OP_SCOPE(full);
  TS_OP_ATTRS({"shape", shape}, {"value", value}, {"dtype", opts.dtype});
  bool rg = opts.requires_grad;
  opts.requires_grad = false;
  Tensor t = empty(shape, opts);
  ops::fill_into(t, value);
  if (rg) t.requires_grad_(true);
  TS_RETURN(t);
}
Tensor full(IntArrayRef shape, const Scalar& value, std::nullptr_t) { return full(shape, value, value.dtype()); }

Tensor scalar_tensor(const Scalar& value, DType dtype) { return full({}, value, dtype); }

// On t's device, as PyTorch's *_like.
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype) {
  return zeros(t.shape(), TensorOptions(dtype.value_or(t.dtype()), t.device()));
}
Tensor ones_like(const Tensor& t, std::optional<DType> dtype) {
  return ones(t.shape(), TensorOptions(dtype.value_or(t.dtype()), t.device()));
}
Tensor full_like(const Tensor& t, const Scalar& v, std::optional<DType> dtype) {
  return full(t.shape(), v, TensorOptions(dtype.value_or(t.dtype()), t.device()));
}

Tensor arange(const Scalar& end, std::optional<DType> dtype) { return arange(0, end, 1, dtype); }

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, std::optional<DType> dtype) {
  TS_OP_SCOPE(arange);
  TS_OP_ATTRS({"start", start}, {"end", end}, {"step", step}, {"dtype", dtype});
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  TS_CHECK(st != 0 && std::isfinite(st), "arange: step must be finite and nonzero, got ", step);
  TS_CHECK(std::isfinite(s) && std::isfinite(e), "arange: start and end must be finite, got ", start, " and ", end);
  TS_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "arange: the range [", start, ", ", end,
           ") is inconsistent with the sign of step ", step);
  bool any_float = start.is_floating() || end.is_floating() || step.is_floating();
  DType dt = dtype.value_or(any_float ? default_float_dtype() : DType::I64);
  const double count = std::ceil((e - s) / st);
  TS_CHECK(count < 0x1p62, "arange: the range [", start, ", ", end, ") with step ", step, " has ", count,
           " elements, more than a tensor can hold");
  if (dt == DType::I64 && !any_float) {
    // Exact in integers (a double count can be off by one past 2^53).
    const int64_t si = start.to_int(), sti = step.to_int();
    const __int128 span = static_cast<__int128>(end.to_int()) - si;
    const auto n = static_cast<int64_t>((span + sti - (sti > 0 ? 1 : -1)) / sti);
    Tensor r = empty({n}, DType::I64);
    backend::kernels(r).arange(r, si, sti);  // stays inside [start, end)
    TS_RETURN(r);
  }
  const auto n = static_cast<int64_t>(count);
  Tensor t = empty({n}, DType::F64);
  backend::kernels(t).arange(t, s, st);
  TS_RETURN(ops::cast(t, dt));
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions opts) {
  TS_OP_SCOPE(linspace);
  TS_OP_ATTRS({"start", start}, {"end", end}, {"steps", steps}, {"dtype", opts.dtype});
  TS_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  Tensor t = empty({steps}, TensorOptions(DType::F64, opts.device));
  backend::kernels(t).linspace(t, start, end);
  TS_RETURN(ops::cast(t, opts.dtype));
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions opts) {
  TS_OP_SCOPE(eye);
  TS_OP_ATTRS({"n", n}, {"m", m}, {"dtype", opts.dtype});
  int64_t cols = m.value_or(n);
  TS_CHECK(n >= 0 && cols >= 0, "eye: sizes must be non-negative, got ", n, " and ", cols);
  Tensor t = zeros({n, cols}, TensorOptions(opts.dtype, opts.device));
  ops::fill_into(ops::diagonal(t), 1);
  TS_RETURN(t);
}

Tensor tensor(std::initializer_list<double> values, IntArrayRef shape, DType dtype) {
  std::vector<double> v(values);
  return ops::cast(tensor(v, shape), dtype);
}

namespace ops {
// ---- invokers (graph nodes run ops through these) ----
TS_OP_INVOKER(full) { return {tessera::full(a.ints("shape"), a.scalar("value"), a.dtype("dtype"))}; }
TS_OP_INVOKER(arange) {
  return {tessera::arange(a.scalar("start"), a.scalar("end"), a.scalar("step"), a.opt_dtype("dtype"))};
}
TS_OP_INVOKER(linspace) { return {tessera::linspace(a.f("start"), a.f("end"), a.i("steps"), a.dtype("dtype"))}; }
TS_OP_INVOKER(eye) { return {tessera::eye(a.i("n"), a.opt_i("m"), a.dtype("dtype"))}; }
}  // namespace ops

}  // namespace tessera
