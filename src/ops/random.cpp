// Random tensors from the counter-based Philox generator. Element i of a draw
// uses Philox block (offset + i / lanes), so results do not depend on threads.
#include <cmath>

#include "ops/op_utils.h"
#include "tessera/core/parallel.h"

namespace tessera::ops {
namespace {

Generator& gen_or_default(Generator* g) { return g ? *g : default_generator(); }

std::array<uint32_t, 4> block(uint64_t seed, uint64_t counter) {
  return philox4x32({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

// Uniform in [0, 1): 24 bits for float, 53 for double.
inline float u01f(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
inline double u01d(uint32_t hi, uint32_t lo) {
  uint64_t v = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(v & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// Fills a contiguous f64 or f32 buffer with `kind` draws; returns it in `dtype`.
enum class Dist { Uniform, Normal };
Tensor draw(IntArrayRef shape, Dist dist, double a, double b, DType dtype, Generator* gen) {
  TS_CHECK(is_floating(dtype), "random: expected a floating dtype, got ", dtype_name(dtype));
  bool dbl = dtype == DType::F64;
  Tensor t = empty(shape, dbl ? DType::F64 : DType::F32);
  int64_t n = t.numel();
  int lanes = dbl ? 2 : 4;
  uint64_t blocks = static_cast<uint64_t>((n + lanes - 1) / lanes);
  Generator& g = gen_or_default(gen);
  uint64_t seed = g.seed();
  uint64_t base = g.reserve(blocks);
  double* pd = dbl ? t.data_ptr<double>() : nullptr;
  float* pf = dbl ? nullptr : t.data_ptr<float>();
  parallel_for(0, static_cast<int64_t>(blocks), 2048, [&](int64_t b0, int64_t b1) {
    for (int64_t bi = b0; bi < b1; ++bi) {
      auto r = block(seed, base + static_cast<uint64_t>(bi));
      double v[4];
      int k = 0;
      if (dbl) {
        double u0 = u01d(r[0], r[1]), u1 = u01d(r[2], r[3]);
        if (dist == Dist::Uniform) {
          v[0] = u0;
          v[1] = u1;
        } else {
          double rad = std::sqrt(-2.0 * std::log(1.0 - u0)), th = 2.0 * M_PI * u1;
          v[0] = rad * std::cos(th);
          v[1] = rad * std::sin(th);
        }
        k = 2;
      } else {
        for (int j = 0; j < 4; ++j) v[j] = u01f(r[j]);
        if (dist == Dist::Normal) {
          for (int j = 0; j < 4; j += 2) {
            double rad = std::sqrt(-2.0 * std::log(1.0 - v[j])), th = 2.0 * M_PI * v[j + 1];
            v[j] = rad * std::cos(th);
            v[j + 1] = rad * std::sin(th);
          }
        }
        k = 4;
      }
      for (int j = 0; j < k; ++j) {
        int64_t i = bi * lanes + j;
        if (i >= n) break;
        double x = dist == Dist::Uniform ? a + (b - a) * v[j] : a + b * v[j];
        if (dbl) pd[i] = x;
        else {
          float f = static_cast<float>(x);
          // Rounding can reach the open upper bound of a float uniform: step back.
          if (dist == Dist::Uniform && f >= static_cast<float>(b) && b > a) f = std::nextafter(static_cast<float>(b), -INFINITY);
          pf[i] = f;
        }
      }
    }
  });
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
  TS_RETURN(with_grad(draw(shape, Dist::Uniform, 0, 1, opts.dtype, gen), opts));
}
Tensor randn(IntArrayRef shape, TensorOptions opts, Generator* gen) {
  TS_OP_SCOPE(randn);
  TS_OP_ATTRS({"shape", shape}, {"dtype", opts.dtype});
  ts_op_scope_.check_generator(gen, "randn");
  TS_RETURN(with_grad(draw(shape, Dist::Normal, 0, 1, opts.dtype, gen), opts));
}
Tensor uniform(IntArrayRef shape, double low, double high, TensorOptions opts, Generator* gen) {
  TS_OP_SCOPE(uniform);
  TS_OP_ATTRS({"shape", shape}, {"low", low}, {"high", high}, {"dtype", opts.dtype});
  ts_op_scope_.check_generator(gen, "uniform");
  TS_CHECK(low <= high, "uniform: low ", low, " must not exceed high ", high);
  TS_RETURN(with_grad(draw(shape, Dist::Uniform, low, high, opts.dtype, gen), opts));
}
Tensor normal(IntArrayRef shape, double mean, double std, TensorOptions opts, Generator* gen) {
  TS_OP_SCOPE(normal);
  TS_OP_ATTRS({"shape", shape}, {"mean", mean}, {"std", std}, {"dtype", opts.dtype});
  ts_op_scope_.check_generator(gen, "normal");
  TS_CHECK(std >= 0, "normal: std must be non-negative, got ", std);
  TS_RETURN(with_grad(draw(shape, Dist::Normal, mean, std, opts.dtype, gen), opts));
}
Tensor rand_like(const Tensor& t, Generator* gen) { return rand(t.shape(), t.dtype(), gen); }
Tensor randn_like(const Tensor& t, Generator* gen) { return randn(t.shape(), t.dtype(), gen); }

Tensor randint(int64_t low, int64_t high, IntArrayRef shape, TensorOptions opts, Generator* gen) {
  TS_OP_SCOPE(randint);
  TS_OP_ATTRS({"low", low}, {"high", high}, {"shape", shape}, {"dtype", opts.dtype});
  ts_op_scope_.check_generator(gen, "randint");
  TS_CHECK(low < high, "randint: low (", low, ") must be less than high (", high, ")");
  Tensor t = empty(shape, DType::I64);
  int64_t n = t.numel();
  uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  Generator& g = gen_or_default(gen);
  uint64_t seed = g.seed();
  uint64_t base = g.reserve(static_cast<uint64_t>((n + 1) / 2));
  int64_t* p = t.data_ptr<int64_t>();
  parallel_for(0, (n + 1) / 2, 2048, [&](int64_t b0, int64_t b1) {
    for (int64_t bi = b0; bi < b1; ++bi) {
      auto r = block(seed, base + static_cast<uint64_t>(bi));
      for (int j = 0; j < 2; ++j) {
        int64_t i = bi * 2 + j;
        if (i >= n) break;
        uint64_t v = (static_cast<uint64_t>(r[2 * j]) << 32) | r[2 * j + 1];
        p[i] = static_cast<int64_t>(static_cast<uint64_t>(low) + v % range);
      }
    }
  });
  TS_RETURN(cast(t, opts.dtype));
}

Tensor bernoulli(const Tensor& p, Generator* gen) {
  TS_OP_SCOPE(bernoulli, &p);
  ts_op_scope_.check_generator(gen, "bernoulli");
  check_defined(p, "bernoulli", "p");
  check_floating(p, "bernoulli", "p");
  Tensor pf = p.detach();
  TS_CHECK(pf.numel() == 0 || (all(ge(pf, 0)).item<bool>() && all(le(pf, 1)).item<bool>()),
           "bernoulli: every probability must be in [0, 1]");
  Tensor u = draw(p.shape(), Dist::Uniform, 0, 1, p.dtype() == DType::F64 ? DType::F64 : DType::F32, gen);
  TS_RETURN(lt(u, pf).to(p.dtype()));
}

Tensor bernoulli(IntArrayRef shape, double p, TensorOptions opts, Generator* gen) {
  TS_OP_SCOPE(bernoulli);
  TS_OP_ATTRS({"shape", shape}, {"p", p}, {"dtype", opts.dtype});
  ts_op_scope_.check_generator(gen, "bernoulli");
  TS_CHECK(p >= 0 && p <= 1, "bernoulli: p must be in [0, 1], got ", p);
  Tensor u = draw(shape, Dist::Uniform, 0, 1, DType::F32, gen);
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
