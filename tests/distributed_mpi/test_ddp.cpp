// Data parallelism equals one process: each rank trains on its rows of every
// global batch under DistributedDataParallel, and also trains a reference
// model alone on the whole batch; after every step the two must agree (f64:
// 1e-10 relative) and the replicas must be bitwise equal across ranks.
#include <gtest/gtest.h>

#include <tuple>

#include "tessera/autograd/checkpoint.h"
#include "tessera/distributed/ddp.h"
#include "tessera/distributed/functional.h"
#include "tessera/distributed/sync_batch_norm.h"
#include "tessera/distributed/trainer_parallel.h"
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

// ---- gradient compression ------------------------------------------------------------------

// A loss whose gradient is the same every step: sum(w * c), c = 1.003, between
// two bf16 values (1 and 1.0078): rounding alone would send 1.0 every step.
struct Fixed : nn::Module {
  Tensor w;
  Fixed() : nn::Module("Fixed") { w = register_parameter("w", zeros({64, 48})); }
};

// bf16: one step is off by the rounding; with error feedback the rounding is
// carried to the next steps, so their mean approaches the true value. (The
// rounding of the average itself, when the ranks' values differ, is not fed
// back: at most half a bf16 step of the average.)
TEST(DdpCompression, Bf16WithErrorFeedback) {
  auto world = distributed::world();
  Fixed m;
  DdpOptions o;
  o.compression = "bf16";
  DistributedDataParallel ddp(m, world, o);
  const double want = 1.003;
  Tensor c = full({64, 48}, want);
  Tensor sum = zeros({64, 48});
  double first = 0;
  const int steps = 256;
  for (int s = 0; s < steps; ++s) {
    ops::sum(ops::mul(m.w, c)).backward();
    Tensor g = m.w.grad().clone();
    if (s == 0) first = ops::max(ops::abs(ops::sub(g, want))).item<double>();
    sum = ops::add(sum, g);
    m.w.set_grad(Tensor());
  }
  const double mean_err = ops::max(ops::abs(ops::sub(ops::div(sum, steps), want))).item<double>();
  std::printf("[DdpCompression] bf16: one step off by %.2e, the mean of %d by %.2e\n", first, steps, mean_err);
  EXPECT_GT(first, 2e-3);             // compressed: 1.003 is not a bf16 value
  EXPECT_LT(mean_err, first / 20);    // error feedback: nothing lost, only delayed
}

// A Linear layer's weight gradient over a global batch of B rows has rank at
// most B: PowerSGD of rank B is then exact, and training equals one process.
TEST(DdpCompression, PowerSgdIsExactOnLowRankGradients) {
  auto world = distributed::world();
  const int n = world->size(), r = world->rank();
  auto make = [] {
    manual_seed(3);
    auto l = std::make_shared<nn::Linear>(16, 12);
    l->to(DType::F64);
    return l;
  };
  auto ref = make(), dist = make();
  DdpOptions o;
  o.compression = "powersgd";
  o.powersgd_rank = n;  // one row per rank: the global gradient has rank <= n
  o.powersgd_start_step = 0;
  DistributedDataParallel ddp(*dist, world, o);
  optim::SGD ref_opt(ref->parameters(), {{"lr", 0.1}}), dist_opt(dist->parameters(), {{"lr", 0.1}});
  Generator g(5);
  for (int step = 0; step < 5; ++step) {
    Tensor x = ops::randn({n, 16}, DType::F64, &g), y = ops::randn({n, 12}, DType::F64, &g);
    ops::mse_loss((*ref)(x), y).backward();
    ops::mse_loss((*dist)(x.narrow(0, r, 1)), y.narrow(0, r, 1)).backward();
    ref_opt.step(), dist_opt.step();
    ref_opt.zero_grad(), dist_opt.zero_grad();
  }
  // Exact up to the 1e-8 that orthonormalization adds to each column's norm (as PyTorch's).
  const double dw = ops::max(ops::abs(ops::sub(dist->weight, ref->weight))).item<double>();
  std::printf("[DdpCompression] PowerSGD of rank %d on rank-%d gradients: weights within %.2g after 5 steps\n", n, n, dw);
  EXPECT_LT(dw, 1e-4);
  EXPECT_TRUE(testing::all_close(dist->bias, ref->bias, 1e-6, 1e-8));  // a vector: all-reduced as it is
}

