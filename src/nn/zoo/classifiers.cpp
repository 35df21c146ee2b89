// MLP and the LeNet-style CNN.
#include "tessera/nn/zoo/zoo.h"

namespace tessera::nn::zoo {

MLP::MLP(MLPConfig c) : Module("MLP"), config(std::move(c)) {
  TS_CHECK(config.in_features > 0 && config.num_classes > 0, "MLP: in_features and num_classes must be positive");
  net = register_module("net", std::make_shared<Sequential>());
  int64_t prev = config.in_features;
  for (int64_t width : config.hidden) {
    TS_CHECK(width > 0, "MLP: hidden widths must be positive, got ", width);
    net->push_back(std::make_shared<Linear>(prev, width));
    net->push_back(make_activation(config.activation));
    if (config.dropout > 0) net->push_back(std::make_shared<Dropout>(config.dropout));
    prev = width;
  }
  net->push_back(std::make_shared<Linear>(prev, config.num_classes));
}

Tensor MLP::forward(const Tensor& x) {
  TS_CHECK(x.dim() >= 1 && x.numel() % std::max<int64_t>(config.in_features, 1) == 0 &&
               (x.dim() == 1 ? x.numel() : x.numel() / x.size(0)) == config.in_features,
           "MLP: expected inputs of ", config.in_features, " features per sample, got shape ", shape_str(x.shape()));
  return (*net)(x.dim() <= 2 ? x : x.flatten(1));
}

LeNet::LeNet(LeNetConfig c) : Module("LeNet"), config(std::move(c)) {
  TS_CHECK(config.channels.size() == 2, "LeNet: channels must list 2 widths, got ", config.channels.size());
  TS_CHECK(config.image_size > 0 && config.image_size % 4 == 0, "LeNet: image_size must be a positive multiple of 4, "
           "got ", config.image_size);
  features = register_module("features", std::make_shared<Sequential>());
  int64_t prev = config.in_channels;
  for (int64_t ch : config.channels) {
    features->push_back(std::make_shared<Conv2d>(prev, ch, 3, 1, 1));
    features->push_back(std::make_shared<ReLU>());
    features->push_back(std::make_shared<MaxPool2d>(2));
    prev = ch;
  }
  const int64_t side = config.image_size / 4;
  classifier = register_module("classifier", std::make_shared<Sequential>());
  classifier->push_back(std::make_shared<Linear>(prev * side * side, config.hidden));
  classifier->push_back(std::make_shared<ReLU>());
  if (config.dropout > 0) classifier->push_back(std::make_shared<Dropout>(config.dropout));
  classifier->push_back(std::make_shared<Linear>(config.hidden, config.num_classes));
}

Tensor LeNet::forward(const Tensor& x) {
  TS_CHECK(x.dim() == 4 && x.size(1) == config.in_channels && x.size(2) == config.image_size &&
               x.size(3) == config.image_size,
           "LeNet: expected images [N, ", config.in_channels, ", ", config.image_size, ", ", config.image_size,
           "], got shape ", shape_str(x.shape()));
  return (*classifier)((*features)(x).flatten(1));
}

}  // namespace tessera::nn::zoo
