// Compiled training: the backward-kernel ops, training captures and
// compile_train_step against eager training.
#include "tessera/compile/compile.h"
#include "tessera/nn/nn.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/optim/optimizer.h"
#include "compile/graph_test_util.h"
#include "test_util.h"

namespace tessera {
namespace {

using namespace compile;
using testing::count_op;
using testing::rand_f64;
using namespace ops;
namespace zoo = nn::zoo;

// The gradients autograd gives for `fn` at `inputs` (each set to require grad)
// with the output gradient `g`.
TensorList vjp(const std::function<Tensor(const TensorList&)>& fn, TensorList inputs, const Tensor& g) {
  for (Tensor& t : inputs)
    if (t.defined()) t = t.detach().requires_grad_();
  Tensor y = fn(inputs);
  TensorList want;
  for (const Tensor& t : inputs)
    if (t.defined()) want.push_back(t);
  return autograd::grad({y}, want, {g});
}

// ---- the backward kernels as ops: each equals the gradient autograd computes ----

TEST(BackwardOps, Activations) {
  Tensor x = rand_f64({4, 7}, -3, 3, 30), g = rand_f64({4, 7}, -1, 1, 31);
  struct Case {
    const char* function;
    std::function<Tensor(const Tensor&)> f;
    bool saves_output;
  };
  for (const Case& c : {Case{"relu", [](const Tensor& t) { return relu(t); }, true},
                        Case{"gelu", [](const Tensor& t) { return gelu(t); }, false},
                        Case{"gelu_tanh", [](const Tensor& t) { return gelu(t, "tanh"); }, false},
                        Case{"tanh", [](const Tensor& t) { return tanh(t); }, true},
                        Case{"silu", [](const Tensor& t) { return silu(t); }, false}}) {
    Tensor want = vjp([&](const TensorList& in) { return c.f(in[0]); }, {x}, g)[0];
    EXPECT_CLOSE(unary_backward(g, c.saves_output ? c.f(x) : x, c.function), want, 1e-12, 1e-14) << c.function;
  }
  EXPECT_NE(testing::error_of([&] { unary_backward(g, x, "softmax"); }).find("function must be relu, gelu"),
            std::string::npos);
}

TEST(BackwardOps, SoftmaxAndLogSoftmax) {
  Tensor x = rand_f64({3, 5, 4}, -2, 2, 1), g = rand_f64({3, 5, 4}, -1, 1, 2);
  for (bool log : {false, true})
    for (int64_t dim : {-1, 1}) {
      auto f = [&](const TensorList& in) { return log ? log_softmax(in[0], dim) : softmax(in[0], dim); };
      Tensor want = vjp(f, {x}, g)[0];
      Tensor y = f({x});
      EXPECT_CLOSE(softmax_backward(g, y, dim, log), want, 1e-12, 1e-12);
    }
  EXPECT_NE(testing::error_of([&] { softmax_backward(g, x.slice(0, 0, 2), -1); }).find("does not match the output"),
            std::string::npos);
}

TEST(BackwardOps, LayerNormAndRmsNorm) {
  Tensor x = rand_f64({4, 3, 6}, -2, 2, 3), g = rand_f64({4, 3, 6}, -1, 1, 4);
  Tensor w = rand_f64({3, 6}, 0.5, 1.5, 5), b = rand_f64({3, 6}, -1, 1, 6);
  TensorList want = vjp([&](const TensorList& in) { return layer_norm(in[0], {3, 6}, in[1], in[2], 1e-5); }, {x, w, b}, g);
  TensorList got = layer_norm_backward(g, x, {3, 6}, w, 1e-5, false);
  for (int i = 0; i < 3; ++i) EXPECT_CLOSE(got[i], want[i], 1e-10, 1e-12) << i;
  Tensor w6 = rand_f64({6}, 0.5, 1.5, 7);
  want = vjp([&](const TensorList& in) { return rms_norm(in[0], {6}, in[1], 1e-6); }, {x, w6}, g);
  got = layer_norm_backward(g, x, {6}, w6, 1e-6, true);
  EXPECT_CLOSE(got[0], want[0], 1e-10, 1e-12);
  EXPECT_CLOSE(got[1], want[1], 1e-10, 1e-12);
}

TEST(BackwardOps, BatchNormTrainingAndEval) {
  Tensor x = rand_f64({4, 3, 5, 5}, -2, 2, 8), g = rand_f64({4, 3, 5, 5}, -1, 1, 9);
  Tensor w = rand_f64({3}, 0.5, 1.5, 10), b = rand_f64({3}, -1, 1, 11);
  Tensor rm = rand_f64({3}, -0.5, 0.5, 12), rv = rand_f64({3}, 0.5, 2, 13);
  for (bool training : {true, false}) {
    TensorList want = vjp([&](const TensorList& in) {
      return batch_norm(in[0], rm.clone(), rv.clone(), in[1], in[2], training, 0.1, 1e-5);
    }, {x, w, b}, g);
    TensorList got = batch_norm_backward(g, x, rm, rv, w, training, 1e-5);
    for (int i = 0; i < 3; ++i) EXPECT_CLOSE(got[i], want[i], 1e-10, 1e-12) << "training " << training << " grad " << i;
  }
}

TEST(BackwardOps, ConvolutionAndTransposedConvolution) {
  Tensor x = rand_f64({2, 4, 7, 6}, -1, 1, 14), w = rand_f64({6, 2, 3, 3}, -1, 1, 15), b = rand_f64({6}, -1, 1, 16);
  Conv2dOptions o;
  o.stride = {2, 1};
  o.padding = {1, 0};
  o.groups = 2;
  Tensor y = conv2d(x, w, b, o);
  Tensor g = rand_f64(y.shape(), -1, 1, 17);
  TensorList want = vjp([&](const TensorList& in) { return conv2d(in[0], in[1], in[2], o); }, {x, w, b}, g);
  TensorList got = convolution_backward(g, x, w, {2, 1}, {1, 0}, {1, 0}, {1, 1}, 2, false);
  for (int i = 0; i < 3; ++i) EXPECT_CLOSE(got[i], want[i], 1e-10, 1e-12) << i;

  Tensor xt = rand_f64({2, 4, 5, 5}, -1, 1, 18), wt = rand_f64({4, 3, 3, 3}, -1, 1, 19), bt = rand_f64({3}, -1, 1, 20);
  Tensor yt = conv_transpose2d(xt, wt, bt, {2, 2}, {1, 1}, {1, 1});
  Tensor gt_ = rand_f64(yt.shape(), -1, 1, 21);
  want = vjp([&](const TensorList& in) { return conv_transpose2d(in[0], in[1], in[2], {2, 2}, {1, 1}, {1, 1}); },
             {xt, wt, bt}, gt_);
  got = convolution_backward(gt_, xt, wt, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1, true);
  for (int i = 0; i < 3; ++i) EXPECT_CLOSE(got[i], want[i], 1e-10, 1e-12) << "transposed " << i;
  EXPECT_NE(testing::error_of([&] {
              convolution_backward(g.slice(2, 0, 2), x, w, {2, 1}, {1, 0}, {1, 0}, {1, 1}, 2, false);
            }).find("but the convolution's output has shape"),
            std::string::npos);
}

TEST(BackwardOps, Pooling) {
  Tensor x = rand_f64({2, 3, 7, 7}, -1, 1, 22);
  auto [y, idx] = max_pool2d_with_indices(x, {3, 3}, {2, 2}, {1, 1});
  Tensor g = rand_f64(y.shape(), -1, 1, 23);
  Tensor want = vjp([&](const TensorList& in) { return max_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}); }, {x}, g)[0];
  EXPECT_CLOSE(max_pool2d_backward(g, idx, x.shape()), want, 0, 0);
  Tensor bad = idx.clone();
  bad.fill_(49);
  EXPECT_NE(testing::error_of([&] { max_pool2d_backward(g, bad, x.shape()); }).find("is outside the 7x7 input plane"),
            std::string::npos);

