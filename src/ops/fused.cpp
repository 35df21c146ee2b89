// fused_elementwise: a chain of pointwise ops as one kernel (made by the
// compiler's fusion pass), and the table of which ops can join one.
#include <cmath>

#include "ops/op_utils.h"
#include "tessera/core/numbers.h"

namespace tessera::ops {

TensorList fused_elementwise(const TensorList& inputs, const std::string& program) {
  TS_OP_SCOPE_LIST(fused_elementwise, inputs);
  TS_OP_ATTRS({"program", program});
  auto p = backend::parse_fused_program(program);
  TS_CHECK(static_cast<int>(inputs.size()) == p->num_inputs, "fused_elementwise: the program reads ",
           p->num_inputs, " inputs, got ", inputs.size());
  Shape shape;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    TS_CHECK(x.defined(), "fused_elementwise: input ", i, " is an undefined tensor");
    DType t = x.dtype();
    TS_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64 || t == DType::Bool,
             "fused_elementwise: input ", i, " is ", dtype_name(t), "; inputs must be float or bool");
    TS_CHECK(!(GradMode::is_enabled() && x.requires_grad()), "fused_elementwise: input ", i,
             " requires grad, but the fused kernel has no backward; fuse after differentiation (compiled training "
             "graphs do) or run under no_grad");
    shape = i == 0 ? Shape(x.shape()) : broadcast_shapes(shape, x.shape(), "fused_elementwise");
  }
  TensorList outs;
  for (int k = 0; k < p->num_outputs; ++k) outs.push_back(empty(shape, DType::F32));
  backend::kernels(current_device()).fused_elementwise(*p, inputs, outs);
  TS_RETURN(outs);
}

TS_OP_INVOKER(fused_elementwise) { return fused_elementwise(in, a.s("program")); }

std::optional<std::string> elementwise_kernel(OpId op, const Attrs& a, int num_inputs) {
  // Unary ops: the kernel their f32 path runs, with its parameters.
  switch (op) {
#define TS_PLAIN(o, k) \
  case OpId::o:        \
    return num_inputs == 1 ? std::optional<std::string>(#k) : std::nullopt;
    TS_PLAIN(neg, Neg) TS_PLAIN(abs, Abs) TS_PLAIN(exp, Exp) TS_PLAIN(exp2, Exp2) TS_PLAIN(log, Log)
    TS_PLAIN(log2, Log2) TS_PLAIN(log1p, Log1p) TS_PLAIN(expm1, Expm1) TS_PLAIN(sqrt, Sqrt) TS_PLAIN(rsqrt, Rsqrt)
    TS_PLAIN(square, Square) TS_PLAIN(sin, Sin) TS_PLAIN(cos, Cos) TS_PLAIN(tan, Tan) TS_PLAIN(tanh, Tanh)
    TS_PLAIN(sigmoid, Sigmoid) TS_PLAIN(relu, Relu) TS_PLAIN(silu, Silu) TS_PLAIN(mish, Mish)
    TS_PLAIN(reciprocal, Reciprocal) TS_PLAIN(erf, Erf) TS_PLAIN(sign, Sign) TS_PLAIN(floor, Floor)
    TS_PLAIN(ceil, Ceil) TS_PLAIN(round, Round) TS_PLAIN(trunc, Trunc)
#undef TS_PLAIN
    case OpId::leaky_relu: return "LeakyRelu[" + format_double(a.f("negative_slope")) + "]";
    case OpId::elu: return "Elu[" + format_double(a.f("alpha")) + "]";
    case OpId::gelu: return a.s("approximate") == "tanh" ? "GeluTanh" : "Gelu";
    case OpId::softplus: return "Softplus[" + format_double(a.f("beta")) + "," + format_double(a.f("threshold")) + "]";
    case OpId::hardtanh: return "Hardtanh[" + format_double(a.f("min_val")) + "," + format_double(a.f("max_val")) + "]";
    case OpId::clamp: {
      if (num_inputs != 1) return std::nullopt;
      auto lo = a.opt_scalar("min"), hi = a.opt_scalar("max");
      return "Clamp[" + format_double(lo ? lo->to_double() : NAN) + "," + format_double(hi ? hi->to_double() : NAN) + "]";
    }
    case OpId::pow:
      if (num_inputs == 2) return "Pow";
      if (a.has("exponent")) return "PowScalar[" + format_double(a.scalar("exponent").to_double()) + "]";
      return "RPowScalar[" + format_double(a.scalar("base").to_double()) + "]";
    // Binary ops (alpha-free forms).
    case OpId::add: return a.scalar("alpha").to_double() == 1.0 ? std::optional<std::string>("Add") : std::nullopt;
    case OpId::sub: return a.scalar("alpha").to_double() == 1.0 ? std::optional<std::string>("Sub") : std::nullopt;
    case OpId::mul: return "Mul";
    case OpId::div: return a.s("rounding_mode").empty() ? std::optional<std::string>("Div") : std::nullopt;
    case OpId::maximum: return "Maximum";
    case OpId::minimum: return "Minimum";
    case OpId::atan2: return "Atan2";
    case OpId::where: return "where";
    case OpId::unary_backward: {
      const std::string& f = a.s("function");
      if (f == "relu") return "ReluGrad";
      if (f == "gelu") return "GeluGrad";
      if (f == "gelu_tanh") return "GeluTanhGrad";
      if (f == "tanh") return "TanhGrad";
      if (f == "silu") return "SiluGrad";
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

}  // namespace tessera::ops
