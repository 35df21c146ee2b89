// One small, valid call of every op of ops.def through ops::invoke: the inputs
// and attributes its TS_OP_INVOKER reads, as the op records them when a graph
// captures it. A new op without a sample_<name>() here does not compile.
#include "op_samples.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/core/generator.h"
#include "tessera/ops/ops.h"
#include "tessera/quant/observer.h"
#include "tessera/quant/weights.h"

namespace tessera::testing {
namespace {

using ops::Attrs;
using Ints = std::vector<int64_t>;
using Floats = std::vector<double>;
using namespace std::string_literals;

// Inputs from their own fixed-seed generator, so that a sample does not depend
// on which samples were built before it.
Tensor rn(IntArrayRef shape, uint64_t seed) {
  Generator g(seed);
  return ops::randn(shape, DType::F32, &g);
}
Tensor ru(IntArrayRef shape, double lo, double hi, uint64_t seed) {
  Generator g(seed);
  return ops::uniform(shape, lo, hi, DType::F32, &g);
}
Tensor pos(IntArrayRef shape, uint64_t seed) { return ru(shape, 0.5, 2.0, seed); }
Tensor i64(std::initializer_list<double> v, IntArrayRef shape) { return tessera::tensor(v, shape, DType::I64); }
Tensor i32(std::initializer_list<double> v, IntArrayRef shape) { return tessera::tensor(v, shape, DType::I32); }
Tensor f32(std::initializer_list<double> v, IntArrayRef shape) { return tessera::tensor(v, shape, DType::F32); }
Tensor mask(std::initializer_list<double> v, IntArrayRef shape) { return tessera::tensor(v, shape, DType::Bool); }
Tensor none() { return Tensor(); }

// ---- unary ----
OpSample sample_neg() { return {{rn({2, 3}, 1)}, {}}; }
OpSample sample_abs() { return {{rn({2, 3}, 2)}, {}}; }
OpSample sample_exp() { return {{rn({2, 3}, 3)}, {}}; }
OpSample sample_exp2() { return {{rn({2, 3}, 4)}, {}}; }
OpSample sample_log() { return {{pos({2, 3}, 5)}, {}}; }
OpSample sample_log2() { return {{pos({2, 3}, 6)}, {}}; }
OpSample sample_log1p() { return {{pos({2, 3}, 7)}, {}}; }
OpSample sample_expm1() { return {{rn({2, 3}, 8)}, {}}; }
OpSample sample_sqrt() { return {{pos({2, 3}, 9)}, {}}; }
OpSample sample_rsqrt() { return {{pos({2, 3}, 10)}, {}}; }
OpSample sample_square() { return {{rn({2, 3}, 11)}, {}}; }
OpSample sample_sin() { return {{rn({2, 3}, 12)}, {}}; }
OpSample sample_cos() { return {{rn({2, 3}, 13)}, {}}; }
OpSample sample_tan() { return {{ru({2, 3}, -1.0, 1.0, 14)}, {}}; }
OpSample sample_tanh() { return {{rn({2, 3}, 15)}, {}}; }
OpSample sample_sigmoid() { return {{rn({2, 3}, 16)}, {}}; }
OpSample sample_relu() { return {{rn({2, 3}, 17)}, {}}; }
OpSample sample_leaky_relu() { return {{rn({2, 3}, 18)}, {{"negative_slope", 0.01}}}; }
OpSample sample_elu() { return {{rn({2, 3}, 19)}, {{"alpha", 1.0}}}; }
OpSample sample_gelu() { return {{rn({2, 3}, 20)}, {{"approximate", "none"s}}}; }
OpSample sample_silu() { return {{rn({2, 3}, 21)}, {}}; }
OpSample sample_mish() { return {{rn({2, 3}, 22)}, {}}; }
OpSample sample_softplus() { return {{rn({2, 3}, 23)}, {{"beta", 1.0}, {"threshold", 20.0}}}; }
OpSample sample_hardtanh() { return {{rn({2, 3}, 24)}, {{"min_val", -1.0}, {"max_val", 1.0}}}; }
OpSample sample_sign() { return {{rn({2, 3}, 25)}, {}}; }
OpSample sample_floor() { return {{rn({2, 3}, 26)}, {}}; }
OpSample sample_ceil() { return {{rn({2, 3}, 27)}, {}}; }
OpSample sample_round() { return {{rn({2, 3}, 28)}, {}}; }
OpSample sample_trunc() { return {{rn({2, 3}, 29)}, {}}; }
// The Scalar form (as clamp(x, min, max) records it): one input, the bounds as attributes.
OpSample sample_clamp() { return {{rn({2, 3}, 30)}, {{"min", Scalar(-0.5)}, {"max", Scalar(0.5)}}}; }
OpSample sample_reciprocal() { return {{pos({2, 3}, 31)}, {}}; }
OpSample sample_erf() { return {{rn({2, 3}, 32)}, {}}; }
// tensor ** Scalar: one input, the exponent as an attribute.
OpSample sample_pow() { return {{pos({2, 3}, 33)}, {{"exponent", Scalar(2.0)}}}; }
OpSample sample_isnan() { return {{f32({1.0, NAN, INFINITY, -INFINITY, 0.0, -2.0}, {2, 3})}, {}}; }
OpSample sample_isinf() { return {{f32({1.0, NAN, INFINITY, -INFINITY, 0.0, -2.0}, {2, 3})}, {}}; }
OpSample sample_isfinite() { return {{f32({1.0, NAN, INFINITY, -INFINITY, 0.0, -2.0}, {2, 3})}, {}}; }
OpSample sample_nan_to_num() { return {{rn({2, 3}, 34)}, {{"nan", 0.0}, {"posinf", 1.0}, {"neginf", -1.0}}}; }
OpSample sample_logical_not() { return {{mask({1, 0, 1, 0, 0, 1}, {2, 3})}, {}}; }

// ---- binary ----
OpSample sample_add() { return {{rn({2, 3}, 40), rn({2, 3}, 41)}, {{"alpha", Scalar(1)}}}; }
OpSample sample_sub() { return {{rn({2, 3}, 42), rn({2, 3}, 43)}, {{"alpha", Scalar(1)}}}; }
OpSample sample_mul() { return {{rn({2, 3}, 44), rn({2, 3}, 45)}, {}}; }
OpSample sample_div() { return {{rn({2, 3}, 46), pos({2, 3}, 47)}, {{"rounding_mode", ""s}}}; }
OpSample sample_floor_divide() { return {{rn({2, 3}, 48), pos({2, 3}, 49)}, {}}; }
OpSample sample_remainder() { return {{rn({2, 3}, 50), pos({2, 3}, 51)}, {}}; }
OpSample sample_maximum() { return {{rn({2, 3}, 52), rn({2, 3}, 53)}, {}}; }
OpSample sample_minimum() { return {{rn({2, 3}, 54), rn({2, 3}, 55)}, {}}; }
OpSample sample_atan2() { return {{rn({2, 3}, 56), pos({2, 3}, 57)}, {}}; }
OpSample sample_eq() { return {{f32({1, 2, 3, 4, 5, 6}, {2, 3}), f32({1, 0, 3, 0, 5, 0}, {2, 3})}, {}}; }
OpSample sample_ne() { return {{f32({1, 2, 3, 4, 5, 6}, {2, 3}), f32({1, 0, 3, 0, 5, 0}, {2, 3})}, {}}; }
OpSample sample_lt() { return {{rn({2, 3}, 58), rn({2, 3}, 59)}, {}}; }
OpSample sample_le() { return {{rn({2, 3}, 60), rn({2, 3}, 61)}, {}}; }
OpSample sample_gt() { return {{rn({2, 3}, 62), rn({2, 3}, 63)}, {}}; }
OpSample sample_ge() { return {{rn({2, 3}, 64), rn({2, 3}, 65)}, {}}; }
OpSample sample_logical_and() { return {{mask({1, 0, 1, 0, 1, 1}, {2, 3}), mask({1, 1, 0, 0, 1, 0}, {2, 3})}, {}}; }
OpSample sample_logical_or() { return {{mask({1, 0, 1, 0, 1, 1}, {2, 3}), mask({1, 1, 0, 0, 1, 0}, {2, 3})}, {}}; }
OpSample sample_logical_xor() { return {{mask({1, 0, 1, 0, 1, 1}, {2, 3}), mask({1, 1, 0, 0, 1, 0}, {2, 3})}, {}}; }
OpSample sample_where() { return {{mask({1, 0, 1, 0, 1, 1}, {2, 3}), rn({2, 3}, 66), rn({2, 3}, 67)}, {}}; }
// lerp(start, end, Scalar weight): two inputs, the weight as an attribute.
OpSample sample_lerp() { return {{rn({2, 3}, 68), rn({2, 3}, 69)}, {{"weight", Scalar(0.3)}}}; }
OpSample sample_addcmul() { return {{rn({2, 3}, 70), rn({2, 3}, 71), rn({2, 3}, 72)}, {{"value", Scalar(0.5)}}}; }
OpSample sample_addcdiv() { return {{rn({2, 3}, 73), rn({2, 3}, 74), pos({2, 3}, 75)}, {{"value", Scalar(0.5)}}}; }

// ---- reductions ----
OpSample sample_sum() {
  return {{rn({2, 3}, 80)}, {{"dim", Ints{1}}, {"keepdim", false}, {"dtype", std::optional<DType>{}}}};
}
OpSample sample_mean() { return {{rn({2, 3}, 81)}, {{"dim", Ints{1}}, {"keepdim", false}}}; }
OpSample sample_prod() { return {{rn({2, 3}, 82)}, {{"dim", Ints{1}}, {"keepdim", false}}}; }
OpSample sample_amax() { return {{rn({2, 3}, 83)}, {{"dim", Ints{1}}, {"keepdim", false}}}; }
OpSample sample_amin() { return {{rn({2, 3}, 84)}, {{"dim", Ints{1}}, {"keepdim", false}}}; }
// Along a dim: both outputs (values, indices).
OpSample sample_max() { return {{rn({2, 3}, 85)}, {{"dim", int64_t{1}}, {"keepdim", false}}}; }
OpSample sample_min() { return {{rn({2, 3}, 86)}, {{"dim", int64_t{1}}, {"keepdim", false}}}; }
OpSample sample_argmax() { return {{rn({2, 3}, 87)}, {{"dim", int64_t{1}}, {"keepdim", false}}}; }
OpSample sample_argmin() { return {{rn({2, 3}, 88)}, {{"dim", int64_t{1}}, {"keepdim", false}}}; }
OpSample sample_var() { return {{rn({2, 3}, 89)}, {{"dim", Ints{1}}, {"keepdim", false}, {"correction", 1.0}}}; }
OpSample sample_std() { return {{rn({2, 3}, 90)}, {{"dim", Ints{1}}, {"keepdim", false}, {"correction", 1.0}}}; }
OpSample sample_logsumexp() { return {{rn({2, 3}, 91)}, {{"dim", Ints{1}}, {"keepdim", false}}}; }
OpSample sample_norm() { return {{rn({2, 3}, 92)}, {{"p", 2.0}, {"dim", Ints{1}}, {"keepdim", false}}}; }
OpSample sample_all() { return {{mask({1, 1, 1, 0, 1, 1}, {2, 3})}, {{"dim", Ints{1}}, {"keepdim", false}}}; }
OpSample sample_any() { return {{mask({0, 0, 0, 0, 1, 0}, {2, 3})}, {{"dim", Ints{1}}, {"keepdim", false}}}; }
OpSample sample_cumsum() { return {{rn({2, 3}, 93)}, {{"dim", int64_t{1}}}}; }
OpSample sample_cumprod() { return {{rn({2, 3}, 94)}, {{"dim", int64_t{1}}}}; }
OpSample sample_sum_to() { return {{rn({2, 3}, 95)}, {{"shape", Ints{3}}}}; }

// ---- linear algebra ----
OpSample sample_matmul() { return {{rn({2, 3}, 100), rn({3, 4}, 101)}, {}}; }
OpSample sample_bmm() { return {{rn({2, 2, 3}, 102), rn({2, 3, 4}, 103)}, {}}; }
OpSample sample_mm() { return {{rn({2, 3}, 104), rn({3, 4}, 105)}, {}}; }
OpSample sample_linear() { return {{rn({2, 3}, 106), rn({4, 3}, 107), rn({4}, 108)}, {}}; }
OpSample sample_addmm() {
  return {{rn({2, 4}, 109), rn({2, 3}, 110), rn({3, 4}, 111)}, {{"beta", Scalar(1)}, {"alpha", Scalar(1)}}};
}
OpSample sample_outer() { return {{rn({3}, 112), rn({4}, 113)}, {}}; }
OpSample sample_einsum() { return {{rn({2, 3}, 114), rn({3, 4}, 115)}, {{"equation", "ij,jk->ik"s}}}; }

// ---- shape ----
OpSample sample_cat() { return {{rn({2, 3}, 120), rn({1, 3}, 121)}, {{"dim", int64_t{0}}}}; }
OpSample sample_stack() { return {{rn({2, 3}, 122), rn({2, 3}, 123)}, {{"dim", int64_t{0}}}}; }
// split_size 2 of 5 rows: parts of 2, 2 and 1.
OpSample sample_split() { return {{rn({5, 3}, 124)}, {{"split_size", int64_t{2}}, {"dim", int64_t{0}}}}; }
OpSample sample_chunk() { return {{rn({4, 3}, 125)}, {{"chunks", int64_t{2}}, {"dim", int64_t{0}}}}; }
OpSample sample_unbind() { return {{rn({3, 2}, 126)}, {{"dim", int64_t{0}}}}; }
OpSample sample_pad() {
  return {{rn({1, 2, 3}, 127)}, {{"pad", Ints{1, 2}}, {"mode", "constant"s}, {"value", 0.0}}};
}
OpSample sample_flip() { return {{rn({2, 3}, 128)}, {{"dims", Ints{0}}}}; }
OpSample sample_roll() { return {{rn({2, 3}, 129)}, {{"shifts", Ints{1}}, {"dims", Ints{1}}}}; }
OpSample sample_repeat() { return {{rn({2, 3}, 130)}, {{"repeats", Ints{2, 1}}}}; }
OpSample sample_tile() { return {{rn({2, 3}, 131)}, {{"reps", Ints{2}}}}; }
OpSample sample_tril() { return {{rn({3, 3}, 132)}, {{"diagonal", int64_t{0}}}}; }
OpSample sample_triu() { return {{rn({3, 3}, 133)}, {{"diagonal", int64_t{0}}}}; }

// ---- indexing ----
OpSample sample_gather() { return {{rn({3, 4}, 140), i64({0, 3, 1, 1, 2, 0}, {3, 2})}, {{"dim", int64_t{1}}}}; }
// Distinct indices per row, so the result does not depend on the write order.
OpSample sample_scatter() {
  return {{rn({3, 4}, 141), i64({0, 3, 1, 2, 2, 0}, {3, 2}), rn({3, 2}, 142)}, {{"dim", int64_t{1}}}};
}
OpSample sample_scatter_add() {
  return {{rn({3, 4}, 143), i64({0, 3, 1, 1, 2, 0}, {3, 2}), rn({3, 2}, 144)}, {{"dim", int64_t{1}}}};
}
OpSample sample_index_select() { return {{rn({4, 3}, 145), i64({0, 2}, {2})}, {{"dim", int64_t{0}}}}; }
OpSample sample_index_add() {
  return {{rn({4, 3}, 146), i64({1, 3}, {2}), rn({2, 3}, 147)}, {{"dim", int64_t{0}}, {"alpha", Scalar(1)}}};
}
// The Scalar-value form: two inputs, the value as an attribute.
OpSample sample_masked_fill() {
  return {{rn({2, 3}, 148), mask({1, 0, 1, 0, 0, 1}, {2, 3})}, {{"value", Scalar(0.0)}}};
}
OpSample sample_masked_select() { return {{rn({2, 3}, 149), mask({1, 0, 1, 0, 0, 1}, {2, 3})}, {}}; }
OpSample sample_nonzero() { return {{f32({0, 1, 0, 2, 3, 0}, {2, 3})}, {}}; }
OpSample sample_one_hot() { return {{i64({0, 2, 1}, {3})}, {{"num_classes", int64_t{4}}}}; }
OpSample sample_topk() {
  return {{rn({2, 5}, 150)}, {{"k", int64_t{2}}, {"dim", int64_t{-1}}, {"largest", true}, {"sorted", true}}};
}
OpSample sample_sort() { return {{rn({2, 5}, 151)}, {{"dim", int64_t{-1}}, {"descending", false}, {"stable", false}}}; }
OpSample sample_argsort() {
  return {{rn({2, 5}, 152)}, {{"dim", int64_t{-1}}, {"descending", false}, {"stable", false}}};
}
OpSample sample_unique() {
  return {{i64({3, 1, 2, 1, 3}, {5})}, {{"sorted", true}, {"return_inverse", true}, {"return_counts", true}}};
}

// ---- views ----
OpSample sample_view() { return {{rn({2, 3}, 160)}, {{"shape", Ints{3, 2}}}}; }
OpSample sample_reshape() { return {{rn({2, 3}, 161)}, {{"shape", Ints{6}}}}; }
OpSample sample_permute() { return {{rn({2, 3}, 162)}, {{"dims", Ints{1, 0}}}}; }
OpSample sample_transpose() { return {{rn({2, 3}, 163)}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}}}; }
OpSample sample_slice() {
  return {{rn({4, 3}, 164)}, {{"dim", int64_t{0}}, {"start", int64_t{1}}, {"end", int64_t{3}}, {"step", int64_t{1}}}};
}
OpSample sample_select() { return {{rn({2, 3}, 165)}, {{"dim", int64_t{0}}, {"index", int64_t{1}}}}; }
OpSample sample_expand() { return {{rn({3, 1}, 166)}, {{"shape", Ints{3, 4}}}}; }
// A size-1 dim to remove (squeezing nothing returns the input itself).
OpSample sample_squeeze() { return {{rn({2, 1, 3}, 167)}, {{"dim", int64_t{1}}}}; }
OpSample sample_unsqueeze() { return {{rn({2, 3}, 168)}, {{"dim", int64_t{0}}}}; }
OpSample sample_diagonal() {
  return {{rn({3, 3}, 169)}, {{"offset", int64_t{0}}, {"dim1", int64_t{0}}, {"dim2", int64_t{1}}}};
}
OpSample sample_contiguous() { return {{rn({2, 3}, 170)}, {}}; }
OpSample sample_clone() { return {{rn({2, 3}, 171)}, {}}; }
OpSample sample_to_dtype() { return {{rn({2, 3}, 172)}, {{"dtype", DType::F64}}}; }
OpSample sample_detach() { return {{rn({2, 3}, 173)}, {}}; }
// grad [2, 2] written into zeros [3, 4] at rows 0-1, columns 1-2 (strides of [3, 4], offset 1).
OpSample sample_strided_scatter() {
  return {{rn({2, 2}, 174)},
          {{"base_shape", Ints{3, 4}}, {"sizes", Ints{2, 2}}, {"strides", Ints{4, 1}}, {"offset", int64_t{1}}}};
}

