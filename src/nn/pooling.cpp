#include "tessera/nn/pooling.h"

namespace tessera::nn {

MaxPool2d::MaxPool2d(Int2 k, Int2 s, Int2 p, Int2 d, bool ceil)
    : Module("MaxPool2d"), kernel_size(k), stride(s.h == 0 && s.w == 0 ? k : s), padding(p), dilation(d),
      ceil_mode(ceil) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  return ops::max_pool2d(x, kernel_size.vec(), stride.vec(), padding.vec(), dilation.vec(), ceil_mode);
}

std::string MaxPool2d::extra_repr() const {
  return detail::str("kernel_size=", kernel_size.str(), ", stride=", stride.str(), ", padding=", padding.str());
}

AvgPool2d::AvgPool2d(Int2 k, Int2 s, Int2 p, bool ceil, bool count_pad)
    : Module("AvgPool2d"), kernel_size(k), stride(s.h == 0 && s.w == 0 ? k : s), padding(p), ceil_mode(ceil),
      count_include_pad(count_pad) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  return ops::avg_pool2d(x, kernel_size.vec(), stride.vec(), padding.vec(), ceil_mode, count_include_pad);
}

std::string AvgPool2d::extra_repr() const {
  return detail::str("kernel_size=", kernel_size.str(), ", stride=", stride.str(), ", padding=", padding.str());
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return ops::adaptive_avg_pool2d(x, output_size.vec()); }
std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + output_size.str(); }

}  // namespace tessera::nn
