// libtorch (C++) side of the side-by-side benchmark: the same cases as
// bench/tessera_bench.cpp, in a separate process, against Debian's libtorch-dev
// (1.13). Prints RESULT lines in the protocol of bench_common.h.
#include <torch/torch.h>

#include <c10/core/CPUAllocator.h>
#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.h"

namespace {

using bench::Case;
using bench::Options;

volatile float g_sink = 0;
void sink(const torch::Tensor& t) { g_sink = g_sink + t.data_ptr<float>()[0]; }

// Peak memory. libtorch's CPU allocator keeps no statistics, and the process's
// RSS high-water mark would not be comparable (after warm-up, glibc keeps freed
// blocks mapped in the best configuration, just as Tessera's caching allocator
// does, so the RSS delta of a step is ~0 on both sides). The fair equivalent of
// tessera::memory_stats().peak_bytes is to count live tensor bytes: this
// allocator wraps libtorch's default CPU allocator (installed with a higher
// priority, for the memory measurement only) and tracks current and peak bytes
// of every tensor allocation.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) const override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    auto* ctx = new Ctx{std::move(inner), n, this};
    int64_t cur = current_.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
    int64_t p = peak_.load();
    while (cur > p && !peak_.compare_exchange_weak(p, cur)) {
    }
    return {data, ctx, &CountingAllocator::release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  int64_t current() const { return current_.load(); }
  int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }

 private:
  struct Ctx {
    c10::DataPtr inner;
    size_t n;
    const CountingAllocator* self;
  };
  static void release(void* p) {
    auto* ctx = static_cast<Ctx*>(p);
    ctx->self->current_.fetch_sub(static_cast<int64_t>(ctx->n));
    delete ctx;  // frees the block through the base allocator's deleter
  }

  c10::Allocator* base_;
  mutable std::atomic<int64_t> current_{0};
  mutable std::atomic<int64_t> peak_{0};
};

CountingAllocator* counting_allocator() {
  static CountingAllocator* a = [] {
    auto* c = new CountingAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(c, /*priority=*/100);
    return c;
  }();
  return a;
}

