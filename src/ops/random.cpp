// Random tensors from the counter-based Philox generator. Element i of a draw
// uses Philox block (offset + i / lanes), so results do not depend on threads.
#include <cmath>

#include "ops/op_utils.h"
#include "tessera/core/parallel.h"

namespace tessera::ops {
namespace {

Generator& gen_or_default(Generator* g) { return g ? *g : default_generator(); }

// Fills a contiguous f64 or f32 buffer with `dist` draws; returns it in `dtype`.
using Dist = backend::RandomDist;
Tensor draw(IntArrayRef shape, Dist dist, double a, double b, TensorOptions opts, Generator* gen) {
  DType dtype = opts.dtype;
  TS_CHECK(is_floating(dtype), "random: expected a floating dtype, got ", dtype_name(dtype));
  bool dbl = dtype == DType::F64;
  Tensor t = empty(shape, TensorOptions(dbl ? DType::F64 : DType::F32, opts.device));
  int64_t n = t.numel();
  int lanes = dbl ? 2 : 4;  // draws per Philox block
  uint64_t blocks = static_cast<uint64_t>((n + lanes - 1) / lanes);
  Generator& g = gen_or_default(gen);
  uint64_t seed = g.seed();
  uint64_t base = g.reserve(blocks);
  backend::kernels(t).random(t, dist, a, b, seed, base);
  Tensor r = cast(t, dtype);
  return r;
}

Tensor with_grad(Tensor t, const TensorOptions& opts) {
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor rand(IntArrayRef shape, TensorOptions opts, Generator* gen) {
  TS_OP_SCOPE(rand);
  TS_OP_ATTRS({"shape", shape}, {"dtype", opts.dtype});
  ts_op_scope_.check_generator(gen, "rand");
  TS_RETURN(with_grad(draw(shape, Dist::Uniform, 0, 1, opts, gen), opts));
}
Tensor randn(IntArrayRef shape, TensorOptions opts, Generator* gen) {
  TS_OP_SCOPE(randn);
  TS_OP_ATTRS({"shape", shape}, {"dtype", opts.dtype});
  ts_op_scope_.check_generator(gen, "randn");
  TS_RETURN(with_grad(draw(shape, Dist::Normal, 0, 1, opts, gen), opts));
}
Tensor uniform(IntArrayRef shape, double low, double high, TensorOptions opts, Generator* gen) {
  TS_OP_SCOPE(uniform);
  TS_OP_ATTRS({"shape", shape}, {"low", low}, {"high", high}, {"dtype", opts.dtype});
  ts_op_scope_.check_generator(gen, "uniform");
  TS_CHECK(low <= high, "uniform: low ", low, " must not exceed high ", high);
  TS_RETURN(with_grad(draw(shape, Dist::Uniform, low, high, opts, gen), opts));
}
Tensor normal(IntArrayRef shape, double mean, double std, TensorOptions opts, Generator* gen) {
  TS_OP_SCOPE(normal);
  TS_OP_ATTRS({"shape", shape}, {"mean", mean}, {"std", std}, {"dtype", opts.dtype});
  ts_op_scope_.check_generator(gen, "normal");
  TS_CHECK(std >= 0, "normal: std must be non-negative, got ", std);
  TS_RETURN(with_grad(draw(shape, Dist::Normal, mean, std, opts, gen), opts));
}
Tensor rand_like(const Tensor& t, Generator* gen) { return rand(t.shape(), t.dtype(), gen); }
Tensor randn_like(const Tensor& t, Generator* gen) { return randn(t.shape(), t.dtype(), gen); }

Tensor randint(int64_t low, int64_t high, IntArrayRef shape, TensorOptions opts, Generator* gen) {
  TS_OP_SCOPE(randint);
  TS_OP_ATTRS({"low", low}, {"high", high}, {"shape", shape}, {"dtype", opts.dtype});
  ts_op_scope_.check_generator(gen, "randint");
  TS_CHECK(low < high, "randint: low (", low, ") must be less than high (", high, ")");
  Tensor t = empty(shape, TensorOptions(DType::I64, opts.device));
  int64_t n = t.numel();
  uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  Generator& g = gen_or_default(gen);
  uint64_t seed = g.seed();
  uint64_t base = g.reserve(static_cast<uint64_t>((n + 1) / 2));
  backend::kernels(t).randint(t, low, range, seed, base);
  TS_RETURN(cast(t, opts.dtype));
}

Tensor bernoulli(const Tensor& p, Generator* gen) {
  TS_OP_SCOPE(bernoulli, &p);
  ts_op_scope_.check_generator(gen, "bernoulli");
  check_defined(p, "bernoulli", "p");
  check_floating(p, "bernoulli", "p");
  Tensor pf = p.detach();
  TS_CHECK(pf.numel() == 0 || !has_values(pf) || (all(ge(pf, 0)).item<bool>() && all(le(pf, 1)).item<bool>()),
           "bernoulli: every probability must be in [0, 1]");
  Tensor u = draw(p.shape(), Dist::Uniform, 0, 1,
                  TensorOptions(p.dtype() == DType::F64 ? DType::F64 : DType::F32, p.device()), gen);
  TS_RETURN(lt(u, pf).to(p.dtype()));
}

Tensor bernoulli(IntArrayRef shape, double p, TensorOptions opts, Generator* gen) {
  TS_OP_SCOPE(bernoulli);
  TS_OP_ATTRS({"shape", shape}, {"p", p}, {"dtype", opts.dtype});
  ts_op_scope_.check_generator(gen, "bernoulli");
  TS_CHECK(p >= 0 && p <= 1, "bernoulli: p must be in [0, 1], got ", p);
  Tensor u = draw(shape, Dist::Uniform, 0, 1, TensorOptions(DType::F32, opts.device), gen);
  TS_RETURN(lt(u, p).to(opts.dtype));
}

// ---- invokers (graph nodes run ops through these) ----
TS_OP_INVOKER(rand) { return {rand(a.ints("shape"), a.dtype("dtype"))}; }
TS_OP_INVOKER(randn) { return {randn(a.ints("shape"), a.dtype("dtype"))}; }
TS_OP_INVOKER(uniform) { return {uniform(a.ints("shape"), a.f("low"), a.f("high"), a.dtype("dtype"))}; }
TS_OP_INVOKER(normal) { return {normal(a.ints("shape"), a.f("mean"), a.f("std"), a.dtype("dtype"))}; }
TS_OP_INVOKER(randint) { return {randint(a.i("low"), a.i("high"), a.ints("shape"), a.dtype("dtype"))}; }
TS_OP_INVOKER(bernoulli) {
  if (!in.empty()) return {bernoulli(in[0])};
  return {bernoulli(a.ints("shape"), a.f("p"), a.dtype("dtype"))};
}

}  // namespace tessera::ops