  for (bool ceil : {false, true}) {
    Tensor ya = avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, ceil, false);
    Tensor ga = rand_f64(ya.shape(), -1, 1, 24);
    want = vjp([&](const TensorList& in) { return avg_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}, ceil, false); }, {x}, ga)[0];
    EXPECT_CLOSE(avg_pool2d_backward(ga, x.shape(), {3, 3}, {2, 2}, {1, 1}, ceil, false), want, 1e-12, 1e-14);
  }
}

TEST(BackwardOps, Attention) {
  Tensor q = rand_f64({2, 3, 5, 4}, -1, 1, 25), k = rand_f64({2, 3, 6, 4}, -1, 1, 26), v = rand_f64({2, 3, 6, 3}, -1, 1, 27);
  Tensor mask = rand_f64({5, 6}, -1, 0, 28);
  Tensor g = rand_f64({2, 3, 5, 3}, -1, 1, 29);
  TensorList want = vjp([&](const TensorList& in) {
    return scaled_dot_product_attention(in[0], in[1], in[2], mask, 0.0, false, 0.3);
  }, {q, k, v}, g);
  TensorList got = attention_backward(g, q, k, v, mask, false, 0.3);
  for (int i = 0; i < 3; ++i) EXPECT_CLOSE(got[i], want[i], 1e-10, 1e-12) << i;
  Tensor kc = k.slice(2, 0, 5), vc = v.slice(2, 0, 5);
  want = vjp([&](const TensorList& in) { return scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.0, true); },
             {q, kc, vc}, g);
  got = attention_backward(g, q, kc, vc, {}, true, {});
  for (int i = 0; i < 3; ++i) EXPECT_CLOSE(got[i], want[i], 1e-10, 1e-12) << "causal " << i;
  // Given the forward's output and log-sum-exp, the same gradients.
  TensorList fwd = attention_with_lse(q, kc, vc, {}, true, {});
  EXPECT_CLOSE(fwd[0], scaled_dot_product_attention(q, kc, vc, {}, 0.0, true), 0, 0);
  EXPECT_EQ(fwd[1].shape(), (Shape{2, 3, 5}));
  got = attention_backward(g, q, kc, vc, {}, true, {}, fwd[0], fwd[1]);
  for (int i = 0; i < 3; ++i) EXPECT_CLOSE(got[i], want[i], 1e-10, 1e-12) << "given out and lse " << i;
  // The log-sum-exp of each row of the scaled, masked scores.
  Tensor scores = masked_fill(mul(matmul(q, kc.mT()), 0.5), triu(ones({5, 5}, DType::Bool), 1), -INFINITY);
  EXPECT_CLOSE(fwd[1], logsumexp(scores, {-1}), 1e-12, 1e-12);
  EXPECT_NE(testing::error_of([&] { attention_backward(g, q, kc, vc, {}, true, {}, fwd[0], Tensor()); })
                .find("pass the forward's out and lse together"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { attention_backward(g, q, kc, vc, {}, true, {}, fwd[0], fwd[1].to(DType::F32)); })
                .find("lse must be the forward's f64 log-sum-exp of shape [2, 3, 5]"),
            std::string::npos);
}

