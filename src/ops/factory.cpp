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
  cpu::fill(t, value);
  if (rg) t.requires_grad_(true);
  TS_RETURN(t);
}
Tensor full(IntArrayRef shape, const Scalar& value, std::nullptr_t) { return full(shape, value, value.dtype()); }

Tensor scalar_tensor(const Scalar& value, DType dtype) { return full({}, value, dtype); }

Tensor zeros_like(const Tensor& t, std::optional<DType> dtype) { return zeros(t.shape(), dtype.value_or(t.dtype())); }
Tensor ones_like(const Tensor& t, std::optional<DType> dtype) { return ones(t.shape(), dtype.value_or(t.dtype())); }
Tensor full_like(const Tensor& t, const Scalar& v, std::optional<DType> dtype) {
  return full(t.shape(), v, dtype.value_or(t.dtype()));
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
    int64_t* q = r.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) q[i] = si + i * sti;  // stays inside [start, end)
    TS_RETURN(r);
  }
  const auto n = static_cast<int64_t>(count);
  Tensor t = empty({n}, DType::F64);
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = s + static_cast<double>(i) * st;
  TS_RETURN(ops::cast(t, dt));
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions opts) {
  TS_OP_SCOPE(linspace);
  TS_OP_ATTRS({"start", start}, {"end", end}, {"steps", steps}, {"dtype", opts.dtype});
  TS_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  Tensor t = empty({steps}, DType::F64);
  double* p = t.data_ptr<double>();
  double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0;
  // Symmetric evaluation, as PyTorch does, so both ends are exact.
  int64_t half = steps / 2;
  for (int64_t i = 0; i < steps; ++i)
    p[i] = i < half ? start + step * static_cast<double>(i) : end - step * static_cast<double>(steps - 1 - i);
  TS_RETURN(ops::cast(t, opts.dtype));
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions opts) {
  TS_OP_SCOPE(eye);
  TS_OP_ATTRS({"n", n}, {"m", m}, {"dtype", opts.dtype});
  int64_t cols = m.value_or(n);
  TS_CHECK(n >= 0 && cols >= 0, "eye: sizes must be non-negative, got ", n, " and ", cols);
  Tensor t = zeros({n, cols}, opts.dtype);
  cpu::fill(ops::diagonal(t), 1);
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
