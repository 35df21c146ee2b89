#include "backend/cpu/pool.h"

#include "backend/cpu/kernel_table.h"

#include <algorithm>

#include <cmath>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu {
namespace {

template <typename T> using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The window of output (oh, ow) clipped to the input, and the divisor average
// pooling uses (PyTorch's rule for count_include_pad).
struct Window {
  int64_t h0, h1, w0, w1, divisor;
};
Window window(const PoolGeometry& g, int64_t oh, int64_t ow) {
  int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
  int64_t h1 = std::min(h0 + g.kh, g.H + g.ph), w1 = std::min(w0 + g.kw, g.W + g.pw);
  int64_t pool = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, g.H);
  w1 = std::min(w1, g.W);
  return {h0, h1, w0, w1, g.count_include_pad ? pool : (h1 - h0) * (w1 - w0)};
}

}  // namespace

void max_pool2d_forward(const PoolGeometry& g, const void* xv, void* yv, int64_t* indices) {
  if (!indices) {
    auto kernel = kernels().max_pool_planes[idx(g.dtype)];
    TS_CHECK(kernel, "max_pool2d: no kernel for ", dtype_name(g.dtype));
    parallel_for(0, g.planes, std::max<int64_t>(1, 16384 / (g.H * g.W * g.lanes)),
                 [&](int64_t p0, int64_t p1) { kernel(g, xv, yv, p0, p1); });
    return;
  }
  TS_CHECK(g.lanes == 1, "max_pool2d: indices are defined for NCHW planes only");
  // Windows that never leave the plane (no padding, no dilation: the common
  // case) skip the bounds checks.
  const bool inside = g.ph == 0 && g.pw == 0 && g.dh == 1 && g.dw == 1 && (g.OH - 1) * g.sh + g.kh <= g.H &&
                      (g.OW - 1) * g.sw + g.kw <= g.W;
  visit_floating(g.dtype, [&]<typename T>() {
    const T* x = static_cast<const T*>(xv);
    T* y = static_cast<T*>(yv);
    parallel_for(0, g.planes, std::max<int64_t>(1, 4096 / (g.H * g.W)), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const T* xp = x + p * g.H * g.W;
        T* yp = y + p * g.OH * g.OW;
        int64_t* ip = indices + p * g.OH * g.OW;
        if (inside) {
          for (int64_t oh = 0; oh < g.OH; ++oh)
            for (int64_t ow = 0; ow < g.OW; ++ow) {
              const int64_t start = oh * g.sh * g.W + ow * g.sw;
              Acc<T> best = static_cast<Acc<T>>(xp[start]);
              int64_t bi = start;
              // Branch-free selects: the data decides nothing but values (random
              // maxima would mispredict every other compare). A NaN, once taken, stays.
              for (int64_t i = 0; i < g.kh; ++i)
                for (int64_t j = 0; j < g.kw; ++j) {
                  const int64_t k = start + i * g.W + j;
                  const Acc<T> v = static_cast<Acc<T>>(xp[k]);
                  const bool take = (v > best) | ((v != v) & (best == best));
                  best = take ? v : best;
                  bi = take ? k : bi;
                }
              yp[oh * g.OW + ow] = static_cast<T>(best);
              ip[oh * g.OW + ow] = bi;
            }
          continue;
        }
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            Acc<T> best = -INFINITY;
            int64_t bi = -1;
            for (int64_t i = 0; i < g.kh; ++i) {
              int64_t h = oh * g.sh - g.ph + i * g.dh;
              if (h < 0 || h >= g.H) continue;
              for (int64_t j = 0; j < g.kw; ++j) {
                int64_t w = ow * g.sw - g.pw + j * g.dw;
                if (w < 0 || w >= g.W) continue;
                Acc<T> v = static_cast<Acc<T>>(xp[h * g.W + w]);
                if (bi < 0 || v > best || std::isnan(v)) {
                  best = v;
                  bi = h * g.W + w;
                  if (std::isnan(v)) goto done;
                }
              }
            }
          done:
            yp[oh * g.OW + ow] = static_cast<T>(best);
            ip[oh * g.OW + ow] = bi;
          }
      }
    });
  });
}

void max_pool2d_backward(const PoolGeometry& g, const void* gyv, const int64_t* indices, void* gxv) {
  visit_floating(g.dtype, [&]<typename T>() {
    const T* gy = static_cast<const T*>(gyv);
    T* gx = static_cast<T*>(gxv);
    parallel_for(0, g.planes, std::max<int64_t>(1, 4096 / (g.H * g.W)), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        T* gxp = gx + p * g.H * g.W;
        const T* gyp = gy + p * g.OH * g.OW;
        const int64_t* ip = indices + p * g.OH * g.OW;
        std::fill(gxp, gxp + g.H * g.W, T(0));
        for (int64_t o = 0; o < g.OH * g.OW; ++o)
          if (ip[o] >= 0) gxp[ip[o]] = static_cast<T>(static_cast<Acc<T>>(gxp[ip[o]]) + static_cast<Acc<T>>(gyp[o]));
      }
    });
  });
}

void avg_pool2d_forward(const PoolGeometry& g, const void* xv, void* yv) {
  visit_floating(g.dtype, [&]<typename T>() {
    const T* x = static_cast<const T*>(xv);
    T* y = static_cast<T*>(yv);
    parallel_for(0, g.planes, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            Window win = window(g, oh, ow);
            Acc<T> s = 0;
            for (int64_t h = win.h0; h < win.h1; ++h)
              for (int64_t w = win.w0; w < win.w1; ++w) s += static_cast<Acc<T>>(x[(p * g.H + h) * g.W + w]);
            y[(p * g.OH + oh) * g.OW + ow] = static_cast<T>(win.divisor > 0 ? s / static_cast<Acc<T>>(win.divisor) : Acc<T>(NAN));
          }
    });
  });
}

void avg_pool2d_backward(const PoolGeometry& g, const void* gyv, void* gxv) {
  visit_floating(g.dtype, [&]<typename T>() {
    const T* gy = static_cast<const T*>(gyv);
    T* gx = static_cast<T*>(gxv);
    parallel_for(0, g.planes, 1, [&](int64_t p0, int64_t p1) {
      std::vector<Acc<T>> acc(g.H * g.W);
      for (int64_t p = p0; p < p1; ++p) {
        std::fill(acc.begin(), acc.end(), Acc<T>(0));
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            Window win = window(g, oh, ow);
            if (win.divisor <= 0) continue;
            Acc<T> v = static_cast<Acc<T>>(gy[(p * g.OH + oh) * g.OW + ow]) / static_cast<Acc<T>>(win.divisor);
            for (int64_t h = win.h0; h < win.h1; ++h)
              for (int64_t w = win.w0; w < win.w1; ++w) acc[h * g.W + w] += v;
          }
        for (int64_t i = 0; i < g.H * g.W; ++i) gx[p * g.H * g.W + i] = static_cast<T>(acc[i]);
      }
    });
  });
}

}  // namespace tessera::cpu
