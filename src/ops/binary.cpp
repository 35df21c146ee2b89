// Binary elementwise ops with NumPy broadcasting and PyTorch type promotion.
// Gradients are summed back over broadcast dims with sum_to, and written with
// binary ops only (unary.cpp builds on this file, not the other way round).
#include "ops/autocast_policy.h"
#include "ops/op_utils.h"

namespace tessera::ops {
namespace {

using K = backend::BinaryKernel;
using Kind = BinaryKind;

bool needs_grad(const Tensor& a, const Tensor& b) { return autograd::any_requires_grad({&a, &b}); }

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  TS_OP_SCOPE(add, &a, &b);
  TS_OP_ATTRS({"alpha", alpha});
  bool scaled = alpha.to_double() != 1.0;
  Tensor y = scaled ? binary_op("add", a, mul(b, alpha), K::Add, Kind::Arith) : binary_op("add", a, b, K::Add, Kind::Arith);
  if (needs_grad(a, b)) {
    TensorList outs{y};
    Shape sa = a.shape(), sb = b.shape();
    double al = alpha.to_double();
    autograd::record("add", {a, b}, outs, [sa, sb, al](const VjpArgs& v) -> TensorList {
      const Tensor& g = v.grads[0];
      Tensor ga = v.needs_grad(0) ? sum_to(g, sa) : Tensor();
      Tensor gb = v.needs_grad(1) ? sum_to(al == 1.0 ? g : mul(g, al), sb) : Tensor();
      return {ga, gb};
    });
  }
  TS_RETURN(y);
}
Tensor add(const Tensor& a, const Scalar& b) { return add(a, wrap_scalar(b)); }
Tensor add(const Scalar& a, const Tensor& b) { return add(wrap_scalar(a), b); }

Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  TS_OP_SCOPE(sub, &a, &b);
  TS_OP_ATTRS({"alpha", alpha});
  TS_CHECK(a.dtype() != DType::Bool || b.dtype() != DType::Bool,
           "sub: subtracting two bool tensors is not supported; use logical_xor() instead");
  double al = alpha.to_double();
  Tensor y = al != 1.0 ? binary_op("sub", a, mul(b, alpha), K::Sub, Kind::Arith) : binary_op("sub", a, b, K::Sub, Kind::Arith);
  if (needs_grad(a, b)) {
    TensorList outs{y};
    Shape sa = a.shape(), sb = b.shape();
    autograd::record("sub", {a, b}, outs, [sa, sb, al](const VjpArgs& v) -> TensorList {
      const Tensor& g = v.grads[0];
      Tensor ga = v.needs_grad(0) ? sum_to(g, sa) : Tensor();
      Tensor gb = v.needs_grad(1) ? sum_to(mul(g, -al), sb) : Tensor();
      return {ga, gb};
    });
  }
  TS_RETURN(y);
}
Tensor sub(const Tensor& a, const Scalar& b) { return sub(a, wrap_scalar(b)); }
Tensor sub(const Scalar& a, const Tensor& b) { return sub(wrap_scalar(a), b); }

Tensor mul(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(mul, &a, &b);
  Tensor y = binary_op("mul", a, b, K::Mul, Kind::Arith);
  if (needs_grad(a, b)) {
    TensorList outs{y};
    Shape sa = a.shape(), sb = b.shape();
    autograd::record("mul", {a, b}, outs, [sa, sb](const VjpArgs& v) -> TensorList {
      const Tensor& g = v.grads[0];
      Tensor ga = v.needs_grad(0) ? sum_to(mul(g, v.saved[1]), sa) : Tensor();
      Tensor gb = v.needs_grad(1) ? sum_to(mul(g, v.saved[0]), sb) : Tensor();
      return {ga, gb};
    }, {0, 1});
  }
  TS_RETURN(y);
}
Tensor mul(const Tensor& a, const Scalar& b) { return mul(a, wrap_scalar(b)); }
Tensor mul(const Scalar& a, const Tensor& b) { return mul(wrap_scalar(a), b); }