// ---- training captures and compile_train_step ----------------------------------------

// Trains `make()`'s model for `steps` steps eagerly and with compile_train_step
// from the same initial weights and random state; the losses and final weights agree.
void expect_compiled_training_matches(const std::function<std::shared_ptr<nn::Module>()>& make,
                                      const std::function<Tensor(nn::Module&, const TensorList&)>& loss_of,
                                      const std::function<TensorList(int)>& batch, int steps, double rtol,
                                      double atol = 1e-5, CompileOptions opts = {}) {
  manual_seed(7);
  auto eager = make();
  manual_seed(7);
  auto compiled = make();
  eager->train();
  compiled->train();
  optim::AdamW opt_e(eager->parameters(), optim::Options{{"lr", 1e-2}, {"weight_decay", 0.01}});
  optim::AdamW opt_c(compiled->parameters(), optim::Options{{"lr", 1e-2}, {"weight_decay", 0.01}});
  nn::Module* cm = compiled.get();
  TrainStep step = compile_train_step(compiled, [&, cm](const TensorList& b) { return loss_of(*cm, b); }, &opt_c,
                                      std::move(opts));
  for (int i = 0; i < steps; ++i) {
    TensorList b = batch(i);
    manual_seed(100 + i);
    opt_e.zero_grad();
    Tensor le = loss_of(*eager, b);
    le.backward();
    opt_e.step();
    manual_seed(100 + i);
    Tensor lc = step(b);
    EXPECT_NEAR(lc.item<double>(), le.item<double>(), rtol * std::abs(le.item<double>()) + 1e-6) << "step " << i;
  }
  auto pe = eager->named_parameters(), pc = compiled->named_parameters();
  ASSERT_EQ(pe.size(), pc.size());
  // atol: AdamW turns rounding noise in a gradient that is zero in exact
  // arithmetic (attention's key bias) into steps of size ~lr.
  for (size_t i = 0; i < pe.size(); ++i) EXPECT_CLOSE(pc[i].second, pe[i].second, rtol, atol) << pe[i].first;
  auto be = eager->named_buffers(), bc = compiled->named_buffers();
  for (size_t i = 0; i < be.size(); ++i)
    if (is_floating(be[i].second.dtype())) EXPECT_CLOSE(bc[i].second, be[i].second, rtol, 1e-5) << be[i].first;
  EXPECT_EQ(step.traces(), 1);
  verify(step.last()->graph());
}

