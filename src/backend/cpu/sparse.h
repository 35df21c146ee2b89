#pragma once
// Sparse weights: a matrix in compressed sparse rows (CSR) and the product of
// activations with it, for layers pruned so far that skipping the zeros beats
// the dense GEMM (the crossover is measured in docs/benchmarks.md).
#include <cstdint>
#include <vector>

namespace tessera::cpu {

struct CsrMatrix {
  int64_t rows = 0, cols = 0;
  const int64_t* row_ptr = nullptr;  // rows + 1 offsets into col_idx / values
  const int32_t* col_idx = nullptr;  // nnz column indices, ascending within a row
  const float* values = nullptr;     // nnz values
};

// The CSR form of a dense row-major [rows, cols] matrix (its nonzero entries).
struct CsrData {
  std::vector<int64_t> row_ptr;
  std::vector<int32_t> col_idx;
  std::vector<float> values;
};
CsrData csr_from_dense(const float* w, int64_t rows, int64_t cols);

// y [m, w.rows] = x [m, w.cols] @ w^T (+ bias [w.rows] if given). x and y are
// row-major and contiguous.
void csr_linear(const CsrMatrix& w, const float* x, int64_t m, const float* bias, float* y);
// The definition csr_linear is tested against: one dot product per output.
void csr_linear_ref(const CsrMatrix& w, const float* x, int64_t m, const float* bias, float* y);

}  // namespace tessera::cpu
