#pragma once
// Quantized weight formats: their layouts, sizes, quantizers and portable
// reference products. Backend-neutral: every backend's quantized kernels read
// these bytes, and the references define what they compute.
//
// Note [Quantized weight formats]
// A quantized weight matrix [rows, cols] (rows = output features) is one of:
//   Q8_0  GGUF block format: per 32 weights, an f16 scale d and 32 int8 q;
//         w = d * q. 34 bytes per block, byte-identical to ggml's block_q8_0.
//   Q4_0  GGUF block format: per 32 weights, an f16 scale d and 16 bytes of
//         nibbles (weight j in the low nibble of byte j, weight j+16 in the
//         high one); w = d * (q - 8). 18 bytes per block, ggml's block_q4_0.
//   Int8  per-row symmetric int8: data [rows, cols] int8, f32 scales [rows];
//         w = scale[r] * q. Any cols.
//   Int4  group-wise asymmetric int4: per `group` weights of a row (group a
//         multiple of 32 dividing cols), f16 scale s and f16 min m; w = s*q + m
//         with q in [0, 15]. data [rows, cols/2] bytes, each group's nibbles
//         packed like Q4_0 (weight j low, weight j + group/2 high); scales and
//         mins [rows, cols/group].
//   Q4_K  GGUF super-blocks of 256 weights (ggml's block_q4_K, 144 bytes): f16
//         d and dmin, eight 6-bit scales sc and mins m packed in 12 bytes
//         (q4_k_scale_min), 128 bytes of nibbles; sub-block j (32 weights) is
//         the low (j even) or high (j odd) nibbles of bytes 32*(j/2) ..;
//         w = (d * sc_j) * q - dmin * m_j with q in [0, 15].
//   Q6_K  GGUF super-blocks of 256 weights (ggml's block_q6_K, 210 bytes):
//         128 bytes of low 4 bits, 64 of high 2 bits, 16 int8 scales (one per
//         16 weights), f16 d; w = (d * sc) * (q - 32) with q in [0, 63]
//         (q6_k_code gives the layout).
// The bytes live in plain u8 / f16 / f32 tensors and the format travels as an
// attribute of the op that reads them (ops::quantized_linear); see
// docs/quantization.md for why these are not DType entries.
//
// Every backend's kernels have a portable reference here (quantize_ref, dequantize_ref,
// qmatmul_ref, qdot_ref) that the per-ISA kernels are tested against.
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::backend {

enum class QFormat : uint8_t { Q8_0, Q4_0, Int8, Int4, Q4_K, Q6_K };
constexpr int kNumQFormats = 6;

constexpr int64_t kQBlock = 32;    // elements per GGUF block and per activation block
constexpr int64_t kQKBlock = 256;  // elements per K-quant super-block

struct BlockQ8_0 {
  uint16_t d;  // f16 bits
  int8_t qs[kQBlock];
};
struct BlockQ4_0 {
  uint16_t d;  // f16 bits
  uint8_t qs[kQBlock / 2];
};
struct BlockQ4_K {
  uint16_t d, dmin;  // f16 bits
  uint8_t scales[12];
  uint8_t qs[kQKBlock / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQKBlock / 2];
  uint8_t qh[kQKBlock / 4];
  int8_t scales[kQKBlock / 16];
  uint16_t d;  // f16 bits
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_K) == 144 &&
                  sizeof(BlockQ6_K) == 210,
              "GGUF block sizes");

