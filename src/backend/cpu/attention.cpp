#include "backend/cpu/attention.h"

#include <cmath>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernel_table.h"
#include "tessera/core/generator.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kBlockQ = 64;

int64_t row_blocks(const AttentionArgs& a) { return (a.S + 3) / 4; }

template <typename T>
void gemm_into(DType dt, int64_t m, int64_t n, int64_t k, const T* A, int64_t a_rs, int64_t a_cs, const T* B,
               int64_t b_rs, int64_t b_cs, T* C, int64_t c_rs, double alpha, bool accumulate) {
  GemmArgs g;
  g.dtype = dt;
  g.m = m;
  g.n = n;
  g.k = k;
  g.sa[0] = 0; g.sa[1] = a_rs; g.sa[2] = a_cs;
  g.sb[0] = 0; g.sb[1] = b_rs; g.sb[2] = b_cs;
  g.sc[0] = 0; g.sc[1] = c_rs; g.sc[2] = 1;
  g.a = A;
  g.b = B;
  g.c = C;
  g.alpha = alpha;
  g.accumulate = accumulate;
  gemm(g);
}

// Scores of query rows [i0, i1) against keys [0, kend): scale * q k^T + mask,
// causal positions set to -inf. Written to s (row stride kend).
template <typename T>
void scores(const AttentionArgs& a, DType dt, int64_t b, int64_t i0, int64_t i1, int64_t kend, T* s) {
  const T* q = static_cast<const T*>(a.q) + b * a.sq[0] + i0 * a.sq[1];
  const T* k = static_cast<const T*>(a.k) + b * a.sk[0];
  int64_t br = i1 - i0;
  gemm_into<T>(dt, br, kend, a.E, q, a.sq[1], a.sq[2], k, a.sk[2], a.sk[1], s, kend, a.scale, false);
  if (a.mask) {
    const T* m = static_cast<const T*>(a.mask) + b * a.sm[0];
    for (int64_t r = 0; r < br; ++r)
      for (int64_t j = 0; j < kend; ++j) s[r * kend + j] += m[(i0 + r) * a.sm[1] + j * a.sm[2]];
  }
  if (a.causal)
    for (int64_t r = 0; r < br; ++r)
      for (int64_t j = i0 + r + 1; j < kend; ++j) s[r * kend + j] = -INFINITY;
}

template <typename T>
void forward_impl(const AttentionArgs& a, T* out, T* lse) {
  DType dt = a.f64 ? DType::F64 : DType::F32;
  int64_t qblocks = (a.L + kBlockQ - 1) / kBlockQ;
  double keep = 1.0 - a.dropout_p;
  parallel_for(0, a.bh * qblocks, 1, [&](int64_t w0, int64_t w1) {
    std::vector<T> s;
    for (int64_t w = w0; w < w1; ++w) {
      int64_t b = w / qblocks, i0 = (w % qblocks) * kBlockQ, i1 = std::min(a.L, i0 + kBlockQ);
      int64_t kend = a.causal ? std::min(a.S, i1) : a.S;
      int64_t br = i1 - i0;
      T* o = out + (b * a.L + i0) * a.Ev;
      if (kend == 0) {
        for (int64_t i = 0; i < br * a.Ev; ++i) o[i] = NAN;
        for (int64_t r = 0; r < br; ++r) lse[b * a.L + i0 + r] = -INFINITY;
        continue;
      }
      s.resize(br * kend);
      scores(a, dt, b, i0, i1, kend, s.data());
      kernels().attn_softmax[idx(dt)](s.data(), lse + b * a.L + i0, br, kend);
      if (a.dropout_p > 0)
        for (int64_t r = 0; r < br; ++r) {
          T* row = s.data() + r * kend;
          for (int64_t j = 0; j < kend; ++j)
            row[j] = attention_keep(a, b, i0 + r, j) ? static_cast<T>(row[j] / keep) : T(0);
        }
      const T* v = static_cast<const T*>(a.v) + b * a.sv[0];
      gemm_into<T>(dt, br, a.Ev, kend, s.data(), kend, 1, v, a.sv[1], a.sv[2], o, a.Ev, 1.0, false);
    }
  });
}