TEST(TrainStep, MlpMatchesEagerForTenSteps) {
  Tensor x = randn({64, 20});
  Tensor y = randint(0, 5, {64});
  expect_compiled_training_matches(
      [] { return std::make_shared<zoo::MLP>(zoo::MLPConfig{20, {32, 32}, 5, "gelu", 0.1}); },
      [](nn::Module& m, const TensorList& b) { return cross_entropy(m(b[0]), b[1]); },
      [&](int i) { return TensorList{x.slice(0, (i % 4) * 16, (i % 4) * 16 + 16), y.slice(0, (i % 4) * 16, (i % 4) * 16 + 16)}; },
      10, 1e-4);
}

TEST(TrainStep, CnnWithBatchNormAndDropoutMatchesEager) {
  Tensor x = randn({32, 1, 12, 12});
  Tensor y = randint(0, 10, {32});
  expect_compiled_training_matches(
      [] {
        auto m = std::make_shared<nn::Sequential>();
        m->push_back(std::make_shared<nn::Conv2d>(1, 6, 3, 1, 1));
        m->push_back(std::make_shared<nn::BatchNorm2d>(6));
        m->push_back(std::make_shared<nn::ReLU>());
        m->push_back(std::make_shared<nn::MaxPool2d>(2));
        m->push_back(std::make_shared<nn::Conv2d>(6, 8, 3));
        m->push_back(std::make_shared<nn::AvgPool2d>(2));
        m->push_back(std::make_shared<nn::Flatten>());
        m->push_back(std::make_shared<nn::Dropout>(0.25));
        m->push_back(std::make_shared<nn::Linear>(8 * 2 * 2, 10));  // 12x12 -> 6x6 -> 4x4 -> 2x2
        return m;
      },
      [](nn::Module& m, const TensorList& b) { return cross_entropy(m(b[0]), b[1]); },
      [&](int i) { return TensorList{x.slice(0, (i % 2) * 16, (i % 2) * 16 + 16), y.slice(0, (i % 2) * 16, (i % 2) * 16 + 16)}; },
      10, 1e-4);
}

