#pragma once
// Pooling layers over [N, C, H, W] (or [C, H, W]).
#include "tessera/nn/conv.h"

namespace tessera::nn {

struct MaxPool2d : Module {
  Int2 kernel_size, stride, padding, dilation;
  bool ceil_mode;
  // stride defaults to kernel_size (pass 0).
  explicit MaxPool2d(Int2 kernel_size, Int2 stride = 0, Int2 padding = 0, Int2 dilation = 1, bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

struct AvgPool2d : Module {
  Int2 kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
  explicit AvgPool2d(Int2 kernel_size, Int2 stride = 0, Int2 padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

struct AdaptiveAvgPool2d : Module {
  Int2 output_size;
  explicit AdaptiveAvgPool2d(Int2 output_size) : Module("AdaptiveAvgPool2d"), output_size(output_size) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

}  // namespace tessera::nn
