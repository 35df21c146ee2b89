// Pruning: exact sparsities and the right weights, masks that survive
// optimizer steps, state dicts and further pruning, and folding them in.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/compile/compile.h"
#include "tessera/compile/model.h"
#include "tessera/nn/nn.h"
#include "tessera/optim/optimizer.h"
#include "tessera/quant/prune.h"
#include "tessera/quant/weights.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::error_of;

std::shared_ptr<nn::Sequential> mlp(uint64_t seed) {
  manual_seed(seed);
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Linear>(20, 16));
  s->push_back(std::make_shared<nn::ReLU>());
  s->push_back(std::make_shared<nn::Linear>(16, 4));
  return s;
}

nn::Linear& lin(nn::Module& m, const char* path) { return dynamic_cast<nn::Linear&>(m.submodule(path)); }

int64_t zeros(const Tensor& t) { return t.numel() - ops::sum(ops::ne(t, 0.0)).item<int64_t>(); }

TEST(Prune, MagnitudePrunesTheSmallestWeightsOfEachLayer) {
  auto m = mlp(1);
  Tensor w0 = lin(*m, "0").weight.detach().clone();
  auto rep = quant::prune(*m, {.sparsity = 0.75});
  ASSERT_EQ(rep.layers.size(), 2u);
  EXPECT_EQ(rep.layers[0].zeros, 240);  // 0.75 * 320
  EXPECT_EQ(rep.layers[1].zeros, 48);   // 0.75 * 64
  Tensor w = lin(*m, "0").weight;
  EXPECT_EQ(zeros(w), 240);
  // Every surviving weight is at least as large as every pruned one.
  Tensor a = w0.abs(), kept = ops::ne(w, 0.0);
  double min_kept = ops::amin(ops::where(kept, a, full({}, 1e9))).item<double>();
  double max_pruned = ops::amax(ops::where(kept, full({}, -1.0), a)).item<double>();
  EXPECT_GE(min_kept, max_pruned);
  EXPECT_NE(rep.str().find("75.00%"), std::string::npos) << rep.str();
}

TEST(Prune, GlobalUsesOneThresholdAcrossLayers) {
  auto m = mlp(2);
  lin(*m, "2").weight.detach().mul_(10.0);  // the last layer's weights are all large
  auto rep = quant::prune(*m, {.sparsity = 0.5, .global = true});
  EXPECT_EQ(rep.zeros, 192);               // half of 384
  EXPECT_GT(rep.layers[0].zeros, 160);     // mostly taken from the small layer
  EXPECT_LT(rep.layers[1].zeros, 32);
}

TEST(Prune, StructuredZeroesWholeRowsByNorm) {
  auto m = mlp(3);
  NoGradGuard ng;
  Tensor norms = ops::norm(lin(*m, "0").weight.detach(), 2, {1});
  quant::prune(*m, {.sparsity = 0.25, .method = "structured"});
  Tensor w = lin(*m, "0").weight;
  Tensor row_zero = ops::eq(ops::sum(ops::abs(w), {1}), 0.0);
  EXPECT_EQ(ops::sum(row_zero).item<int64_t>(), 4);  // 4 of 16 rows
  double max_pruned = ops::amax(ops::where(row_zero, norms, full({}, -1.0))).item<double>();
  double min_kept = ops::amin(ops::where(row_zero, full({}, 1e9), norms)).item<double>();
  EXPECT_LE(max_pruned, min_kept);
}

