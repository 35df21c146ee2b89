#include "backend/cpu/skinny.h"

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "backend/cpu/kernel_table.h"
#include "backend/cpu/scratch.h"
#include "tessera/core/half.h"
#include "tessera/core/parallel.h"

namespace tessera::cpu {
namespace {

UnaryKernel unary_of(Epilogue e) {
  switch (e) {
    case Epilogue::Relu: return UnaryKernel::Relu;
    case Epilogue::Gelu: return UnaryKernel::Gelu;
    case Epilogue::GeluTanh: return UnaryKernel::GeluTanh;
    case Epilogue::Silu: return UnaryKernel::Silu;
    default: return UnaryKernel::Tanh;
  }
}

// Whether A's rows (batch-major) have unit stride and are one row stride
// apart, so that a kernel taking A's type reads them in place.
bool rows_in_place(const GemmArgs& g) { return g.sa[2] == 1 && (g.batch == 1 || g.sa[0] == g.m * g.sa[1]); }

// A's rows (of type T) as U [rows, k].
template <typename T, typename U>
void rows_as(const GemmArgs& g, U* x) {
  const T* a = static_cast<const T*>(g.a);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t i = 0; i < g.m; ++i) {
      const T* in = a + b * g.sa[0] + i * g.sa[1];
      U* o = x + (b * g.m + i) * g.k;
      for (int64_t p = 0; p < g.k; ++p) o[p] = static_cast<U>(in[p * g.sa[2]]);
    }
}

// Rows of the weight per task: chunks of at least 64 KiB of weights, so
// threads split large layers and small ones stay on one core.
int64_t grain(int64_t k, size_t item) {
  return std::max<int64_t>(4, 65536 / std::max<int64_t>(k * static_cast<int64_t>(item), 1));
}

// C = act(alpha * Y + bias [+ C]) + residual, Y the f32 products [rows, n]
// (the activation, if any, by the unary kernel over all of Y between the two passes).
template <typename T>
void store(const GemmArgs& g, float* y) {
  const int64_t rows = g.batch * g.m, n = g.n, sj = g.sc[2];
  const T* bias = static_cast<const T*>(g.bias);
  const float alpha = static_cast<float>(g.alpha);
  auto row_offset = [&](int64_t r) { return (r / g.m) * g.sc[0] + (r % g.m) * g.sc[1]; };
  for (int64_t r = 0; r < rows; ++r) {
    const T* c = static_cast<const T*>(g.c) + row_offset(r);
    float* yr = y + r * n;
    for (int64_t j = 0; j < n; ++j) {
      float v = alpha == 1.0f ? yr[j] : alpha * yr[j];
      if (bias) v += static_cast<float>(bias[j]);
      if (g.accumulate) v += static_cast<float>(c[j * sj]);
      yr[j] = v;
    }
  }
  if (g.act != Epilogue::None) {
    char* data[2] = {reinterpret_cast<char*>(y), reinterpret_cast<char*>(y)};
    const int64_t strides[2] = {sizeof(float), sizeof(float)};
    kernels().unary[static_cast<int>(unary_of(g.act))][idx(DType::F32)](data, strides, rows * n, nullptr);
  }
  for (int64_t r = 0; r < rows; ++r) {
    T* c = static_cast<T*>(g.c) + row_offset(r);
    const T* res = g.residual ? static_cast<const T*>(g.residual) + row_offset(r) : nullptr;
    const float* yr = y + r * n;
    for (int64_t j = 0; j < n; ++j) c[j * sj] = static_cast<T>(res ? yr[j] + static_cast<float>(res[j * sj]) : yr[j]);
  }
}

// The products y [rows, n] in f32 by `kernel`, which reads A's rows as X
// (f32 for the widening kernels; bf16 for the bf16-dot one, Note [bf16 dot
// products]): in place when they are X rows already, else converted once.
template <typename T, typename X, typename Kernel>
void products(const GemmArgs& g, float* y, Kernel kernel) {
  const int64_t rows = g.batch * g.m, n = g.n, k = g.k;
  const bool in_place = std::is_same_v<T, X> && rows_in_place(g);
  Scratch<X> xbuf(in_place ? 0 : rows * k);
  if (!in_place) rows_as<T, X>(g, xbuf.data());
  const X* x = in_place ? static_cast<const X*>(g.a) : xbuf.data();
  const int64_t ldx = in_place ? g.sa[1] : k;
  parallel_for(0, n, grain(k, sizeof(T)), [&](int64_t r0, int64_t r1) { kernel(g.b, g.sb[2], k, x, ldx, rows, y, n, r0, r1); });
}

template <typename T>
void run(const GemmArgs& g) {
  F32Scratch y(g.batch * g.m * g.n);
  const SkinnyRows widening = kernels().skinny_rows[idx(g.dtype)];
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (kernels().skinny_rows_bf16) products<T, BFloat16>(g, y.data(), kernels().skinny_rows_bf16);
    else products<T, float>(g, y.data(), widening);
  } else {
    products<T, float>(g, y.data(), widening);
  }
  store<T>(g, y.data());
}

}  // namespace

int64_t skinny_max_rows(DType dtype) {
  static const int64_t forced = [] {
    const char* e = std::getenv("TESSERA_SKINNY_MAX_ROWS");
    return e ? std::max<int64_t>(0, std::atoll(e)) : int64_t{-1};
  }();
  if (forced >= 0) return forced;
  // Measured on Zen 4 (bench/gemv_compare.py), 1 thread: f32 at 16 rows is
  // at parity with oneDNN's brgemm (AVX-512) and ahead of its AVX2 GEMM. In
  // bf16, Tessera's bf16-dot kernel is ahead of oneDNN's native bf16 matmul
  // up to 8 rows (16 for LLM-sized layers, but not for cache-sized ones); the
  // widening kernel only up to 2 rows where oneDNN has native products.
  if (dtype == DType::BF16 && kernels().skinny_rows_bf16) return 8;
  if (dtype == DType::BF16 && has_native_bf16()) return 2;
  return 16;
}

bool skinny_ok(const GemmArgs& g) {
  const bool type = g.dtype == DType::F32 || g.dtype == DType::BF16 || g.dtype == DType::F16;
  const bool shared_weight = g.batch == 1 || g.sb[0] == 0;
  return type && shared_weight && g.k > 0 && g.sb[1] == 1 && g.batch * g.m <= skinny_max_rows(g.dtype);
}

void gemm_skinny(const GemmArgs& g) {
  switch (g.dtype) {
    case DType::F32: run<float>(g); break;
    case DType::BF16: run<BFloat16>(g); break;
    default: run<Half>(g); break;
  }
}

}  // namespace tessera::cpu
