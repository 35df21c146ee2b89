// Data parallelism equals one process: each rank trains on its rows of every
// global batch under DistributedDataParallel, and also trains a reference
// model alone on the whole batch; after every step the two must agree (f64:
// 1e-10 relative) and the replicas must be bitwise equal across ranks.
#include <gtest/gtest.h>

#include "tessera/autograd/checkpoint.h"
#include "tessera/distributed/ddp.h"
#include "tessera/distributed/functional.h"
#include "tessera/distributed/sync_batch_norm.h"
#include "tessera/nn/nn.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/optimizer.h"
#include "test_util.h"
#include "nets.h"

namespace tessera {
namespace {

using distributed::DdpOptions;
using distributed::DistributedDataParallel;
using testing::make_net;
using testing::make_opt;

struct Case {
  std::string optimizer = "adamw";
  DType dtype = DType::F64;
  int accum = 1;       // micro-batches per step (no_sync for all but the last)
  double clip = 0;     // clip_grad_norm
  bool checkpointed = false;
  bool sometimes_unused = false;  // "sometimes" unused on odd steps (find_unused_parameters)
  int steps = 5;
  int64_t batch = 12;  // global, per micro-batch
};

// Parameters of the DDP model vs the single-process model, max relative difference.
double train_and_compare(const Case& k) {
  auto world = distributed::world();
  const int n = world->size(), r = world->rank();
  auto ref = make_net(k.dtype), dist = make_net(k.dtype);
  ref->checkpointed = dist->checkpointed = k.checkpointed;
  DdpOptions o;
  o.find_unused_parameters = k.sometimes_unused;
  o.first_bucket_mb = 1e-4;  // several buckets even for this small model
  o.bucket_cap_mb = 2e-4;
  DistributedDataParallel ddp(*dist, world, o);
  auto ref_opt = make_opt(k.optimizer, *ref), dist_opt = make_opt(k.optimizer, *dist);
  Generator g(11);
  const int64_t per = k.batch / n;
  double worst = 0;
  for (int step = 0; step < k.steps; ++step) {
    ddp.set_step(step);
    const bool use = !(k.sometimes_unused && step % 2 == 1);
    ref->use_sometimes = dist->use_sometimes = use;
    for (int m = 0; m < k.accum; ++m) {
      Tensor x = ops::randn({k.batch, 5}, k.dtype, &g), y = ops::randn({k.batch, 2}, k.dtype, &g);
      ops::div(ops::mse_loss((*ref)(x), y), static_cast<double>(k.accum)).backward();
      Tensor xs = x.narrow(0, r * per, per), ys = y.narrow(0, r * per, per);
      if (m + 1 < k.accum) {
        auto guard = ddp.no_sync();
        ops::div(ops::mse_loss((*dist)(xs), ys), static_cast<double>(k.accum)).backward();
      } else {
        ops::div(ops::mse_loss((*dist)(xs), ys), static_cast<double>(k.accum)).backward();
      }
    }
    if (k.clip > 0) {
      optim::clip_grad_norm_(ref->parameters(), k.clip);
      optim::clip_grad_norm_(dist->parameters(), k.clip);
    }
    ref_opt->step();
    dist_opt->step();
    ref_opt->zero_grad();
    dist_opt->zero_grad(step % 2 == 0);  // both zero_grad modes
    auto rp = ref->named_parameters(), dp = dist->named_parameters();
    for (size_t i = 0; i < rp.size(); ++i) {
      const double d = ops::max(ops::abs(ops::sub(rp[i].second, dp[i].second))).to(DType::F64).item<double>();
      const double s = ops::max(ops::abs(rp[i].second)).to(DType::F64).item<double>() + 1e-30;
      worst = std::max(worst, d / s);
    }
  }
  // Replicas bitwise equal: every rank's parameters against rank 0's.
  for (auto& [name, p] : dist->named_parameters()) {
    Tensor mine = p.detach().contiguous().reshape({-1});
    Tensor zero = mine.clone();
    world->broadcast(zero, 0)->wait();
    EXPECT_TRUE(ops::all(ops::eq(mine, zero)).item<bool>()) << name << " differs from rank 0's";
  }
  return worst;
}

TEST(Ddp, EqualsOneProcessF64AdamW) { EXPECT_LT(train_and_compare({}), 1e-10); }

TEST(Ddp, EqualsOneProcessF64Sgd) {
  Case k;
  k.optimizer = "sgd";
  EXPECT_LT(train_and_compare(k), 1e-10);
}

TEST(Ddp, EqualsOneProcessF32) {
  Case k;
  k.dtype = DType::F32;
  EXPECT_LT(train_and_compare(k), 1e-5);
}

TEST(Ddp, GradientAccumulationWithNoSync) {
  Case k;
  k.accum = 3;
  EXPECT_LT(train_and_compare(k), 1e-10);
}

TEST(Ddp, ClippingAndCheckpointing) {
  Case k;
  k.clip = 0.05;
  k.checkpointed = true;
  EXPECT_LT(train_and_compare(k), 1e-10);
}

TEST(Ddp, UnusedParameterWithFindUnused) {
  Case k;
  k.sometimes_unused = true;
  EXPECT_LT(train_and_compare(k), 1e-10);
}

TEST(Ddp, UnusedParameterWithoutFindUnusedIsNamed) {
  auto world = distributed::world();
  auto net = make_net(DType::F64);
  DistributedDataParallel ddp(*net, world);
  net->use_sometimes = false;
  ddp.set_step(3);
  std::string err = testing::error_of([&] { ops::sum((*net)(ones({2, 5}, DType::F64))).backward(); });
  EXPECT_NE(err.find("parameter 'sometimes' got no gradient in the backward of step 3 on rank " +
                     std::to_string(world->rank())),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("find_unused_parameters"), std::string::npos) << err;
}

TEST(Ddp, BucketsFollowTheObservedOrder) {
  auto world = distributed::world();
  auto net = make_net(DType::F64);
  std::vector<std::string> observed;  // the order backward produced the gradients in
  for (auto& [name, p] : net->named_parameters())
    if (p.requires_grad()) p.register_post_accumulate_grad_hook([&observed, n = name](const Tensor&) { observed.push_back(n); });
  DdpOptions o;
  o.first_bucket_mb = 1e-4;  // 100 bytes: 12 doubles
  o.bucket_cap_mb = 1e-3;
  DistributedDataParallel ddp(*net, world, o);
  auto flat = [](const std::vector<std::vector<std::string>>& b) {
    std::vector<std::string> out;
    for (auto& v : b) out.insert(out.end(), v.begin(), v.end());
    return out;
  };
  std::vector<std::string> registered;
  for (auto& [name, p] : net->named_parameters())
    if (p.requires_grad()) registered.insert(registered.begin(), name);
  EXPECT_EQ(flat(ddp.buckets()), registered);  // reverse registration order at first
  ASSERT_GE(ddp.buckets().size(), 2u);
  EXPECT_LE(ddp.buckets()[0].size(), 2u);  // the small first bucket
  ops::sum((*net)(ones({2, 5}, DType::F64))).backward();
  EXPECT_EQ(flat(ddp.buckets()), observed);
  EXPECT_NE(observed, registered);  // this model's order differs ("sometimes" is registered first, used late)
  // The gradients are views of the new buckets and hold the averages.
  Tensor g = net->c->weight.grad().clone();
  world->broadcast(g, 0)->wait();
  EXPECT_TRUE(ops::all(ops::eq(g, net->c->weight.grad())).item<bool>());
}

TEST(Ddp, DifferentModelsAreNamed) {
  auto world = distributed::world();
  manual_seed(1);
  nn::Linear m(world->rank() == 1 ? 4 : 3, 2);
  std::string err = testing::error_of([&] { DistributedDataParallel ddp(m, world); });
  EXPECT_NE(err.find("differs between rank"), std::string::npos) << err;
  EXPECT_NE(err.find("weight f32[2, "), std::string::npos) << err;
}

TEST(Ddp, Rank0WeightsAreBroadcast) {
  auto world = distributed::world();
  manual_seed(100 + world->rank());  // different weights per rank
  nn::Linear m(3, 2);
  DistributedDataParallel ddp(m, world);
  Tensor w = m.weight.detach().clone();
  world->broadcast(w, 0)->wait();
  EXPECT_TRUE(ops::all(ops::eq(w, m.weight)).item<bool>());
}

// ---- differentiable collectives and SyncBatchNorm -------------------------------------------

// Rank r's coefficients c_r: the gradient of sum over ranks of sum(y * c_r) is known in closed form.
Tensor coeffs(int r, int64_t n) { return ops::add(ops::mul(arange(n, DType::F64), 0.25), static_cast<double>(r + 1)); }

Tensor sum_over_ranks(int size, int64_t n, int64_t first = 0) {
  Tensor s = zeros({n}, DType::F64);
  for (int q = 0; q < size; ++q) s = ops::add(s, coeffs(q, first + n).narrow(0, first, n));
  return s;
}

TEST(DistFunctional, GradientsAreThoseOfTheSumOfEveryRanksLoss) {
  auto w = distributed::world();
  const int r = w->rank(), s = w->size();
  const int64_t n = 5;
  auto grad_of = [&](const std::function<Tensor(const Tensor&)>& f, Tensor x, int64_t out_n) {
    x.requires_grad_();
    ops::sum(ops::mul(f(x), coeffs(r, out_n))).backward();
    return x.grad();
  };
  // all_reduce: d/dx_r sum_q <S, c_q> = sum_q c_q; nonlinear: cos(S) * sum_q c_q.
  Tensor x = ops::add(arange(n, DType::F64), 0.1 * r);
  Tensor g = grad_of([&](const Tensor& t) { return distributed::all_reduce(t, w); }, x.clone(), n);
  EXPECT_TRUE(testing::all_close(g, sum_over_ranks(s, n), 1e-12, 1e-12));
  Tensor S = x.clone();
  w->allreduce(S)->wait();
  g = grad_of([&](const Tensor& t) { return ops::sin(distributed::all_reduce(t, w)); }, x.clone(), n);
  EXPECT_TRUE(testing::all_close(g, ops::mul(ops::cos(S), sum_over_ranks(s, n)), 1e-12, 1e-12));
  // all_gather: rank r's block of every rank's coefficients.
  g = grad_of([&](const Tensor& t) { return distributed::all_gather(t, w); }, x.clone(), s * n);
  EXPECT_TRUE(testing::all_close(g, sum_over_ranks(s, n, r * n), 1e-12, 1e-12));
  // reduce_scatter: block q of the input meets rank q's coefficients.
  Tensor X = ops::mul(arange(s * n, DType::F64), 1.0 + r);
  g = grad_of([&](const Tensor& t) { return distributed::reduce_scatter(t, w); }, X.clone(), n);
  for (int q = 0; q < s; ++q) EXPECT_TRUE(testing::all_close(g.narrow(0, q * n, n), coeffs(q, n), 1e-12, 1e-12)) << q;
  // copy_to_group: a replicated x used by every rank.
  g = grad_of([&](const Tensor& t) { return distributed::copy_to_group(t, w); }, arange(n, DType::F64), n);
  EXPECT_TRUE(testing::all_close(g, sum_over_ranks(s, n), 1e-12, 1e-12));
}

// A conv net with batch norm: data parallel with SyncBatchNorm equals one process.
struct BnNet : nn::Module {
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Linear> head;
  BnNet() : nn::Module("BnNet") {
    conv = register_module("conv", std::make_shared<nn::Conv2d>(2, 3, 3));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(3));
    head = register_module("head", std::make_shared<nn::Linear>(3 * 4 * 4, 2));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = ops::relu((*bn)((*conv)(x)));
    return (*head)(h.reshape({h.size(0), -1}));
  }
};

TEST(DistFunctional, SyncBatchNormEqualsOneProcess) {
  auto world = distributed::world();
  const int n = world->size(), r = world->rank();
  auto make = [] {
    manual_seed(5);
    auto m = std::make_shared<BnNet>();
    m->to(DType::F64);
    return m;
  };
  auto ref = make(), dist = make();
  EXPECT_EQ(distributed::convert_sync_batch_norm(*dist, world), 1);
  EXPECT_NE(dist->bn->extra_repr().find("synchronized across replicas"), std::string::npos);
  DistributedDataParallel ddp(*dist, world);
  auto ref_opt = make_opt("sgd", *ref), dist_opt = make_opt("sgd", *dist);
  Generator gen(2);
  const int64_t batch = 8, per = batch / n;
  for (int step = 0; step < 5; ++step) {
    Tensor x = ops::add(ops::mul(ops::randn({batch, 2, 6, 6}, DType::F64, &gen), 2.0), 3.0);  // a mean far from 0
    Tensor y = ops::randn({batch, 2}, DType::F64, &gen);
    ops::mse_loss((*ref)(x), y).backward();
    ops::mse_loss((*dist)(x.narrow(0, r * per, per)), y.narrow(0, r * per, per)).backward();
    ref_opt->step(), dist_opt->step();
    ref_opt->zero_grad(), dist_opt->zero_grad();
  }
  auto rp = ref->named_parameters(), dp = dist->named_parameters();
  for (size_t i = 0; i < rp.size(); ++i)
    EXPECT_TRUE(testing::all_close(rp[i].second, dp[i].second, 1e-10, 1e-12)) << rp[i].first;
  auto rb = ref->named_buffers(), db = dist->named_buffers();
  for (size_t i = 0; i < rb.size(); ++i)
    if (is_floating(rb[i].second.dtype()))
      EXPECT_TRUE(testing::all_close(rb[i].second, db[i].second, 1e-10, 1e-12)) << rb[i].first;
  // Evaluation uses the running statistics, as BatchNorm does.
  ref->eval(), dist->eval();
  Tensor x = ops::randn({3, 2, 6, 6}, DType::F64, &gen);
  NoGradGuard no_grad;
  EXPECT_TRUE(testing::all_close((*ref)(x), (*dist)(x), 1e-10, 1e-12));
}

}  // namespace
}  // namespace tessera
