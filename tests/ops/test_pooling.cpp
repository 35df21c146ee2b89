// Max pooling's two kernels: the indexed one (training: the backward needs the
// argmax) and the vectorized one without indices (inference, NCHW or
// channel-blocked planes). They must agree exactly, NaNs and padding included.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/pool.h"
#include "test_util.h"

namespace tessera {
namespace {

struct PoolCase {
  Shape in;
  std::vector<int64_t> kernel, stride, padding, dilation;
  bool ceil;
};

const PoolCase kCases[] = {
    {{2, 3, 8, 8}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
    {{2, 3, 7, 9}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true},      // ragged last window
    {{1, 4, 9, 10}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false},    // ResNet's stem pool
    {{1, 2, 6, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
    {{1, 2, 9, 11}, {2, 3}, {1, 2}, {0, 1}, {2, 2}, false},    // dilated, asymmetric
    {{3, 5, 6}, {2, 3}, {1, 2}, {0, 0}, {1, 1}, false},        // [C, H, W]
    {{1, 1, 1, 17}, {1, 4}, {1, 3}, {0, 2}, {1, 1}, true},
};

// x with NaNs, infinities and repeats sprinkled in.
Tensor awkward_input(const Shape& shape, DType dtype) {
  Tensor x = testing::rand_f64(shape, -2.0, 2.0, 7);
  auto* d = x.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); i += 13) d[i] = NAN;
  for (int64_t i = 5; i < x.numel(); i += 17) d[i] = -INFINITY;
  for (int64_t i = 3; i < x.numel(); i += 19) d[i] = d[i - 1];
  return x.to(dtype);
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  Tensor g = got.to(DType::F64).contiguous(), w = want.to(DType::F64).contiguous();
  for (int64_t i = 0; i < g.numel(); ++i) {
    double a = g.data_ptr<double>()[i], b = w.data_ptr<double>()[i];
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << what << " at " << i;
    } else {
      EXPECT_EQ(a, b) << what << " at " << i;
    }
  }
}

TEST(MaxPool, InferenceKernelMatchesTheIndexedOne) {
  for (DType dtype : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    for (const PoolCase& c : kCases) {
      Tensor x = awkward_input(c.in, dtype);
      Tensor want = std::get<0>(ops::max_pool2d_with_indices(x, c.kernel, c.stride, c.padding, c.dilation, c.ceil));
      Tensor got;
      {
        NoGradGuard no_grad;
        got = ops::max_pool2d(x, c.kernel, c.stride, c.padding, c.dilation, c.ceil);
      }
      expect_same(got, want, std::string(dtype_name(dtype)) + " " + shape_str(c.in));
      // A strided (non-contiguous) input takes the same path.
      NoGradGuard no_grad;
      Tensor xt = x.transpose(-1, -2).contiguous().transpose(-1, -2);
      expect_same(ops::max_pool2d(xt, c.kernel, c.stride, c.padding, c.dilation, c.ceil), want, "strided");
    }
  }
}

TEST(MaxPool, ChannelBlockedPlanesMatchNchw) {
  // The layout pass pools blocked activations [N, C/b, H, W, b] in place of NCHW.
  for (int64_t b : {8, 16}) {
    for (const PoolCase& c : kCases) {
      if (c.in.size() != 4) continue;
      Shape in = c.in;
      in[1] = 2 * b;
      NoGradGuard no_grad;
      Tensor x = awkward_input(in, DType::F32);
      Tensor want = ops::channel_blocks(ops::max_pool2d(x, c.kernel, c.stride, c.padding, c.dilation, c.ceil), b);
      Tensor xb = ops::channel_blocks(x, b);
      cpu::PoolGeometry g{};
      g.planes = in[0] * in[1] / b;
      g.H = in[2];
      g.W = in[3];
      g.OH = want.size(2);
      g.OW = want.size(3);
      g.kh = c.kernel[0], g.kw = c.kernel[1], g.sh = c.stride[0], g.sw = c.stride[1];
      g.ph = c.padding[0], g.pw = c.padding[1], g.dh = c.dilation[0], g.dw = c.dilation[1];
      g.dtype = DType::F32;
      g.lanes = b;
      Tensor got = empty(want.shape(), DType::F32);
      cpu::max_pool2d_forward(g, xb.raw_data(), got.raw_data(), nullptr);
      expect_same(got, want, "block " + std::to_string(b) + " " + shape_str(in));
    }
  }
}

}  // namespace
}  // namespace tessera
