#include "backend/cpu/sparse.h"

#include <algorithm>

#include "backend/cpu/kernel_table.h"
#include "tessera/core/allocator.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu {

void csr_linear(const CsrMatrix& w, const float* x, int64_t m, const float* bias, float* y) {
  if (m == 0 || w.rows == 0) return;
  auto kernel = kernels().csr_rows;
  if (m == 1) {
    parallel_for(0, w.rows, 64, [&](int64_t r0, int64_t r1) { kernel(w, x, 1, bias, y, r0, r1); });
    return;
  }
  // x transposed to [cols, m] once, so each nonzero reads m contiguous activations.
  const size_t xt_bytes = static_cast<size_t>(w.cols * m) * sizeof(float);
  auto* xt = static_cast<float*>(cpu_allocate(xt_bytes));
  parallel_for(0, w.cols, std::max<int64_t>(1, 4096 / m), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t i = 0; i < m; ++i) xt[j * m + i] = x[i * w.cols + j];
  });
  parallel_for(0, w.rows, std::max<int64_t>(1, 256 / m), [&](int64_t r0, int64_t r1) { kernel(w, xt, m, bias, y, r0, r1); });
  cpu_free(xt, xt_bytes);
}

void csr_linear_ref(const CsrMatrix& w, const float* x, int64_t m, const float* bias, float* y) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < w.rows; ++r) {
      double acc = bias ? bias[r] : 0.0;
      for (int64_t p = w.row_ptr[r]; p < w.row_ptr[r + 1]; ++p)
        acc += static_cast<double>(w.values[p]) * x[i * w.cols + w.col_idx[p]];
      y[i * w.rows + r] = static_cast<float>(acc);
    }
}

}  // namespace tessera::cpu
