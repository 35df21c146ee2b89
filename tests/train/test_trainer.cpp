// The Trainer end to end: exact resume, Ctrl-C checkpointing, config errors,
// and a real model learning Fashion-MNIST inside the test budget.
#include <gtest/gtest.h>

#include <filesystem>

#include "tessera/data/datasets.h"
#include "tessera/io/checkpoint.h"
#include "tessera/ops/ops.h"
#include "tessera/train/trainer.h"
#include "test_util.h"

using namespace tessera;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {
std::string out_dir(const std::string& name) { return tessera::testing::scratch_dir("train_" + name); }

// A small classifier with dropout, shuffling, augmentation-free synthetic data,
// a warmup-cosine schedule, gradient accumulation and clipping: every source of
// state a resume has to restore.
json small_config(const std::string& out, int64_t steps) {
  json c = json::parse(R"({
    "model": {"name": "mlp", "in_features": 48, "hidden": [32], "num_classes": 4, "dropout": 0.3},
    "data": {"dataset": "synthetic_images", "channels": 3, "height": 4, "width": 4, "num_classes": 4,
             "train_size": 200, "eval_size": 40},
    "optimizer": {"name": "adamw", "lr": 0.01, "weight_decay": 0.01},
    "scheduler": {"name": "warmup_cosine", "warmup_steps": 3},
    "train": {"batch_size": 16, "grad_accum": 2, "clip_grad_norm": 1.0, "num_workers": 2, "seed": 5,
              "checkpoint_every": 1000, "eval_every": 1000}
  })");
  c["output"] = out;
  c["train"]["steps"] = steps;
  return c;
}

train::TrainerOptions quiet(const std::string& resume = "") {
  train::TrainerOptions o;
  o.quiet = true;
  o.handle_signals = false;
  o.resume = resume;
  return o;
}

TensorList params_of(train::Trainer& t) {
  TensorList out;
  for (auto& p : t.model().parameters()) out.push_back(p.detach().clone());
  return out;
}
}  // namespace

TEST(Trainer, ResumeIsBitExact) {
  const int64_t N = 17, k = 7;  // k is not an epoch boundary (6 steps per epoch)
  std::string a = out_dir("straight"), b = out_dir("resumed");
  train::Trainer straight(train::build_recipe(small_config(a, N)), quiet());
  straight.fit();
  {
    // the same run, interrupted after k steps (as Ctrl-C would): the forward
    // hook asks for a stop during the 2k-th micro-batch; the loop finishes
    // that optimizer step, checkpoints and returns
    train::Trainer first(train::build_recipe(small_config(b, N)), quiet());
    int forwards = 0;
    first.model().register_forward_hook([&](nn::Module&, const Tensor&, Tensor&) {
      if (first.model().is_training() && ++forwards == 2 * k) train::Trainer::request_stop();
    });
    first.fit();
    EXPECT_TRUE(first.stopped_early());
    EXPECT_EQ(first.step(), k);
  }
  train::Trainer second(train::build_recipe(small_config(b, N)), quiet("latest"));
  EXPECT_EQ(second.step(), k);
  second.fit();
  TensorList pa = params_of(straight), pb = params_of(second);
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(ops::all(ops::eq(pa[i], pb[i])).item<bool>()) << "parameter " << i << " differs after resume";
  EXPECT_DOUBLE_EQ(straight.optimizer().param_groups()[0].lr(), second.optimizer().param_groups()[0].lr());
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Trainer, StopRequestCheckpointsAndResumes) {
  std::string d = out_dir("stop");
  json cfg = small_config(d, 50);
  train::Trainer t(train::build_recipe(cfg), quiet());
  // requested during the first micro-batch: the step (2 micro-batches) completes first
  t.model().register_forward_hook([](nn::Module&, const Tensor&, Tensor&) { train::Trainer::request_stop(); });
  json summary = t.fit();
  EXPECT_TRUE(t.stopped_early());
  EXPECT_EQ(summary["steps"], 1);
  io::Checkpoint c = io::load_checkpoint(io::resolve_checkpoint("latest", d + "/checkpoints"));
  EXPECT_EQ(c.state["step"], 1);
  EXPECT_TRUE(fs::exists(d + "/metrics.jsonl"));
  fs::remove_all(d);
}

TEST(Trainer, ConfigErrorsNameTheProblem) {
  auto err = [](json cfg) {
    try {
      train::build_recipe(cfg, "cfg.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  json good = small_config(out_dir("cfg"), 5);
  json c1 = good;
  c1["train"]["batch_sizee"] = 3;
  EXPECT_NE(err(c1).find("unknown key 'train.batch_sizee' (did you mean 'batch_size'?)"), std::string::npos)
      << err(c1);
  json c2 = good;
  c2["train"]["epochs"] = "three";
  EXPECT_NE(err(c2).find("'train.epochs' must be an integer"), std::string::npos) << err(c2);
  json c3 = good;
  c3["model"]["name"] = "resnet99";
  EXPECT_NE(err(c3).find("unknown model 'resnet99'"), std::string::npos) << err(c3);
  json c4 = good;
  c4["data"] = {{"dataset", "fashion_mnist"}, {"root", "/no/such/dir"}};
  EXPECT_NE(err(c4).find("/no/such/dir/train-images-idx3-ubyte"), std::string::npos) << err(c4);
  json c5 = good;
  c5["optimizer"]["momentum"] = 0.9;  // adamw has no momentum
  EXPECT_NE(err(c5).find("unknown key 'optimizer.momentum'"), std::string::npos) << err(c5);
  EXPECT_NE(err(c4).find("Debian's package dataset-fashion-mnist"), std::string::npos) << err(c4);
}

TEST(Trainer, CheckpointOfAnotherModelNamesTheMismatch) {
  std::string d = out_dir("mismatch");
  train::Trainer t(train::build_recipe(small_config(d, 5)), quiet());
  t.fit();
  json other = small_config(d, 5);
  other["model"]["hidden"] = {16};
  try {
    train::Trainer r(train::build_recipe(other), quiet("latest"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("net.0.weight (checkpoint [32, 48], model [16, 48])"), std::string::npos)
        << e.what();
  }
  fs::remove_all(d);
}

TEST(Trainer, MLPLearnsFashionMNISTSubset) {
  if (!fs::exists(data::kFashionMNISTRoot)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  std::string d = out_dir("fmnist");
  json cfg = json::parse(R"({
    "model": {"name": "mlp", "hidden": [128], "num_classes": 10},
    "data": {"dataset": "fashion_mnist", "train_subset": 5000, "eval_subset": 2000},
    "optimizer": {"name": "adam", "lr": 0.002},
    "train": {"epochs": 4, "batch_size": 64, "num_workers": 2, "seed": 0}
  })");
  cfg["output"] = d;
  train::Trainer t(train::build_recipe(cfg), quiet());
  json s = t.fit();
  double acc = s["eval"]["accuracy"];
  std::printf("[Trainer] MLP on 5,000 Fashion-MNIST images: %.2f%% test accuracy\n", 100 * acc);
  EXPECT_GE(acc, 0.80);
  fs::remove_all(d);
}
