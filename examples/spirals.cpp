// The demo: a two-layer network learns to separate two interleaved spirals,
// written define-by-run with Tessera's autograd, trained with plain SGD +
// momentum. Prints the loss and accuracy as it goes, then what memory it used.
#include <cmath>
#include <cstdio>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/allocator.h"
#include "tessera/core/parallel.h"
#include "tessera/ops/ops.h"

using namespace tessera;
using namespace tessera::ops;

// Two spirals of n points each: x [2n, 2], labels [2n].
std::pair<Tensor, Tensor> spirals(int64_t n, Generator& g) {
  Tensor t = mul(rand({n}, {}, &g), 3.0 * M_PI);  // angle
  Tensor r = add(mul(t, 1.0 / (3.0 * M_PI)), 0.1);
  Tensor noise = mul(randn({2 * n, 2}, {}, &g), 0.03);
  Tensor a = stack({mul(r, cos(t)), mul(r, sin(t))}, 1);
  Tensor x = add(cat({a, neg(a)}), noise);
  Tensor y = cat({zeros({n}, DType::I64), ones({n}, DType::I64)});
  return {x, y};
}

int main(int argc, char** argv) {
  int steps = argc > 1 ? std::atoi(argv[1]) : 600;
  Generator gen(2024);
  auto [x, y] = spirals(500, gen);
  const int64_t hidden = 64;
  // Kaiming-style init; parameters are leaves that require grad.
  TensorList params = {
      mul(randn({hidden, 2}, {}, &gen), std::sqrt(2.0 / 2)).requires_grad_(),
      zeros({hidden}).requires_grad_(),
      mul(randn({hidden, hidden}, {}, &gen), std::sqrt(2.0 / hidden)).requires_grad_(),
      zeros({hidden}).requires_grad_(),
      mul(randn({2, hidden}, {}, &gen), std::sqrt(1.0 / hidden)).requires_grad_(),
      zeros({2}).requires_grad_(),
  };
  TensorList velocity;
  for (auto& p : params) velocity.push_back(zeros_like(p));
  auto forward = [&](const Tensor& in) {
    Tensor h = gelu(linear(in, params[0], params[1]));
    h = layer_norm(gelu(linear(h, params[2], params[3])), {hidden});
    return linear(h, params[4], params[5]);
  };

  std::printf("Tessera demo: 2-layer MLP on two spirals (%lld points), %d threads\n",
              static_cast<long long>(x.shape()[0]), get_num_threads());
  const double lr = 0.1, momentum = 0.9;
  for (int step = 0; step <= steps; ++step) {
    Tensor logits = forward(x);
    Tensor loss = cross_entropy(logits, y);
    loss.backward();
    {
      NoGradGuard no_grad;  // the update is not part of the graph
      for (size_t i = 0; i < params.size(); ++i) {
        velocity[i].mul_(momentum).add_(params[i].grad());
        params[i].sub_(velocity[i], lr);
        params[i].grad().zero_();
      }
    }
    if (step % 100 == 0) {
      NoGradGuard no_grad;
      double acc = mean(eq(argmax(logits, 1), y).to(DType::F32)).item<double>();
      std::printf("step %4d  loss %.4f  accuracy %5.1f%%\n", step, loss.item<double>(), 100 * acc);
    }
  }
  NoGradGuard no_grad;
  Tensor probe = tensor({0.5, 0.0, -0.5, 0.0}, {2, 2});
  std::printf("\nclass probabilities at (0.5, 0) and (-0.5, 0):\n%s\n", softmax(forward(probe), 1).str().c_str());
  MemoryStats m = memory_stats();
  std::printf("memory: %.2f MiB live, %.2f MiB peak, %lld allocations, %.1f%% served from the cache\n",
              m.current_bytes / 1048576.0, m.peak_bytes / 1048576.0, static_cast<long long>(m.allocations),
              100.0 * m.cache_hits / std::max<int64_t>(m.allocations, 1));
  return 0;
}
