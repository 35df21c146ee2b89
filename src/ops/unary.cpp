// Unary elementwise ops. Floating ops turn integer inputs into the default
// float dtype (as PyTorch does); numeric ops keep integer dtypes. Each VJP is
// written in Tessera ops, so it is differentiable again.
#include <cmath>

#include "ops/autocast_policy.h"
#include "ops/op_utils.h"

namespace tessera::ops {
namespace {

using K = backend::UnaryKernel;
enum class Rule { Float, Numeric, Any };

Tensor prepare(const Tensor& x, Rule rule, const char* name) {
  check_defined(x, name, "input");
  if (rule == Rule::Float && !is_floating(x.dtype())) return cast(x, default_float_dtype());
  if (rule == Rule::Numeric)
    TS_CHECK(x.dtype() != DType::Bool, name, ": not supported for bool tensors (got a bool input); convert it with "
             "to() first");
  return x;
}

// Computes the op; records `vjp` when x requires grad. save_x/save_y choose what
// VJPArgs::saved holds: [x] and/or [y], in that order.
template <typename Vjp>
Tensor unary(const char* name, const Tensor& x_in, K k, Rule rule, std::initializer_list<double> params, Vjp vjp,
             bool save_x, bool save_y) {
  Tensor x = prepare(x_in, rule, name);
  double p[4] = {};
  int i = 0;
  for (double v : params) p[i++] = v;
  Tensor y = run_unary(x, k, x.dtype(), p);
  if (is_floating(x.dtype()) && autograd::any_requires_grad({&x_in})) {
    TensorList outs{y};
    if (save_x && save_y) autograd::record(name, {x_in}, outs, vjp, {0}, {0});
    else if (save_x) autograd::record(name, {x_in}, outs, vjp, {0}, {});
    else if (save_y) autograd::record(name, {x_in}, outs, vjp, {}, {0});
    else autograd::record(name, {x_in}, outs, vjp, {}, {});
  }
  return y;
}

// x as the gradient's dtype: integer inputs were promoted before the kernel.
Tensor xf(const VjpArgs& a) { return a.saved[0]; }

// An activation's backward as one fused kernel over (grad, saved) — the op
// unary_backward, which a captured graph can fuse further — unless the
// backward itself is recorded (Note [Fused ops and double backward]); an
// undefined tensor means "use the composite".
Tensor fused_grad(const VjpArgs& a, const char* function) {
  const Tensor& g = a.grads[0];
  const Tensor& s = a.saved[0];
  if (GradMode::is_enabled() || g.dtype() != s.dtype() || !IntArrayRef(g.shape()).equals(s.shape())) return Tensor();
  return unary_backward(g, s, function);
}
TensorList zero_grad(const VjpArgs& a) { return {zeros_like(a.grads[0])}; }

constexpr double kLn2 = 0.69314718055994530942;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

}  // namespace

Tensor neg(const Tensor& x) {
  TS_OP_SCOPE(neg, &x);
  TS_RETURN(unary("neg", x, K::Neg, Rule::Numeric, {}, [](const VjpArgs& a) -> TensorList { return {neg(a.grads[0])}; },
               false, false));
}
Tensor abs(const Tensor& x) {
  TS_OP_SCOPE(abs, &x);
  TS_RETURN(unary("abs", x, K::Abs, Rule::Numeric, {},
               [](const VjpArgs& a) -> TensorList { return {mul(a.grads[0], sign(xf(a)))}; }, true, false));
}
Tensor exp(const Tensor& x) {
  TS_OP_SCOPE(exp, &x);
  TS_AUTOCAST(exp, [&](const auto& cast) { return exp(cast(x)); });
  TS_RETURN(unary("exp", x, K::Exp, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList { return {mul(a.grads[0], a.saved[0])}; }, false, true));
}
Tensor exp2(const Tensor& x) {
  TS_OP_SCOPE(exp2, &x);
  TS_AUTOCAST(exp2, [&](const auto& cast) { return exp2(cast(x)); });
  TS_RETURN(unary("exp2", x, K::Exp2, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList { return {mul(mul(a.grads[0], a.saved[0]), kLn2)}; }, false, true));
}
Tensor log(const Tensor& x) {
  TS_OP_SCOPE(log, &x);
  TS_AUTOCAST(log, [&](const auto& cast) { return log(cast(x)); });
  TS_RETURN(unary("log", x, K::Log, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList { return {div(a.grads[0], xf(a))}; }, true, false));
}
Tensor log2(const Tensor& x) {
  TS_OP_SCOPE(log2, &x);
  TS_AUTOCAST(log2, [&](const auto& cast) { return log2(cast(x)); });
  TS_RETURN(unary("log2", x, K::Log2, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList { return {div(a.grads[0], mul(xf(a), kLn2))}; }, true, false));
}
Tensor log1p(const Tensor& x) {
  TS_OP_SCOPE(log1p, &x);
  TS_AUTOCAST(log1p, [&](const auto& cast) { return log1p(cast(x)); });
  TS_RETURN(unary("log1p", x, K::Log1p, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList { return {div(a.grads[0], add(xf(a), 1))}; }, true, false));
}
Tensor expm1(const Tensor& x) {
  TS_OP_SCOPE(expm1, &x);
  TS_AUTOCAST(expm1, [&](const auto& cast) { return expm1(cast(x)); });
  TS_RETURN(unary("expm1", x, K::Expm1, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList { return {mul(a.grads[0], add(a.saved[0], 1))}; }, false, true));
}
Tensor sqrt(const Tensor& x) {
  TS_OP_SCOPE(sqrt, &x);
  TS_RETURN(unary("sqrt", x, K::Sqrt, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList { return {div(a.grads[0], mul(a.saved[0], 2))}; }, false, true));
}
Tensor rsqrt(const Tensor& x) {
  TS_OP_SCOPE(rsqrt, &x);
  TS_AUTOCAST(rsqrt, [&](const auto& cast) { return rsqrt(cast(x)); });
  TS_RETURN(unary("rsqrt", x, K::Rsqrt, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList {
                 const Tensor& y = a.saved[0];
                 return {mul(a.grads[0], mul(mul(y, mul(y, y)), -0.5))};
               },
               false, true));
}
Tensor square(const Tensor& x) {
  TS_OP_SCOPE(square, &x);
  TS_RETURN(unary("square", x, K::Square, Rule::Numeric, {},
               [](const VjpArgs& a) -> TensorList { return {mul(a.grads[0], mul(xf(a), 2))}; }, true, false));
}
Tensor sin(const Tensor& x) {
  TS_OP_SCOPE(sin, &x);
  TS_RETURN(unary("sin", x, K::Sin, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList { return {mul(a.grads[0], cos(xf(a)))}; }, true, false));
}
Tensor cos(const Tensor& x) {
  TS_OP_SCOPE(cos, &x);
  TS_RETURN(unary("cos", x, K::Cos, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList { return {mul(a.grads[0], neg(sin(xf(a))))}; }, true, false));
}
Tensor tan(const Tensor& x) {
  TS_OP_SCOPE(tan, &x);
  TS_RETURN(unary("tan", x, K::Tan, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList { return {mul(a.grads[0], add(square(a.saved[0]), 1))}; }, false,
               true));
}
Tensor tanh(const Tensor& x) {
  TS_OP_SCOPE(tanh, &x);
  TS_RETURN(unary("tanh", x, K::Tanh, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList {
                 if (Tensor f = fused_grad(a, "tanh"); f.defined()) return {f};
                 return {mul(a.grads[0], sub(1, square(a.saved[0])))};
               },
               false, true));
}
Tensor sigmoid(const Tensor& x) {
  TS_OP_SCOPE(sigmoid, &x);
  TS_RETURN(unary("sigmoid", x, K::Sigmoid, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList {
                 const Tensor& y = a.saved[0];
                 return {mul(a.grads[0], mul(y, sub(1, y)))};
               },
               false, true));
}
Tensor relu(const Tensor& x) {
  TS_OP_SCOPE(relu, &x);
  TS_RETURN(unary("relu", x, K::Relu, Rule::Numeric, {},
               [](const VjpArgs& a) -> TensorList {
                 // One fused pass, unless the backward itself is recorded (create_graph).
                 if (Tensor f = fused_grad(a, "relu"); f.defined()) return {f};
                 return {where(gt(a.saved[0], 0), a.grads[0], 0)};
               },
               false, true));
}
Tensor leaky_relu(const Tensor& x, double slope) {
  TS_OP_SCOPE(leaky_relu, &x);
  TS_OP_ATTRS({"negative_slope", slope});
  TS_RETURN(unary("leaky_relu", x, K::LeakyRelu, Rule::Float, {slope},
               [slope](const VjpArgs& a) -> TensorList {
                 return {where(gt(xf(a), 0), a.grads[0], mul(a.grads[0], slope))};
               },
               true, false));
}
Tensor elu(const Tensor& x, double alpha) {
  TS_OP_SCOPE(elu, &x);
  TS_OP_ATTRS({"alpha", alpha});
  TS_RETURN(unary("elu", x, K::Elu, Rule::Float, {alpha},
               [alpha](const VjpArgs& a) -> TensorList {
                 const Tensor& x = a.saved[0];
                 return {where(gt(x, 0), a.grads[0], mul(a.grads[0], mul(exp(x), alpha)))};
               },
               true, false));
}
Tensor gelu(const Tensor& x, const std::string& approximate) {
  TS_OP_SCOPE(gelu, &x);
  TS_OP_ATTRS({"approximate", approximate});
  TS_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be 'none' or 'tanh', got '",
           approximate, "'");
  if (approximate == "none") {
    TS_RETURN(unary("gelu", x, K::Gelu, Rule::Float, {},
                 [](const VjpArgs& a) -> TensorList {
                   if (Tensor f = fused_grad(a, "gelu"); f.defined()) return {f};
                   const Tensor& x = a.saved[0];
                   Tensor cdf = mul(add(erf(mul(x, M_SQRT1_2)), 1), 0.5);
                   Tensor pdf = mul(exp(mul(square(x), -0.5)), kInvSqrt2Pi);
                   return {mul(a.grads[0], add(cdf, mul(x, pdf)))};
                 },
                 true, false));
  }
  TS_RETURN(unary("gelu", x, K::GeluTanh, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList {
                 if (Tensor f = fused_grad(a, "gelu_tanh"); f.defined()) return {f};
                 const Tensor& x = a.saved[0];
                 Tensor x2 = square(x);
                 Tensor inner = mul(mul(x, add(mul(x2, 0.044715), 1)), kSqrt2OverPi);
                 Tensor t = tanh(inner);
                 Tensor dinner = mul(add(mul(x2, 3 * 0.044715), 1), kSqrt2OverPi);
                 Tensor d = add(mul(add(t, 1), 0.5), mul(mul(mul(x, sub(1, square(t))), dinner), 0.5));
                 return {mul(a.grads[0], d)};
               },
               true, false));
}
Tensor silu(const Tensor& x) {
  TS_OP_SCOPE(silu, &x);
  TS_RETURN(unary("silu", x, K::Silu, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList {
                 if (Tensor f = fused_grad(a, "silu"); f.defined()) return {f};
                 const Tensor& x = a.saved[0];
                 Tensor s = sigmoid(x);
                 return {mul(a.grads[0], mul(s, add(mul(x, sub(1, s)), 1)))};
               },
               true, false));
}
Tensor mish(const Tensor& x) {
  TS_OP_SCOPE(mish, &x);
  TS_RETURN(unary("mish", x, K::Mish, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList {
                 const Tensor& x = a.saved[0];
                 Tensor t = tanh(softplus(x));
                 return {mul(a.grads[0], add(t, mul(mul(x, sub(1, square(t))), sigmoid(x))))};
               },
               true, false));
}
Tensor softplus(const Tensor& x, double beta, double threshold) {
  TS_OP_SCOPE(softplus, &x);
  TS_OP_ATTRS({"beta", beta}, {"threshold", threshold});
  TS_RETURN(unary("softplus", x, K::Softplus, Rule::Float, {beta, threshold},
               [beta, threshold](const VjpArgs& a) -> TensorList {
                 Tensor bx = mul(a.saved[0], beta);
                 return {where(gt(bx, threshold), a.grads[0], mul(a.grads[0], sigmoid(bx)))};
               },
               true, false));
}
Tensor hardtanh(const Tensor& x, double lo, double hi) {
  TS_OP_SCOPE(hardtanh, &x);
  TS_OP_ATTRS({"min_val", lo}, {"max_val", hi});
  TS_CHECK(lo <= hi, "hardtanh: min_val ", lo, " must not exceed max_val ", hi);
  TS_RETURN(unary("hardtanh", x, K::Hardtanh, Rule::Numeric, {lo, hi},
               [lo, hi](const VjpArgs& a) -> TensorList {
                 const Tensor& x = a.saved[0];
                 return {where(logical_and(gt(x, lo), lt(x, hi)), a.grads[0], 0)};
               },
               true, false));
}