template <typename T>
void backward_impl(const AttentionArgs& a, const T* dout, const T* out, const T* lse, T* dq, T* dk, T* dv) {
  DType dt = a.f64 ? DType::F64 : DType::F32;
  double keep = 1.0 - a.dropout_p;
  // One (batch*head) per task: dK and dV accumulate over all query blocks.
  parallel_for(0, a.bh, 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> p, dp, d;
    for (int64_t b = b0; b < b1; ++b) {
      T* dkb = dk + b * a.S * a.E;
      T* dvb = dv + b * a.S * a.Ev;
      std::fill(dkb, dkb + a.S * a.E, T(0));
      std::fill(dvb, dvb + a.S * a.Ev, T(0));
      const T* q = static_cast<const T*>(a.q) + b * a.sq[0];
      const T* k = static_cast<const T*>(a.k) + b * a.sk[0];
      const T* v = static_cast<const T*>(a.v) + b * a.sv[0];
      for (int64_t i0 = 0; i0 < a.L; i0 += kBlockQ) {
        int64_t i1 = std::min(a.L, i0 + kBlockQ), br = i1 - i0;
        int64_t kend = a.causal ? std::min(a.S, i1) : a.S;
        T* dqb = dq + (b * a.L + i0) * a.E;
        const T* dob = dout + (b * a.L + i0) * a.Ev;
        const T* ob = out + (b * a.L + i0) * a.Ev;
        if (kend == 0) {
          std::fill(dqb, dqb + br * a.E, T(0));
          continue;
        }
        p.resize(br * kend);
        dp.resize(br * kend);
        d.resize(br);
        scores(a, dt, b, i0, i1, kend, p.data());
        kernels().attn_exp[idx(dt)](p.data(), lse + b * a.L + i0, br, kend);
        for (int64_t r = 0; r < br; ++r) {
          T acc = 0;
          for (int64_t e = 0; e < a.Ev; ++e) acc += dob[r * a.Ev + e] * ob[r * a.Ev + e];
          d[r] = acc;
        }
        // dP = dO V^T, then through dropout: dP *= keep_mask / keep.
        gemm_into<T>(dt, br, kend, a.Ev, dob, a.Ev, 1, v, a.sv[2], a.sv[1], dp.data(), kend, 1.0, false);
        if (a.dropout_p > 0) {
          // dV += (P * Z)^T dO, with Z the scaled keep mask; then dP *= Z.
          std::vector<T> pz(br * kend);
          for (int64_t r = 0; r < br; ++r)
            for (int64_t j = 0; j < kend; ++j) {
              T z = attention_keep(a, b, i0 + r, j) ? static_cast<T>(1.0 / keep) : T(0);
              pz[r * kend + j] = p[r * kend + j] * z;
              dp[r * kend + j] *= z;
            }
          gemm_into<T>(dt, kend, a.Ev, br, pz.data(), 1, kend, dob, a.Ev, 1, dvb, a.Ev, 1.0, true);
        } else {
          gemm_into<T>(dt, kend, a.Ev, br, p.data(), 1, kend, dob, a.Ev, 1, dvb, a.Ev, 1.0, true);
        }
        // dS = P * (dP - D), stored over dp.
        for (int64_t r = 0; r < br; ++r)
          for (int64_t j = 0; j < kend; ++j) dp[r * kend + j] = p[r * kend + j] * (dp[r * kend + j] - d[r]);
        // dQ = scale * dS K;  dK += scale * dS^T Q.
        gemm_into<T>(dt, br, a.E, kend, dp.data(), kend, 1, k, a.sk[1], a.sk[2], dqb, a.E, a.scale, false);
        gemm_into<T>(dt, kend, a.E, br, dp.data(), 1, kend, q + i0 * a.sq[1], a.sq[1], a.sq[2], dkb, a.E, a.scale, true);
      }
    }
  });
}

}  // namespace

bool attention_keep(const AttentionArgs& a, int64_t b, int64_t i, int64_t j) {
  uint64_t counter = a.offset + static_cast<uint64_t>((b * a.L + i) * row_blocks(a) + j / 4);
  auto r = philox4x32({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0},
                      {static_cast<uint32_t>(a.seed), static_cast<uint32_t>(a.seed >> 32)});
  double u = static_cast<double>(r[j % 4] >> 8) * (1.0 / 16777216.0);
  return u >= a.dropout_p;
}


void attention_forward(const AttentionArgs& a, void* out, void* lse) {
  if (a.f64) forward_impl<double>(a, static_cast<double*>(out), static_cast<double*>(lse));
  else forward_impl<float>(a, static_cast<float*>(out), static_cast<float*>(lse));
}

void attention_backward(const AttentionArgs& a, const void* dout, const void* out, const void* lse, void* dq,
                        void* dk, void* dv) {
  if (a.f64)
    backward_impl<double>(a, static_cast<const double*>(dout), static_cast<const double*>(out),
                          static_cast<const double*>(lse), static_cast<double*>(dq), static_cast<double*>(dk),
                          static_cast<double*>(dv));
  else
    backward_impl<float>(a, static_cast<const float*>(dout), static_cast<const float*>(out),
                         static_cast<const float*>(lse), static_cast<float*>(dq), static_cast<float*>(dk),
                         static_cast<float*>(dv));
}

}  // namespace tessera::cpu