// ---- factories (no tensor inputs) ----
OpSample sample_full() { return {{}, {{"shape", Ints{2, 3}}, {"value", Scalar(1.5)}, {"dtype", DType::F32}}}; }
OpSample sample_arange() {
  return {{},
          {{"start", Scalar(0)}, {"end", Scalar(5)}, {"step", Scalar(1)}, {"dtype", std::optional<DType>{}}}};
}
OpSample sample_linspace() {
  return {{}, {{"start", 0.0}, {"end", 1.0}, {"steps", int64_t{5}}, {"dtype", DType::F32}}};
}
OpSample sample_eye() { return {{}, {{"n", int64_t{3}}, {"m", int64_t{4}}, {"dtype", DType::F32}}}; }

// ---- random (the default generator: a graph passes none) ----
OpSample sample_rand() { return {{}, {{"shape", Ints{2, 3}}, {"dtype", DType::F32}}}; }
OpSample sample_randn() { return {{}, {{"shape", Ints{2, 3}}, {"dtype", DType::F32}}}; }
OpSample sample_randint() {
  return {{}, {{"low", int64_t{0}}, {"high", int64_t{10}}, {"shape", Ints{2, 3}}, {"dtype", DType::I64}}};
}
OpSample sample_uniform() {
  return {{}, {{"shape", Ints{2, 3}}, {"low", -1.0}, {"high", 1.0}, {"dtype", DType::F32}}};
}
OpSample sample_normal() {
  return {{}, {{"shape", Ints{2, 3}}, {"mean", 0.0}, {"std", 1.0}, {"dtype", DType::F32}}};
}
// The shape form: no inputs at all (the invoker takes any input, even an
// undefined one, as the tensor of probabilities).
OpSample sample_bernoulli() {
  return {{}, {{"shape", Ints{4, 8}}, {"p", 0.5}, {"dtype", DType::F32}}};
}

