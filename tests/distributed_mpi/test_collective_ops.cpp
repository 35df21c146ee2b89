// The communication ops of the op table (Note [Collectives as ops]) across
// ranks: values and gradients along any dim, on sub-groups by name, through a
// captured graph and a compiled training step, and Megatron's column- then
// row-parallel MLP built from copy_to_group and reduce_from_group, equal to
// the dense MLP in f64.
#include <gtest/gtest.h>

#include "ops/op_utils.h"
#include "tessera/compile/capture.h"
#include "tessera/compile/compile.h"
#include "tessera/compile/executor.h"
#include "tessera/compile/passes.h"
#include "tessera/distributed/functional.h"
#include "tessera/nn/nn.h"
#include "tessera/ops/ops.h"
#include "test_util.h"

namespace tessera {
namespace {

// Values known on every rank for any rank q: rank q's tensor is draws(q, ...).
Tensor draws(int q, IntArrayRef shape) {
  Generator g(1000 + q);
  return ops::randn(shape, DType::F64, &g);
}

int count_ops(const compile::Graph& g, ops::OpId op) {
  int n = 0;
  for (const compile::Node* node : g.nodes()) n += node->op == op;
  return n;
}

TEST(CollectiveOps, GatherAndScatterAlongAnyDimWithTheirGradients) {
  auto w = distributed::world();
  const int r = w->rank(), s = w->size();
  const Shape part{2, 3, 4};
  for (int64_t dim : {0, 1, 2, -1}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const int64_t d = dim < 0 ? dim + 3 : dim, n = part[d];
    Shape whole = part;
    whole[d] *= s;
    // all_gather: block q along d is rank q's tensor; its gradient is the sum
    // over ranks of their coefficients' block r.
    Tensor x = draws(r, part).requires_grad_();
    Tensor y = ops::all_gather(x, w->name(), dim);
    ASSERT_EQ(y.shape(), whole);
    Tensor want_grad = zeros(part, DType::F64);
    for (int q = 0; q < s; ++q) {
      EXPECT_TRUE(testing::all_close(y.narrow(d, q * n, n), draws(q, part), 0, 0)) << "block " << q;
      want_grad = ops::add(want_grad, draws(100 + q, whole).narrow(d, r * n, n));
    }
    ops::sum(ops::mul(y, draws(100 + r, whole))).backward();
    EXPECT_TRUE(testing::all_close(x.grad(), want_grad, 1e-12, 1e-12));
    // reduce_scatter: the sum of every rank's block r; its gradient puts rank
    // q's coefficients in block q.
    Tensor X = draws(r, whole).requires_grad_();
    Tensor z = ops::reduce_scatter(X, w->name(), dim);
    Tensor want = zeros(part, DType::F64);
    for (int q = 0; q < s; ++q) want = ops::add(want, draws(q, whole).narrow(d, r * n, n));
    EXPECT_TRUE(testing::all_close(z, want, 1e-12, 1e-12));
    ops::sum(ops::mul(z, draws(100 + r, part))).backward();
    for (int q = 0; q < s; ++q)
      EXPECT_TRUE(testing::all_close(X.grad().narrow(d, q * n, n), draws(100 + q, part), 0, 0)) << "block " << q;
  }
}

TEST(CollectiveOps, ReduceFromGroupPassesTheGradientThrough) {
  auto w = distributed::world();
  const int r = w->rank(), s = w->size();
  Tensor x = draws(r, {5}).requires_grad_();
  Tensor y = ops::reduce_from_group(x, w->name());
  Tensor want = zeros({5}, DType::F64);
  for (int q = 0; q < s; ++q) want = ops::add(want, draws(q, {5}));
  EXPECT_TRUE(testing::all_close(y, want, 1e-12, 1e-12));
  // One loss computed alike on every rank: each rank's gradient is dy itself.
  Tensor c = draws(50, {5});
  ops::sum(ops::mul(ops::sin(y), c)).backward();
  EXPECT_TRUE(testing::all_close(x.grad(), ops::mul(ops::cos(want), c), 1e-12, 1e-12));
}

// Megatron's gather_from and scatter_to: a split result every rank then uses
// whole, and a replicated input each rank takes a block of. One loss,
// computed alike on every rank, so the gradients are blocks and joins of dy.
TEST(CollectiveOps, GatherFromAndScatterToAreEachOthersGradient) {
  auto w = distributed::world();
  const int r = w->rank(), s = w->size();
  const Shape part{2, 3, 4};
  for (int64_t dim : {0, 1, -1}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const int64_t d = dim < 0 ? dim + 3 : dim, n = part[d];
    Shape whole = part;
    whole[d] *= s;
    Tensor c = draws(60, whole);  // the same coefficients on every rank
    Tensor x = draws(r, part).requires_grad_();
    Tensor y = ops::gather_from_group(x, w->name(), dim);
    for (int q = 0; q < s; ++q) EXPECT_TRUE(testing::all_close(y.narrow(d, q * n, n), draws(q, part), 0, 0));
    ops::sum(ops::mul(y, c)).backward();
    EXPECT_TRUE(testing::all_close(x.grad(), c.narrow(d, r * n, n), 0, 0));

    // scatter_to_group then gather_from_group is the identity, gradient included.
    Tensor X = draws(70, whole).requires_grad_();
    Tensor z = ops::scatter_to_group(X, w->name(), dim);
    EXPECT_TRUE(testing::all_close(z, X.narrow(d, r * n, n), 0, 0));
    Tensor back = ops::gather_from_group(ops::mul(z, z), w->name(), dim);
    EXPECT_TRUE(testing::all_close(back, ops::mul(X, X), 0, 0));
    ops::sum(ops::mul(back, c)).backward();
    EXPECT_TRUE(testing::all_close(X.grad(), ops::mul(ops::mul(X, c), 2.0), 1e-12, 1e-12));
  }
  Tensor odd = draws(0, {2 * s + 1, 2});
  if (s > 1) EXPECT_THROW(ops::scatter_to_group(odd, w->name(), 0), Error);
}

TEST(CollectiveOps, SubGroupsAreFoundByName) {
  auto w = distributed::world();
  const int r = w->rank();
  // Pairs of neighbouring ranks (a group of one where the world is odd-sized).
  auto pair = w->split(r / 2, r);
  ASSERT_TRUE(pair);
  EXPECT_EQ(ops::find_communicator(pair->name(), "test").get(), pair.get());
  Tensor y = ops::all_reduce(full({3}, Scalar(1.0 + r), DType::F64), pair->name());
  double want = 0;
  for (int q = (r / 2) * 2; q < std::min((r / 2) * 2 + 2, w->size()); ++q) want += 1.0 + q;
  EXPECT_TRUE(testing::all_close(y, full({3}, Scalar(want), DType::F64), 0, 0));
  const std::string err = testing::error_of([&] { ops::all_reduce(ones({1}), "world/no-such-group"); });
  EXPECT_NE(err.find("all_reduce: no process group named 'world/no-such-group'"), std::string::npos) << err;
  EXPECT_NE(err.find(pair->name()), std::string::npos) << err;
}

// A graph holding collectives runs them on every rank, in order; the
// compiler keeps one whose result is unused (the other ranks wait for it).
TEST(CollectiveOps, CapturedGraphsRunTheirCollectives) {
  auto w = distributed::world();
  const int r = w->rank();
  const std::string group = w->name();
  auto fn = [&](const TensorList& in) {
    ops::all_reduce(in[0], group);  // unused result: still a collective every rank joins
    Tensor g = ops::all_gather(ops::mul(in[0], 2.0), group, 1);
    return TensorList{ops::reduce_scatter(g, group, 1)};
  };
  compile::Graph g = compile::capture(fn, {draws(r, {2, 3})});
  compile::optimize(g);
  EXPECT_EQ(count_ops(g, ops::OpId::all_reduce), 1) << compile::dump(g);
  EXPECT_EQ(count_ops(g, ops::OpId::all_gather), 1) << compile::dump(g);
  compile::Executable exe(std::move(g));
  Tensor fresh = draws(10 + r, {2, 3});
  EXPECT_TRUE(testing::all_close(exe.run({fresh})[0], fn({fresh})[0], 0, 0));
}

// Megatron's MLP behind a replicated layer: the MLP's first layer's rows
// (output features) and its second's columns are split across the group;
// copy_to_group before it and reduce_from_group after it make the result and
// every gradient those of the dense model (the replicated layer's through the
// all_reduce in copy_to_group's backward).
struct TpMlp : nn::Module {
  Tensor w0, w1, b1, w2, b2;
  std::string group;
  TpMlp(const Tensor& W0, const Tensor& W1, const Tensor& B1, const Tensor& W2, const Tensor& B2, int rank, int size,
        std::string g)
      : nn::Module("TpMlp"), group(std::move(g)) {
    const int64_t h = W1.size(0) / size;
    w0 = register_parameter("w0", W0.clone());
    w1 = register_parameter("w1", W1.narrow(0, rank * h, h).clone());
    b1 = register_parameter("b1", B1.narrow(0, rank * h, h).clone());
    w2 = register_parameter("w2", W2.narrow(1, rank * h, h).clone());
    b2 = register_parameter("b2", B2.clone());
  }
  Tensor forward(const Tensor& x) override {
    Tensor h0 = ops::tanh(ops::linear(x, w0));
    Tensor a = ops::gelu(ops::linear(ops::copy_to_group(h0, group), w1, b1));
    return ops::add(ops::reduce_from_group(ops::linear(a, w2), group), b2);
  }
};

TEST(CollectiveOps, TensorParallelMlpEqualsTheDenseOneEagerAndCompiled) {
  auto w = distributed::world();
  const int r = w->rank(), s = w->size();
  const int64_t D = 4, H = 3 * s, h = 3;
  Tensor W0 = draws(199, {D, D}), W1 = draws(200, {H, D}), B1 = draws(201, {H}), W2 = draws(202, {D, H}), B2 = draws(203, {D});
  Tensor X = draws(204, {5, D}), C = draws(205, {5, D});
  auto loss_of = [&](const Tensor& y) { return ops::sum(ops::mul(ops::tanh(y), C)); };

  // Dense, on every rank.
  Tensor w0 = W0.clone().requires_grad_(), w1 = W1.clone().requires_grad_(), b1 = B1.clone().requires_grad_(),
         w2 = W2.clone().requires_grad_(), b2 = B2.clone().requires_grad_(), x = X.clone().requires_grad_();
  Tensor h0 = ops::tanh(ops::linear(x, w0));
  Tensor y_dense = ops::add(ops::linear(ops::gelu(ops::linear(h0, w1, b1)), w2), b2);
  loss_of(y_dense).backward();

  // Split, eager.
  auto tp = std::make_shared<TpMlp>(W0, W1, B1, W2, B2, r, s, w->name());
  Tensor xt = X.clone().requires_grad_();
  Tensor y_tp = (*tp)(xt);
  EXPECT_TRUE(testing::all_close(y_tp, y_dense, 1e-12, 1e-12));
  loss_of(y_tp).backward();
  EXPECT_TRUE(testing::all_close(xt.grad(), x.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(testing::all_close(tp->w0.grad(), w0.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(testing::all_close(tp->w1.grad(), w1.grad().narrow(0, r * h, h), 1e-12, 1e-12));
  EXPECT_TRUE(testing::all_close(tp->b1.grad(), b1.grad().narrow(0, r * h, h), 1e-12, 1e-12));
  EXPECT_TRUE(testing::all_close(tp->w2.grad(), w2.grad().narrow(1, r * h, h), 1e-12, 1e-12));
  EXPECT_TRUE(testing::all_close(tp->b2.grad(), b2.grad(), 1e-12, 1e-12));

  // Split, as one compiled training step: the collectives of the forward and
  // the backward's all_reduce (copy_to_group's gradient) are nodes of the
  // joint graph.
  auto tp2 = std::make_shared<TpMlp>(W0, W1, B1, W2, B2, r, s, w->name());
  auto step = compile::compile_train_step(tp2, [&](const TensorList& b) { return loss_of((*tp2)(b[0])); });
  Tensor loss = step({X});
  EXPECT_TRUE(testing::all_close(loss, loss_of(y_dense), 1e-12, 1e-12));
  const compile::Graph& g = step.last()->graph();
  EXPECT_EQ(count_ops(g, ops::OpId::reduce_from_group), 1) << compile::dump(g);
  EXPECT_EQ(count_ops(g, ops::OpId::copy_to_group), 1) << compile::dump(g);
  EXPECT_EQ(count_ops(g, ops::OpId::all_reduce), 1) << compile::dump(g);
  const auto got = tp2->named_parameters(), want = tp->named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k)
    EXPECT_TRUE(testing::all_close(got[k].second.grad(), want[k].second.grad(), 1e-12, 1e-12)) << got[k].first;
}

}  // namespace
}  // namespace tessera
