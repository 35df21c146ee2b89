// Reduction kernels over contiguous rows ([rows, len] -> [rows]) and over the
// middle dim of [outer, len, inner] blocks. Sums accumulate in blocks of
// kBlock elements in vector lanes, then in a wider accumulator, so long rows
// keep their precision. The order of operations depends only on the shape.
#include <cmath>

#include "backend/cpu/kernels/common.h"

namespace tessera::cpu::TESSERA_ISA {
namespace {

constexpr int kLanes = 16;
constexpr int64_t kBlock = 1024;

// Accumulation types: float for f16/bf16/f32, double for f64, int64 for integers.
template <typename T> struct SumAcc { using type = int64_t; };
template <> struct SumAcc<Half> { using type = float; };
template <> struct SumAcc<BFloat16> { using type = float; };
template <> struct SumAcc<float> { using type = float; };
template <> struct SumAcc<double> { using type = double; };
template <typename T> using S = typename SumAcc<T>::type;
// The wider type block results are combined in.
template <typename A> using Wide = std::conditional_t<std::is_same_v<A, float>, double, A>;

template <typename T>
S<T> sum_row(const T* x, int64_t len) {
  using A = S<T>;
  Wide<A> total = 0;
  for (int64_t b = 0; b < len; b += kBlock) {
    int64_t e = std::min(len, b + kBlock);
    A acc[kLanes] = {};
    int64_t i = b;
    for (; i + kLanes <= e; i += kLanes)
      for (int j = 0; j < kLanes; ++j) acc[j] += static_cast<A>(ld(x[i + j]));
    for (; i < e; ++i) acc[0] += static_cast<A>(ld(x[i]));
    for (int w = kLanes / 2; w > 0; w /= 2)
      for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
    total += acc[0];
  }
  return static_cast<A>(total);
}

template <typename T>
void sum_rows(const void* in, void* out, int64_t rows, int64_t len) {
  const T* x = static_cast<const T*>(in);
  S<T>* o = static_cast<S<T>*>(out);
  for (int64_t r = 0; r < rows; ++r) o[r] = sum_row(x + r * len, len);
}

template <typename T>
void prod_rows(const void* in, void* out, int64_t rows, int64_t len) {
  const T* x = static_cast<const T*>(in);
  S<T>* o = static_cast<S<T>*>(out);
  for (int64_t r = 0; r < rows; ++r) {
    S<T> p = 1;
    for (int64_t i = 0; i < len; ++i) p = static_cast<S<T>>(p * static_cast<S<T>>(ld(x[r * len + i])));
    o[r] = p;
  }
}

// max/min propagate NaN, as PyTorch does.
template <typename T, bool kMax>
void extreme_rows(const void* in, void* out, int64_t rows, int64_t len) {
  const T* x = static_cast<const T*>(in);
  T* o = static_cast<T*>(out);
  using A = C<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * len;
    A acc[kLanes];
    for (int j = 0; j < kLanes; ++j) acc[j] = ld(row[0]);
    int64_t i = 0;
    for (; i + kLanes <= len; i += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        A v = ld(row[i + j]);
        bool take = kMax ? (v > acc[j]) : (v < acc[j]);
        acc[j] = (take || v != v) ? v : acc[j];
      }
    for (; i < len; ++i) {
      A v = ld(row[i]);
      bool take = kMax ? (v > acc[0]) : (v < acc[0]);
      acc[0] = (take || v != v) ? v : acc[0];
    }
    A m = acc[0];
    for (int j = 1; j < kLanes; ++j) {
      bool take = kMax ? (acc[j] > m) : (acc[j] < m);
      m = (take || acc[j] != acc[j]) ? acc[j] : m;
    }
    o[r] = st<T>(m);
  }
}

template <typename T, bool kAll>
void bool_rows(const void* in, void* out, int64_t rows, int64_t len) {
  const T* x = static_cast<const T*>(in);
  bool* o = static_cast<bool*>(out);
  for (int64_t r = 0; r < rows; ++r) {
    bool acc = kAll;
    for (int64_t i = 0; i < len; ++i) {
      bool v = ld(x[r * len + i]) != C<T>(0);
      acc = kAll ? (acc && v) : (acc || v);
    }
    o[r] = acc;
  }
}

template <typename T, bool kMax>
void arg_rows(const void* in, void* values, int64_t* indices, int64_t rows, int64_t len) {
  const T* x = static_cast<const T*>(in);
  T* vo = static_cast<T*>(values);
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * len;
    C<T> best = ld(row[0]);
    int64_t bi = 0;
    if (best == best) {
      for (int64_t i = 1; i < len; ++i) {
        C<T> v = ld(row[i]);
        if (v != v) {  // NaN wins, first one
          best = v;
          bi = i;
          break;
        }
        if (kMax ? v > best : v < best) {
          best = v;
          bi = i;
        }
      }
    }
    if (vo) vo[r] = row[bi];
    indices[r] = bi;
  }
}