// Rank 1 on a rank-4 problem: compressed (the weights differ from plain DDP's),
// yet with error feedback the regression still converges.
TEST(DdpCompression, PowerSgdRank1Converges) {
  auto world = distributed::world();
  const int n = world->size(), r = world->rank();
  manual_seed(4);
  Tensor true_w = ops::matmul(ops::randn({12, 4}, DType::F64), ops::randn({4, 16}, DType::F64));
  auto train = [&](const std::string& compression) {
    manual_seed(8);
    nn::Linear l(16, 12, false);
    l.to(DType::F64);
    DdpOptions o;
    o.compression = compression;
    o.powersgd_start_step = 2;
    DistributedDataParallel ddp(l, world, o);
    optim::SGD opt(l.parameters(), {{"lr", 0.05}, {"momentum", 0.9}});
    Generator g(6);
    double first = 0, last = 0;
    for (int step = 0; step < 150; ++step) {
      Tensor x = ops::randn({8 * n, 16}, DType::F64, &g);
      Tensor y = ops::matmul(x, true_w.t());
      Tensor loss = ops::mse_loss(l(x.narrow(0, 8 * r, 8)), y.narrow(0, 8 * r, 8));
      loss.backward();
      opt.step();
      opt.zero_grad();
      Tensor lv = loss.detach().clone();
      world->allreduce(lv, distributed::ReduceOp::kAvg)->wait();
      (step == 0 ? first : last) = lv.item<double>();
    }
    return std::tuple{first, last, l.weight.detach().clone()};
  };
  auto [f0, l0, w0] = train("none");
  auto [f1, l1, w1] = train("powersgd");
  std::printf("[DdpCompression] PowerSGD rank 1: loss %.3g -> %.3g (plain DDP: %.3g -> %.3g)\n", f1, l1, f0, l0);
  EXPECT_FALSE(testing::all_close(w0, w1, 1e-6, 1e-6));  // it was compressed
  EXPECT_LT(l1, 0.05 * f1);
}

// ---- what communication cost: collective_stats and the Trainer's tessera_dist_* metrics ----------

TEST(DistMetrics, CollectivesAreCountedAndPublished) {
  auto world = distributed::world();
  auto before = distributed::collective_stats();
  auto calls_of = [](const std::vector<distributed::CollectiveStats>& v, const std::string& op) {
    for (auto& s : v)
      if (s.op == op) return std::pair{s.calls, s.bytes};
    return std::pair{int64_t{0}, 0.0};
  };
  for (int i = 0; i < 3; ++i) world->allreduce(zeros({1000}))->wait();
  auto after = distributed::collective_stats();
  EXPECT_EQ(calls_of(after, "allreduce").first - calls_of(before, "allreduce").first, 3);
  EXPECT_EQ(calls_of(after, "allreduce").second - calls_of(before, "allreduce").second, 3 * 4000.0);

  train::ParallelSettings ps;
  auto run = distributed::trainer_parallel(ps, world);
  auto net = make_net(DType::F64);
  auto opt = make_opt("sgd", *net);
  run->attach(*net, *opt);
  ops::sum((*net)(ones({2, 5}, DType::F64))).backward();
  monitor::Registry reg;
  run->publish_metrics(reg);
  const std::string text = reg.render();
  EXPECT_NE(text.find("tessera_dist_collectives_total{op=\"allreduce\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("tessera_dist_bytes_total{op=\"broadcast\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("tessera_dist_comm_seconds_total"), std::string::npos) << text;
  EXPECT_NE(text.find("tessera_dist_backward_wait_seconds"), std::string::npos) << text;
  EXPECT_NE(text.find("tessera_dist_world_size " + std::to_string(world->size())), std::string::npos) << text;
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