TEST(TrainStep, GptMatchesEagerAndTheGraphHoldsTheBackwardOps) {
  zoo::GPTConfig c;
  c.vocab_size = 32;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  Tensor tokens = randint(0, 32, {4, 13});
  auto loss_of = [](nn::Module& m, const TensorList& b) {
    Tensor logits = m(b[0]);
    return cross_entropy(logits.reshape({-1, logits.size(-1)}), b[1].reshape({-1}));
  };
  expect_compiled_training_matches(
      [c] { return std::make_shared<zoo::GPT>(c); }, loss_of,
      [&](int) { return TensorList{tokens.slice(1, 0, 12).contiguous(), tokens.slice(1, 1, 13).contiguous()}; }, 10,
      1e-4, 1e-3);

  manual_seed(0);
  auto m = std::make_shared<zoo::GPT>(c);
  nn::Module* mp = m.get();
  TrainStep step = compile_train_step(m, [&, mp](const TensorList& b) { return loss_of(*mp, b); });
  step({tokens.slice(1, 0, 12).contiguous(), tokens.slice(1, 1, 13).contiguous()});
  const Graph& g = step.last()->graph();
  EXPECT_EQ(count_op(g, "attention_backward"), 2);
  // The backward reads the forward's output and log-sum-exp as graph values:
  // it does not run the attention forward again.
  EXPECT_EQ(count_op(g, "attention_with_lse"), 2);
  for (const compile::Node* n : g.nodes())
    if (n->op_name() == "attention_backward") {
      ASSERT_EQ(n->inputs.size(), 7u);
      for (int i : {5, 6}) {
        ASSERT_TRUE(n->inputs[i] && n->inputs[i]->producer) << i;
        EXPECT_EQ(n->inputs[i]->producer->op_name(), "attention_with_lse") << i;
      }
    }
  EXPECT_EQ(count_op(g, "layer_norm_backward"), 5);
  EXPECT_EQ(count_op(g, "softmax_backward"), 1);  // cross_entropy's log_softmax
  EXPECT_GE(count_op(g, "fused_elementwise"), 2);  // gelu and its gradient among them
  // Without an optimizer the gradients accumulate, as with backward().
  EXPECT_TRUE(m->named_parameters()[0].second.grad().defined());
}

TEST(TrainStep, LeNetResNetsAndLlamaMatchEager) {
  auto ce = [](nn::Module& m, const TensorList& b) { return cross_entropy(m(b[0]), b[1]); };
  Tensor img = randn({8, 1, 12, 12}), img3 = randn({8, 3, 16, 16}), cls = randint(0, 10, {8});
  auto images = [&](const Tensor& x) {
    return [&, x](int i) { return TensorList{x.slice(0, (i % 2) * 4, (i % 2) * 4 + 4), cls.slice(0, (i % 2) * 4, (i % 2) * 4 + 4)}; };
  };
  zoo::LeNetConfig lc;
  lc.image_size = 12, lc.channels = {4, 8}, lc.hidden = 16;
  expect_compiled_training_matches([lc] { return std::make_shared<zoo::LeNet>(lc); }, ce, images(img), 10, 1e-4);
  zoo::ResNetConfig r18;
  r18.widths = {4, 8, 8, 16};
  expect_compiled_training_matches([r18] { return std::make_shared<zoo::ResNet>(r18); }, ce, images(img3), 10, 1e-4);
  zoo::ResNetConfig r50 = zoo::ResNetConfig::resnet50();
  r50.layers = {1, 1, 1, 1};
  r50.widths = {4, 8, 8, 16};
  expect_compiled_training_matches([r50] { return std::make_shared<zoo::ResNet>(r50); }, ce, images(img3), 10, 1e-4);

  zoo::LlamaConfig llc;
  llc.vocab_size = 16, llc.dim = 16, llc.n_layers = 2, llc.n_heads = 4, llc.n_kv_heads = 2, llc.hidden_dim = 24;
  llc.max_seq_len = 16;
  Tensor tokens = randint(0, 16, {3, 10});
  expect_compiled_training_matches(
      [llc] { return std::make_shared<zoo::Llama>(llc); },
      [](nn::Module& m, const TensorList& b) {
        Tensor logits = m(b[0]);
        return cross_entropy(logits.reshape({-1, logits.size(-1)}), b[1].reshape({-1}));
      },
      [&](int) { return TensorList{tokens.slice(1, 0, 9).contiguous(), tokens.slice(1, 1, 10).contiguous()}; }, 10,
      1e-4, 1e-3);
}

