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
#include "stream_read.h"
#include "tessera/tessera.h"

namespace {

using namespace tessera;

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
        bench::Timing t = bench::measure(o, [&] { sink = bench::stream_read(p, nf, o.threads); }, 3, reps, 100000);
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
