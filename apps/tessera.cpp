// The `tessera` command line: train, eval, info, and the compiler's export, run
// and inspect.
//
//   tessera train examples/configs/fashion_mnist_cnn.yaml [--resume latest] [--set train.epochs=5]
//                 [--precision bf16|f16|f32] [--profile N]
//   tessera eval runs/fashion_mnist_cnn/checkpoints/step-000002814
//   tessera info runs/fashion_mnist_cnn/checkpoints/step-000002814
//   tessera export runs/fashion_mnist_cnn --format onnx|tessera [--output model.onnx] [--dump]
//   tessera run model.onnx --input x.npy [--output y.npy] [--repeat 100]
//   tessera inspect model.tsr [--dump]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "tessera/compile/capture.h"
#include "tessera/compile/inspect.h"
#include "tessera/compile/model.h"
#include "tessera/compile/onnx.h"
#include "tessera/compile/passes.h"
#include "tessera/compile/serialize.h"
#include "tessera/core/allocator.h"
#include "tessera/io/npy.h"
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

// A checkpoint's model as a graph: traced on a batch of its evaluation data,
// with the batch (and, for language models, the sequence) dimension dynamic.
int cmd_export(const std::string& arg, const std::string& format, std::string output, int64_t batch, bool fixed,
               bool dump) {
  std::string dir = checkpoint_dir(arg);
  io::Checkpoint c = io::load_checkpoint(dir);
  TS_CHECK(c.state.contains("config"), dir, "/state.json has no config: cannot rebuild the model");
  train::Recipe r = train::build_recipe(c.state["config"], dir + "/state.json (config)");
  nn::StateDict sd{c.model};
  r.model->load_state_dict(sd, true);
  r.model->eval();
  TS_CHECK(r.eval_data || r.train_data, "the config has no data to trace the model with");
  data::DatasetPtr d = r.eval_data ? r.eval_data : r.train_data;
  TS_CHECK(batch >= 2 && batch <= d->size(), "--batch must be between 2 and ", d->size(), ", got ", batch);
  std::vector<int64_t> idx(batch);
  for (int64_t i = 0; i < batch; ++i) idx[i] = i;
  Tensor x = d->get_batch(idx).at(0);
  compile::CaptureOptions co;
  co.input_names = {r.task == train::Task::LanguageModel ? "ids" : "x"};
  if (!fixed) {
    co.dynamic.push_back({0, 0, "N"});
    if (r.task == train::Task::LanguageModel && x.dim() >= 2 && x.shape()[1] >= 2) co.dynamic.push_back({0, 1, "T"});
  }
  nn::Module& m = *r.model;
  compile::NamedTensors params = m.named_parameters();
  for (auto& b : m.named_buffers()) params.push_back(b);
  compile::Graph g = compile::capture([&](const TensorList& in) { return TensorList{m(in[0])}; }, {x}, params, co);
  compile::PassOptions po;
  if (format == "onnx") po.disable = compile::tessera_only_passes();  // ONNX has no fused kernels; runtimes fuse themselves
  auto report = compile::optimize(g, po);
  if (output.empty()) output = format == "onnx" ? "model.onnx" : "model.tsr";
  if (format == "onnx") compile::export_onnx(g, output);
  else compile::save(g, output);
  if (dump) std::printf("%s\n", compile::dump(g).c_str());
  std::printf("exported %s (step %lld) to %s\n", dir.c_str(), static_cast<long long>(c.state.value("step", 0)),
              output.c_str());
  std::printf("passes:");
  for (const auto& p : report) std::printf(" %s (%d)", p.name.c_str(), p.changes);
  std::printf("\n\n%s", compile::summary_text(g).c_str());
  return 0;
}

