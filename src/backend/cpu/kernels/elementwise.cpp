// Elementwise kernels: unary, binary, cast, fill and where. Each op is a small
// functor; the loop templates below apply it over contiguous, broadcast-scalar
// or strided data, and the compiler vectorizes the contiguous case.
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels/common.h"

namespace tessera::cpu::TESSERA_ISA {
namespace {

// ---- unary functors: `A` is the compute type ---------------------------------
#define TS_UNARY_FN(Name, expr)                              \
  struct Name##F {                                           \
    const double* p;                                         \
    template <typename A> A operator()(A x) const { return expr; } \
  };
TS_UNARY_FN(Neg, -x)
TS_UNARY_FN(Abs, x < A(0) ? A(-x) : x)
TS_UNARY_FN(Exp, vexp(x))
TS_UNARY_FN(Exp2, std::exp2(x))
TS_UNARY_FN(Log, vlog(x))
TS_UNARY_FN(Log2, std::log2(x))
TS_UNARY_FN(Log1p, std::log1p(x))
TS_UNARY_FN(Expm1, std::expm1(x))
TS_UNARY_FN(Sqrt, std::sqrt(x))
TS_UNARY_FN(Rsqrt, A(1) / std::sqrt(x))
TS_UNARY_FN(Square, x * x)
TS_UNARY_FN(Sin, std::sin(x))
TS_UNARY_FN(Cos, std::cos(x))
TS_UNARY_FN(Tan, std::tan(x))
TS_UNARY_FN(Tanh, vtanh(x))
TS_UNARY_FN(Sigmoid, vsigmoid(x))
TS_UNARY_FN(Relu, (x > A(0) || x != x) ? x : A(0))
TS_UNARY_FN(LeakyRelu, x > A(0) ? x : A(x * A(p[0])))
TS_UNARY_FN(Elu, x > A(0) ? x : A(A(p[0]) * (vexp(x) - A(1))))
TS_UNARY_FN(Gelu, A(0.5) * x * (A(1) + verf(x * A(0.70710678118654752440))))
TS_UNARY_FN(GeluTanh, A(0.5) * x * (A(1) + vtanh(A(0.79788456080286535588) * (x + A(0.044715) * x * x * x))))
TS_UNARY_FN(Silu, x / (A(1) + vexp(-x)))
TS_UNARY_FN(Sign, A((x > A(0)) - (x < A(0))))
TS_UNARY_FN(Floor, std::floor(x))
TS_UNARY_FN(Ceil, std::ceil(x))
TS_UNARY_FN(Round, std::nearbyint(x))
TS_UNARY_FN(Trunc, std::trunc(x))
TS_UNARY_FN(Reciprocal, A(1) / x)
TS_UNARY_FN(Erf, verf(x))
TS_UNARY_FN(RPowScalar, std::pow(A(p[0]), x))
#undef TS_UNARY_FN

struct SoftplusF {
  const double* p;
  template <typename A> A operator()(A x) const {
    A beta = A(p[0]), bx = x * beta;
    return bx > A(p[1]) ? x : A(std::log1p(vexp(bx)) / beta);
  }
};
struct MishF {
  const double* p;
  template <typename A> A operator()(A x) const {
    A sp = x > A(20) ? x : A(std::log1p(vexp(x)));
    return x * vtanh(sp);
  }
};
// Clamp and Hardtanh: NaN bounds mean "no bound"; NaN inputs stay NaN.
struct ClampF {
  const double* p;
  template <typename A> A operator()(A x) const {
    A r = x;
    if constexpr (std::is_floating_point_v<A>) {
      if (p[0] == p[0]) r = r < A(p[0]) ? A(p[0]) : r;
      if (p[1] == p[1]) r = r > A(p[1]) ? A(p[1]) : r;
      return x != x ? x : r;
    } else {
      if (p[0] == p[0]) r = static_cast<double>(r) < p[0] ? static_cast<A>(std::ceil(p[0])) : r;
      if (p[1] == p[1]) r = static_cast<double>(r) > p[1] ? static_cast<A>(std::floor(p[1])) : r;
      return r;
    }
  }
};
using HardtanhF = ClampF;
struct PowScalarF {
  const double* p;
  template <typename A> A operator()(A x) const {
    if constexpr (std::is_floating_point_v<A>) {
      A e = A(p[0]);
      if (e == A(2)) return x * x;
      if (e == A(0.5)) return std::sqrt(x);
      if (e == A(1)) return x;
      if (e == A(3)) return x * x * x;
      if (e == A(-1)) return A(1) / x;
      return std::pow(x, e);
    } else {
      // Integer power by squaring (negative exponents are rejected before).
      int64_t e = static_cast<int64_t>(p[0]);
      A base = x, r = 1;
      while (e) {
        if (e & 1) r = static_cast<A>(r * base);
        base = static_cast<A>(base * base);
        e >>= 1;
      }
      return r;
    }
  }
};
struct NanToNumF {
  const double* p;
  template <typename A> A operator()(A x) const {
    return x != x ? A(p[0]) : (x == A(INFINITY) ? A(p[1]) : (x == A(-INFINITY) ? A(p[2]) : x));
  }
};
// Predicates (bool output).
struct IsnanF {
  const double* p;
  template <typename A> bool operator()(A x) const { return x != x; }
};
struct IsinfF {
  const double* p;
  template <typename A> bool operator()(A x) const {
    if constexpr (std::is_floating_point_v<A>) return std::fabs(x) == A(INFINITY);
    else return false;
  }
};
struct IsfiniteF {
  const double* p;
  template <typename A> bool operator()(A x) const {
    if constexpr (std::is_floating_point_v<A>) return x - x == A(0);
    else return true;
  }
};
struct LogicalNotF {
  const double* p;
  template <typename A> bool operator()(A x) const { return !(x != A(0)); }
};

template <typename T, typename O, typename F>
void unary_loop(char** d, const int64_t* s, int64_t n, const double* p) {
  F f{p};
  using A = C<T>;
  if (s[0] == sizeof(O) && s[1] == sizeof(T)) {
    O* __restrict o = reinterpret_cast<O*>(d[0]);
    const T* __restrict a = reinterpret_cast<const T*>(d[1]);
    for (int64_t i = 0; i < n; ++i) o[i] = st<O>(f(static_cast<A>(ld(a[i]))));
  } else {
    char* o = d[0];
    const char* a = d[1];
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<O*>(o + i * s[0]) = st<O>(f(static_cast<A>(ld(*reinterpret_cast<const T*>(a + i * s[1])))));
  }
}

// ---- binary functors ----------------------------------------------------------
#define TS_BINARY_FN(Name, expr)                                           \
  struct Name##F {                                                         \
    template <typename A> auto operator()(A a, A b) const { return expr; } \
  };
