// Module registration, traversal, state dicts and their errors, hooks, dtype
// conversion, printing; default initialisations.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"
#include "test_util.h"

using namespace tessera;
using namespace tessera::nn;

TEST(Module, RegistrationAndDottedNames) {
  auto net = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Linear>(4, 8), std::make_shared<ReLU>(), std::make_shared<BatchNorm1d>(8),
      std::make_shared<Linear>(8, 2, false)});
  std::vector<std::string> names;
  for (auto& [n, p] : net->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "3.weight"}));
  std::vector<std::string> bufs;
  for (auto& [n, b] : net->named_buffers()) bufs.push_back(n);
  EXPECT_EQ(bufs, (std::vector<std::string>{"2.running_mean", "2.running_var", "2.num_batches_tracked"}));
  EXPECT_EQ(net->children().size(), 4u);
  EXPECT_EQ(net->modules().size(), 5u);
  EXPECT_EQ(net->num_parameters(), 4 * 8 + 8 + 8 + 8 + 8 * 2);
  EXPECT_EQ(&net->submodule("2"), (*net)[2].get());
  for (auto& p : net->parameters()) EXPECT_TRUE(p.requires_grad());
  EXPECT_NE(tessera::testing::error_of([&] { net->register_parameter("0", zeros({1})); }).find("already registered"), std::string::npos);
  EXPECT_NE(tessera::testing::error_of([&] { net->register_parameter("a.b", zeros({1})); }).find("no '.'"), std::string::npos);
  EXPECT_NE(tessera::testing::error_of([&] { net->submodule("9"); }).find("no submodule '9'"), std::string::npos);
}

TEST(Module, StateDictRoundTripAndTiedWeights) {
  manual_seed(1);
  zoo::GPTConfig c;
  c.vocab_size = 16;
  c.block_size = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  auto a = std::make_shared<zoo::GPT>(c);
  manual_seed(2);
  auto b = std::make_shared<zoo::GPT>(c);
  Tensor ids = tensor(std::vector<int64_t>{1, 2, 3, 4}, {1, 4});
  EXPECT_FALSE(ops::all(ops::eq((*a)(ids), (*b)(ids))).item<bool>());
  b->load_state_dict(a->state_dict());
  EXPECT_TRUE(ops::all(ops::eq((*a)(ids), (*b)(ids))).item<bool>());
  // the tied head is the embedding: one parameter, one state-dict entry
  for (auto& [n, p] : a->named_parameters()) EXPECT_EQ(n.find("lm_head"), std::string::npos);
}

