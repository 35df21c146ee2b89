// Trains a small classifier on synthetic data with the installed library,
// compiles it to a graph and runs that: one program over the public API.
#include <cstdio>

#include "tessera/tessera.h"

using namespace tessera;

int main() {
  std::printf("Tessera %s (headers %s)\n", tessera::version(), TESSERA_VERSION);
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(4, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 3)});
  optim::AdamW opt(model->parameters(), {{"lr", 1e-2}});
  // Three classes: which of the first three features is largest.
  Tensor x = ops::randn({256, 4});
  Tensor y = ops::argmax(ops::slice(x, 1, 0, 3), 1);
  float first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    Tensor loss = ops::cross_entropy((*model)(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<float>();
  }
  model->eval();
  Model compiled(compile::capture([&](const TensorList& in) { return TensorList{(*model)(in[0])}; }, {x}));
  Tensor agree = ops::eq(ops::argmax(compiled(x), 1), ops::argmax((*model)(x), 1));
  const double same = ops::mean(agree.to(DType::F32)).item<float>();
  const double accuracy = ops::mean(ops::eq(ops::argmax(compiled(x), 1), y).to(DType::F32)).item<float>();
  std::printf("loss %.3f -> %.3f; accuracy %.3f; compiled graph agrees with eager on %.0f%% of rows\n", first, last,
              accuracy, 100 * same);
  return last < first && accuracy > 0.8 && same == 1.0 ? 0 : 1;
}