TS_BINARY_FN(Add, A(a + b))
TS_BINARY_FN(Sub, A(a - b))
TS_BINARY_FN(Mul, A(a * b))
TS_BINARY_FN(Div, A(a / b))
TS_BINARY_FN(Maximum, (a != a || a > b) ? a : b)
TS_BINARY_FN(Minimum, (a != a || a < b) ? a : b)
TS_BINARY_FN(Atan2, A(std::atan2(a, b)))
TS_BINARY_FN(Eq, a == b)
TS_BINARY_FN(Ne, a != b)
TS_BINARY_FN(Lt, a < b)
TS_BINARY_FN(Le, a <= b)
TS_BINARY_FN(Gt, a > b)
TS_BINARY_FN(Ge, a >= b)
TS_BINARY_FN(LogicalAnd, (a != A(0)) && (b != A(0)))
TS_BINARY_FN(LogicalOr, (a != A(0)) || (b != A(0)))
TS_BINARY_FN(LogicalXor, (a != A(0)) != (b != A(0)))
// Activation backwards in one pass (a: the incoming gradient; b: the op's
// input, or for tanh its output), so a VJP writes one tensor instead of a
// chain of temporaries.
TS_BINARY_FN(ReluGrad, b > A(0) ? a : A(0))
TS_BINARY_FN(GeluGrad, A(a * (A(0.5) * (A(1) + verf(b * A(0.70710678118654752440))) +
                              b * vexp(A(-0.5) * b * b) * A(0.39894228040143267794))))
TS_BINARY_FN(TanhGrad, A(a * (A(1) - b * b)))
TS_BINARY_FN(SiluGrad, A(a * (A(1) / (A(1) + vexp(-b))) * (A(1) + b * (A(1) - A(1) / (A(1) + vexp(-b))))))
struct GeluTanhGradF {
  template <typename A> A operator()(A a, A b) const {
    const A k = A(0.79788456080286535588), c = A(0.044715);
    A t = vtanh(k * (b + c * b * b * b));
    return a * (A(0.5) * (A(1) + t) + A(0.5) * b * (A(1) - t * t) * k * (A(1) + A(3) * c * b * b));
  }
};
#undef TS_BINARY_FN

