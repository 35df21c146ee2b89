#pragma once
// Q8_0, Q4_0, Q4_K and Q6_K weights repacked for the CPU's int8 products, and the matrix
// product over them (kernels/qgemm.cpp): AVX2's vpmaddubsw and vpmaddwd
// (Note [Packed int8 products on AVX2]), AVX512-VNNI's vpdpbusd (64 unsigned
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
// their scale. Q4_K's weights are d * sc * q - dmin * m (q the nibble, sc
// and m the 32 values' 6-bit scale and min), so for it
//   acc = fma(d * dx, float(sc) * float(s), acc)       the product exact
//   acc = fma(-(dmin * dx), float(m) * float(sx), acc)  sx = sum_k x_k, exact
// in that order. Q6_K's weights are d * sc * (q - 32) with a scale sc (int8)
// per 16 values, so its blocks take two sums, s_lo over values 0..15 and
// s_hi over 16..31 (each with its own 128 * code sum taken out), and
//   s = sc_lo * s_lo + sc_hi * s_hi                      exact in int32
//   acc = fma(d * dx, float(s), acc)                      float(s) exact
// (|s| <= 2 * 127 * 16 * 127 * 32 < 2^24). The activation codes are made unsigned (+128) for vpdpbusd
// and tdpbusd, whose first operand is unsigned; 128 times the weight block's
// code sum takes that back out. The kernels take that sum from the codes
// they have loaded anyway (one more vpdpbusd, of ones, per 64 bytes): stored
// with the weights it cost 32 bytes per 16 rows and block, 6% more bytes for
// Q8_0 and 11% for Q4_0 to stream for every decoded token, where decode is
// bound by memory bandwidth (Q6_K keeps its stored offsets, which fold in
// the sub-block scales). Every step is one
// integer or one correctly rounded float operation on one (r, i), so the
// result is the same bits whichever kernel made it, in whatever tile: the
// AMX tile for whole groups of 16 tokens, VNNI for the rest and on CPUs
// without AMX, qgemm_ref everywhere (Note [Batch-invariant LLM kernels]).
//
// The weights are laid out as AMX's second operand wants them, which is also
// what a VNNI product with the 16 output rows in the 16 lanes wants: per
// group of 16 rows and block, 64-byte chunks c = 0..7 hold values 4c..4c+3
// of rows 0..15 (4 bytes per row). Q4_0 and Q4_K keep their nibbles: chunk
// c (c < 4) holds, per row, 4 bytes whose low nibbles are values 4c..4c+3
// (chunk c) and high nibbles values 16+4c.. (chunk c + 4), which for Q4_0 are
// the block's bytes qs[4c..4c+3]. Q6_K keeps q's low 4 bits so, and its high
// 2 bits in two more 64-byte lines: chunk c's at bits 2(c % 4) of line c / 4.
#include <cstdint>
#include <cstring>

#include "backend/cpu/quant.h"
#include "backend/llm_kernels.h"

namespace tessera::cpu {

// One activation row packed: its `cols` codes + 128 (u8), then one f32
// scale per block, then each block's code sum (int32).
inline int64_t packed_act_bytes(int64_t cols) { return cols + cols / kQBlock * 8; }
// Block b's scale and code sum in a packed activation row of `cols` values.
inline float packed_act_scale(const uint8_t* row, int64_t cols, int64_t b) {
  float d;
  std::memcpy(&d, row + cols + 4 * b, 4);
  return d;
}
inline int32_t packed_act_sum(const uint8_t* row, int64_t cols, int64_t b) {
  int32_t s;
  std::memcpy(&s, row + cols + cols / kQBlock * 4 + 4 * b, 4);
  return s;
}

// A weight matrix repacked in groups of 16 rows (the last padded with zero
// rows): per group and block, the codes (512 bytes for Q8_0, 256 for the
// nibbles, 384 for Q6_K; the chunks above), then for all but Q6_K 32 bytes
// of the 16 rows' factors: for Q8_0 and Q4_0 their scales (f16); for Q4_K
// their sc (u8) and m (u8). The
// K-quants lead each super-block of 8 blocks with a header: Q4_K the rows'
// d and dmin (f16, 64 bytes); Q6_K their d (f16, 32 bytes and 32 unused),
// then sc for the super-block's 16 halves (int8 [16][16 rows]), then per
// block 128 * (sc_lo * code sum_lo + sc_hi * code sum_hi) (int32 [8][16 rows]).
constexpr int64_t kPackRows = 16;
using backend::PackedQMatrix;
inline int64_t packed_block_code_bytes(QFormat f) {
  return f == QFormat::Q8_0 ? 512 : f == QFormat::Q6_K ? 384 : 256;
}
inline int64_t packed_group_block_bytes(QFormat f) {
  return packed_block_code_bytes(f) + (f == QFormat::Q6_K ? 0 : kPackRows * 2);
}
inline int64_t packed_super_header_bytes(QFormat f) {
  return f == QFormat::Q4_K ? 64 : f == QFormat::Q6_K ? 64 + 16 * kPackRows + 8 * kPackRows * 4 : 0;
}
constexpr int64_t kQ6ScaleAt = 64, kQ6OffsetAt = 64 + 16 * kPackRows;  // in Q6_K's header
// Where block b of a row group starts (its codes; the factors follow them),
// and a row group's bytes.
inline int64_t packed_block_offset(QFormat f, int64_t b) {
  const int64_t head = packed_super_header_bytes(f), bytes = packed_group_block_bytes(f);
  if (head == 0) return b * bytes;
  constexpr int64_t per = kQKBlock / kQBlock;
  return b / per * (head + per * bytes) + head + b % per * bytes;
}
// The header of the super-block that holds block b.
inline int64_t packed_header_offset(QFormat f, int64_t b) {
  return packed_block_offset(f, b / (kQKBlock / kQBlock) * (kQKBlock / kQBlock)) - packed_super_header_bytes(f);
}
inline int64_t packed_group_bytes(QFormat f, int64_t cols) {
  return cols / kQBlock * packed_group_block_bytes(f) + cols / kQKBlock * packed_super_header_bytes(f);
}
inline int64_t packed_matrix_bytes(QFormat f, int64_t rows, int64_t cols) {
  return (rows + kPackRows - 1) / kPackRows * packed_group_bytes(f, cols);
}
inline bool packed_format(QFormat f) {
  return f == QFormat::Q8_0 || f == QFormat::Q4_0 || f == QFormat::Q4_K || f == QFormat::Q6_K;
}

// Groups [g0, g1) of w (Q8_0, Q4_0, Q4_K or Q6_K, GGUF blocks) into `out`, which
// holds the whole packed matrix (packed_matrix_bytes).
void qpack_weights(const QuantMatrix& w, int64_t g0, int64_t g1, uint8_t* out);
// One activation row of `cols` values (a multiple of 32) into out
// (packed_act_bytes(cols)); rounding as quantize_act. A non-finite value
// makes its block's scale NaN. The kernels' version is KernelTable::qpack_act.
void qpack_act_ref(const float* x, int64_t cols, uint8_t* out);
// y[i * ldy + r] for i < m, every row r, by the formula above in scalar code:
// the kernels' results, bit for bit.
void qgemm_ref(const PackedQMatrix& w, const uint8_t* act, int64_t m, float* y, int64_t ldy);

}  // namespace tessera::cpu
