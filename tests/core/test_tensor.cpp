// Tensor basics: dtypes, views sharing storage, broadcasting, promotion,
// factories, printing.
#include <cmath>

#include "test_util.h"

namespace tessera {
namespace {

using namespace ops;

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(kBool), 1u);
  EXPECT_EQ(dtype_size(kBF16), 2u);
  EXPECT_EQ(dtype_size(kF64), 8u);
  EXPECT_STREQ(dtype_name(kF16), "f16");
}

TEST(DType, HalfConversionsRoundTrip) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1e-5f, 5.96e-8f, 1e-3f, 3.14159f}) {
    Half h(f);
    EXPECT_NEAR(static_cast<float>(h), f, std::fabs(f) * 1e-3 + 6e-8) << f;
  }
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(1e6f))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(NAN))));
  EXPECT_EQ(Half(1.0f).x, 0x3c00);
  EXPECT_EQ(BFloat16(1.0f).x, 0x3f80);
  EXPECT_FLOAT_EQ(static_cast<float>(BFloat16(3.0f)), 3.0f);
  // Round to nearest even: 1 + 2^-11 is halfway between two halves.
  EXPECT_EQ(Half(1.0f + 1.0f / 2048).x, 0x3c00);
}

TEST(DType, PromotionTable) {
  EXPECT_EQ(promote_types(kI32, kF32), kF32);
  EXPECT_EQ(promote_types(kU8, kI8), kI32);
  EXPECT_EQ(promote_types(kBool, kI64), kI64);
  EXPECT_EQ(promote_types(kF16, kBF16), kF32);
  EXPECT_EQ(promote_types(kF16, kF64), kF64);
  EXPECT_EQ(promote_types(kI64, kF16), kF16);
  // Python-number rules: a scalar does not widen a tensor of its own category.
  Tensor i32 = ones({2}, kI32), f16 = ones({2}, kF16), b = ones({2}, kBool);
  EXPECT_EQ(add(i32, 1).dtype(), kI32);
  EXPECT_EQ(add(i32, 1.5).dtype(), kF32);
  EXPECT_EQ(add(f16, 2.0).dtype(), kF16);
  EXPECT_EQ(add(b, 1).dtype(), kI64);
  // Zero-dim tensors rank below dimensioned ones, above wrapped numbers.
  EXPECT_EQ(add(ones({2}, kF32), scalar_tensor(1, kF64)).dtype(), kF32);
  EXPECT_EQ(add(ones({2}, kI32), scalar_tensor(1, kF64)).dtype(), kF64);
  EXPECT_EQ(div(ones({2}, kI64), ones({2}, kI64)).dtype(), kF32);
  EXPECT_EQ(lt(i32, 2.5).dtype(), kBool);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor x = arange(12).to(kF32).reshape({3, 4});
  Tensor t = x.t();
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.storage(), x.storage());
  EXPECT_EQ(t.shape(), (Shape{4, 3}));
  EXPECT_EQ(t.strides(), (Shape{1, 4}));
  Tensor s = x.slice(1, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9, 11}));
  s.mul_(10.0);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 10, 2, 30, 4, 50, 6, 70, 8, 90, 10, 110}));
  EXPECT_EQ(x.select(0, -1).to_vector<float>(), (std::vector<float>{8, 90, 10, 110}));
  EXPECT_EQ(x.diagonal().to_vector<float>(), (std::vector<float>{0, 50, 10}));
  EXPECT_EQ(x.diagonal(1).to_vector<float>(), (std::vector<float>{10, 6, 110}));
  EXPECT_EQ(x.unsqueeze(1).shape(), (Shape{3, 1, 4}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(x.unsqueeze(1).squeeze().shape(), (Shape{3, 4}));
  EXPECT_EQ(x.flatten().shape(), (Shape{12}));
  EXPECT_EQ(x.flatten().unflatten(0, {2, -1}).shape(), (Shape{2, 6}));
  EXPECT_EQ(x.narrow(0, 1, 2).shape(), (Shape{2, 4}));
  Tensor e = tensor({1.0, 2.0}).unsqueeze(1).expand({2, 3});
  EXPECT_EQ(e.strides(), (Shape{1, 0}));
  EXPECT_EQ(e.contiguous().to_vector<float>(), (std::vector<float>{1, 1, 1, 2, 2, 2}));
  // reshape of a non-contiguous tensor copies; view refuses with a clear error.
  EXPECT_NE(x.t().reshape({12}).storage(), x.storage());
  EXPECT_THROW(x.t().view({12}), Error);
  EXPECT_EQ(x.t().reshape({12}).to_vector<float>()[1], 4.0f);
}

TEST(Tensor, ZeroSizeTensorsWork) {
  Tensor z = zeros({0, 3});
  EXPECT_EQ(z.numel(), 0);
  EXPECT_EQ(add(z, ones({3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(sum(z).item<float>(), 0.0f);
  EXPECT_EQ(sum(z, {0}).shape(), (Shape{3}));
  EXPECT_EQ(prod(z, {0}).to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(matmul(zeros({2, 0}), zeros({0, 3})).to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(cat({z, ones({2, 3})}).shape(), (Shape{2, 3}));
  EXPECT_EQ(softmax(z, 1).shape(), (Shape{0, 3}));
  EXPECT_THROW(amax(z, {0}), Error);
}

TEST(Tensor, BroadcastingShapes) {
  EXPECT_EQ(broadcast_shapes({3, 1, 4}, {2, 1}, "t"), (Shape{3, 2, 4}));
  EXPECT_EQ(broadcast_shapes({}, {5}, "t"), (Shape{5}));
  EXPECT_EQ(broadcast_shapes({0, 1}, {1, 3}, "t"), (Shape{0, 3}));
  EXPECT_THROW(broadcast_shapes({3}, {4}, "t"), Error);
  Tensor a = arange(3).reshape({3, 1}), b = arange(4);
  EXPECT_EQ(mul(a, b).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 0, 0, 1, 2, 3, 0, 2, 4, 6}));
}

TEST(Tensor, Factories) {
  EXPECT_EQ(arange(5).dtype(), kI64);
  EXPECT_EQ(arange(0, 1, 0.25).to_vector<float>(), (std::vector<float>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(linspace(0, 1, 5).to_vector<float>(), (std::vector<float>{0, 0.25, 0.5, 0.75, 1}));
  EXPECT_EQ(eye(2, 3).to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(full({2}, 7, kI32).to_vector<int32_t>(), (std::vector<int32_t>{7, 7}));
  EXPECT_EQ(full({2}, true, nullptr).dtype(), kBool);
  EXPECT_EQ(ones_like(eye(2), kF64).dtype(), kF64);
  std::vector<float> buf{1, 2, 3, 4};
  Tensor w = from_blob(buf.data(), {2, 2}, kF32);
  buf[3] = 40;
  EXPECT_EQ(w.to_vector<float>()[3], 40.0f);  // no copy
  Tensor c = from_buffer(buf.data(), {4}, kF32);
  buf[0] = 100;
  EXPECT_EQ(c.to_vector<float>()[0], 1.0f);  // copied
  EXPECT_EQ(scalar_tensor(3, kF32).dim(), 0);
  EXPECT_THROW(tensor({1.5, 2.5}).item<float>(), Error);  // two elements
}

TEST(Tensor, ConversionsAndItem) {
  Tensor x = tensor({1.7, -2.2, 300.0});
  EXPECT_EQ(x.to(kI32).to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 300}));
  EXPECT_EQ(x.to(kU8).to_vector<uint8_t>()[2], 255);  // saturates, never UB
  EXPECT_EQ(tensor({NAN}).to(kI64).item<int64_t>(), 0);
  EXPECT_EQ(x.to(kBool).to_vector<bool>(), (std::vector<bool>{true, true, true}));
  EXPECT_FLOAT_EQ(x.to(kBF16).to(kF32).to_vector<float>()[0], 1.703125f);
  EXPECT_DOUBLE_EQ(scalar_tensor(2.5, kF64).item<double>(), 2.5);
  EXPECT_THROW(x.item<float>(), Error);
}

TEST(Tensor, PrintsLikePyTorch) {
  EXPECT_EQ(tensor({1.0, 2.5, -3.0}).str(), "tensor([ 1.0000,  2.5000, -3.0000])");
  EXPECT_EQ(arange(4).reshape({2, 2}).str(), "tensor([[0, 1],\n        [2, 3]])");
  EXPECT_EQ(tensor({1.0, 2.0}).str(), "tensor([1., 2.])");
  EXPECT_EQ(ones({2}, kBool).str(), "tensor([True, True])");
  EXPECT_EQ(scalar_tensor(0.5, kF64).str(), "tensor(0.5000, dtype=f64)");
  EXPECT_EQ(zeros({0, 2}).str(), "tensor([], size=[0, 2])");
  std::string big = arange(2000).str();
  EXPECT_NE(big.find("..."), std::string::npos);
  EXPECT_LT(big.size(), 100u);
  Tensor r = ones({2}).requires_grad_();
  EXPECT_EQ(r.str(), "tensor([1., 1.], requires_grad=True)");
  EXPECT_NE(mul(r, 2).str().find("grad_fn=<mul>"), std::string::npos);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(Tensor, InPlaceWithAliasedOperands) {
  Tensor a = arange(4).to(kF32).reshape({2, 2});
  a.add_(a.t());  // overlapping, different layout: computed through a buffer
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0, 3, 3, 6}));
  Tensor b = ones({3});
  b.add_(b);  // the very same elements: fine in place
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{2, 2, 2}));
  b.mul_(0.5).sub_(ones({1}), 2.0);  // broadcast other, scaled
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{-1, -1, -1}));
  Tensor c = ones({2, 3});
  EXPECT_THROW(c.narrow(1, 0, 1).add_(ones({2, 3})), Error);  // would change self's shape
  uint32_t v = c.version();
  c.div_(2.0);
  EXPECT_GT(c.version(), v);
}

}  // namespace
}  // namespace tessera