int cmd_run(const std::string& path, const std::vector<std::string>& inputs, const std::string& output,
            int repeat) {
  Model m = load(path);
  TensorList xs;
  for (const std::string& p : inputs) xs.push_back(io::load_npy(p));
  TensorList ys = m.run(xs);
  if (repeat > 1) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < repeat; ++i) m.run(xs);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / repeat;
    std::printf("latency     %.3f ms per run (mean of %d)\n", ms, repeat);
  }
  for (size_t i = 0; i < ys.size(); ++i) {
    const Tensor& y = ys[i];
    std::printf("output%zu     %s%s\n", i, dtype_name(y.dtype()), shape_str(y.shape()).c_str());
    if (output.empty()) {
      std::ostringstream os;
      os << y;
      std::printf("%s\n", os.str().c_str());
    } else {
      std::string p = ys.size() == 1 ? output : output + "." + std::to_string(i) + ".npy";
      io::save_npy(p, y);
      std::printf("            saved to %s\n", p.c_str());
    }
  }
  return 0;
}

int cmd_inspect(const std::string& path, bool dump, int64_t size) {
  Model m = load(path);
  std::printf("%s\n%s", path.c_str(), compile::summary_text(m.graph(), size).c_str());
  if (dump) std::printf("\n%s", compile::dump(m.graph()).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera: train, evaluate, export, run and inspect models"};
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

  auto* exp = app.add_subcommand("export", "export a checkpoint's model as ONNX or a compiled Tessera graph");
  std::string exp_ckpt, exp_format = "onnx", exp_out;
  int64_t exp_batch = 2;
  bool exp_fixed = false, exp_dump = false;
  exp->add_option("checkpoint", exp_ckpt, "a checkpoint directory, or a run directory (its latest)")->required();
  exp->add_option("--format", exp_format, "onnx (opset 17) or tessera (graph.json + weights.safetensors)")
      ->check(CLI::IsMember({"onnx", "tessera"}));
  exp->add_option("--output", exp_out, "the file (onnx) or directory (tessera); default model.onnx / model.tsr");
  exp->add_option("--batch", exp_batch, "the batch size to trace with (the batch dimension stays dynamic)");
  exp->add_flag("--static", exp_fixed, "fix every dimension at the traced size");
  exp->add_flag("--dump", exp_dump, "print the optimized graph");

  auto* run = app.add_subcommand("run", "run a model (ONNX file or compiled graph) on .npy inputs");
  std::string run_model, run_out;
  std::vector<std::string> run_inputs;
  int run_repeat = 1;
  run->add_option("model", run_model, "an .onnx file or a directory saved by export --format tessera")->required();
  run->add_option("--input", run_inputs, "an input as .npy, in the model's input order (repeatable)")->required();
  run->add_option("--output", run_out, "save the output as .npy instead of printing it");
  run->add_option("--repeat", run_repeat, "run N more times and report the mean latency")->check(CLI::PositiveNumber);

  auto* inspect = app.add_subcommand("inspect", "show a model's inputs, outputs, ops, parameters and FLOPs");
  std::string insp_model;
  bool insp_dump = false;
  int64_t insp_size = 1;
  inspect->add_option("model", insp_model, "an .onnx file or a directory saved by export --format tessera")->required();
  inspect->add_flag("--dump", insp_dump, "print the whole graph");
  inspect->add_option("--size", insp_size, "the value of the dynamic dimensions for the FLOPs estimate")
      ->check(CLI::PositiveNumber);

  CLI11_PARSE(app, argc, argv);
  try {
    if (*train) return cmd_train(config, resume, sets, output, plain ? 0 : -1, profile, precision);
    if (*eval) return cmd_eval(ckpt, batches);
    if (*info) return cmd_info(info_ckpt);
    if (*exp) return cmd_export(exp_ckpt, exp_format, exp_out, exp_batch, exp_fixed, exp_dump);
    if (*run) return cmd_run(run_model, run_inputs, run_out, run_repeat);
    if (*inspect) return cmd_inspect(insp_model, insp_dump, insp_size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
