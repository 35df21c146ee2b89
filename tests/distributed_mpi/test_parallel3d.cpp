// Data x tensor x pipeline parallelism equals one process: every layout of
// the world's ranks (2 x 2 x 2 at 8 ranks) trains the GPT and the Llama with
// the losses of one process running the whole batch (f32, 1e-5 over 20
// steps), and a checkpoint saved at one layout resumes at another with the
// same trajectory. Each rank also trains the whole model alone as the
// reference.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "tessera/core/allocator.h"
#include "tessera/core/generator.h"
#include "tessera/distributed/parallel3d.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"
#include "test_util.h"

namespace tessera {
namespace {

using distributed::Layout;
using distributed::Parallel3D;
using distributed::ProcessGroupPtr;

std::vector<Layout> layouts(int world) {
  std::vector<Layout> out;
  for (int t = 1; t <= std::min(world, 4); t *= 2)  // the models have 4 heads and 4 layers
    for (int p = 1; p * t <= world && p <= 4; p *= 2)
      if (world % (t * p) == 0 && (t > 1 || p > 1)) out.push_back({world / (t * p), t, p});
  return out;
}

nn::zoo::GPTConfig gpt_config() {
  nn::zoo::GPTConfig c;
  c.vocab_size = 16;
  c.block_size = 8;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 16;
  return c;
}

nn::zoo::LlamaConfig llama_config() {
  nn::zoo::LlamaConfig c;
  c.vocab_size = 16;
  c.dim = 16;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.hidden_dim = 24;
  c.max_seq_len = 8;
  return c;
}

template <typename M, typename C>
std::shared_ptr<M> build(const C& config) {
  manual_seed(17);
  return std::make_shared<M>(config);
}

optim::OptimizerPtr adamw(optim::ParamGroup g) { return optim::make_optimizer("adamw", {g}, {{"lr", 0.01}}); }

optim::ParamGroup all_params(nn::Module& m) {
  optim::ParamGroup g;
  for (auto& [n, p] : m.named_parameters()) g.params.push_back(p), g.names.push_back(n);
  return g;
}

// The global batches: the same on every rank.
std::pair<Tensor, Tensor> batch(int step) {
  Generator gen(100 + step);
  return {ops::randint(0, 16, {8, 8}, DType::I64, &gen), ops::randint(0, 16, {8, 8}, DType::I64, &gen)};
}

double dense_step(nn::Module& m, optim::Optimizer& opt, int step) {
  auto [x, y] = batch(step);
  Tensor logits = m(x);
  Tensor loss = ops::cross_entropy(logits.reshape({-1, 16}), y.reshape({-1}));
  opt.zero_grad();
  loss.backward();
  opt.step();
  return loss.item<double>();
}

double parallel_step(Parallel3D& job, optim::Optimizer& opt, int step) {
  auto [x, y] = batch(step);
  opt.zero_grad();
  Tensor loss = job.step(x, y);
  opt.step();
  job.gather_parameters();  // ZeRO-1's (nothing without it)
  return loss.item<double>();
}

template <typename M, typename C>
void expect_trains_as_one_process(const C& config, Layout layout, const std::string& schedule, bool sp) {
  auto w = distributed::world();
  auto dense = build<M>(config);
  auto dense_opt = adamw(all_params(*dense));
  Parallel3D job(build<M>(config), w,
                 {.layout = layout,
                  .pipeline = {.schedule = schedule, .micro_batches = layout.pipeline,
                               .virtual_stages = schedule == "interleaved" ? 2 : 1},
                  .sequence_parallel = sp});
  auto opt = adamw(job.param_group());
  for (int step = 0; step < 20; ++step) {
    const double want = dense_step(*dense, *dense_opt, step);
    EXPECT_NEAR(parallel_step(job, *opt, step), want, 1e-5) << "step " << step;
  }
}

TEST(Parallel3D, EveryLayoutTrainsAsOneProcess) {
  const int W = distributed::world()->size();
  for (Layout l : layouts(W)) {
    SCOPED_TRACE(l.str());
    expect_trains_as_one_process<nn::zoo::GPT>(gpt_config(), l, "1f1b", false);
  }
  // The Llama (grouped-query heads), sequence parallelism and interleaving at the largest cube.
  Layout cube = layouts(W).back();
  for (Layout l : layouts(W))
    if (l.data > 1 && l.tensor > 1 && l.pipeline > 1) cube = l;
  SCOPED_TRACE("Llama at " + cube.str());
  expect_trains_as_one_process<nn::zoo::Llama>(llama_config(), cube, cube.pipeline > 1 ? "interleaved" : "1f1b", true);
}

// ZeRO-1 over the data group: each data rank steps its share of its part,
// and the others receive it; the trajectory is one process's, and each data
// rank's optimizer holds the state of its share only.
TEST(Parallel3D, ZeroOneOverTheDataRanksTrainsAsOneProcess) {
  auto w = distributed::world();
  for (Layout l : layouts(w->size())) {
    if (l.data == 1) continue;
    SCOPED_TRACE(l.str());
    auto dense = build<nn::zoo::GPT>(gpt_config());
    auto dense_opt = adamw(all_params(*dense));
    Parallel3D job(build<nn::zoo::GPT>(gpt_config()), w,
                   {.layout = l, .pipeline = {.schedule = "1f1b", .micro_batches = l.pipeline}, .zero = 1});
    int64_t stepped = 0, held = 0;
    for (auto& [n, p] : job.stepped_parameters()) stepped += p.numel();
    for (auto& [n, p] : job.parameters()) held += p.numel();
    EXPECT_LT(stepped, held * 3 / (2 * l.data) + 1) << "a data rank steps about 1/D of its part";
    auto opt = adamw(job.param_group());
    for (int step = 0; step < 20; ++step) {
      const double want = dense_step(*dense, *dense_opt, step);
      auto [x, y] = batch(step);
      opt->zero_grad();
      const double got = job.step(x, y).item<double>();
      opt->step();
      job.gather_parameters();
      EXPECT_NEAR(got, want, 1e-5) << "step " << step;
    }
  }
}

// A model built on meta (shapes only) and seeded as before building it gets
// memory for this rank's part alone, holding the numbers of the model built
// on the CPU: it trains as one process does, and the generator ends where
// the CPU build leaves it.
TEST(Parallel3D, AModelBuiltOnMetaTrainsAsOneProcess) {
  auto w = distributed::world();
  Layout cube = layouts(w->size()).back();
  for (Layout l : layouts(w->size()))
    if (l.data > 1 && l.tensor > 1 && l.pipeline > 1) cube = l;
  SCOPED_TRACE(cube.str());
  auto dense = build<nn::zoo::GPT>(gpt_config());
  const uint64_t after_build = default_generator().offset();
  auto dense_opt = adamw(all_params(*dense));
  manual_seed(17);
  std::shared_ptr<nn::zoo::GPT> meta;
  {
    DeviceScope on_meta(Device::meta());
    meta = std::make_shared<nn::zoo::GPT>(gpt_config());
  }
  manual_seed(17);  // as before building it
  const int64_t before = memory_stats().current_bytes;
  Parallel3D job(meta, w, {.layout = cube, .pipeline = {.schedule = "1f1b", .micro_batches = cube.pipeline}});
  EXPECT_EQ(default_generator().offset(), after_build);
  int64_t mine = 0, whole = 0;
  for (auto& [n, p] : job.parameters()) {
    EXPECT_FALSE(p.device().is_meta()) << n;
    mine += p.numel() * static_cast<int64_t>(p.itemsize());
  }
  for (auto& [n, p] : dense->named_parameters()) whole += p.numel() * static_cast<int64_t>(p.itemsize());
  EXPECT_LT(mine, whole * 3 / 4);  // a tensor block of some stages
  EXPECT_LT(memory_stats().current_bytes - before, whole * 3 / 4);  // never the whole model
  auto opt = adamw(job.param_group());
  for (int step = 0; step < 20; ++step) {
    const double want = dense_step(*dense, *dense_opt, step);
    EXPECT_NEAR(parallel_step(job, *opt, step), want, 1e-5) << "step " << step;
  }
}

// Saved at the full layout after 3 steps; resumed on half the ranks at two
// other layouts (and on the full one), the next 3 steps' losses equal one
// process's.
TEST(Parallel3D, ACheckpointResumesAtAnotherLayout) {
  auto w = distributed::world();
  const int W = w->size();
  if (W < 4) GTEST_SKIP() << "needs 4 ranks";
  auto dense = build<nn::zoo::GPT>(gpt_config());
  auto dense_opt = adamw(all_params(*dense));
  std::vector<double> want;
  for (int step = 0; step < 6; ++step) want.push_back(dense_step(*dense, *dense_opt, step));

  Tensor id = tensor(std::vector<int64_t>{static_cast<int64_t>(::getpid())}, {1});
  w->broadcast(id, 0)->wait();
  const std::string root = (std::filesystem::temp_directory_path() / ("tessera_3d_" + std::to_string(id.item<int64_t>()))).string();
  const Layout saved = W == 8 ? Layout{2, 2, 2} : Layout{1, 2, 2};
  std::string dir;
  {
    // At 8 ranks, saved under ZeRO-1 (each data rank writes the state it stepped).
    Parallel3D job(build<nn::zoo::GPT>(gpt_config()), w,
                   {.layout = saved, .pipeline = {.micro_batches = saved.pipeline}, .zero = W == 8 ? 1 : 0});
    auto opt = adamw(job.param_group());
    for (int step = 0; step < 3; ++step) EXPECT_NEAR(parallel_step(job, *opt, step), want[step], 1e-5);
    io::Checkpoint c;
    c.state = {{"step", 3}};
    dir = io::save_sharded_checkpoint(root, "step3", w->rank(), W, job.checkpoint_shard(*opt), c, 0,
                                      [&] { w->barrier()->wait(); });
  }
  for (Layout resume : {Layout{1, 2, 2}, Layout{4, 1, 1}, Layout{1, 1, 4}}) {
    SCOPED_TRACE("resumed at " + resume.str());
    ProcessGroupPtr part = w->split(w->rank() < 4 ? 0 : -1);
    if (!part) continue;
    io::CheckpointReader reader(dir);
    Parallel3D job(build<nn::zoo::GPT>(gpt_config()), part,
                   {.layout = resume, .pipeline = {.micro_batches = resume.pipeline}, .zero = resume.data > 1 ? 1 : 0});
    auto opt = adamw(job.param_group());
    job.load_checkpoint(reader, *opt);
    for (int step = 3; step < 6; ++step) EXPECT_NEAR(parallel_step(job, *opt, step), want[step], 1e-5) << step;
  }
  w->barrier()->wait();
  if (w->rank() == 0) std::filesystem::remove_all(root);
}

TEST(Parallel3D, ALayoutThatDoesNotFitTheWorldIsAnError) {
  auto w = distributed::world();
  try {
    distributed::make_mesh(w, {w->size(), 2, 1});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must equal the world's size"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
