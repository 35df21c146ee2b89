// Skinny products against the bytes they must read: linear(x, W) for a few
// activation rows (m = 1 is a decoded token) beside a plain streaming read of
// the same weight bytes (a vectorized sum, in GB/s): the speed a
// matrix-vector product is bounded by. One line per case (bench_common.h):
//   RESULT stream/<n>x<k>/<dtype> <GB/s> GB/s ...
//   RESULT linear/<n>x<k>/<dtype>/m<m> <us> us gbps=<weight bytes / time> ...
// bench/gemv_compare.py runs it with TESSERA_SKINNY_MAX_ROWS=16 (Tessera's
// skinny kernel for every product here) and =0 (oneDNN's GEMM for every
// product), on each kernel tier, to place the crossover.
#include <omp.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench_common.h"
#include "tessera/tessera.h"

namespace {

using namespace tessera;

// Sums n floats (as 32-bit lanes) with 4 independent 64-byte accumulators
// per thread: loads only, at the widest vectors the CPU has.
typedef float V4 __attribute__((vector_size(16)));
typedef float V8 __attribute__((vector_size(32)));
typedef float V16 __attribute__((vector_size(64)));

template <typename V>
__attribute__((always_inline)) inline float stream_sum(const float* p, int64_t n) {
  constexpr int W = sizeof(V) / sizeof(float);
  V a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    V v0, v1, v2, v3;
    std::memcpy(&v0, p + i, sizeof v0);
    std::memcpy(&v1, p + i + W, sizeof v1);
    std::memcpy(&v2, p + i + 2 * W, sizeof v2);
    std::memcpy(&v3, p + i + 3 * W, sizeof v3);
    a0 += v0, a1 += v1, a2 += v2, a3 += v3;
  }
  V a = a0 + a1 + a2 + a3;
  float s = 0;
  for (int l = 0; l < W; ++l) s += a[l];
  for (; i < n; ++i) s += p[i];
  return s;
}
__attribute__((target("avx512f"))) float sum_avx512(const float* p, int64_t n) { return stream_sum<V16>(p, n); }
__attribute__((target("avx2"))) float sum_avx2(const float* p, int64_t n) { return stream_sum<V8>(p, n); }
float sum_sse(const float* p, int64_t n) { return stream_sum<V4>(p, n); }

float stream_read(const float* p, int64_t n, int threads) {
  static const auto sum = __builtin_cpu_supports("avx512f") ? sum_avx512
                          : __builtin_cpu_supports("avx2")  ? sum_avx2
                                                            : sum_sse;
  float total = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const int64_t b = n * t / threads, e = n * (t + 1) / threads;
    total += sum(p + b, e - b);
  }
  return total;
}

volatile float sink;

}  // namespace

int main(int argc, char** argv) {
  bench::Options o = bench::parse_args(argc, argv);
  set_num_threads(o.threads);
  // (out x in): fits in L2 (256x1024 f32: 1 MiB), an MLP layer, an LLM's
  // projections (4096x4096 f32: 64 MiB, far beyond the caches).
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{256, 1024}, {256, 784}, {4096, 4096}, {11008, 4096}};
  const std::vector<int64_t> rows = {1, 2, 4, 8, 16};
  for (const auto& [n, k] : shapes)
    for (DType dt : {DType::F32, DType::BF16}) {
      const std::string shape = std::to_string(n) + "x" + std::to_string(k) + "/" + dtype_name(dt);
      Tensor w = ops::randn({n, k}, DType::F32).to(dt);
      const double bytes = static_cast<double>(w.nbytes());
      const bool big = bytes > 32e6;
      const int reps = big ? 15 : 200;
      if (o.wants("stream")) {
        // The same bytes as floats: what the weights cost to read, whatever their type.
        const float* p = static_cast<const float*>(w.raw_data());
        const int64_t nf = static_cast<int64_t>(bytes / 4);
        bench::Timing t = bench::measure(o, [&] { sink = stream_read(p, nf, o.threads); }, 3, reps, 100000);
        bench::report("stream/" + shape, bytes / t.median / 1e9, "GB/s", t, "bytes=" + std::to_string(w.nbytes()));
      }
      if (!o.wants("linear")) continue;
      NoGradGuard no_grad;
      for (int64_t m : rows) {
        Tensor x = ops::randn({m, k}, DType::F32).to(dt);
        bench::Timing t = bench::measure(o, [&] { ops::linear(x, w, Tensor()); }, 3, reps, 100000);
        char extra[96];
        std::snprintf(extra, sizeof extra, "gbps=%.4g", bytes / t.median / 1e9);
        bench::report("linear/" + shape + "/m" + std::to_string(m), t.median * 1e6, "us", t, extra);
      }
    }
  return 0;
}
