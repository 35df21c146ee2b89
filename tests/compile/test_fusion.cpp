// Elementwise fusion: the rewrite, bitwise agreement with eager for every op
// that can join a fused kernel, and the fused kernel's own input checks.
#include <cstdio>
#include <iostream>
#include <thread>

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/cpu/conv.h"
#include "backend/cpu/gemm.h"
#include "tessera/compile/compile.h"
#include "tessera/compile/inspect.h"
#include "tessera/compile/model.h"
#include "tessera/nn/zoo/zoo.h"
#include "compile/graph_test_util.h"
#include "test_util.h"

namespace tessera {
namespace {

using namespace compile;
using testing::count_op;
using namespace ops;

Graph fused_graph(const Function& fn, const TensorList& example) {
  Graph g = capture(fn, example);
  fuse_elementwise(g);
  verify(g, "fuse-elementwise");
  return g;
}

// Exact agreement: the fused kernel runs the eager ops' own loops.
void expect_bitwise(const Function& fn, const TensorList& example, const TensorList& fresh) {
  Graph g = fused_graph(fn, example);
  TensorList got = Executable(std::move(g)).run(fresh), want = fn(fresh);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_CLOSE(got[i], want[i], 0, 0);
}

TEST(Fusion, ChainWithBroadcastBecomesOneKernel) {
  auto fn = [](const TensorList& in) {
    return TensorList{relu(add(mul(in[0], 2.0), in[1]))};  // x*2 + bias, relu
  };
  Graph g = fused_graph(fn, {randn({4, 8}), randn({8})});
  EXPECT_EQ(g.num_nodes(), 1) << dump(g);
  EXPECT_EQ(count_op(g, "fused_elementwise"), 1);
  std::string text = dump(g);
  EXPECT_NE(text.find("program='r0 = in0; r1 = const 2; r2 = Mul r0 r1; r3 = in1; r4 = Add r2 r3; r5 = Relu r4; "
                      "out0 = r5'"),
            std::string::npos)
      << text;
  expect_bitwise(fn, {randn({4, 8}), randn({8})}, {randn({4, 8}), randn({8})});
}

TEST(Fusion, EveryFusibleOpMatchesEagerBitwise) {
  using F = std::function<Tensor(const Tensor&)>;
  std::vector<std::pair<std::string, F>> unary = {
      {"neg", [](auto& x) { return neg(x); }}, {"abs", [](auto& x) { return abs(x); }},
      {"exp", [](auto& x) { return exp(x); }}, {"exp2", [](auto& x) { return exp2(x); }},
      {"log", [](auto& x) { return log(abs(x)); }}, {"log2", [](auto& x) { return log2(abs(x)); }},
      {"log1p", [](auto& x) { return log1p(abs(x)); }}, {"expm1", [](auto& x) { return expm1(x); }},
      {"sqrt", [](auto& x) { return sqrt(abs(x)); }}, {"rsqrt", [](auto& x) { return rsqrt(abs(x)); }},
      {"square", [](auto& x) { return square(x); }}, {"sin", [](auto& x) { return sin(x); }},
      {"cos", [](auto& x) { return cos(x); }}, {"tan", [](auto& x) { return tan(x); }},
      {"tanh", [](auto& x) { return tanh(x); }}, {"sigmoid", [](auto& x) { return sigmoid(x); }},
      {"relu", [](auto& x) { return relu(x); }}, {"silu", [](auto& x) { return silu(x); }},
      {"mish", [](auto& x) { return mish(x); }}, {"reciprocal", [](auto& x) { return reciprocal(x); }},
      {"erf", [](auto& x) { return erf(x); }}, {"sign", [](auto& x) { return sign(x); }},
      {"floor", [](auto& x) { return floor(x); }}, {"ceil", [](auto& x) { return ceil(x); }},
      {"round", [](auto& x) { return round(x); }}, {"trunc", [](auto& x) { return trunc(x); }},
      {"leaky_relu", [](auto& x) { return leaky_relu(x, 0.3); }}, {"elu", [](auto& x) { return elu(x, 0.7); }},
      {"gelu", [](auto& x) { return gelu(x); }}, {"gelu_tanh", [](auto& x) { return gelu(x, "tanh"); }},
      {"softplus", [](auto& x) { return softplus(x, 2.0, 3.0); }},
      {"hardtanh", [](auto& x) { return hardtanh(x, -0.5, 0.25); }},
      {"clamp", [](auto& x) { return clamp(x, Scalar(-0.3), std::nullopt); }},
      {"clamp_max", [](auto& x) { return clamp(x, std::nullopt, Scalar(0.1)); }},
      {"pow", [](auto& x) { return pow(abs(x), 1.7); }}, {"rpow", [](auto& x) { return pow(2.5, x); }},
  };
  Tensor x = mul(randn({5, 37}), 3.0), fresh = mul(randn({5, 37}), 3.0);
  for (const auto& [name, f] : unary) {
    SCOPED_TRACE(name);
    // Followed by a second op, so there is a group to fuse.
    auto fn = [f = f](const TensorList& in) { return TensorList{add(f(in[0]), 1.0)}; };
    Graph g = fused_graph(fn, {x});
    EXPECT_EQ(count_op(g, "fused_elementwise"), 1) << dump(g);
    expect_bitwise(fn, {x}, {fresh});
  }
  using G = std::function<Tensor(const Tensor&, const Tensor&)>;
  std::vector<std::pair<std::string, G>> binary = {
      {"add", [](auto& a, auto& b) { return add(a, b); }}, {"sub", [](auto& a, auto& b) { return sub(a, b); }},
      {"mul", [](auto& a, auto& b) { return mul(a, b); }}, {"div", [](auto& a, auto& b) { return div(a, b); }},
      {"maximum", [](auto& a, auto& b) { return maximum(a, b); }},
      {"minimum", [](auto& a, auto& b) { return minimum(a, b); }},
      {"atan2", [](auto& a, auto& b) { return atan2(a, b); }},
      {"pow", [](auto& a, auto& b) { return pow(abs(a), b); }},
      {"where", [](auto& a, auto& b) { return where(gt(a, b), a, b); }},
  };
  Tensor y = randn({1, 37}), fresh_y = randn({1, 37});  // broadcast along dim 0
  for (const auto& [name, f] : binary) {
    SCOPED_TRACE(name);
    auto fn = [f = f](const TensorList& in) { return TensorList{exp(f(in[0], in[1]))}; };
    Graph g = fused_graph(fn, {x, y});
    EXPECT_EQ(count_op(g, "fused_elementwise"), 1) << dump(g);
    expect_bitwise(fn, {x, y}, {fresh, fresh_y});
  }
}

TEST(Fusion, ChainsMeetingInOneOpMerge) {
  auto fn = [](const TensorList& in) { return TensorList{add(exp(in[0]), tanh(in[1]))}; };
  Graph g = fused_graph(fn, {randn({5}), randn({5})});
  EXPECT_EQ(g.num_nodes(), 1) << dump(g);
  expect_bitwise(fn, {randn({5}), randn({5})}, {randn({5}), randn({5})});
}

TEST(Fusion, ValuesUsedOutsideBecomeExtraOutputs) {
  auto fn = [](const TensorList& in) {
    Tensor a = exp(in[0]);
    Tensor b = mul(a, in[0]);
    Tensor s = sum(a);  // a is read by a non-fusible op
    return TensorList{b, s};
  };
  Graph g = fused_graph(fn, {randn({6})});
  ASSERT_EQ(count_op(g, "fused_elementwise"), 1) << dump(g);
  for (const Node* n : g.nodes())
    if (n->op_name() == "fused_elementwise") EXPECT_EQ(n->outputs.size(), 2u);
  expect_bitwise(fn, {randn({6})}, {randn({6})});
}

TEST(Fusion, BroadcastIntermediateIsComputedAtTheFullShape) {
  auto fn = [](const TensorList& in) { return TensorList{mul(exp(in[0]), in[1])}; };  // exp on [3, 1]
  Graph g = fused_graph(fn, {randn({3, 1}), randn({3, 4})});
  EXPECT_EQ(g.num_nodes(), 1) << dump(g);
  expect_bitwise(fn, {randn({3, 1}), randn({3, 4})}, {randn({3, 1}), randn({3, 4})});
  // ...but not when the small value is also needed at its own shape.
  auto fn2 = [](const TensorList& in) {
    Tensor e = exp(in[0]);
    return TensorList{mul(e, in[1]), e};
  };
  Graph g2 = fused_graph(fn2, {randn({3, 1}), randn({3, 4})});
  EXPECT_EQ(count_op(g2, "exp"), 1) << dump(g2);
  expect_bitwise(fn2, {randn({3, 1}), randn({3, 4})}, {randn({3, 1}), randn({3, 4})});
}

TEST(Fusion, NeverCreatesACycle) {
  // a -> matmul -> b: a and b are pointwise but b also reads the matmul, which
  // reads a. One kernel for both would need the matmul inside it.
  auto fn = [](const TensorList& in) {
    Tensor a = relu(in[0]);
    Tensor m = matmul(a, in[1]);
    return TensorList{add(mul(a, 2.0), m)};
  };
  Graph g = fused_graph(fn, {randn({3, 3}), randn({3, 3})});
  expect_bitwise(fn, {randn({3, 3}), randn({3, 3})}, {randn({3, 3}), randn({3, 3})});
}

TEST(Fusion, OnlyInInferenceGraphs) {
  auto f = compile::compile([](const TensorList& in) { return TensorList{relu(add(in[0], 1.0))}; });
  Tensor x = randn({4});
  {
    NoGradGuard ng;
    f(x);
    EXPECT_EQ(count_op(f.last()->graph(), "fused_elementwise"), 1);
  }
  Tensor w = randn({4}).requires_grad_();
  Tensor y = f(w)[0];
  EXPECT_EQ(count_op(f.last()->graph(), "fused_elementwise"), 0);
  y.sum().backward();
  EXPECT_TRUE(w.grad().defined());
}

TEST(Fusion, FusedKernelChecksItsProgram) {
  Tensor x = randn({3});
  auto err = [&](const std::string& p) { return testing::error_of([&] { fused_elementwise({x}, p); }); };
  EXPECT_NE(err("r0 = in0; r1 = Nope r0; out0 = r1").find("unknown kernel 'Nope'"), std::string::npos);
  EXPECT_NE(err("r0 = in0; r1 = Exp r2; out0 = r1").find("read before it is written"), std::string::npos);
  EXPECT_NE(err("r0 = in0; r0 = Exp r0; out0 = r0").find("written twice"), std::string::npos);
  EXPECT_NE(err("r0 = in0; r1 = Eq r0 r0; out0 = r1").find("not a float-to-float kernel"), std::string::npos);
  EXPECT_NE(err("r0 = in0; r1 = in1; r2 = Add r0 r1; out0 = r2").find("reads 2 inputs, got 1"), std::string::npos);
  EXPECT_NE(err("r0 = in0").find("stores no output"), std::string::npos);
  EXPECT_NE(err("r0 = in0; r1 = const x1; out0 = r1").find("expected a number"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { fused_elementwise({x, randn({4})}, "r0 = in0; r1 = in1; r2 = Add r0 r1; out0 = r2"); })
                .find("broadcast"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// ---- epilogue fusion -------------------------------------------------------------

TEST(EpilogueFusion, LinearActivationAndResidualBecomeOneGemm) {
  Tensor w1 = randn({16, 8}), b1 = randn({16}), w2 = randn({8, 16}), b2 = randn({8});
  for (const char* act : {"relu", "gelu", "gelu_tanh", "silu", "tanh"}) {
    auto fn = [&, act](const TensorList& in) {
      Tensor h = linear(in[0], w1, b1);
      std::string a = act;
      h = a == "relu" ? relu(h) : a == "gelu" ? gelu(h) : a == "gelu_tanh" ? gelu(h, "tanh") : a == "silu" ? silu(h) : tanh(h);
      return TensorList{add(in[0], linear(h, w2, b2))};  // a residual block
    };
    Graph g = capture(fn, {randn({3, 5, 8})});
    EXPECT_EQ(fuse_epilogues(g), 2) << act;
    verify(g, "fuse-epilogue");
    EXPECT_EQ(count_op(g, "fused_linear"), 2) << dump(g);
    EXPECT_EQ(g.num_nodes(), 2) << dump(g);
    std::string text = dump(g);
    EXPECT_NE(text.find("activation='" + std::string(act) + "'"), std::string::npos) << text;
    Tensor x = randn({3, 5, 8});
    // oneDNN's activations and summation order differ from the separate ops by rounding only.
    EXPECT_CLOSE(Executable(std::move(g)).run({x})[0], fn({x})[0], 1e-5, 1e-5) << act;
  }
}

TEST(EpilogueFusion, LeavesValuesOtherNodesNeed) {
  Tensor w = randn({6, 4});
  // The pre-activation is also an output: fusing would lose it.
  auto fn = [&](const TensorList& in) {
    Tensor h = linear(in[0], w);
    return TensorList{relu(h), h};
  };
  Graph g = capture(fn, {randn({2, 4})});
  EXPECT_EQ(fuse_epilogues(g), 0) << dump(g);
  // f64 stays as it is; so does a residual of another shape (a broadcast add).
  Tensor w64 = randn({6, 4}).to(DType::F64), r = randn({6});
  Graph g64 = capture([&](const TensorList& in) { return TensorList{relu(linear(in[0], w64))}; }, {randn({2, 4}).to(DType::F64)});
  EXPECT_EQ(fuse_epilogues(g64), 0);
  Graph gb = capture([&](const TensorList& in) { return TensorList{add(linear(in[0], w), r)}; }, {randn({2, 4})});
  EXPECT_EQ(fuse_epilogues(gb), 0) << dump(gb);
}

TEST(EpilogueFusion, CompiledModelsUseItAndAgree) {
  manual_seed(5);
  auto m = std::make_shared<nn::zoo::MLP>(nn::zoo::MLPConfig{12, {16, 16}, 4, "gelu", 0.0});
  m->eval();
  NoGradGuard ng;
  auto f = compile::compile(m);
  Tensor x = randn({5, 12});
  EXPECT_CLOSE(f(x), (*m)(x), 1e-5, 1e-5);
  // The two hidden layers fuse their gelu; the output layer's plain linear
  // becomes a fused_linear too, to read its weights packed (inference).
  EXPECT_EQ(count_op(f.last()->graph(), "fused_linear"), 3) << dump(f.last()->graph());
  EXPECT_EQ(count_op(f.last()->graph(), "linear") + count_op(f.last()->graph(), "gelu"), 0) << dump(f.last()->graph());
  EXPECT_NE(testing::error_of([&] { fused_linear(x, randn({3, 12}), {}, {}, "softmax"); }).find("activation must be"),
            std::string::npos);
}

Tensor activate(const Tensor& h, const std::string& a) {
  return a == "relu" ? relu(h) : a == "gelu" ? gelu(h) : a == "gelu_tanh" ? gelu(h, "tanh") : a == "silu" ? silu(h) : tanh(h);
}

TEST(EpilogueFusion, ConvResidualAndActivationBecomeOneConvolution) {
  Tensor w1 = randn({8, 4, 3, 3}), b1 = randn({8}), w2 = randn({4, 8, 3, 3});
  Conv2dOptions same;
  same.padding = {1, 1};
  for (const char* act : {"relu", "gelu", "gelu_tanh", "silu", "tanh"}) {
    // A ResNet basic block: conv -> act, conv -> + identity -> act.
    auto fn = [&, act](const TensorList& in) {
      Tensor h = activate(conv2d(in[0], w1, b1, same), act);
      return TensorList{activate(add(conv2d(h, w2, {}, same), in[0]), act)};
    };
    Graph g = capture(fn, {randn({2, 4, 9, 7})});
    EXPECT_EQ(fuse_epilogues(g), 2) << act;
    verify(g, "fuse-epilogue");
    EXPECT_EQ(count_op(g, "fused_conv2d"), 2) << dump(g);
    EXPECT_EQ(g.num_nodes(), 2) << dump(g);
    Tensor x = randn({2, 4, 9, 7});
    EXPECT_CLOSE(Executable(std::move(g)).run({x})[0], fn({x})[0], 1e-4, 1e-5) << act;
  }
  // Only a residual (no activation), strided and grouped convolutions, no bias.
  Tensor wg = randn({6, 2, 3, 3}), r = randn({2, 6, 4, 4});
  Conv2dOptions o;
  o.stride = {2, 2};
  o.padding = {1, 1};
  o.groups = 2;
  auto fn = [&](const TensorList& in) { return TensorList{add(r, conv2d(in[0], wg, {}, o))}; };
  Graph g = capture(fn, {randn({2, 4, 8, 8})});
  EXPECT_EQ(fuse_epilogues(g), 1);
  EXPECT_EQ(count_op(g, "fused_conv2d"), 1) << dump(g);
  Tensor x = randn({2, 4, 8, 8});
  EXPECT_CLOSE(Executable(std::move(g)).run({x})[0], fn({x})[0], 1e-4, 1e-5);
}

TEST(EpilogueFusion, FusedConvMatchesTheOpsInDouble) {
  // The fused f32 primitive against the plain ops in f64 (fused_conv2d's own
  // fallback for dtypes oneDNN does not fuse).
  Tensor x = randn({2, 3, 10, 10}), w = randn({5, 3, 3, 3}), b = randn({5}), r = randn({2, 5, 8, 8});
  for (const char* act : {"none", "relu", "silu"}) {
    Tensor got = fused_conv2d(x, w, b, r, {}, act);
    Tensor want = fused_conv2d(x.to(DType::F64), w.to(DType::F64), b.to(DType::F64), r.to(DType::F64), {}, act);
    EXPECT_CLOSE(got, want.to(DType::F32), 1e-4, 1e-5) << act;
  }
  // Without a residual, and a broadcast residual (not fusible: the ops run).
  Tensor rb = randn({5, 1, 1});
  EXPECT_CLOSE(fused_conv2d(x, w, b, {}, {}, "relu"), relu(conv2d(x, w, b)), 1e-5, 1e-6);
  EXPECT_CLOSE(fused_conv2d(x, w, b, rb, {}, "none"), add(conv2d(x, w, b), rb), 1e-5, 1e-6);
  EXPECT_NE(testing::error_of([&] { fused_conv2d(x, w, b, {}, {}, "softmax"); }).find("activation must be"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { fused_conv2d(x, randn({5, 2, 3, 3}), b, {}, {}, "relu"); }).find("input channels"),
            std::string::npos);
}

TEST(EpilogueFusion, CompiledResNetFusesEveryBlockTail) {
  manual_seed(6);
  nn::zoo::ResNetConfig c;
  c.widths = {8, 16, 16, 32};
  auto net = std::make_shared<nn::zoo::ResNet>(c);
  net->eval();
  NoGradGuard ng;
  auto f = compile::compile(net);
  Tensor x = randn({2, 3, 32, 32});
  EXPECT_CLOSE(f(x), (*net)(x), 1e-4, 1e-4);
  const Graph& g = f.last()->graph();
  // The stem and both convs of each of the 8 basic blocks fuse; the 3
  // projection shortcuts (conv + folded BN) have no epilogue, and become
  // fused_conv2d too when the layout pass blocks their activations.
  bool blocked = cpu::conv_activation_block() > 0;
  EXPECT_EQ(count_op(g, "fused_conv2d"), blocked ? 20 : 17) << dump(g);
  EXPECT_EQ(count_op(g, "conv2d"), blocked ? 0 : 3) << dump(g);
  EXPECT_EQ(count_op(g, "relu"), 0) << dump(g);
}

// ---- layout --------------------------------------------------------------------

int blocked_convs(const Graph& g, const char* which) {
  int n = 0;
  for (const Node* node : g.nodes()) n += node->op_name() == "fused_conv2d" && node->attrs.i(which) > 0;
  return n;
}

// A small ResNet (widths 16-32: whole channel blocks at 8 (AVX2) and 16 (AVX-512); CIFAR stem, 20 convs) in eval mode, and its
// inference capture with a dynamic batch.
std::unique_ptr<nn::zoo::ResNet> small_resnet(uint64_t seed) {
  manual_seed(seed);
  nn::zoo::ResNetConfig c;
  c.widths = {16, 16, 32, 32};
  auto net = std::make_unique<nn::zoo::ResNet>(c);
  net->eval();
  return net;
}
Graph capture_dynamic_batch(nn::Module& net) {
  NoGradGuard ng;
  CaptureOptions co;
  co.dynamic = {{0, 0, "N"}};
  return capture([&](const TensorList& in) { return TensorList{net(in[0])}; }, {randn({2, 3, 32, 32})},
                 net.named_parameters(), co);
}

TEST(Layout, ResNetConvsHandEachOtherBlockedActivations) {
  const int64_t b = cpu::conv_activation_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers NCHW on this CPU: the pass has nothing to do";
  auto net = small_resnet(7);
  NoGradGuard ng;
  Graph g = capture_dynamic_batch(*net);
  optimize(g, {.disable = {"layout"}});
  Graph blocked = g.clone();
  EXPECT_EQ(block_conv_activations(blocked), 20);
  verify(blocked, "layout");
  // Every conv but the stem reads blocked input; every conv writes blocks:
  // the last one too, as its residual (the shortcut) is blocked, and its sum
  // is converted to NCHW for the pooling.
  EXPECT_EQ(blocked_convs(blocked, "input_block"), 19) << dump(blocked);
  EXPECT_EQ(blocked_convs(blocked, "output_block"), 20) << dump(blocked);
  EXPECT_EQ(count_op(blocked, "channel_blocks"), 1) << dump(blocked);
  Executable plain(std::move(g)), fast(std::move(blocked));
  for (int n : {2, 3}) {  // a dynamic batch
    Tensor x = randn({n, 3, 32, 32});
    EXPECT_CLOSE(fast.run({x})[0], plain.run({x})[0], 1e-5, 1e-5) << n;
  }
}

// The convolutions are asked for the layout the graph keeps, so a compiled
// network's steady state runs oneDNN convolutions and nothing else: no
// reorders in or out of them (left to choose, AVX-512's brgconv took NHWC for
// 3x3 convolutions and reordered both sides of each). Read from oneDNN's
// own execution log, on whichever tier the test runs.
TEST(Layout, SteadyStateRunsNoReorders) {
  if (cpu::conv_activation_block() == 0) GTEST_SKIP() << "oneDNN prefers NCHW on this CPU: the pass has nothing to do";
  auto net = small_resnet(11);
  NoGradGuard ng;
  auto f = compile::compile(std::shared_ptr<nn::Module>(std::move(net)));
  Tensor x = randn({4, 3, 32, 32});
  f(x), f(x);  // primitives made, weights packed
  dnnl::set_verbose(1);
  ::testing::internal::CaptureStdout();
  f(x);
  std::fflush(stdout);
  dnnl::set_verbose(0);
  std::string log = ::testing::internal::GetCapturedStdout();
  int convs = 0, reorders = 0;
  for (size_t at = 0, end; at < log.size(); at = end + 1) {
    end = log.find('\n', at);
    if (end == std::string::npos) end = log.size();
    std::string line = log.substr(at, end - at);
    if (line.find(",exec,") == std::string::npos) continue;
    convs += line.find(",convolution,") != std::string::npos;
    reorders += line.find(",reorder,") != std::string::npos;
  }
  EXPECT_EQ(convs, 20) << log;
  EXPECT_EQ(reorders, 0) << log;
}

int blocked_pools(const Graph& g) {
  int n = 0;
  for (const Node* node : g.nodes())
    n += node->op_name() == "max_pool2d" && node->attrs.has("channel_block") && node->attrs.i("channel_block") > 0;
  return n;
}

// Captures `net` at inference with a dynamic batch, optimizes it without the
// layout pass, and returns that graph and a copy the layout pass rewrote.
std::pair<Graph, Graph> with_and_without_layout(nn::Module& net, Shape in, int expect_changes) {
  net.eval();
  NoGradGuard ng;
  CaptureOptions co;
  co.dynamic = {{0, 0, "N"}};
  Graph g = capture([&](const TensorList& x) { return TensorList{net(x[0])}; }, {randn(in)}, net.named_parameters(), co);
  optimize(g, {.disable = {"layout"}});
  Graph blocked = g.clone();
  EXPECT_EQ(block_conv_activations(blocked), expect_changes);
  verify(blocked, "layout");
  return {std::move(g), std::move(blocked)};
}

TEST(Layout, PoolingsPoolBlockedActivations) {
  const int64_t b = cpu::conv_activation_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers NCHW on this CPU: the pass has nothing to do";
  NoGradGuard ng;
  {
    // LeNet: conv(1->32) -> pool -> conv(32->64) -> pool -> flatten. Both pools
    // pool blocks; only the last one's (4x smaller) output is converted back.
    manual_seed(8);
    nn::zoo::LeNet net({});
    auto [plain, blocked] = with_and_without_layout(net, {2, 1, 28, 28}, 4);
    EXPECT_EQ(blocked_pools(blocked), 2) << dump(blocked);
    EXPECT_EQ(blocked_convs(blocked, "input_block"), 1) << dump(blocked);  // the stem reads 1 channel
    EXPECT_EQ(blocked_convs(blocked, "output_block"), 2) << dump(blocked);
    EXPECT_EQ(count_op(blocked, "channel_blocks"), 1) << dump(blocked);
    Executable a(std::move(plain)), f(std::move(blocked));
    for (int n : {2, 5}) {
      Tensor x = randn({n, 1, 28, 28});
      EXPECT_CLOSE(f.run({x})[0], a.run({x})[0], 1e-5, 1e-5) << n;
    }
  }
  {
    // ResNet's ImageNet stem: conv 7x7/2 -> 3x3/2 max pool with padding -> blocks.
    manual_seed(9);
    nn::zoo::ResNetConfig c;
    c.widths = {16, 16, 32, 32};
    c.stem = "imagenet";
    nn::zoo::ResNet net(c);
    auto [plain, blocked] = with_and_without_layout(net, {2, 3, 64, 64}, 21);
    EXPECT_EQ(blocked_pools(blocked), 1) << dump(blocked);
    // 20 convs: all but the stem read blocks, all write them.
    EXPECT_EQ(blocked_convs(blocked, "input_block"), 19) << dump(blocked);
    EXPECT_EQ(blocked_convs(blocked, "output_block"), 20) << dump(blocked);
    Executable a(std::move(plain)), f(std::move(blocked));
    Tensor x = randn({3, 3, 64, 64});
    EXPECT_CLOSE(f.run({x})[0], a.run({x})[0], 1e-5, 1e-5);
  }
}

TEST(Layout, BlockedPoolingMatchesNchwAndChecksItsInput) {
  Tensor x = randn({2, 16, 9, 7});
  Tensor want = max_pool2d(x, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true);
  EXPECT_CLOSE(max_pool2d(channel_blocks(x, 8), {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, 8), channel_blocks(want, 8), 0, 0);
  // With autograd it runs the NCHW op between conversions, and differentiates.
  Tensor xr = channel_blocks(x, 16).requires_grad_(true);
  Tensor y = max_pool2d(xr, {2, 2}, {}, {0, 0}, {1, 1}, false, 16);
  EXPECT_CLOSE(y, channel_blocks(max_pool2d(x, {2, 2}), 16), 0, 0);
  sum(y).backward();
  EXPECT_EQ(sum(xr.grad()).item<float>(), static_cast<float>(y.numel()));  // each output passes its 1 back once
  EXPECT_NE(testing::error_of([&] { max_pool2d(x, {2, 2}, {}, {0, 0}, {1, 1}, false, 8); })
                .find("a channel-blocked input is [N, C/8, H, W, 8], got [2, 16, 9, 7]"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { max_pool2d(channel_blocks(x, 8), {2, 2}, {}, {0, 0}, {1, 1}, false, 4); })
                .find("channel_block must be 0 (NCHW), 8 or 16, got 4"),
            std::string::npos);
}

TEST(Layout, ConstantConvWeightsArePackedOnce) {
  // An inference graph's conv weights are constants: every convolution reads
  // them packed, and the results are those of packing them on every call.
  manual_seed(10);
  nn::zoo::ResNetConfig c;
  c.widths = {16, 16, 32, 32};
  nn::zoo::ResNet net(c);
  auto [plain, blocked] = with_and_without_layout(net, {2, 3, 32, 32}, 20);
  EXPECT_EQ(pack_constant_conv_weights(blocked), 20);
  int packed = 0;
  for (const Node* n : blocked.nodes())
    packed += n->op_name() == "fused_conv2d" && n->attrs.has("constant_weights") && n->attrs.b("constant_weights");
  EXPECT_EQ(packed, 20) << dump(blocked);
  EXPECT_EQ(pack_constant_conv_weights(blocked), 0);  // idempotent
  Graph unpacked = blocked.clone();
  for (Node* n : unpacked.nodes())
    if (n->op_name() == "fused_conv2d") n->attrs.set("constant_weights", false);
  Executable a(std::move(unpacked)), f(std::move(blocked));
  for (int n : {2, 3, 2}) {  // a new batch size may share the packed layout or pack anew
    Tensor x = randn({n, 3, 32, 32});
    EXPECT_CLOSE(f.run({x})[0], a.run({x})[0], 0, 0) << n;
  }
}

TEST(Layout, PackedWeightsFollowTheirVersion) {
  NoGradGuard ng;
  Tensor x = randn({2, 8, 6, 6}), w = randn({16, 8, 3, 3}), b = randn({16});
  Conv2dOptions o;
  o.padding = {1, 1};
  auto packed = [&] { return fused_conv2d(x, w, b, {}, o, "relu", 0, 0, true); };
  auto fresh = [&] { return fused_conv2d(x, w, b, {}, o, "relu"); };
  EXPECT_CLOSE(packed(), fresh(), 0, 0);
  EXPECT_CLOSE(packed(), fresh(), 0, 0);  // from the kept copy
  w.mul_(-2.0);                           // a new version: packed again
  EXPECT_CLOSE(packed(), fresh(), 0, 0);
  // Two weights that are views of one storage keep separate copies.
  Tensor both = randn({2, 16, 8, 3, 3});
  Tensor w0 = both.select(0, 0), w1 = both.select(0, 1);
  Tensor y0 = fused_conv2d(x, w0, b, {}, o, "none", 0, 0, true), y1 = fused_conv2d(x, w1, b, {}, o, "none", 0, 0, true);
  EXPECT_CLOSE(y0, fused_conv2d(x, w0, b, {}, o, "none"), 0, 0);
  EXPECT_CLOSE(y1, fused_conv2d(x, w1, b, {}, o, "none"), 0, 0);
}

TEST(Layout, ParameterConvWeightsArePackedInInferenceGraphs) {
  // A module's conv weights are parameters, not constants: an inference
  // graph packs them too and follows their updates (an optimizer step in
  // place); a graph that records autograd keeps reading them as they are.
  manual_seed(11);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(3, 8, 3), std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(8, 4, 3)});
  m->eval();
  Tensor x = randn({2, 3, 10, 10});
  auto packed_convs = [](const Graph& g) {
    int n = 0;
    for (const Node* node : g.nodes())
      n += node->op_name() == "fused_conv2d" && node->attrs.has("constant_weights") && node->attrs.b("constant_weights");
    return n;
  };
  {
    NoGradGuard ng;
    auto f = compile::compile(m);
    EXPECT_CLOSE(f(x), (*m)(x), 1e-5, 1e-6);
    EXPECT_EQ(packed_convs(f.last()->graph()), 2) << dump(f.last()->graph());
    for (auto& [name, p] : m->named_parameters()) p.mul_(-0.5);
    EXPECT_CLOSE(f(x), (*m)(x), 1e-5, 1e-6);
  }
  auto g = compile::compile(m);
  Tensor y = g(x);
  EXPECT_EQ(packed_convs(g.last()->graph()), 0);
  EXPECT_CLOSE(y, (*m)(x), 1e-5, 1e-6);
}

TEST(Layout, PackedLinearWeightsFollowTheirVersion) {
  NoGradGuard ng;
  // 40 rows: oneDNN's product (a few rows run the skinny kernel, unpacked).
  Tensor x = randn({40, 48}), w = randn({72, 48}), b = randn({72}), r = randn({40, 72});
  auto packed = [&] { return fused_linear(x, w, b, r, "gelu", true); };
  auto fresh = [&] { return fused_linear(x, w, b, r, "gelu"); };
  cpu::GemmArgs g;
  g.m = 40, g.n = 72, g.k = 48;
  g.sa[0] = 0, g.sa[1] = 48, g.sa[2] = 1;
  g.sb[0] = 0, g.sb[1] = 1, g.sb[2] = 48;
  g.sc[0] = 0, g.sc[1] = 72, g.sc[2] = 1;
  g.act = cpu::Epilogue::Gelu;
  std::cout << "[ INFO ] " << (cpu::gemm_weights_layout(g).empty() ? "nothing packed (a plain layout)" : "weights packed")
            << " at this tier\n";
  EXPECT_CLOSE(packed(), fresh(), 1e-6, 1e-6);
  EXPECT_CLOSE(packed(), fresh(), 1e-6, 1e-6);  // from the kept copy
  w.mul_(-2.0);                                 // a new version: packed again
  EXPECT_CLOSE(packed(), fresh(), 1e-6, 1e-6);
  // A few rows read the weight as it is: packing changes nothing there.
  Tensor x1 = randn({2, 48});
  EXPECT_CLOSE(fused_linear(x1, w, b, {}, "none", true), fused_linear(x1, w, b, {}, "none"), 0, 0);
}

TEST(Layout, ParameterLinearWeightsArePackedInInferenceGraphs) {
  manual_seed(12);
  auto m = std::make_shared<nn::zoo::MLP>(nn::zoo::MLPConfig{32, {64, 64}, 10, "relu", 0.0});
  m->eval();
  Tensor x = randn({24, 32});
  auto packed_linears = [](const Graph& g) {
    int n = 0;
    for (const Node* node : g.nodes())
      n += node->op_name() == "fused_linear" && node->attrs.has("constant_weights") && node->attrs.b("constant_weights");
    return n;
  };
  {
    NoGradGuard ng;
    auto f = compile::compile(m);
    EXPECT_CLOSE(f(x), (*m)(x), 1e-5, 1e-6);
    EXPECT_EQ(packed_linears(f.last()->graph()), 3) << dump(f.last()->graph());
    for (auto& [name, p] : m->named_parameters()) p.mul_(-0.5);  // an optimizer step in place
    EXPECT_CLOSE(f(x), (*m)(x), 1e-5, 1e-6);
  }
  auto g = compile::compile(m);  // records autograd: reads the parameters as they are
  Tensor y = g(x);
  EXPECT_EQ(packed_linears(g.last()->graph()), 0);
  EXPECT_CLOSE(y, (*m)(x), 1e-5, 1e-6);
}

// A linear layer as ONNX carries it (MatMul by a transposed initializer, then
// Add of the bias) becomes a linear node again, so that its activation fuses
// and its weights are packed.
TEST(EpilogueFusion, MatmulByTransposedWeightIsALinearLayer) {
  manual_seed(13);
  Tensor w1 = randn({64, 32}), b1 = randn({64}), w2 = randn({16, 64});
  auto fn = [&](const TensorList& in) {
    Tensor h = relu(add(matmul(in[0], permute(w1, {1, 0})), b1));
    return TensorList{matmul(h, transpose(w2, 0, 1))};
  };
  TensorList ex{randn({2, 20, 32})};
  CaptureOptions co;
  co.dynamic = {{0, 0, "N"}};
  Graph g = capture(fn, ex, {}, co);
  optimize(g);
  EXPECT_EQ(count_op(g, "matmul"), 0) << dump(g);
  EXPECT_EQ(count_op(g, "fused_linear"), 2) << dump(g);
  EXPECT_EQ(count_op(g, "relu") + count_op(g, "add") + count_op(g, "fused_elementwise"), 0) << dump(g);
  Executable exe(std::move(g));
  for (int64_t n : {2, 5}) {
    Tensor x = randn({n, 20, 32});
    EXPECT_CLOSE(exe.run({x})[0], fn({x})[0], 1e-5, 1e-5) << n;
  }
}

TEST(Layout, LeavesNchwWhereOtherOpsReadAndConvertsForeignResiduals) {
  const int64_t b = cpu::conv_activation_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers NCHW on this CPU: the pass has nothing to do";
  Tensor w1 = randn({16, 8, 3, 3}), w2 = randn({16, 16, 3, 3}), w3 = randn({16, 16, 1, 1});
  Conv2dOptions same;
  same.padding = {1, 1};
  // h feeds a conv and is also an output (NCHW); k feeds two convs (blocked);
  // the residual r comes from a graph input into a blocked output.
  auto fn = [&](const TensorList& in) {
    Tensor h = relu(conv2d(in[0], w1, {}, same));
    Tensor k = conv2d(h, w2, {}, same);
    Tensor y = relu(add(conv2d(k, w2, {}, same), in[1]));
    return TensorList{h, add(conv2d(y, w3), conv2d(k, w3))};
  };
  TensorList ex{randn({2, 8, 6, 6}), randn({2, 16, 6, 6})};
  Graph g = capture(fn, ex);
  optimize(g);
  verify(g, "layout");
  EXPECT_EQ(blocked_convs(g, "output_block"), 2) << dump(g);  // k and y
  EXPECT_EQ(count_op(g, "channel_blocks"), 1) << dump(g);      // r, blocked for y's residual
  TensorList got = Executable(std::move(g)).run(ex), want = fn(ex);
  EXPECT_CLOSE(got[0], want[0], 1e-5, 1e-5);
  // Sums of terms near 1e3 in another order (blocked kernels): absolute error
  // relative to that magnitude (small outputs come from cancellation).
  const double scale = ops::abs(want[1]).max().item<float>();
  EXPECT_CLOSE(got[1], want[1], 1e-4, 1e-6 * scale);
}

TEST(Layout, ChannelBlocksRoundTripsAndChecksShapes) {
  Tensor x = randn({2, 16, 3, 5});
  Tensor xb = channel_blocks(x, 8);
  EXPECT_EQ(xb.shape(), (Shape{2, 2, 3, 5, 8}));
  // channel c of x sits at [n, c / 8, h, w, c % 8]
  auto at = [](const Tensor& t, std::initializer_list<int64_t> idx) {
    Tensor e = t;
    for (int64_t i : idx) e = e.select(0, i);
    return e.item<float>();
  };
  EXPECT_EQ(at(xb, {1, 1, 2, 4, 3}), at(x, {1, 11, 2, 4}));
  EXPECT_CLOSE(channel_blocks(xb, 8), x, 0, 0);
  // A blocked fused_conv2d equals the NCHW one.
  Tensor w = randn({8, 16, 3, 3}), bias = randn({8}), r = randn({2, 8, 1, 3});
  Tensor want = fused_conv2d(x, w, bias, r, {}, "relu");
  Tensor got = fused_conv2d(xb, w, bias, channel_blocks(r, 8), {}, "relu", 8, 8);
  EXPECT_CLOSE(channel_blocks(got, 8), want, 1e-5, 1e-5);
  auto err = [](auto f) { return testing::error_of(f); };
  EXPECT_NE(err([&] { channel_blocks(randn({2, 12, 3, 3}), 8); }).find("not a multiple of the block 8"), std::string::npos);
  EXPECT_NE(err([&] { channel_blocks(xb, 16); }).find("expected an NCHW tensor or a blocked"), std::string::npos);
  EXPECT_NE(err([&] { fused_conv2d(xb, w, bias, {}, {}, "relu", 4, 0); }).find("must be 0 (NCHW), 8 or 16"),
            std::string::npos);
  // A blocked input of the wrong channel count: the plain ops' error.
  EXPECT_NE(err([&] { fused_conv2d(xb, randn({8, 8, 3, 3}), bias, {}, {}, "relu", 8, 0); }).find("input channels"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {
using namespace compile;

TEST(Inspect, FusedOpsKeepTheirFlops) {
  // conv 3->8, 3x3, on 2x3x8x8: 2*8*6*6 outputs x 27 multiply-adds x 2; the
  // relu adds one per element until the epilogue pass fuses it.
  manual_seed(12);
  auto conv = std::make_shared<nn::Sequential>(
      std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Conv2d>(3, 8, 3), std::make_shared<nn::ReLU>()});
  auto lin = std::make_shared<nn::Sequential>(
      std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(16, 32), std::make_shared<nn::ReLU>()});
  NoGradGuard ng;
  for (auto [m, x, dense] : {std::tuple{conv, randn({2, 3, 8, 8}), int64_t{2 * 8 * 6 * 6 * 27 * 2}},
                             std::tuple{lin, randn({4, 16}), int64_t{2 * 4 * 32 * 16}}}) {
    Graph g = capture([&](const TensorList& in) { return TensorList{(*m)(in[0])}; }, {x}, m->named_parameters());
    int64_t outputs = x.shape()[0] * (m == conv ? 8 * 6 * 6 : 32);
    EXPECT_EQ(summarize(g).flops, dense + outputs) << dump(g);
    optimize(g);
    EXPECT_EQ(count_op(g, "relu"), 0) << dump(g);
    EXPECT_EQ(summarize(g).flops, dense) << dump(g);
  }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {
using namespace compile;

TEST(Layout, ConcurrentRunsOfAPackedBlockedNetwork) {
  // Four threads run one optimized ResNet (blocked activations, weights packed
  // on first use, in-place residuals) at different batch sizes at once: each
  // result is the one eager gives for its own input. Convolutions run outside
  // the primitive cache's lock, so they really overlap.
  auto net = small_resnet(13);
  NoGradGuard ng;
  Model m(capture_dynamic_batch(*net));
  std::vector<Tensor> xs, want(4), got(4);
  for (int i = 0; i < 4; ++i) xs.push_back(randn({i + 1, 3, 32, 32}));
  for (int i = 0; i < 4; ++i) want[i] = (*net)(xs[i]);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < 5; ++r) got[i] = m.run({xs[i]})[0];
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) EXPECT_CLOSE(got[i], want[i], 1e-4, 1e-5) << i;
}

}  // namespace
}  // namespace tessera
