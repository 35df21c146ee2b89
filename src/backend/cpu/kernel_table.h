#pragma once
// The CPU kernel table. Kernel files under kernels/ are compiled once per
// instruction set and each fills one KernelTable; the table for the best
// instruction set this CPU supports is chosen at start-up.
//
// Note [CPU capabilities]
// Binaries move between machines, so the ISA is never chosen by -march=native:
// kernels/*.cpp are built three times (baseline x86-64, AVX2+FMA, AVX-512) into
// namespaces tessera::cpu::isa_<name>, and capability.cpp picks one from cpuid
// (TESSERA_CPU_CAPABILITY=base|avx2|avx512|avx512_bf16 lowers it, for
// testing). The avx512_bf16 tier is the AVX-512 table plus the few kernels
// that use bf16 and int8 (VNNI) dot products (target attributes, chosen only
// on CPUs with AVX512-BF16 and AVX512-VNNI, which all such CPUs have).
#include <cstdint>

#include "backend/kernel_ids.h"
#include "backend/cpu/llm.h"
#include "backend/llm_kernels.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/sparse.h"
#include "tessera/core/dtype.h"
#include "tessera/core/half.h"

namespace tessera::cpu {

// A 1-D loop over n elements: data[0] is the output, data[1..] the inputs,
// strides in bytes; params are the op's scalar parameters (may be null).
using Loop1d = void (*)(char** data, const int64_t* strides, int64_t n, const double* params);

using backend::BinaryKernel;
using backend::kNumBinary;
using backend::kNumReduce;
using backend::kNumUnary;
using backend::ReduceKernel;
using backend::UnaryKernel;

// Reduces each of `rows` contiguous rows of `len` elements of `in` into out[r]
// (out has the accumulation dtype: see reduce.cpp in ops).
using RowReduce = void (*)(const void* in, void* out, int64_t rows, int64_t len);
// Reduces the middle dim of a contiguous [outer, len, inner] block into [outer, inner].
using MidReduce = void (*)(const void* in, void* out, int64_t outer, int64_t len, int64_t inner);
// Index of the max (or min) of each contiguous row, and the value.
using RowArgReduce = void (*)(const void* in, void* values, int64_t* indices, int64_t rows, int64_t len);

// Row-wise normalizations on contiguous [rows, n] data (float types only).
using SoftmaxFwd = void (*)(const void* x, void* y, int64_t rows, int64_t n, bool log);
using SoftmaxBwd = void (*)(const void* gy, const void* y, void* gx, int64_t rows, int64_t n, bool log);
// Writes y, and per-row mean and rstd (float, or double for f64) when they are non-null.
using LayerNormFwd = void (*)(const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,
                              int64_t rows, int64_t n, double eps, bool rms);
// gx for rows [r0, r1); gw/gb (length n, accumulation type) accumulate over those rows.
using LayerNormBwd = void (*)(const void* gy, const void* x, const void* w, const void* mean, const void* rstd,
                              void* gx, void* gw, void* gb, int64_t r0, int64_t r1, int64_t n, bool rms);

// Fused attention: probabilities in place plus per-row log-sum-exp; and the
// backward's recomputation exp(s - lse).
// Optimizer updates over n contiguous elements of a parameter, its gradient and
// its state. The caller computes the per-step scalars (bias corrections).
using backend::AdamArgs;
using AdamStep = void (*)(void* p, const void* g, void* m, void* v, void* vmax, int64_t n, const AdamArgs& a);
using backend::SgdArgs;
using SgdStep = void (*)(void* p, const void* g, void* buf, int64_t n, const SgdArgs& a);

// Max pooling of planes [p0, p1) of [planes, H, W, g.lanes] data, no indices.
using MaxPoolPlanes = void (*)(const PoolGeometry& g, const void* x, void* y, int64_t p0, int64_t p1);

using AttnSoftmax = void (*)(void* s, void* lse, int64_t rows, int64_t n);
using AttnExp = void (*)(void* s, const void* lse, int64_t rows, int64_t n);

// Quantized matrices (backend/quant_format.h): y[i * ldy + r] for activation
// rows i < m and weight rows r in [r0, r1).
using QMatmulRows = void (*)(const QuantMatrix& w, const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy,
                             int64_t r0, int64_t r1);
// Per-tensor affine codes (static int8): out[i] = clamp(round_half_even(x[i] *
// inv_scale + zero_point), lo, hi) as u8 (or s8 when !u8). Returns whether any
// x[i] was NaN (its code is then meaningless).
using QuantizeAffine = bool (*)(const float* x, int64_t n, float inv_scale, float zero_point, float lo, float hi,
                                void* out, bool u8);

// Sparse weights (backend/cpu/sparse.h): outputs r in [r0, r1) of y [m, rows]
// from activations transposed to xt [cols, m] (m > 1) or x [cols] (m == 1).
using CsrRows = void (*)(const CsrMatrix& w, const float* xt, int64_t m, const float* bias, float* y, int64_t r0,
                         int64_t r1);

// The LLM engine's products (backend/llm_kernels.h).
using backend::SkinnyRows;
using backend::SkinnyRowsPacked;
using backend::SkinnyPack;
using backend::SkinnyRowsBf16;
using backend::QGemmRows;
using backend::QPackAct;
using backend::QDotRows;
using backend::QDequantRows;
using backend::QuantizeAct;

struct KernelTable {
  const char* isa = "";
  Loop1d unary[kNumUnary][kNumDTypes] = {};
  Loop1d binary[kNumBinary][kNumDTypes] = {};
  Loop1d cast[kNumDTypes][kNumDTypes] = {};  // [from][to]; also the strided copy
  Loop1d fill[kNumDTypes] = {};              // params[0]: value as double, params[1]: as int64 bits
  Loop1d where[kNumDTypes] = {};             // data: out, cond(bool), a, b
  RowReduce reduce_rows[kNumReduce][kNumDTypes] = {};
  MidReduce reduce_mid[kNumReduce][kNumDTypes] = {};
  RowArgReduce argmax_rows[kNumDTypes] = {};
  RowArgReduce argmin_rows[kNumDTypes] = {};
  SoftmaxFwd softmax_fwd[kNumDTypes] = {};
  SoftmaxBwd softmax_bwd[kNumDTypes] = {};
  LayerNormFwd layer_norm_fwd[kNumDTypes] = {};
  LayerNormBwd layer_norm_bwd[kNumDTypes] = {};
  AttnSoftmax attn_softmax[kNumDTypes] = {};
  AttnExp attn_exp[kNumDTypes] = {};
  AdamStep adam_step[kNumDTypes] = {};
  SgdStep sgd_step[kNumDTypes] = {};
  MaxPoolPlanes max_pool_planes[kNumDTypes] = {};
  QMatmulRows qmatmul_rows[kNumQFormats] = {};
  QDotRows qdot_rows[kNumQFormats] = {};
  QDequantRows qdequant_rows[kNumQFormats] = {};
  QuantizeAct quantize_act = nullptr;
  QuantizeAffine quantize_affine = nullptr;
  CsrRows csr_rows = nullptr;
  SkinnyRows skinny_rows[kNumDTypes] = {};  // f32, bf16, f16
  SkinnyRowsPacked skinny_rows_packed[kNumDTypes] = {};  // f32, f16
  SkinnyPack skinny_pack[kNumDTypes] = {};
  int64_t skinny_group = 1;                   // the rows a packed group holds
  SkinnyRowsBf16 skinny_rows_bf16 = nullptr;  // only in the avx512_bf16 tier
  QGemmRows qgemm_rows[kNumQFormats] = {};    // Q8_0, Q4_0, Q4_K, Q6_K: avx2, avx512_bf16 (VNNI) and avx512_amx tiers
  QPackAct qpack_act = nullptr;               // the same tiers
  // The LLM engine's row kernels (backend/cpu/llm.h).
  RmsNormRow rms_norm_row = nullptr;
  RopeRow rope_row = nullptr;
  SwiGluRow swiglu_row = nullptr;
  KvStoreRow kv_store_row = nullptr;
  PagedAttentionSet paged_attention_set = nullptr;
};

const KernelTable& kernels();
inline int idx(DType t) { return static_cast<int>(t); }

namespace isa_base { void fill_kernel_table(KernelTable& t); }
namespace isa_avx2 {
void fill_kernel_table(KernelTable& t);
void fill_qgemm_avx2_kernels(KernelTable& t);  // the avx2 tier's int8 products (vpmaddubsw)
}
namespace isa_avx512 {
void fill_kernel_table(KernelTable& t);
void fill_bf16_dot_kernels(KernelTable& t);    // the avx512_bf16 tier's additions:
void fill_qgemm_vnni_kernels(KernelTable& t);  // bf16 and int8 (VNNI) dot products
void fill_qgemm_amx_kernels(KernelTable& t);   // the avx512_amx tier's: int8 products on AMX tiles
}

}  // namespace tessera::cpu
