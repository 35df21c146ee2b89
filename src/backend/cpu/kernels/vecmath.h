#pragma once
// Branch-free float math that the compiler vectorizes inside kernel loops.
// Everything here is `static inline`: kernel files are compiled once per ISA
// and must not share out-of-line copies (see Note [CPU capabilities]).
// Accuracy: a few ulp in float; doubles use libm. Clamps are written as
// selects, never as the min/max library calls (those stay calls and block
// vectorization); the kernel files build with -fno-trapping-math for the same
// reason.
#include <bit>
#include <cmath>
#include <cstdint>

namespace tessera::cpu::TESSERA_ISA {

static inline float h2f(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  float f = std::bit_cast<float>(em << 13) * std::bit_cast<float>(0x77800000u);
  uint32_t r = std::bit_cast<uint32_t>(f);
  r = em >= 0x7c00u ? (0x7f800000u | (em << 13)) : r;
  return std::bit_cast<float>(r | sign);
}
static inline uint16_t f2h(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  uint32_t mant_odd = (a >> 13) & 1u;
  uint32_t normal = (a + 0xc8000fffu + mant_odd) >> 13;
  float sub = std::bit_cast<float>(a) + 0.5f;
  uint32_t subn = std::bit_cast<uint32_t>(sub) - 0x3f000000u;
  uint32_t r = a < 0x38800000u ? subn : normal;
  r = a >= 0x47800000u ? (a > 0x7f800000u ? 0x7e00u : 0x7c00u) : r;
  return static_cast<uint16_t>(sign | r);
}
static inline float bf2f(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
static inline uint16_t f2bf(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u) : r);
}

// exp: Cody-Waite range reduction, degree-6 polynomial, scale by 2^n.
static inline float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

// exp(r) for the reduced argument r in [-ln2/2, ln2/2] (Cephes polynomial),
// after x = n ln2 + r with n = round(x / ln2).
static inline float exp_reduced(float xc, float& n) {
  n = std::nearbyint(xc * 1.44269504088896341f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

static inline float vexp(float x) {
  float n;
  // NaN is answered at the end; it must not reach the float-to-int conversion (UB).
  float p = exp_reduced(x != x ? 0.0f : clampf(x, -104.0f, 88.7228394f), n);
  // 2^n split in two factors so n down to -150 still gives subnormals/zero.
  int32_t ni = static_cast<int32_t>(n);
  int32_t n1 = ni >> 1, n2 = ni - n1;  // shift, not /: no sign fix-up in the vector loop
  float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  float res = p * s1 * s2;
  res = x > 88.7228394f ? INFINITY : res;
  res = x < -103.972078f ? 0.0f : res;  // below half the smallest subnormal: exactly 0 (and exp(-inf) = 0)
  return x != x ? x : res;
}
static inline double vexp(double x) { return std::exp(x); }

// exp for softmax-like uses, where every value is later divided by a sum >= 1:
// results below FLT_MIN (x < -87.3) flush to 0, which saves the two-step
// scaling and keeps the constants in registers (AVX2 has only 16).
static inline float vexp_ftz(float x) {
  float n;
  // NaN is answered at the end; it must not reach the float-to-int conversion (UB).
  float xc = x != x ? 0.0f : clampf(x, -87.3365478515625f, 88.7228394f);
  float p = exp_reduced(xc, n);
  float res = p * std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  res = x < -87.3365478515625f ? 0.0f : res;
  res = x > 88.7228394f ? INFINITY : res;
  return x != x ? x : res;
}
static inline double vexp_ftz(double x) { return std::exp(x); }

// log: frexp by bit manipulation, polynomial on [sqrt(.5), sqrt(2)).
static inline float vlog(float x) {
  bool sub = x > 0.0f && x < 1.17549435e-38f;  // subnormal: scale into the normal range
  float xs = sub ? x * 8388608.0f : x;
  uint32_t u = std::bit_cast<uint32_t>(xs);
  int32_t e = static_cast<int32_t>((u >> 23) & 0xff) - 126 - (sub ? 23 : 0);
  float m = std::bit_cast<float>((u & 0x007fffffu) | 0x3f000000u);  // [0.5, 1)
  bool small = m < 0.707106781186547524f;
  e = small ? e - 1 : e;
  m = small ? m + m - 1.0f : m - 1.0f;
  float z = m * m;
  float p = 7.0376836292e-2f;
  p = p * m - 1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  float y = p * m * z;
  float fe = static_cast<float>(e);
  y += -2.12194440e-4f * fe;
  y += -0.5f * z;
  float r = m + y + 0.693359375f * fe;
  r = x == INFINITY ? x : r;
  r = x == 0.0f ? -INFINITY : r;
  r = x < 0.0f ? NAN : r;
  return x != x ? x : r;
}
static inline double vlog(double x) { return std::log(x); }

// tanh: rational approximation (odd/even polynomials), exact-ish to 1e-7.
static inline float vtanh(float a) {
  float x = clampf(a, -7.90531110763549805f, 7.90531110763549805f);
  float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 - 8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * x;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  float r = p / q;
  r = std::fabs(a) < 0.0004f ? a : r;
  return a != a ? a : r;
}
static inline double vtanh(double x) { return std::tanh(x); }

// erf: rational approximation on [-4, 4] (erf is +-1 in float beyond).
static inline float verf(float a) {
  float x = clampf(a, -4.0f, 4.0f);
  float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  p = p * x;
  float q = -1.45660718464996e-05f;
  q = q * x2 - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  float r = p / q;
  return a != a ? a : r;
}
static inline double verf(double x) { return std::erf(x); }

template <typename T> static inline T vsigmoid(T x) { return T(1) / (T(1) + vexp(-x)); }

}  // namespace tessera::cpu::TESSERA_ISA
