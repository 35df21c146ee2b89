// The `tessera` command line: train, eval and info.
//
//   tessera train examples/configs/fashion_mnist_cnn.yaml [--resume latest] [--set train.epochs=5]
//                 [--precision bf16|f16|f32] [--profile N]
//   tessera eval runs/fashion_mnist_cnn/checkpoints/step-000002814
//   tessera info runs/fashion_mnist_cnn/checkpoints/step-000002814
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>

#include "tessera/core/allocator.h"
#include "tessera/core/parallel.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/config.h"
#include "tessera/train/trainer.h"

using namespace tessera;
using nlohmann::json;

namespace {

std::string human_bytes(uintmax_t b) {
  char buf[32];
  if (b >= (1u << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  return buf;
}

// A checkpoint argument: a checkpoint directory, or a run directory (its latest).
std::string checkpoint_dir(const std::string& arg) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(arg) / "state.json")) return arg;
  if (fs::is_directory(fs::path(arg) / "checkpoints")) return io::resolve_checkpoint("latest", arg + "/checkpoints");
  return io::resolve_checkpoint("latest", arg);
}

int cmd_train(const std::string& config_path, const std::string& resume, const std::vector<std::string>& sets,
              const std::string& output, int progress, int64_t profile, const std::string& precision) {
  json config = io::load_yaml(config_path);
  for (auto& s : sets) train::apply_override(config, s);
  if (!precision.empty()) train::apply_override(config, "train.precision=" + precision);
  if (!output.empty()) config["output"] = output;
  if (!config.contains("output"))
    config["output"] = "runs/" + std::filesystem::path(config_path).stem().string();
  train::TrainerOptions o;
  o.resume = resume;
  o.progress = progress;
  o.profile_steps = profile;
  train::Trainer t(train::build_recipe(config, config_path), o);
  json summary = t.fit();
  const std::string ckpt = summary["checkpoint"].get<std::string>();
  if (t.stopped_early()) {
    std::printf("\nstopped; continue with:\n  tessera train %s --resume latest\n", config_path.c_str());
    return 0;
  }
  std::printf("\nwhat next:\n");
  std::printf("  tessera eval %s      # evaluate the checkpoint again\n", ckpt.c_str());
  std::printf("  tessera info %s      # the model, its training state and metrics\n", ckpt.c_str());
  std::printf("  tessera train %s --set train.epochs=N --resume latest   # train longer\n", config_path.c_str());
  std::printf("  other configs: examples/configs/ (fashion_mnist_mlp, fashion_mnist_cnn, resnet18_synthetic, "
              "char_gpt)\n");
  return 0;
}

int cmd_eval(const std::string& arg, int64_t batches) {
  std::string dir = checkpoint_dir(arg);
  io::Checkpoint c = io::load_checkpoint(dir);
  TS_CHECK(c.state.contains("config"), dir, "/state.json has no config: cannot rebuild the model");
  train::Recipe r = train::build_recipe(c.state["config"], dir + "/state.json (config)");
  nn::StateDict sd{c.model};
  try {
    r.model->load_state_dict(sd, true);
  } catch (const Error& e) {
    TS_ERROR("checkpoint ", dir, " does not fit the model its config describes: ", e.what());
  }
  TS_CHECK(r.eval_data, "the config has no evaluation data");
  train::TrainerOptions o;
  o.quiet = true;
  o.handle_signals = false;
  train::Trainer t(std::move(r), o);
  auto t0 = std::chrono::steady_clock::now();
  train::EvalMetrics m = t.evaluate(batches);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("checkpoint  %s (step %lld)\n", dir.c_str(), static_cast<long long>(c.state.value("step", 0)));
  std::printf("samples     %lld in %.2f s\n", static_cast<long long>(m.samples), secs);
  std::printf("loss        %.4f\n", m.loss);
  if (m.perplexity > 0)
    std::printf("perplexity  %.3f\n", m.perplexity);
  else
    std::printf("accuracy    %.2f%%\n", 100 * m.accuracy);
  return 0;
}