// ---- normalization ----
OpSample sample_softmax() { return {{rn({2, 3}, 180)}, {{"dim", int64_t{1}}}}; }
OpSample sample_log_softmax() { return {{rn({2, 3}, 181)}, {{"dim", int64_t{1}}}}; }
OpSample sample_layer_norm() {
  return {{rn({2, 3}, 182), rn({3}, 183), rn({3}, 184)}, {{"normalized_shape", Ints{3}}, {"eps", 1e-5}}};
}
OpSample sample_rms_norm() {
  return {{rn({2, 3}, 185), rn({3}, 186)}, {{"normalized_shape", Ints{3}}, {"eps", 1e-6}}};
}
OpSample sample_group_norm() {
  return {{rn({2, 4, 3}, 187), rn({4}, 188), rn({4}, 189)}, {{"num_groups", int64_t{2}}, {"eps", 1e-5}}};
}
// Eval mode: the running statistics are read, not updated (the sample stays the same).
OpSample sample_batch_norm() {
  return {{rn({2, 3, 2, 2}, 190), rn({3}, 191), pos({3}, 192), rn({3}, 193), rn({3}, 194)},
          {{"training", false}, {"momentum", 0.1}, {"eps", 1e-5}}};
}
// Training with p > 0 on [4, 8]: draws from the default generator.
OpSample sample_dropout() { return {{rn({4, 8}, 195)}, {{"p", 0.5}, {"training", true}}}; }
OpSample sample_embedding() {
  return {{rn({5, 3}, 196), i64({0, 4, 2, 2}, {2, 2})}, {{"padding_idx", std::optional<int64_t>{}}}};
}