// Causal attention as PyTorch code writes it without a fused kernel
// (libtorch 1.13 has none): q @ k^T * scale, causal mask, softmax, @ v.
torch::Tensor explicit_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& future) {
  double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto att = torch::matmul(q, k.transpose(-2, -1)) * scale;
  att = att.masked_fill(future, -INFINITY);
  att = torch::softmax(att, -1);
  return torch::matmul(att, v);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = bench::parse_args(argc, argv);
  torch::set_num_threads(o.threads);
  std::vector<Case> cases;

  // ---- per-op overhead: 1-element f32 add --------------------------------
  cases.push_back({"overhead_add", {}, [&] {
                     // No autograd recording. c10::InferenceMode is libtorch's fastest mode for
                     // this (it also skips version counters and view tracking); NoGradGuard is
                     // measured as well and the faster of the two is reported.
                     torch::Tensor a = torch::ones({1}), b = torch::ones({1});
                     bench::Timing t1, t2;
                     {
                       torch::NoGradGuard ng;
                       t1 = bench::measure(o, [&] { auto c = torch::add(a, b); }, 2, 5, 100000, 30, 10000);
                     }
                     {
                       c10::InferenceMode im;
                       torch::Tensor ai = torch::ones({1}), bi = torch::ones({1});
                       t2 = bench::measure(o, [&] { auto c = torch::add(ai, bi); }, 2, 5, 100000, 30, 10000);
                     }
                     const bench::Timing& t = t2.median < t1.median ? t2 : t1;
                     bench::report("overhead_add", t.median * 1e9, "ns", t,
                                   "nograd_ns=" + std::to_string(t1.median * 1e9) +
                                       " inference_mode_ns=" + std::to_string(t2.median * 1e9));
                   }});
  cases.push_back({"overhead_add_grad", {}, [&] {
                     torch::Tensor a = torch::ones({1}), b = torch::ones({1});
                     a.requires_grad_(true);
                     auto t = bench::measure(o, [&] { auto c = torch::add(a, b); }, 2, 5, 100000, 30, 10000);
                     bench::report("overhead_add_grad", t.median * 1e9, "ns", t);
                   }});

  // ---- bandwidth -------------------------------------------------------------------
  cases.push_back({"memcpy_16M", {}, [&] {
                     size_t bytes = size_t(bench::kEltN) * 4;
                     torch::Tensor src = torch::ones({bench::kEltN}), dst = torch::zeros({bench::kEltN});
                     char* s = static_cast<char*>(src.data_ptr());
                     char* d = static_cast<char*>(dst.data_ptr());
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
                       torch::NoGradGuard ng;
                       torch::Tensor a = torch::randn({bench::kEltN}), b = torch::randn({bench::kEltN});
                       auto t = bench::measure(o, [&] { auto c = fn(a, b); sink(c); }, 3, 10, 1000);
                       bench::report(name, bench::elt_bytes(n_in) / t.median / 1e9, "GB/s", t);
                     }});
  };
  elementwise("add_16M", 2, [](const torch::Tensor& a, const torch::Tensor& b) { return torch::add(a, b); });
  elementwise("mul_16M", 2, [](const torch::Tensor& a, const torch::Tensor& b) { return torch::mul(a, b); });
  elementwise("gelu_16M", 1, [](const torch::Tensor& a, const torch::Tensor&) { return torch::gelu(a); });

  // ---- matmul ------------------------------------------------------------------
  for (int64_t n : bench::kMatmulSizes) {
    std::string name = "matmul_" + std::to_string(n);
    cases.push_back({name, {}, [&o, n, name] {
                       torch::NoGradGuard ng;
                       torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
                       int warm = n >= 2048 ? 2 : 5, reps = n >= 2048 ? 5 : 20;
                       auto t = bench::measure(o, [&] { auto c = torch::matmul(a, b); sink(c); }, warm, reps, 100000);
                       bench::report(name, bench::matmul_flops(n) / t.median / 1e9, "GFLOP/s", t);
                     }});
  }

  // ---- softmax and layer_norm on [4096, 1024] ---------------------------------------
  cases.push_back({"softmax_fwd", {}, [&] {
                     torch::NoGradGuard ng;
                     torch::Tensor x = torch::randn({bench::kRows, bench::kCols});
                     auto t = bench::measure(o, [&] { auto y = torch::softmax(x, -1); sink(y); }, 3, 10, 10000);
                     bench::report("softmax_fwd", t.median * 1e3, "ms", t);
                   }});
  cases.push_back({"softmax_fwdbwd", {}, [&] {
                     torch::Tensor x = torch::randn({bench::kRows, bench::kCols});
                     torch::Tensor g = torch::randn({bench::kRows, bench::kCols});
                     x.requires_grad_(true);
                     auto t = bench::measure(o, [&] {
                       auto y = torch::softmax(x, -1);
                       y.backward(g);
                       sink(x.grad());
                       x.mutable_grad().reset();
                     }, 3, 10, 10000);
                     bench::report("softmax_fwdbwd", t.median * 1e3, "ms", t);
                   }});
  cases.push_back({"layernorm_fwd", {}, [&] {
                     torch::NoGradGuard ng;
                     torch::Tensor x = torch::randn({bench::kRows, bench::kCols});
                     torch::Tensor w = torch::randn({bench::kCols}), b = torch::randn({bench::kCols});
                     auto t = bench::measure(o, [&] {
                       auto y = torch::layer_norm(x, {bench::kCols}, w, b, 1e-5);
                       sink(y);
                     }, 3, 10, 10000);
                     bench::report("layernorm_fwd", t.median * 1e3, "ms", t);
                   }});
  cases.push_back({"layernorm_fwdbwd", {}, [&] {
                     torch::Tensor x = torch::randn({bench::kRows, bench::kCols});
                     torch::Tensor g = torch::randn({bench::kRows, bench::kCols});
                     torch::Tensor w = torch::randn({bench::kCols}), b = torch::randn({bench::kCols});
                     x.requires_grad_(true);
                     w.requires_grad_(true);
                     b.requires_grad_(true);
                     auto t = bench::measure(o, [&] {
                       auto y = torch::layer_norm(x, {bench::kCols}, w, b, 1e-5);
                       y.backward(g);
                       sink(x.grad());
                       x.mutable_grad().reset();
                       w.mutable_grad().reset();
                       b.mutable_grad().reset();
                     }, 3, 10, 10000);
                     bench::report("layernorm_fwdbwd", t.median * 1e3, "ms", t);
                   }});

  // ---- conv2d -----------------------------------------------------------------------
  auto conv_inputs = [] {
    auto x = torch::randn({bench::kConvN, bench::kConvC, bench::kConvH, bench::kConvW});
    auto w = torch::randn({bench::kConvK, bench::kConvC, 3, 3}) * 0.05;
    auto b = torch::randn({bench::kConvK});
    return std::make_tuple(x, w, b);
  };
  cases.push_back({"conv_fwd", {}, [&] {
                     torch::NoGradGuard ng;
                     auto [x, w, b] = conv_inputs();
                     auto t = bench::measure(o, [&] { auto y = torch::conv2d(x, w, b, 1, 1); sink(y); }, 2, 5, 1000, 20);
                     bench::report("conv_fwd", t.median * 1e3, "ms", t,
                                   "gflops=" + std::to_string(bench::conv_fwd_flops() / t.median / 1e9));
                   }});
  cases.push_back({"conv_fwdbwd", {}, [&] {
                     auto [x, w, b] = conv_inputs();
                     auto g = torch::randn({bench::kConvN, bench::kConvK, bench::kConvH, bench::kConvW});
                     x.requires_grad_(true);
                     w.requires_grad_(true);
                     b.requires_grad_(true);
                     auto t = bench::measure(o, [&] {
                       auto y = torch::conv2d(x, w, b, 1, 1);
                       y.backward(g);
                       sink(x.grad());
                       x.mutable_grad().reset();
                       w.mutable_grad().reset();
                       b.mutable_grad().reset();
                     }, 1, 3, 1000, 20);
                     bench::report("conv_fwdbwd", t.median * 1e3, "ms", t,
                                   "gflops=" + std::to_string(3 * bench::conv_fwd_flops() / t.median / 1e9));
                   }});

  // ---- causal attention [1, 8, 1024, 64], explicit matmul-softmax-matmul ---------------
  auto attn_inputs = [] {
    std::vector<int64_t> s{bench::kAttnB, bench::kAttnH, bench::kAttnL, bench::kAttnE};
    auto future = torch::ones({bench::kAttnL, bench::kAttnL}, torch::kBool).triu(1);
    return std::make_tuple(torch::randn(s), torch::randn(s), torch::randn(s), torch::randn(s), future);
  };
  constexpr double kMiB = 1024.0 * 1024.0;
  cases.push_back({"sdpa_fwd", {"sdpa_fwd", "sdpa_fwd_peak_mem"}, [&] {
                     torch::NoGradGuard ng;
                     auto [q, k, v, g, future] = attn_inputs();
                     auto t = bench::measure(o, [&] { auto y = explicit_attention(q, k, v, future); sink(y); }, 2, 10, 10000);
                     bench::report("sdpa_fwd", t.median * 1e3, "ms", t);
                     CountingAllocator* ca = counting_allocator();
                     int64_t base = ca->current();  // tensors made before install are not counted: 0
                     ca->reset_peak();
                     { auto y = explicit_attention(q, k, v, future); sink(y); }
                     bench::report_value("sdpa_fwd_peak_mem", double(ca->peak() - base) / kMiB, "MiB");
                   }});
  cases.push_back({"sdpa_fwdbwd", {"sdpa_fwdbwd", "sdpa_peak_mem"}, [&] {
                     auto [q, k, v, g, future] = attn_inputs();
                     q.requires_grad_(true);
                     k.requires_grad_(true);
                     v.requires_grad_(true);
                     auto step = [&] {
                       auto y = explicit_attention(q, k, v, future);
                       y.backward(g);
                       sink(q.grad());
                     };
                     auto clear = [&] {
                       q.mutable_grad().reset();
                       k.mutable_grad().reset();
                       v.mutable_grad().reset();
                     };
                     auto t = bench::measure(o, [&] { step(); clear(); }, 2, 5, 10000);
                     bench::report("sdpa_fwdbwd", t.median * 1e3, "ms", t);
                     // Same definition as Tessera's: live tensor bytes above those live
                     // before the step (q, k, v, g and the mask excluded; saved activations,
                     // temporaries and the three input gradients included).
                     CountingAllocator* ca = counting_allocator();
                     int64_t base = ca->current();
                     ca->reset_peak();
                     step();
                     bench::report_value("sdpa_peak_mem", double(ca->peak() - base) / kMiB, "MiB");
                     clear();
                   }});

  return bench::run_cases(o, cases);
}