// Q4_K sub-block j's 6-bit scale and min (ggml's get_scale_min_k4): the first
// four in the low 6 bits of bytes j and j + 4; the last four split between a
// nibble of byte j + 4 and the top 2 bits of bytes j - 4 and j.
inline void q4_k_scale_min(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// Q4_K value k (0..255) of a super-block as its code q in [0, 15]:
// sub-block j = k / 32 is the low (j even) or high nibbles of bytes 32*(j/2)...
inline int q4_k_code(const BlockQ4_K& b, int k) {
  const int j = k / 32;
  return (b.qs[32 * (j / 2) + k % 32] >> (4 * (j & 1))) & 15;
}
// Q6_K value k (0..255) of a super-block as its code q in [0, 63]: each half
// of 128 values takes 64 bytes of ql and 32 of qh; within a half, value
// 32 * i + l is the low (i < 2) or high nibble of ql[l + 32 * (i & 1)] and
// bits 2i, 2i + 1 of qh[l].
inline int q6_k_code(const BlockQ6_K& b, int k) {
  const int h = k / 128, i = (k % 128) / 32, l = k % 32;
  const uint8_t lo = b.ql[64 * h + l + 32 * (i & 1)];
  return ((i < 2 ? lo & 0xF : lo >> 4) | (((b.qh[32 * h + l] >> (2 * i)) & 3) << 4));
}

// Activations quantized for the integer products: per 32 values an f32 scale
// d, d times the sum of the codes (the Int4 mins and Q4_0's offset need it),
// and the int8 codes.
struct BlockQ8Act {
  float d;
  float s;
  int8_t qs[kQBlock];
};

const char* qformat_name(QFormat f);
// "q8_0", "q4_0", "int8", "int4"; error naming the accepted spellings otherwise.
QFormat qformat_from_name(const std::string& name);

// A read-only view of one quantized matrix.
struct QuantMatrix {
  QFormat format = QFormat::Q8_0;
  int64_t rows = 0, cols = 0;
  int64_t group = 0;              // Int4 only
  const uint8_t* data = nullptr;  // rows * qrow_bytes(...) bytes
  const void* scales = nullptr;   // Int8: f32 [rows]; Int4: f16 [rows, cols/group]; else null
  const void* mins = nullptr;     // Int4: f16 [rows, cols/group]; else null
};

// Bytes of `data` per row.
int64_t qrow_bytes(QFormat f, int64_t cols);
// The GGUF block formats (Q8_0, Q4_0, Q4_K, Q6_K): self-contained blocks of
// qblock_elems(f) values in qblock_bytes(f) bytes, no separate scales.
bool qformat_is_block(QFormat f);
int64_t qblock_elems(QFormat f);
int64_t qblock_bytes(QFormat f);
// Checks cols (and group) fit the format; the error says what would.
void check_qshape(QFormat f, int64_t cols, int64_t group);

// The quantized form of a row-major f32 matrix [rows, cols].
struct QuantizedWeights {
  std::vector<uint8_t> data;
  std::vector<uint8_t> scales;  // raw bytes of the f32 / f16 scales
  std::vector<uint8_t> mins;
};
// Rounding follows ggml's quantize_row_q8_0_ref / q4_0_ref / q4_K_ref /
// q6_K_ref (quant_k.cpp) exactly, so the bytes match GGUF files made from the
// same weights without an importance matrix. Non-finite
// weights are an error (they would poison a whole block's scale).
QuantizedWeights quantize_ref(QFormat f, const float* w, int64_t rows, int64_t cols, int64_t group = 0);
QuantMatrix view_of(const QuantizedWeights& q, QFormat f, int64_t rows, int64_t cols, int64_t group = 0);
// Rows [r0, r1) back to f32, written to out [r1 - r0, cols].
void dequantize_ref(const QuantMatrix& w, int64_t r0, int64_t r1, float* out);
// y[i, r] = sum_k x[i, k] * w[r, k] for i < m, every row r; double accumulation.
void qmatmul_ref(const QuantMatrix& w, const float* x, int64_t m, float* y);

// K-quant super-blocks of n values (a multiple of 256) from f32, as ggml's
// quantize_row_q4_K_ref / quantize_row_q6_K_ref (quant_k.cpp).
void quantize_q4_k(const float* x, int64_t n, BlockQ4_K* out);
void quantize_q6_k(const float* x, int64_t n, BlockQ6_K* out);

// Integer path: activations quantized per 32-block (round to nearest,
// symmetric); cols % 32 == 0. qdot_ref computes each block's product exactly in
// int32 (K-quants: each code times its sub-block's integer scale) and combines
// blocks in float, block by block.
void quantize_act_ref(const float* x, int64_t cols, BlockQ8Act* out);
void qdot_ref(const QuantMatrix& w, const BlockQ8Act* xq, int64_t m, float* y);
// Whether the integer path applies to this matrix.
bool qdot_supported(const QuantMatrix& w);

}  // namespace tessera::backend
