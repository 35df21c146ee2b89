// Tensor parallelism equals the dense model: the split layers, the
// vocabulary-parallel loss, and the zoo's GPT and Llama split at T = 2 and at
// T = the world's size, with and without sequence parallelism, for
// grouped-query attention whose key/value heads are fewer than the ranks,
// and for a LoRA pair. Outputs and every gradient in f64 within 1e-10
// (relative to the largest value), and 20 training steps in f32 within 1e-5.
#include <gtest/gtest.h>

#include "tessera/distributed/tensor_parallel.h"
#include "tessera/nn/nn.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/optimizer.h"
#include "model_parallel.h"
#include "test_util.h"

namespace tessera {
namespace {

using distributed::ProcessGroupPtr;
using distributed::SplitGroup;

using testing::close_relative;
using testing::model_parallel_groups;

// Every parameter's gradient of `tp` equals its part of `dense`'s.
void expect_grads_match(nn::Module& tp, nn::Module& dense, double tol) {
  std::map<std::string, distributed::ShardSpec> specs;
  for (auto& [n, s] : distributed::tensor_parallel_shards(tp)) specs[n] = s;
  auto want = dense.named_parameters();
  auto got = tp.named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first);
    const Tensor& g = got[i].second.grad();
    const Tensor& w = want[i].second.grad();
    if (!w.defined()) {
      EXPECT_FALSE(g.defined()) << got[i].first;
      continue;
    }
    ASSERT_TRUE(g.defined()) << got[i].first;
    auto it = specs.find(got[i].first);
    EXPECT_TRUE(close_relative(g, it == specs.end() ? w : it->second.take(w), tol)) << got[i].first;
  }
}

bool same(const Tensor& a, const Tensor& b) { return ops::all(ops::eq(a, b)).item<bool>(); }

Tensor draws(uint64_t seed, IntArrayRef shape) {
  Generator g(seed);
  return ops::randn(shape, DType::F64, &g);
}

// ---- the layers --------------------------------------------------------------------------------

// A column- then a row-parallel layer between a replicated input and a
// replicated output (the MLP of a transformer), then a vocabulary-parallel
// head and loss, against the same layers whole.
TEST(TensorParallel, LinearLayersAndTheLossEqualTheDenseOnes) {
  for (const ProcessGroupPtr& g : model_parallel_groups()) {
    for (bool sp : {false, true}) {
      SCOPED_TRACE("T = " + std::to_string(g->size()) + (sp ? ", sequence parallel" : ""));
      const int64_t B = 2, L = 4, D = 6, H = 4 * g->size(), V = 3 * g->size();
      manual_seed(7);
      auto fc1 = std::make_shared<nn::Linear>(D, H), fc2 = std::make_shared<nn::Linear>(H, D),
           head = std::make_shared<nn::Linear>(D, V);
      auto norm = std::make_shared<nn::LayerNorm>(IntArrayRef{D});
      for (nn::Module* m : std::vector<nn::Module*>{fc1.get(), fc2.get(), head.get(), norm.get()}) m->to(DType::F64);
      {
        NoGradGuard no_grad;
        norm->weight.copy_(draws(3, {D}));
        norm->bias.copy_(draws(4, {D}));
      }
      SplitGroup split{g, sp};
      auto c1 = std::make_shared<distributed::ColumnParallelLinear>(*fc1, split);
      auto r2 = std::make_shared<distributed::RowParallelLinear>(*fc2, split);
      auto ch = std::make_shared<distributed::ColumnParallelLinear>(*head, split);
      auto pn = std::make_shared<distributed::SequenceParallelLayerNorm>(*norm, split);
      Tensor ids = ops::randint(0, V, {B, L}, DType::I64);
      ids = ops::where(ops::eq(ids, 1), -100, ids);  // ignored targets count for nothing
      Tensor X = draws(11, {B, L, D});

      Tensor x = X.clone().requires_grad_();
      Tensor y = (*norm)(ops::add(x, (*fc2)(ops::gelu((*fc1)(x)))));
      Tensor loss = ops::cross_entropy((*head)(y).reshape({-1, V}), ids.reshape({-1}));
      loss.backward();

      const int64_t l = sp ? L / g->size() : L;
      Tensor xt = (sp ? X.narrow(1, g->rank() * l, l) : X).clone().requires_grad_();
      Tensor mlp = (*r2)(ops::gelu((*c1)(xt)));
      Tensor yt = sp ? (*pn)(ops::add(xt, mlp)) : (*norm)(ops::add(xt, mlp));
      Tensor logits = (*ch)(yt);
      ASSERT_EQ(logits.size(-1), V / g->size());
      EXPECT_TRUE(close_relative(logits, (*head)(y).narrow(-1, g->rank() * (V / g->size()), V / g->size()), 1e-10));
      Tensor tloss = distributed::vocab_parallel_cross_entropy(logits, ids, g);
      EXPECT_TRUE(close_relative(tloss, loss, 1e-10));
      tloss.backward();
      EXPECT_TRUE(close_relative(xt.grad(), sp ? x.grad().narrow(1, g->rank() * l, l) : x.grad(), 1e-10));
      EXPECT_TRUE(close_relative(c1->weight.grad(), c1->weight_spec.take(fc1->weight.grad()), 1e-10));
      EXPECT_TRUE(close_relative(c1->bias.grad(), fc1->bias.grad().narrow(0, g->rank() * (H / g->size()), H / g->size()), 1e-10));
      EXPECT_TRUE(close_relative(r2->weight.grad(), r2->weight_spec.take(fc2->weight.grad()), 1e-10));
      EXPECT_TRUE(close_relative(r2->bias.grad(), fc2->bias.grad(), 1e-10));
      EXPECT_TRUE(close_relative(ch->weight.grad(), ch->weight_spec.take(head->weight.grad()), 1e-10));
      const auto& n = sp ? static_cast<nn::LayerNorm&>(*pn) : *norm;
      if (sp) {
        EXPECT_TRUE(close_relative(n.weight.grad(), norm->weight.grad(), 1e-10));
        EXPECT_TRUE(close_relative(n.bias.grad(), norm->bias.grad(), 1e-10));
      }
    }
  }
}