// ---- convolution and pooling ----
OpSample sample_conv1d() {
  return {{rn({1, 2, 6}, 200), rn({3, 2, 3}, 201), rn({3}, 202)},
          {{"stride", int64_t{1}},
           {"padding", int64_t{1}},
           {"dilation", int64_t{1}},
           {"groups", int64_t{1}},
           {"padding_same", false}}};
}
OpSample sample_conv2d() {
  return {{rn({1, 2, 5, 5}, 203), rn({3, 2, 3, 3}, 204), rn({3}, 205)},
          {{"stride", Ints{1, 1}},
           {"padding", Ints{1, 1}},
           {"dilation", Ints{1, 1}},
           {"groups", int64_t{1}},
           {"padding_same", false}}};
}
// weight [C_in, C_out / groups, KH, KW]; output [1, 3, 8, 8].
OpSample sample_conv_transpose2d() {
  return {{rn({1, 2, 4, 4}, 206), rn({2, 3, 3, 3}, 207), rn({3}, 208)},
          {{"stride", Ints{2, 2}},
           {"padding", Ints{1, 1}},
           {"output_padding", Ints{1, 1}},
           {"groups", int64_t{1}},
           {"dilation", Ints{1, 1}}}};
}
// With return_indices: both outputs (y [1, 2, 2, 2], indices).
OpSample sample_max_pool2d() {
  return {{rn({1, 2, 5, 5}, 209)},
          {{"kernel_size", Ints{2, 2}},
           {"stride", Ints{2, 2}},
           {"padding", Ints{0, 0}},
           {"dilation", Ints{1, 1}},
           {"ceil_mode", false},
           {"return_indices", true}}};
}
OpSample sample_avg_pool2d() {
  return {{rn({1, 2, 5, 5}, 210)},
          {{"kernel_size", Ints{3, 3}},
           {"stride", Ints{2, 2}},
           {"padding", Ints{1, 1}},
           {"ceil_mode", false},
           {"count_include_pad", true}}};
}
OpSample sample_adaptive_avg_pool2d() { return {{rn({1, 2, 5, 5}, 211)}, {{"output_size", Ints{2, 2}}}}; }
// By size (scale_factor empty: exactly one of them is given).
OpSample sample_interpolate() {
  return {{rn({1, 2, 3, 3}, 212)},
          {{"size", Ints{6, 6}}, {"scale_factor", Floats{}}, {"mode", "bilinear"s}, {"align_corners", false}}};
}

