// The sparse-weight product's inner loops (backend/cpu/sparse.h), per ISA.
#include <algorithm>
#include <vector>

#include "backend/cpu/kernels/common.h"

namespace tessera::cpu::TESSERA_ISA {
namespace {

void csr_rows(const CsrMatrix& w, const float* xt, int64_t m, const float* bias, float* y, int64_t r0, int64_t r1) {
  if (m == 1) {  // a gather-dot per output row
    for (int64_t r = r0; r < r1; ++r) {
      float acc = bias ? bias[r] : 0.0f;
      for (int64_t p = w.row_ptr[r]; p < w.row_ptr[r + 1]; ++p) acc += w.values[p] * xt[w.col_idx[p]];
      y[r] = acc;
    }
    return;
  }
  // Each nonzero scales a contiguous run of m activations into the row's accumulators.
  std::vector<float> acc(m);
  float* a = acc.data();
  for (int64_t r = r0; r < r1; ++r) {
    std::fill(a, a + m, bias ? bias[r] : 0.0f);
    for (int64_t p = w.row_ptr[r]; p < w.row_ptr[r + 1]; ++p) {
      const float v = w.values[p];
      const float* __restrict xr = xt + static_cast<int64_t>(w.col_idx[p]) * m;
      for (int64_t i = 0; i < m; ++i) a[i] += v * xr[i];
    }
    for (int64_t i = 0; i < m; ++i) y[i * w.rows + r] = a[i];
  }
}

}  // namespace

void fill_sparse_kernels(KernelTable& t) { t.csr_rows = csr_rows; }

}  // namespace tessera::cpu::TESSERA_ISA