Tensor div(const Tensor& a, const Tensor& b, const std::string& mode) {
  TS_OP_SCOPE(div, &a, &b);
  TS_OP_ATTRS({"rounding_mode", mode});
  if (mode == "floor") TS_RETURN(floor_divide(a, b));
  if (mode == "trunc") {
    Tensor y = binary_op("div", a, b, K::TruncDiv, Kind::IntDiv);
    if (needs_grad(a, b)) {
      TensorList outs{y};
      autograd::record("div_trunc", {a, b}, outs, [](const VjpArgs& v) -> TensorList {
        return {zeros_like(v.saved[0]), zeros_like(v.saved[1])};
      }, {0, 1});
    }
    TS_RETURN(y);
  }
  TS_CHECK(mode.empty(), "div: rounding_mode must be empty (true division), 'floor' or 'trunc', got '", mode, "'");
  Tensor y = binary_op("div", a, b, K::Div, Kind::TrueDiv);
  if (needs_grad(a, b)) {
    TensorList outs{y};
    Shape sa = a.shape(), sb = b.shape();
    autograd::record("div", {a, b}, outs, [sa, sb](const VjpArgs& v) -> TensorList {
      const Tensor& g = v.grads[0];
      const Tensor& a = v.saved[0];
      const Tensor& b = v.saved[1];
      Tensor ga = v.needs_grad(0) ? sum_to(div(g, b), sa) : Tensor();
      Tensor gb = v.needs_grad(1) ? sum_to(div(mul(g, a), mul(mul(b, b), -1)), sb) : Tensor();
      return {ga, gb};
    }, {0, 1});
  }
  TS_RETURN(y);
}
Tensor div(const Tensor& a, const Scalar& b, const std::string& mode) { return div(a, wrap_scalar(b), mode); }
Tensor div(const Scalar& a, const Tensor& b) { return div(wrap_scalar(a), b); }

Tensor floor_divide(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(floor_divide, &a, &b);
  Tensor y = binary_op("floor_divide", a, b, K::FloorDiv, Kind::IntDiv);
  if (needs_grad(a, b)) {
    TensorList outs{y};
    autograd::record("floor_divide", {a, b}, outs, [](const VjpArgs& v) -> TensorList {
      return {zeros_like(v.saved[0]), zeros_like(v.saved[1])};
    }, {0, 1});
  }
  TS_RETURN(y);
}

Tensor remainder(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(remainder, &a, &b);
  Tensor y = binary_op("remainder", a, b, K::Remainder, Kind::IntDiv);
  if (needs_grad(a, b)) {
    TensorList outs{y};
    Shape sa = a.shape(), sb = b.shape();
    autograd::record("remainder", {a, b}, outs, [sa, sb](const VjpArgs& v) -> TensorList {
      const Tensor& g = v.grads[0];
      Tensor ga = v.needs_grad(0) ? sum_to(g, sa) : Tensor();
      Tensor gb = v.needs_grad(1) ? sum_to(mul(mul(g, floor_divide(v.saved[0], v.saved[1])), -1), sb) : Tensor();
      return {ga, gb};
    }, {0, 1});
  }
  TS_RETURN(y);
}
Tensor remainder(const Tensor& a, const Scalar& b) { return remainder(a, wrap_scalar(b)); }

