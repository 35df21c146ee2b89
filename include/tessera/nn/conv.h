#pragma once
// Convolutions. Weights and biases start from PyTorch's default:
// kaiming_uniform(a = sqrt(5)) and U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
#include <string>

#include "tessera/nn/module.h"
#include "tessera/ops/ops.h"

namespace tessera::nn {

// A size per spatial dim, written as one number (3) or a pair ({3, 1}).
struct Int2 {
  int64_t h, w;
  Int2(int64_t v) : h(v), w(v) {}  // NOLINT: implicit on purpose
  Int2(int64_t h, int64_t w) : h(h), w(w) {}
  std::vector<int64_t> vec() const { return {h, w}; }
  std::string str() const;  // "3" or "(3, 1)", for extra_repr()
};

// Padding: a number, a pair, or "same" (output size = input size; stride 1).
struct Padding {
  Int2 size = 0;
  bool same = false;
  Padding(int64_t v) : size(v) {}  // NOLINT
  Padding(int64_t h, int64_t w) : size(h, w) {}
  template <size_t N>
  Padding(const char (&mode)[N]) : Padding(std::string(mode)) {}  // NOLINT: "same" or "valid"
  explicit Padding(const std::string& mode);
};

struct Conv1d : Module {
  int64_t in_channels, out_channels, kernel_size, stride, dilation, groups;
  Padding padding;
  Tensor weight, bias;  // weight [out, in / groups, k]
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, Padding padding = 0,
         int64_t dilation = 1, int64_t groups = 1, bool bias = true);
  void reset_parameters() override;
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

struct Conv2d : Module {
  int64_t in_channels, out_channels;
  Int2 kernel_size, stride;
  Padding padding;
  Int2 dilation;
  int64_t groups;
  Tensor weight, bias;  // weight [out, in / groups, kh, kw]
  Conv2d(int64_t in_channels, int64_t out_channels, Int2 kernel_size, Int2 stride = 1, Padding padding = 0,
         Int2 dilation = 1, int64_t groups = 1, bool bias = true);
  void reset_parameters() override;
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

struct ConvTranspose2d : Module {
  int64_t in_channels, out_channels;
  Int2 kernel_size, stride, padding, output_padding;
  int64_t groups;
  Int2 dilation;
  Tensor weight, bias;  // weight [in, out / groups, kh, kw]
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Int2 kernel_size, Int2 stride = 1, Int2 padding = 0,
                  Int2 output_padding = 0, int64_t groups = 1, bool bias = true, Int2 dilation = 1);
  void reset_parameters() override;
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
};

}  // namespace tessera::nn
