#pragma once
// Fused scaled-dot-product attention (flash-attention style): queries are taken
// in blocks of kBlockQ rows; each block's scores against the keys it can see
// live only in a per-thread [kBlockQ, S] buffer, so the [L, S] matrix is never
// materialized. The backward recomputes the scores from the saved per-row
// log-sum-exp.
#include <cstdint>

namespace tessera::cpu {

struct AttentionArgs {
  int64_t bh = 0, L = 0, S = 0, E = 0, Ev = 0;
  // Element strides [bh, row, col] of q [bh, L, E], k [bh, S, E], v [bh, S, Ev].
  int64_t sq[3], sk[3], sv[3];
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  // Optional additive mask, element strides [bh, L, S] (0 where it broadcasts).
  const void* mask = nullptr;
  int64_t sm[3] = {0, 0, 0};
  bool causal = false;
  double scale = 1.0;
  double dropout_p = 0.0;
  uint64_t seed = 0, offset = 0;  // Philox state of the dropout mask
  bool f64 = false;               // dtype: f64 when true, else f32
};

// out [bh, L, Ev] and lse [bh, L] are contiguous.
void attention_forward(const AttentionArgs& a, void* out, void* lse);
// dout, out: [bh, L, Ev] contiguous; dq [bh, L, E], dk [bh, S, E], dv [bh, S, Ev] contiguous (overwritten).
void attention_backward(const AttentionArgs& a, const void* dout, const void* out, const void* lse, void* dq,
                        void* dk, void* dv);
// Whether dropout keeps element (b, i, j): the same function the kernel uses,
// so the composite fallback draws the identical mask.
bool attention_keep(const AttentionArgs& a, int64_t b, int64_t i, int64_t j);

}  // namespace tessera::cpu
