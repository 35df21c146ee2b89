#pragma once
// IEEE half (f16) and bfloat16 storage types. Arithmetic happens in float; the
// conversions are branch-free so loops over them vectorize.
#include <bit>
#include <cstdint>

namespace tessera {

struct Half {
  uint16_t x = 0;
  Half() = default;
  Half(float f) : x(from_float(f)) {}
  operator float() const { return to_float(x); }

  static uint16_t from_float(float f) {
    // Round-to-nearest-even, with overflow to inf and NaN kept quiet.
    uint32_t u = std::bit_cast<uint32_t>(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return static_cast<uint16_t>(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
    if (a < 0x38800000u) {
      // Subnormal half: let the FPU round by adding a magic number.
      float r = std::bit_cast<float>(a) + 0.5f;
      return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(r) - 0x3f000000u));
    }
    uint32_t mant_odd = (a >> 13) & 1u;
    a += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
    return static_cast<uint16_t>(sign | (a >> 13));
  }
  static float to_float(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    // Shift exponent+mantissa into place and rescale by 2^112; inf/nan fixed after.
    float f = std::bit_cast<float>(em << 13) * std::bit_cast<float>(0x77800000u);
    uint32_t r = std::bit_cast<uint32_t>(f);
    if (em >= 0x7c00u) r = 0x7f800000u | (em << 13);
    return std::bit_cast<float>(r | sign);
  }
};

struct BFloat16 {
  uint16_t x = 0;
  BFloat16() = default;
  BFloat16(float f) : x(from_float(f)) {}
  operator float() const { return to_float(x); }

  static uint16_t from_float(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return static_cast<uint16_t>(u >> 16);
  }
  static float to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
};

}  // namespace tessera
