#include "tessera/nn/conv.h"

#include <cmath>
#include <cstring>

#include "tessera/nn/init.h"

namespace tessera::nn {

Padding::Padding(const std::string& mode) {
  if (mode == "same")
    same = true;
  else
    TS_CHECK(mode == "valid", "padding must be a number, a pair, 'same' or 'valid', got '", mode, "'");
}

std::string Int2::str() const { return h == w ? detail::str(h) : detail::str("(", h, ", ", w, ")"); }
static std::string padding_str(const Padding& p) { return p.same ? "'same'" : p.size.str(); }

// PyTorch's reset_parameters for every conv: kaiming_uniform(a = sqrt(5)) on
// the weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on the bias.
static void default_conv_init(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

static void check_channels(const char* layer, int64_t in, int64_t out, int64_t groups) {
  TS_CHECK(in > 0 && out > 0, layer, ": in_channels and out_channels must be positive, got ", in, " and ", out);
  TS_CHECK(groups > 0 && in % groups == 0 && out % groups == 0, layer, ": groups=", groups,
           " must divide in_channels=", in, " and out_channels=", out);
}

Conv1d::Conv1d(int64_t in, int64_t out, int64_t k, int64_t stride, Padding padding, int64_t dilation, int64_t groups,
               bool with_bias)
    : Module("Conv1d"), in_channels(in), out_channels(out), kernel_size(k), stride(stride), dilation(dilation),
      groups(groups), padding(padding) {
  check_channels("Conv1d", in, out, groups);
  TS_CHECK(k > 0 && stride > 0 && dilation > 0, "Conv1d: kernel_size, stride and dilation must be positive");
  weight = register_parameter("weight", empty({out, in / groups, k}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Conv1d::reset_parameters() { default_conv_init(weight, bias); }

Tensor Conv1d::forward(const Tensor& x) {
  return ops::conv1d(x, weight, bias, stride, padding.size.h, dilation, groups, padding.same);
}

std::string Conv1d::extra_repr() const {
  std::string s = detail::str(in_channels, ", ", out_channels, ", kernel_size=", kernel_size, ", stride=", stride);
  if (padding.same || padding.size.h) s += ", padding=" + padding_str(padding);
  if (dilation != 1) s += detail::str(", dilation=", dilation);
  if (groups != 1) s += detail::str(", groups=", groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

Conv2d::Conv2d(int64_t in, int64_t out, Int2 k, Int2 stride, Padding padding, Int2 dilation, int64_t groups,
               bool with_bias)
    : Module("Conv2d"), in_channels(in), out_channels(out), kernel_size(k), stride(stride), padding(padding),
      dilation(dilation), groups(groups) {
  check_channels("Conv2d", in, out, groups);
  TS_CHECK(k.h > 0 && k.w > 0 && stride.h > 0 && stride.w > 0 && dilation.h > 0 && dilation.w > 0,
           "Conv2d: kernel_size, stride and dilation must be positive");
  weight = register_parameter("weight", empty({out, in / groups, k.h, k.w}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Conv2d::reset_parameters() { default_conv_init(weight, bias); }

Tensor Conv2d::forward(const Tensor& x) {
  ops::Conv2dOptions o;
  o.stride = stride.vec();
  o.padding = padding.size.vec();
  o.dilation = dilation.vec();
  o.groups = groups;
  o.padding_same = padding.same;
  return ops::conv2d(x, weight, bias, o);
}

std::string Conv2d::extra_repr() const {
  std::string s = detail::str(in_channels, ", ", out_channels, ", kernel_size=", kernel_size.str(),
                      ", stride=", stride.str());
  if (padding.same || padding.size.h || padding.size.w) s += ", padding=" + padding_str(padding);
  if (dilation.h != 1 || dilation.w != 1) s += ", dilation=" + dilation.str();
  if (groups != 1) s += detail::str(", groups=", groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, Int2 k, Int2 stride, Int2 padding, Int2 output_padding,
                                 int64_t groups, bool with_bias, Int2 dilation)
    : Module("ConvTranspose2d"), in_channels(in), out_channels(out), kernel_size(k), stride(stride),
      padding(padding), output_padding(output_padding), groups(groups), dilation(dilation) {
  check_channels("ConvTranspose2d", in, out, groups);
  weight = register_parameter("weight", empty({in, out / groups, k.h, k.w}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void ConvTranspose2d::reset_parameters() { default_conv_init(weight, bias); }

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return ops::conv_transpose2d(x, weight, bias, stride.vec(), padding.vec(), output_padding.vec(), groups,
                               dilation.vec());
}

std::string ConvTranspose2d::extra_repr() const {
  std::string s = detail::str(in_channels, ", ", out_channels, ", kernel_size=", kernel_size.str(),
                      ", stride=", stride.str());
  if (padding.h || padding.w) s += ", padding=" + padding.str();
  if (output_padding.h || output_padding.w) s += ", output_padding=" + output_padding.str();
  if (groups != 1) s += detail::str(", groups=", groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

}  // namespace tessera::nn