// [outer, len, inner] -> [outer, inner], vectorized over inner.
template <typename T, ReduceKernel K>
void reduce_mid(const void* in, void* out, int64_t outer, int64_t len, int64_t inner) {
  const T* x = static_cast<const T*>(in);
  for (int64_t o = 0; o < outer; ++o) {
    const T* base = x + o * len * inner;
    if constexpr (K == ReduceKernel::Sum || K == ReduceKernel::Prod) {
      using A = S<T>;
      A* y = static_cast<A*>(out) + o * inner;
      for (int64_t k = 0; k < inner; ++k) y[k] = K == ReduceKernel::Sum ? A(0) : A(1);
      for (int64_t l = 0; l < len; ++l) {
        const T* row = base + l * inner;
        for (int64_t k = 0; k < inner; ++k) {
          if constexpr (K == ReduceKernel::Sum) y[k] += static_cast<A>(ld(row[k]));
          else y[k] = static_cast<A>(y[k] * static_cast<A>(ld(row[k])));
        }
      }
    } else if constexpr (K == ReduceKernel::Max || K == ReduceKernel::Min) {
      T* y = static_cast<T*>(out) + o * inner;
      constexpr bool kMax = K == ReduceKernel::Max;
      for (int64_t k = 0; k < inner; ++k) y[k] = base[k];
      for (int64_t l = 1; l < len; ++l) {
        const T* row = base + l * inner;
        for (int64_t k = 0; k < inner; ++k) {
          C<T> v = ld(row[k]), m = ld(y[k]);
          bool take = kMax ? v > m : v < m;
          y[k] = (take || v != v) ? row[k] : y[k];
        }
      }
    } else {
      bool* y = static_cast<bool*>(out) + o * inner;
      constexpr bool kAll = K == ReduceKernel::All;
      for (int64_t k = 0; k < inner; ++k) y[k] = kAll;
      for (int64_t l = 0; l < len; ++l)
        for (int64_t k = 0; k < inner; ++k) {
          bool v = ld(base[l * inner + k]) != C<T>(0);
          y[k] = kAll ? (y[k] && v) : (y[k] || v);
        }
    }
  }
}

}  // namespace

void fill_reduce_kernels(KernelTable& t) {
  using R = ReduceKernel;
  auto r = [](R k) { return static_cast<int>(k); };
  for_types<TS_ALL_TYPES>([&]<typename T>() {
    int d = idx(dtype_v<T>);
    t.reduce_rows[r(R::Sum)][d] = &sum_rows<T>;
    t.reduce_rows[r(R::Prod)][d] = &prod_rows<T>;
    t.reduce_rows[r(R::Max)][d] = &extreme_rows<T, true>;
    t.reduce_rows[r(R::Min)][d] = &extreme_rows<T, false>;
    t.reduce_rows[r(R::All)][d] = &bool_rows<T, true>;
    t.reduce_rows[r(R::Any)][d] = &bool_rows<T, false>;
    t.reduce_mid[r(R::Sum)][d] = &reduce_mid<T, R::Sum>;
    t.reduce_mid[r(R::Prod)][d] = &reduce_mid<T, R::Prod>;
    t.reduce_mid[r(R::Max)][d] = &reduce_mid<T, R::Max>;
    t.reduce_mid[r(R::Min)][d] = &reduce_mid<T, R::Min>;
    t.reduce_mid[r(R::All)][d] = &reduce_mid<T, R::All>;
    t.reduce_mid[r(R::Any)][d] = &reduce_mid<T, R::Any>;
    t.argmax_rows[d] = &arg_rows<T, true>;
    t.argmin_rows[d] = &arg_rows<T, false>;
  });
}

}  // namespace tessera::cpu::TESSERA_ISA
