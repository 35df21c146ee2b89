#include "tessera/core/dtype.h"

#include "tessera/core/error.h"
#include "tessera/core/scalar.h"

namespace tessera {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Bool: case DType::U8: case DType::I8: return 1;
    case DType::F16: case DType::BF16: return 2;
    case DType::I32: case DType::F32: return 4;
    case DType::I64: case DType::F64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::U8: return "u8";
    case DType::I8: return "i8";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F32: return "f32";
    case DType::F64: return "f64";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (name == dtype_name(static_cast<DType>(i))) return static_cast<DType>(i);
  return std::nullopt;
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;
  if (fa) {
    if (a == DType::F64 || b == DType::F64) return DType::F64;
    return DType::F32;  // f32 with a 16-bit float, or f16 with bf16
  }
  // Both integral, different.
  auto rank = [](DType t) {
    switch (t) {
      case DType::U8: case DType::I8: return 1;
      case DType::I32: return 3;
      default: return 4;
    }
  };
  if ((a == DType::U8 && b == DType::I8) || (a == DType::I8 && b == DType::U8)) return DType::I32;
  return rank(a) > rank(b) ? a : b;
}

namespace {
DType g_default_float = DType::F32;
}
DType default_float_dtype() { return g_default_float; }
void set_default_float_dtype(DType t) {
  TS_CHECK(t == DType::F32 || t == DType::F64, "set_default_float_dtype: expected f32 or f64, got ",
           dtype_name(t));
  g_default_float = t;
}

DType Scalar::dtype() const {
  switch (kind_) {
    case Kind::Bool: return DType::Bool;
    case Kind::Int: return DType::I64;
    case Kind::Float: return default_float_dtype();
  }
  return DType::F32;
}

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.is_bool()) return os << (s.i_ ? "True" : "False");
  if (s.is_integral()) return os << s.i_;
  return os << s.d_;
}

}  // namespace tessera
