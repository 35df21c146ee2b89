// Bad input gets a tessera::Error whose message names the op, the argument and
// the values, and says what would be legal. These tests pin representative texts.
#include "test_util.h"

namespace tessera {
namespace {

using namespace ops;

// Expects `f` to throw tessera::Error containing every fragment.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no error was raised";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << "'" << frag << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "a non-Tessera exception: " << e.what();
  }
}

TEST(Errors, ShapesAndDims) {
  expect_error([] { matmul(ones({2, 3}), ones({4, 5})); },
               {"matmul: cannot multiply [2, 3] by [4, 5]: inner dimensions 3 and 4 differ"});
  expect_error([] { add(ones({3}), ones({4})); }, {"add:", "[3]", "[4]", "cannot be broadcast"});
  expect_error([] { sum(ones({2, 2}), {2}); }, {"sum: dim 2 is out of range", "2 dimensions", "[-2, 1]"});
  expect_error([] { sum(ones({2, 2}), {0, -2}); }, {"sum: dim 0 appears more than once"});
  expect_error([] { ones({6}).view({4, -1}); }, {"view: shape [4, -1] is invalid for input of size 6"});
  expect_error([] { ones({2, 3}).reshape({-1, -1}); }, {"only one dimension can be -1"});
  expect_error([] { ones({2, 3}).permute({0}); }, {"permute:", "2 dimensions"});
  expect_error([] { ones({3}).select(0, 3); }, {"select: index 3 is out of range for dimension 0 of size 3"});
  expect_error([] { ones({2}).expand({3}); }, {"expand:", "must match the target size 3"});
  expect_error([] { cat({ones({2, 3}), ones({2, 4})}, 0); }, {"cat: sizes of tensors must match except in dimension 0"});
  expect_error([] { empty({-1}); }, {"empty: negative dimension -1"});
}

TEST(Errors, DtypesAndValues) {
  expect_error([] { mean(arange(4)); }, {"mean: expected a floating-point input, got i64"});
  expect_error([] { floor_divide(arange(4), zeros({4}, kI64)); }, {"floor_divide: integer division by zero"});
  expect_error([] { remainder(arange(4), 0); }, {"remainder: integer division by zero"});
  expect_error([] { pow(arange(3), -1); }, {"pow: integers to negative integer powers are not allowed"});
  expect_error([] { sub(ones({2}, kBool), ones({2}, kBool)); }, {"sub:", "bool", "logical_xor"});
  expect_error([] { ones({2}, kI32).requires_grad_(); }, {"requires_grad_: only floating-point tensors"});
  expect_error([] { matmul(ones({2, 2}), ones({2, 2}, kF64)); }, {"matmul: expected both operands to have the same dtype, got f32 and f64"});
  expect_error([] { where(ones({2}), ones({2}), ones({2})); }, {"where: the condition must be a bool tensor, got f32"});
  expect_error([] { ones({2}).data_ptr<double>(); }, {"data_ptr<f64>", "f32"});
  expect_error([] { gelu(ones({2}), "fast"); }, {"gelu: approximate must be 'none' or 'tanh'"});
  expect_error([] { mse_loss(ones({2}), ones({2}), "avg"); }, {"mse_loss: reduction must be 'mean', 'sum' or 'none', got 'avg'"});
}

TEST(Errors, IndicesAreBoundsChecked) {
  expect_error([] { gather(ones({2, 3}), 1, tensor(std::vector<int64_t>{0, 3}, {2, 1})); },
               {"gather: index 3 is out of bounds for dimension 1 with size 3"});
  expect_error([] { index_select(ones({4}), 0, tensor(std::vector<int64_t>{-5})); }, {"index_select: index -5 is out of bounds"});
  expect_error([] { scatter_add(ones({2}), 0, tensor(std::vector<int64_t>{2}), ones({1})); }, {"scatter_add: index 2"});
  expect_error([] { embedding(ones({5, 2}), tensor(std::vector<int64_t>{1, 5})); }, {"embedding: index 5 is out of range for 5 embeddings"});
  expect_error([] { cross_entropy(ones({2, 3}), tensor(std::vector<int64_t>{0, 3})); },
               {"nll_loss: target value 3 is out of range for 3 classes"});
  expect_error([] { gather(ones({2}), 0, ones({1})); }, {"gather: index must be an integer tensor"});
  expect_error([] { one_hot(tensor(std::vector<int64_t>{-1})); }, {"one_hot: class values must be non-negative"});
}

TEST(Errors, LayersSayWhatWouldBeLegal) {
  expect_error([] { conv2d(ones({1, 3, 8, 8}), ones({4, 2, 3, 3})); },
               {"conv2d: the weight of shape [4, 2, 3, 3] expects 2 input channels", "has 3"});
  expect_error([] { conv2d(ones({1, 1, 2, 2}), ones({1, 1, 3, 3})); }, {"conv2d:", "too small for the kernel 3x3"});
  expect_error([] { layer_norm(ones({2, 3}), {4}); }, {"layer_norm: normalized_shape [4] does not match"});
  expect_error([] { linear(ones({2, 3}), ones({4, 5})); }, {"linear: input's last dimension 3 does not match the weight's in_features 5"});
  expect_error([] { max_pool2d(ones({1, 1, 4, 4}), {2}, {}, {2}); }, {"max_pool2d: padding 2 should be at most half of the kernel size 2"});
  expect_error([] { scaled_dot_product_attention(ones({2, 4}), ones({3, 5}), ones({3, 4})); },
               {"scaled_dot_product_attention: key's last dimension 5 must equal query's 4"});
  expect_error([] { group_norm(ones({1, 6, 2}), 4); }, {"group_norm: the number of channels 6 must be divisible by num_groups 4"});
  expect_error([] { dropout(ones({2}), 1.5); }, {"dropout: p must be in [0, 1], got 1.5"});
}

}  // namespace
}  // namespace tessera