// Structured pruning masks whole filters, bias included, so the compiler
// takes them out of the graph: smaller layers, the same outputs.
TEST(Prune, CompiledGraphDropsStructurallyPrunedChannels) {
  manual_seed(4);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(3, 8, 3, 1, 1), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(8, 16, 3, 1, 1), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(16 * 2 * 2, 12), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(12, 5)});
  quant::prune(*m, {.sparsity = 0.5, .method = "structured", .skip = {"9"}});
  m->eval();
  Tensor x = ops::randn({6, 3, 8, 8});
  Tensor want;
  {
    NoGradGuard ng;
    want = (*m)(x);
  }
  compile::CaptureOptions co;
  co.dynamic.push_back({0, 0, "N"});
  compile::Graph g = compile::capture_module(*m, x, co);
  compile::PassOptions po;
  po.disable = compile::tessera_only_passes();
  auto report = compile::optimize(g, po);
  int removed = 0;
  for (const auto& r : report) removed += r.name == "remove-pruned-channels" ? r.changes : 0;
  // Three masked weights and biases made constants, then three removals:
  // conv 0 -> conv 3, conv 3 -> (flatten) linear 7, linear 7 -> linear 9.
  EXPECT_EQ(removed, 6 + 3);
  std::vector<Shape> weights;
  for (const compile::Node* n : g.nodes())
    if (n->op_name() == "conv2d" || n->op_name() == "linear") weights.push_back(n->inputs[1]->data.shape());
  ASSERT_EQ(weights.size(), 4u);
  EXPECT_EQ(weights[0], (Shape{4, 3, 3, 3}));
  EXPECT_EQ(weights[1], (Shape{8, 4, 3, 3}));
  EXPECT_EQ(weights[2], (Shape{6, 8 * 2 * 2}));
  EXPECT_EQ(weights[3], (Shape{5, 6}));
  Tensor got = Model(std::move(g))(x);
  EXPECT_LT(ops::abs(ops::sub(got, want)).max().item<float>(), 1e-5);
  // Reloading the pruned model keeps the bias masks.
  auto sd = m->state_dict();
  EXPECT_NE(sd.find("0.bias_mask"), nullptr);
  quant::make_pruning_permanent(*m);
  EXPECT_NE(m->state_dict().find("0.bias"), nullptr);
}

// Unstructured pruning past 95%: the compiled graph runs the layer's weight
// in CSR form (sparse_linear), with the same outputs; bad CSR tensors are errors.
TEST(Prune, VerySparseLinearRunsSparseWhenCompiled) {
  auto m = mlp(8);
  quant::prune(*m, {.sparsity = 0.97, .global = true});
  m->eval();
  Tensor x = ops::randn({5, 20});
  Tensor want;
  {
    NoGradGuard ng;
    want = (*m)(x);
  }
  compile::CaptureOptions co;
  co.dynamic.push_back({0, 0, "N"});
  Model compiled(compile::capture_module(*m, x, co));
  int sparse = 0;
  for (const compile::Node* n : compiled.graph().nodes()) sparse += n->op_name() == "sparse_linear";
  EXPECT_GE(sparse, 1);
  EXPECT_LT(ops::abs(ops::sub(compiled(x), want)).max().item<float>(), 1e-5);
  EXPECT_LT(ops::abs(ops::sub(compiled(x.narrow(0, 0, 1).contiguous()), want.narrow(0, 0, 1))).max().item<float>(),
            1e-5);
  Tensor vals = tensor(std::vector<float>{1.f, 2.f}), idx = tensor(std::vector<int32_t>{0, 7});
  Tensor ptr = tensor(std::vector<int64_t>{0, 1, 2});
  EXPECT_NE(error_of([&] { ops::sparse_linear(ops::randn({1, 4}), vals, idx, ptr, Tensor(), 4); })
                .find("col_idx[1] = 7 is outside [0, 4)"),
            std::string::npos);
  Tensor bad_ptr = tensor(std::vector<int64_t>{0, 2, 1});
  EXPECT_NE(error_of([&] { ops::sparse_linear(ops::randn({1, 8}), vals, idx, bad_ptr, Tensor(), 8); })
                .find("must start at 0 and end at the number of values"),
            std::string::npos);
}

