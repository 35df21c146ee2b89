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

#include "backend/llm_kernels.h"

namespace tessera::cpu {

using backend::AttnQuery;
using backend::kAttnQueries;
using backend::kv_format_name;
using backend::kv_head_row;
using backend::kv_row_bytes;
using backend::KvFormat;
using backend::KvLayer;
using backend::KvStoreRow;
using backend::PagedAttention;
using backend::PagedAttentionSet;
using backend::RmsNormRow;
using backend::RopeRow;
using backend::SwiGluRow;

// Stores one token's keys or values (kv_dim values) at slot s of block b.
void kv_store_k(const KvLayer& L, const float* x, int64_t b, int64_t s);
void kv_store_v(const KvLayer& L, const float* x, int64_t b, int64_t s);
// Value e of the token at slot s of block b, as stored.
float kv_load_k(const KvLayer& L, int64_t b, int64_t s, int64_t e);
float kv_load_v(const KvLayer& L, int64_t b, int64_t s, int64_t e);

// Floats of scratch the attention kernel needs for keys up to n_keys.
inline int64_t attention_scratch(int64_t n_keys) { return kAttnQueries * ((n_keys + 15) / 16 * 16) + 2 * 16 * 512; }

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