// ---- losses ----
OpSample sample_cross_entropy() {
  return {{rn({3, 4}, 220), i64({0, 3, 1}, {3}), none()},
          {{"ignore_index", int64_t{-100}}, {"reduction", "mean"s}, {"label_smoothing", 0.0}}};
}
OpSample sample_nll_loss() {
  return {{ops::log_softmax(rn({3, 4}, 221), 1), i64({0, 3, 1}, {3}), none()},
          {{"ignore_index", int64_t{-100}}, {"reduction", "mean"s}}};
}
OpSample sample_mse_loss() { return {{rn({2, 3}, 222), rn({2, 3}, 223)}, {{"reduction", "mean"s}}}; }
OpSample sample_l1_loss() { return {{rn({2, 3}, 224), rn({2, 3}, 225)}, {{"reduction", "mean"s}}}; }
OpSample sample_smooth_l1_loss() {
  return {{rn({2, 3}, 226), rn({2, 3}, 227)}, {{"reduction", "mean"s}, {"beta", 1.0}}};
}
// input: probabilities in (0, 1).
OpSample sample_binary_cross_entropy() {
  return {{ru({2, 3}, 0.1, 0.9, 228), ru({2, 3}, 0.0, 1.0, 229), none()}, {{"reduction", "mean"s}}};
}
OpSample sample_binary_cross_entropy_with_logits() {
  return {{rn({2, 3}, 230), ru({2, 3}, 0.0, 1.0, 231), none(), none()}, {{"reduction", "mean"s}}};
}
// input: log-probabilities; target: probabilities.
OpSample sample_kl_div() {
  return {{ops::log_softmax(rn({2, 3}, 232), 1), ops::softmax(rn({2, 3}, 233), 1)},
          {{"reduction", "mean"s}, {"log_target", false}}};
}

