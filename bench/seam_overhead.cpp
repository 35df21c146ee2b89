// What the device seam costs on the paths where overhead dominates: a
// 1-element add (with and without autograd recording) and a width-16 MLP at
// batch 1 (inference forward, and a training step's forward and backward).
// Public API only, so the same file builds against a library from before the
// seam and after it; bench/seam_overhead.sh runs both side by side.
//
//   seam_overhead [--rounds 15] [--calls 20000]
// prints one line per case: name, median ns per call over the rounds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/parallel.h"
#include "tessera/nn/nn.h"
#include "tessera/ops/ops.h"

using namespace tessera;

namespace {

double median_ns(int rounds, int calls, const std::function<void()>& f) {
  for (int i = 0; i < calls / 10; ++i) f();  // warm the caches and the allocator
  std::vector<double> per_call;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    auto t1 = std::chrono::steady_clock::now();
    per_call.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / calls);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15, calls = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--calls")) calls = std::atoi(argv[i + 1]);
  }
  set_num_threads(1);
  {
    NoGradGuard ng;
    Tensor a = ones({1}), b = ones({1});
    std::printf("add_1 %.1f\n", median_ns(rounds, calls, [&] { Tensor c = ops::add(a, b); }));
  }
  {
    Tensor a = ones({1}), b = ones({1});
    a.requires_grad_(true);
    std::printf("add_1_grad %.1f\n", median_ns(rounds, calls, [&] { Tensor c = ops::add(a, b); }));
  }
  manual_seed(0);
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->push_back(std::make_shared<nn::Linear>(16, 16));
  mlp->push_back(std::make_shared<nn::ReLU>());
  mlp->push_back(std::make_shared<nn::Linear>(16, 16));
  mlp->push_back(std::make_shared<nn::ReLU>());
  mlp->push_back(std::make_shared<nn::Linear>(16, 16));
  Tensor x = ops::randn({1, 16});
  {
    NoGradGuard ng;
    std::printf("mlp16_forward %.1f\n", median_ns(rounds, calls / 4, [&] { Tensor y = (*mlp)(x); }));
  }
  std::printf("mlp16_train_step %.1f\n", median_ns(rounds, calls / 20, [&] {
                Tensor loss = ops::sum((*mlp)(x));
                loss.backward();
                mlp->zero_grad();
              }));
  return 0;
}
