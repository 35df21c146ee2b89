#pragma once
// The device seam: one Backend per device type, registered once
// (registry.cpp), and the only way the layers above reach kernels. An op
// validates its inputs, infers its output, allocates it on its inputs'
// device, then calls that device's entry of the kernel table below; a
// tensor's device decides which backend runs. backend/cpu/ is the first
// backend, backend/meta/ the second (shapes only: every entry does nothing).
// docs/adding_a_backend.md is the recipe for a third.
//
// Note [Kernel entries]
// An entry receives already-validated, already-allocated tensors on its own
// device and only computes: no shape rules, no autograd, no allocation of
// outputs it was given. Each is declared once in TS_BACKEND_KERNELS with its
// signature, so a backend that forgets one fails to register, naming it.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/fused_program.h"
#include "backend/kernel_ids.h"
#include "backend/quant_format.h"
#include "backend/sparse_format.h"
#include "tessera/core/allocator.h"
#include "tessera/core/generator.h"
#include "tessera/core/tensor.h"

namespace tessera::backend {

// The entries' signatures.
// Index values in [-n, n) (an error naming op, the index and n otherwise);
// idx contiguous i64. The indexing entries below get checked indices.
using IndexCheckFn = void (*)(const Tensor& idx, int64_t n, int64_t dim, const char* op);
// out [idx's shape] = x along dim at idx (x and idx contiguous; x may be 0-D).
using GatherFn = void (*)(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& idx);
// out along dim at idx = (or +=, accumulate) src; out and idx contiguous.
using ScatterFn = void (*)(const Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src, bool accumulate);
// out = x's slices idx along dim (x contiguous, at least 1-D; idx 1-D).
using IndexSelectFn = void (*)(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& idx);
// out's slices idx along dim += src's (out, src contiguous, one dtype), in index order.
using IndexAddFn = void (*)(const Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src);
// The coordinates [count, nz.dim()] (i64) of the true elements of contiguous
// bool nz: the one entry that allocates its output, whose size is data.
using NonzeroFn = Tensor (*)(const Tensor& nz);
// The first k of each contiguous row [rows, len] of xt in order (NaN largest),
// into values and i64 indices [rows, k]; stable keeps ties in index order;
// !sorted (k < len) leaves the k in index order.
using SortRowsFn = void (*)(const Tensor& xt, const Tensor& values, const Tensor& indices, int64_t rows, int64_t len,
                            int64_t k, bool descending, bool stable, bool sorted);
// dst = src, elementwise over dst's shape (src has it or broadcasts to it), any dtypes and strides.
using CopyFn = void (*)(const Tensor& dst, const Tensor& src);
using FillFn = void (*)(const Tensor& dst, const Scalar& value);
// out = k(x), x already in the kernel's dtype; params: the op's scalars, or null.
using UnaryFn = void (*)(const Tensor& out, const Tensor& x, UnaryKernel k, const double* params);
// out = k(a, b), a and b in the kernel's dtype, broadcast to out's shape; out may be a.
using BinaryFn = void (*)(const Tensor& out, const Tensor& a, const Tensor& b, BinaryKernel k);
using WhereFn = void (*)(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
// Contiguous f32/f64 out: uniform in [a, b) or normal (mean a, std b), from
// Philox blocks starting at `offset` (ops/random.cpp reserves them).
using RandomFn = void (*)(const Tensor& out, RandomDist dist, double a, double b, uint64_t seed, uint64_t offset);
// Contiguous i64 out: low + (64 random bits mod range).
using RandintFn = void (*)(const Tensor& out, int64_t low, uint64_t range, uint64_t seed, uint64_t offset);
// Contiguous f64 or i64 out: start + i * step.
using ArangeFn = void (*)(const Tensor& out, const Scalar& start, const Scalar& step);
// Contiguous f64 out: numel steps from start to end, both ends exact.
using LinspaceFn = void (*)(const Tensor& out, double start, double end);
// Contiguous x [rows, len] -> out [rows], in the reduction's accumulation dtype.
using ReduceRowsFn = void (*)(ReduceKernel k, const Tensor& x, const Tensor& out, int64_t rows, int64_t len);
// Contiguous x [outer, len, inner] -> out [outer, inner].
using ReduceMidFn = void (*)(ReduceKernel k, const Tensor& x, const Tensor& out, int64_t outer, int64_t len,
                             int64_t inner);
// Contiguous x [rows, len] -> values [rows] and i64 indices [rows] of each row's max (or min).
using ArgReduceRowsFn = void (*)(const Tensor& x, const Tensor& values, const Tensor& indices, bool is_max,
                                 int64_t rows, int64_t len);
// c = a @ b (+ bias): [B, M, K] or [M, K] times [B, K, N] or [K, N], K > 0,
// one unit stride in each operand's last two dims.
using MatmulFn = void (*)(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& bias);
// y [m, n] = act(x [m, k] @ w^T + bias) + residual, f32, inside the product,
// where the backend can (false, writing nothing, where it cannot: the op then
// runs its composite). w [n, k] is the weight as stored; constant_weights:
// the backend may keep a packed copy with w's storage.
using LinearEpilogueFn = bool (*)(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                                  const Tensor& y, Epilogue act, bool constant_weights);
// Running sums (or products) along the last dim of contiguous x into out
// (one dtype); the product's gradient gx from x, y = cumprod(x) and g,
// exact where x has zeros.
using CumulativeFn = void (*)(const Tensor& x, const Tensor& out, bool prod);
using CumprodBackwardFn = void (*)(const Tensor& x, const Tensor& y, const Tensor& g, const Tensor& gx);
// Pooling by geometry (kernel_ids.h) over contiguous tensors; indices
// (i64, flat positions in the H*W plane) may be undefined for max pooling
// forward (inference). The backward entries overwrite gx.
using MaxPoolFwdFn = void (*)(const PoolGeometry& g, const Tensor& x, const Tensor& y, const Tensor& indices);
using MaxPoolBwdFn = void (*)(const PoolGeometry& g, const Tensor& gy, const Tensor& indices, const Tensor& gx);
using AvgPoolFwdFn = void (*)(const PoolGeometry& g, const Tensor& x, const Tensor& y);
using AvgPoolBwdFn = void (*)(const PoolGeometry& g, const Tensor& gy, const Tensor& gx);
// Batch norm over contiguous f32/f64 x [N, C, *] (Note [Fused batch norm]),
// per-channel statistics and parameters f64 [C]: the mean and (biased)
// variance; y = x * scale + shift; and the gradients (each may be undefined
// but for g, x, mean and rstd), w the weight or undefined.
using BatchNormStatsFn = void (*)(const Tensor& x, const Tensor& mean, const Tensor& var);
using BatchNormApplyFn = void (*)(const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor& shift);
using BatchNormBwdFn = void (*)(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                const Tensor& w, bool training, const Tensor& gx, const Tensor& gw, const Tensor& gb);
// Fused attention (kernel_ids.h): out [bh, L, Ev] and lse [bh, L]
// contiguous; q, k, v and mask (may be undefined) with any strides. The
// backward overwrites contiguous dq, dk, dv from dout and the forward's out
// and lse. keep_mask writes the dropout mask the kernels use, 1 or 0, into
// contiguous keep [bh, L, S] (the composite's, for double backward).
using AttentionFwdFn = void (*)(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& mask, const Tensor& out, const Tensor& lse);
using AttentionBwdFn = void (*)(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& mask, const Tensor& dout, const Tensor& out, const Tensor& lse,
                                const Tensor& dq, const Tensor& dk, const Tensor& dv);
using AttentionKeepMaskFn = void (*)(const AttentionParams& p, const Tensor& keep);
// 2-D convolution by geometry (kernel_ids.h) on contiguous NCHW tensors:
// y = conv(x, w) + bias (bias may be undefined); gx = the adjoint in x of
// gy; gw and gbias (may be undefined) from x and gy. conv_epilogue_ok says
// whether conv2d_fused runs for dtype t, and native_bf16 whether bf16
// convolutions run natively (else the op computes them in f32).
using Conv2dFwdFn = void (*)(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                             const Tensor& y);
using Conv2dBwdDataFn = void (*)(const ConvGeometry& g, const Tensor& gy, const Tensor& w, const Tensor& gx);
using Conv2dBwdWeightsFn = void (*)(const ConvGeometry& g, const Tensor& x, const Tensor& gy, const Tensor& gw,
                                    const Tensor& gbias);
// y = act(conv(x, w) + bias + residual) inside the product, x and y NCHW or
// channel-blocked by in_block / out_block (0, 8, 16); residual (may be y
// itself) and bias may be undefined; constant_weights: the backend may keep a
// packed copy of w with w's storage.
using Conv2dFusedFn = void (*)(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                               const Tensor& residual, const Tensor& y, Epilogue act, int in_block, int out_block,
                               bool constant_weights);
using DTypeQueryFn = bool (*)(DType t);
using QueryFn = bool (*)();
// The channel block the backend's f32 convolutions keep activations in (8 or
// 16: the layout pass blocks activations between convolutions), or 0.
using BlockQueryFn = int64_t (*)();
// Optimizer updates in place over contiguous parameters, gradients and
// state of one dtype; vmax (AMSGrad) and buf (SGD momentum) may be undefined.
using AdamStepFn = void (*)(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                            const AdamArgs& a);
using SgdStepFn = void (*)(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdArgs& a);
// grad_avg (centered) and buf (momentum) may be undefined.
using RmspropStepFn = void (*)(const Tensor& p, const Tensor& g, const Tensor& square_avg, const Tensor& grad_avg,
                               const Tensor& buf, const RmspropArgs& a);
using AdagradStepFn = void (*)(const Tensor& p, const Tensor& g, const Tensor& sum, const AdagradArgs& a);
using LionStepFn = void (*)(const Tensor& p, const Tensor& g, const Tensor& m, const LionArgs& a);
// Over rows of the last dim of contiguous tensors.
using SoftmaxFwdFn = void (*)(const Tensor& x, const Tensor& y, bool log);
using SoftmaxBwdFn = void (*)(const Tensor& gy, const Tensor& y, const Tensor& gx, bool log);
// y, and per-row mean and rstd, of contiguous x [rows, n]; w, b may be undefined.
using LayerNormFwdFn = void (*)(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                                const Tensor& mean, const Tensor& rstd, int64_t n, double eps, bool rms);
// gx (if defined) for every row; gw_part, gb_part (if defined) [blocks, n]:
// block i sums rows [i * block_rows, (i + 1) * block_rows).
using LayerNormBwdFn = void (*)(const Tensor& gy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                const Tensor& rstd, const Tensor& gx, const Tensor& gw_part, const Tensor& gb_part,
                                int64_t n, int64_t block_rows, bool rms);

// A quantized weight (backend/quant_format.h) as the tensors that hold it:
// qweight u8 [rows, qrow_bytes(format, cols)]; for Int8 scales f32 [rows];
// for Int4 scales and mins f16 [rows, cols / group]; otherwise undefined.
// All contiguous and checked by the op.
struct QuantWeight {
  QFormat format = QFormat::Q8_0;
  int64_t rows = 0, cols = 0, group = 0;
  Tensor qweight, scales, mins;
};
// y [m, rows] = x [m, cols] @ w^T for contiguous f32 x and y; integer: the
// activations rounded to int8 codes for the integer products (per 32 values,
// or per tensor for Int8 batches), else exact f32 products of the weights.
using QuantizedMatmulFn = void (*)(const QuantWeight& w, const Tensor& x, const Tensor& y, bool integer);
// w back to f32 into contiguous out [rows, cols].
using DequantizeWeightFn = void (*)(const QuantWeight& w, const Tensor& out);
// Affine int8 codes of contiguous f32 x into contiguous out (u8 or i8, x's
// shape): clamp(round_half_even(x * inv_scale + zero_point), lo, hi); returns
// whether any x was NaN. And back: out (f32) = (q - zero_point) * scale.
using QuantizeAffineFn = bool (*)(const Tensor& x, const Tensor& out, float inv_scale, float zero_point, float lo,
                                  float hi);
using DequantizeAffineFn = void (*)(const Tensor& q, const Tensor& out, float scale, int32_t zero_point);
// Static int8 products (Int8Epilogue, kernel_ids.h; its pointers are into
// tensors on the same device): x u8 or i8 [m, k], w i8 [n, k], y [m, n]
// (u8 or f32), all contiguous; the convolution's x and y channels-last
// ([N, H, W, C] memory), w [OC, C / groups, KH, KW] (the backend may keep a
// packed copy of w with w's storage, as of its version).
using Int8LinearFn = void (*)(const Tensor& x, const Tensor& w, const Int8Epilogue& e, const Tensor& y);
using Int8Conv2dFn = void (*)(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Int8Epilogue& e,
                              const Tensor& y);
// y [m, rows] = x [m, cols] @ w^T (+ bias [rows]) for CSR weights given as
// their checked tensors (backend/sparse_format.h): values f32, col_idx i32,
// row_ptr i64; x and y contiguous f32.
using CsrLinearFn = void (*)(const Tensor& values, const Tensor& col_idx, const Tensor& row_ptr, int64_t cols,
                             const Tensor& x, const Tensor& bias, const Tensor& y);
// Runs a checked program (backend/fused_program.h) over outputs (contiguous
// f32, one shape) with inputs broadcastable to it (f32, f16, bf16, f64 or
// bool, converted to f32 on load).
using FusedElementwiseFn = void (*)(const FusedProgram& p, const TensorList& inputs, const TensorList& outputs);

// X(name, signature): every kernel entry a backend provides.
#define TS_BACKEND_KERNELS(X)                                                                                   \
  X(copy, CopyFn) X(fill, FillFn) X(unary, UnaryFn) X(binary, BinaryFn) X(where, WhereFn)                       \
  X(random, RandomFn) X(randint, RandintFn) X(arange, ArangeFn) X(linspace, LinspaceFn)                         \
  X(index_check, IndexCheckFn) X(gather, GatherFn) X(scatter, ScatterFn) X(index_select, IndexSelectFn)         \
  X(index_add, IndexAddFn) X(sort_rows, SortRowsFn) X(nonzero, NonzeroFn)                                       \
  X(cumulative, CumulativeFn) X(cumprod_backward, CumprodBackwardFn)                                            \
  X(reduce_rows, ReduceRowsFn) X(reduce_mid, ReduceMidFn) X(arg_reduce_rows, ArgReduceRowsFn)                   \
  X(max_pool2d_fwd, MaxPoolFwdFn) X(max_pool2d_bwd, MaxPoolBwdFn)                                               \
  X(avg_pool2d_fwd, AvgPoolFwdFn) X(avg_pool2d_bwd, AvgPoolBwdFn)                                               \
  X(attention_fwd, AttentionFwdFn) X(attention_bwd, AttentionBwdFn)                                             \
  X(attention_keep_mask, AttentionKeepMaskFn)                                                                   \
  X(conv2d_fwd, Conv2dFwdFn) X(conv2d_bwd_data, Conv2dBwdDataFn) X(conv2d_bwd_weights, Conv2dBwdWeightsFn)      \
  X(conv2d_fused, Conv2dFusedFn) X(conv_epilogue_ok, DTypeQueryFn) X(native_bf16, QueryFn)                      \
  X(conv_activation_block, BlockQueryFn)                                                                        \
  X(adam_step, AdamStepFn) X(sgd_step, SgdStepFn) X(rmsprop_step, RmspropStepFn)                                \
  X(adagrad_step, AdagradStepFn) X(lion_step, LionStepFn)                                                       \
  X(matmul, MatmulFn) X(linear_epilogue, LinearEpilogueFn)                                                      \
  X(softmax_fwd, SoftmaxFwdFn) X(softmax_bwd, SoftmaxBwdFn)                                                     \
  X(layer_norm_fwd, LayerNormFwdFn) X(layer_norm_bwd, LayerNormBwdFn)                                           \
  X(batch_norm_stats, BatchNormStatsFn) X(batch_norm_apply, BatchNormApplyFn) X(batch_norm_bwd, BatchNormBwdFn) \
  X(quantized_matmul, QuantizedMatmulFn) X(dequantize_weight, DequantizeWeightFn)                               \
  X(quantize_affine, QuantizeAffineFn) X(dequantize_affine, DequantizeAffineFn)                                 \
  X(int8_linear, Int8LinearFn) X(int8_conv2d, Int8Conv2dFn) X(csr_linear, CsrLinearFn)                          \
  X(fused_elementwise, FusedElementwiseFn)

struct LlmKernels;

struct Kernels {
#define TS_X(name, type) type name = nullptr;
  TS_BACKEND_KERNELS(TS_X)
#undef TS_X
};

struct Backend {
  const char* name = nullptr;
  DeviceType type = DeviceType::CPU;
  const DeviceAllocator* allocator = nullptr;
  // Bytes between this device and the CPU's memory (same-device copies are the
  // `copy` kernel). On meta, copying in does nothing and copying out is an error.
  void (*copy_from_cpu)(void* dst, const void* src, size_t nbytes) = nullptr;
  void (*copy_to_cpu)(void* dst, const void* src, size_t nbytes) = nullptr;
  // Waits for the device's queued work (a no-op on the CPU).
  void (*synchronize)() = nullptr;
  // The generator random ops draw from when the caller names none.
  Generator& (*default_generator)() = nullptr;
  const Kernels* kernels = nullptr;
  // The LLM engine's row kernels (backend/llm_kernels.h), or null: a backend
  // without them does not run the engine (meta does not).
  const LlmKernels* (*llm)() = nullptr;
};

// The entries `b` lacks, by name ("allocator", "kernels.matmul", ...).
std::vector<std::string> missing_entries(const Backend& b);
// Installs `b` (a static: it is kept by address) for its device type, and
// its allocator into core; a backend missing an entry is refused with an
// error naming every one it lacks.
void register_backend(const Backend& b);

namespace detail {
extern const Backend* g_backends[kNumDeviceTypes];
const Backend& no_backend(DeviceType t);  // throws naming the device
}
inline const Backend& get(DeviceType t) {
  const Backend* b = detail::g_backends[static_cast<int>(t)];
  if (!b) [[unlikely]] return detail::no_backend(t);
  return *b;
}
inline const Kernels& kernels(const Tensor& t) { return *get(t.device().type).kernels; }
inline const Kernels& kernels(Device d) { return *get(d.type).kernels; }
// The LLM kernels of device t's backend; an error naming the device where it has none.
const LlmKernels& llm_kernels(DeviceType t);

}  // namespace tessera::backend