// ---- attention ----
// dropout_p = 0: deterministic, draws nothing.
OpSample sample_scaled_dot_product_attention() {
  return {{rn({1, 2, 3, 4}, 240), rn({1, 2, 5, 4}, 241), rn({1, 2, 5, 4}, 242), none()},
          {{"dropout_p", 0.0}, {"is_causal", false}, {"scale", std::optional<double>{}}}};
}
OpSample sample_attention_with_lse() {
  return {{rn({1, 2, 3, 4}, 243), rn({1, 2, 5, 4}, 244), rn({1, 2, 5, 4}, 245), none()},
          {{"is_causal", true}, {"scale", std::optional<double>{0.4}}}};
}

// ---- backward kernels ----
// relu's gradient: saved is relu's output.
OpSample sample_unary_backward() {
  return {{rn({2, 3}, 250), ops::relu(rn({2, 3}, 251))}, {{"function", "relu"s}}};
}
// output: the forward softmax's result.
OpSample sample_softmax_backward() {
  return {{rn({2, 3}, 252), ops::softmax(rn({2, 3}, 253), 1)}, {{"dim", int64_t{1}}, {"log", false}}};
}
OpSample sample_layer_norm_backward() {
  return {{rn({2, 3}, 254), rn({2, 3}, 255), rn({3}, 256)},
          {{"normalized_shape", Ints{3}}, {"eps", 1e-5}, {"rms", false}}};
}
// Training mode: the batch statistics, so no running stats are needed.
OpSample sample_batch_norm_backward() {
  return {{rn({2, 3, 2, 2}, 257), rn({2, 3, 2, 2}, 258), none(), none(), rn({3}, 259)},
          {{"training", true}, {"eps", 1e-5}}};
}
// conv2d's gradients: x [1, 2, 5, 5], weight [3, 2, 3, 3], padding 1, so grad is [1, 3, 5, 5].
OpSample sample_convolution_backward() {
  return {{rn({1, 3, 5, 5}, 260), rn({1, 2, 5, 5}, 261), rn({3, 2, 3, 3}, 262)},
          {{"stride", Ints{1, 1}},
           {"padding", Ints{1, 1}},
           {"padding_br", Ints{1, 1}},
           {"dilation", Ints{1, 1}},
           {"groups", int64_t{1}},
           {"transposed", false}}};
}
// The indices of a 2x2, stride-2 max_pool2d of a [1, 2, 5, 5] input.
OpSample sample_max_pool2d_backward() {
  Tensor idx = std::get<1>(ops::max_pool2d_with_indices(rn({1, 2, 5, 5}, 263), {2, 2}, {2, 2}));
  return {{rn({1, 2, 2, 2}, 264), idx}, {{"input_size", Ints{1, 2, 5, 5}}}};
}
// avg_pool2d of [1, 2, 5, 5], kernel 3, stride 2, padding 1: grad [1, 2, 3, 3].
OpSample sample_avg_pool2d_backward() {
  return {{rn({1, 2, 3, 3}, 265)},
          {{"input_size", Ints{1, 2, 5, 5}},
           {"kernel_size", Ints{3, 3}},
           {"stride", Ints{2, 2}},
           {"padding", Ints{1, 1}},
           {"ceil_mode", false},
           {"count_include_pad", true}}};
}
OpSample sample_attention_backward() {
  return {{rn({1, 2, 3, 4}, 266), rn({1, 2, 3, 4}, 267), rn({1, 2, 5, 4}, 268), rn({1, 2, 5, 4}, 269), none()},
          {{"is_causal", false}, {"scale", std::optional<double>{}}}};
}

