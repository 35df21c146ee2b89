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
//   tessera quantize runs/char_gpt --method q4_0 [--activations int8] [--output DIR]
//   tessera prune runs/fashion_mnist_mlp --sparsity 0.9 --finetune-steps 500 [--rounds 3] [--method structured]
//   tessera generate model.gguf -p "Once upon a time" [-n 128] [--temp 0.8] [--seed 1] (apps/generate.cpp)
//   tessera perplexity model.gguf -f text.txt [-c 512] [--chunks K] (apps/generate.cpp)
//   tessera launch -n 4 [--max-restarts 1] -- tessera train CONFIG (apps/launch.cpp)
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "client.h"
#include "generate.h"
#include "launch.h"
#include "serve_llm.h"
#include "latency.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/compile/capture.h"
#include "tessera/compile/compile.h"
#include "tessera/compile/inspect.h"
#include "tessera/compile/model.h"
#include "tessera/compile/onnx.h"
#include "tessera/compile/passes.h"
#include "tessera/llm/convert_gguf.h"
#include "tessera/llm/engine.h"
#include "tessera/llm/gguf.h"
#include "tessera/llm/gpt_gguf.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/compile/serialize.h"
#include "tessera/core/allocator.h"
#include "tessera/io/npy.h"
#include "tessera/core/parallel.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/config.h"
#include "tessera/quant/prune.h"
#include "tessera/ops/ops.h"
#include "tessera/quant/ptq.h"
#include "tessera/quant/qat.h"
#include "tessera/serve/http_server.h"
#include "tessera/serve/repository.h"
#include "tessera/quant/weights.h"
#include "tessera/llm/lora.h"
#include "tessera/train/meta_size.h"
#include "tessera/train/run.h"
#include "tessera/train/trainer.h"
#include "tessera/distributed/trainer_parallel.h"
#include "tessera/version.h"

using namespace tessera;
using nlohmann::json;

