#pragma once
// Q8_0 and Q4_0 weights repacked for the CPU's int8 products, and the matrix
// product over them (kernels/qgemm.cpp): AVX512-VNNI's vpdpbusd (64 unsigned
// x signed byte products summed 4 at a time into 16 int32 lanes) and, where
// the CPU has them, AMX tiles (tdpbusd: a 16 x 64-byte unsigned tile times a
// 16 x 64-byte signed tile into 16 x 16 int32).
//
// Note [Packed int8 products]
// Both kernels compute, for weight row r, token i and 32-value block b,
//   s = sum_k (x_k + 128) * w_k - 128 * sum_k w_k      exact in int32
//   acc = fma(dw * dx, float(s), acc)                   blocks in order, acc from 0
// where w are the weight's signed codes (Q8_0's as stored, Q4_0's nibble - 8),
// dw its f16 scale, x the activation's int8 codes (as quantize_act) and dx
// their scale. The activation codes are made unsigned (+128) for vpdpbusd
// and tdpbusd, whose first operand is unsigned; 128 times the weight block's
// code sum, stored with the weights, takes that back out. Every step is one
// integer or one correctly rounded float operation on one (r, i), so the
// result is the same bits whichever kernel made it, in whatever tile: the
// AMX tile for whole groups of 16 tokens, VNNI for the rest and on CPUs
// without AMX, qgemm_ref everywhere (Note [Batch-invariant LLM kernels]).
//
// The weights are laid out as AMX's second operand wants them, which is also
// what a VNNI product with the 16 output rows in the 16 lanes wants: per
// group of 16 rows and block, 64-byte chunks c = 0..7 hold values 4c..4c+3
// of rows 0..15 (4 bytes per row). Q4_0 keeps its nibbles: chunk c (c < 4)
// holds, per row, the block's bytes qs[4c..4c+3], whose low nibbles are
// values 4c..4c+3 (chunk c) and high nibbles values 16+4c.. (chunk c + 4).
#include <cstdint>

#include "backend/cpu/quant.h"

namespace tessera::cpu {

// One activation row packed: its `cols` codes + 128 (u8), then one f32
// scale per block.
inline int64_t packed_act_bytes(int64_t cols) { return cols + cols / kQBlock * 4; }

// A weight matrix repacked in groups of 16 rows (the last padded with zero
// rows): per group and block, the codes (512 bytes for Q8_0, 256 for Q4_0,
// the chunks above), then the 16 rows' scales (f16) and code sums (int16).
constexpr int64_t kPackRows = 16;
struct PackedQMatrix {
  QFormat format = QFormat::Q8_0;  // Q8_0 or Q4_0
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;
};
inline int64_t packed_block_code_bytes(QFormat f) { return f == QFormat::Q8_0 ? 512 : 256; }
// Bytes of one group's block, and of the whole packed matrix.
inline int64_t packed_group_block_bytes(QFormat f) { return packed_block_code_bytes(f) + kPackRows * 4; }
inline int64_t packed_matrix_bytes(QFormat f, int64_t rows, int64_t cols) {
  return (rows + kPackRows - 1) / kPackRows * (cols / kQBlock) * packed_group_block_bytes(f);
}

// Groups [g0, g1) of w (Q8_0 or Q4_0, GGUF blocks) into `out`, which holds
// the whole packed matrix (packed_matrix_bytes).
void qpack_weights(const QuantMatrix& w, int64_t g0, int64_t g1, uint8_t* out);
// One activation row of `cols` values (a multiple of 32) into out
// (packed_act_bytes(cols)); rounding as quantize_act. A non-finite value
// makes its block's scale NaN.
void qpack_act(const float* x, int64_t cols, uint8_t* out);
// y[i * ldy + r] for i < m, every row r, by the formula above in scalar code:
// the kernels' results, bit for bit.
void qgemm_ref(const PackedQMatrix& w, const uint8_t* act, int64_t m, float* y, int64_t ldy);

}  // namespace tessera::cpu