TEST(Module, LoadStateDictErrorsListEveryProblemByName) {
  auto m = std::make_shared<zoo::MLP>(zoo::MLPConfig{6, {5}, 3});
  StateDict sd = m->state_dict();
  sd.entries.erase(sd.entries.begin());                       // drop net.0.weight
  sd.entries.emplace_back("net.9.weight", zeros({2}));         // an unexpected key
  sd.entries[0].second = zeros({7});                           // net.0.bias with a wrong shape
  std::string msg = tessera::testing::error_of([&] { m->load_state_dict(sd); });
  EXPECT_NE(msg.find("missing keys: net.0.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected keys: net.9.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("net.0.bias (checkpoint [7], model [5])"), std::string::npos) << msg;
  // non-strict: shapes must still match, the rest is reported
  sd.entries[0].second = zeros({5});
  auto r = m->load_state_dict(sd, false);
  EXPECT_EQ(r.missing, std::vector<std::string>{"net.0.weight"});
  EXPECT_EQ(r.unexpected, std::vector<std::string>{"net.9.weight"});
}

// Module::fit, which the loaders that read a piece at a time share: names and
// shapes only, and long lists cut after ten names.
TEST(Module, FitNamesWhatDiffersAndCutsLongLists) {
  auto m = std::make_shared<zoo::MLP>(zoo::MLPConfig{6, {5}, 3});
  std::vector<std::pair<std::string, Shape>> given = {{"net.0.weight", {5, 7}}, {"net.0.bias", {5}}};
  for (int i = 0; i < 12; ++i) given.emplace_back("extra." + std::to_string(i), Shape{1});
  const auto f = m->fit(given);
  EXPECT_EQ(f.mismatched, std::vector<std::string>{"net.0.weight (checkpoint [5, 7], model [5, 6])"});
  EXPECT_EQ(f.missing, (std::vector<std::string>{"net.2.weight", "net.2.bias"}));
  EXPECT_EQ(f.unexpected.size(), 12u);
  const std::string p = f.problems();
  EXPECT_NE(p.find("unexpected keys: extra.0, extra.1"), std::string::npos) << p;
  EXPECT_NE(p.find("extra.9 and 2 more"), std::string::npos) << p;
  EXPECT_EQ(f.problems(false).find("missing"), std::string::npos);
  EXPECT_NE(f.problems(false).find("shape mismatch"), std::string::npos);
}

TEST(Module, TrainEvalToDtypeZeroGradApplyRequiresGrad) {
  auto m = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{std::make_shared<Linear>(3, 3),
                                                                         std::make_shared<Dropout>(0.5)});
  m->eval();
  for (auto* mod : m->modules()) EXPECT_FALSE(mod->is_training());
  Tensor x = ones({2, 3});
  EXPECT_TRUE(ops::all(ops::eq((*m)(x), (*m)(x))).item<bool>());  // dropout is off
  m->train();
  auto lin = std::dynamic_pointer_cast<Linear>((*m)[0]);
  Tensor w = lin->weight;  // a handle held outside the module
  m->to(DType::F64);
  EXPECT_EQ(w.dtype(), DType::F64);
  EXPECT_EQ(lin->weight.dtype(), DType::F64);
  EXPECT_TRUE(w.requires_grad());
  ops::sum((*m)(ones({2, 3}, DType::F64))).backward();
  EXPECT_TRUE(w.grad().defined());
  m->zero_grad(false);
  EXPECT_EQ(ops::sum(ops::abs(w.grad())).item<double>(), 0.0);
  m->zero_grad();
  EXPECT_FALSE(w.grad().defined());
  int visited = 0;
  m->apply([&](Module&) { ++visited; });
  EXPECT_EQ(visited, 3);
  m->requires_grad_(false);
  for (auto& p : m->parameters()) EXPECT_FALSE(p.requires_grad());
}

TEST(Module, ForwardHooks) {
  auto lin = std::make_shared<Linear>(2, 2);
  int pre = 0, post = 0;
  double seen_input = -1;
  size_t h1 = lin->register_forward_pre_hook([&](Module&, Tensor& in) {
    ++pre;
    in = ops::mul(in, 0.0);
  });
  lin->register_forward_hook([&](Module&, const Tensor& in, Tensor& out) {
    ++post;
    seen_input = ops::sum(ops::abs(in)).item<double>();
    out = ops::add(out, 1.0);
  });
  Tensor y = (*lin)(ones({1, 2}));
  EXPECT_EQ(pre, 1);
  EXPECT_EQ(post, 1);
  EXPECT_EQ(seen_input, 0.0);  // the hook saw the input the pre-hook replaced
  EXPECT_CLOSE(y, ops::add(lin->bias.detach().unsqueeze(0), 1.0));
  lin->remove_hook(h1);
  (*lin)(ones({1, 2}));
  EXPECT_EQ(pre, 1);
  EXPECT_EQ(post, 2);
}

TEST(Module, PrintsTheTreeWithParameterCounts) {
  auto m = std::make_shared<zoo::LeNet>(zoo::LeNetConfig{});
  std::string s = m->str();
  EXPECT_NE(s.find("LeNet("), std::string::npos) << s;
  EXPECT_NE(s.find("(0): Conv2d(1, 32, kernel_size=3, stride=1, padding=1)  # 320 params"), std::string::npos) << s;
  EXPECT_NE(s.find("(classifier): Sequential("), std::string::npos) << s;
  EXPECT_NE(s.find("Dropout(p=0.25)"), std::string::npos) << s;
}

// Default initialisations follow PyTorch's distributions.
TEST(Init, DefaultsMatchPyTorchDistributions) {
  manual_seed(0);
  Linear lin(400, 300);
  const double bound = 1.0 / std::sqrt(400.0);
  EXPECT_LE(ops::amax(ops::abs(lin.weight)).item<double>(), bound);
  EXPECT_NEAR(ops::std(lin.weight).item<double>(), bound / std::sqrt(3.0), 0.01 * bound);
  EXPECT_LE(ops::amax(ops::abs(lin.bias)).item<double>(), bound);
  Conv2d conv(16, 32, 3);
  const double cb = 1.0 / std::sqrt(16.0 * 9);
  EXPECT_LE(ops::amax(ops::abs(conv.weight)).item<double>(), cb);
  Embedding emb(1000, 64, 0);
  EXPECT_NEAR(ops::std(emb.weight).item<double>(), 1.0, 0.02);
  EXPECT_EQ(ops::sum(ops::abs(emb.weight.select(0, 0))).item<double>(), 0.0);
  MultiheadAttention mha(64, 4);
  const double xb = std::sqrt(6.0 / (64 + 192));
  EXPECT_LE(ops::amax(ops::abs(mha.in_proj_weight)).item<double>(), xb);
  EXPECT_EQ(ops::sum(ops::abs(mha.in_proj_bias)).item<double>(), 0.0);

  Tensor t = empty({256, 512});
  init::kaiming_normal_(t, 0, "fan_out", "relu");
  EXPECT_NEAR(ops::std(t).item<double>(), std::sqrt(2.0 / 256), 0.01);
  init::xavier_normal_(t);
  EXPECT_NEAR(ops::std(t).item<double>(), std::sqrt(2.0 / (256 + 512)), 0.002);
  init::trunc_normal_(t, 0, 1, -0.5, 0.5);
  EXPECT_LE(ops::amax(ops::abs(t)).item<double>(), 0.5);
  Tensor q = empty({6, 10});
  init::orthogonal_(q, 2.0);
  EXPECT_CLOSE(ops::matmul(q, q.t()), ops::mul(eye(6), 4.0), 1e-5, 1e-5);
  Tensor q2 = empty({10, 6});
  init::orthogonal_(q2);
  EXPECT_CLOSE(ops::matmul(q2.t(), q2), eye(6), 1e-5, 1e-5);
  EXPECT_EQ(init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_THROW(init::calculate_gain("swishy"), Error);
}

TEST(Zoo, ModelsBuildAndRunForwardBackward) {
  auto check = [](nn::Module& m, const Tensor& x, Shape expect) {
    Tensor y = m(x);
    EXPECT_EQ(shape_str(y.shape()), shape_str(expect));
    ops::sum(y).backward();
    for (auto& [n, p] : m.named_parameters()) EXPECT_TRUE(p.grad().defined()) << n;
  };
  zoo::ResNetConfig r50 = zoo::ResNetConfig::resnet50();
  r50.widths = {4, 8, 8, 8};
  r50.layers = {1, 1, 1, 1};
  r50.stem = "imagenet";
  zoo::ResNet net50(r50);
  check(net50, ops::randn({2, 3, 32, 32}), {2, 10});
  EXPECT_EQ(zoo::ResNet(zoo::ResNetConfig::resnet18()).num_parameters(), 11173962);  // torchvision's count (CIFAR stem, 10 classes)
  zoo::LlamaConfig lc;
  lc.vocab_size = 20, lc.dim = 16, lc.n_layers = 1, lc.n_heads = 4, lc.n_kv_heads = 1, lc.hidden_dim = 24;
  lc.max_seq_len = 8;
  zoo::Llama llama(lc);
  check(llama, tensor(std::vector<int64_t>{1, 2, 3}, {1, 3}), {1, 3, 20});
  EXPECT_THROW(llama(tensor(std::vector<int64_t>(9, 1), {1, 9})), Error);  // longer than max_seq_len
}
