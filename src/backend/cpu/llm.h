#pragma once
// Kernels of the LLM engine (llm/engine.h): RMSNorm with its weight, RoPE on
// adjacent pairs (GGUF's order), SwiGLU, the KV cache's row formats and
// attention over a paged KV cache. Compiled once per instruction set
// (kernels/llm.cpp); each has a portable reference here that the tests hold
// the per-ISA kernels to.
//
// Note [Batch-invariant LLM kernels]
// Every kernel works one token row (attention: one token and head) at a time,
// and sums along a row in one fixed order that depends only on the row's
// length and the kernel tier: never on how many rows run together, which
// thread runs them, or where a sequence's cache blocks lie. The engine splits
// work by rows (and matrix products by output rows), never along a sum, so a
// token's logits do not depend on what else is in its batch.
#include <cstdint>

namespace tessera::cpu {

// How a KV cache row (n_kv_heads * head_dim values of one token) is stored:
// F16, or ggml's Q8_0 blocks (an f16 scale and 32 int8 codes per 32 values).
enum class KvFormat : uint8_t { F16, Q8_0 };
const char* kv_format_name(KvFormat f);
int64_t kv_row_bytes(KvFormat f, int64_t n);

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
// Stores one token's keys or values (kv_dim values) at slot s of block b.
void kv_store_k(const KvLayer& L, const float* x, int64_t b, int64_t s);
void kv_store_v(const KvLayer& L, const float* x, int64_t b, int64_t s);
// Value e of the token at slot s of block b, as stored.
float kv_load_k(const KvLayer& L, int64_t b, int64_t s, int64_t e);
float kv_load_v(const KvLayer& L, int64_t b, int64_t s, int64_t e);

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
// Floats of scratch the attention kernel needs for keys up to n_keys.
inline int64_t attention_scratch(int64_t n_keys) { return kAttnQueries * ((n_keys + 15) / 16 * 16) + 2 * 16 * 512; }

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

// Portable references, in double where they sum.
void rms_norm_row_ref(const float* x, const float* w, float* y, int64_t n, float eps);
void rope_row_ref(float* x, int64_t n_heads, int64_t head_dim, const float* cs);
void swiglu_row_ref(const float* g, const float* u, float* y, int64_t n);
// Bitwise what the kernels store: f16 round-to-nearest-even; Q8_0 rounded as
// ggml's quantize_row_q8_0_ref.
void kv_store_row_ref(KvFormat f, const float* x, int64_t n, uint8_t* out);
// Value i of a stored row.
float kv_load_ref(KvFormat f, const uint8_t* row, int64_t i);
void paged_attention_ref(const PagedAttention& a, const AttnQuery& q, const int32_t* blocks, int64_t kv_head);

}  // namespace tessera::cpu