int cmd_info(const std::string& arg) {
  namespace fs = std::filesystem;
  std::string dir = checkpoint_dir(arg);
  io::Checkpoint c = io::load_checkpoint(dir);
  const json& s = c.state;
  train::Recipe r = train::build_recipe(s.value("config", json::object()), dir + "/state.json (config)", true);
  nn::StateDict sd{c.model};
  r.model->load_state_dict(sd, true);
  std::printf("checkpoint %s\n", dir.c_str());
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json"})
    std::printf("  %-22s %s\n", f, human_bytes(fs::file_size(fs::path(dir) / f)).c_str());
  std::printf("\nmodel: %s, %lld parameters (%lld tensors)\n%s\n", s.value("model", "?").c_str(),
              static_cast<long long>(r.model->num_parameters()), static_cast<long long>(c.model.size()),
              r.model->str().c_str());
  std::printf("training state\n");
  std::printf("  step        %lld\n", static_cast<long long>(s.value("step", 0)));
  std::printf("  epoch       %lld (next batch %lld)\n", static_cast<long long>(s.value("epoch", 0)),
              static_cast<long long>(s.contains("data") ? s["data"].value("batch", 0) : 0));
  std::printf("  time        %.1f s\n", s.value("elapsed_seconds", 0.0));
  if (c.optimizer_groups.is_array() && !c.optimizer_groups.empty()) {
    const json& o = c.optimizer_groups[0]["options"];
    std::printf("  optimizer   %s, lr %.3g (%zu groups)\n",
                s["config"].contains("optimizer") ? s["config"]["optimizer"].value("name", "adam").c_str() : "adam",
                o.value("lr", 0.0), c.optimizer_groups.size());
  }
  if (s.contains("scheduler") && !s["scheduler"].is_null())
    std::printf("  scheduler   %s at step %lld\n", s["scheduler"].value("name", "?").c_str(),
                static_cast<long long>(s["scheduler"].value("last_epoch", 0)));
  if (s.contains("metrics")) std::printf("metrics\n  %s\n", s["metrics"].dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera: train, evaluate and inspect models"};
  app.require_subcommand(1);

  auto* train = app.add_subcommand("train", "train a model from a YAML config");
  std::string config, resume, output;
  std::vector<std::string> sets;
  bool plain = false;
  train->add_option("config", config, "the YAML config (see examples/configs/)")->required();
  train->add_option("--resume", resume, "continue from 'latest' or a checkpoint directory");
  train->add_option("--set", sets, "override a config value, e.g. --set train.epochs=5 (repeatable)");
  train->add_option("--output", output, "the output directory (default: runs/<config name>)");
  train->add_flag("--plain", plain, "plain log lines instead of a live progress bar");
  int64_t profile = -1;
  std::string precision;
  train->add_option("--profile", profile,
                    "profile N steps after warm-up (train.profile_warmup, default 3); writes <output>/profile/")
      ->check(CLI::NonNegativeNumber);
  train->add_option("--precision", precision, "f32, bf16 or f16 (the same as --set train.precision=...)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));

  auto* eval = app.add_subcommand("eval", "evaluate a checkpoint on its config's evaluation data");
  std::string ckpt;
  int64_t batches = 0;
  eval->add_option("checkpoint", ckpt, "a checkpoint directory, or a run directory (its latest)")->required();
  eval->add_option("--batches", batches, "evaluate only this many batches");

  auto* info = app.add_subcommand("info", "show a checkpoint's model, training state and metrics");
  std::string info_ckpt;
  info->add_option("checkpoint", info_ckpt, "a checkpoint directory, or a run directory")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*train) return cmd_train(config, resume, sets, output, plain ? 0 : -1, profile, precision);
    if (*eval) return cmd_eval(ckpt, batches);
    if (*info) return cmd_info(info_ckpt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
