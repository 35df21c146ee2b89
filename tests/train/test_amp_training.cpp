// Mixed-precision training end to end: bf16 and f16 loss curves against f32 on
// the same steps, f16 overflow handled by skipping steps, and no checkpoint
// ever written with non-finite weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/data/datasets.h"
#include "tessera/io/checkpoint.h"
#include "tessera/ops/ops.h"
#include "tessera/train/trainer.h"
#include "test_util.h"

using namespace tessera;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string out_dir(const std::string& name) { return tessera::testing::scratch_dir("amp_" + name); }

train::TrainerOptions quiet() {
  train::TrainerOptions o;
  o.quiet = true;
  o.handle_signals = false;
  return o;
}

// The per-step training losses from metrics.jsonl.
std::vector<double> losses(const std::string& dir) {
  std::ifstream f(dir + "/metrics.jsonl");
  std::vector<double> out;
  for (std::string line; std::getline(f, line);) {
    json j = json::parse(line);
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

struct Curve {
  std::vector<double> loss;
  json summary;
};

Curve run(json cfg, const std::string& precision, const std::string& name) {
  std::string d = out_dir(name + "_" + precision);
  cfg["output"] = d;
  cfg["train"]["precision"] = precision;
  train::Trainer t(train::build_recipe(cfg), quiet());
  Curve c;
  c.summary = t.fit();
  c.loss = losses(d);
  fs::remove_all(d);
  return c;
}

// Mean over steps of |loss - loss_f32| / loss_f32, and the same for the mean
// of the last 10 steps.
void compare(const Curve& f32, const Curve& low, const char* what, double mean_tol, double end_tol) {
  ASSERT_EQ(f32.loss.size(), low.loss.size());
  double mean_rel = 0, end_a = 0, end_b = 0;
  const size_t n = f32.loss.size();
  for (size_t i = 0; i < n; ++i) {
    mean_rel += std::abs(low.loss[i] - f32.loss[i]) / f32.loss[i] / static_cast<double>(n);
    if (i + 10 >= n) {
      end_a += f32.loss[i] / 10;
      end_b += low.loss[i] / 10;
    }
  }
  double end_rel = std::abs(end_b - end_a) / end_a;
  std::printf("[AMP] %s: mean relative loss difference %.4f, last 10 steps %.4f (f32 %.4f -> %.4f)\n", what, mean_rel,
              end_rel, f32.loss.front(), end_a);
  EXPECT_LT(mean_rel, mean_tol) << what;
  EXPECT_LT(end_rel, end_tol) << what;
  EXPECT_LT(end_a, f32.loss.front() * 0.8) << what << ": f32 did not learn";
}

}  // namespace

TEST(AmpTraining, MLPOnFashionMNISTFollowsF32) {
  if (!fs::exists(data::kFashionMNISTRoot)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  json cfg = json::parse(R"({
    "model": {"name": "mlp", "hidden": [128], "num_classes": 10},
    "data": {"dataset": "fashion_mnist", "train_subset": 4096, "eval_subset": 512},
    "optimizer": {"name": "adam", "lr": 0.002},
    "train": {"steps": 60, "batch_size": 64, "num_workers": 1, "seed": 3, "log_every": 100}
  })");
  Curve f32 = run(cfg, "f32", "mlp"), bf16 = run(cfg, "bf16", "mlp"), f16 = run(cfg, "f16", "mlp");
  compare(f32, bf16, "MLP bf16", 0.03, 0.03);
  // f16 skips its first steps while the loss scale backs off from 65536 (as
  // PyTorch's does), which shifts its curve a little.
  compare(f32, f16, "MLP f16", 0.05, 0.05);
  EXPECT_LE(f16.summary["amp_skipped_steps"].get<int64_t>(), 3);
}

TEST(AmpTraining, GPTOnFortunesFollowsF32) {
  if (!fs::exists("/usr/share/games/fortunes")) GTEST_SKIP() << "fortunes is not installed";
  json cfg = json::parse(R"({
    "model": {"name": "gpt", "block_size": 32, "n_layer": 2, "n_head": 2, "n_embd": 64, "dropout": 0.0},
    "data": {"dataset": "fortunes", "level": "byte", "block_size": 32, "stride": 32, "train_subset": 2048},
    "optimizer": {"name": "adamw", "lr": 0.003},
    "train": {"steps": 40, "batch_size": 16, "num_workers": 1, "seed": 1, "log_every": 100}
  })");
  Curve f32 = run(cfg, "f32", "gpt"), bf16 = run(cfg, "bf16", "gpt"), f16 = run(cfg, "f16", "gpt");
  compare(f32, bf16, "GPT bf16", 0.03, 0.03);
  compare(f32, f16, "GPT f16", 0.05, 0.05);
}

