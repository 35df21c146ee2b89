#pragma once
// Skinny products: C = A @ B for a few rows of A, where B is the transpose of
// a weight whose rows are contiguous (linear's x W^T, a matrix-vector
// product), in f32, bf16 or f16. Tessera's own kernel (kernels/skinny.cpp)
// reads each weight row once and gives each row of C the same bits whatever
// the number of rows (Note [Row-invariant skinny products]); gemm() sends it
// the products it is faster at and oneDNN the rest.
#include "backend/cpu/gemm.h"

namespace tessera::cpu {

// The most rows of A (all batches together) the skinny kernel takes for a
// dtype on this CPU: the crossover with oneDNN measured per kernel tier
// (bench/gemv_compare.py; docs/benchmarks.md): 16 for f32 and f16; for bf16
// 8 on the bf16-dot kernel (AVX512-BF16), else 2 where oneDNN has native bf16
// products, else 16.
// TESSERA_SKINNY_MAX_ROWS overrides it for every dtype (0: never).
int64_t skinny_max_rows(DType dtype);

// Whether g is a product the skinny kernel can run (any epilogue).
bool skinny_ok(const GemmArgs& g);

void gemm_skinny(const GemmArgs& g);

}  // namespace tessera::cpu