struct TruncDivF {
  template <typename A> A operator()(A a, A b) const {
    if constexpr (std::is_floating_point_v<A>) return std::trunc(a / b);
    else return static_cast<A>(a / b);  // b != 0 is checked by the op
  }
};
// Python's floor division, as PyTorch computes it for floats.
struct FloorDivF {
  template <typename A> A operator()(A a, A b) const {
    if constexpr (std::is_floating_point_v<A>) {
      if (b == A(0)) return a / b;
      A mod = std::fmod(a, b);
      A div = (a - mod) / b;
      if (mod != A(0) && ((b < A(0)) != (mod < A(0)))) div -= A(1);
      A fl;
      if (div != A(0)) {
        fl = std::floor(div);
        if (div - fl > A(0.5)) fl += A(1);
      } else {
        fl = std::copysign(A(0), a / b);
      }
      return fl;
    } else {
      A q = static_cast<A>(a / b);
      if ((a % b != 0) && ((a < 0) != (b < 0))) q = static_cast<A>(q - 1);
      return q;
    }
  }
};
struct RemainderF {
  template <typename A> A operator()(A a, A b) const {
    if constexpr (std::is_floating_point_v<A>) {
      A r = std::fmod(a, b);
      return (r != A(0) && ((r < A(0)) != (b < A(0)))) ? A(r + b) : r;
    } else {
      A r = static_cast<A>(a % b);
      return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<A>(r + b) : r;
    }
  }
};
struct PowF {
  template <typename A> A operator()(A a, A b) const {
    if constexpr (std::is_floating_point_v<A>) {
      return std::pow(a, b);
    } else {
      A base = a, r = 1;
      auto e = b;
      while (e > 0) {
        if (e & 1) r = static_cast<A>(r * base);
        base = static_cast<A>(base * base);
        e = static_cast<A>(e >> 1);
      }
      return r;
    }
  }
};

template <typename T, typename O, typename F>
void binary_loop(char** d, const int64_t* s, int64_t n, const double*) {
  F f;
  using A = C<T>;
  if (s[0] == sizeof(O) && s[1] == sizeof(T) && s[2] == sizeof(T)) {
    O* __restrict o = reinterpret_cast<O*>(d[0]);
    const T* __restrict a = reinterpret_cast<const T*>(d[1]);
    const T* __restrict b = reinterpret_cast<const T*>(d[2]);
    for (int64_t i = 0; i < n; ++i) o[i] = st<O>(f(static_cast<A>(ld(a[i])), static_cast<A>(ld(b[i]))));
  } else if (s[0] == sizeof(O) && s[1] == sizeof(T) && s[2] == 0) {
    O* __restrict o = reinterpret_cast<O*>(d[0]);
    const T* __restrict a = reinterpret_cast<const T*>(d[1]);
    const A b = ld(*reinterpret_cast<const T*>(d[2]));
    for (int64_t i = 0; i < n; ++i) o[i] = st<O>(f(static_cast<A>(ld(a[i])), b));
  } else if (s[0] == sizeof(O) && s[1] == 0 && s[2] == sizeof(T)) {
    O* __restrict o = reinterpret_cast<O*>(d[0]);
    const A a = ld(*reinterpret_cast<const T*>(d[1]));
    const T* __restrict b = reinterpret_cast<const T*>(d[2]);
    for (int64_t i = 0; i < n; ++i) o[i] = st<O>(f(a, static_cast<A>(ld(b[i]))));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      A a = ld(*reinterpret_cast<const T*>(d[1] + i * s[1]));
      A b = ld(*reinterpret_cast<const T*>(d[2] + i * s[2]));
      *reinterpret_cast<O*>(d[0] + i * s[0]) = st<O>(f(a, b));
    }
  }
}

template <typename From, typename To>
void cast_loop(char** d, const int64_t* s, int64_t n, const double*) {
  using A = std::conditional_t<std::is_same_v<From, bool>, uint8_t, C<From>>;
  if (s[0] == sizeof(To) && s[1] == sizeof(From)) {
    To* __restrict o = reinterpret_cast<To*>(d[0]);
    const From* __restrict a = reinterpret_cast<const From*>(d[1]);
    for (int64_t i = 0; i < n; ++i) o[i] = st<To>(static_cast<A>(ld(a[i])));
  } else {
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<To*>(d[0] + i * s[0]) =
          st<To>(static_cast<A>(ld(*reinterpret_cast<const From*>(d[1] + i * s[1]))));
  }
}

template <typename T>
void fill_loop(char** d, const int64_t* s, int64_t n, const double* p) {
  T v;
  if constexpr (std::is_floating_point_v<C<T>>) v = st<T>(static_cast<C<T>>(p[0]));
  else if constexpr (std::is_same_v<T, bool>) v = p[0] != 0.0;
  else {
    int64_t iv;
    std::memcpy(&iv, &p[1], sizeof iv);
    v = static_cast<T>(iv);
  }
  if (s[0] == sizeof(T)) {
    T* __restrict o = reinterpret_cast<T*>(d[0]);
    for (int64_t i = 0; i < n; ++i) o[i] = v;
  } else {
    for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(d[0] + i * s[0]) = v;
  }
}