TEST(TrainStep, DynamicBatchDoesNotRetraceAndGradientsAccumulate) {
  manual_seed(3);
  auto m = std::make_shared<zoo::MLP>(zoo::MLPConfig{6, {8}, 3, "relu", 0.0});
  nn::Module* mp = m.get();
  TrainStep step = compile_train_step(m, [mp](const TensorList& b) { return mse_loss((*mp)(b[0]), b[1]); }, nullptr,
                                      {.dynamic = {{0, 0, "B"}, {1, 0, "B"}}});
  Tensor x = randn({5, 6}), y = randn({5, 3});
  step({x, y});
  step({x.slice(0, 0, 3), y.slice(0, 0, 3)});
  EXPECT_EQ(step.traces(), 1);
  // The two calls' gradients summed, against eager.
  TensorList want;
  for (const Tensor& p : m->parameters()) want.push_back(p.grad().clone());
  for (Tensor p : m->parameters()) p.set_grad(Tensor());
  mse_loss((*m)(x), y).backward();
  mse_loss((*m)(x.slice(0, 0, 3)), y.slice(0, 0, 3)).backward();
  TensorList ps = m->parameters();
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_CLOSE(want[i], ps[i].grad(), 1e-5, 1e-6);
}

TEST(TrainStep, FrozenParametersGetNoGradient) {
  manual_seed(4);
  auto m = std::make_shared<zoo::MLP>(zoo::MLPConfig{6, {8}, 3, "relu", 0.0});
  TensorList ps = m->parameters();
  ps[0].requires_grad_(false);
  nn::Module* mp = m.get();
  TrainStep step = compile_train_step(m, [mp](const TensorList& b) { return mean(square((*mp)(b[0]))); });
  step({randn({4, 6})});
  EXPECT_FALSE(ps[0].grad().defined());
  EXPECT_TRUE(ps[1].grad().defined());
}

TEST(TrainStep, ClearErrors) {
  auto m = std::make_shared<zoo::MLP>(zoo::MLPConfig{6, {8}, 3, "relu", 0.0});
  nn::Module* mp = m.get();
  TrainStep not_scalar = compile_train_step(m, [mp](const TensorList& b) { return (*mp)(b[0]); });
  EXPECT_NE(testing::error_of([&] { not_scalar({randn({4, 6})}); }).find("must return a floating-point tensor with one "
                                                                          "element, got f32 [4, 3]"),
            std::string::npos);
  TrainStep no_grad = compile_train_step(m, [mp](const TensorList& b) {
    NoGradGuard ng;
    return (*mp)(b[0]).sum();
  });
  EXPECT_NE(testing::error_of([&] { no_grad({randn({4, 6})}); }).find("does not depend on any parameter"),
            std::string::npos);
  // Attention dropout draws its mask inside the kernel: not capturable.
  auto attn = std::make_shared<nn::Linear>(4, 4);
  nn::Linear* ap = attn.get();
  TrainStep dropout = compile_train_step(attn, [ap](const TensorList& b) {
    Tensor h = (*ap)(b[0]);
    return scaled_dot_product_attention(h, h, h, {}, 0.5).sum();
  });
  EXPECT_NE(testing::error_of([&] { dropout({randn({2, 3, 4})}); }).find("attention dropout cannot be captured"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
