// ZeRO equals one process: each rank trains on its rows of every global batch
// with its shard of the optimizer state (stage 1), of the gradients (stage 2)
// and of the parameters (stage 3), and also trains a reference model alone on
// the whole batch; after every step the two must agree (f64: 1e-10 relative,
// f32: 1e-5) and the replicas must be bitwise equal across ranks. The
// optimizer state gathered from the shards must equal the reference
// optimizer's, and load at another stage.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "nets.h"
#include "tessera/core/allocator.h"
#include "tessera/distributed/zero.h"
#include "tessera/nn/zoo/zoo.h"
#include "test_util.h"

namespace tessera {
namespace {

using distributed::ZeroOptions;
using distributed::ZeroRedundancy;
using testing::make_net;
using testing::make_opt;

struct Case {
  int stage = 1;
  std::string optimizer = "adamw";
  optim::Options options = {};
  DType dtype = DType::F64;
  int accum = 1;       // micro-batches per step
  double clip = 0;     // clip_grad_norm
  bool checkpointed = false;
  bool sometimes_unused = false;  // "sometimes" unused on odd steps (find_unused_parameters)
  bool delays = false;            // one rank late before the last reduce-scatter and the optimizer step
  bool deep = false;              // DeepNet (units for stage 3) instead of Net
  int steps = 5;
  int64_t batch = 12;
};

double relative_difference(nn::Module& ref, nn::Module& dist) {
  double worst = 0;
  auto rp = ref.named_parameters(), dp = dist.named_parameters();
  for (size_t i = 0; i < rp.size(); ++i) {
    const double d = ops::max(ops::abs(ops::sub(rp[i].second, dp[i].second))).to(DType::F64).item<double>();
    const double s = ops::max(ops::abs(rp[i].second)).to(DType::F64).item<double>() + 1e-30;
    worst = std::max(worst, d / s);
  }
  return worst;
}

void expect_replicas_equal(nn::Module& m, distributed::ProcessGroup& world) {
  for (auto& [name, p] : m.named_parameters()) {
    Tensor mine = p.detach().contiguous().reshape({-1});
    Tensor zero = mine.clone();
    world.broadcast(zero, 0)->wait();
    EXPECT_TRUE(ops::all(ops::eq(mine, zero)).item<bool>()) << name << " differs from rank 0's";
  }
}

struct ZeroRun {
  std::shared_ptr<nn::Module> ref, dist;
  optim::OptimizerPtr ref_opt, dist_opt;
  std::unique_ptr<ZeroRedundancy> zero;
  void use_sometimes(bool on) {  // Net's optional parameter
    if (auto* n = dynamic_cast<testing::Net*>(ref.get())) n->use_sometimes = on;
    if (auto* n = dynamic_cast<testing::Net*>(dist.get())) n->use_sometimes = on;
  }
  nn::Linear& first_layer(nn::Module& m) {
    if (auto* n = dynamic_cast<testing::Net*>(&m)) return *n->a;
    return *dynamic_cast<testing::DeepNet&>(m).inp;
  }
  // Compares under whole parameters (stage 3 keeps only shards between steps).
  template <typename F>
  void whole(F&& f) {
    zero->set_whole_parameters(true);
    f();
    zero->set_whole_parameters(false);
  }
};

ZeroRun make_run(const Case& k) {
  auto world = distributed::world();
  ZeroRun run;
  if (k.deep) {
    auto r = testing::make_deep_net(k.dtype), d = testing::make_deep_net(k.dtype);
    r->checkpointed = d->checkpointed = k.checkpointed;
    run.ref = r, run.dist = d;
  } else {
    auto r = make_net(k.dtype), d = make_net(k.dtype);
    r->checkpointed = d->checkpointed = k.checkpointed;
    run.ref = r, run.dist = d;
  }
  run.ref_opt = make_opt(k.optimizer, *run.ref, k.options);
  run.dist_opt = make_opt(k.optimizer, *run.dist, k.options);
  ZeroOptions o;
  o.stage = k.stage;
  o.find_unused_parameters = k.sometimes_unused;
  o.first_bucket_mb = 1e-4;  // several segments even for this small model
  o.bucket_cap_mb = 2e-4;
  run.zero = std::make_unique<ZeroRedundancy>(*run.dist, *run.dist_opt, world, o);
  return run;
}

// Trains both for k.steps; returns the largest relative difference seen.
double train(ZeroRun& run, const Case& k, int first_step = 0) {
  auto world = distributed::world();
  const int n = world->size(), r = world->rank();
  // A late rank: rank 1 sleeps when backward reaches the first layer (its last segment's
  // reduce-scatter starts late), and before the optimizer step and the all-gather.
  size_t hook = 0;
  if (k.delays && r == 1)
    hook = run.first_layer(*run.dist).weight.register_post_accumulate_grad_hook(
        [](const Tensor&) { std::this_thread::sleep_for(std::chrono::milliseconds(15)); });
  Generator g(11 + first_step);
  const int64_t per = k.batch / n;
  double worst = 0;
  for (int step = first_step; step < first_step + k.steps; ++step) {
    run.zero->set_step(step);
    const bool use = !(k.sometimes_unused && step % 2 == 1);
    run.use_sometimes(use);
    for (int m = 0; m < k.accum; ++m) {
      Tensor x = ops::randn({k.batch, 5}, k.dtype, &g), y = ops::randn({k.batch, 2}, k.dtype, &g);
      ops::div(ops::mse_loss((*run.ref)(x), y), static_cast<double>(k.accum)).backward();
      run.zero->require_sync(m + 1 == k.accum);
      Tensor xs = x.narrow(0, r * per, per), ys = y.narrow(0, r * per, per);
      ops::div(ops::mse_loss((*run.dist)(xs), ys), static_cast<double>(k.accum)).backward();
    }
    if (k.clip > 0) {
      optim::clip_grad_norm_(run.ref->parameters(), k.clip);
      TensorList shards;
      for (auto& grp : run.dist_opt->param_groups()) shards.insert(shards.end(), grp.params.begin(), grp.params.end());
      optim::clip_grad_norm_(shards, k.clip, 2.0, false, [&](double partial) {
        Tensor t = full({1}, partial, DType::F64);
        world->allreduce(t)->wait();
        return t.item<double>();
      });
    }
    run.ref_opt->step();
    run.ref_opt->zero_grad();
    if (k.delays && world->rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    run.zero->step();
    run.whole([&] { worst = std::max(worst, relative_difference(*run.ref, *run.dist)); });
  }
  if (hook) run.first_layer(*run.dist).weight.remove_post_accumulate_grad_hook(hook);
  run.whole([&] { expect_replicas_equal(*run.dist, *world); });
  return worst;
}

double train_and_compare(const Case& k) {
  ZeroRun run = make_run(k);
  return train(run, k);
}

Case stage(int s) {
  Case k;
  k.stage = s;
  return k;
}

TEST(Zero, Stage1EqualsOneProcessF64AdamW) { EXPECT_LT(train_and_compare(stage(1)), 1e-10); }
TEST(Zero, Stage2EqualsOneProcessF64AdamW) { EXPECT_LT(train_and_compare(stage(2)), 1e-10); }
TEST(Zero, Stage3EqualsOneProcessF64AdamW) { EXPECT_LT(train_and_compare(stage(3)), 1e-10); }

// Units: blocks of a ModuleList, gathered one at a time, a checkpointed one,
// and a tied weight used outside any block (the root's).
TEST(Zero, Stage3UnitsEqualOneProcess) {
  for (int s : {1, 2, 3}) {
    Case k = stage(s);
    k.deep = true;
    k.accum = 2;
    k.checkpointed = true;
    k.clip = 0.5;
    EXPECT_LT(train_and_compare(k), 1e-10) << "stage " << s;
    k.delays = true;
    EXPECT_LT(train_and_compare(k), 1e-10) << "stage " << s << ", a late rank";
  }
}

// Between steps a stage-3 rank holds only its shards; units are whole only while used.
TEST(Zero, Stage3KeepsOnlyShardsBetweenSteps) {
  auto world = distributed::world();
  Case k = stage(3);
  k.deep = true;
  ZeroRun run = make_run(k);
  ASSERT_EQ(run.zero->segments().size(), 4u);  // three blocks and the root
  EXPECT_EQ(run.zero->segments()[0], (std::vector<std::string>{"blocks.0.fc.weight", "blocks.0.fc.bias"}));
  for (auto& p : run.dist->parameters()) EXPECT_TRUE(p.is_meta());
  auto& d = dynamic_cast<testing::DeepNet&>(*run.dist);
  std::vector<int> whole_blocks;  // how many blocks hold data while each block runs
  for (size_t i = 0; i < d.blocks->size(); ++i)
    (*d.blocks)[i]->register_forward_pre_hook([&](nn::Module&, Tensor&) {
      int n = 0;
      for (auto& b : *d.blocks) n += b->parameters()[0].is_meta() ? 0 : 1;
      whole_blocks.push_back(n);
    });
  Tensor out;
  {
    NoGradGuard no_grad;
    out = (*run.dist)(ones({2, 5}, DType::F64));
  }
  EXPECT_EQ(out.size(1), 2);
  for (int n : whole_blocks) EXPECT_LE(n, 2);  // this block and the prefetched next one
  for (auto& p : run.dist->parameters()) EXPECT_TRUE(p.is_meta());
  run.whole([&] {
    for (auto& p : run.dist->parameters()) EXPECT_FALSE(p.is_meta());
    auto fresh = testing::make_deep_net(DType::F64);  // untrained: the initial weights, whole again
    auto want = fresh->named_parameters(), got = run.dist->named_parameters();
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(ops::all(ops::eq(got[i].second, want[i].second)).item<bool>()) << got[i].first;
  });
}

TEST(Zero, SgdWithMomentum) {
  for (int s : {1, 2, 3}) {
    Case k = stage(s);
    k.optimizer = "sgd";
    k.options = {{"momentum", 0.9}, {"weight_decay", 0.01}};
    EXPECT_LT(train_and_compare(k), 1e-10) << "stage " << s;
  }
}

TEST(Zero, F32) {
  for (int s : {1, 2, 3}) {
    Case k = stage(s);
    k.dtype = DType::F32;
    EXPECT_LT(train_and_compare(k), 1e-5) << "stage " << s;
  }
}

TEST(Zero, GradientAccumulation) {
  for (int s : {1, 2, 3}) {
    Case k = stage(s);
    k.accum = 3;
    EXPECT_LT(train_and_compare(k), 1e-10) << "stage " << s;
  }
}

TEST(Zero, ClippingOverShardsAndCheckpointing) {
  for (int s : {1, 2, 3}) {
    Case k = stage(s);
    k.clip = 0.05;
    k.checkpointed = true;
    EXPECT_LT(train_and_compare(k), 1e-10) << "stage " << s;
  }
}

TEST(Zero, UnusedParameterWithFindUnused) {
  for (int s : {1, 2}) {
    Case k = stage(s);
    k.sometimes_unused = true;
    EXPECT_LT(train_and_compare(k), 1e-10) << "stage " << s;
  }
}

TEST(Zero, ALateRankChangesNothing) {
  for (int s : {1, 2, 3}) {
    Case k = stage(s);
    k.delays = true;
    k.accum = 2;
    EXPECT_LT(train_and_compare(k), 1e-10) << "stage " << s;
  }
}

TEST(Zero, ShardsSplitTheParameters) {
  auto world = distributed::world();
  ZeroRun run = make_run(stage(2));
  int64_t trainable = 0;
  for (auto& p : run.dist->parameters())
    if (p.requires_grad()) trainable += p.numel();
  Tensor mine = full({1}, run.zero->shard_numel(), DType::I64);
  world->allreduce(mine)->wait();
  EXPECT_EQ(mine.item<int64_t>(), trainable);  // every element is stepped by exactly one rank
  EXPECT_GE(run.zero->segments().size(), 2u);
  // The optimizer holds 1-D shards, no more than a chunk of the model each.
  for (auto& g : run.dist_opt->param_groups())
    for (auto& p : g.params) EXPECT_EQ(p.dim(), 1);
}

// The gathered state equals one process's, and loads at the other stage:
// training on from it stays equal to the reference.
TEST(Zero, ConsolidatedStateEqualsOneProcessAndLoadsAtAnotherStage) {
  for (auto [from, to] : {std::pair{2, 1}, std::pair{3, 2}, std::pair{1, 3}}) {
    Case k = stage(from);
    k.steps = 3;
    k.deep = from == 3 || to == 3;
    ZeroRun run = make_run(k);
    train(run, k);
    optim::OptimizerState got = run.zero->consolidated_state(), want = run.ref_opt->state_dict();
    ASSERT_EQ(got.tensors.size(), want.tensors.size());
    std::map<std::string, Tensor> by_key(want.tensors.begin(), want.tensors.end());
    for (auto& [key, t] : got.tensors) {
      ASSERT_TRUE(by_key.count(key)) << key;
      EXPECT_TRUE(testing::all_close(t, by_key[key], 1e-9, 1e-12)) << key << ", stage " << from;
    }
    EXPECT_EQ(got.groups.size(), want.groups.size());
    EXPECT_EQ(got.groups[0]["options"]["lr"], want.groups[0]["options"]["lr"]);

    // A fresh run at the other stage from the reference's weights and the gathered state.
    Case next_case = k;
    next_case.stage = to;
    ZeroRun next = make_run(next_case);
    next.ref->load_state_dict(run.ref->state_dict());
    next.whole([&] { next.dist->load_state_dict(run.ref->state_dict()); });
    next.ref_opt->load_state_dict(want);
    next.zero->load_consolidated_state(got);
    EXPECT_LT(train(next, next_case, 3), 1e-9) << "stage " << from << " to " << to;
  }
}

// A sharded checkpoint loads into each rank's parts, reading only them: saved
// at stage 3, loaded at stages 3 and 1 (then training on equals the
// reference); at the world size it was saved at a rank reads only its own
// shards, so damage to the last rank's shard stops that rank alone (the
// Trainer's resume then has every rank fall back together).
TEST(Zero, CheckpointsLoadReadingOnlyThisRanksShards) {
  auto world = distributed::world();
  const int n = world->size(), me = world->rank();
  Case k = stage(3);
  k.steps = 3;
  k.deep = true;
  ZeroRun run = make_run(k);
  train(run, k);
  // A directory every rank shares: rank 0's pid.
  Tensor pid = full({1}, static_cast<int64_t>(::getpid()), DType::I64);
  world->broadcast(pid, 0)->wait();
  const std::string root = "/tmp/tessera_zero_ckpt_" + std::to_string(pid.item<int64_t>());
  io::Checkpoint state;
  state.state = {{"step", 3}};
  const std::string dir = io::save_sharded_checkpoint(root, "step-3", me, n, run.zero->checkpoint_shard(), state, 0,
                                                      [&] { world->barrier()->wait(); });
  for (int to : {3, 1}) {
    Case next_case = k;
    next_case.stage = to;
    ZeroRun next = make_run(next_case);
    next.ref->load_state_dict(run.ref->state_dict());
    next.ref_opt->load_state_dict(run.ref_opt->state_dict());
    next.zero->load_checkpoint(io::CheckpointReader(dir));
    EXPECT_LT(train(next, next_case, 3), 1e-9) << "stage 3 to " << to;
  }
  world->barrier()->wait();
  if (me == n - 1) {  // one flipped byte in the last rank's model shard
    char name[64];
    std::snprintf(name, sizeof name, "/model-rank%05d.safetensors", n - 1);
    testing::damage_file(dir + name);
  }
  world->barrier()->wait();
  ZeroRun again = make_run(k);
  std::string err = testing::error_of([&] { again.zero->load_checkpoint(io::CheckpointReader(dir)); });
  if (me == n - 1)
    EXPECT_NE(err.find("is corrupt (CRC32"), std::string::npos) << err;
  else
    EXPECT_EQ(err, "") << "rank " << me << " read a shard that is not its own";
  world->barrier()->wait();
  if (me == 0) std::filesystem::remove_all(root);
}

TEST(Zero, UnusedParameterWithoutFindUnusedIsNamed) {
  auto world = distributed::world();
  ZeroRun run = make_run(stage(2));
  run.use_sometimes(false);
  run.zero->set_step(4);
  std::string err = testing::error_of([&] { ops::sum((*run.dist)(ones({2, 5}, DType::F64))).backward(); });
  EXPECT_NE(err.find("parameter 'sometimes' got no gradient in the backward of step 4 on rank " +
                     std::to_string(world->rank())),
            std::string::npos)
      << err;
}

TEST(Zero, AParameterOutsideTheOptimizerIsNamed) {
  auto world = distributed::world();
  auto net = make_net(DType::F64);
  auto opt = optim::make_optimizer("sgd", {optim::ParamGroup{{net->a->weight}, {}, {"a.weight"}}}, {{"lr", 0.1}});
  std::string err = testing::error_of([&] { ZeroRedundancy z(*net, *opt, world); });
  EXPECT_NE(err.find("requires grad but is not in the optimizer"), std::string::npos) << err;
}

// A model bigger than one process: built on meta, materialized a segment at a
// time. The GPT's reset_parameters re-draws its children's weights, so the
// numbers come right only if every initializer, on meta too, moves the
// generator as it does on the CPU. Bit for bit the model built on the CPU from
// the same seed; the generator ends where building it left it; the peak is one
// block and the root whole, never the model; and it trains.
TEST(Zero, Stage3MaterializesAModelBuiltOnMetaShardByShard) {
  auto world = distributed::world();
  nn::zoo::GPTConfig c;
  c.vocab_size = 40;
  c.block_size = 16;
  c.n_layer = 8;
  c.n_head = 4;
  c.n_embd = 32;
  manual_seed(11);
  nn::zoo::GPT ref(c);
  const uint64_t after_build = default_generator().offset();
  manual_seed(11);
  std::unique_ptr<nn::zoo::GPT> gpt;
  {
    DeviceScope meta(Device::meta());
    gpt = std::make_unique<nn::zoo::GPT>(c);
  }
  for (auto& p : gpt->parameters()) ASSERT_TRUE(p.is_meta());
  manual_seed(11);  // as before building it
  auto opt = optim::make_optimizer("adamw", {optim::ParamGroup{gpt->parameters(), {}, {}}}, {{"lr", 0.002}});
  int64_t whole_bytes = 0, block_bytes = 0;
  for (auto& p : ref.parameters()) whole_bytes += p.numel() * 4;
  for (auto& p : (*ref.h)[0]->parameters()) block_bytes += p.numel() * 4;
  const int64_t before = memory_allocated();
  reset_peak_memory();
  ZeroOptions o;
  o.stage = 3;
  ZeroRedundancy zero(*gpt, *opt, world, o);
  const int64_t peak = max_memory_allocated() - before;
  EXPECT_EQ(default_generator().offset(), after_build);
  // This rank's shards (1/N of the model), one segment whole and the draw for its largest tensor.
  const int64_t root_bytes = whole_bytes - c.n_layer * block_bytes;
  EXPECT_LE(peak, whole_bytes / world->size() + std::max(block_bytes, root_bytes) + block_bytes)
      << "materializing held " << peak << " bytes; the model has " << whole_bytes;
  EXPECT_LT(peak, whole_bytes);
  if (world->rank() == 0)
    std::printf("[Zero] materializing a GPT of %lld bytes from meta at %d ranks held at most %lld bytes\n",
                static_cast<long long>(whole_bytes), world->size(), static_cast<long long>(peak));
  for (auto& p : gpt->parameters()) EXPECT_TRUE(p.is_meta());
  zero.set_whole_parameters(true);
  auto want = ref.named_parameters(), got = gpt->named_parameters();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(ops::all(ops::eq(got[i].second, want[i].second)).item<bool>()) << got[i].first;
  zero.set_whole_parameters(false);
  Tensor ids = ops::remainder(ops::add(arange(2 * 16, DType::I64), world->rank()), 40).reshape({2, 16});
  double first = 0, last = 0;
  for (int step = 0; step < 3; ++step) {
    Tensor out = (*gpt)(ids);
    Tensor loss = ops::cross_entropy(out.reshape({-1, 40}), ids.reshape({-1}));
    loss.backward();
    zero.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first);
  zero.set_whole_parameters(true);
  expect_replicas_equal(*gpt, *world);
}

// The two-block GPT of the unit tests below.
nn::zoo::GPTConfig tiny_gpt(bool tied) {
  nn::zoo::GPTConfig c;
  c.vocab_size = 30;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.weight_tying = tied;
  return c;
}

// An untied GPT's embeddings and head are units of their own (gathered only
// around their forward and backward); the root keeps the final norm. Every
// rank trains on the same batch, so the model equals one process's.
TEST(Zero, Stage3UnitsIncludeTheEmbeddingsAndAnUntiedHead) {
  auto world = distributed::world();
  nn::zoo::GPTConfig c = tiny_gpt(/*tied=*/false);
  manual_seed(5);
  nn::zoo::GPT ref(c);
  manual_seed(5);
  nn::zoo::GPT gpt(c);
  auto ref_opt = optim::make_optimizer("adamw", {optim::ParamGroup{ref.parameters(), {}, {}}}, {{"lr", 0.01}});
  auto opt = optim::make_optimizer("adamw", {optim::ParamGroup{gpt.parameters(), {}, {}}}, {{"lr", 0.01}});
  ZeroOptions o;
  o.stage = 3;
  ZeroRedundancy zero(gpt, *opt, world, o);
  auto seg = zero.segments();
  ASSERT_EQ(seg.size(), 6u);  // wte, wpe, two blocks, lm_head, the root
  EXPECT_EQ(seg[0], (std::vector<std::string>{"transformer.wte.weight"}));
  EXPECT_EQ(seg[1], (std::vector<std::string>{"transformer.wpe.weight"}));
  EXPECT_EQ(seg[4], (std::vector<std::string>{"lm_head.weight"}));
  EXPECT_EQ(seg[5], (std::vector<std::string>{"transformer.ln_f.weight", "transformer.ln_f.bias"}));
  Tensor ids = ops::remainder(arange(2 * 8, DType::I64), 30).reshape({2, 8});
  for (int step = 0; step < 3; ++step) {
    for (nn::Module* m : {static_cast<nn::Module*>(&ref), static_cast<nn::Module*>(&gpt)})
      ops::cross_entropy((*m)(ids).reshape({-1, 30}), ids.reshape({-1})).backward();
    ref_opt->step();
    ref_opt->zero_grad();
    zero.step();
  }
  zero.set_whole_parameters(true);
  auto want = ref.named_parameters(), got = gpt.named_parameters();
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(testing::all_close(got[i].second, want[i].second, 1e-5, 1e-6)) << got[i].first;
}

// A GPT's head tied to wte shares its weight: one segment, gathered around
// the embedding's forward and again around the head's, holding no data in
// between (the blocks run without it), and the model still equals one
// process's.
TEST(Zero, Stage3GathersATiedEmbeddingAroundEachOfItsUses) {
  auto world = distributed::world();
  nn::zoo::GPTConfig c = tiny_gpt(/*tied=*/true);
  manual_seed(6);
  nn::zoo::GPT ref(c);
  manual_seed(6);
  nn::zoo::GPT gpt(c);
  auto ref_opt = optim::make_optimizer("adamw", {optim::ParamGroup{ref.parameters(), {}, {}}}, {{"lr", 0.01}});
  auto opt = optim::make_optimizer("adamw", {optim::ParamGroup{gpt.parameters(), {}, {}}}, {{"lr", 0.01}});
  ZeroOptions o;
  o.stage = 3;
  ZeroRedundancy zero(gpt, *opt, world, o);
  auto seg = zero.segments();
  ASSERT_EQ(seg.size(), 5u);  // wte with the tied head, wpe, two blocks, the root
  EXPECT_EQ(seg[0], (std::vector<std::string>{"transformer.wte.weight"}));
  EXPECT_EQ(seg[1], (std::vector<std::string>{"transformer.wpe.weight"}));
  EXPECT_EQ(seg[4], (std::vector<std::string>{"transformer.ln_f.weight", "transformer.ln_f.bias"}));
  // Whether the tied weight held data while each block ran, forward and backward.
  std::vector<bool> held;
  nn::Module& block = *(*gpt.h)[1];
  auto pre = block.register_forward_pre_hook([&](nn::Module&, Tensor& in) {
    held.push_back(!gpt.wte->weight.is_meta());
    if (in.requires_grad())
      in.register_hook([&](const Tensor&) {  // after the block's backward
        held.push_back(!gpt.wte->weight.is_meta());
        return Tensor();
      });
  });
  Tensor ids = ops::remainder(arange(2 * 8, DType::I64), 30).reshape({2, 8});
  for (int step = 0; step < 3; ++step) {
    for (nn::Module* m : {static_cast<nn::Module*>(&ref), static_cast<nn::Module*>(&gpt)})
      ops::cross_entropy((*m)(ids).reshape({-1, 30}), ids.reshape({-1})).backward();
    ref_opt->step();
    ref_opt->zero_grad();
    zero.step();
  }
  block.remove_hook(pre);
  ASSERT_EQ(held.size(), 6u);
  for (bool h : held) EXPECT_FALSE(h) << "the tied weight was whole while a block ran";
  zero.set_whole_parameters(true);
  auto want = ref.named_parameters(), got = gpt.named_parameters();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(testing::all_close(got[i].second, want[i].second, 1e-5, 1e-6)) << got[i].first;
}

// The stages that keep whole parameters need the model whole.
TEST(Zero, AModelOnMetaNeedsStage3) {
  auto world = distributed::world();
  std::unique_ptr<nn::Linear> lin;
  {
    DeviceScope meta(Device::meta());
    lin = std::make_unique<nn::Linear>(4, 3);
  }
  auto opt = optim::make_optimizer("sgd", {optim::ParamGroup{lin->parameters(), {}, {}}}, {{"lr", 0.1}});
  std::string err = testing::error_of([&] { ZeroRedundancy z(*lin, *opt, world); });
  EXPECT_NE(err.find("the model is on the meta device"), std::string::npos) << err;
}

}  // namespace
}  // namespace tessera
