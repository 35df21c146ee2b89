// Max pooling without indices (inference: nothing will need the argmax), over
// planes of [H, W, lanes]: lanes = 1 is NCHW, lanes = 8 or 16 a channel-blocked
// activation [N, C/lanes, H, W, lanes]. Separable: each output row first takes
// the elementwise max of the window's input rows (contiguous, vector-wide),
// then the max across each window's columns. A NaN anywhere in a window wins,
// as in PyTorch. Also over u8/s8 codes (lanes = C: channels-last [N, H, W, C]).
#include <limits>
#include <vector>

#include "backend/cpu/kernels/common.h"
#include "backend/cpu/pool.h"

namespace tessera::cpu::TESSERA_ISA {
namespace {

template <typename A> inline A nan_max(A a, A b) { return (b > a || b != b) ? b : a; }

template <typename T>
void max_pool_planes(const PoolGeometry& g, const void* xv, void* yv, int64_t p0, int64_t p1) {
  using A = C<T>;
  const T* x = static_cast<const T*>(xv);
  T* y = static_cast<T*>(yv);
  const int64_t L = g.lanes, W = g.W * L, OW = g.OW * L;
  // The row of window maxima, with -inf columns on either side where windows
  // run past the edges (padding never wins, as in PyTorch).
  const int64_t left = g.pw;
  const int64_t right = std::max<int64_t>(0, (g.OW - 1) * g.sw + (g.kw - 1) * g.dw - g.pw + 1 - g.W);
  const A lowest = std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                        : std::numeric_limits<A>::lowest();
  std::vector<A> padded((left + g.W + right) * L, lowest), out(OW);
  A* row = padded.data() + left * L;
  const A* col0 = padded.data();  // column c of the padded row starts at c * L
  const int64_t step = g.sw * L, dil = g.dw * L;
  for (int64_t p = p0; p < p1; ++p) {
    const T* xp = x + p * g.H * W;
    T* yp = y + p * g.OH * OW;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      bool any = false;
      for (int64_t i = 0; i < g.kh; ++i) {
        const int64_t h = oh * g.sh - g.ph + i * g.dh;
        if (h < 0 || h >= g.H) continue;
        const T* xr = xp + h * W;
        if (!any) {
          for (int64_t k = 0; k < W; ++k) row[k] = ld(xr[k]);
        } else {
          for (int64_t k = 0; k < W; ++k) row[k] = nan_max(row[k], ld(xr[k]));
        }
        any = true;
      }
      if (!any) std::fill(row, row + W, lowest);
      T* yr = yp + oh * OW;
      if (L == 1) {
        // Window j of every output at once: loads strided by the stride.
        for (int64_t o = 0; o < g.OW; ++o) out[o] = col0[o * step];
        for (int64_t j = 1; j < g.kw; ++j) {
          const A* c = col0 + j * dil;
          for (int64_t o = 0; o < g.OW; ++o) out[o] = nan_max(out[o], c[o * step]);
        }
      } else {
        for (int64_t o = 0; o < g.OW; ++o) {
          const A* c = col0 + o * step;
          A* d = out.data() + o * L;
          for (int64_t l = 0; l < L; ++l) d[l] = c[l];
          for (int64_t j = 1; j < g.kw; ++j)
            for (int64_t l = 0; l < L; ++l) d[l] = nan_max(d[l], c[j * dil + l]);
        }
      }
      for (int64_t k = 0; k < OW; ++k) yr[k] = st<T>(out[k]);
    }
  }
}

}  // namespace

void fill_pool_kernels(KernelTable& t) {
  // Integer codes too: max pooling commutes with a monotone quantization, so
  // an int8 graph pools its u8 activations directly.
  for_types<TS_FLOAT_TYPES, uint8_t, int8_t>(
      [&]<typename T>() { t.max_pool_planes[idx(dtype_v<T>)] = &max_pool_planes<T>; });
}

}  // namespace tessera::cpu::TESSERA_ISA
