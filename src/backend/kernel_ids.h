#pragma once
// The names of the elementwise and reduction kernels the ops ask a backend
// for: shared by every backend's kernel table (backend.h) and the CPU's
// per-dtype loops (cpu/kernel_table.h).
#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::backend {

// X(name) lists.
#define TS_UNARY_KERNELS(X)                                                                          \
  X(Neg) X(Abs) X(Exp) X(Exp2) X(Log) X(Log2) X(Log1p) X(Expm1) X(Sqrt) X(Rsqrt) X(Square) X(Sin)   \
  X(Cos) X(Tan) X(Tanh) X(Sigmoid) X(Relu) X(LeakyRelu) X(Elu) X(Gelu) X(GeluTanh) X(Silu) X(Mish) \
  X(Softplus) X(Hardtanh) X(Sign) X(Floor) X(Ceil) X(Round) X(Trunc) X(Clamp) X(Reciprocal) X(Erf) \
  X(PowScalar) X(RPowScalar) X(NanToNum) X(Isnan) X(Isinf) X(Isfinite) X(LogicalNot)

#define TS_BINARY_KERNELS(X)                                                                          \
  X(Add) X(Sub) X(Mul) X(Div) X(FloorDiv) X(TruncDiv) X(Remainder) X(Pow) X(Maximum) X(Minimum)       \
  X(Atan2) X(Eq) X(Ne) X(Lt) X(Le) X(Gt) X(Ge) X(LogicalAnd) X(LogicalOr) X(LogicalXor) X(ReluGrad)   \
  X(GeluGrad) X(GeluTanhGrad) X(TanhGrad) X(SiluGrad)

enum class UnaryKernel : uint8_t {
#define TS_X(n) n,
  TS_UNARY_KERNELS(TS_X)
#undef TS_X
  kCount
};
enum class BinaryKernel : uint8_t {
#define TS_X(n) n,
  TS_BINARY_KERNELS(TS_X)
#undef TS_X
  kCount
};
constexpr int kNumUnary = static_cast<int>(UnaryKernel::kCount);
constexpr int kNumBinary = static_cast<int>(BinaryKernel::kCount);

// Note [Kernel dtypes]
// The dtypes each elementwise kernel is defined for are part of its ops'
// dtype rule (an op on a dtype without its kernel computes in a wider one or
// refuses), so they are the same on every backend and every backend provides
// exactly these; Backend.KernelDtypesMatchTheCpuTable holds the CPU table to them.
//   float kernels (transcendental, rounding, activations and their
//     gradients, division): f16, bf16, f32, f64;
//   numeric kernels (sign, abs, clamp, add, mul, ...): every dtype but bool;
//   predicates, comparisons and logical kernels: every dtype;
//   and bool arithmetic where PyTorch allows it: add (or), mul (and),
//   maximum, minimum.
constexpr bool unary_defined(UnaryKernel k, DType t) {
  using U = UnaryKernel;
  switch (k) {
    case U::Isnan: case U::Isinf: case U::Isfinite: case U::LogicalNot: return true;
    case U::Neg: case U::Abs: case U::Square: case U::Relu: case U::Sign: case U::Clamp: case U::Hardtanh:
    case U::PowScalar: return t != DType::Bool;
    default: return is_floating(t);
  }
}
constexpr bool binary_defined(BinaryKernel k, DType t) {
  using B = BinaryKernel;
  switch (k) {
    case B::Eq: case B::Ne: case B::Lt: case B::Le: case B::Gt: case B::Ge: case B::LogicalAnd: case B::LogicalOr:
    case B::LogicalXor: return true;
    case B::Add: case B::Mul: case B::Maximum: case B::Minimum: return true;
    case B::Sub: case B::FloorDiv: case B::TruncDiv: case B::Remainder: case B::Pow: case B::ReluGrad:
      return t != DType::Bool;
    default: return is_floating(t);
  }
}

enum class ReduceKernel : uint8_t { Sum, Prod, Max, Min, All, Any, kCount };
constexpr int kNumReduce = static_cast<int>(ReduceKernel::kCount);

enum class RandomDist : uint8_t { Uniform, Normal };

// What a product applies to its result before storing it (fused ops).
enum class Epilogue : uint8_t { None, Relu, Gelu, GeluTanh, Silu, Tanh };

// 2-D pooling over [planes, H, W] contiguous data (max pooling without
// indices also over channel-blocked [planes, H, W, lanes]).
struct PoolGeometry {
  int64_t planes, H, W, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool count_include_pad = true;  // average pooling only
  DType dtype;
  int64_t lanes = 1;  // channels interleaved per plane: max pooling without indices only
};

// One optimizer step's scalars (the caller computes the bias corrections).
struct AdamArgs {
  double lr, beta1, beta2, eps, weight_decay, step_size, bc2_sqrt;
  bool amsgrad, maximize, decoupled;  // decoupled: AdamW's p *= 1 - lr * weight_decay
};
struct SgdArgs {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize, first;  // first: the momentum buffer starts as the gradient
};
struct RmspropArgs {
  double lr, alpha, eps, weight_decay, momentum;
  bool centered, maximize;
};
struct AdagradArgs {
  double lr, weight_decay, eps;  // lr: this step's, after its decay
  bool maximize;
};
struct LionArgs {
  double lr, beta1, beta2, weight_decay;
};

// Static int8 products (kernels.int8_linear, int8_conv2d): u8 (or s8)
// activations, affine per tensor; s8 weights, symmetric per output channel;
// int32 sums; and this epilogue inside the product:
//   v[oc] = act(x_scale * w_scales[oc] * sum (x_q - x_zero_point) * w_q[oc] + bias[oc])
//   y     = v (f32 output), or saturate_u8(round_half_even(v / y_scale) + y_zero_point)
struct Int8Epilogue {
  float x_scale = 1.0f;
  int32_t x_zero_point = 0;
  bool x_s8 = false;                // x holds s8 codes (else u8)
  const float* w_scales = nullptr;  // one per output channel, all > 0
  const float* bias = nullptr;      // f32, one per output channel; may be null
  Epilogue act = Epilogue::None;    // None or Relu
  bool out_u8 = true;               // else f32
  float y_scale = 1.0f;             // u8 output only
  int32_t y_zero_point = 0;
};

// 2-D convolution over NCHW data (conv_transpose2d swaps the roles).
struct ConvGeometry {
  int64_t N, C, H, W;      // input
  int64_t OC, KH, KW;      // weight [OC, C / groups, KH, KW]
  int64_t OH, OW;          // output
  int64_t sh, sw, dh, dw;  // stride, dilation (PyTorch convention: 1 = dense)
  int64_t pt, pl, pb, pr;  // padding top, left, bottom, right
  int64_t groups;
  DType dtype;
};

// Fused attention over q [bh, L, E], k [bh, S, E], v [bh, S, Ev] (f32, or
// f64 when f64), with an optional additive mask [bh, L, S].
struct AttentionParams {
  int64_t bh = 0, L = 0, S = 0, E = 0, Ev = 0;
  bool causal = false;
  double scale = 1.0;
  double dropout_p = 0.0;
  uint64_t seed = 0, offset = 0;  // Philox state of the dropout mask
  bool f64 = false;
};
// The dropout mask's layout, the same on every backend so that a seed gives
// one mask everywhere: row (b, i) draws one Philox block per 4 keys, from
// offset + (b * L + i) * ceil(S / 4).
inline uint64_t attention_rng_blocks(const AttentionParams& p) {
  return static_cast<uint64_t>(p.bh * p.L * ((p.S + 3) / 4));
}

}  // namespace tessera::backend