// ---- quantized ----
// q8_0 (the blocks carry their scales: no scales or mins), in_features 32 (one block).
OpSample sample_quantized_linear() {
  quant::QuantizedWeight q = quant::quantize_weight(rn({4, 32}, 270), "q8_0");
  return {{rn({2, 32}, 271), q.qweight, none(), none(), rn({4}, 272)},
          {{"format", "q8_0"s}, {"group", int64_t{0}}, {"activations", "float"s}}};
}
// int8 per row: u8 rows [4, 32] and f32 scales [4].
OpSample sample_dequantize_weight() {
  quant::QuantizedWeight q = quant::quantize_weight(rn({4, 32}, 273), "int8");
  return {{q.qweight, q.scales, none()}, {{"format", "int8"s}, {"group", int64_t{0}}}};
}
OpSample sample_quantize_per_tensor() {
  return {{rn({2, 3}, 274)}, {{"scale", 0.02}, {"zero_point", int64_t{128}}, {"dtype", DType::U8}}};
}
OpSample sample_dequantize_per_tensor() {
  return {{ops::quantize_per_tensor(rn({2, 3}, 275), 0.02, 128)}, {{"scale", 0.02}, {"zero_point", int64_t{128}}}};
}
// x: u8 codes in [0, 127] (valid without VNNI too); weight: s8 [OC, C, KH, KW] with per-channel scales.
OpSample sample_int8_conv2d() {
  Tensor xq = ops::quantize_per_tensor(ru({1, 4, 5, 5}, 0.0, 1.0, 276), 1.0 / 127, 0);
  auto [wq, ws] = quant::quantize_weight_per_channel(rn({4, 4, 3, 3}, 277));
  return {{xq, wq, ws, ru({4}, -0.2, 0.2, 278)},
          {{"stride", Ints{1, 1}},
           {"padding", Ints{1, 1}},
           {"dilation", Ints{1, 1}},
           {"groups", int64_t{1}},
           {"padding_same", false},
           {"x_scale", 1.0 / 127},
           {"x_zero_point", int64_t{0}},
           {"y_scale", 0.05},
           {"y_zero_point", int64_t{0}},
           {"activation", "relu"s},
           {"out_dtype", DType::U8}}};
}
// f32 output (y_scale and y_zero_point are then unused).
OpSample sample_int8_linear() {
  Tensor xq = ops::quantize_per_tensor(ru({2, 16}, 0.0, 1.0, 279), 1.0 / 127, 0);
  auto [wq, ws] = quant::quantize_weight_per_channel(rn({4, 16}, 280));
  return {{xq, wq, ws, ru({4}, -0.2, 0.2, 281)},
          {{"x_scale", 1.0 / 127},
           {"x_zero_point", int64_t{0}},
           {"y_scale", 0.05},
           {"y_zero_point", int64_t{0}},
           {"activation", "none"s},
           {"out_dtype", DType::F32}}};
}
// Per channel along axis 1: f32 scale and zero_point [3].
OpSample sample_fake_quantize() {
  return {{rn({2, 3}, 282), f32({0.05, 0.1, 0.2}, {3}), f32({0, 0, 0}, {3})},
          {{"axis", int64_t{1}}, {"quant_min", int64_t{-128}}, {"quant_max", int64_t{127}}}};
}

