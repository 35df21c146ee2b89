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

// One layer of a paged cache: rows of `block_tokens` tokens per block, block
// b's row s at base + (b * block_tokens + s) * row_bytes, for K and for V.
struct KvLayer {
  KvFormat k_format = KvFormat::F16, v_format = KvFormat::F16;
  int64_t block_tokens = 16;
  int64_t kv_dim = 0;  // n_kv_heads * head_dim
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
};

// Attention of one query head over positions [0, n_keys) of a sequence whose
// cache blocks are `blocks`: out[head_dim] = softmax(scale * q . K) V for key
// head `kv_head`. `scores` has room for n_keys floats.
struct PagedAttention {
  KvLayer layer;
  int64_t head_dim = 0;
  float scale = 1.f;
};

using RmsNormRow = void (*)(const float* x, const float* w, float* y, int64_t n, float eps);
// Rotates pairs (2i, 2i+1) of each of n_heads heads of one token by the angle
// whose cos/sin are cs[2i], cs[2i + 1] (head_dim / 2 pairs).
using RopeRow = void (*)(float* x, int64_t n_heads, int64_t head_dim, const float* cs);
// y = silu(g) * u over n values.
using SwiGluRow = void (*)(const float* g, const float* u, float* y, int64_t n);
// One row of n values in the format's bytes.
using KvStoreRow = void (*)(KvFormat f, const float* x, int64_t n, uint8_t* out);
using PagedAttentionHead = void (*)(const PagedAttention& a, const float* q, const int32_t* blocks, int64_t n_keys,
                                    int64_t kv_head, float* scores, float* out);

// Portable references, in double where they sum.
void rms_norm_row_ref(const float* x, const float* w, float* y, int64_t n, float eps);
void rope_row_ref(float* x, int64_t n_heads, int64_t head_dim, const float* cs);
void swiglu_row_ref(const float* g, const float* u, float* y, int64_t n);
// Bitwise what the kernels store: f16 round-to-nearest-even; Q8_0 rounded as
// ggml's quantize_row_q8_0_ref.
void kv_store_row_ref(KvFormat f, const float* x, int64_t n, uint8_t* out);
// Value i of a stored row.
float kv_load_ref(KvFormat f, const uint8_t* row, int64_t i);
void paged_attention_head_ref(const PagedAttention& a, const float* q, const int32_t* blocks, int64_t n_keys,
                              int64_t kv_head, float* scores, float* out);

}  // namespace tessera::cpu
