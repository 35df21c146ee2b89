// Tessera side of the side-by-side benchmark (see bench/run.py and
// docs/benchmarks.md). Prints RESULT lines in the protocol of bench_common.h;
// bench/torch_bench.cpp runs the same cases on libtorch in a separate process.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/allocator.h"
#include "tessera/core/parallel.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/ops.h"

// Operators that may not be implemented yet: declared weak, so that the binary
// still links (and reports "n/a") while their definitions are missing from the
// library. A weak undefined symbol resolves to a null address at run time.
namespace tessera::ops {
Tensor softmax(const Tensor& x, int64_t dim) __attribute__((weak));
Tensor layer_norm(const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) __attribute__((weak));
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& opts)
    __attribute__((weak));
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale,
                                    Generator* gen) __attribute__((weak));
}  // namespace tessera::ops

namespace {

using namespace tessera;
using bench::Case;
using bench::Options;

// True when the (weak) symbol was resolved.
template <typename Fn>
bool have(Fn* fn) {
  return fn != nullptr;
}

void missing(const std::vector<std::string>& names, const char* symbol) {
  for (const auto& n : names) bench::report_na(n, std::string("missing symbol tessera::ops::") + symbol);
}

// Sums a few elements so that results are observably used.
volatile float g_sink = 0;
void sink(const Tensor& t) { g_sink = g_sink + static_cast<const float*>(t.raw_data())[0]; }

double peak_mib_since(int64_t baseline) {
  return double(memory_stats().peak_bytes - baseline) / (1024.0 * 1024.0);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = bench::parse_args(argc, argv);
  set_num_threads(o.threads);
  std::vector<Case> cases;

  // ---- per-op overhead: 1-element f32 add --------------------------------
  cases.push_back({"overhead_add", {}, [&] {
                     // No autograd recording: inference mode (NoGradGuard).
                     NoGradGuard ng;
                     Tensor a = ones({1}), b = ones({1});
                     auto t = bench::measure(o, [&] { Tensor c = ops::add(a, b); }, 2, 5, 100000, 30, 10000);
                     bench::report("overhead_add", t.median * 1e9, "ns", t);
                   }});
  cases.push_back({"overhead_add_grad", {}, [&] {
                     // Autograd recording: `a` requires grad, so each call builds a graph node
                     // (freed when the result goes out of scope).
                     Tensor a = ones({1}), b = ones({1});
                     a.requires_grad_(true);
                     auto t = bench::measure(o, [&] { Tensor c = ops::add(a, b); }, 2, 5, 100000, 30, 10000);
                     bench::report("overhead_add_grad", t.median * 1e9, "ns", t);
                   }});

  // ---- bandwidth: memcpy and elementwise ops on 16M f32 ---------------------
  cases.push_back({"memcpy_16M", {}, [&] {
                     // Plain memcpy of the bytes an elementwise op moves, split over the same
                     // number of threads. Buffers are touched first (no page faults timed).
                     size_t bytes = size_t(bench::kEltN) * 4;
                     Tensor src = ones({bench::kEltN}), dst = zeros({bench::kEltN});
                     char* s = static_cast<char*>(src.raw_data());
                     char* d = static_cast<char*>(dst.raw_data());
                     int nt = o.threads;
                     auto t = bench::measure(o, [&] {
#pragma omp parallel num_threads(nt)
                       {
                         int i = omp_get_thread_num(), n = omp_get_num_threads();
                         size_t chunk = (bytes / n + 63) & ~size_t(63);
                         size_t b = std::min(bytes, chunk * i), e = std::min(bytes, b + chunk);
                         if (e > b) std::memcpy(d + b, s + b, e - b);
                       }
                     }, 3, 10, 1000);
                     bench::report("memcpy_16M", 2.0 * bytes / t.median / 1e9, "GB/s", t);
                   }});
  auto elementwise = [&](const char* name, int n_in, auto fn) {
    cases.push_back({name, {}, [&o, name, n_in, fn] {
                       NoGradGuard ng;
                       Tensor a = ops::randn({bench::kEltN}), b = ops::randn({bench::kEltN});
                       auto t = bench::measure(o, [&] { Tensor c = fn(a, b); sink(c); }, 3, 10, 1000);
                       bench::report(name, bench::elt_bytes(n_in) / t.median / 1e9, "GB/s", t);
                     }});
  };
  elementwise("add_16M", 2, [](const Tensor& a, const Tensor& b) { return ops::add(a, b); });
  elementwise("mul_16M", 2, [](const Tensor& a, const Tensor& b) { return ops::mul(a, b); });
  elementwise("gelu_16M", 1, [](const Tensor& a, const Tensor&) { return ops::gelu(a); });

  // ---- matmul ------------------------------------------------------------------
  for (int64_t n : bench::kMatmulSizes) {
    std::string name = "matmul_" + std::to_string(n);
    cases.push_back({name, {}, [&o, n, name] {
                       NoGradGuard ng;
                       Tensor a = ops::randn({n, n}), b = ops::randn({n, n});
                       int warm = n >= 2048 ? 2 : 5, reps = n >= 2048 ? 5 : 20;
                       auto t = bench::measure(o, [&] { Tensor c = ops::matmul(a, b); sink(c); }, warm, reps, 100000);
                       bench::report(name, bench::matmul_flops(n) / t.median / 1e9, "GFLOP/s", t);
                     }});
  }

  // ---- softmax and layer_norm on [4096, 1024] ---------------------------------------
  cases.push_back({"softmax_fwd", {}, [&] {
                     if (!have(&ops::softmax)) return missing({"softmax_fwd"}, "softmax");
                     NoGradGuard ng;
                     Tensor x = ops::randn({bench::kRows, bench::kCols});
                     auto t = bench::measure(o, [&] { Tensor y = ops::softmax(x, -1); sink(y); }, 3, 10, 10000);
                     bench::report("softmax_fwd", t.median * 1e3, "ms", t);
                   }});
  cases.push_back({"softmax_fwdbwd", {}, [&] {
                     if (!have(&ops::softmax)) return missing({"softmax_fwdbwd"}, "softmax");
                     Tensor x = ops::randn({bench::kRows, bench::kCols});
                     Tensor g = ops::randn({bench::kRows, bench::kCols});
                     x.requires_grad_(true);
                     auto t = bench::measure(o, [&] {
                       Tensor y = ops::softmax(x, -1);
                       y.backward(g);
                       sink(x.grad());
                       x.set_grad(Tensor());
                     }, 3, 10, 10000);
                     bench::report("softmax_fwdbwd", t.median * 1e3, "ms", t);
                   }});
  cases.push_back({"layernorm_fwd", {}, [&] {
                     if (!have(&ops::layer_norm)) return missing({"layernorm_fwd"}, "layer_norm");
                     NoGradGuard ng;
                     Tensor x = ops::randn({bench::kRows, bench::kCols});
                     Tensor w = ops::randn({bench::kCols}), b = ops::randn({bench::kCols});
                     auto t = bench::measure(o, [&] {
                       Tensor y = ops::layer_norm(x, {bench::kCols}, w, b, 1e-5);
                       sink(y);
                     }, 3, 10, 10000);
                     bench::report("layernorm_fwd", t.median * 1e3, "ms", t);
                   }});
  cases.push_back({"layernorm_fwdbwd", {}, [&] {
                     if (!have(&ops::layer_norm)) return missing({"layernorm_fwdbwd"}, "layer_norm");
                     Tensor x = ops::randn({bench::kRows, bench::kCols});
                     Tensor g = ops::randn({bench::kRows, bench::kCols});
                     Tensor w = ops::randn({bench::kCols}), b = ops::randn({bench::kCols});
                     x.requires_grad_(true);
                     w.requires_grad_(true);
                     b.requires_grad_(true);
                     auto t = bench::measure(o, [&] {
                       Tensor y = ops::layer_norm(x, {bench::kCols}, w, b, 1e-5);
                       y.backward(g);
                       sink(x.grad());
                       x.set_grad(Tensor());
                       w.set_grad(Tensor());
                       b.set_grad(Tensor());
                     }, 3, 10, 10000);
                     bench::report("layernorm_fwdbwd", t.median * 1e3, "ms", t);
                   }});

  // ---- conv2d [32, 64, 56, 56] * [64, 64, 3, 3], padding 1, with bias -----------------
  auto conv_inputs = [] {
    Tensor x = ops::randn({bench::kConvN, bench::kConvC, bench::kConvH, bench::kConvW});
    Tensor w = ops::mul(ops::randn({bench::kConvK, bench::kConvC, 3, 3}), Scalar(0.05));
    Tensor b = ops::randn({bench::kConvK});
    return std::make_tuple(x, w, b);
  };
  ops::Conv2dOptions conv_opts;
  conv_opts.padding = {1, 1};
  cases.push_back({"conv_fwd", {}, [&] {
                     if (!have(&ops::conv2d)) return missing({"conv_fwd"}, "conv2d");
                     NoGradGuard ng;
                     auto [x, w, b] = conv_inputs();
                     auto t = bench::measure(o, [&] { Tensor y = ops::conv2d(x, w, b, conv_opts); sink(y); }, 2, 5, 1000, 20);
                     bench::report("conv_fwd", t.median * 1e3, "ms", t,
                                   "gflops=" + std::to_string(bench::conv_fwd_flops() / t.median / 1e9));
                   }});
  cases.push_back({"conv_fwdbwd", {}, [&] {
                     if (!have(&ops::conv2d)) return missing({"conv_fwdbwd"}, "conv2d");
                     auto [x, w, b] = conv_inputs();
                     Tensor g = ops::randn({bench::kConvN, bench::kConvK, bench::kConvH, bench::kConvW});
                     x.requires_grad_(true);
                     w.requires_grad_(true);
                     b.requires_grad_(true);
                     auto t = bench::measure(o, [&] {
                       Tensor y = ops::conv2d(x, w, b, conv_opts);
                       y.backward(g);
                       sink(x.grad());
                       x.set_grad(Tensor());
                       w.set_grad(Tensor());
                       b.set_grad(Tensor());
                     }, 1, 3, 1000, 20);
                     bench::report("conv_fwdbwd", t.median * 1e3, "ms", t,
                                   "gflops=" + std::to_string(3 * bench::conv_fwd_flops() / t.median / 1e9));
                   }});

  // ---- causal attention [1, 8, 1024, 64] --------------------------------------------
  auto sdpa = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return ops::scaled_dot_product_attention(q, k, v, Tensor(), 0.0, /*is_causal=*/true, std::nullopt, nullptr);
  };
  auto attn_inputs = [] {
    Shape s{bench::kAttnB, bench::kAttnH, bench::kAttnL, bench::kAttnE};
    return std::make_tuple(ops::randn(s), ops::randn(s), ops::randn(s), ops::randn(s));
  };
  cases.push_back({"sdpa_fwd", {"sdpa_fwd", "sdpa_fwd_peak_mem"}, [&] {
                     if (!have(&ops::scaled_dot_product_attention))
                       return missing({"sdpa_fwd", "sdpa_fwd_peak_mem"}, "scaled_dot_product_attention");
                     NoGradGuard ng;
                     auto [q, k, v, g] = attn_inputs();
                     auto t = bench::measure(o, [&] { Tensor y = sdpa(q, k, v); sink(y); }, 2, 10, 10000);
                     bench::report("sdpa_fwd", t.median * 1e3, "ms", t);
                     // Peak of live tensor bytes above what was live before the call
                     // (inputs excluded, output included).
                     int64_t base = memory_stats().current_bytes;
                     reset_peak_memory();
                     { Tensor y = sdpa(q, k, v); sink(y); }
                     bench::report_value("sdpa_fwd_peak_mem", peak_mib_since(base), "MiB");
                   }});
  cases.push_back({"sdpa_fwdbwd", {"sdpa_fwdbwd", "sdpa_peak_mem"}, [&] {
                     if (!have(&ops::scaled_dot_product_attention))
                       return missing({"sdpa_fwdbwd", "sdpa_peak_mem"}, "scaled_dot_product_attention");
                     auto [q, k, v, g] = attn_inputs();
                     q.requires_grad_(true);
                     k.requires_grad_(true);
                     v.requires_grad_(true);
                     auto step = [&] {
                       Tensor y = sdpa(q, k, v);
                       y.backward(g);
                       sink(q.grad());
                     };
                     auto clear = [&] {
                       q.set_grad(Tensor());
                       k.set_grad(Tensor());
                       v.set_grad(Tensor());
                     };
                     auto t = bench::measure(o, [&] { step(); clear(); }, 2, 5, 10000);
                     bench::report("sdpa_fwdbwd", t.median * 1e3, "ms", t);
                     // Peak of live tensor bytes during forward+backward above what was live
                     // before it (q, k, v and the upstream gradient excluded; the
                     // saved activations, temporaries and the three input gradients included).
                     int64_t base = memory_stats().current_bytes;
                     reset_peak_memory();
                     step();
                     bench::report_value("sdpa_peak_mem", peak_mib_since(base), "MiB");
                     clear();
                   }});

  return bench::run_cases(o, cases);
}
