// The K-quant quantizers (Q4_K, Q6_K: Note [Quantized weight formats] in
// backend/quant_format.h): ggml's reference algorithms (quantize_row_q4_K_ref,
// quantize_row_q6_K_ref, without an importance matrix), step for step in the
// same float operations, so a file Tessera writes holds the bytes llama.cpp's
// quantizer would. This file is compiled for the baseline ISA: no FMA
// contraction changes a rounding.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/quant_format.h"
#include "tessera/core/half.h"

namespace tessera::backend {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: a sub-block below it is zero

// Round to nearest, ties to even, via the float adder (ggml's nearest_int;
// |v| < 2^22).
int nearest_int(float v) {
  const float t = v + 12582912.f;
  int32_t i;
  std::memcpy(&i, &t, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

// Q6_K's sub-block search (ggml's make_qx_quants with rmse_type 1, no
// weights): codes L in [0, 2 nmax) for x / scale + nmax, the scale chosen
// among 19 candidates around amax / nmax to maximise (sum w x l)^2 / sum w l^2
// with w = x^2; returns the scale (0 for an all-zero sub-block).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0.f, amax = 0.f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) amax = ax, max = x[i];
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, 0);
    return 0.f;
  }
  auto sums = [&](float iscale, float& sumlx, float& suml2) {
    sumlx = suml2 = 0.f;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);  // (w l) l, as ggml
    }
  };
  auto codes = [&](float iscale) {
    for (int i = 0; i < n; ++i)
      L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i]))));
  };
  float iscale = static_cast<float>(-nmax) / max, sumlx, suml2;
  codes(iscale);
  sums(iscale, sumlx, suml2);
  float scale = suml2 != 0.f ? sumlx / suml2 : 0.f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sums(iscale, sumlx, suml2);
    if (suml2 > 0.f && sumlx * sumlx > best * suml2) {
      codes(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q4_K's sub-block search (ggml's make_qkx2_quants): codes L in [0, nmax] for
// (x - min) / scale with min <= 0, trying nstep + 1 scales and fitting scale
// and min by weighted least squares at each; returns the scale and -min.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0.f) min = 0.f;
  if (max == min) {
    std::fill(L, L + n, 0);
    *the_min = -min;
    return 0.f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.f / iscale;
  float best_error = 0.f;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min)))));
    const float diff = scale * static_cast<float>(L[i]) + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0.f, sum_l2 = 0.f, sum_xl = 0.f;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * static_cast<float>(l);
      sum_l2 += w * static_cast<float>(l) * static_cast<float>(l);
      sum_xl += w * static_cast<float>(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0.f) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0.f) {
        this_min = 0.f;
        this_scale = sum_xl / sum_l2;
      }
      float error = 0.f;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        error += weights[i] * (diff * diff);
      }
      if (error < best_error) {
        std::copy(Laux, Laux + n, L);
        best_error = error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

}  // namespace

void quantize_q4_k(const float* x, int64_t n, BlockQ4_K* out) {
  uint8_t L[kQKBlock], Laux[32];
  float weights[32], mins[8], scales[8];
  for (int64_t i = 0; i < n / kQKBlock; ++i, x += kQKBlock) {
    BlockQ4_K& y = out[i];
    float max_scale = 0.f, max_min = 0.f;
    for (int j = 0; j < 8; ++j) {
      float sum_x2 = 0.f;
      for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
      const float av_x = std::sqrt(sum_x2 / 32.f);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
      scales[j] = make_qkx2_quants(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0.f ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0.f ? 63.f / max_min : 0.f;
    std::memset(y.scales, 0, sizeof y.scales);
    for (int j = 0; j < 8; ++j) {
      const auto ls = static_cast<uint8_t>(std::min(63, static_cast<int>(static_cast<uint8_t>(nearest_int(inv_scale * scales[j])))));
      const auto lm = static_cast<uint8_t>(std::min(63, static_cast<int>(static_cast<uint8_t>(nearest_int(inv_min * mins[j])))));
      if (j < 4) {
        y.scales[j] = ls;
        y.scales[j + 4] = lm;
      } else {
        y.scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        y.scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
        y.scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
      }
    }
    y.d = Half::from_float(max_scale / 63.f);
    y.dmin = Half::from_float(max_min / 63.f);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      q4_k_scale_min(j, y.scales, sc, m);
      const float d = Half::to_float(y.d) * static_cast<float>(sc);
      if (d == 0.f) continue;
      const float dm = Half::to_float(y.dmin) * static_cast<float>(m);
      for (int l = 0; l < 32; ++l)
        L[32 * j + l] = static_cast<uint8_t>(std::max(0, std::min(15, nearest_int((x[32 * j + l] + dm) / d))));
    }
    for (int j = 0; j < kQKBlock; j += 64)
      for (int l = 0; l < 32; ++l) y.qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void quantize_q6_k(const float* x, int64_t n, BlockQ6_K* out) {
  int8_t L[kQKBlock];
  float scales[16];
  for (int64_t i = 0; i < n / kQKBlock; ++i, x += kQKBlock) {
    BlockQ6_K& y = out[i];
    float max_scale = 0.f, max_abs_scale = 0.f;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > max_abs_scale) max_abs_scale = std::fabs(scales[ib]), max_scale = scales[ib];
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y, 0, sizeof y);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y.d = Half::from_float(1.f / iscale);
    for (int ib = 0; ib < 16; ++ib) y.scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < 16; ++j) {
      const float d = Half::to_float(y.d) * static_cast<float>(y.scales[j]);
      if (d == 0.f) continue;
      for (int l = 0; l < 16; ++l)
        L[16 * j + l] = static_cast<int8_t>(std::max(-32, std::min(31, nearest_int(x[16 * j + l] / d))) + 32);
    }
    for (int j = 0, h = 0; j < kQKBlock; j += 128, ++h)
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        y.ql[64 * h + l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        y.ql[64 * h + l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        y.qh[32 * h + l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
  }
}

}  // namespace tessera::backend
