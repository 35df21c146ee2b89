// Graph capture, the executor, compile() and its guards.
#include <sstream>
#include <thread>

#include "tessera/compile/compile.h"
#include "tessera/nn/nn.h"
#include "tessera/nn/zoo/zoo.h"
#include "compile/graph_test_util.h"
#include "test_util.h"

namespace tessera {
namespace {

using namespace compile;
using testing::count_op;
using namespace ops;
namespace zoo = nn::zoo;

zoo::GPTConfig tiny_gpt() {
  zoo::GPTConfig c;
  c.vocab_size = 16;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

TEST(Capture, MlpGraphRunsLikeEager) {
  manual_seed(0);
  auto m = std::make_shared<zoo::MLP>(zoo::MLPConfig{12, {16}, 3, "gelu", 0.0});
  NamedTensors params = m->named_parameters();
  Tensor x = randn({4, 12});
  Graph g = capture([&](const TensorList& in) { return TensorList{(*m)(in[0])}; }, {x}, params);
  verify(g);
  EXPECT_EQ(count_op(g, "linear"), 2);
  EXPECT_EQ(count_op(g, "gelu"), 1);
  EXPECT_EQ(g.parameters().size(), 4u);
  std::string text = dump(g);
  EXPECT_NE(text.find("%net.0.weight: f32[16, 12] = parameter"), std::string::npos) << text;
  EXPECT_NE(text.find("gelu("), std::string::npos) << text;
  EXPECT_NE(text.find("approximate='none'"), std::string::npos) << text;
  Executable exe(std::move(g));
  Tensor x2 = randn({4, 12});  // other values: nothing was frozen
  EXPECT_CLOSE(exe.run({x2})[0], (*m)(x2), 0, 0);
}

TEST(Capture, ParametersAreLiveReferences) {
  manual_seed(0);
  auto lin = std::make_shared<nn::Linear>(3, 2);
  Graph g = capture([&](const TensorList& in) { return TensorList{(*lin)(in[0])}; }, {randn({2, 3})},
                    lin->named_parameters());
  Executable exe(std::move(g));
  Tensor x = randn({2, 3});
  {
    NoGradGuard ng;
    lin->weight.mul_(2.0);  // an optimizer step, in place
  }
  EXPECT_CLOSE(exe.run({x})[0], (*lin)(x), 0, 0);
}

TEST(Capture, DynamicBatchAndSequence) {
  manual_seed(1);
  auto gpt = std::make_shared<zoo::GPT>(tiny_gpt());
  gpt->eval();
  Tensor ids = randint(0, 16, {3, 5});
  CaptureOptions o;
  o.dynamic = {{0, 0, "B"}, {0, 1, "T"}};
  o.input_names = {"ids"};
  Graph g = capture([&](const TensorList& in) { return TensorList{(*gpt)(in[0])}; }, {ids}, gpt->named_parameters(),
                    o);
  std::string text = dump(g);
  EXPECT_NE(text.find("%ids: i64[B, T]"), std::string::npos) << text;
  EXPECT_NE(text.find("f32[B, T, 16]"), std::string::npos) << text;
  EXPECT_NE(text.find("arange("), std::string::npos) << text;
  Executable exe(std::move(g));
  for (auto [b, t] : {std::pair{3, 5}, {2, 2}, {7, 11}, {4, 16}, {1, 4}, {1, 1}}) {
    Tensor x = randint(0, 16, {b, t});
    EXPECT_CLOSE(exe.run({x})[0], (*gpt)(x), 1e-6, 1e-6) << b << "x" << t;
  }
  EXPECT_NE(testing::error_of([&] { exe.run({randint(0, 16, {0, 4})}); }).find("sizes of 1 and more"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { exe.run({randn({3, 5})}); }).find("expected i64[B, T]"), std::string::npos);
}

TEST(Capture, DataDependentControlFlowIsReported) {
  auto fn = [](const TensorList& in) {
    Tensor s = ops::sum(in[0]);
    if (s.item<float>() > 0) return TensorList{ops::relu(in[0])};
    return TensorList{ops::neg(in[0])};
  };
  std::string e = testing::error_of([&] { capture(fn, {randn({3})}); });
  EXPECT_NE(e.find("data-dependent control flow"), std::string::npos) << e;
  EXPECT_NE(e.find("the output of 'sum'"), std::string::npos) << e;
}

TEST(Capture, ValuesComputedOutsideTheOpsAreReported) {
  // A tensor built from the input's bytes without ops would be frozen.
  auto fn = [](const TensorList& in) {
    Tensor c = from_buffer(in[0].contiguous().raw_data(), in[0].shape(), in[0].dtype());
    return TensorList{ops::add(in[0], c)};
  };
  std::string e = testing::error_of([&] { capture(fn, {randn({4})}); });
  EXPECT_NE(e.find("is not made by a Tessera op"), std::string::npos) << e;
  EXPECT_NE(e.find("input 1 of node"), std::string::npos) << e;
}

TEST(Capture, InPlaceUpdatesOfTracedValuesAreReported) {
  auto fn = [](const TensorList& in) {
    Tensor y = ops::relu(in[0]);
    y.add_(1.0);
    return TensorList{ops::mul(y, 2.0)};
  };
  std::string e = testing::error_of([&] { capture(fn, {randn({4})}); });
  EXPECT_NE(e.find("modified in place"), std::string::npos) << e;
}

TEST(Capture, ShapeDependentStructureIsReported) {
  // Control flow on a dynamic size: the traces differ, and capture says so.
  auto fn = [](const TensorList& in) {
    if (in[0].shape()[0] % 2 == 0) return TensorList{ops::relu(in[0])};
    return TensorList{ops::exp(in[0])};
  };
  CaptureOptions o;
  o.dynamic = {{0, 0, "N"}};
  std::string e = testing::error_of([&] { capture(fn, {randn({4, 2})}, {}, o); });
  EXPECT_NE(e.find("control flow depends on the input"), std::string::npos) << e;
}

TEST(Capture, NonLinearSizeIsReported) {
  // reshape to [N*N]: fits the corners only if quadratic terms were allowed.
  auto fn = [](const TensorList& in) {
    int64_t n = in[0].shape()[0];
    return TensorList{full({n * n}, 1.0, DType::F32)};
  };
  CaptureOptions o;
  o.dynamic = {{0, 0, "N"}};
  std::string e = testing::error_of([&] { capture(fn, {randn({4})}, {}, o); });
  EXPECT_NE(e.find("in a way a graph cannot follow"), std::string::npos) << e;
}

TEST(Executor, ConcurrentRunsAreIndependent) {
  manual_seed(3);
  auto m = std::make_shared<zoo::MLP>(zoo::MLPConfig{8, {32, 32}, 4, "relu", 0.0});
  CaptureOptions o;
  o.dynamic = {{0, 0, "B"}};
  Executable exe(capture([&](const TensorList& in) { return TensorList{(*m)(in[0])}; }, {randn({2, 8})},
                         m->named_parameters(), o));
  std::vector<Tensor> xs, want(4), got(4);
  for (int i = 0; i < 4; ++i) xs.push_back(randn({i + 2, 8}));
  for (int i = 0; i < 4; ++i) want[i] = (*m)(xs[i]);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < 20; ++r) got[i] = exe.run({xs[i]})[0];
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) EXPECT_CLOSE(got[i], want[i], 0, 0);
}

TEST(Compile, GuardsRetraceOnNewSignatureOnly) {
  manual_seed(4);
  auto m = std::make_shared<zoo::MLP>(zoo::MLPConfig{6, {8}, 2, "relu", 0.0});
  auto f = compile::compile(m, {.dynamic = {{0, 0, "B"}}});
  for (int b : {3, 5, 9}) {
    Tensor x = randn({b, 6});
    EXPECT_CLOSE(f(x), (*m)(x), 0, 0);
  }
  EXPECT_EQ(f.traces(), 1);  // one graph for every batch size >= 2
  Tensor one = randn({1, 6});
  EXPECT_CLOSE(f(one), (*m)(one), 0, 0);
  EXPECT_EQ(f.traces(), 2);  // batch 1 is its own graph
  Tensor d = randn({3, 6}).to(DType::F64);
  m->to(DType::F64);
  EXPECT_CLOSE(f(d), (*m)(d), 0, 0);  // new dtype (and new parameter tensors): retrace
  EXPECT_EQ(f.traces(), 3);
  m->eval();
  Tensor x = randn({3, 6}).to(DType::F64);
  EXPECT_CLOSE(f(x), (*m)(x), 0, 0);
  EXPECT_EQ(f.traces(), 4);  // train/eval is part of the guard
}

TEST(Compile, CacheIsBounded) {
  auto f = compile::compile([](const TensorList& in) { return TensorList{ops::exp(in[0])}; }, {.cache_size = 2});
  for (int n : {2, 3, 4, 5}) f(randn({n}));
  EXPECT_EQ(f.traces(), 4);
  EXPECT_EQ(f.cache_entries(), 2);
  f(randn({5}));
  EXPECT_EQ(f.traces(), 4);
  f(randn({2}));  // evicted: traced again
  EXPECT_EQ(f.traces(), 5);
}

TEST(Compile, EvalModeDropsDropout) {
  manual_seed(5);
  auto m = std::make_shared<zoo::MLP>(zoo::MLPConfig{6, {8}, 2, "relu", 0.5});
  m->eval();
  auto f = compile::compile(m);
  Tensor x = randn({4, 6});
  EXPECT_CLOSE(f(x), (*m)(x), 0, 0);
  EXPECT_EQ(count_op(f.last()->graph(), "dropout"), 0) << dump(f.last()->graph());
}

// ---- passes: each shows its rewrite on a small graph and keeps the outputs ----

// Captures fn, runs one pass, verifies, and checks outputs against eager on new inputs.
Graph after_pass(const Function& fn, const TensorList& example, const std::function<int(Graph&)>& pass,
                 int* changes = nullptr) {
  Graph g = capture(fn, example);
  int c = pass(g);
  if (changes) *changes = c;
  verify(g, "test");
  TensorList fresh;
  for (const Tensor& x : example) fresh.push_back(randn(x.shape()));
  Graph copy = g.clone();
  EXPECT_CLOSE(Executable(std::move(copy)).run(fresh)[0], fn(fresh)[0], 1e-6, 1e-7);
  return g;
}

TEST(Passes, SimplifyRemovesIdentitiesAndChains) {
  auto fn = [](const TensorList& in) {
    Tensor x = in[0];
    Tensor t = x.transpose(0, 1).transpose(1, 0);         // transpose of transpose
    Tensor r = x.reshape({6}).reshape({3, 2}).reshape({2, 3});  // reshape chain
    Tensor p = x.permute({1, 0}).permute({1, 0});          // permutes that cancel
    return TensorList{ops::add(ops::mul(ops::add(t, r), 1.0), ops::add(p, 0.0))};
  };
  int changes = 0;
  Graph g = after_pass(fn, {randn({2, 3})}, [](Graph& g) { return simplify(g); }, &changes);
  EXPECT_GE(changes, 5);
  EXPECT_EQ(count_op(g, "transpose"), 0) << dump(g);
  EXPECT_EQ(count_op(g, "permute"), 0) << dump(g);
  EXPECT_EQ(count_op(g, "reshape"), 0) << dump(g);  // [2,3] -> ... -> [2,3] is the identity
  EXPECT_EQ(count_op(g, "mul"), 0) << dump(g);
  EXPECT_EQ(count_op(g, "add"), 2) << dump(g);
}

TEST(Passes, CommonSubexpressionsMerge) {
  auto fn = [](const TensorList& in) { return TensorList{ops::add(ops::exp(in[0]), ops::exp(in[0]))}; };
  Graph g = after_pass(fn, {randn({4})}, eliminate_common_subexpressions);
  EXPECT_EQ(count_op(g, "exp"), 1) << dump(g);
  // Random ops never merge: two draws are two values.
  auto rnd = [](const TensorList& in) { return TensorList{ops::add(ops::rand_like(in[0]), ops::rand_like(in[0]))}; };
  Graph r = capture(rnd, {randn({4})}, {}, {.check_constants = false});
  eliminate_common_subexpressions(r);
  EXPECT_EQ(count_op(r, "rand"), 2) << dump(r);
}

TEST(Passes, ConstantFoldingEvaluatesConstantSubgraphs) {
  auto fn = [](const TensorList& in) {
    Tensor c = ops::exp(full({4}, 2.0, DType::F32));  // no input involved
    return TensorList{ops::mul(in[0], ops::add(c, 1.0))};
  };
  int changes = 0;
  Graph g = after_pass(fn, {randn({4})}, fold_constants, &changes);
  EXPECT_EQ(changes, 3);  // full, exp, add
  EXPECT_EQ(g.num_nodes(), 1) << dump(g);
  EXPECT_EQ(count_op(g, "mul"), 1);
}

TEST(Passes, DeadCodeIsRemoved) {
  auto fn = [](const TensorList& in) {
    Tensor unused = ops::relu(ops::exp(in[0]));
    return TensorList{ops::neg(in[0])};
  };
  int changes = 0;
  Graph g = after_pass(fn, {randn({4})}, eliminate_dead_code, &changes);
  EXPECT_EQ(changes, 2);
  EXPECT_EQ(g.num_nodes(), 1) << dump(g);
}

TEST(Passes, PipelineSkipsByNameAndDumps) {
  auto fn = [](const TensorList& in) { return TensorList{ops::add(ops::exp(in[0]), ops::exp(in[0]))}; };
  Graph g = capture(fn, {randn({4})});
  std::ostringstream os;
  auto report = optimize(g, {.disable = {"cse", "fuse-elementwise"}, .dump = &os});
  EXPECT_EQ(count_op(g, "exp"), 2);
  for (const auto& r : report) EXPECT_NE(r.name, "cse");
  EXPECT_NE(os.str().find("// after simplify"), std::string::npos);
  EXPECT_NE(os.str().find("// after dce"), std::string::npos);
  std::string e = testing::error_of([&] { optimize(g, {.disable = {"fusion!"}}); });
  EXPECT_NE(e.find("unknown pass 'fusion!'"), std::string::npos) << e;
  EXPECT_NE(e.find("simplify, fold-batch-norm, remove-pruned-channels, sparse-weights, fold, cse, dce, fuse-attention, fuse-gelu, fuse-epilogue, layout, fuse-elementwise"), std::string::npos) << e;
}

TEST(Passes, BatchNormFoldsIntoConvAndLinear) {
  manual_seed(9);
  auto conv = std::make_shared<nn::Conv2d>(3, 4, 3, 1, 1);
  auto bn = std::make_shared<nn::BatchNorm2d>(4);
  auto lin = std::make_shared<nn::Linear>(6, 5);
  auto bn1 = std::make_shared<nn::BatchNorm1d>(5);
  // Non-trivial statistics: a few training-mode passes.
  for (int i = 0; i < 3; ++i) {
    (*bn)((*conv)(mul(randn({4, 3, 5, 5}), 2.0)));
    (*bn1)((*lin)(randn({8, 6})));
  }
  bn->eval();
  bn1->eval();
  NamedTensors ps = {{"cw", conv->weight}, {"cb", conv->bias}, {"bm", bn->running_mean}, {"bv", bn->running_var},
                     {"bg", bn->weight}, {"bb", bn->bias}, {"lw", lin->weight}, {"lb", lin->bias},
                     {"m1", bn1->running_mean}, {"v1", bn1->running_var}, {"g1", bn1->weight}, {"b1", bn1->bias}};
  auto fn = [&](const TensorList& in) { return TensorList{relu((*bn)((*conv)(in[0]))), (*bn1)((*lin)(in[1]))}; };
  Graph g = capture(fn, {randn({2, 3, 5, 5}), randn({3, 6})}, ps);
  NoGradGuard ng;
  EXPECT_EQ(fold_batch_norm(g), 2);
  verify(g, "fold-batch-norm");
  EXPECT_EQ(count_op(g, "batch_norm"), 0) << dump(g);
  TensorList x = {randn({2, 3, 5, 5}), randn({3, 6})};
  TensorList got = Executable(std::move(g)).run(x), want = fn(x);
  EXPECT_CLOSE(got[0], want[0], 1e-5, 1e-5);
  EXPECT_CLOSE(got[1], want[1], 1e-5, 1e-5);
}

TEST(Compile, InferenceGraphsRetraceWhenParametersChange) {
  manual_seed(10);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(2, 3, 3), std::make_shared<nn::BatchNorm2d>(3)});
  m->eval();
  auto f = compile::compile(m);
  NoGradGuard ng;
  Tensor x = randn({2, 2, 6, 6});
  EXPECT_CLOSE(f(x), (*m)(x), 1e-5, 1e-6);
  for (auto& [name, p] : m->named_parameters()) p.mul_(1.5);  // an optimizer step, in place
  EXPECT_CLOSE(f(x), (*m)(x), 1e-5, 1e-6);  // the folded weights are rebuilt
  EXPECT_EQ(f.traces(), 2);
}

TEST(Passes, VerifierCatchesBrokenGraphs) {
  Graph g = capture([](const TensorList& in) { return TensorList{ops::exp(ops::neg(in[0]))}; }, {randn({2})});
  auto nodes = g.nodes();
  nodes[0]->inputs[0] = nodes[1]->outputs[0];  // neg now reads exp's output: use before definition
  std::string e = testing::error_of([&] { verify(g, "broken"); });
  EXPECT_NE(e.find("after pass 'broken'"), std::string::npos) << e;
  EXPECT_NE(e.find("is not defined before the node"), std::string::npos) << e;
}

}  // namespace
}  // namespace tessera