TEST(TensorParallel, VocabularyParallelEmbeddingLooksUpEveryIdOnce) {
  for (const ProcessGroupPtr& g : model_parallel_groups()) {
    SCOPED_TRACE("T = " + std::to_string(g->size()));
    const int64_t V = 5 * g->size(), D = 3;
    manual_seed(8);
    auto emb = std::make_shared<nn::Embedding>(V, D, 2);
    emb->to(DType::F64);
    auto pe = std::make_shared<distributed::VocabParallelEmbedding>(*emb, SplitGroup{g, false});
    Tensor ids = ops::randint(0, V, {3, 7}, DType::I64);
    Tensor c = draws(12, {3, 7, D});
    Tensor y = (*emb)(ids), yt = (*pe)(ids);
    EXPECT_TRUE(close_relative(yt, y, 1e-12));
    ops::sum(ops::mul(y, c)).backward();
    ops::sum(ops::mul(yt, c)).backward();
    EXPECT_TRUE(close_relative(pe->weight.grad(), emb->weight.grad().narrow(0, pe->vocab_begin, V / g->size()), 1e-12));
  }
}

TEST(TensorParallel, ALoraPairSplitsWithItsLayer) {
  for (const ProcessGroupPtr& g : model_parallel_groups()) {
    SCOPED_TRACE("T = " + std::to_string(g->size()));
    const int64_t D = 4, H = 2 * g->size();
    manual_seed(9);
    auto fc1 = std::make_shared<nn::Linear>(D, H), fc2 = std::make_shared<nn::Linear>(H, D);
    for (auto* l : {fc1.get(), fc2.get()}) {
      l->add_lora(2, 4.0);
      l->to(DType::F64);
      NoGradGuard no_grad;
      l->lora->B.copy_(draws(20 + l->out_features, l->lora->B.shape()));  // not zero, so A gets a gradient
    }
    SplitGroup split{g, false};
    auto c1 = std::make_shared<distributed::ColumnParallelLinear>(*fc1, split);
    auto r2 = std::make_shared<distributed::RowParallelLinear>(*fc2, split);
    Tensor X = draws(13, {3, D}), C = draws(14, {3, D});
    ops::sum(ops::mul((*fc2)(ops::tanh((*fc1)(X))), C)).backward();
    ops::sum(ops::mul((*r2)(ops::tanh((*c1)(X))), C)).backward();
    EXPECT_FALSE(c1->weight.grad().defined());
    EXPECT_TRUE(close_relative(c1->lora->A.grad(), fc1->lora->A.grad(), 1e-10));
    EXPECT_TRUE(close_relative(c1->lora->B.grad(), c1->weight_spec.take(fc1->lora->B.grad()), 1e-10));
    EXPECT_TRUE(close_relative(r2->lora->A.grad(), r2->weight_spec.take(fc2->lora->A.grad()), 1e-10));
    EXPECT_TRUE(close_relative(r2->lora->B.grad(), fc2->lora->B.grad(), 1e-10));
  }
}

