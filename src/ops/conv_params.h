#pragma once
// conv2d's checked options and geometry, shared by the convolutions of
// conv.cpp and the int8 convolution of int8.cpp.
#include <vector>

#include "backend/kernel_ids.h"
#include "tessera/ops/attrs.h"
#include "tessera/ops/ops.h"

namespace tessera::ops {

// conv2d's stride, dilation and padding (top-left, bottom-right), checked.
struct Conv2dParams {
  std::vector<int64_t> stride, dil, tl, br;
};
Conv2dParams conv2d_params(const Tensor& w, const Conv2dOptions& o, const char* name);

// The geometry of a convolution of an input of NCHW shape `xs` by `w`.
backend::ConvGeometry conv_geometry(IntArrayRef xs, DType dtype, const Tensor& w, const std::vector<int64_t>& stride,
                                const std::vector<int64_t>& pad_tl, const std::vector<int64_t>& pad_br,
                                const std::vector<int64_t>& dil, int64_t groups);

// A graph node's conv2d attributes.
Conv2dOptions conv2d_options(const Attrs& a);

}  // namespace tessera::ops