// ---- sparse ----
// W [3, 4] in CSR: row 0 has columns 0 and 3, row 1 is empty, row 2 has column 1.
OpSample sample_sparse_linear() {
  return {{rn({2, 4}, 290), f32({1.0, -2.0, 0.5}, {3}), i32({0, 3, 1}, {3}), i64({0, 2, 2, 3}, {4}), rn({3}, 291)},
          {{"in_features", int64_t{4}}}};
}

// ---- communication: on this process's world (of one, outside mpirun) ----
OpSample sample_all_reduce() { return {{rn({2, 3}, 320)}, {{"group", "world"s}}}; }
OpSample sample_all_gather() { return {{rn({2, 3}, 321)}, {{"group", "world"s}, {"dim", int64_t{1}}}}; }
OpSample sample_reduce_scatter() { return {{rn({2, 4}, 322)}, {{"group", "world"s}, {"dim", int64_t{1}}}}; }
OpSample sample_copy_to_group() { return {{rn({2, 3}, 323)}, {{"group", "world"s}}}; }
OpSample sample_reduce_from_group() { return {{rn({2, 3}, 324)}, {{"group", "world"s}}}; }
OpSample sample_gather_from_group() { return {{rn({2, 3}, 325)}, {{"group", "world"s}, {"dim", int64_t{-1}}}}; }
OpSample sample_scatter_to_group() { return {{rn({2, 3}, 326)}, {{"group", "world"s}, {"dim", int64_t{0}}}}; }

// ---- made by the compiler ----
OpSample sample_fused_elementwise() {
  return {{rn({2, 3}, 300)}, {{"program", "r0 = in0; r1 = Relu r0; out0 = r1"s}}};
}
OpSample sample_fused_linear() {
  return {{rn({2, 3}, 301), rn({4, 3}, 302), rn({4}, 303), rn({2, 4}, 304)}, {{"activation", "relu"s}}};
}
// NCHW in and out (blocks 0), with a residual of the output's shape.
OpSample sample_fused_conv2d() {
  return {{rn({1, 2, 5, 5}, 305), rn({3, 2, 3, 3}, 306), rn({3}, 307), rn({1, 3, 5, 5}, 308)},
          {{"stride", Ints{1, 1}},
           {"padding", Ints{1, 1}},
           {"dilation", Ints{1, 1}},
           {"groups", int64_t{1}},
           {"padding_same", false},
           {"activation", "relu"s},
           {"input_block", int64_t{0}},
           {"output_block", int64_t{0}},
           {"constant_weights", false}}};
}
// NCHW [1, 8, 3, 3] to blocked [1, 1, 3, 3, 8].
OpSample sample_channel_blocks() { return {{rn({1, 8, 3, 3}, 309)}, {{"block", int64_t{8}}}}; }

}  // namespace

const std::vector<OpSample>& op_samples() {
  static const std::vector<OpSample> s = {
#define OP(name, ...) sample_##name(),
#include "ops/ops.def"
#undef OP
  };
  return s;
}

}  // namespace tessera::testing
