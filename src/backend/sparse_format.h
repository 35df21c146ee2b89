#pragma once
// Sparse weights in compressed sparse rows (CSR): the layout every backend's
// sparse product (kernels.csr_linear) reads, and its construction from a
// dense matrix on the host.
#include <cstdint>
#include <vector>

namespace tessera::backend {

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

}  // namespace tessera::backend
