#pragma once
#include <optional>
#include <string_view>
// Element types: the enum, their sizes and names, and PyTorch's promotion rules.
#include <cstdint>
#include <ostream>

#include "tessera/core/error.h"
#include "tessera/core/half.h"

namespace tessera {

enum class DType : uint8_t { Bool, U8, I8, I32, I64, F16, BF16, F32, F64 };
constexpr int kNumDTypes = 9;

constexpr DType kBool = DType::Bool, kU8 = DType::U8, kI8 = DType::I8, kI32 = DType::I32,
                kI64 = DType::I64, kF16 = DType::F16, kBF16 = DType::BF16, kF32 = DType::F32,
                kF64 = DType::F64;

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// The dtype named like dtype_name ("f32", "i64", "bool"), or nullopt.
std::optional<DType> dtype_from_name(std::string_view name);
std::ostream& operator<<(std::ostream& os, DType t);

constexpr bool is_floating(DType t) {
  return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64;
}
constexpr bool is_integral(DType t, bool include_bool) {
  return t == DType::U8 || t == DType::I8 || t == DType::I32 || t == DType::I64 ||
         (include_bool && t == DType::Bool);
}
constexpr bool is_reduced_float(DType t) { return t == DType::F16 || t == DType::BF16; }

// The smallest type both values fit in (torch.promote_types). Tessera has no
// int16: u8 with i8 promotes to i32 (PyTorch gives int16).
DType promote_types(DType a, DType b);
DType default_float_dtype();
void set_default_float_dtype(DType t);

template <typename T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::I8; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::F16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BF16; };
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <typename T> constexpr DType dtype_v = dtype_of<T>::value;

// Calls f.template operator()<T>() with the C++ type of `t`.
#define TS_DTYPE_CASE(DT, T) \
  case DType::DT: return f.template operator()<T>();

template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    TS_DTYPE_CASE(Bool, bool)
    TS_DTYPE_CASE(U8, uint8_t)
    TS_DTYPE_CASE(I8, int8_t)
    TS_DTYPE_CASE(I32, int32_t)
    TS_DTYPE_CASE(I64, int64_t)
    TS_DTYPE_CASE(F16, Half)
    TS_DTYPE_CASE(BF16, BFloat16)
    TS_DTYPE_CASE(F32, float)
    TS_DTYPE_CASE(F64, double)
  }
  __builtin_unreachable();
}
template <typename F>
decltype(auto) visit_floating(DType t, F&& f) {
  switch (t) {
    TS_DTYPE_CASE(F16, Half)
    TS_DTYPE_CASE(BF16, BFloat16)
    TS_DTYPE_CASE(F32, float)
    TS_DTYPE_CASE(F64, double)
    default: break;
  }
  TS_ERROR("expected a floating-point dtype, got ", dtype_name(t));
}

// The type arithmetic on T is done in: float for the 16-bit floats, T otherwise.
template <typename T> struct acc_type { using type = T; };
template <> struct acc_type<Half> { using type = float; };
template <> struct acc_type<BFloat16> { using type = float; };
template <typename T> using acc_t = typename acc_type<T>::type;

}  // namespace tessera
