// PyTorch parity ("golden") tests: every deterministic op in ops.h, forward
// and backward, against tests/golden/ops.bin (written by
// tests/golden/generate.py; format and tolerances in tests/golden/README.md).
//
// Each row below, G(op, case, expression), is the twin of a C(...) row of
// generate.py with the same op and case names, in the same order: the C++
// expression must compute what the Python one does. Inputs in0..in5 of the
// file are bound to a..f. A case runs once per dtype stored for it; floating
// inputs with a stored gradient get requires_grad, and the gradient of
// sum(out_i * v_i) is compared with PyTorch's.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "golden_reader.h"
#include "tessera/autograd/engine.h"
#include "tessera/ops/ops.h"

namespace tessera {
namespace {

namespace ops = tessera::ops;
using golden::Case;

// ---- turning an op's result into a list of outputs -----------------------------------
TensorList outs(const Tensor& t) { return {t}; }
TensorList outs(const TensorList& ts) { return ts; }
TensorList outs(const std::tuple<Tensor, Tensor>& t) { return {std::get<0>(t), std::get<1>(t)}; }
// unique: the tensors that were asked for, as torch.unique returns them.
TensorList outs(const std::tuple<Tensor, Tensor, Tensor>& t) {
  TensorList r;
  for (const Tensor& x : {std::get<0>(t), std::get<1>(t), std::get<2>(t)})
    if (x.defined()) r.push_back(x);
  return r;
}

Tensor arg(const TensorList& in, size_t i) { return i < in.size() ? in[i] : Tensor(); }

// Twin of generate.py's bn(): batch_norm plus the running stats it updated.
TensorList bn(const Tensor& x, const Tensor& rm, const Tensor& rv, const Tensor& w, const Tensor& b, bool training,
              double momentum, double eps) {
  Tensor m = rm.defined() ? rm.clone() : Tensor(), v = rv.defined() ? rv.clone() : Tensor();
  TensorList r{ops::batch_norm(x, m, v, w, b, training, momentum, eps)};
  if (m.defined()) r.push_back(m);
  if (v.defined()) r.push_back(v);
  return r;
}

constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();

using Fn = TensorList (*)(const TensorList&);
struct Entry {
  const char* op;
  const char* name;
  Fn fn;
};

#define G(OP, NAME, ...)                                                                     \
  Entry {                                                                                    \
    OP, NAME, [](const TensorList& in_) -> TensorList {                                      \
      [[maybe_unused]] const Tensor a = arg(in_, 0), b = arg(in_, 1), c = arg(in_, 2);       \
      [[maybe_unused]] const Tensor d = arg(in_, 3), e = arg(in_, 4), f = arg(in_, 5);       \
      return outs(__VA_ARGS__);                                                              \
    }                                                                                        \
  }

// =============================================================================
// The table: the C++ twin of generate.py's, row for row.
// =============================================================================

const std::vector<Entry> kUnary = {
    G("neg", "main", ops::neg(a)),
    G("neg", "zero", ops::neg(a)),
    G("neg", "int", ops::neg(a)),
    G("abs", "main", ops::abs(a)),
    G("abs", "grid", ops::abs(a)),
    G("abs", "int", ops::abs(a)),
    G("exp", "main", ops::exp(a)),
    G("exp", "zero", ops::exp(a)),
    G("exp", "strided", ops::exp(a.t())),
    G("exp", "int", ops::exp(a)),
    G("exp", "special", ops::exp(a)),
    G("exp2", "main", ops::exp2(a)),
    G("log", "main", ops::log(a)),
    G("log", "int", ops::log(a)),
    G("log", "special", ops::log(a)),
    G("log2", "main", ops::log2(a)),
    G("log1p", "main", ops::log1p(a)),
    G("expm1", "main", ops::expm1(a)),
    G("sqrt", "main", ops::sqrt(a)),
    G("sqrt", "int", ops::sqrt(a)),
    G("sqrt", "special", ops::sqrt(a)),
    G("rsqrt", "main", ops::rsqrt(a)),
    G("square", "main", ops::square(a)),
    G("square", "int", ops::square(a)),
    G("sin", "main", ops::sin(a)),
    G("sin", "3d", ops::sin(a)),
    G("cos", "main", ops::cos(a)),
    G("tan", "main", ops::tan(a)),
    G("tanh", "main", ops::tanh(a)),
    G("tanh", "big", ops::tanh(a)),
    G("tanh", "special", ops::tanh(a)),
    G("sigmoid", "main", ops::sigmoid(a)),
    G("sigmoid", "big", ops::sigmoid(a)),
    G("sigmoid", "int", ops::sigmoid(a)),
    G("sigmoid", "zero", ops::sigmoid(a)),
    G("sigmoid", "special", ops::sigmoid(a)),
    G("relu", "main", ops::relu(a)),
    G("relu", "grid", ops::relu(a)),
    G("relu", "int", ops::relu(a)),
    G("relu", "zero", ops::relu(a)),
    G("relu", "special", ops::relu(a)),
    G("leaky_relu", "main", ops::leaky_relu(a)),
    G("leaky_relu", "slope", ops::leaky_relu(a, 0.2)),
    G("elu", "main", ops::elu(a)),
    G("elu", "alpha", ops::elu(a, 0.5)),
    G("gelu", "main", ops::gelu(a)),
    G("gelu", "tanh", ops::gelu(a, "tanh")),
    G("gelu", "zero", ops::gelu(a)),
    G("gelu", "special", ops::gelu(a)),
    G("silu", "main", ops::silu(a)),
    G("silu", "special", ops::silu(a)),
    G("mish", "main", ops::mish(a)),
    G("softplus", "main", ops::softplus(a)),
    G("softplus", "beta", ops::softplus(a, 2.0, 1.0)),
    G("softplus", "special", ops::softplus(a)),
    G("hardtanh", "main", ops::hardtanh(a)),
    G("hardtanh", "grid", ops::hardtanh(a, -0.5, 1.5)),
    G("hardtanh", "int", ops::hardtanh(a, -2, 3)),
    G("sign", "grid", ops::sign(a)),
    G("sign", "int", ops::sign(a)),
    G("sign", "special", ops::sign(a)),
    G("floor", "grid", ops::floor(a)),
    G("floor", "main", ops::floor(a)),
    G("floor", "int", ops::floor(a)),
    G("floor", "special", ops::floor(a)),
    G("ceil", "grid", ops::ceil(a)),
    G("ceil", "main", ops::ceil(a)),
    G("round", "grid", ops::round(a)),
    G("round", "main", ops::round(a)),
    G("round", "special", ops::round(a)),
    G("trunc", "grid", ops::trunc(a)),
    G("trunc", "main", ops::trunc(a)),
    G("clamp", "main", ops::clamp(a, -0.5, 0.5)),
    G("clamp", "grid", ops::clamp(a, -1.0, 1.0)),
    G("clamp", "min", ops::clamp(a, 0.25, std::nullopt)),
    G("clamp", "max", ops::clamp(a, std::nullopt, 0.25)),
    G("clamp", "int", ops::clamp(a, -2, 3)),
    G("clamp", "int_float", ops::clamp(a, -2.5, 3)),
    G("clamp", "tensor", ops::clamp(a, b, c)),
    G("clamp", "tensor_min", ops::clamp(a, b, Tensor())),
    G("clamp", "special", ops::clamp(a, -1.0, 1.0)),
    G("reciprocal", "main", ops::reciprocal(a)),
    G("reciprocal", "int", ops::reciprocal(a)),
    G("reciprocal", "special", ops::reciprocal(a)),
    G("erf", "main", ops::erf(a)),
    G("erf", "special", ops::erf(a)),
    G("pow", "scalar2", ops::pow(a, 2)),
    G("pow", "scalar3", ops::pow(a, 3)),
    G("pow", "scalar0", ops::pow(a, 0)),
    G("pow", "half", ops::pow(a, 0.5)),
    G("pow", "neg", ops::pow(a, -1.5)),
    G("pow", "int", ops::pow(a, 2)),
    G("pow", "int_float", ops::pow(a, 0.5)),
    G("pow", "base", ops::pow(2.0, a)),
    G("pow", "base_frac", ops::pow(0.5, a)),
    G("pow", "base_int", ops::pow(2, a)),
    G("pow", "special", ops::pow(a, 2)),
    G("isnan", "special", ops::isnan(a)),
    G("isnan", "int", ops::isnan(a)),
    G("isinf", "special", ops::isinf(a)),
    G("isfinite", "special", ops::isfinite(a)),
    G("nan_to_num", "default", ops::nan_to_num(a)),
    G("nan_to_num", "values", ops::nan_to_num(a, 0.5, 100.0, -100.0)),
    G("nan_to_num", "int", ops::nan_to_num(a)),
    G("logical_not", "grid", ops::logical_not(a)),
    G("logical_not", "bool", ops::logical_not(a)),
    G("logical_not", "int", ops::logical_not(a)),
};

#define TS_GOLDEN_COMPARE(OP)                                  \
  G(#OP, "main", ops::OP(a, b)),                               \
  G(#OP, "bcast", ops::OP(a, b)),                              \
  G(#OP, "int", ops::OP(a, b)),                                \
  G(#OP, "int_float", ops::OP(a, b)),                          \
  G(#OP, "scalar", ops::OP(a, 1)),                             \
  G(#OP, "int_scalar_float", ops::OP(a, 0.5))
#define TS_GOLDEN_LOGICAL(OP)                                  \
  G(#OP, "bool", ops::OP(a, b)),                               \
  G(#OP, "float", ops::OP(a, b)),                              \
  G(#OP, "bcast", ops::OP(a, b))

const std::vector<Entry> kBinary = {
    G("add", "main", ops::add(a, b)),
    G("add", "bcast", ops::add(a, b)),
    G("add", "alpha", ops::add(a, b, 2.5)),
    G("add", "zero", ops::add(a, b)),
    G("add", "strided", ops::add(a.t(), b)),
    G("add", "int", ops::add(a, b)),
    G("add", "int_alpha", ops::add(a, b, 3)),
    G("add", "int_float", ops::add(a, b)),
    G("add", "f16_f32", ops::add(a, b)),
    G("add", "i32_i64", ops::add(a, b)),
    G("add", "f32_0d_f64", ops::add(a, b)),
    G("add", "scalar_int", ops::add(a, 2)),
    G("add", "scalar_float", ops::add(a, 2.5)),
    G("add", "int_scalar_int", ops::add(a, 2)),
    G("add", "int_scalar_float", ops::add(a, 2.5)),
    G("add", "rscalar", ops::add(2.5, a)),
    G("sub", "main", ops::sub(a, b)),
    G("sub", "bcast", ops::sub(a, b)),
    G("sub", "alpha", ops::sub(a, b, 0.5)),
    G("sub", "int", ops::sub(a, b)),
    G("sub", "scalar", ops::sub(a, 1.5)),
    G("sub", "rscalar", ops::sub(1, a)),
    G("sub", "int_rscalar", ops::sub(1, a)),
    G("sub", "zero", ops::sub(a, b)),
    G("mul", "main", ops::mul(a, b)),
    G("mul", "bcast", ops::mul(a, b)),
    G("mul", "zero", ops::mul(a, b)),
    G("mul", "int", ops::mul(a, b)),
    G("mul", "bool_float", ops::mul(a, b)),
    G("mul", "scalar", ops::mul(a, -1.5)),
    G("mul", "rscalar", ops::mul(3, a)),
    G("mul", "expanded", ops::mul(a.expand({3, 4}), b.t())),
    G("div", "main", ops::div(a, b)),
    G("div", "bcast", ops::div(a, b)),
    G("div", "floor", ops::div(a, b, "floor")),
    G("div", "trunc", ops::div(a, b, "trunc")),
    G("div", "int", ops::div(a, b)),
    G("div", "int_floor", ops::div(a, b, "floor")),
    G("div", "int_trunc", ops::div(a, b, "trunc")),
    G("div", "scalar", ops::div(a, 4)),
    G("div", "scalar_floor", ops::div(a, 3, "floor")),
    G("div", "rscalar", ops::div(2.0, a)),
    G("div", "zero", ops::div(a, b)),
    G("div", "special", ops::div(a, b)),
    G("floor_divide", "main", ops::floor_divide(a, b)),
    G("floor_divide", "int", ops::floor_divide(a, b)),
    G("remainder", "main", ops::remainder(a, b)),
    G("remainder", "int", ops::remainder(a, b)),
    G("remainder", "scalar", ops::remainder(a, 1.5)),
    G("remainder", "int_scalar", ops::remainder(a, 4)),
    G("pow", "tensor", ops::pow(a, b)),
    G("pow", "tensor_bcast", ops::pow(a, b)),
    G("pow", "tensor_int", ops::pow(a, b)),
    G("maximum", "main", ops::maximum(a, b)),
    G("maximum", "ties", ops::maximum(a, b)),
    G("maximum", "int", ops::maximum(a, b)),
    G("maximum", "zero", ops::maximum(a, b)),
    G("maximum", "special", ops::maximum(a, b)),
    G("minimum", "main", ops::minimum(a, b)),
    G("minimum", "ties", ops::minimum(a, b)),
    G("minimum", "special", ops::minimum(a, b)),
    G("atan2", "main", ops::atan2(a, b)),
    G("atan2", "bcast", ops::atan2(a, b)),
    G("atan2", "special", ops::atan2(a, b)),
    TS_GOLDEN_COMPARE(eq),
    TS_GOLDEN_COMPARE(ne),
    TS_GOLDEN_COMPARE(lt),
    TS_GOLDEN_COMPARE(le),
    TS_GOLDEN_COMPARE(gt),
    TS_GOLDEN_COMPARE(ge),
    G("eq", "zero", ops::eq(a, b)),
    TS_GOLDEN_LOGICAL(logical_and),
    TS_GOLDEN_LOGICAL(logical_or),
    TS_GOLDEN_LOGICAL(logical_xor),
    G("where", "main", ops::where(a, b, c)),
    G("where", "bcast", ops::where(a, b, c)),
    G("where", "scalar_other", ops::where(a, b, 0.5)),
    G("where", "scalar_self", ops::where(a, -1.0, b)),
    G("where", "int", ops::where(a, b, c)),
    G("where", "mixed", ops::where(a, b, c)),
    G("where", "zero", ops::where(a, b, c)),
    G("lerp", "tensor", ops::lerp(a, b, c)),
    G("lerp", "scalar", ops::lerp(a, b, 0.3)),
    G("addcmul", "main", ops::addcmul(a, b, c, 0.5)),
    G("addcmul", "default", ops::addcmul(a, b, c)),
    G("addcdiv", "main", ops::addcdiv(a, b, c, 0.5)),
    G("addcdiv", "default", ops::addcdiv(a, b, c)),
    // result_type: the output is an empty tensor of the result dtype.
    G("result_type", "i32_i64", empty({0}, ops::result_type(a, b))),
    G("result_type", "bool_i32", empty({0}, ops::result_type(a, b))),
    G("result_type", "u8_i64", empty({0}, ops::result_type(a, b))),
    G("result_type", "i64_f16", empty({0}, ops::result_type(a, b))),
    G("result_type", "f16_bf16", empty({0}, ops::result_type(a, b))),
    G("result_type", "f32_0d_f64", empty({0}, ops::result_type(a, b))),
    G("result_type", "i32_0d_i64", empty({0}, ops::result_type(a, b))),
    G("result_type", "i64_0d_f64", empty({0}, ops::result_type(a, b))),
    G("result_type", "f16_0d_f32", empty({0}, ops::result_type(a, b))),
};

const std::vector<Entry> kReduce = {
    G("sum", "all", ops::sum(a)),
    G("sum", "dim", ops::sum(a, {1})),
    G("sum", "dims_keep", ops::sum(a, {0, 2}, true)),
    G("sum", "neg_dim", ops::sum(a, {-1})),
    G("sum", "strided", ops::sum(a.transpose(0, 2), {1})),
    G("sum", "zero_all", ops::sum(a)),
    G("sum", "zero_dim", ops::sum(a, {0})),
    G("sum", "int", ops::sum(a, {1})),
    G("sum", "bool", ops::sum(a)),
    G("sum", "dtype", ops::sum(a, {1}, false, DType::F64)),
    G("sum", "int_dtype", ops::sum(a, {0}, false, DType::F32)),
    G("sum", "special", ops::sum(a, {1})),
    G("mean", "all", ops::mean(a)),
    G("mean", "dim", ops::mean(a, {1})),
    G("mean", "dims_keep", ops::mean(a, {0, 2}, true)),
    G("mean", "zero_dim", ops::mean(a, {1})),
    G("mean", "zero_empty", ops::mean(a, {0})),
    G("mean", "expanded", ops::mean(a.expand({3, 4}), {0})),
    G("prod", "all", ops::prod(a)),
    G("prod", "dim", ops::prod(a, {1})),
    G("prod", "keep", ops::prod(a, {0}, true)),
    G("prod", "zeros", ops::prod(a, {1})),
    G("prod", "zeros_all", ops::prod(a)),
    G("prod", "int", ops::prod(a, {1})),
    G("prod", "zero", ops::prod(a, {0})),
    G("amax", "all", ops::amax(a)),
    G("amax", "dims", ops::amax(a, {0, 2})),
    G("amax", "keep", ops::amax(a, {1}, true)),
    G("amax", "ties", ops::amax(a, {1})),
    G("amax", "int", ops::amax(a, {0})),
    G("amax", "zero", ops::amax(a, {1})),
    G("amax", "special", ops::amax(a, {1})),
    G("amin", "all", ops::amin(a)),
    G("amin", "dims", ops::amin(a, {0, 2})),
    G("amin", "ties", ops::amin(a, {1})),
    G("amin", "special", ops::amin(a, {1})),
    G("max", "all", ops::max(a)),
    G("max", "all_ties", ops::max(a)),
    G("max", "all_int", ops::max(a)),
    G("max", "all_special", ops::max(a)),
    G("max", "dim", ops::max(a, 1)),
    G("max", "dim_keep", ops::max(a, -1, true)),
    G("max", "dim_ties", ops::max(a, 1)),
    G("max", "dim_int", ops::max(a, 0)),
    G("max", "dim_zero", ops::max(a, 1)),
    G("max", "dim_special", ops::max(a, 1)),
    G("min", "all", ops::min(a)),
    G("min", "all_ties", ops::min(a)),
    G("min", "dim", ops::min(a, 1)),
    G("min", "dim_ties", ops::min(a, 1)),
    G("min", "dim_special", ops::min(a, 1)),
    G("argmax", "all", ops::argmax(a)),
    G("argmax", "dim", ops::argmax(a, 1)),
    G("argmax", "keep", ops::argmax(a, 0, true)),
    G("argmax", "all_keep", ops::argmax(a, std::nullopt, true)),
    G("argmax", "ties", ops::argmax(a, 1)),
    G("argmax", "int", ops::argmax(a, -1)),
    G("argmax", "zero", ops::argmax(a, 1)),
    G("argmax", "special", ops::argmax(a, 1)),
    G("argmin", "all", ops::argmin(a)),
    G("argmin", "dim", ops::argmin(a, 1)),
    G("argmin", "ties", ops::argmin(a, 1)),
    G("argmin", "special", ops::argmin(a, 1)),
    G("var", "all", ops::var(a)),
    G("var", "dim", ops::var(a, {1})),
    G("var", "corr0_keep", ops::var(a, {0, 2}, 0, true)),
    G("var", "corr2", ops::var(a, {1}, 2)),
    G("var", "zero", ops::var(a, {1})),
    G("std", "all", ops::std(a)),
    G("std", "dim", ops::std(a, {1})),
    G("std", "corr0_keep", ops::std(a, {0, 2}, 0, true)),
    G("logsumexp", "dim", ops::logsumexp(a, {1})),
    G("logsumexp", "dims_keep", ops::logsumexp(a, {0, 2}, true)),
    G("logsumexp", "big", ops::logsumexp(a, {-1})),
    G("logsumexp", "zero", ops::logsumexp(a, {1})),
    G("logsumexp", "neginf", ops::logsumexp(a, {1})),
    G("norm", "p2", ops::norm(a)),
    G("norm", "p2_dim", ops::norm(a, 2, {1}, true)),
    G("norm", "p1", ops::norm(a, 1, {1})),
    G("norm", "pinf", ops::norm(a, INFINITY, {0, 2})),
    G("norm", "zero", ops::norm(a)),
    G("all", "float", ops::all(a)),
    G("all", "dim", ops::all(a, {1})),
    G("all", "keep", ops::all(a, {0}, true)),
    G("all", "zero", ops::all(a)),
    G("any", "float", ops::any(a, {1})),
    G("any", "bool", ops::any(a)),
    G("any", "zero", ops::any(a)),
    G("cumsum", "dim0", ops::cumsum(a, 0)),
    G("cumsum", "dim_last", ops::cumsum(a, -1)),
    G("cumsum", "zero", ops::cumsum(a, 0)),
    G("cumsum", "int", ops::cumsum(a, 1)),
    G("cumsum", "bool", ops::cumsum(a, 0)),
    G("cumsum", "special", ops::cumsum(a, 1)),
    G("cumsum", "strided", ops::cumsum(a.t(), 1)),
    G("cumprod", "dim", ops::cumprod(a, 1)),
    G("cumprod", "zeros", ops::cumprod(a, 1)),
    G("cumprod", "int", ops::cumprod(a, 0)),
    G("cumprod", "zero", ops::cumprod(a, 1)),
    G("sum_to", "lead", ops::sum_to(a, {3, 1})),
    G("sum_to", "inner", ops::sum_to(a, {1, 3, 4})),
    G("sum_to", "same", ops::sum_to(a, {2, 3})),
};

const std::vector<Entry> kLinalg = {
    G("matmul", "2d", ops::matmul(a, b)),
    G("matmul", "1d_2d", ops::matmul(a, b)),
    G("matmul", "2d_1d", ops::matmul(a, b)),
    G("matmul", "1d_1d", ops::matmul(a, b)),
    G("matmul", "batched", ops::matmul(a, b)),
    G("matmul", "bcast", ops::matmul(a, b)),
    G("matmul", "1d_3d", ops::matmul(a, b)),
    G("matmul", "strided", ops::matmul(a.t(), b.t())),
    G("matmul", "zero_m", ops::matmul(a, b)),
    G("matmul", "zero_k", ops::matmul(a, b)),
    G("matmul", "int", ops::matmul(a, b)),
    G("mm", "main", ops::mm(a, b)),
    G("mm", "strided", ops::mm(a, b.t())),
    G("mm", "int", ops::mm(a, b)),
    G("bmm", "main", ops::bmm(a, b)),
    G("bmm", "strided", ops::bmm(a.transpose(1, 2), b)),
    G("bmm", "zero", ops::bmm(a, b)),
    G("linear", "bias", ops::linear(a, b, c)),
    G("linear", "nobias", ops::linear(a, b)),
    G("linear", "3d", ops::linear(a, b, c)),
    G("linear", "1d_weight", ops::linear(a, b)),
    G("linear", "zero", ops::linear(a, b, c)),
    G("addmm", "main", ops::addmm(a, b, c)),
    G("addmm", "scaled", ops::addmm(a, b, c, 0.5, 2)),
    G("outer", "main", ops::outer(a, b)),
    G("einsum", "mm", ops::einsum("ij,jk->ik", {a, b})),
    G("einsum", "bmm", ops::einsum("bij,bjk->bik", {a, b})),
    G("einsum", "attn", ops::einsum("bhld,bhsd->bhls", {a, b})),
    G("einsum", "transpose", ops::einsum("ij->ji", {a})),
    G("einsum", "sum_all", ops::einsum("ij->", {a})),
    G("einsum", "sum_dim", ops::einsum("ij->j", {a})),
    G("einsum", "dot", ops::einsum("i,i->", {a, b})),
    G("einsum", "outer", ops::einsum("i,j->ij", {a, b})),
    G("einsum", "diag", ops::einsum("ii->i", {a})),
    G("einsum", "ellipsis", ops::einsum("...ij,...jk->...ik", {a, b})),
    G("einsum", "implicit", ops::einsum("ij,jk", {a, b})),
};

const std::vector<Entry> kShape = {
    G("cat", "dim0", ops::cat({a, b}, 0)),
    G("cat", "dim1", ops::cat({a, b, c}, 1)),
    G("cat", "neg_dim", ops::cat({a, b}, -1)),
    G("cat", "zero", ops::cat({a, b}, 0)),
    G("cat", "int", ops::cat({a, b}, 1)),
    G("cat", "mixed", ops::cat({a, b}, 0)),
    G("cat", "strided", ops::cat({a.t(), b}, 0)),
    G("stack", "dim0", ops::stack({a, b, c}, 0)),
    G("stack", "dim_last", ops::stack({a, b}, -1)),
    G("stack", "dim1", ops::stack({a, b}, 1)),
    G("stack", "zero", ops::stack({a, b}, 1)),
    G("split", "size", ops::split(a, 2, 0)),
    G("split", "sizes", ops::split(a, {1, 3}, 1)),
    G("chunk", "main", ops::chunk(a, 3, 0)),
    G("chunk", "many", ops::chunk(a, 6, 1)),
    G("unbind", "dim1", ops::unbind(a, 1)),
    G("unbind", "dim0", ops::unbind(a, 0)),
    G("pad", "constant", ops::pad(a, {1, 2}, "constant", 0.5)),
    G("pad", "constant_2d", ops::pad(a, {1, 0, 2, 1})),
    G("pad", "negative", ops::pad(a, {-1, 2})),
    G("pad", "reflect", ops::pad(a, {2, 1}, "reflect")),
    G("pad", "reflect_2d", ops::pad(a, {1, 2, 2, 1}, "reflect")),
    G("pad", "replicate", ops::pad(a, {2, 3}, "replicate")),
    G("pad", "replicate_2d", ops::pad(a, {0, 2, 3, 1}, "replicate")),
    G("pad", "zero", ops::pad(a, {1, 1})),
    G("pad", "strided", ops::pad(a.transpose(1, 2), {1, 2}, "reflect")),
    G("flip", "dims", ops::flip(a, {0, 2})),
    G("flip", "last", ops::flip(a, {-1})),
    G("flip", "zero", ops::flip(a, {0})),
    G("roll", "dims", ops::roll(a, {2, -1}, {0, 1})),
    G("roll", "flat", ops::roll(a, {3})),
    G("repeat", "main", ops::repeat(a, {2, 1, 3})),
    G("repeat", "same_rank", ops::repeat(a, {2, 2})),
    G("tile", "fewer", ops::tile(a, {2})),
    G("tile", "more", ops::tile(a, {2, 1, 2})),
    G("tril", "main", ops::tril(a)),
    G("tril", "neg", ops::tril(a, -1)),
    G("tril", "batch", ops::tril(a, 2)),
    G("tril", "zero", ops::tril(a)),
    G("triu", "main", ops::triu(a)),
    G("triu", "pos", ops::triu(a, 1)),
    G("triu", "batch", ops::triu(a, -2)),
};

const std::vector<Entry> kIndex = {
    G("gather", "dim1", ops::gather(a, 1, b)),
    G("gather", "dim0", ops::gather(a, 0, b)),
    G("gather", "small", ops::gather(a, 1, b)),
    G("gather", "i32", ops::gather(a, 1, b)),  // b is i32 (PyTorch needs b.long())
    G("gather", "empty", ops::gather(a, 1, b)),
    G("gather", "strided", ops::gather(a.t(), 1, b)),
    G("scatter", "src", ops::scatter(a, 1, b, c)),
    G("scatter", "src_bigger", ops::scatter(a, 1, b, c)),
    G("scatter", "dim0", ops::scatter(a, 0, b, c)),
    G("scatter", "value", ops::scatter(a, 1, b, 2.5)),
    G("scatter", "int", ops::scatter(a, 1, b, c)),
    G("scatter_add", "main", ops::scatter_add(a, 1, b, c)),
    G("scatter_add", "src_bigger", ops::scatter_add(a, 0, b, c)),
    G("index_select", "dim1", ops::index_select(a, 1, b)),
    G("index_select", "dim0", ops::index_select(a, 0, b)),
    G("index_select", "i32", ops::index_select(a, 1, b)),
    G("index_select", "empty", ops::index_select(a, 0, b)),
    G("index_select", "strided", ops::index_select(a.t(), 0, b)),
    G("index_add", "main", ops::index_add(a, 0, b, c)),
    G("index_add", "alpha", ops::index_add(a, 1, b, c, 2.0)),
    G("masked_fill", "scalar", ops::masked_fill(a, b, -1.5)),
    G("masked_fill", "bcast", ops::masked_fill(a, b, 2.0)),
    G("masked_fill", "int", ops::masked_fill(a, b, 7)),
    G("masked_fill", "tensor", ops::masked_fill(a, b, c)),
    G("masked_select", "main", ops::masked_select(a, b)),
    G("masked_select", "bcast", ops::masked_select(a, b)),
    G("masked_select", "zero", ops::masked_select(a, b)),
    G("nonzero", "float", ops::nonzero(a)),
    G("nonzero", "bool", ops::nonzero(a)),
    G("nonzero", "int", ops::nonzero(a)),
    G("nonzero", "empty", ops::nonzero(a)),
    G("one_hot", "main", ops::one_hot(a, 5)),
    G("one_hot", "infer", ops::one_hot(a)),
    G("one_hot", "empty", ops::one_hot(a, 3)),
    G("topk", "largest", ops::topk(a, 2)),
    G("topk", "smallest", ops::topk(a, 3, 0, false)),
    G("topk", "int", ops::topk(a, 2)),
    G("topk", "k0", ops::topk(a, 0)),
    G("topk", "special", ops::topk(a, 2)),
    G("sort", "main", ops::sort(a)),
    G("sort", "desc_dim0", ops::sort(a, 0, true)),
    G("sort", "stable", ops::sort(a, -1, false, true)),
    G("sort", "stable_desc", ops::sort(a, 1, true, true)),
    G("sort", "int", ops::sort(a, -1, false, true)),
    G("sort", "zero", ops::sort(a)),
    G("sort", "special", ops::sort(a, 1, false, true)),
    G("sort", "special_desc", ops::sort(a, 1, true, true)),
    G("sort", "strided", ops::sort(a.t(), 1)),
    G("argsort", "main", ops::argsort(a)),
    G("argsort", "desc", ops::argsort(a, 0, true)),
    G("argsort", "stable", ops::argsort(a, -1, false, true)),
    G("unique", "float", ops::unique(a)),
    G("unique", "inverse", ops::unique(a, true, true)),
    G("unique", "counts", ops::unique(a, true, false, true)),
    G("unique", "both", ops::unique(a, true, true, true)),
    G("unique", "empty", ops::unique(a, true, false, true)),
};

const std::vector<Entry> kView = {
    G("view", "main", ops::view(a, {2, 6})),
    G("view", "infer", ops::view(a, {4, -1})),
    G("reshape", "contig", ops::reshape(a, {2, 2, 3})),
    G("reshape", "copy", ops::reshape(a.t(), {-1})),
    G("permute", "main", ops::permute(a, {2, 0, 1})),
    G("transpose", "main", ops::transpose(a, 0, 2)),
    G("transpose", "neg", ops::transpose(a, -1, -2)),
    G("slice", "step", ops::slice(a, 1, 1, 5, 2)),
    G("slice", "neg_start", ops::slice(a, 0, -3, kEnd)),
    G("slice", "clamp_end", ops::slice(a, 1, 2, 100)),
    G("select", "last", ops::select(a, 1, -1)),
    G("select", "dim0", ops::select(a, 0, 2)),
    G("expand", "main", ops::expand(a, {2, 3, 4})),
    G("expand", "infer", ops::expand(a, {-1, 5})),
    G("squeeze", "all", ops::squeeze(a)),
    G("squeeze", "dim", ops::squeeze(a, 1)),
    G("squeeze", "noop", ops::squeeze(a, 0)),
    G("unsqueeze", "front", ops::unsqueeze(a, 0)),
    G("unsqueeze", "back", ops::unsqueeze(a, -1)),
    G("diagonal", "main", ops::diagonal(a)),
    G("diagonal", "offset", ops::diagonal(a, 1)),
    G("diagonal", "neg_offset", ops::diagonal(a, -2)),
    G("diagonal", "3d", ops::diagonal(a, 0, 1, 2)),
    G("diagonal", "3d_swapped", ops::diagonal(a, -1, 2, 0)),
    G("contiguous", "transposed", ops::contiguous(a.t())),
    G("clone", "main", ops::clone(a)),
    G("to_dtype", "to_f64", ops::to_dtype(a, DType::F64)),
    G("to_dtype", "to_f32", ops::to_dtype(a, DType::F32)),
    G("to_dtype", "to_f16", ops::to_dtype(a, DType::F16)),
    G("to_dtype", "to_bf16", ops::to_dtype(a, DType::BF16)),
    G("to_dtype", "f16_to_f32", ops::to_dtype(a, DType::F32)),
    G("to_dtype", "to_i64", ops::to_dtype(a, DType::I64)),
    G("to_dtype", "to_i32", ops::to_dtype(a, DType::I32)),
    G("to_dtype", "to_u8", ops::to_dtype(a, DType::U8)),
    G("to_dtype", "to_bool", ops::to_dtype(a, DType::Bool)),
    G("to_dtype", "i64_to_f32", ops::to_dtype(a, DType::F32)),
    G("to_dtype", "i64_to_i32", ops::to_dtype(a, DType::I32)),
    G("to_dtype", "bool_to_f32", ops::to_dtype(a, DType::F32)),
};

const std::vector<Entry> kNN = {
    G("softmax", "last", ops::softmax(a, -1)),
    G("softmax", "dim0", ops::softmax(a, 0)),
    G("softmax", "3d", ops::softmax(a, 1)),
    G("softmax", "big", ops::softmax(a, -1)),
    G("softmax", "zero", ops::softmax(a, -1)),
    G("softmax", "neginf", ops::softmax(a, -1)),
    G("softmax", "strided", ops::softmax(a.t(), -1)),
    G("log_softmax", "last", ops::log_softmax(a, -1)),
    G("log_softmax", "3d", ops::log_softmax(a, 1)),
    G("log_softmax", "big", ops::log_softmax(a, -1)),
    G("log_softmax", "zero", ops::log_softmax(a, 0)),
    G("log_softmax", "neginf", ops::log_softmax(a, -1)),
    G("log_softmax", "strided", ops::log_softmax(a.transpose(0, 2), 1)),
    G("layer_norm", "affine", ops::layer_norm(a, {5}, b, c)),
    G("layer_norm", "plain", ops::layer_norm(a, {4, 5})),
    G("layer_norm", "weight_eps", ops::layer_norm(a, {5}, b, Tensor(), 1e-3)),
    G("layer_norm", "zero", ops::layer_norm(a, {5}, b, c)),
    G("layer_norm", "strided", ops::layer_norm(a.transpose(0, 1), {3}, b, c)),
    G("rms_norm", "weight", ops::rms_norm(a, {5}, b, 1e-5)),
    G("rms_norm", "plain", ops::rms_norm(a, {4, 5}, Tensor(), 1e-6)),
    G("rms_norm", "default_eps", ops::rms_norm(a, {5}, b)),
    G("rms_norm", "strided", ops::rms_norm(a.t(), {3}, b, 1e-5)),
    G("group_norm", "affine", ops::group_norm(a, 3, b, c)),
    G("group_norm", "plain", ops::group_norm(a, 2, Tensor(), Tensor(), 1e-3)),
    G("group_norm", "one_group", ops::group_norm(a, 1, b, c)),
    G("group_norm", "strided", ops::group_norm(a.transpose(1, 2), 2, b, c)),
    G("batch_norm", "eval", bn(a, b, c, d, e, false, 0.1, 1e-5)),
    G("batch_norm", "train", bn(a, b, c, d, e, true, 0.1, 1e-5)),
    G("batch_norm", "train_2d", bn(a, b, c, Tensor(), Tensor(), true, 0.3, 1e-3)),
    G("batch_norm", "train_nostats", bn(a, Tensor(), Tensor(), b, c, true, 0.1, 1e-5)),
    G("batch_norm", "strided", bn(a.transpose(1, 2), Tensor(), Tensor(), b, c, true, 0.1, 1e-5)),
    G("dropout", "eval", ops::dropout(a, 0.5, false)),
    G("dropout", "p0", ops::dropout(a, 0.0, true)),
    G("embedding", "main", ops::embedding(a, b)),
    G("embedding", "padding", ops::embedding(a, b, 1)),
    G("embedding", "i32", ops::embedding(a, b)),
    G("embedding", "zero", ops::embedding(a, b)),
    G("embedding", "strided", ops::embedding(a.t(), b)),
    G("conv1d", "main", ops::conv1d(a, b, c)),
    G("conv1d", "strided", ops::conv1d(a, b, c, 2, 1, 1, 2)),
    G("conv1d", "dilated", ops::conv1d(a, b, Tensor(), 1, 2, 2)),
    G("conv1d", "same", ops::conv1d(a, b, c, 1, 0, 1, 1, true)),
    G("conv1d", "noncontig", ops::conv1d(a.transpose(1, 2), b.transpose(0, 1), c)),
    G("conv2d", "main", ops::conv2d(a, b, c, {.padding = {1, 1}})),
    G("conv2d", "strided", ops::conv2d(a, b, Tensor(), {.stride = {2, 1}, .padding = {0, 1}, .dilation = {1, 2}})),
    G("conv2d", "depthwise", ops::conv2d(a, b, c, {.padding = {1, 1}, .groups = 4})),
    G("conv2d", "groups", ops::conv2d(a, b, c, {.stride = {2, 2}, .groups = 2})),
    G("conv2d", "same", ops::conv2d(a, b, Tensor(), {.dilation = {2, 1}, .padding_same = true})),
    G("conv2d", "zero_batch", ops::conv2d(a, b)),
    G("conv2d", "noncontig", ops::conv2d(a.permute({0, 3, 1, 2}), b, c, {.padding = {1, 1}})),
    G("conv_transpose2d", "main", ops::conv_transpose2d(a, b, c)),
    G("conv_transpose2d", "strided", ops::conv_transpose2d(a, b, c, {2, 2}, {1, 1}, {1, 1})),
    G("conv_transpose2d", "groups", ops::conv_transpose2d(a, b, Tensor(), {1, 2}, {0, 1}, {0, 1}, 2, {2, 1})),
    G("max_pool2d_with_indices", "main", ops::max_pool2d_with_indices(a, {2, 2})),
    G("max_pool2d_with_indices", "pad_ceil", ops::max_pool2d_with_indices(a, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true)),
    G("max_pool2d_with_indices", "dilated", ops::max_pool2d_with_indices(a, {2, 3}, {1, 2}, {0, 0}, {2, 2}, false)),
    G("max_pool2d", "main", ops::max_pool2d(a, {2, 2})),
    G("max_pool2d", "pad_ceil", ops::max_pool2d(a, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true)),
    G("max_pool2d", "3d_input", ops::max_pool2d(a, {2, 3}, {1, 2})),
    G("max_pool2d", "strided", ops::max_pool2d(a.transpose(2, 3), {2, 2})),
    G("avg_pool2d", "main", ops::avg_pool2d(a, {2, 2})),
    G("avg_pool2d", "pad", ops::avg_pool2d(a, {3, 3}, {2, 2}, {1, 1})),
    G("avg_pool2d", "pad_exclude", ops::avg_pool2d(a, {3, 3}, {2, 2}, {1, 1}, false, false)),
    G("avg_pool2d", "ceil", ops::avg_pool2d(a, {2, 2}, {2, 2}, {0, 0}, true)),
    G("avg_pool2d", "ceil_pad", ops::avg_pool2d(a, {3, 3}, {2, 2}, {1, 1}, true, true)),
    G("avg_pool2d", "strided", ops::avg_pool2d(a.transpose(2, 3), {2, 2})),
    G("adaptive_avg_pool2d", "div", ops::adaptive_avg_pool2d(a, {1, 3})),
    G("adaptive_avg_pool2d", "nondiv", ops::adaptive_avg_pool2d(a, {3, 4})),
    G("adaptive_avg_pool2d", "global", ops::adaptive_avg_pool2d(a, {1, 1})),
    G("adaptive_avg_pool2d", "up", ops::adaptive_avg_pool2d(a, {4, 5})),
    G("interpolate", "nearest_size", ops::interpolate(a, {5, 7})),
    G("interpolate", "nearest_scale", ops::interpolate(a, {}, {2.0, 1.5})),
    G("interpolate", "nearest_down", ops::interpolate(a, {2, 3})),
    G("interpolate", "bilinear", ops::interpolate(a, {5, 7}, {}, "bilinear", false)),
    G("interpolate", "bilinear_align", ops::interpolate(a, {5, 7}, {}, "bilinear", true)),
    G("interpolate", "bilinear_scale", ops::interpolate(a, {}, {1.5, 2.0}, "bilinear", false)),
    G("interpolate", "bilinear_down", ops::interpolate(a, {2, 3}, {}, "bilinear", false)),
    G("interpolate", "strided", ops::interpolate(a.transpose(2, 3), {5, 4}, {}, "bilinear", false)),
    G("cross_entropy", "main", ops::cross_entropy(a, b)),
    G("cross_entropy", "weight_sum", ops::cross_entropy(a, b, c, -100, "sum")),
    G("cross_entropy", "weight_mean", ops::cross_entropy(a, b, c)),
    G("cross_entropy", "ignore", ops::cross_entropy(a, b, Tensor(), 2)),
    G("cross_entropy", "smoothing", ops::cross_entropy(a, b, Tensor(), -100, "mean", 0.1)),
    G("cross_entropy", "smoothing_weight", ops::cross_entropy(a, b, c, -100, "mean", 0.2)),
    G("cross_entropy", "none", ops::cross_entropy(a, b, Tensor(), -100, "none")),
    G("cross_entropy", "spatial", ops::cross_entropy(a, b)),
    G("cross_entropy", "probs", ops::cross_entropy(a, b)),
    G("cross_entropy", "zero", ops::cross_entropy(a, b, Tensor(), -100, "none")),
    G("cross_entropy", "strided", ops::cross_entropy(a.t(), b)),
    G("nll_loss", "main", ops::nll_loss(a, b)),
    G("nll_loss", "weight", ops::nll_loss(a, b, c)),
    G("nll_loss", "ignore_sum", ops::nll_loss(a, b, Tensor(), 1, "sum")),
    G("nll_loss", "none", ops::nll_loss(a, b, Tensor(), -100, "none")),
    G("nll_loss", "spatial", ops::nll_loss(a, b)),
    G("mse_loss", "mean", ops::mse_loss(a, b)),
    G("mse_loss", "sum", ops::mse_loss(a, b, "sum")),
    G("mse_loss", "none", ops::mse_loss(a, b, "none")),
    G("mse_loss", "zero", ops::mse_loss(a, b, "sum")),
    G("l1_loss", "mean", ops::l1_loss(a, b)),
    G("l1_loss", "none", ops::l1_loss(a, b, "none")),
    G("smooth_l1_loss", "mean", ops::smooth_l1_loss(a, b)),
    G("smooth_l1_loss", "beta", ops::smooth_l1_loss(a, b, "none", 0.5)),
    G("smooth_l1_loss", "beta0", ops::smooth_l1_loss(a, b, "sum", 0.0)),
    G("binary_cross_entropy", "mean", ops::binary_cross_entropy(a, b)),
    G("binary_cross_entropy", "weight_sum", ops::binary_cross_entropy(a, b, c, "sum")),
    G("binary_cross_entropy", "none", ops::binary_cross_entropy(a, b, Tensor(), "none")),
    G("binary_cross_entropy_with_logits", "mean", ops::binary_cross_entropy_with_logits(a, b)),
    G("binary_cross_entropy_with_logits", "weight", ops::binary_cross_entropy_with_logits(a, b, c, "sum")),
    G("binary_cross_entropy_with_logits", "pos_weight",
      ops::binary_cross_entropy_with_logits(a, b, Tensor(), "none", c)),
    G("kl_div", "mean", ops::kl_div(a, b, "mean")),
    G("kl_div", "sum", ops::kl_div(a, b, "sum")),
    G("kl_div", "log_target", ops::kl_div(a, b, "none", true)),
    G("scaled_dot_product_attention", "main", ops::scaled_dot_product_attention(a, b, c)),
    G("scaled_dot_product_attention", "bool_mask", ops::scaled_dot_product_attention(a, b, c, d)),
    G("scaled_dot_product_attention", "float_mask", ops::scaled_dot_product_attention(a, b, c, d)),
    G("scaled_dot_product_attention", "causal", ops::scaled_dot_product_attention(a, b, c, Tensor(), 0.0, true)),
    G("scaled_dot_product_attention", "scale",
      ops::scaled_dot_product_attention(a, b, c, Tensor(), 0.0, false, 0.5)),
    G("scaled_dot_product_attention", "strided",
      ops::scaled_dot_product_attention(a.transpose(1, 2), b.transpose(1, 2), c.transpose(1, 2))),
};

#undef G

// =============================================================================
// Running and comparing
// =============================================================================

const std::vector<Case>& golden_cases() {
  static const std::vector<Case> cases = golden::load_cases(TESSERA_GOLDEN_DIR "/ops.bin");
  return cases;
}

// Note [Golden tolerances]
// |got - want| <= atol * max(1, max|want|) + rtol * |want|, elementwise, chosen
// by the dtype of the tensor compared. The atol is scaled by the tensor's
// largest magnitude so that a value that cancels to ~0 (a gradient, a
// normalized output) is judged against the size of its neighbours. Integer and
// bool tensors must match exactly; NaN matches NaN and infinities must match.
// f16/bf16 references are PyTorch's f32 result on the same (exactly upcast)
// inputs, rounded once: the tolerance allows for Tessera's rounding of
// intermediates. A tensor is never judged more strictly than the least precise
// floating dtype of its case (an f64 gradient of f32 outputs carries f32 error).
struct Tol {
  double rtol, atol;
};
// TESSERA_GOLDEN_TOL_SCALE=0.1 (say) tightens every tolerance, to see the margins.
double tolerance_scale() {
  static const double s = [] {
    const char* e = std::getenv("TESSERA_GOLDEN_TOL_SCALE");
    return e ? std::atof(e) : 1.0;
  }();
  return s;
}
Tol tolerance(DType t) {
  double s = tolerance_scale();
  switch (t) {
    case DType::F64: return {1e-10 * s, 1e-12 * s};
    case DType::F32: return {1e-5 * s, 1e-6 * s};
    case DType::F16: return {1e-2 * s, 1e-3 * s};
    case DType::BF16: return {2e-2 * s, 1e-2 * s};
    default: return {0, 0};
  }
}
Tol loosest(const Case& k) {
  Tol t{0, 0};
  for (const TensorList* list : {&k.inputs, &k.outputs})
    for (const Tensor& x : *list) {
      Tol u = tolerance(x.dtype());
      t = {std::max(t.rtol, u.rtol), std::max(t.atol, u.atol)};
    }
  return t;
}

std::string shape_of(const Tensor& t) { return shape_str(t.shape()); }

// Empty when they match; otherwise what differs, with both tensors.
std::string compare(const Tensor& got, const Tensor& want, Tol case_tol) {
  std::ostringstream os;
  os.precision(17);
  if (!got.defined()) return "Tessera returned an undefined tensor";
  if (got.dtype() != want.dtype())
    os << "dtype: got " << dtype_name(got.dtype()) << ", want " << dtype_name(want.dtype()) << "\n";
  if (!IntArrayRef(got.shape()).equals(want.shape()))
    os << "shape: got " << shape_of(got) << ", want " << shape_of(want) << "\n";
  if (os.tellp() == 0) {
    std::vector<double> g = got.detach().to_vector<double>(), w = want.to_vector<double>();
    bool exact = !is_floating(want.dtype());
    Tol tol = tolerance(want.dtype());
    tol = {std::max(tol.rtol, case_tol.rtol), std::max(tol.atol, case_tol.atol)};
    double scale = 1;
    for (double v : w)
      if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      bool ok;
      if (exact || std::isinf(w[i])) ok = g[i] == w[i];
      else if (std::isnan(w[i])) ok = std::isnan(g[i]);
      else ok = std::abs(g[i] - w[i]) <= tol.atol * scale + tol.rtol * std::abs(w[i]);
      if (!ok) {
        if (bad < 6) os << "  at flat index " << i << ": got " << g[i] << ", want " << w[i] << "\n";
        if (std::isfinite(g[i])) worst = std::max(worst, std::abs(g[i] - w[i]));
        ++bad;
      }
    }
    if (bad == 0) return "";
    os << "  " << bad << " of " << w.size() << " elements differ";
    if (!exact) os << " (max |diff| " << worst << ", rtol " << tol.rtol << ", atol " << tol.atol << " x " << scale << ")";
    os << "\n";
  }
  os << "got:\n" << got.detach() << "\nwant:\n" << want << "\n";
  return os.str();
}

enum class Outcome { Pass, Fail };
int outputs_checked = 0, grads_checked = 0;  // for the summary line

// Runs one case: forward, then the gradients. Failures are added to the test.
Outcome run_case(const Entry& entry, const Case& k) {
  std::string where = k.key() + "  [PyTorch: " + k.call + "]";
  Tol case_tol = loosest(k);
  TensorList inputs;
  std::vector<size_t> grad_inputs;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    Tensor t = k.inputs[i].clone();
    if (k.grads.count(static_cast<int>(i))) {
      t.requires_grad_(true);
      grad_inputs.push_back(i);
    }
    inputs.push_back(t);
  }
  TensorList got;
  try {
    got = entry.fn(inputs);
  } catch (const std::exception& e) {
    ADD_FAILURE() << where << "\n  forward threw: " << e.what();
    return Outcome::Fail;
  }
  bool ok = true;
  if (got.size() != k.outputs.size()) {
    ADD_FAILURE() << where << "\n  Tessera returned " << got.size() << " outputs, PyTorch " << k.outputs.size();
    return Outcome::Fail;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    ++outputs_checked;
    std::string diff = compare(got[i], k.outputs[i], case_tol);
    if (!diff.empty()) {
      ADD_FAILURE() << where << "\n  output " << i << " differs:\n" << diff;
      ok = false;
    }
  }
  if (k.v.empty() || grad_inputs.empty()) return ok ? Outcome::Pass : Outcome::Fail;

  TensorList outs_with_v, vs, wrt;
  for (const auto& [i, v] : k.v) {
    if (!got[i].requires_grad()) {
      ADD_FAILURE() << where << "\n  output " << i << " does not require grad (PyTorch's does)";
      return Outcome::Fail;
    }
    outs_with_v.push_back(got[i]);
    vs.push_back(v);
  }
  for (size_t i : grad_inputs) wrt.push_back(inputs[i]);
  TensorList grads;
  try {
    grads = autograd::grad(outs_with_v, wrt, vs, {}, false, /*allow_unused=*/true);
  } catch (const std::exception& e) {
    ADD_FAILURE() << where << "\n  backward threw: " << e.what();
    return Outcome::Fail;
  }
  for (size_t j = 0; j < grad_inputs.size(); ++j) {
    size_t i = grad_inputs[j];
    Tensor g = j < grads.size() && grads[j].defined() ? grads[j] : zeros_like(inputs[i]);
    ++grads_checked;
    std::string diff = compare(g, k.grads.at(static_cast<int>(i)), case_tol);
    if (!diff.empty()) {
      ADD_FAILURE() << where << "\n  gradient of input " << i << " differs:\n" << diff;
      ok = false;
    }
  }
  return ok ? Outcome::Pass : Outcome::Fail;
}

// Runs every stored case of every entry; prints a per-op summary.
void run_family(const char* family, const std::vector<Entry>& entries) {
  const std::vector<Case>& cases = golden_cases();
  int outputs_before = outputs_checked, grads_before = grads_checked;
  std::map<std::string, std::array<int, 2>> per_op;  // op -> pass, fail
  std::vector<std::string> op_order;
  for (const Entry& e : entries) {
    if (!per_op.count(e.op)) op_order.push_back(e.op);
    auto& counts = per_op[e.op];
    int found = 0;
    for (const Case& k : cases) {
      if (k.op != e.op || k.name != e.name) continue;
      ++found;
      counts[static_cast<int>(run_case(e, k))]++;
    }
    if (found == 0) ADD_FAILURE() << e.op << "/" << e.name << ": no data in ops.bin (rerun generate.py?)";
  }
  std::ostringstream fails;
  int pass = 0, fail = 0;
  for (const std::string& op : op_order) {
    auto [p, f] = per_op[op];
    pass += p;
    fail += f;
    if (f) fails << " " << op << "(" << f << "/" << p + f << ")";
  }
  std::cout << "[golden] " << family << ": " << pass << " cases pass, " << fail << " fail; "
            << outputs_checked - outputs_before << " outputs and " << grads_checked - grads_before
            << " gradients compared\n";
  if (fail) std::cout << "[golden]   failing ops (failed/run):" << fails.str() << "\n";
}

TEST(GoldenUnary, MatchesPyTorch) { run_family("unary", kUnary); }
TEST(GoldenBinary, MatchesPyTorch) { run_family("binary", kBinary); }
TEST(GoldenReduce, MatchesPyTorch) { run_family("reduce", kReduce); }
TEST(GoldenLinalg, MatchesPyTorch) { run_family("linalg", kLinalg); }
TEST(GoldenShape, MatchesPyTorch) { run_family("shape", kShape); }
TEST(GoldenIndex, MatchesPyTorch) { run_family("index", kIndex); }
TEST(GoldenView, MatchesPyTorch) { run_family("view", kView); }
TEST(GoldenNN, MatchesPyTorch) { run_family("nn", kNN); }

// Every case in the file has a C++ twin (and the other way round, above).
TEST(GoldenCoverage, EveryCaseHasATwin) {
  std::set<std::string> twins;
  for (const auto* table : {&kUnary, &kBinary, &kReduce, &kLinalg, &kShape, &kIndex, &kView, &kNN})
    for (const Entry& e : *table) {
      bool fresh = twins.insert(std::string(e.op) + "/" + e.name).second;
      EXPECT_TRUE(fresh) << "duplicate C++ row " << e.op << "/" << e.name;
    }
  for (const Case& k : golden_cases())
    EXPECT_TRUE(twins.count(k.op + "/" + k.name)) << k.key() << " has no C++ row in test_golden.cpp";
}

}  // namespace
}  // namespace tessera