// ---- the zoo's models ----------------------------------------------------------------------

nn::zoo::GPTConfig gpt_config(bool tied) {
  nn::zoo::GPTConfig c;
  c.vocab_size = 16;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 16;
  c.weight_tying = tied;
  return c;
}

nn::zoo::LlamaConfig llama_config(int64_t kv_heads, bool tied) {
  nn::zoo::LlamaConfig c;
  c.vocab_size = 16;
  c.dim = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = kv_heads;
  c.hidden_dim = 24;
  c.max_seq_len = 8;
  c.tie_embeddings = tied;
  return c;
}

// One model built twice from the same seed: the dense one and the one to split.
template <typename M, typename C>
std::pair<std::shared_ptr<M>, std::shared_ptr<M>> twins(const C& config, DType dtype) {
  manual_seed(21);
  auto dense = std::make_shared<M>(config);
  manual_seed(21);
  auto split = std::make_shared<M>(config);
  dense->to(dtype);
  split->to(dtype);
  return {dense, split};
}

template <typename M>
void expect_split_model_matches(std::shared_ptr<M> dense, std::shared_ptr<M> tp, const ProcessGroupPtr& g, bool sp) {
  distributed::tensor_parallelize(*tp, g, {.sequence_parallel = sp});
  Generator gen(5);
  Tensor ids = ops::randint(0, 16, {2, 8}, DType::I64, &gen), targets = ops::randint(0, 16, {2, 8}, DType::I64, &gen);
  Tensor logits = (*dense)(ids);
  Tensor loss = ops::cross_entropy(logits.reshape({-1, 16}), targets.reshape({-1}));
  loss.backward();
  Tensor tl = (*tp)(ids);
  const int64_t v = 16 / g->size();
  EXPECT_TRUE(close_relative(tl, logits.narrow(-1, g->rank() * v, v), 1e-10));
  Tensor tloss = distributed::vocab_parallel_cross_entropy(tl, targets, g);
  EXPECT_TRUE(close_relative(tloss, loss, 1e-10));
  tloss.backward();
  expect_grads_match(*tp, *dense, 1e-10);
}

TEST(TensorParallel, GptEqualsTheDenseOne) {
  for (const ProcessGroupPtr& g : model_parallel_groups())
    for (bool tied : {true, false})
      for (bool sp : {false, true}) {
        SCOPED_TRACE("T = " + std::to_string(g->size()) + (tied ? ", tied" : "") + (sp ? ", sequence parallel" : ""));
        auto [dense, tp] = twins<nn::zoo::GPT>(gpt_config(tied), DType::F64);
        expect_split_model_matches(dense, tp, g, sp);
      }
}

// Key/value heads: 4 (they divide by every T here), 2 and 1 (each held by
// several ranks when T exceeds them).
TEST(TensorParallel, LlamaEqualsTheDenseOneForEveryKeyValueLayout) {
  for (const ProcessGroupPtr& g : model_parallel_groups())
    for (int64_t kv : {4, 2, 1})
      for (bool sp : {false, true}) {
        SCOPED_TRACE("T = " + std::to_string(g->size()) + ", kv heads " + std::to_string(kv) +
                     (sp ? ", sequence parallel" : ""));
        auto [dense, tp] = twins<nn::zoo::Llama>(llama_config(kv, kv == 2), DType::F64);
        expect_split_model_matches(dense, tp, g, sp);
      }
}

// 20 AdamW steps in f32: the split model's losses equal the dense model's.
template <typename M, typename C>
void expect_same_training(const C& config, const ProcessGroupPtr& g, bool sp, bool lora) {
  auto [dense, tp] = twins<M>(config, DType::F32);
  auto add_lora = [](nn::Module& m) {
    manual_seed(33);
    for (auto& [name, sub] : m.named_modules())
      if (auto* l = dynamic_cast<nn::Linear*>(sub); l && (name.ends_with("q_proj") || name.ends_with("v_proj")))
        l->add_lora(2, 4.0);
  };
  if (lora) {
    add_lora(*dense);
    add_lora(*tp);
    for (auto* m : {dense.get(), tp.get()})
      for (auto& [name, p] : m->named_parameters())
        if (name.find("lora_") == std::string::npos) p.requires_grad_(false);
  }
  distributed::tensor_parallelize(*tp, g, {.sequence_parallel = sp});
  auto adamw = [](nn::Module& m) {
    optim::ParamGroup pg;
    for (auto& [n, p] : m.named_parameters())
      if (p.requires_grad()) pg.params.push_back(p), pg.names.push_back(n);
    return optim::make_optimizer("adamw", {pg}, {{"lr", 0.01}});
  };
  auto opt_dense = adamw(*dense), opt_tp = adamw(*tp);
  Generator gen(6);
  for (int step = 0; step < 20; ++step) {
    Tensor ids = ops::randint(0, 16, {2, 8}, DType::I64, &gen), targets = ops::randint(0, 16, {2, 8}, DType::I64, &gen);
    Tensor loss = ops::cross_entropy((*dense)(ids).reshape({-1, 16}), targets.reshape({-1}));
    Tensor tloss = distributed::vocab_parallel_cross_entropy((*tp)(ids), targets, g);
    EXPECT_NEAR(tloss.item<double>(), loss.item<double>(), 1e-5) << "step " << step;
    opt_dense->zero_grad();
    opt_tp->zero_grad();
    loss.backward();
    tloss.backward();
    opt_dense->step();
    opt_tp->step();
  }
}