// Piecewise-constant ops: zero gradient; identity on integers.
#define TS_ROUNDING(fn, Kern)                                                              \
  Tensor fn(const Tensor& x) {                                                             \
    TS_OP_SCOPE(fn, &x);                                                                   \
    if (!is_floating(x.dtype()) && x.dtype() != DType::Bool) TS_RETURN(x.clone());         \
    TS_RETURN(unary(#fn, x, K::Kern, Rule::Float, {}, zero_grad, false, false));           \
  }                                                                                        \
  TS_OP_INVOKER(fn) { return {fn(in[0])}; }
TS_ROUNDING(floor, Floor)
TS_ROUNDING(ceil, Ceil)
TS_ROUNDING(round, Round)
TS_ROUNDING(trunc, Trunc)
#undef TS_ROUNDING
Tensor sign(const Tensor& x) {
  TS_OP_SCOPE(sign, &x);
  if (x.dtype() == DType::Bool) TS_RETURN(x.clone());
  TS_RETURN(unary("sign", x, K::Sign, Rule::Numeric, {}, zero_grad, false, false));
}

Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  TS_OP_SCOPE(clamp, &x);
  TS_OP_ATTRS({"min", lo}, {"max", hi});
  TS_CHECK(lo || hi, "clamp: at least one of min and max must be given");
  double l = lo ? lo->to_double() : NAN, h = hi ? hi->to_double() : NAN;
  // A float bound on an integer tensor promotes, as in PyTorch.
  bool float_bound = (lo && lo->is_floating()) || (hi && hi->is_floating());
  Rule rule = float_bound ? Rule::Float : Rule::Numeric;
  TS_RETURN(unary("clamp", x, K::Clamp, rule, {l, h},
               [l, h](const VjpArgs& a) -> TensorList {
                 const Tensor& x = a.saved[0];
                 Tensor keep = ones_like(x, DType::Bool);
                 if (l == l) keep = logical_and(keep, ge(x, l));
                 if (h == h) keep = logical_and(keep, le(x, h));
                 return {where(keep, a.grads[0], 0)};
               },
               true, false));
}

Tensor clamp(const Tensor& x, const Tensor& lo, const Tensor& hi) {
  TS_OP_SCOPE(clamp, &x, &lo, &hi);
  TS_CHECK(lo.defined() || hi.defined(), "clamp: at least one of min and max must be given");
  Tensor r = x;
  if (lo.defined()) r = maximum(r, lo);
  if (hi.defined()) r = minimum(r, hi);
  TS_RETURN(r);
}

Tensor reciprocal(const Tensor& x) {
  TS_OP_SCOPE(reciprocal, &x);
  TS_AUTOCAST(reciprocal, [&](const auto& cast) { return reciprocal(cast(x)); });
  TS_RETURN(unary("reciprocal", x, K::Reciprocal, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList { return {mul(a.grads[0], neg(square(a.saved[0])))}; }, false,
               true));
}
Tensor erf(const Tensor& x) {
  TS_OP_SCOPE(erf, &x);
  TS_RETURN(unary("erf", x, K::Erf, Rule::Float, {},
               [](const VjpArgs& a) -> TensorList {
                 return {mul(a.grads[0], mul(exp(neg(square(a.saved[0]))), M_2_SQRTPI))};
               },
               true, false));
}

Tensor pow(const Tensor& x, const Scalar& e) {
  TS_OP_SCOPE(pow, &x);
  TS_OP_ATTRS({"exponent", e});
  TS_AUTOCAST(pow, [&](const auto& cast) { return pow(cast(x), e); });
  if (!is_floating(x.dtype()) && !e.is_floating()) {
    TS_CHECK(e.to_int() >= 0, "pow: integers to negative integer powers are not allowed (exponent ", e, ")");
    TS_CHECK(x.dtype() != DType::Bool, "pow: not supported for bool tensors");
  }
  double ev = e.to_double();
  Rule rule = e.is_floating() ? Rule::Float : Rule::Numeric;
  TS_RETURN(unary("pow", x, K::PowScalar, rule, {ev},
               [ev](const VjpArgs& a) -> TensorList {
                 if (ev == 0) return {zeros_like(a.grads[0])};
                 return {mul(a.grads[0], mul(pow(a.saved[0], ev - 1), ev))};
               },
               true, false));
}

// tensor ** tensor: a binary kernel, kept with pow's other forms.
Tensor pow(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(pow, &a, &b);
  TS_AUTOCAST(pow, [&](const auto& cast) { return pow(cast(a), cast(b)); });
  if (!is_floating(result_type(a, b)) && b.dim() >= 0) {
    Tensor bc = cast(b, result_type(a, b));
    TS_CHECK(bc.numel() == 0 || !any(lt(bc, 0)).item<bool>(),
             "pow: integers to negative integer powers are not allowed");
  }
  Tensor y = binary_op("pow", a, b, backend::BinaryKernel::Pow, BinaryKind::Arith);
  if (autograd::any_requires_grad({&a, &b})) {
    TensorList outs{y};
    Shape sa = a.shape(), sb = b.shape();
    autograd::record("pow", {a, b}, outs, [sa, sb](const VjpArgs& v) -> TensorList {
      const Tensor& g = v.grads[0];
      const Tensor& a = v.saved[0];
      const Tensor& b = v.saved[1];
      Tensor ga, gb;
      if (v.needs_grad(0)) ga = sum_to(where(eq(b, 0), 0, mul(g, mul(b, pow(a, sub(b, 1))))), sa);
      if (v.needs_grad(1)) {
        Tensor y = pow(a, b);
        gb = sum_to(where(logical_and(eq(a, 0), ge(b, 0)), 0, mul(g, mul(y, log(a)))), sb);
      }
      return {ga, gb};
    }, {0, 1});
  }
  TS_RETURN(y);
}

Tensor pow(const Scalar& base, const Tensor& x) {
  TS_OP_SCOPE(pow, &x);
  TS_OP_ATTRS({"base", base});
  TS_AUTOCAST(pow, [&](const auto& cast) { return pow(base, cast(x)); });
  // An integer base with an integer tensor stays integral, as in PyTorch.
  if (!base.is_floating() && !is_floating(x.dtype())) TS_RETURN(pow(wrap_scalar(base), x));
  double b = base.to_double();
  TS_RETURN(unary("pow", x, K::RPowScalar, Rule::Float, {b},
               [b](const VjpArgs& a) -> TensorList { return {mul(a.grads[0], mul(a.saved[0], std::log(b)))}; }, false,
               true));
}

Tensor isnan(const Tensor& x) {
  TS_OP_SCOPE(isnan, &x);
  TS_RETURN(run_unary(x, K::Isnan, DType::Bool));
}
Tensor isinf(const Tensor& x) {
  TS_OP_SCOPE(isinf, &x);
  TS_RETURN(run_unary(x, K::Isinf, DType::Bool));
}
Tensor isfinite(const Tensor& x) {
  TS_OP_SCOPE(isfinite, &x);
  TS_RETURN(run_unary(x, K::Isfinite, DType::Bool));
}
Tensor logical_not(const Tensor& x) {
  TS_OP_SCOPE(logical_not, &x);
  TS_RETURN(run_unary(x, K::LogicalNot, DType::Bool));
}

Tensor nan_to_num(const Tensor& x, std::optional<double> nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  TS_OP_SCOPE(nan_to_num, &x);
  TS_OP_ATTRS({"nan", nan}, {"posinf", posinf}, {"neginf", neginf});
  if (!is_floating(x.dtype())) TS_RETURN(x.clone());
  double big = 0, nv = nan.value_or(0);
  switch (x.dtype()) {
    case DType::F16: big = 65504.0; break;
    case DType::BF16: big = 3.3895313892515355e38; break;
    case DType::F32: big = 3.4028234663852886e38; break;
    default: big = 1.7976931348623157e308; break;
  }
  double pi = posinf.value_or(big), ni = neginf.value_or(-big);
  TS_RETURN(unary("nan_to_num", x, K::NanToNum, Rule::Float, {nv, pi, ni},
               [](const VjpArgs& a) -> TensorList { return {where(isfinite(a.saved[0]), a.grads[0], 0)}; }, true,
               false));
}

Tensor unary_backward(const Tensor& grad, const Tensor& saved, const std::string& function) {
  TS_OP_SCOPE(unary_backward, &grad, &saved);
  TS_OP_ATTRS({"function", function});
  const char* name = "unary_backward";
  check_defined(grad, name, "grad");
  check_defined(saved, name, "saved");
  using B = backend::BinaryKernel;
  B k;
  if (function == "relu") k = B::ReluGrad;
  else if (function == "gelu") k = B::GeluGrad;
  else if (function == "gelu_tanh") k = B::GeluTanhGrad;
  else if (function == "tanh") k = B::TanhGrad;
  else if (function == "silu") k = B::SiluGrad;
  else TS_ERROR(name, ": function must be relu, gelu, gelu_tanh, tanh or silu, got '", function, "'");
  TS_CHECK(is_floating(grad.dtype()) && grad.dtype() == saved.dtype() && IntArrayRef(grad.shape()).equals(saved.shape()),
           name, ": grad (", dtype_name(grad.dtype()), " ", shape_str(grad.shape()), ") and saved (",
           dtype_name(saved.dtype()), " ", shape_str(saved.shape()), ") must be floating tensors of one dtype and shape");
  TS_RETURN(run_binary(grad.detach(), saved.detach(), k, grad.dtype()));
}

// ---- invokers (graph nodes run ops through these) ----
TS_OP_INVOKER(unary_backward) { return {unary_backward(in[0], in[1], a.s("function"))}; }
TS_OP_INVOKER(neg) { return {neg(in[0])}; }
TS_OP_INVOKER(abs) { return {abs(in[0])}; }
TS_OP_INVOKER(exp) { return {exp(in[0])}; }
TS_OP_INVOKER(exp2) { return {exp2(in[0])}; }
TS_OP_INVOKER(log) { return {log(in[0])}; }
TS_OP_INVOKER(log2) { return {log2(in[0])}; }
TS_OP_INVOKER(log1p) { return {log1p(in[0])}; }
TS_OP_INVOKER(expm1) { return {expm1(in[0])}; }
TS_OP_INVOKER(sqrt) { return {sqrt(in[0])}; }
TS_OP_INVOKER(rsqrt) { return {rsqrt(in[0])}; }
TS_OP_INVOKER(square) { return {square(in[0])}; }
TS_OP_INVOKER(sin) { return {sin(in[0])}; }
TS_OP_INVOKER(cos) { return {cos(in[0])}; }
TS_OP_INVOKER(tan) { return {tan(in[0])}; }
TS_OP_INVOKER(tanh) { return {tanh(in[0])}; }
TS_OP_INVOKER(sigmoid) { return {sigmoid(in[0])}; }
TS_OP_INVOKER(relu) { return {relu(in[0])}; }
TS_OP_INVOKER(silu) { return {silu(in[0])}; }
TS_OP_INVOKER(mish) { return {mish(in[0])}; }
TS_OP_INVOKER(reciprocal) { return {reciprocal(in[0])}; }
TS_OP_INVOKER(erf) { return {erf(in[0])}; }
TS_OP_INVOKER(isnan) { return {isnan(in[0])}; }
TS_OP_INVOKER(isinf) { return {isinf(in[0])}; }
TS_OP_INVOKER(isfinite) { return {isfinite(in[0])}; }
TS_OP_INVOKER(logical_not) { return {logical_not(in[0])}; }
TS_OP_INVOKER(sign) { return {sign(in[0])}; }
TS_OP_INVOKER(leaky_relu) { return {leaky_relu(in[0], a.f("negative_slope"))}; }
TS_OP_INVOKER(elu) { return {elu(in[0], a.f("alpha"))}; }
TS_OP_INVOKER(gelu) { return {gelu(in[0], a.s("approximate"))}; }
TS_OP_INVOKER(softplus) { return {softplus(in[0], a.f("beta"), a.f("threshold"))}; }
TS_OP_INVOKER(hardtanh) { return {hardtanh(in[0], a.f("min_val"), a.f("max_val"))}; }
TS_OP_INVOKER(clamp) {
  if (in.size() == 3) return {clamp(in[0], in[1], in[2])};
  return {clamp(in[0], a.opt_scalar("min"), a.opt_scalar("max"))};
}
// pow has three forms: tensor ** tensor, tensor ** scalar, scalar ** tensor.
TS_OP_INVOKER(pow) {
  if (in.size() == 2) return {pow(in[0], in[1])};
  if (a.has("exponent")) return {pow(in[0], a.scalar("exponent"))};
  return {pow(a.scalar("base"), in[0])};
}
TS_OP_INVOKER(nan_to_num) { return {nan_to_num(in[0], a.opt_f("nan"), a.opt_f("posinf"), a.opt_f("neginf"))}; }

}  // namespace tessera::ops
