#pragma once
// What the LLM engine (llm/engine.cpp) asks of a backend: the row kernels
// of its forward pass over a paged KV cache, with the layouts they share
// with the engine. The engine owns the step (its buffers, its row tables,
// how rows are split among threads); a backend that runs it gives
// Backend::llm. Each kernel works on whole rows so that a token's result
// never depends on the rest of its batch (Note [Batch-invariant LLM kernels]
// in backend/cpu/llm.h).
#include <cstdint>

#include "backend/quant_format.h"
#include "tessera/core/dtype.h"
#include "tessera/core/half.h"

namespace tessera::backend {

// How a KV cache row (n_kv_heads * head_dim values of one token) is stored:
// F16, or ggml's Q8_0 blocks (an f16 scale and 32 int8 codes per 32 values).
enum class KvFormat : uint8_t { F16, Q8_0 };
inline const char* kv_format_name(KvFormat f) { return f == KvFormat::F16 ? "f16" : "q8_0"; }
inline int64_t kv_row_bytes(KvFormat f, int64_t n) {
  return f == KvFormat::F16 ? n * 2 : qrow_bytes(QFormat::Q8_0, n);
}

// One layer of a paged cache of `block_tokens` tokens per block (a multiple
// of 16), laid out so that attention, which takes one key head at a time,
// reads each block's keys and values of that head as one contiguous run:
// V (and K in Q8_0) head-major within a block, head h of slot s of block b
// at v + ((b * n_kv_heads + h) * block_tokens + s) * (head row bytes); K in
// F16 by dimension within a block, the block's 16-token runs of one
// dimension contiguous (value e of slot s at f16 index
// (b * kv_dim + e) * block_tokens + s), so that attention reads 16 keys'
// values of a dimension with one load. (V row-major by token, one head a
// 128-byte piece of each 1,536-byte row, made a decode at 2,048 tokens of
// context on a 110M model read its cache at 8 GB/s.)
struct KvLayer {
  KvFormat k_format = KvFormat::F16, v_format = KvFormat::F16;
  int64_t block_tokens = 16;
  int64_t kv_dim = 0;    // n_kv_heads * head_dim
  int64_t head_dim = 0;  // a multiple of 32 for a Q8_0 format
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
};
// Head h of slot s of block b in a head-major region `base` (V; K in Q8_0).
inline uint8_t* kv_head_row(const KvLayer& L, KvFormat f, uint8_t* base, int64_t b, int64_t s, int64_t h) {
  const int64_t heads = L.kv_dim / L.head_dim;
  return base + ((b * heads + h) * L.block_tokens + s) * kv_row_bytes(f, L.head_dim);
}
// Attention over a sequence's cache blocks for up to 4 query vectors that
// share key head `kv_head` (tokens of one sequence, or the heads of a
// group): out[head_dim] = softmax(scale * q . K[0, n_keys)) V. Each query's
// result depends only on its own q and n_keys.
struct PagedAttention {
  KvLayer layer;
  int64_t head_dim = 0;
  float scale = 1.f;
};
struct AttnQuery {
  const float* q = nullptr;
  float* out = nullptr;
  int64_t n_keys = 0;
};
constexpr int kAttnQueries = 16;  // queries per set: each key and value is widened once for them

// A matrix repacked for a backend's int8 products (LlmKernels::qpack_weights):
// its layout is the backend's (on the CPU, Note [Packed int8 products]).
struct PackedQMatrix {
  QFormat format = QFormat::Q8_0;  // Q8_0, Q4_0, Q4_K or Q6_K
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;
};

using RmsNormRow = void (*)(const float* x, const float* w, float* y, int64_t n, float eps);
// Rotates pairs (2i, 2i+1) of each of n_heads heads of one token by the angle
// whose cos/sin are cs[2i], cs[2i + 1] (head_dim / 2 pairs).
using RopeRow = void (*)(float* x, int64_t n_heads, int64_t head_dim, const float* cs);
// y = silu(g) * u over n values.
using SwiGluRow = void (*)(const float* g, const float* u, float* y, int64_t n);
// One row of n values in the format's bytes.
using KvStoreRow = void (*)(KvFormat f, const float* x, int64_t n, uint8_t* out);
using PagedAttentionSet = void (*)(const PagedAttention& a, const AttnQuery* qs, int nq, const int32_t* blocks,
                                   int64_t kv_head, float* scratch);

// Quantized matrices (backend/quant_format.h): y[i * ldy + r] for activation
// rows i < m and weight rows r in [r0, r1).
using QDotRows = void (*)(const QuantMatrix& w, const BlockQ8Act* xq, int64_t m, float* y, int64_t ldy, int64_t r0,
                          int64_t r1);
// Rows [r0, r1) dequantized to out [r1 - r0, cols].
using QDequantRows = void (*)(const QuantMatrix& w, int64_t r0, int64_t r1, float* out);
using QuantizeAct = void (*)(const float* x, int64_t cols, BlockQ8Act* out);

// Skinny products (on the CPU, backend/cpu/skinny.h): y[i * ldy + r] = x[i, :k] . w[r, :k]
// for f32 activation rows i < m (stride ldx) and weight rows r in [r0, r1)
// (stride ldw) of the table slot's dtype, summed in f32.
using SkinnyRows = void (*)(const void* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, int64_t m, float* y,
                            int64_t ldy, int64_t r0, int64_t r1);
// Note [Interleaved weight rows]
// The same products on weights packed by SkinnyPack: each group of the
// tier's block of rows (the last group may be shorter) interleaved step by
// step, so a block reads its rows as one linear stream with one chain of
// multiply-adds per row. The same sums in the same order as SkinnyRows, so
// the same bits. r0 is a multiple of the backend's group (which divides
// LlmKernels::pack_rows).
using SkinnyRowsPacked = void (*)(const void* packed, int64_t rows, int64_t k, const float* x, int64_t ldx, int64_t m,
                                  float* y, int64_t ldy, int64_t r0, int64_t r1);
// Packs w [rows, k] (contiguous) into out (as many bytes); false, writing
// nothing, where k is not a multiple of the tier's step (the kernel's lanes).
using SkinnyPack = bool (*)(const void* w, int64_t rows, int64_t k, void* out);
// The same products for bf16 weights and bf16 activation rows, on the CPU's
// bf16 dot products (AVX512-BF16: pairs of bf16 products summed in f32).
using SkinnyRowsBf16 = void (*)(const void* w, int64_t ldw, int64_t k, const BFloat16* x, int64_t ldx, int64_t m,
                                float* y, int64_t ldy, int64_t r0, int64_t r1);

// Repacked Q8_0/Q4_0 weights (on the CPU, backend/cpu/qgemm.h) against packed int8
// activation rows: y[i * ldy + r] for tokens i < m and weight rows [r0, r1)
// (r0 a multiple of kPackRows).
using QGemmRows = void (*)(const PackedQMatrix& w, const uint8_t* act, int64_t m, float* y, int64_t ldy, int64_t r0,
                           int64_t r1);
// One activation row packed for them: qpack_act_ref's bits.
using QPackAct = void (*)(const float* x, int64_t cols, uint8_t* out);

struct LlmKernels {
  // Products of f32 / f16 / bf16 weights (by dtype) with f32 rows; interleaved
  // weights (skinny_pack: false where the backend keeps the plain ones) and
  // bf16 activations (skinny_rows_bf16: null where the backend has no bf16 dot).
  SkinnyRows skinny_rows[kNumDTypes] = {};
  SkinnyRowsPacked skinny_rows_packed[kNumDTypes] = {};
  SkinnyPack skinny_pack[kNumDTypes] = {};
  SkinnyRowsBf16 skinny_rows_bf16 = nullptr;
  // Quantized weights (by QFormat): as stored, against activations quantized
  // per block (quantize_act); dequantized rows (the embedding).
  QDotRows qdot_rows[kNumQFormats] = {};
  QDequantRows qdequant_rows[kNumQFormats] = {};
  QuantizeAct quantize_act = nullptr;
  // Quantized weights repacked (the GGUF block formats), against packed
  // activation rows: rows per packed group (every packed product's row ranges
  // start at its multiples), the bytes of a packed activation row and
  // matrix, and the packing.
  QGemmRows qgemm_rows[kNumQFormats] = {};
  QPackAct qpack_act = nullptr;
  int64_t pack_rows = 0;
  int64_t (*packed_act_bytes)(int64_t cols) = nullptr;
  int64_t (*packed_matrix_bytes)(QFormat f, int64_t rows, int64_t cols) = nullptr;
  // Row groups [g0, g1) of w into out, which holds the whole packed matrix.
  void (*qpack_weights)(const QuantMatrix& w, int64_t g0, int64_t g1, uint8_t* out) = nullptr;
  // One row each: the norms (layer_norm with bias b, may be null), RoPE,
  // SwiGLU, GELU in place (erf or tanh), f16 / bf16 to f32, log-softmax.
  RmsNormRow rms_norm_row = nullptr;
  void (*layer_norm_row)(const float* x, const float* w, const float* b, float* y, int64_t n, float eps) = nullptr;
  RopeRow rope_row = nullptr;
  SwiGluRow swiglu_row = nullptr;
  void (*gelu_row)(float* x, int64_t n, bool erf) = nullptr;
  void (*to_f32_row)(DType from, const void* x, int64_t n, float* out) = nullptr;
  void (*log_softmax_row)(const float* x, float* y, int64_t n) = nullptr;
  // The KV cache: one token's keys or values (kv_dim values) into slot s of
  // block b; attention over a sequence's blocks, with the floats of scratch
  // it needs per thread for n_keys keys.
  void (*kv_store_k)(const KvLayer& L, const float* x, int64_t b, int64_t s) = nullptr;
  void (*kv_store_v)(const KvLayer& L, const float* x, int64_t b, int64_t s) = nullptr;
  PagedAttentionSet paged_attention_set = nullptr;
  int64_t (*attention_scratch)(int64_t n_keys) = nullptr;
};

}  // namespace tessera::backend