namespace {
// maximum/minimum: where both are equal the gradient is split evenly.
Tensor extremum(const char* name, const Tensor& a, const Tensor& b, K k, bool is_max) {
  Tensor y = binary_op(name, a, b, k, Kind::Arith);
  if (needs_grad(a, b)) {
    TensorList outs{y};
    Shape sa = a.shape(), sb = b.shape();
    autograd::record(name, {a, b}, outs, [sa, sb, is_max](const VjpArgs& v) -> TensorList {
      const Tensor& g = v.grads[0];
      const Tensor& a = v.saved[0];
      const Tensor& b = v.saved[1];
      Tensor a_wins = is_max ? gt(a, b) : lt(a, b);
      Tensor tie = eq(a, b);
      Tensor half = mul(g, 0.5);
      Tensor ga = v.needs_grad(0) ? sum_to(where(a_wins, g, where(tie, half, 0)), sa) : Tensor();
      Tensor gb = v.needs_grad(1) ? sum_to(where(logical_or(a_wins, tie), where(tie, half, 0), g), sb) : Tensor();
      return {ga, gb};
    }, {0, 1});
  }
  return y;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(maximum, &a, &b);
  TS_RETURN(extremum("maximum", a, b, K::Maximum, true));
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(minimum, &a, &b);
  TS_RETURN(extremum("minimum", a, b, K::Minimum, false));
}

Tensor atan2(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(atan2, &a, &b);
  Tensor y = binary_op("atan2", a, b, K::Atan2, Kind::TrueDiv);
  if (needs_grad(a, b)) {
    TensorList outs{y};
    Shape sa = a.shape(), sb = b.shape();
    autograd::record("atan2", {a, b}, outs, [sa, sb](const VjpArgs& v) -> TensorList {
      const Tensor& g = v.grads[0];
      const Tensor& a = v.saved[0];
      const Tensor& b = v.saved[1];
      Tensor denom = add(mul(a, a), mul(b, b));
      Tensor ga = v.needs_grad(0) ? sum_to(div(mul(g, b), denom), sa) : Tensor();
      Tensor gb = v.needs_grad(1) ? sum_to(div(mul(mul(g, -1), a), denom), sb) : Tensor();
      return {ga, gb};
    }, {0, 1});
  }
  TS_RETURN(y);
}

#define TS_COMPARE(fn, Kern)                                                  \
  Tensor fn(const Tensor& a, const Tensor& b) {                               \
    TS_OP_SCOPE(fn, &a, &b);                                                  \
    TS_RETURN(binary_op(#fn, a, b, K::Kern, Kind::Compare));                     \
  }                                                                           \
  Tensor fn(const Tensor& a, const Scalar& b) { return fn(a, wrap_scalar(b)); } \
  TS_OP_INVOKER(fn) { return {fn(in[0], in[1])}; }
TS_COMPARE(eq, Eq)
TS_COMPARE(ne, Ne)
TS_COMPARE(lt, Lt)
TS_COMPARE(le, Le)
TS_COMPARE(gt, Gt)
TS_COMPARE(ge, Ge)
#undef TS_COMPARE

Tensor logical_and(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(logical_and, &a, &b);
  TS_RETURN(binary_op("logical_and", a, b, K::LogicalAnd, Kind::Logical));
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(logical_or, &a, &b);
  TS_RETURN(binary_op("logical_or", a, b, K::LogicalOr, Kind::Logical));
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(logical_xor, &a, &b);
  TS_RETURN(binary_op("logical_xor", a, b, K::LogicalXor, Kind::Logical));
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  TS_OP_SCOPE(where, &cond, &a, &b);
  check_defined(cond, "where", "condition");
  check_defined(a, "where", "input");
  check_defined(b, "where", "other");
  TS_CHECK(cond.dtype() == DType::Bool, "where: the condition must be a bool tensor, got ", dtype_name(cond.dtype()));
  DType ct = result_type(a, b);
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor ac = cast(a, ct), bc = cast(b, ct);
  Tensor y = empty(shape, ct);
  backend::kernels(y).where(y, cond, ac, bc);
  if (needs_grad(a, b)) {
    TensorList outs{y};
    Shape sa = a.shape(), sb = b.shape();
    autograd::record("where", {a, b}, outs, [sa, sb](const VjpArgs& v) -> TensorList {
      const Tensor& g = v.grads[0];
      const Tensor& c = v.saved[0];
      Tensor ga = v.needs_grad(0) ? sum_to(where(c, g, 0), sa) : Tensor();
      Tensor gb = v.needs_grad(1) ? sum_to(where(c, 0, g), sb) : Tensor();
      return {ga, gb};
    }, {}, {}, {cond});
  }
  TS_RETURN(y);
}
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b) { return where(cond, a, wrap_scalar(b)); }
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b) { return where(cond, wrap_scalar(a), b); }

Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  TS_OP_SCOPE(lerp, &start, &end, &weight);
  TS_RETURN(add(start, mul(weight, sub(end, start))));
}
Tensor lerp(const Tensor& start, const Tensor& end, const Scalar& weight) {
  TS_OP_SCOPE(lerp, &start, &end);
  TS_OP_ATTRS({"weight", weight});
  TS_RETURN(add(start, mul(sub(end, start), weight)));
}
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  TS_OP_SCOPE(addcmul, &self, &t1, &t2);
  TS_OP_ATTRS({"value", value});
  TS_RETURN(add(self, mul(mul(t1, t2), value)));
}
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  TS_OP_SCOPE(addcdiv, &self, &t1, &t2);
  TS_OP_ATTRS({"value", value});
  TS_RETURN(add(self, mul(div(t1, t2), value)));
}

// ---- invokers (graph nodes run ops through these) ----
TS_OP_INVOKER(mul) { return {mul(in[0], in[1])}; }
TS_OP_INVOKER(floor_divide) { return {floor_divide(in[0], in[1])}; }
TS_OP_INVOKER(remainder) { return {remainder(in[0], in[1])}; }
TS_OP_INVOKER(maximum) { return {maximum(in[0], in[1])}; }
TS_OP_INVOKER(minimum) { return {minimum(in[0], in[1])}; }
TS_OP_INVOKER(atan2) { return {atan2(in[0], in[1])}; }
TS_OP_INVOKER(logical_and) { return {logical_and(in[0], in[1])}; }
TS_OP_INVOKER(logical_or) { return {logical_or(in[0], in[1])}; }
TS_OP_INVOKER(logical_xor) { return {logical_xor(in[0], in[1])}; }
TS_OP_INVOKER(add) { return {add(in[0], in[1], a.scalar("alpha"))}; }
TS_OP_INVOKER(sub) { return {sub(in[0], in[1], a.scalar("alpha"))}; }
TS_OP_INVOKER(div) { return {div(in[0], in[1], a.s("rounding_mode"))}; }
TS_OP_INVOKER(where) { return {where(in[0], in[1], in[2])}; }
TS_OP_INVOKER(lerp) {
  if (in.size() == 3) return {lerp(in[0], in[1], in[2])};
  return {lerp(in[0], in[1], a.scalar("weight"))};
}
TS_OP_INVOKER(addcmul) { return {addcmul(in[0], in[1], in[2], a.scalar("value"))}; }
TS_OP_INVOKER(addcdiv) { return {addcdiv(in[0], in[1], in[2], a.scalar("value"))}; }

}  // namespace tessera::ops
