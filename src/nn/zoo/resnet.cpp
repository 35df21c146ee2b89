// ResNet-18/34/50 with torchvision's module names and initialisation.
#include "tessera/nn/init.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"

namespace tessera::nn::zoo {
namespace {

std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  return std::make_shared<Conv2d>(in, out, k, stride, k / 2, 1, 1, false);
}

struct Block : Module {
  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<Sequential> downsample;
  using Module::Module;
  Tensor forward(const Tensor& x) override {
    Tensor h = ops::relu((*bn1)((*conv1)(x)));
    h = (*bn2)((*conv2)(h));
    if (conv3) h = (*bn3)((*conv3)(ops::relu(h)));
    return ops::relu(ops::add(h, downsample ? (*downsample)(x) : x));
  }
};

// Basic: 3x3 -> 3x3 (expansion 1). Bottleneck: 1x1 -> 3x3 (stride) -> 1x1 x4.
std::shared_ptr<Block> make_block(bool bottleneck, int64_t in, int64_t width, int64_t stride) {
  auto b = std::make_shared<Block>(bottleneck ? "Bottleneck" : "BasicBlock");
  const int64_t out = bottleneck ? width * 4 : width;
  if (bottleneck) {
    b->conv1 = b->register_module("conv1", conv(in, width, 1, 1));
    b->bn1 = b->register_module("bn1", std::make_shared<BatchNorm2d>(width));
    b->conv2 = b->register_module("conv2", conv(width, width, 3, stride));
    b->bn2 = b->register_module("bn2", std::make_shared<BatchNorm2d>(width));
    b->conv3 = b->register_module("conv3", conv(width, out, 1, 1));
    b->bn3 = b->register_module("bn3", std::make_shared<BatchNorm2d>(out));
  } else {
    b->conv1 = b->register_module("conv1", conv(in, width, 3, stride));
    b->bn1 = b->register_module("bn1", std::make_shared<BatchNorm2d>(width));
    b->conv2 = b->register_module("conv2", conv(width, width, 3, 1));
    b->bn2 = b->register_module("bn2", std::make_shared<BatchNorm2d>(width));
  }
  if (stride != 1 || in != out)
    b->downsample = b->register_module(
        "downsample", std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
                          conv(in, out, 1, stride), std::make_shared<BatchNorm2d>(out)}));
  return b;
}

}  // namespace

ResNet::ResNet(ResNetConfig c) : Module("ResNet"), config(std::move(c)) {
  TS_CHECK(config.block == "basic" || config.block == "bottleneck", "ResNet: block must be 'basic' or 'bottleneck', "
           "got '", config.block, "'");
  TS_CHECK(config.stem == "cifar" || config.stem == "imagenet", "ResNet: stem must be 'cifar' or 'imagenet', got '",
           config.stem, "'");
  TS_CHECK(config.layers.size() == 4 && config.widths.size() == 4, "ResNet: layers and widths must have 4 entries");
  const bool bottleneck = config.block == "bottleneck";
  const bool imagenet = config.stem == "imagenet";
  conv1 = register_module("conv1", imagenet ? std::make_shared<Conv2d>(config.in_channels, config.widths[0], 7, 2, 3,
                                                                       1, 1, false)
                                            : conv(config.in_channels, config.widths[0], 3, 1));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(config.widths[0]));
  if (imagenet) maxpool = std::make_shared<MaxPool2d>(3, 2, 1);
  int64_t in = config.widths[0];
  for (size_t s = 0; s < 4; ++s) {
    TS_CHECK(config.layers[s] > 0 && config.widths[s] > 0, "ResNet: layers and widths must be positive");
    auto stage = std::make_shared<Sequential>();
    for (int64_t i = 0; i < config.layers[s]; ++i) {
      stage->push_back(make_block(bottleneck, in, config.widths[s], i == 0 && s > 0 ? 2 : 1));
      in = bottleneck ? config.widths[s] * 4 : config.widths[s];
    }
    stages.push_back(register_module("layer" + std::to_string(s + 1), stage));
  }
  fc = register_module("fc", std::make_shared<Linear>(in, config.num_classes));
  reset_parameters();
}

// torchvision: kaiming_normal(fan_out, relu) for convs, BN weight 1 / bias 0.
void ResNet::reset_parameters() {
  for (auto* m : modules())
    if (auto* cv = dynamic_cast<Conv2d*>(m)) init::kaiming_normal_(cv->weight, 0.0, "fan_out", "relu");
}

Tensor ResNet::forward(const Tensor& x) {
  TS_CHECK(x.dim() == 4 && x.size(1) == config.in_channels, "ResNet: expected images [N, ", config.in_channels,
           ", H, W], got shape ", shape_str(x.shape()));
  Tensor h = ops::relu((*bn1)((*conv1)(x)));
  if (maxpool) h = (*maxpool)(h);
  for (auto& s : stages) h = (*s)(h);
  return (*fc)(ops::mean(h, {2, 3}));
}

}  // namespace tessera::nn::zoo