TEST(TensorParallel, GptAndLlamaTrainAsOneProcess) {
  for (const ProcessGroupPtr& g : model_parallel_groups()) {
    SCOPED_TRACE("T = " + std::to_string(g->size()));
    expect_same_training<nn::zoo::GPT>(gpt_config(true), g, false, false);
    expect_same_training<nn::zoo::GPT>(gpt_config(false), g, true, false);
    expect_same_training<nn::zoo::Llama>(llama_config(2, false), g, false, false);
    expect_same_training<nn::zoo::Llama>(llama_config(1, false), g, true, false);
    expect_same_training<nn::zoo::Llama>(llama_config(2, false), g, false, true);  // the LoRA recipe's layers
  }
}

// ---- random numbers ------------------------------------------------------------------------

// Dropout after a row-parallel exit (replicated) draws the same mask on every
// rank; inside a region (split heads) each rank its own.
TEST(TensorParallel, DropoutMasksAgreeWhereReplicatedAndDifferWhereSplit) {
  auto w = distributed::world();
  manual_seed(40);
  distributed::RegionRng rng(default_generator().seed(), w->rank());
  Tensor full = ones({256}, DType::F32);
  Tensor replicated = ops::dropout(full, 0.5, true);
  Tensor split;
  {
    auto fork = rng.fork();
    split = ops::dropout(full, 0.5, true);
  }
  Tensor after = ops::dropout(full, 0.5, true);  // the default stream continues where it was
  auto gathered = [&](const Tensor& t) { return ops::all_gather(t, w->name()).reshape({w->size(), -1}); };
  Tensor all_rep = gathered(replicated), all_split = gathered(split), all_after = gathered(after);
  for (int q = 1; q < w->size(); ++q) {
    EXPECT_TRUE(same(all_rep[q], all_rep[0]));
    EXPECT_TRUE(same(all_after[q], all_after[0]));
    EXPECT_FALSE(same(all_split[q], all_split[0]));
  }
  EXPECT_FALSE(same(replicated, after));
}

// ---- bad input -----------------------------------------------------------------------------

TEST(TensorParallel, ASizeTheGroupDoesNotDivideIsAnErrorNamingIt) {
  auto w = distributed::world();
  auto expect_error = [&](nn::Module& m, const std::string& words) {
    try {
      distributed::tensor_parallelize(m, w);
      ADD_FAILURE() << "no error; expected one naming " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  const int T = w->size();
  nn::zoo::GPTConfig g = gpt_config(true);
  g.n_head = T + 1;
  g.n_embd = 2 * (T + 1);
  nn::zoo::GPT heads(g);
  expect_error(heads, "n_head = " + std::to_string(T + 1));
  g = gpt_config(true);
  g.vocab_size = 4 * T + 1;
  nn::zoo::GPT vocab(g);
  expect_error(vocab, "vocab_size = " + std::to_string(4 * T + 1));
  nn::zoo::LlamaConfig l = llama_config(4, false);
  l.hidden_dim = 4 * T + 1;
  nn::zoo::Llama hidden(l);
  expect_error(hidden, "hidden_dim");
  if (T == 4) {
    l = llama_config(4, false);
    l.n_heads = 12;
    l.dim = 24;
    l.n_kv_heads = 3;  // neither divides by 4 nor divides it
    nn::zoo::Llama kv(l);
    expect_error(kv, "n_kv_heads = 3");
  }
  nn::Sequential seq;
  expect_error(seq, "cannot be split");
  // Nothing changed: the model still runs whole.
  Tensor ids = zeros({1, 4}, DType::I64);
  EXPECT_EQ((heads)(ids).size(-1), gpt_config(true).vocab_size);
}

}  // namespace
}  // namespace tessera
