#pragma once
// Sparse weights: a matrix in compressed sparse rows (CSR) and the product of
// activations with it, for layers pruned so far that skipping the zeros beats
// the dense GEMM (the crossover is measured in docs/benchmarks.md).
#include <cstdint>
#include <vector>

#include "backend/sparse_format.h"

namespace tessera::cpu {

using backend::CsrData;
using backend::CsrMatrix;
using backend::csr_from_dense;

// y [m, w.rows] = x [m, w.cols] @ w^T (+ bias [w.rows] if given). x and y are
// row-major and contiguous.
void csr_linear(const CsrMatrix& w, const float* x, int64_t m, const float* bias, float* y);
// The definition csr_linear is tested against: one dot product per output.
void csr_linear_ref(const CsrMatrix& w, const float* x, int64_t m, const float* bias, float* y);

}  // namespace tessera::cpu