TEST(Prune, MasksSurviveOptimizerStepsAndReloading) {
  auto m = mlp(4);
  quant::prune(*m, {.sparsity = 0.6});
  optim::SGD opt(m->parameters(), {{"lr", 0.05}, {"momentum", 0.9}, {"weight_decay", 0.01}});
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    Tensor loss = ops::mean(ops::square((*m)(ops::randn({8, 20}))));
    autograd::backward({loss});
    opt.step();
  }
  Tensor x = ops::randn({3, 20});
  Tensor y = (*m)(x);
  EXPECT_EQ(zeros(*m->state_dict().find("0.weight_mask")), 192);
  EXPECT_EQ(zeros(lin(*m, "0").weight), 192);  // 0.6 * 320, still
  // The gradient of a pruned weight is zero.
  Tensor g;
  for (auto& [n, t] : lin(*m, "0").named_parameters(false))
    if (n == "weight_orig") g = t.grad();
  Tensor mask = *m->state_dict().find("0.weight_mask");
  EXPECT_EQ(ops::sum(ops::abs(ops::where(ops::eq(mask, 0.0), g, full({}, 0.0)))).item<double>(), 0.0);
  // state_dict: weight_orig + weight_mask; a fresh model pruned at any level takes them.
  auto sd = m->state_dict();
  ASSERT_NE(sd.find("0.weight_orig"), nullptr);
  ASSERT_NE(sd.find("0.weight_mask"), nullptr);
  EXPECT_EQ(sd.find("0.weight"), nullptr);
  auto fresh = mlp(9);
  quant::prune(*fresh, {.sparsity = 0.1});
  fresh->load_state_dict(sd);
  EXPECT_CLOSE((*fresh)(x), y, 0, 0);
}

TEST(Prune, IterativePruningOnlyAddsToTheMasks) {
  auto m = mlp(5);
  quant::prune(*m, {.sparsity = 0.5});
  Tensor before = m->state_dict().find("0.weight_mask")->clone();
  quant::prune(*m, {.sparsity = 0.8});
  Tensor after = *m->state_dict().find("0.weight_mask");
  EXPECT_EQ(zeros(after), 256);
  // Everything pruned before is still pruned.
  EXPECT_EQ(ops::sum(ops::logical_and(ops::eq(before, 0.0), ops::ne(after, 0.0))).item<int64_t>(), 0);
  EXPECT_NE(error_of([&] { quant::prune(*m, {.sparsity = 0.3}); }).find("masks only grow"), std::string::npos);
}

TEST(Prune, PermanentFoldsTheMaskAndQuantizingWaitsForIt) {
  auto m = mlp(6);
  quant::prune(*m, {.sparsity = 0.5});
  auto rep = quant::quantize_weights(*m, {.format = "int8"});
  EXPECT_TRUE(rep.quantized.empty());
  EXPECT_NE(rep.kept[0].second.find("make_pruning_permanent"), std::string::npos);
  Tensor x = ops::randn({2, 20});
  Tensor y = (*m)(x);
  quant::make_pruning_permanent(*m);
  auto sd = m->state_dict();
  EXPECT_NE(sd.find("0.weight"), nullptr);
  EXPECT_EQ(sd.find("0.weight_mask"), nullptr);
  EXPECT_EQ(zeros(*sd.find("0.weight")), 160);
  EXPECT_CLOSE((*m)(x), y, 0, 0);
  lin(*m, "0").weight.detach().fill_(1.0);  // the hook is gone: the weight is the plain parameter
  EXPECT_EQ(zeros(lin(*m, "0").weight), 0);
  (*m)(x);
  EXPECT_EQ(zeros(lin(*m, "0").weight), 0);
}

TEST(Prune, ScheduleAndBadConfigs) {
  EXPECT_DOUBLE_EQ(quant::polynomial_sparsity(0, 10, 110, 0.0, 0.9), 0.0);
  EXPECT_DOUBLE_EQ(quant::polynomial_sparsity(110, 10, 110, 0.0, 0.9), 0.9);
  EXPECT_NEAR(quant::polynomial_sparsity(60, 10, 110, 0.0, 0.9), 0.9 - 0.9 * 0.125, 1e-12);
  auto m = mlp(7);
  EXPECT_NE(error_of([&] { quant::prune(*m, {.sparsity = 1.0}); }).find("[0, 1)"), std::string::npos);
  EXPECT_NE(error_of([&] { quant::prune(*m, {.method = "random"}); }).find("'random'"), std::string::npos);
  EXPECT_NE(error_of([&] { quant::prune(*m, {.method = "structured", .global = true}); }).find("global"),
            std::string::npos);
  EXPECT_NE(error_of([&] { quant::prune(*m, {.skip = {"7"}}); }).find("'7'"), std::string::npos);
  nn::ReLU r;
  EXPECT_NE(error_of([&] { quant::prune(r, {}); }).find("no Linear or Conv"), std::string::npos);
}

}  // namespace
}  // namespace tessera
