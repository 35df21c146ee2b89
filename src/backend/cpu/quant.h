#pragma once
// Quantized matrix products on the CPU. The formats themselves and their
// references are backend-neutral (backend/quant_format.h).
#include <cstdint>

#include "backend/quant_format.h"

namespace tessera::cpu {

using backend::QFormat;
using backend::kNumQFormats;
using backend::kQBlock;
using backend::kQKBlock;
using backend::BlockQ8_0;
using backend::BlockQ4_0;
using backend::BlockQ4_K;
using backend::BlockQ6_K;
using backend::q4_k_scale_min;
using backend::q4_k_code;
using backend::q6_k_code;
using backend::BlockQ8Act;
using backend::qformat_name;
using backend::qformat_from_name;
using backend::QuantMatrix;
using backend::qrow_bytes;
using backend::qformat_is_block;
using backend::qblock_elems;
using backend::qblock_bytes;
using backend::check_qshape;
using backend::QuantizedWeights;
using backend::quantize_ref;
using backend::view_of;
using backend::dequantize_ref;
using backend::qmatmul_ref;
using backend::quantize_q4_k;
using backend::quantize_q6_k;
using backend::quantize_act_ref;
using backend::qdot_ref;
using backend::qdot_supported;

// y [m, rows] = x [m, cols] @ w^T, f32 activations: the fast path.
//   float (integer = false): m <= 4 decodes weights in registers; larger m
//     dequantizes tiles of rows for the f32 GEMM.
//   integer: the block formats (and Int8 at m <= 4) quantize x per 32 values
//     and run int8 dot products, up to 16 rows (above, the float GEMM path);
//     Int8 at m > 4 quantizes x per tensor and runs oneDNN's int8 GEMM.
// See docs/quantization.md for the measurements behind the thresholds.
void qmatmul(const QuantMatrix& w, const float* x, int64_t m, float* y, bool integer);

}  // namespace tessera::cpu
