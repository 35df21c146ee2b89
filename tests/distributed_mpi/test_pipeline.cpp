// Pipeline parallelism equals one process: at P = 2 and P = the world's size,
// with 4 and 8 micro-batches, under GPipe, 1F1B and interleaved 1F1B, the
// batch's loss and every stage's gradients equal the whole model's on the
// whole batch (f64, 1e-10 relative), for the GPT (tied and untied head), the
// Llama and a Sequential, with and without activation checkpointing. Bad
// settings are errors on every rank before the first step.
#include <gtest/gtest.h>

#include "tessera/distributed/pipeline.h"
#include "tessera/nn/nn.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"
#include "model_parallel.h"
#include "test_util.h"

namespace tessera {
namespace {

using distributed::Pipeline;
using distributed::PipelineOptions;
using distributed::ProcessGroupPtr;

using testing::close_relative;
using testing::model_parallel_groups;

Tensor lm_loss(const Tensor& logits, const Tensor& targets) {
  return ops::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

nn::zoo::GPTConfig gpt_config(bool tied) {
  nn::zoo::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 6;
  c.n_layer = 8;
  c.n_head = 2;
  c.n_embd = 8;
  c.weight_tying = tied;
  return c;
}

nn::zoo::LlamaConfig llama_config() {
  nn::zoo::LlamaConfig c;
  c.vocab_size = 11;
  c.dim = 8;
  c.n_layers = 8;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.hidden_dim = 12;
  c.max_seq_len = 6;
  c.tie_embeddings = true;
  return c;
}

// The model twice from one seed: whole, and for the pipeline.
template <typename M, typename C>
std::pair<std::shared_ptr<M>, std::shared_ptr<M>> twins(const C& config) {
  manual_seed(31);
  auto dense = std::make_shared<M>(config);
  manual_seed(31);
  auto piped = std::make_shared<M>(config);
  dense->to(DType::F64);
  piped->to(DType::F64);
  return {dense, piped};
}

// One step of the pipeline against the whole model on the whole batch.
void expect_step_matches(std::shared_ptr<nn::Module> dense, std::shared_ptr<nn::Module> piped, const ProcessGroupPtr& g,
                         PipelineOptions o, const Tensor& x, const Tensor& y, Pipeline::LossFn loss_fn) {
  Tensor loss = loss_fn((*dense)(x), y);
  loss.backward();
  Pipeline pipe(piped, g, o, loss_fn);
  Tensor got = pipe.step(x, y);
  EXPECT_TRUE(close_relative(got, loss, 1e-10));
  std::map<std::string, Tensor> want;
  for (auto& [n, p] : dense->named_parameters()) want[n] = p;
  const auto mine = pipe.parameters();
  for (auto& [n, p] : mine) {
    EXPECT_TRUE(p.grad().defined() && close_relative(p.grad(), want.at(n).grad(), 1e-10)) << n;
  }
  // Every parameter lives on some rank of the pipeline, once (a tied weight
  // on the first and last stage's ranks).
  Tensor count = tensor(std::vector<int64_t>{static_cast<int64_t>(mine.size())}, {1});
  g->allreduce(count)->wait();
  EXPECT_GE(count.item<int64_t>(), static_cast<int64_t>(dense->named_parameters().size()));
}

TEST(Pipeline, EverySchedulesGradientsEqualOneProcess) {
  for (const ProcessGroupPtr& g : model_parallel_groups())
    for (const char* schedule : {"gpipe", "1f1b", "interleaved"})
      for (int m : {4, 8}) {
        const std::string trace = "P " + std::to_string(g->size()) + ", " + schedule + ", m " + std::to_string(m);
        SCOPED_TRACE(trace);
        Generator gen(3);
        Tensor x = ops::randint(0, 11, {8, 6}, DType::I64, &gen), y = ops::randint(0, 11, {8, 6}, DType::I64, &gen);
        PipelineOptions o{.schedule = schedule, .micro_batches = m, .virtual_stages = std::string(schedule) == "interleaved" ? 2 : 1};
        auto [dense, piped] = twins<nn::zoo::GPT>(gpt_config(m == 4));
        expect_step_matches(dense, piped, g, o, x, y, lm_loss);
      }
}

TEST(Pipeline, TheLlamaAndASequentialWithCheckpointsAndACostSplit) {
  for (const ProcessGroupPtr& g : model_parallel_groups()) {
    SCOPED_TRACE("P " + std::to_string(g->size()));
    Generator gen(4);
    Tensor x = ops::randint(0, 11, {6, 5}, DType::I64, &gen), y = ops::randint(0, 11, {6, 5}, DType::I64, &gen);
    {
      auto [dense, piped] = twins<nn::zoo::Llama>(llama_config());
      expect_step_matches(dense, piped, g, {.schedule = "1f1b", .micro_batches = 4, .checkpoint = true}, x, y, lm_loss);
    }
    {  // cut by each piece's measured forward time (rank 0's, on a row of zeros)
      auto [dense, piped] = twins<nn::zoo::GPT>(gpt_config(true));
      Tensor xg = ops::randint(0, 11, {4, 6}, DType::I64, &gen), yg = ops::randint(0, 11, {4, 6}, DType::I64, &gen);
      expect_step_matches(dense, piped, g, {.schedule = "gpipe", .micro_batches = 2, .split = "time"}, xg, yg, lm_loss);
    }
    // Uneven micro-batches (10 rows in 4) and a cut by parameter counts.
    auto seq = [] {
      manual_seed(5);
      auto s = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
          std::make_shared<nn::Linear>(3, 16), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(16, 16),
          std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(16, 4), std::make_shared<nn::Tanh>(),
          std::make_shared<nn::Linear>(4, 2)});
      s->to(DType::F64);
      return s;
    };
    Tensor xs = ops::randn({10, 3}, DType::F64, &gen), ys = ops::randint(0, 2, {10}, DType::I64, &gen);
    auto ce = [](const Tensor& out, const Tensor& t) { return ops::cross_entropy(out, t); };
    expect_step_matches(seq(), seq(), g, {.schedule = "gpipe", .micro_batches = 4, .split = "parameters"}, xs, ys, ce);
  }
}

TEST(Pipeline, StagesFollowTheRequestedSplit) {
  auto gpt = std::make_shared<nn::zoo::GPT>(gpt_config(true));
  auto pieces = distributed::pipeline_pieces(*gpt);
  ASSERT_EQ(pieces.size(), 10u);  // embed, 8 blocks, head
  EXPECT_EQ(distributed::pipeline_boundaries(pieces, 4, {}), (std::vector<int>{0, 3, 5, 7}));
  PipelineOptions by_cost{.split = "costs", .costs = {0, 1, 1, 1, 1, 1, 1, 1, 1, 6}};
  EXPECT_EQ(distributed::pipeline_boundaries(pieces, 2, by_cost), (std::vector<int>{0, 8}));  // 7 and 7
}

TEST(Pipeline, BadSettingsAreErrorsOnEveryRankBeforeTheFirstStep) {
  auto w = distributed::world();
  auto error_of = [&](PipelineOptions o, nn::zoo::GPTConfig c) {
    try {
      Pipeline(std::make_shared<nn::zoo::GPT>(c), w, o, lm_loss);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nn::zoo::GPTConfig shallow = gpt_config(true);
  shallow.n_layer = 1;
  EXPECT_NE(error_of({}, shallow).find("1 layers, too few for " + std::to_string(w->size()) + " stages"),
            std::string::npos);
  EXPECT_NE(error_of({.schedule = "1f1b", .micro_batches = 1}, gpt_config(true)).find("1 micro-batches cannot fill"),
            std::string::npos);
  // One rank asks for another schedule: every rank fails, naming the difference.
  const std::string e = error_of({.schedule = w->rank() == 0 ? "gpipe" : "1f1b", .micro_batches = 4}, gpt_config(true));
  EXPECT_NE(e.find("runs another pipeline"), std::string::npos) << e;
  // One rank's settings cannot work: the others fail too instead of waiting for it.
  const std::string f = error_of({.micro_batches = w->rank() == 1 ? 1 : 4}, gpt_config(true));
  EXPECT_NE(f.find(w->rank() == 1 ? "cannot fill" : "rank 1 of group"), std::string::npos) << f;
  // A batch smaller than the micro-batch count.
  Pipeline pipe(std::make_shared<nn::zoo::GPT>(gpt_config(true)), w, {.micro_batches = 4}, lm_loss);
  Tensor ids = zeros({2, 6}, DType::I64);
  try {
    pipe.step(ids, ids);
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("a batch of 2 rows cannot make 4 micro-batches"), std::string::npos);
  }
}

}  // namespace
}  // namespace tessera