namespace {

// The command as it was run (build/apps/tessera, or tessera on PATH): the
// commands printed for what to do next work when pasted as they are.
std::string g_argv0 = "tessera";
const char* self() { return g_argv0.c_str(); }

std::string human_bytes(uintmax_t b) {
  char buf[32];
  if (b >= (1u << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  return buf;
}

// A checkpoint argument: a checkpoint directory, or a run directory (its latest).
using train::checkpoint_dir;
using Loaded = train::LoadedRun;
Loaded load_model(const std::string& arg, bool model_only = false) { return train::load_run(arg, model_only); }

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
  // Under `tessera launch` (or mpirun, srun) every rank runs this with the same config.
  if (distributed::is_distributed()) distributed::check_same_config(*distributed::world(), config);
  train::Recipe recipe = train::build_recipe(config, config_path, false, true);
  TS_CHECK(!recipe.parallel.splits_model() || !config.contains("lora"), "config: parallel.tensor and "
           "parallel.pipeline do not run a LoRA recipe yet (its adapter files are written from the whole model); "
           "use data parallelism (parallel.data)");
  if (distributed::is_distributed() || recipe.parallel.data > 1 || recipe.parallel.splits_model())
    o.parallel = distributed::trainer_parallel(recipe.parallel, distributed::world());
  train::Trainer t(std::move(recipe), o);
  json summary = t.fit();
  if (o.parallel && o.parallel->rank() != 0) return 0;  // rank 0 reports for the job
  const std::string ckpt = summary["checkpoint"].get<std::string>();
  if (const auto* llama = dynamic_cast<const nn::zoo::Llama*>(t.recipe().model.get()); llama && llm::has_lora(*llama)) {
    // Note [LoRA]: the adapter in PEFT's files and as a llama.cpp GGUF adapter.
    const std::string out = config["output"].get<std::string>();
    llm::save_lora_peft(*llama, out + "/adapter");
    llm::save_lora_gguf(*llama, out + "/adapter.gguf");
    std::printf("\nLoRA adapter: %s/adapter/adapter_model.safetensors (PEFT) and %s/adapter.gguf\n", out.c_str(),
                out.c_str());
    std::printf("  %s serve-llm %s --lora NAME=%s/adapter.gguf\n", self(),
                config["lora"]["base"].get<std::string>().c_str(), out.c_str());
  }
  if (t.stopped_early()) {
    const std::string launch = o.parallel ? "launch -n " + std::to_string(o.parallel->size()) + " -- tessera " : "";
    std::printf("\nstopped; continue with:\n  %s %strain %s --resume latest\n", self(), launch.c_str(),
                config_path.c_str());
    return 0;
  }
  std::printf("\nwhat next:\n");
  std::printf("  %s eval %s      # evaluate the checkpoint again\n", self(), ckpt.c_str());
  std::printf("  %s info %s      # the model, its training state and metrics\n", self(), ckpt.c_str());
  std::printf("  %s train %s --set train.epochs=N --resume latest   # train longer\n", self(), config_path.c_str());
  if (t.recipe().task == train::Task::LanguageModel && !t.recipe().text_level.empty())
    std::printf("  %s generate %s -p \"The \" -n 200   # text from the model (docs/llm.md)\n", self(), ckpt.c_str());
  std::printf("  other configs: examples/configs/ (fashion_mnist_mlp, fashion_mnist_cnn, resnet18_synthetic, "
              "char_gpt, char_llama)\n");
  return 0;
}

int cmd_eval(const std::string& arg, int64_t batches) {
  Loaded l = load_model(arg);
  const std::string& dir = l.dir;
  const io::Checkpoint& c = l.ckpt;
  train::Recipe& r = l.recipe;
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
  Loaded l = load_model(arg, true);
  const std::string& dir = l.dir;
  const io::Checkpoint& c = l.ckpt;
  const json& s = c.state;
  train::Recipe& r = l.recipe;
  std::printf("checkpoint %s\n", dir.c_str());
  if (s.contains("quantization")) std::printf("quantized  %s\n", s["quantization"].dump().c_str());
  for (const char* section : {"qat", "prune"})
    if (s.contains("config") && s["config"].contains(section))
      std::printf("%-10s %s\n", section, s["config"][section].dump().c_str());
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

// The one batch a zoo model is sized with: its input shape from its config,
// batch `batch`, sequence length `seq` (0: the model's context).
train::MetaInput zoo_input(nn::Module& m, int64_t batch, int64_t seq) {
  namespace zoo = nn::zoo;
  if (auto* x = dynamic_cast<zoo::MLP*>(&m)) return {{batch, x->config.in_features}};
  if (auto* x = dynamic_cast<zoo::LeNet*>(&m))
    return {{batch, x->config.in_channels, x->config.image_size, x->config.image_size}};
  if (auto* x = dynamic_cast<zoo::ResNet*>(&m)) {
    int64_t s = x->config.stem == "imagenet" ? 224 : 32;
    return {{batch, x->config.in_channels, s, s}};
  }
  if (auto* x = dynamic_cast<zoo::GPT*>(&m)) return {{batch, seq ? seq : x->config.block_size}, DType::I64};
  if (auto* x = dynamic_cast<zoo::Llama*>(&m)) return {{batch, seq ? seq : x->config.max_seq_len}, DType::I64};
  TS_ERROR("info --meta: no input shape is known for a ", m.type_name(), " model");
}

std::string si(double v) {  // 1.2 G, 340 M
  char buf[32];
  const char* units[] = {"", " K", " M", " G", " T", " P"};
  int u = 0;
  while (v >= 1000 && u < 5) v /= 1000, ++u;
  std::snprintf(buf, sizeof buf, u ? "%.3g%s" : "%.0f%s", v, units[u]);
  return buf;
}

// A model's size from its config or a GGUF file's shapes, before anything is
// allocated: built on the meta device, one training step run there.
int cmd_meta_info(const std::string& arg, int64_t batch, int64_t seq, const std::vector<int64_t>& ranks) {
  train::MetaSizeRequest req;
  train::Recipe recipe;
  json config;
  std::string what;
  const bool gguf = arg.ends_with(".gguf");
  if (gguf) {
    llm::GgufFile f = llm::GgufFile::open(arg);
    nn::zoo::LlamaConfig c = llm::llama_config_from_gguf(f, true);
    what = "the Llama of " + arg + " (as trainable f32 weights)";
    req.build = [c] { return std::make_shared<nn::zoo::Llama>(c); };
    req.make_optimizer = [](nn::Module& m) { return optim::make_optimizer("adamw", {{m.parameters(), {}}}, {}); };
    if (batch == 0) batch = 1;
  } else {
    config = io::load_yaml(arg);
    what = arg;
    // A language model trains on windows of data.block_size tokens.
    if (seq == 0 && config.contains("data") && config["data"].is_object() && config["data"].contains("block_size") &&
        config["data"]["block_size"].is_number_integer())
      seq = config["data"]["block_size"].get<int64_t>();
    req.build = [&] {
      recipe = train::build_recipe(config, arg, true);
      return recipe.model;
    };
    req.make_optimizer = [&](nn::Module& m) { return recipe.make_optimizer(m); };
  }
  req.input = [&](nn::Module& m) {
    if (batch == 0) batch = recipe.train.batch_size;
    return zoo_input(m, batch, seq);
  };
  train::MetaSize s = train::size_on_meta(req);
  std::printf("%s, sized on the meta device (nothing allocated)\n", what.c_str());
  if (!gguf && config.contains("model") && config["model"].is_object() && !config["model"].contains("vocab_size") &&
      (config["model"].value("name", "") == "gpt" || config["model"].value("name", "") == "llama"))
    std::printf("(the config sets no model.vocab_size: training takes it from the data; sized with the model's "
                "default)\n");
  std::printf("\n");
  std::printf("%-40s %-22s %14s %12s\n", "module", "type", "parameters", "bytes");
  for (const train::ModuleSize& m : s.modules)
    if (m.params > 0 || m.path.empty())
      std::printf("%-40s %-22s %14s %12s\n", m.path.empty() ? "(model)" : m.path.c_str(), m.type.c_str(),
                  si(static_cast<double>(m.params)).c_str(), human_bytes(static_cast<uintmax_t>(m.bytes)).c_str());
  std::printf("\nparameters   %lld (%lld trainable)\n", static_cast<long long>(s.params),
              static_cast<long long>(s.trainable));
  for (const auto& [dt, b] : s.param_bytes_by_dtype)
    std::printf("  %-10s %s\n", dt.c_str(), human_bytes(static_cast<uintmax_t>(b)).c_str());
  std::printf("model memory %s (parameters and buffers, as allocated)\n",
              human_bytes(static_cast<uintmax_t>(s.param_bytes)).c_str());
  std::printf("gradients    %s\n", human_bytes(static_cast<uintmax_t>(s.grad_bytes)).c_str());
  if (s.optimizer_bytes >= 0)
    std::printf("optimizer    %s\n", human_bytes(static_cast<uintmax_t>(s.optimizer_bytes)).c_str());
  else
    std::printf("optimizer    unknown: %s\n", s.optimizer_note.c_str());
  std::printf("\none step at batch %lld:\n", static_cast<long long>(batch));
  std::printf("  FLOPs        %sFLOP forward, %sFLOP forward + backward (products: matmul, convolution, attention)\n",
              si(static_cast<double>(s.forward_flops)).c_str(), si(static_cast<double>(s.step_flops)).c_str());
  std::printf("  activations  %s at the peak of forward + backward\n",
              human_bytes(static_cast<uintmax_t>(s.activation_peak)).c_str());
  std::printf("\nper rank, each rank one batch of activations%s:\n",
              s.optimizer_bytes < 0 ? " (optimizer state unknown: counted as 0)" : "");
  std::printf("  %6s %12s %12s %12s %12s\n", "ranks", "DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3");
  for (int64_t n : ranks) {
    train::RankMemory r = train::per_rank_memory(s, n);
    std::printf("  %6lld %12s %12s %12s %12s\n", static_cast<long long>(n), human_bytes(r.ddp).c_str(),
                human_bytes(r.zero1).c_str(), human_bytes(r.zero2).c_str(), human_bytes(r.zero3).c_str());
  }
  std::printf("(ZeRO-1 shards the optimizer state, ZeRO-2 also the gradients, ZeRO-3 also the parameters)\n");
  return 0;
}

// A GGUF file's header, metadata and tensors.
// A checkpoint (a sharded one from ZeRO, every shard's CRC32 checked) as one
// model.safetensors, and, with --checkpoint, as a whole checkpoint directory
// that any world size and every tool loads.
int cmd_ckpt_consolidate(const std::string& arg, std::string output, bool as_checkpoint) {
  namespace fs = std::filesystem;
  const std::string dir = checkpoint_dir(arg);
  io::Checkpoint c = io::load_checkpoint(dir);
  if (as_checkpoint) {
    if (output.empty()) output = dir + "-consolidated";
    c.state.erase("sharded");
    const fs::path out(output);
    const std::string saved = io::save_checkpoint(out.parent_path().empty() ? "." : out.parent_path().string(),
                                                  out.filename().string(), c);
    std::printf("%s: %zu model and %zu optimizer tensors -> %s (a whole checkpoint)\n", dir.c_str(), c.model.size(),
                c.optimizer.size(), saved.c_str());
    return 0;
  }
  if (output.empty()) output = (fs::path(dir) / "model.safetensors").string();
  io::save_safetensors(output, c.model, {{"format", "pt"}});
  int64_t bytes = 0;
  for (auto& [n, t] : c.model) bytes += static_cast<int64_t>(t.nbytes());
  std::printf("%s: %zu tensors, %s -> %s\n", dir.c_str(), c.model.size(), human_bytes(static_cast<uintmax_t>(bytes)).c_str(),
              output.c_str());
  return 0;
}

int cmd_gguf_info(const std::string& path, size_t max_chars) {
  llm::GgufFile f = llm::GgufFile::open(path);
  std::printf("%s: GGUF version %u, %s, alignment %llu, data section at byte %llu\n", path.c_str(), f.version(),
              human_bytes(f.file_size()).c_str(), static_cast<unsigned long long>(f.alignment()),
              static_cast<unsigned long long>(f.data_offset()));
  size_t key_width = 0;
  for (const auto& [k, v] : f.metadata()) key_width = std::max(key_width, k.size());
  std::printf("\nmetadata (%zu keys)\n", f.metadata().size());
  for (const auto& [k, v] : f.metadata())
    std::printf("  %-*s  %-14s %s\n", static_cast<int>(key_width), k.c_str(), v.type_str().c_str(),
                v.summary(max_chars).c_str());
  uint64_t total = 0;
  size_t name_width = 0;
  for (const auto& t : f.tensors()) {
    total += t.nbytes;
    name_width = std::max(name_width, t.name.size());
  }
  std::printf("\ntensors (%zu, %s)\n", f.tensors().size(), human_bytes(total).c_str());
  for (const auto& t : f.tensors())
    std::printf("  %-*s  %-5s %-22s %10s  at %llu\n", static_cast<int>(name_width), t.name.c_str(),
                llm::ggml_type_name(t.type), shape_str(t.shape()).c_str(), human_bytes(t.nbytes).c_str(),
                static_cast<unsigned long long>(t.offset));
  return 0;
}

// A language model for the engine (train/run.h), its weights named as the
// --weights flags name them (f32, f16, bf16, q8_0, q4_0).
cli::LanguageModel load_language_model(const std::string& path, const std::string& weights, const char* verb,
                                       llm::TensorSplit split = {}) {
  return train::load_language_model(path, *llm::ggml_type_from_name(weights), verb, split);
}

int cmd_generate(const cli::GenerateFlags& f, bool chat) {
  const auto t0 = std::chrono::steady_clock::now();
  const cli::LanguageModel lm = load_language_model(f.model, f.weights, chat ? "chat" : "generate");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (chat) return cli::cmd_chat(f, lm.model, lm.tokenizer, lm.what, seconds, lm.chat_template);
  return cli::cmd_generate(f, lm.model, lm.tokenizer, lm.what, seconds);
}

int cmd_quantize_gguf(const std::string& in, const std::string& out, const std::string& type) {
  const std::optional<llm::GgmlType> t = llm::ggml_type_from_name(type);
  const std::optional<llm::GgufMix> mix = llm::gguf_mix_from_name(type);
  TS_CHECK(t.has_value() || mix.has_value(), "quantize-gguf: unknown type '", type,
           "' (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, or llama.cpp's mix Q4_K_M)");
  llm::GgufFile f = llm::GgufFile::open(in);
  (mix ? llm::convert_gguf(f, *mix) : llm::convert_gguf(f, *t)).save(out);
  std::printf("%s (%s) -> %s (%s, %s)\n", in.c_str(), human_bytes(f.file_size()).c_str(), out.c_str(),
              mix ? "Q4_K_M" : llm::ggml_type_name(*t), human_bytes(std::filesystem::file_size(out)).c_str());
  return 0;
}

// A checkpoint's model as a graph: traced on a batch of its evaluation data,
// with the batch (and, for language models, the sequence) dimension dynamic.
compile::Graph trace_model(Loaded& l, int64_t batch, bool fixed) {
  train::Recipe& r = l.recipe;
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
    if (r.task == train::Task::LanguageModel && x.dim() >= 2 && x.shape()[1] >= 5) {
      // Capture also traces at T + 1 and T + 3 to find how shapes follow T; a
      // language model's data is as long as its context, so trace 3 shorter.
      x = x.narrow(1, 0, x.shape()[1] - 3).contiguous();
      co.dynamic.push_back({0, 1, "T"});
    }
  }
  return compile::capture_module(*r.model, x, co);
}

// A language model run as a GGUF file llama.cpp loads: its Llama or GPT in
// `type`, and its tokenizer when it was trained on one.
int export_gguf(Loaded& l, std::string output, const std::string& type_name) {
  const train::Recipe& r = l.recipe;
  const std::optional<llm::GgmlType> type = llm::ggml_type_from_name(type_name);
  TS_CHECK(type.has_value(), "export: --gguf-type '", type_name, "' is not F32, F16, BF16, Q8_0 or Q4_0");
  TS_CHECK(r.task == train::Task::LanguageModel, "export: ", l.dir, " is not a language model; GGUF holds Llama and "
           "GPT models");
  if (output.empty()) output = "model.gguf";
  const llm::GgufExportOptions opts{.type = *type, .tokenizer = r.tokenizer.get(), .name = std::filesystem::path(l.dir).filename().string()};
  if (auto* llama = dynamic_cast<nn::zoo::Llama*>(r.model.get())) llm::save_llama_gguf(*llama, output, opts);
  else if (auto* gpt = dynamic_cast<nn::zoo::GPT*>(r.model.get())) llm::save_gpt_gguf(*gpt, output, opts);
  else TS_ERROR("export: ", l.dir, " holds a ", r.model_name, "; GGUF export takes llama and gpt models");
  std::printf("exported %s (step %lld) to %s (%s, %s)%s\n", l.dir.c_str(),
              static_cast<long long>(l.ckpt.state.value("step", 0)), output.c_str(), llm::ggml_type_name(*type),
              human_bytes(std::filesystem::file_size(output)).c_str(),
              r.tokenizer ? ", with its tokenizer" : "; no tokenizer (a character vocabulary): llama.cpp cannot load it");
  return 0;
}

int cmd_export(const std::string& arg, const std::string& format, std::string output, int64_t batch, bool fixed,
               bool dump, const std::string& gguf_type) {
  Loaded l = load_model(arg);
  if (format == "gguf") return export_gguf(l, output, gguf_type);
  compile::Graph g = trace_model(l, batch, fixed);
  compile::PassOptions po;
  if (format == "onnx") po.disable = compile::tessera_only_passes();  // ONNX has no fused kernels; runtimes fuse themselves
  auto report = compile::optimize(g, po);
  if (output.empty()) output = format == "onnx" ? "model.onnx" : "model.tsr";
  if (format == "onnx") compile::export_onnx(g, output);
  else compile::save(g, output);
  if (dump) std::printf("%s\n", compile::dump(g).c_str());
  std::printf("exported %s (step %lld) to %s\n", l.dir.c_str(), static_cast<long long>(l.ckpt.state.value("step", 0)),
              output.c_str());
  std::printf("passes:");
  for (const auto& p : report) std::printf(" %s (%d)", p.name.c_str(), p.changes);
  std::printf("\n\n%s", compile::summary_text(g).c_str());
  return 0;
}

int cmd_run(const std::string& path, const std::vector<std::string>& inputs, const std::string& output,
            int repeat, int64_t size) {
  Model m = load(path);
  TensorList xs;
  for (const std::string& p : inputs) xs.push_back(io::load_npy(p));
  if (inputs.empty()) {
    xs = m.example_inputs(size, true);
    std::printf("inputs      random values of the signature (dynamic dimensions = %lld)\n", static_cast<long long>(size));
  }
  TensorList ys = m.run(xs);
  if (repeat > 1) std::printf("latency     %s\n", cli::latency_str(cli::time_runs([&] { m.run(xs); }, repeat)).c_str());
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

// The first n examples of a dataset as one batch.
TensorList first_batch(const data::Dataset& d, int64_t n) {
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  return d.get_batch(idx);
}

// Quality, size and batch-1 latency of a loaded model, for quantize's table.
struct Measured {
  train::EvalMetrics metrics;
  cli::Latency latency;  // batch 1
};
Measured measure(Loaded& l, int64_t batches, int repeat) {
  TS_CHECK(l.recipe.eval_data && l.recipe.eval_data->size() > 0, "the checkpoint's config has no evaluation data "
           "to measure accuracy on");
  Measured m;
  nn::ModulePtr model = l.recipe.model;
  model->eval();
  Tensor x = l.recipe.eval_data->get_batch({0}).at(0);
  NoGradGuard ng;
  m.latency = cli::time_runs([&] { (*model)(x); }, repeat);
  train::TrainerOptions o;
  o.quiet = true;
  o.handle_signals = false;
  train::Trainer t(std::move(l.recipe), o);
  m.metrics = t.evaluate(batches);
  return m;
}

// The rows quantize's and prune's tables share: perplexity or accuracy, loss,
// and batch-1 latency, before and after.
void print_quality_rows(const Measured& mb, const Measured& ma) {
  if (mb.metrics.perplexity > 0)
    std::printf("%-22s %16.4f %16.4f %+9.2f%%\n", "perplexity", mb.metrics.perplexity, ma.metrics.perplexity,
                100.0 * (ma.metrics.perplexity / mb.metrics.perplexity - 1.0));
  else
    std::printf("%-22s %15.2f%% %15.2f%% %+8.2f pt\n", "accuracy", 100 * mb.metrics.accuracy,
                100 * ma.metrics.accuracy, 100 * (ma.metrics.accuracy - mb.metrics.accuracy));
  std::printf("%-22s %16.4f %16.4f %+9.4f\n", "loss", mb.metrics.loss, ma.metrics.loss,
              ma.metrics.loss - mb.metrics.loss);
  cli::print_latency_rows("batch 1", mb.latency, ma.latency);
}

// A compiled classifier on (at most `batches` batches of 64 of) a dataset:
// accuracy, mean cross-entropy, and its batch-1 and batch-64 latency.
struct GraphMeasured {
  double accuracy = 0, loss = 0;
  cli::Latency ms1, ms64;
};
GraphMeasured measure_graph(const Model& m, const data::Dataset& d, int64_t batches, int repeat) {
  GraphMeasured r;
  const int64_t n = batches > 0 ? std::min(d.size(), batches * 64) : d.size();
  int64_t right = 0;
  double loss = 0;
  auto batch = [&](int64_t s, int64_t k) {
    std::vector<int64_t> idx(k);
    for (int64_t i = 0; i < k; ++i) idx[i] = s + i;
    return d.get_batch(idx);
  };
  for (int64_t s = 0; s < n; s += 256) {
    TensorList b = batch(s, std::min<int64_t>(256, n - s));
    Tensor logits = m(b.at(0)), labels = b.at(1).to(DType::I64);
    loss += ops::cross_entropy(logits, labels).item<float>() * static_cast<double>(labels.numel());
    auto got = ops::argmax(logits, 1).to_vector<int64_t>(), want = labels.to_vector<int64_t>();
    for (size_t i = 0; i < want.size(); ++i) right += got[i] == want[i];
  }
  r.accuracy = static_cast<double>(right) / static_cast<double>(n);
  r.loss = loss / static_cast<double>(n);
  Tensor x1 = first_batch(d, 1).at(0), x64 = first_batch(d, std::min<int64_t>(64, d.size())).at(0);
  r.ms1 = cli::time_runs([&] { m(x1); }, repeat);
  r.ms64 = cli::time_runs([&] { m(x64); }, repeat);
  return r;
}

// The batch-1 and batch-64 latency of a checkpoint's model as a compiled
// graph (every pass), on its evaluation data.
std::pair<cli::Latency, cli::Latency> compiled_latency(Loaded& l, int repeat) {
  data::DatasetPtr d = l.recipe.eval_data ? l.recipe.eval_data : l.recipe.train_data;
  TS_CHECK(d && d->size() >= 2, "the checkpoint's config has no data to time the model on");
  const int64_t b = std::min<int64_t>(64, d->size());
  Model m(trace_model(l, b, false));
  Tensor x1 = first_batch(*d, 1).at(0), xb = first_batch(*d, b).at(0);
  return {cli::time_runs([&] { m(x1); }, repeat), cli::time_runs([&] { m(xb); }, repeat)};
}

// Static int8 of a classifier checkpoint: its model traced to a graph,
// calibrated on training batches, every conv/linear layer int8
// (quant::quantize_static); writes the int8 graph (tessera run / inspect /
// tessera::load) and prints both graphs' accuracy, loss, size and latency.
int cmd_ptq(const std::string& arg, const std::string& calibration, const std::vector<std::string>& skip,
            std::string output, int64_t batches, int repeat) {
  namespace fs = std::filesystem;
  quant::PtqConfig cfg;
  int64_t calib_batches = 16;
  if (!calibration.empty()) {
    json c = io::load_yaml(calibration);
    cfg = quant::ptq_config_from_json(c);
    if (c.contains("batches")) {
      TS_CHECK(c["batches"].is_number_integer() && c["batches"].get<int64_t>() >= 1, calibration,
               ": batches must be a positive integer (calibration batches of 64), got ", c["batches"].dump());
      calib_batches = c["batches"].get<int64_t>();
    }
  }
  for (const auto& s : skip) cfg.skip.push_back(s);
  Loaded l = load_model(arg);
  TS_CHECK(!l.ckpt.state.contains("quantization"), l.dir, " is already quantized; start from the float checkpoint");
  TS_CHECK(l.recipe.task == train::Task::Classification, "--method ptq-int8 quantizes classifiers (conv and linear "
           "layers); for a language model use weight-int8, weight-int4, q8_0 or q4_0");
  TS_CHECK(l.recipe.eval_data && l.recipe.eval_data->size() >= 2, "the checkpoint's config has no evaluation data");
  data::DatasetPtr cd = l.recipe.train_data ? l.recipe.train_data : l.recipe.eval_data;
  // A quantization-aware run (config "qat") is compared with its
  // fake-quantized self and converted with the ranges it learned.
  const bool qat = quant::is_qat_prepared(*l.recipe.model);
  compile::Graph g = trace_model(l, std::min<int64_t>(64, l.recipe.eval_data->size()), false);
  std::vector<TensorList> calib;
  for (int64_t b = 0; b < calib_batches && b * 64 < cd->size(); ++b) {
    std::vector<int64_t> idx;
    for (int64_t i = b * 64; i < std::min(cd->size(), (b + 1) * 64); ++i) idx.push_back(i);
    calib.push_back({cd->get_batch(idx).at(0)});
  }
  quant::PtqResult r;
  if (qat) {
    std::printf("a quantization-aware run: converting with the ranges it learned (%zu batches calibrate the rest)\n",
                calib.size());
    Tensor example = first_batch(*l.recipe.eval_data, std::min<int64_t>(64, l.recipe.eval_data->size())).at(0);
    r = quant::convert_qat(*l.recipe.model, example, calib, cfg);
  } else {
    std::printf("calibrating on %zu batches (%s observer)\n", calib.size(), cfg.observer.kind.c_str());
    r = quant::quantize_static(g, calib, cfg);
  }
  std::printf("%s", r.report.text().c_str());
  if (output.empty()) {
    fs::path d = fs::path(l.dir);
    fs::path run = d.parent_path().filename() == "checkpoints" ? d.parent_path().parent_path() : d.parent_path();
    output = (run / "quantized" / "ptq-int8.tsr").string();
  }
  fs::create_directories(fs::path(output).parent_path().empty() ? "." : fs::path(output).parent_path());
  compile::save(r.graph, output);
  Model f32(std::move(g)), i8 = load(output);  // the int8 model as written
  GraphMeasured mb = measure_graph(f32, *l.recipe.eval_data, batches, repeat);
  GraphMeasured ma = measure_graph(i8, *l.recipe.eval_data, batches, repeat);
  auto size = [](const fs::path& f) { return fs::file_size(f); };
  const auto sb = size(fs::path(l.dir) / "model.safetensors"), sa = size(fs::path(output) / "weights.safetensors");
  std::printf("\n%-22s %16s %16s %10s\n", "", qat ? "before (QAT f32)" : "before (f32)", "after (ptq-int8)",
              "change");
  std::printf("%-22s %16s %16s %9.2fx\n", "model weights", human_bytes(sb).c_str(), human_bytes(sa).c_str(),
              static_cast<double>(sa) / static_cast<double>(sb));
  std::printf("%-22s %15.2f%% %15.2f%% %+8.2f pt\n", "accuracy", 100 * mb.accuracy, 100 * ma.accuracy,
              100 * (ma.accuracy - mb.accuracy));
  std::printf("%-22s %16.4f %16.4f %+9.4f\n", "loss", mb.loss, ma.loss, ma.loss - mb.loss);
  cli::print_latency_rows("batch 1", mb.ms1, ma.ms1);
  cli::print_latency_rows("batch 64", mb.ms64, ma.ms64);
  std::printf("(both compiled graphs; before: the f32 graph with all passes)\n\nwrote %s  (tessera run %s --input "
              "X.npy)\n", output.c_str(), output.c_str());
  return 0;
}

// Quantizes a checkpoint's Linear layers and writes the result as a new
// checkpoint (its state.json records how, so eval/info/export rebuild it).
int cmd_quantize(const std::string& arg, const std::string& method, int64_t group, const std::string& activations,
                 const std::vector<std::string>& skip, std::string output, int64_t batches, int repeat) {
  namespace fs = std::filesystem;
  quant::WeightQuantConfig cfg;
  cfg.format = method == "weight-int8" ? "int8" : method == "weight-int4" ? "int4" : method;
  cfg.group = group;
  cfg.activations = activations;
  cfg.skip = skip;
  Loaded before = load_model(arg);
  TS_CHECK(!before.ckpt.state.contains("quantization"), before.dir, " is already quantized (",
           before.ckpt.state["quantization"].dump(), "); quantize the float checkpoint it came from");
  const std::string dir = before.dir;
  io::Checkpoint ck = before.ckpt;
  Loaded after = load_model(dir);
  quant::WeightQuantReport rep = quant::quantize_weights(*after.recipe.model, cfg);
  std::printf("%s", rep.str().c_str());
  TS_CHECK(!rep.quantized.empty(), "no Linear layer could be quantized as ", cfg.format, "; nothing written");
  io::Checkpoint out;
  out.model = after.recipe.model->state_dict().entries;
  out.optimizer_groups = json::array();  // an inference checkpoint: no optimizer state
  out.state = ck.state;
  out.state["quantization"] = quant::to_json(cfg);
  out.state["quantized_from"] = dir;
  if (output.empty()) {
    fs::path d = fs::path(dir);
    fs::path run = d.parent_path().filename() == "checkpoints" ? d.parent_path().parent_path() : d.parent_path();
    output = (run / "quantized" / method).string();
  }
  fs::path op = fs::path(output);
  Measured mb = measure(before, batches, repeat), ma = measure(after, batches, repeat);
  const bool lm = mb.metrics.perplexity > 0;
  out.state["metrics"] = lm ? json{{"loss", ma.metrics.loss}, {"perplexity", ma.metrics.perplexity}}
                            : json{{"loss", ma.metrics.loss}, {"accuracy", ma.metrics.accuracy}};
  std::string written = io::save_checkpoint(op.parent_path().empty() ? "." : op.parent_path().string(),
                                            op.filename().string(), out);
  auto size = [](const std::string& d) { return fs::file_size(fs::path(d) / "model.safetensors"); };
  std::printf("\n%-22s %16s %16s %10s\n", "", "before (f32)", ("after (" + method + ")").c_str(), "change");
  std::printf("%-22s %16s %16s %9.2fx\n", "model file", human_bytes(size(dir)).c_str(),
              human_bytes(size(written)).c_str(), static_cast<double>(size(written)) / static_cast<double>(size(dir)));
  print_quality_rows(mb, ma);
  std::printf("\nwrote %s  (%s eval %s)\n", written.c_str(), self(), written.c_str());
  return 0;
}

// Prunes a checkpoint's Linear/Conv weights (in `rounds` steps along the
// polynomial schedule, fine-tuning after each) and writes a pruned run whose
// checkpoints carry the masks (state.json config "prune" rebuilds them).
int cmd_prune(const std::string& arg, double sparsity, const std::string& method, bool global,
              const std::vector<std::string>& skip, int64_t finetune_steps, int rounds, double lr, std::string output,
              int64_t batches, int repeat) {
  namespace fs = std::filesystem;
  TS_CHECK(rounds >= 1, "--rounds must be at least 1, got ", rounds);
  TS_CHECK(finetune_steps >= 0, "--finetune-steps must be >= 0, got ", finetune_steps);
  Loaded before = load_model(arg);
  const std::string dir = before.dir;
  TS_CHECK(!before.ckpt.state.contains("quantization"), dir, " is quantized; prune the float checkpoint");
  if (output.empty()) {
    fs::path d(dir);
    fs::path run = d.parent_path().filename() == "checkpoints" ? d.parent_path().parent_path() : d.parent_path();
    char name[32];
    std::snprintf(name, sizeof name, "%s-%g", method.c_str(), sparsity);
    output = (run / "pruned" / name).string();
  }
  Loaded work = load_model(dir);
  nn::ModulePtr model = work.recipe.model;
  json config = work.ckpt.state["config"];
  config["output"] = output;
  config["train"].erase("epochs");
  config["train"]["steps"] = std::max<int64_t>(1, finetune_steps / rounds);
  config["scheduler"] = {{"name", "constant"}};
  const double base_lr = config.contains("optimizer") && config["optimizer"].contains("lr")
                             ? config["optimizer"]["lr"].get<double>() : 1e-3;
  config["optimizer"]["lr"] = lr > 0 ? lr : base_lr / 10;  // fine-tuning: a tenth of the training rate
  quant::PruneConfig pc{.sparsity = sparsity, .method = method, .global = global, .skip = skip};
  std::string last;
  for (int k = 1; k <= rounds; ++k) {
    pc.sparsity = quant::polynomial_sparsity(k, 0, rounds, 0.0, sparsity);
    quant::PruneReport rep = quant::prune(*model, pc);
    std::printf("round %d/%d: sparsity %.4f (%lld of %lld weights zero)\n", k, rounds, pc.sparsity,
                static_cast<long long>(rep.zeros), static_cast<long long>(rep.total));
    config["prune"] = {{"sparsity", pc.sparsity}, {"method", method}, {"global", global}, {"skip", skip}};
    if (k == rounds) std::printf("%s", rep.str().c_str());
    if (finetune_steps == 0) continue;
    json round_cfg = config;
    if (k < rounds) round_cfg["output"] = output + "/round-" + std::to_string(k);
    train::Recipe r = train::build_recipe(round_cfg, "prune config");
    r.model = model;  // the loaded, pruned weights (the recipe built a fresh copy to check the config)
    train::TrainerOptions o;
    o.progress = 0;
    o.handle_signals = false;
    train::Trainer t(std::move(r), o);
    last = t.fit()["checkpoint"].get<std::string>();
  }
  if (finetune_steps == 0) {
    io::Checkpoint out;
    out.model = model->state_dict().entries;
    out.optimizer_groups = json::array();
    out.state = work.ckpt.state;
    out.state["config"] = config;
    last = io::save_checkpoint(output + "/checkpoints", "step-000000000", out);
  }
  Loaded after_l = load_model(last);
  quant::PruneReport final_rep = quant::sparsity_report(*after_l.recipe.model);
  quant::make_pruning_permanent(*after_l.recipe.model);  // time the deployed model, not the mask multiply
  // The compiled graphs too: there structurally pruned channels leave the
  // layers (compile::remove_pruned_channels), so they run faster.
  auto [cb1, cb64] = compiled_latency(before, repeat);
  auto [ca1, ca64] = compiled_latency(after_l, repeat);
  Measured mb = measure(before, batches, repeat);
  Measured ma = measure(after_l, batches, repeat);
  std::printf("\n%-22s %16s %16s %10s\n", "", "before", "after", "change");
  std::printf("%-22s %16lld %16lld %9.2fx\n", "nonzero weights", static_cast<long long>(final_rep.total),
              static_cast<long long>(final_rep.total - final_rep.zeros),
              static_cast<double>(final_rep.total - final_rep.zeros) / static_cast<double>(final_rep.total));
  print_quality_rows(mb, ma);
  cli::print_latency_rows("compiled, batch 1", cb1, ca1);
  cli::print_latency_rows("compiled, batch 64", cb64, ca64);
  std::printf("\nwrote %s  (structured pruning: the compiled graph drops the pruned channels; unstructured zeros "
              "are stored and multiplied dense)\n", last.c_str());
  return 0;
}

}  // namespace

struct ServeFlags {
  std::string target, host = "127.0.0.1", api_key_file, access_log;
  int port = 8000, instances = 0, threads = 64, poll_seconds = 0, max_client_connections = 256;
  int64_t max_batch = 0, delay_us = -1;
  bool repository_routes = false;
};

// Serves a model repository (or one model: a compiled graph, an ONNX file
// or a checkpoint, traced here) over HTTP until SIGINT/SIGTERM, then stops
// accepting, finishes what is queued and exits 0. A repository can be
// watched (--poll-seconds) and reloaded through its routes.
int cmd_serve(const ServeFlags& f) {
  namespace fs = std::filesystem;
  serve::ServiceOptions so;
  if (!f.api_key_file.empty()) so.api_key = cli::read_api_key(f.api_key_file, "serve");
  std::shared_ptr<std::FILE> log;
  if (!f.access_log.empty()) {
    std::FILE* out = f.access_log == "-" ? stdout : std::fopen(f.access_log.c_str(), "a");
    TS_CHECK(out, "serve: cannot open the access log '", f.access_log, "' for appending");
    log.reset(out, [](std::FILE* p) { if (p != stdout) std::fclose(p); });
    auto mu = std::make_shared<std::mutex>();
    so.access_log = [log, mu](const std::string& line) {
      std::lock_guard<std::mutex> lock(*mu);
      std::fprintf(log.get(), "%s\n", line.c_str());
      std::fflush(log.get());
    };
  }
  so.adjust_config = [f](serve::ModelConfig c) {
    if (f.max_batch > 0) c.max_batch_size = f.max_batch;
    if (f.delay_us >= 0) c.max_queue_delay_us = f.delay_us;
    if (f.instances > 0) c.instances = f.instances;
    return c;
  };
  so.repository_routes = f.repository_routes;
  const sigset_t stop_signals = cli::block_stop_signals();
  serve::InferenceService service(so);
  const fs::path target(f.target);
  const bool single = fs::exists(target / "graph.json") || target.extension() == ".onnx" ||
                      fs::exists(target / "checkpoints") || fs::exists(target / "model.safetensors");
  TS_CHECK(!single || (f.poll_seconds == 0 && !f.repository_routes), "serve: --poll-seconds and --repository-routes "
           "need a model repository (one folder per model), not a single model");
  std::string traced;  // a run or checkpoint's graph, removed when the server stops
  if (single) {
    std::string path = f.target, name = target.stem().string();
    if (fs::exists(target / "checkpoints") || fs::exists(target / "model.safetensors")) {
      // A training run or checkpoint: its model traced to a graph first.
      Loaded l = load_model(f.target);
      path = (fs::temp_directory_path() / ("tessera-serve-" + std::to_string(::getpid()) + ".tsr")).string();
      compile::Graph g = trace_model(l, std::min<int64_t>(2, l.recipe.eval_data ? l.recipe.eval_data->size() : 2), false);
      compile::save(g, path);
      traced = path;
      name = l.ckpt.state.value("model", std::string("model"));
    }
    if (!serve::valid_model_name(name)) name = "model";
    service.load(name, 1, path, so.adjust_config({}));
    std::printf("serving model '%s' (version 1) from %s\n", name.c_str(), f.target.c_str());
  } else {
    serve::SyncReport r = service.load_repository(f.target);
    for (const auto& c : r.changes) std::printf("repository: %s\n", c.c_str());
    for (const auto& e : r.errors) std::fprintf(stderr, "repository: %s (not ready; the other models serve)\n", e.c_str());
  }
  serve::HttpServer server(service, {.host = f.host, .port = f.port, .threads = f.threads,
                                     .max_connections_per_client = f.max_client_connections});
  std::printf("listening on http://%s:%d/v2 (metrics on /metrics)%s\n", f.host.c_str(), server.port(),
              so.api_key.empty() ? "" : "; API key required");
  std::fflush(stdout);
  // Hot reload: the repository is read again every poll_seconds.
  std::mutex poll_mu;
  std::condition_variable poll_cv;
  bool stopping = false;
  std::thread poller;
  if (f.poll_seconds > 0)
    poller = std::thread([&] {
      std::unique_lock<std::mutex> lock(poll_mu);
      while (!poll_cv.wait_for(lock, std::chrono::seconds(f.poll_seconds), [&] { return stopping; })) {
        lock.unlock();
        serve::SyncReport r = service.sync_repository();
        for (const auto& c : r.changes) std::printf("repository: %s\n", c.c_str());
        for (const auto& e : r.errors) std::fprintf(stderr, "repository: %s (the loaded versions keep serving)\n", e.c_str());
        std::fflush(stdout);
        lock.lock();
      }
    });
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::printf("%s: stopping; finishing queued requests\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  {
    std::lock_guard<std::mutex> lock(poll_mu);
    stopping = true;
  }
  poll_cv.notify_all();
  if (poller.joinable()) poller.join();
  server.stop();
  service.drain();
  if (!traced.empty()) fs::remove_all(traced);
  std::printf("stopped\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 0 && std::strchr(argv[0], '/')) g_argv0 = argv[0];
  CLI::App app{"Tessera " + std::string(tessera::version()) +
               ": train, evaluate, export, run, inspect, quantize, prune and serve models; read GGUF files"};
  app.require_subcommand(1);
  app.set_version_flag("--version", tessera::version());
  app.option_defaults()->always_capture_default();  // --help shows every default

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

  cli::LaunchFlags launch_flags;
  cli::add_launch_command(app, launch_flags);

  auto* eval = app.add_subcommand("eval", "evaluate a checkpoint on its config's evaluation data");
  std::string ckpt;
  int64_t batches = 0;
  eval->add_option("checkpoint", ckpt, "a checkpoint directory, or a run directory (its latest)")->required();
  eval->add_option("--batches", batches, "evaluate only this many batches");

  auto* info = app.add_subcommand("info", "show a checkpoint's model, training state and metrics; or size a "
                                   "config's model or a GGUF file's Llama before allocating it (--meta)");
  std::string info_ckpt;
  bool info_meta = false;
  int64_t info_batch = 0, info_seq = 0;
  std::vector<int64_t> info_ranks = {1, 2, 4, 8};
  info->add_option("checkpoint", info_ckpt, "a checkpoint or run directory, a training config (.yaml), or a .gguf "
                   "file")->required();
  info->add_flag("--meta", info_meta, "size the model on the meta device: parameters, memory, FLOPs and activations "
                 "of one training step, and memory per rank under DDP and ZeRO (implied for configs and GGUF files)");
  info->add_option("--batch", info_batch, "--meta: the batch size (default: the config's train.batch_size; 1 for GGUF)");
  info->add_option("--seq", info_seq, "--meta: the sequence length of a language model (default: its context)");
  info->add_option("--ranks", info_ranks, "--meta: the world sizes to show per-rank memory for")
      ->check(CLI::PositiveNumber);

  auto* exp = app.add_subcommand("export", "export a checkpoint's model as ONNX, a compiled Tessera graph, or GGUF "
                                  "(language models)");
  std::string exp_ckpt, exp_format = "onnx", exp_out, exp_gguf_type = "F32";
  int64_t exp_batch = 2;
  bool exp_fixed = false, exp_dump = false;
  exp->add_option("checkpoint", exp_ckpt, "a checkpoint directory, or a run directory (its latest)")->required();
  exp->add_option("--format", exp_format, "onnx (opset 17), tessera (graph.json + weights.safetensors) or gguf "
                  "(a Llama or GPT with its tokenizer, for tessera generate and llama.cpp)")
      ->check(CLI::IsMember({"onnx", "tessera", "gguf"}));
  exp->add_option("--gguf-type", exp_gguf_type, "the GGUF file's weight type: F32, F16, BF16, Q8_0 or Q4_0");
  exp->add_option("--output", exp_out, "the file (onnx) or directory (tessera); default model.onnx / model.tsr");
  exp->add_option("--batch", exp_batch, "the batch size to trace with (the batch dimension stays dynamic)");
  exp->add_flag("--static", exp_fixed, "fix every dimension at the traced size");
  exp->add_flag("--dump", exp_dump, "print the optimized graph");

  auto* run = app.add_subcommand("run", "run a model (ONNX file or compiled graph) on .npy inputs");
  std::string run_model, run_out;
  std::vector<std::string> run_inputs;
  int run_repeat = 1;
  run->add_option("model", run_model, "an .onnx file or a directory saved by export --format tessera")->required();
  int64_t run_size = 1;
  run->add_option("--input", run_inputs, "an input as .npy, in the model's input order (repeatable; default: "
                  "random values of the model's signature)");
  run->add_option("--size", run_size, "without --input: the value of the dynamic dimensions")
      ->check(CLI::PositiveNumber);
  run->add_option("--output", run_out, "save the output as .npy instead of printing it");
  run->add_option("--repeat", run_repeat, "run N more times and report the latency (p50/p90/p99)")->check(CLI::PositiveNumber);

  auto* inspect = app.add_subcommand("inspect", "show a model's inputs, outputs, ops, parameters and FLOPs");
  std::string insp_model;
  bool insp_dump = false;
  int64_t insp_size = 1;
  inspect->add_option("model", insp_model, "an .onnx file or a directory saved by export --format tessera")->required();
  inspect->add_flag("--dump", insp_dump, "print the whole graph");
  inspect->add_option("--size", insp_size, "the value of the dynamic dimensions for the FLOPs estimate")
      ->check(CLI::PositiveNumber);

  auto* quantize = app.add_subcommand("quantize", "quantize a checkpoint: static int8 of a classifier's graph "
                                      "(ptq-int8), or its Linear layers' weights; prints size, accuracy and latency "
                                      "before and after, and writes the quantized model");
  std::string q_ckpt, q_method, q_act = "float", q_out, q_calib;
  std::vector<std::string> q_skip;
  int64_t q_group = 32, q_batches = 0;
  int q_repeat = 50;
  quantize->add_option("checkpoint", q_ckpt, "a checkpoint directory, or a run directory (its latest)")->required();
  quantize->add_option("--method", q_method, "ptq-int8 (static int8 graph, calibrated), weight-int8 (per-row "
                       "int8), weight-int4 (int4 groups), q8_0, q4_0 (GGUF blocks)")
      ->required()
      ->check(CLI::IsMember({"weight-int8", "weight-int4", "q8_0", "q4_0", "ptq-int8"}));
  quantize->add_option("--calibration", q_calib, "ptq-int8: a YAML file {observer: minmax|moving_average|percentile|"
                       "entropy, percentile, batches, skip, ...} (default: minmax over 16 batches)");
  quantize->add_option("--group", q_group, "weights per scale for weight-int4 (32, 64, 128, 256)");
  quantize->add_option("--activations", q_act, "float (weight-only) or int8 (activations quantized on the fly)")
      ->check(CLI::IsMember({"float", "int8"}));
  quantize->add_option("--skip", q_skip, "a module path to keep in float, e.g. lm_head (repeatable)");
  quantize->add_option("--output", q_out, "the checkpoint directory to write (default <run>/quantized/<method>; "
                       "ptq-int8: the graph directory <run>/quantized/ptq-int8.tsr)");
  quantize->add_option("--batches", q_batches, "evaluate only this many batches (default: all)");
  quantize->add_option("--repeat", q_repeat, "forwards timed for the latency (p50/p90/p99)")
      ->check(CLI::PositiveNumber);

  auto* prune = app.add_subcommand("prune", "prune a checkpoint's Linear/Conv weights and fine-tune; prints accuracy "
                                   "and latency before and after, and writes the pruned run");
  std::string p_ckpt, p_method = "magnitude", p_out;
  std::vector<std::string> p_skip;
  double p_sparsity = 0.5, p_lr = 0;
  bool p_global = false;
  int64_t p_steps = 0, p_batches = 0;
  int p_rounds = 1, p_repeat = 50;
  prune->add_option("checkpoint", p_ckpt, "a checkpoint directory, or a run directory (its latest)")->required();
  prune->add_option("--sparsity", p_sparsity, "fraction of weights (or of rows/channels, structured) set to zero")
      ->required();
  prune->add_option("--method", p_method, "magnitude (smallest |w|) or structured (rows/channels by L2 norm)")
      ->check(CLI::IsMember({"magnitude", "structured"}));
  prune->add_flag("--global", p_global, "magnitude: one threshold across all layers");
  prune->add_option("--skip", p_skip, "a module path to leave dense (repeatable)");
  prune->add_option("--finetune-steps", p_steps, "training steps after pruning (split over the rounds)");
  prune->add_option("--rounds", p_rounds, "prune in this many steps along the polynomial schedule, fine-tuning after each");
  prune->add_option("--lr", p_lr, "fine-tuning learning rate (default: a tenth of the config's)");
  prune->add_option("--output", p_out, "the run directory to write (default <run>/pruned/<method>-<sparsity>)");
  prune->add_option("--batches", p_batches, "evaluate only this many batches (default: all)");
  prune->add_option("--repeat", p_repeat, "forwards timed for the latency (p50/p90/p99)")->check(CLI::PositiveNumber);

  auto* serve_cmd = app.add_subcommand("serve", "serve models over HTTP (KServe v2 protocol) with dynamic batching "
                                       "until SIGINT/SIGTERM");
  ServeFlags sf;
  serve_cmd->add_option("repository", sf.target, "a model repository (one folder per model, version folders inside), "
                        "or one model: a compiled graph (.tsr), an .onnx file, a run or checkpoint")->required();
  serve_cmd->add_option("--host", sf.host, "address to bind (default 127.0.0.1: this machine only)");
  serve_cmd->add_option("--port", sf.port, "port (0: any free port)");
  serve_cmd->add_option("--api-key-file", sf.api_key_file, "a file holding the API key every route but /v2/health needs");
  serve_cmd->add_option("--max-batch", sf.max_batch, "rows merged into one model run (overrides config.yaml)");
  serve_cmd->add_option("--batch-delay-us", sf.delay_us, "how long the oldest request waits for others (overrides)");
  serve_cmd->add_option("--instances", sf.instances, "model runs at once per version (overrides)");
  serve_cmd->add_option("--threads", sf.threads, "HTTP requests answered at once (a worker thread each; slow clients "
                        "hold none)");
  serve_cmd->add_option("--max-client-connections", sf.max_client_connections, "connections one client address may "
                        "hold; one more is refused with 429")->check(CLI::Range(1, 1 << 20));
  serve_cmd->add_option("--access-log", sf.access_log, "append one JSON line per request to this file ('-': stdout)");
  serve_cmd->add_option("--poll-seconds", sf.poll_seconds, "read the repository again this often: new, changed and "
                        "removed versions are loaded or unloaded without dropping requests (0: never)")
      ->check(CLI::Range(0, 86400));
  serve_cmd->add_flag("--repository-routes", sf.repository_routes, "enable POST /v2/repository/index and "
                      "/v2/repository/models/{name}/load|unload");

  auto* client = app.add_subcommand("client", "send one infer request to a running `tessera serve` and print the "
                                    "outputs and latency");
  ClientFlags cf;
  client->add_option("model", cf.model, "the served model's name")->required();
  client->add_option("--url", cf.url, "the server (default http://127.0.0.1:8000)");
  client->add_option("--version", cf.version, "a model version (default: the newest)");
  client->add_option("--api-key-file", cf.api_key_file, "a file holding the server's API key");
  client->add_option("--input", cf.inputs, "a .npy file per model input, in order (default: random values of the "
                     "model's signature, batch 1)");
  client->add_option("--repeat", cf.repeat, "send the request this many times and print the latency (p50/p90/p99)")
      ->check(CLI::Range(1, 1000000));

  auto* ckpt_cmd = app.add_subcommand("ckpt", "training checkpoints");
  ckpt_cmd->require_subcommand(1);
  auto* consolidate = ckpt_cmd->add_subcommand("consolidate", "write a checkpoint's model as one model.safetensors (a "
                                           "sharded ZeRO checkpoint is assembled from its shards, each CRC-checked)");
  std::string ck_arg, ck_out;
  bool ck_whole = false;
  consolidate->add_option("checkpoint", ck_arg, "a checkpoint directory, or a run directory (its latest checkpoint)")
      ->required();
  consolidate->add_option("-o,--output", ck_out, "where to write (default: model.safetensors in the checkpoint "
                          "directory; with --checkpoint, CHECKPOINT-consolidated)");
  consolidate->add_flag("--checkpoint", ck_whole, "write a whole checkpoint directory (model, optimizer state, "
                        "training state) instead of the model alone");

  auto* gguf = app.add_subcommand("gguf", "GGUF model files (llama.cpp's format)");
  gguf->require_subcommand(1);
  auto* gguf_info = gguf->add_subcommand("info", "show a GGUF file's version, metadata and tensors");
  std::string gguf_path;
  size_t gguf_chars = 80;
  gguf_info->add_option("file", gguf_path, "the .gguf file")->required();
  gguf_info->add_option("--width", gguf_chars, "characters of each metadata value shown (strings and arrays are "
                        "cut there)")->check(CLI::Range(8, 1 << 20));

  auto* qgguf = app.add_subcommand("quantize-gguf", "convert a GGUF file's weights to another type (norms and 1-D "
                                   "tensors keep theirs, as llama.cpp's quantizer does)");
  std::string qg_in, qg_out, qg_type;
  qgguf->add_option("input", qg_in, "the GGUF file to read")->required();
  qgguf->add_option("output", qg_out, "the GGUF file to write")->required();
  qgguf->add_option("type", qg_type, "F32, F16, BF16, Q8_0, Q4_0, Q4_K (the output matrix in Q6_K), Q6_K, or "
                    "Q4_K_M (llama.cpp's mix: Q4_K, with some layers' V and down products and the output in Q6_K); "
                    "any case")
      ->required();

  cli::GenerateFlags gen, chat;
  cli::add_generate_command(app, gen);
  cli::add_chat_command(app, chat);
  cli::ServeLlmFlags slf;
  cli::add_serve_llm_command(app, slf);
  cli::PerplexityFlags ppl;
  cli::add_perplexity_command(app, ppl);

  // A first word that names no command is a usage error even beside --help
  // (which CLI11 would answer first, with the main help and exit 0).
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      known = known || sub->get_name() == argv[1];
    if (!known) {
      std::fprintf(stderr, "error: '%s' is not a tessera command\n\n%s", argv[1], app.help().c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A usage error: what was wrong, then the usage of the command it was for; exit 2.
    const std::vector<CLI::App*> chosen = app.get_subcommands();
    std::fprintf(stderr, "error: %s\n\n%s", e.what(), (chosen.empty() ? app : *chosen.back()).help().c_str());
    return 2;
  }
  try {
    if (*train) return cmd_train(config, resume, sets, output, plain ? 0 : -1, profile, precision);
    if (*launch_flags.cmd) return cli::cmd_launch(launch_flags, self());
    if (*eval) return cmd_eval(ckpt, batches);
    if (*info) {
      const bool file = info_ckpt.ends_with(".yaml") || info_ckpt.ends_with(".yml") || info_ckpt.ends_with(".gguf");
      if (info_meta || file) {
        TS_CHECK(file, "info --meta: expected a training config (.yaml) or a .gguf file, got '", info_ckpt,
                 "' (a checkpoint's model is sized by its config)");
        TS_CHECK(info_batch >= 0 && info_seq >= 0, "info --meta: --batch and --seq must be positive");
        return cmd_meta_info(info_ckpt, info_batch, info_seq, info_ranks);
      }
      return cmd_info(info_ckpt);
    }
    if (*exp) return cmd_export(exp_ckpt, exp_format, exp_out, exp_batch, exp_fixed, exp_dump, exp_gguf_type);
    if (*run) return cmd_run(run_model, run_inputs, run_out, run_repeat, run_size);
    if (*inspect) return cmd_inspect(insp_model, insp_dump, insp_size);
    if (*gguf_info) return cmd_gguf_info(gguf_path, gguf_chars);
    if (*consolidate) return cmd_ckpt_consolidate(ck_arg, ck_out, ck_whole);
    if (*qgguf) return cmd_quantize_gguf(qg_in, qg_out, qg_type);
    if (*gen.cmd) return cmd_generate(gen, false);
    if (*chat.cmd) return cmd_generate(chat, true);
    if (*ppl.cmd) return cli::cmd_perplexity(ppl, load_language_model(ppl.model, ppl.weights, "perplexity"));
    if (*slf.cmd)
      return cli::cmd_serve_llm(slf, [&](const std::string& path, llm::TensorSplit split) {
        return load_language_model(path, slf.weights, "serve-llm", split);
      });
    if (*serve_cmd)
      return cmd_serve(sf);
    if (*client) return cmd_client(cf);
    if (*quantize && q_method == "ptq-int8") return cmd_ptq(q_ckpt, q_calib, q_skip, q_out, q_batches, q_repeat);
    if (*quantize) return cmd_quantize(q_ckpt, q_method, q_group, q_act, q_skip, q_out, q_batches, q_repeat);
    if (*prune)
      return cmd_prune(p_ckpt, p_sparsity, p_method, p_global, p_skip, p_steps, p_rounds, p_lr, p_out, p_batches,
                       p_repeat);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    // One rank's error ends the job now: its peers would wait for it in a collective until the deadline.
    if (tessera::distributed::running_distributed()) tessera::distributed::abort_job(1);
    return 1;
  }
  return 0;
}
