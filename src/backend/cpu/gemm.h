#pragma once
// Dense matrix multiply: C[b] (+)= alpha * A[b] @ B[b] (+ bias), batched with
// strides. A few rows against a weight (skinny.h) run on Tessera's own
// kernel; other f32 and bf16 products go to oneDNN (primitives cached by
// shape and layout); f64, f16 and integer types use a portable blocked loop.
#include <cstdint>
#include <memory>
#include <string>

#include "backend/kernel_ids.h"
#include "tessera/core/tensor.h"

namespace tessera::cpu {

using backend::Epilogue;  // applied by oneDNN post-ops

struct GemmArgs {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  // Element strides: [batch, row, col] for each operand.
  int64_t sa[3], sb[3], sc[3];
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  const void* bias = nullptr;  // length n, added to every row (contiguous)
  DType dtype = DType::F32;
  double alpha = 1.0;         // C = alpha * A @ B (+ bias)
  bool accumulate = false;    // C += ... instead of C = ...
  // C = act(alpha * A @ B + bias) + residual, fused into the GEMM: only where
  // gemm_epilogue_ok() says so. residual has C's shape and strides.
  Epilogue act = Epilogue::None;
  const void* residual = nullptr;
  // B already in the layout the product's primitive reads it in
  // (pack_gemm_weights); b must still point at B as laid out above.
  const void* packed_b = nullptr;
};

// Whether gemm() can apply args' epilogue inside the product (the oneDNN path:
// f32 or native bf16, a unit stride in each operand, no accumulation).
bool gemm_epilogue_ok(const GemmArgs& args);

void gemm(const GemmArgs& args);

// Constant weights, reordered once (as convolutions' are): the name of the
// layout the product `args` would read B in if it could choose, so that
// products sharing a layout share one packed copy; "" where it runs no oneDNN
// primitive (a few rows: the skinny kernel reads B's rows as they are) or
// where that layout is a plain one (B's own or its transpose: no gain, and on
// AVX2 a loss). pack_gemm_weights copies B into it; pass the
// copy as GemmArgs::packed_b. f32 and native bf16, one matrix.
std::string gemm_weights_layout(const GemmArgs& args);
std::shared_ptr<const void> pack_gemm_weights(const GemmArgs& args);

// C [m, n] = A [m, k] @ W^T for f32 operands, W given as its rows [n, k]
// (a weight as stored), all contiguous.
void gemm_rows(int64_t m, int64_t n, int64_t k, const float* a, const float* w_rows, float* c);

// C [m, n] (f32) = (A [m, k] @ B^T) * scales[j] with int8 operands and int32
// accumulation (oneDNN; VNNI where the CPU has it). B is given as its rows
// [n, k] (a quantized weight's int8 codes); scales has n entries (weight scale
// times activation scale).
void gemm_s8(int64_t m, int64_t n, int64_t k, const int8_t* a, const int8_t* b_rows, const float* scales, float* c);

// Whether the CPU runs bf16 matrix products natively (AVX512-BF16 or AMX, as
// oneDNN reports); elsewhere 16-bit products are computed in f32.
bool has_native_bf16();

// Statistics of the primitive cache, for tests and the profiler.
int64_t gemm_cache_size();

}  // namespace tessera::cpu