TEST(AmpTraining, F16OverflowSkipsStepsAndKeepsGoing) {
  std::string d = out_dir("overflow");
  json cfg = json::parse(R"({
    "model": {"name": "mlp", "in_features": 48, "hidden": [32], "num_classes": 4},
    "data": {"dataset": "synthetic_images", "channels": 3, "height": 4, "width": 4, "num_classes": 4,
             "train_size": 512, "eval_size": 64},
    "optimizer": {"name": "adam", "lr": 0.01},
    "train": {"steps": 40, "batch_size": 16, "num_workers": 1, "precision": "f16",
              "grad_scaler": {"init_scale": 1.0e12, "growth_interval": 1000}}
  })");
  cfg["output"] = d;
  train::Trainer t(train::build_recipe(cfg), quiet());
  json s = t.fit();
  // 1e12 halves to below f16's range (65504 / largest gradient) in ~25 steps.
  int64_t skipped = s["amp_skipped_steps"];
  EXPECT_GE(skipped, 15);
  EXPECT_LT(skipped, 40);
  EXPECT_EQ(t.grad_scaler().skipped_steps(), skipped);
  EXPECT_LT(t.grad_scaler().get_scale(), 1.0e6);
  EXPECT_EQ(s["steps"], 40);
  // The checkpoint holds finite weights and the scaler's state.
  io::Checkpoint c = io::load_checkpoint(s["checkpoint"].get<std::string>());
  for (auto& [name, w] : c.model) EXPECT_TRUE(ops::all(ops::isfinite(w)).item<bool>()) << name;
  EXPECT_EQ(c.state["grad_scaler"]["skipped_steps"], skipped);
  EXPECT_EQ(c.state["grad_scaler"]["scale"].get<double>(), t.grad_scaler().get_scale());
  // metrics.jsonl records the scale and the skipped steps.
  std::ifstream f(d + "/metrics.jsonl");
  std::string first;
  std::getline(f, first);
  EXPECT_TRUE(json::parse(first).contains("loss_scale"));
  fs::remove_all(d);
}

TEST(AmpTraining, NoCheckpointWithNonFiniteWeights) {
  std::string d = out_dir("nan");
  json cfg = json::parse(R"({
    "model": {"name": "mlp", "in_features": 48, "hidden": [8], "num_classes": 4},
    "data": {"dataset": "synthetic_images", "channels": 3, "height": 4, "width": 4, "num_classes": 4,
             "train_size": 64, "eval_size": 16},
    "train": {"steps": 2, "batch_size": 16, "num_workers": 0}
  })");
  cfg["output"] = d;
  train::Trainer t(train::build_recipe(cfg), quiet());
  json s = t.fit();
  const std::string good = s["checkpoint"];
  {
    NoGradGuard no_grad;
    t.model().named_parameters()[1].second.fill_(NAN);  // net.0.bias
  }
  try {
    t.save_checkpoint();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("parameter 'net.0.bias' holds NaN or Inf"), std::string::npos) << m;
    EXPECT_NE(m.find(good), std::string::npos) << m;  // names the last good checkpoint
  }
  EXPECT_EQ(io::resolve_checkpoint("latest", d + "/checkpoints"), good);
  fs::remove_all(d);
}

TEST(AmpTraining, ConfigErrors) {
  json cfg = json::parse(R"({
    "model": {"name": "mlp", "in_features": 48, "hidden": [8], "num_classes": 4},
    "data": {"dataset": "synthetic_images", "channels": 3, "height": 4, "width": 4, "num_classes": 4,
             "train_size": 64, "eval_size": 16},
    "train": {"steps": 2, "precision": "fp8"}
  })");
  auto err = [](const json& c) {
    try {
      train::build_recipe(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(err(cfg).find("'train.precision' must be f32, bf16 or f16, got 'fp8'"), std::string::npos) << err(cfg);
  cfg["train"]["precision"] = "f16";
  cfg["train"]["grad_scaler"] = {{"backoff_factor", 2.0}};
  EXPECT_NE(err(cfg).find("backoff_factor must be in (0, 1)"), std::string::npos) << err(cfg);
  cfg["train"]["grad_scaler"] = {{"growth_intervall", 10}};
  EXPECT_NE(err(cfg).find("growth_interval"), std::string::npos) << err(cfg);  // did you mean
}
