// Optimizer and scheduler trajectories against PyTorch 1.13
// (tests/golden/optim.safetensors, from tests/golden/generate_train.py): 20 steps
// on loss = mean((X @ W + b - Y)^2), parameters compared after every step.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "tessera/io/safetensors.h"
#include "tessera/optim/optimizer.h"
#include "tessera/optim/scheduler.h"
#include "tessera/ops/ops.h"
#include "test_util.h"

using namespace tessera;
using nlohmann::json;
namespace test = tessera::testing;

namespace {

// PyTorch kwargs -> Tessera options (betas -> beta1/beta2, bools -> 0/1).
optim::Options options_of(const json& args) {
  optim::Options o;
  for (auto& [k, v] : args.items()) {
    if (k == "betas") {
      o["beta1"] = v[0].get<double>();
      o["beta2"] = v[1].get<double>();
    } else if (v.is_boolean()) {
      o[k] = v.get<bool>() ? 1 : 0;
    } else {
      o[k] = v.get<double>();
    }
  }
  return o;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

optim::SchedulerPtr make_scheduler(const json& s, optim::Optimizer& opt) {
  const std::string type = s["type"];
  const json& a = s["args"];
  if (type == "StepLR") return std::make_unique<optim::StepLR>(opt, a["step_size"], a["gamma"]);
  if (type == "MultiStepLR")
    return std::make_unique<optim::MultiStepLR>(opt, a["milestones"].get<std::vector<int64_t>>(), a["gamma"]);
  if (type == "ExponentialLR") return std::make_unique<optim::ExponentialLR>(opt, a["gamma"]);
  if (type == "CosineAnnealingLR") return std::make_unique<optim::CosineAnnealingLR>(opt, a["T_max"], a["eta_min"]);
  if (type == "LinearLR")
    return std::make_unique<optim::LinearLR>(opt, a["start_factor"], a["end_factor"], a["total_iters"]);
  if (type == "OneCycleLR")
    return std::make_unique<optim::OneCycleLR>(opt, a["max_lr"], a["total_steps"], a.value("pct_start", 0.3),
                                               a.value("anneal_strategy", std::string("cos")),
                                               a.value("cycle_momentum", true), a.value("base_momentum", 0.85),
                                               a.value("max_momentum", 0.95), a.value("div_factor", 25.0),
                                               a.value("final_div_factor", 1e4));
  if (type == "ReduceLROnPlateau")
    return std::make_unique<optim::ReduceLROnPlateau>(opt, a["mode"], a["factor"], a["patience"], a["threshold"],
                                                      a["threshold_mode"], a["cooldown"], a["min_lr"].get<double>(),
                                                      a.value("eps", 1e-8));
  if (type == "WarmupCosine")
    return std::make_unique<optim::WarmupCosineLR>(opt, a["warmup_steps"], a["total_steps"], a["min_lr"]);
  ADD_FAILURE() << "no scheduler " << type;
  return nullptr;
}

}  // namespace

TEST(OptimGolden, TrajectoriesMatchPyTorch) {
  auto file = io::SafetensorsFile::open(std::string(TESSERA_GOLDEN_DIR) + "/optim.safetensors");
  int cases = 0;
  for (auto& [name, meta_text] : file.metadata()) {
    SCOPED_TRACE(name);
    json meta = json::parse(meta_text);
    Tensor X = file.get(name + "/X"), Y = file.get(name + "/Y");
    Tensor W = file.get(name + "/W0").clone().requires_grad_(), b = file.get(name + "/b0").clone().requires_grad_();
    std::vector<optim::ParamGroup> groups;
    if (meta.contains("groups")) {
      groups.push_back({{W}, options_of(meta["groups"][0])});
      groups.push_back({{b}, options_of(meta["groups"][1])});
    } else {
      groups.push_back({{W, b}, {}});
    }
    auto opt = optim::make_optimizer(lower(meta["optimizer"]), groups, options_of(meta["args"]));
    optim::SchedulerPtr sched;
    if (meta.contains("scheduler")) sched = make_scheduler(meta["scheduler"], *opt);
    std::vector<double> lrs = file.get(name + "/lr").to_vector<double>();
    std::vector<double> moms;
    if (file.contains(name + "/momentum")) moms = file.get(name + "/momentum").to_vector<double>();
    for (int k = 1; k <= meta["steps"].get<int>(); ++k) {
      opt->zero_grad();
      Tensor loss = ops::mean(ops::square(ops::sub(ops::add(ops::matmul(X, W), b), Y)));
      loss.backward();
      opt->step();
      if (sched) {
        if (sched->name() == "ReduceLROnPlateau")
          sched->step(loss.item<double>());
        else
          sched->step();
      }
      std::string s = std::to_string(k);
      ASSERT_TRUE(test::all_close(W, file.get(name + "/W/" + s), 1e-5, 1e-5)) << "W after step " << k;
      ASSERT_TRUE(test::all_close(b, file.get(name + "/b/" + s), 1e-5, 1e-5)) << "b after step " << k;
      EXPECT_NEAR(opt->param_groups()[0].lr(), lrs[k - 1], 1e-9 + 1e-7 * lrs[k - 1]) << "lr after step " << k;
      if (!moms.empty()) {
        const auto& o = opt->param_groups()[0].options;
        EXPECT_NEAR(o.count("momentum") ? o.at("momentum") : o.at("beta1"), moms[k - 1], 1e-9) << "momentum " << k;
      }
    }
    ++cases;
  }
  EXPECT_GE(cases, 20);
  std::printf("[OptimGolden] %d optimizer/scheduler trajectories match PyTorch\n", cases);
}

TEST(Optim, StateDictRoundTripContinuesIdentically) {
  auto run = [](bool reload) {
    Generator g(3);
    Tensor X = ops::randn({16, 5}, {}, &g), Y = ops::randn({16, 2}, {}, &g);
    Tensor W = ops::randn({5, 2}, {}, &g).requires_grad_();
    auto opt = std::make_unique<optim::AdamW>(TensorList{W}, optim::Options{{"lr", 0.01}, {"amsgrad", 1}});
    for (int i = 0; i < 10; ++i) {
      if (i == 5 && reload) {
        auto state = opt->state_dict();
        Tensor w_copy = W.detach().clone().requires_grad_();
        opt = std::make_unique<optim::AdamW>(TensorList{w_copy}, optim::Options{{"lr", 0.5}});
        opt->load_state_dict(state);  // brings back lr 0.01, amsgrad and the moments
        W = w_copy;
      }
      opt->zero_grad();
      ops::mean(ops::square(ops::sub(ops::matmul(X, W), Y))).backward();
      opt->step();
    }
    return W.detach();
  };
  EXPECT_TRUE(ops::all(ops::eq(run(false), run(true))).item<bool>());
}

TEST(Optim, BadOptionsAndStateAreNamed) {
  Tensor w = zeros({3}).requires_grad_();
  try {
    optim::SGD bad(TensorList{w}, {{"momentun", 0.9}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown option 'momentun'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("momentum"), std::string::npos) << e.what();
  }
  optim::Adam a(TensorList{w});
  optim::OptimizerState s;
  s.groups = json::array({{{"params", {0, 1}}, {"options", {{"lr", 0.1}}}}});
  EXPECT_THROW(a.load_state_dict(s), Error);
}

TEST(Optim, StateIsKeyedByNameAndLoadsAcrossOrders) {
  // Two parameters stepped once; the state is saved by name, then loaded into an
  // optimizer whose parameters come in the other order (a resharded model).
  Tensor a = full({2}, 1.0).requires_grad_(), b = full({3}, 2.0).requires_grad_();
  optim::ParamGroup g{{a, b}, {{"lr", 0.1}}, {"layer.weight", "layer.bias"}};
  optim::Adam opt(std::vector<optim::ParamGroup>{g});
  a.set_grad(full({2}, 0.5));
  b.set_grad(full({3}, -1.0));
  opt.step();
  optim::OptimizerState s = opt.state_dict();
  std::set<std::string> keys;
  for (auto& [k, t] : s.tensors) keys.insert(k);
  EXPECT_TRUE(keys.count("state.layer.weight.exp_avg")) << *keys.begin();
  EXPECT_TRUE(keys.count("state.layer.bias.exp_avg_sq"));
  EXPECT_EQ(s.groups[0]["param_names"][1], "layer.bias");

  Tensor a2 = a.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  optim::Adam swapped(std::vector<optim::ParamGroup>{{{b2, a2}, {{"lr", 0.1}}, {"layer.bias", "layer.weight"}}});
  swapped.load_state_dict(s);
  for (auto [p, q, gv] : {std::tuple{a, a2, 0.5}, std::tuple{b, b2, -1.0}}) {
    p.set_grad(full(p.shape(), gv));
    q.set_grad(full(q.shape(), gv));
  }
  opt.step();
  swapped.step();
  EXPECT_TRUE(ops::all(ops::eq(a, a2)).item<bool>());
  EXPECT_TRUE(ops::all(ops::eq(b, b2)).item<bool>());

  // A state saved by index (before names) still loads, in the saved order.
  optim::Adam unnamed(TensorList{a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()});
  optim::OptimizerState by_index = unnamed.state_dict();
  unnamed.param_groups()[0].params[0].set_grad(full({2}, 0.5));
  unnamed.param_groups()[0].params[1].set_grad(full({3}, 0.5));
  unnamed.step();
  by_index = unnamed.state_dict();
  EXPECT_EQ(by_index.tensors[0].first.rfind("state.0.", 0), 0u);
  optim::Adam named(std::vector<optim::ParamGroup>{
      {{a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()}, {}, {"w", "b"}}});
  named.load_state_dict(by_index);
  auto find = [](const optim::OptimizerState& st, const std::string& k) {
    for (auto& [key, t] : st.tensors)
      if (key == k) return t;
    return Tensor();
  };
  optim::OptimizerState renamed = named.state_dict();
  ASSERT_TRUE(find(renamed, "state.b.exp_avg").defined());
  EXPECT_TRUE(ops::all(ops::eq(find(renamed, "state.b.exp_avg"), find(by_index, "state.1.exp_avg"))).item<bool>());

  // Names that do not match are named in the error.
  optim::Adam other(std::vector<optim::ParamGroup>{{{a2, b2}, {}, {"x", "y"}}});
  try {
    other.load_state_dict(s);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'layer.weight'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(optim::Adam(std::vector<optim::ParamGroup>{{{a2, b2}, {}, {"x", "x"}}}), Error);
  EXPECT_THROW(optim::Adam(std::vector<optim::ParamGroup>{{{a2, b2}, {}, {"x"}}}), Error);
}

TEST(Optim, ClipGradNormReturnsTheTotalNormAndScales) {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({1}).requires_grad_();
  a.set_grad(tensor({3.0, 0.0}));
  b.set_grad(tensor({4.0}));
  double n = optim::clip_grad_norm_({a, b}, 1.0);
  EXPECT_NEAR(n, 5.0, 1e-12);
  EXPECT_NEAR(ops::norm(ops::cat({a.grad(), b.grad()})).item<double>(), 1.0, 1e-5);
  optim::clip_grad_value_({a}, 0.1);
  EXPECT_NEAR(a.grad().to_vector<float>()[0], 0.1f, 1e-7);
}

// A split model: the norm over the gradients counted once (a), the scaling
// over every one held (a and its copy c), and the norm joined over ranks.
TEST(Optim, ClipGradNormScalesWhatItIsGivenToScale) {
  Tensor a = zeros({2}).requires_grad_(), c = zeros({2}).requires_grad_();
  a.set_grad(tensor({3.0, 4.0}));
  c.set_grad(tensor({3.0, 4.0}));
  const double n = optim::clip_grad_norm_({a}, 1.0, 2.0, false, [](double sq) { return sq + 0.0; }, TensorList{a, c});
  EXPECT_NEAR(n, 5.0, 1e-12);
  for (const Tensor& t : {a, c}) {
    EXPECT_NEAR(t.grad().to_vector<float>()[0], 0.6f, 1e-6);
    EXPECT_NEAR(t.grad().to_vector<float>()[1], 0.8f, 1e-6);
  }
  // Not past max_norm: nothing scaled.
  EXPECT_NEAR(optim::clip_grad_norm_({a}, 10.0, 2.0, false, {}, TensorList{c}), 1.0, 1e-5);
  EXPECT_NEAR(c.grad().to_vector<float>()[0], 0.6f, 1e-6);
}
