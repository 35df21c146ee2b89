// Training from C++, two ways.
//
// 1. By hand: the loop a PyTorch user would write, with Tessera's modules,
//    DataLoader, optimizer and scheduler.
// 2. With train::Trainer, which adds evaluation, checkpoints, exact resume,
//    progress output and Ctrl-C handling (what `tessera train` runs).
//
//   build/examples/train_fashion_mnist          # the hand-written loop, 1 epoch
//   build/examples/train_fashion_mnist trainer  # the same model through Trainer
#include <cstdio>
#include <cstring>

#include "tessera/autograd/grad_mode.h"
#include "tessera/data/dataloader.h"
#include "tessera/data/datasets.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/scheduler.h"
#include "tessera/train/trainer.h"

using namespace tessera;

int hand_written() {
  manual_seed(0);
  auto model = std::make_shared<nn::zoo::LeNet>(nn::zoo::LeNetConfig{});  // 2 conv stages + 2 linear
  auto train_set = std::make_shared<data::FashionMNIST>(data::kFashionMNISTRoot, "train");
  auto test_set = std::make_shared<data::FashionMNIST>(data::kFashionMNISTRoot, "test");
  data::DataLoader loader(train_set, {.batch_size = 64, .shuffle = true, .seed = 0, .num_workers = 2});
  optim::Adam opt(model->parameters(), {{"lr", 1e-3}});
  optim::OneCycleLR sched(opt, /*max_lr=*/3e-3, /*total_steps=*/loader.batches_per_epoch());

  model->train();
  int64_t step = 0;
  while (auto batch = loader.next()) {  // one epoch
    Tensor loss = ops::cross_entropy((*model)((*batch)[0]), (*batch)[1]);
    opt.zero_grad();
    loss.backward();
    opt.step();
    sched.step();
    if (++step % 100 == 0) std::printf("step %lld  loss %.4f\n", static_cast<long long>(step), loss.item<double>());
  }

  NoGradGuard no_grad;  // evaluation: no graph
  model->eval();
  data::DataLoader test_loader(test_set, {.batch_size = 500});
  int64_t correct = 0;
  while (auto batch = test_loader.next())
    correct += ops::sum(ops::eq(ops::argmax((*model)((*batch)[0]), 1), (*batch)[1])).item<int64_t>();
  std::printf("test accuracy after one epoch: %.2f%%\n", 100.0 * correct / test_set->size());
  return 0;
}

int with_trainer() {
  train::Recipe r = train::load_recipe("examples/configs/fashion_mnist_cnn.yaml");
  r.output_dir = "runs/example_trainer";
  train::Trainer t(std::move(r));
  nlohmann::json summary = t.fit();  // trains, evaluates, checkpoints
  std::printf("final eval: %s\n", summary["eval"].dump().c_str());
  return 0;
}

int main(int argc, char** argv) {
  try {
    return argc > 1 && std::strcmp(argv[1], "trainer") == 0 ? with_trainer() : hand_written();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