template <typename T>
void where_loop(char** d, const int64_t* s, int64_t n, const double*) {
  for (int64_t i = 0; i < n; ++i) {
    bool c = *reinterpret_cast<const bool*>(d[1] + i * s[1]);
    *reinterpret_cast<T*>(d[0] + i * s[0]) =
        c ? *reinterpret_cast<const T*>(d[2] + i * s[2]) : *reinterpret_cast<const T*>(d[3] + i * s[3]);
  }
}

template <typename T, typename F>
void reg_unary(KernelTable& t, UnaryKernel k) {
  t.unary[static_cast<int>(k)][idx(dtype_v<T>)] = &unary_loop<T, T, F>;
}
template <typename T, typename F>
void reg_pred(KernelTable& t, UnaryKernel k) {
  t.unary[static_cast<int>(k)][idx(dtype_v<T>)] = &unary_loop<T, bool, F>;
}
template <typename T, typename F>
void reg_binary(KernelTable& t, BinaryKernel k) {
  t.binary[static_cast<int>(k)][idx(dtype_v<T>)] = &binary_loop<T, T, F>;
}
template <typename T, typename F>
void reg_compare(KernelTable& t, BinaryKernel k) {
  t.binary[static_cast<int>(k)][idx(dtype_v<T>)] = &binary_loop<T, bool, F>;
}

}  // namespace

void fill_elementwise_kernels(KernelTable& t) {
  using U = UnaryKernel;
  using B = BinaryKernel;
  for_types<TS_FLOAT_TYPES>([&]<typename T>() {
#define TS_F(Name) reg_unary<T, Name##F>(t, U::Name);
    TS_F(Exp) TS_F(Exp2) TS_F(Log) TS_F(Log2) TS_F(Log1p) TS_F(Expm1) TS_F(Sqrt) TS_F(Rsqrt)
    TS_F(Sin) TS_F(Cos) TS_F(Tan) TS_F(Tanh) TS_F(Sigmoid) TS_F(LeakyRelu) TS_F(Elu) TS_F(Gelu)
    TS_F(GeluTanh) TS_F(Silu) TS_F(Mish) TS_F(Softplus) TS_F(Floor) TS_F(Ceil) TS_F(Round)
    TS_F(Trunc) TS_F(Reciprocal) TS_F(Erf) TS_F(RPowScalar) TS_F(NanToNum)
#undef TS_F
    reg_binary<T, DivF>(t, B::Div);
    reg_binary<T, Atan2F>(t, B::Atan2);
    reg_binary<T, GeluGradF>(t, B::GeluGrad);
    reg_binary<T, GeluTanhGradF>(t, B::GeluTanhGrad);
    reg_binary<T, TanhGradF>(t, B::TanhGrad);
    reg_binary<T, SiluGradF>(t, B::SiluGrad);
  });
  for_types<TS_NUMERIC_TYPES>([&]<typename T>() {
#define TS_F(Name) reg_unary<T, Name##F>(t, U::Name);
    TS_F(Neg) TS_F(Abs) TS_F(Square) TS_F(Relu) TS_F(Sign) TS_F(Clamp) TS_F(Hardtanh) TS_F(PowScalar)
#undef TS_F
#define TS_F(Name) reg_binary<T, Name##F>(t, B::Name);
    TS_F(Add) TS_F(Sub) TS_F(Mul) TS_F(FloorDiv) TS_F(TruncDiv) TS_F(Remainder) TS_F(Pow)
    TS_F(Maximum) TS_F(Minimum) TS_F(ReluGrad)
#undef TS_F
  });
  for_types<TS_ALL_TYPES>([&]<typename T>() {
    reg_pred<T, IsnanF>(t, U::Isnan);
    reg_pred<T, IsinfF>(t, U::Isinf);
    reg_pred<T, IsfiniteF>(t, U::Isfinite);
    reg_pred<T, LogicalNotF>(t, U::LogicalNot);
#define TS_F(Name) reg_compare<T, Name##F>(t, B::Name);
    TS_F(Eq) TS_F(Ne) TS_F(Lt) TS_F(Le) TS_F(Gt) TS_F(Ge) TS_F(LogicalAnd) TS_F(LogicalOr) TS_F(LogicalXor)
#undef TS_F
    t.fill[idx(dtype_v<T>)] = &fill_loop<T>;
    t.where[idx(dtype_v<T>)] = &where_loop<T>;
    for_types<TS_ALL_TYPES>([&]<typename To>() { t.cast[idx(dtype_v<T>)][idx(dtype_v<To>)] = &cast_loop<T, To>; });
  });
  // bool arithmetic where PyTorch allows it: add is "or", mul is "and", max/min.
  reg_binary<bool, AddF>(t, B::Add);
  reg_binary<bool, MulF>(t, B::Mul);
  reg_binary<bool, MaximumF>(t, B::Maximum);
  reg_binary<bool, MinimumF>(t, B::Minimum);
}

}  // namespace tessera::cpu::TESSERA_ISA
