#include "backend/sparse_format.h"

namespace tessera::backend {

CsrData csr_from_dense(const float* w, int64_t rows, int64_t cols) {
  CsrData c;
  c.row_ptr.reserve(rows + 1);
  c.row_ptr.push_back(0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j)
      if (w[r * cols + j] != 0.0f) {
        c.col_idx.push_back(static_cast<int32_t>(j));
        c.values.push_back(w[r * cols + j]);
      }
    c.row_ptr.push_back(static_cast<int64_t>(c.values.size()));
  }
  return c;
}

}  // namespace tessera::backend
