#pragma once
// Q8_0 and Q4_0 weights repacked for int8 dot-product instructions (AVX512
// VNNI's vpdpbusd: 64 unsigned x signed byte products summed into 16 int32
// lanes), and the matrix product over them (kernels/qgemm.cpp).
//
// Note [Packed int8 products]
// vpdpbusd multiplies unsigned bytes by signed ones. The weights' codes are
// made unsigned once, at load: Q8_0's as w + 128, Q4_0's nibbles are 0..15
// already (w + 8); the activations stay signed (int8, one f32 scale per 32
// values, as quantize_act). Two blocks go in one 512-bit register, in the
// order
//   [block 0 values 0..15 | block 1 values 0..15 | block 0 16..31 | block 1 16..31]
// (16 bytes each), which is how a Q4_0 pair's nibbles unpack with one shift
// of the upper half. So int32 lanes 0-3 and 8-11 belong to the first block,
// 4-7 and 12-15 to the second, and the per-lane scale vectors are laid out
// the same way. Per output (row r, token i) and block pair:
//   s = dot(codes)                        exact in int32
//   t = dx * float(s) + cx                cx = -offset * dx * sum(x codes), in lanes 0 and 4
//   acc += dw * t                         two fmas
// (the offset's share, dw * dx * offset * sum, taken off in float), then the
// 16 lanes are added by a fixed halving tree: the same bits for a token
// whatever the number of tokens, the tile it falls in or the thread (Note
// [Batch-invariant LLM kernels]).
#include <cstdint>

#include "backend/cpu/quant.h"

namespace tessera::cpu {

// One activation row packed: per block pair, 64 code bytes (the order above),
// the scale vector dx (16 f32), and the offset terms cx for Q4_0 and for
// Q8_0 (16 f32 each: -8 or -128 times dx times the block's code sum in lanes
// 0 and 4, zeros elsewhere).
constexpr int64_t kPackedActPairBytes = 64 + 64 + 64 + 64;
inline int64_t qpack_pairs(int64_t cols) { return (cols / kQBlock + 1) / 2; }
inline int64_t packed_act_bytes(int64_t cols) { return qpack_pairs(cols) * kPackedActPairBytes; }

// A weight matrix repacked in tiles of 4 rows (the kernel's tile; the last
// tile padded with zero rows), so that a tile streams from one place: per
// tile and block pair, the 4 rows' codes (64 bytes each for Q8_0, 32 for
// Q4_0), then their scales (2 f32 per row; a missing last block has scale 0).
constexpr int64_t kPackRows = 4;
struct PackedQMatrix {
  QFormat format = QFormat::Q8_0;  // Q8_0 or Q4_0
  int64_t rows = 0, cols = 0, pairs = 0;
  const uint8_t* data = nullptr;
};
inline int64_t packed_pair_code_bytes(QFormat f) { return f == QFormat::Q8_0 ? 64 : 32; }
// Bytes of one tile's block pair, and of the whole packed matrix.
inline int64_t packed_tile_pair_bytes(QFormat f) { return kPackRows * (packed_pair_code_bytes(f) + 8); }
inline int64_t packed_matrix_bytes(QFormat f, int64_t rows, int64_t cols) {
  return (rows + kPackRows - 1) / kPackRows * qpack_pairs(cols) * packed_tile_pair_bytes(f);
}

// Tiles [t0, t1) of w (Q8_0 or Q4_0, GGUF blocks) into `out`, which holds
// the whole packed matrix (packed_matrix_bytes).
void qpack_weights(const QuantMatrix& w, int64_t t0, int64_t t1, uint8_t* out);
// One activation row of `cols` values (a multiple of 32) into out
// (packed_act_bytes(cols)); rounding as quantize_act. A non-finite value
// makes its block's scale NaN.
void qpack_act(const float* x, int64_t cols, uint8_t* out);
// y[i * ldy + r] for i < m, every row r: the block sums in int64, combined in
// double. The fast kernel's result is within float rounding of this.
void qgemm_ref(const PackedQMatrix& w, const uint8_t* act, int64_t m, float* y, int64_t ldy);

}  // namespace tessera::cpu
