// Compiled vs eager inference, the Tessera side of bench/compile_compare.py
// (the references there: PyTorch's TorchScript path and ONNX Runtime). Prints
// one JSON line per run.
//
//   tessera_compile_bench --case mlp|cnn|resnet18|gpt --batch N --threads T [--iters I] [--warmup W]
//   tessera_compile_bench --case C --batch N --export DIR   # DIR/C.onnx, C.input.npy, C.output.npy
//   tessera_compile_bench --onnx FILE --input X.npy --threads T [--iters I]   # Tessera's runtime on an ONNX file
//
// The models are the zoo's, seeded: mlp = MLP 784-256-256-10; cnn = LeNet (the
// Fashion-MNIST CNN: 32/64 channels, 128 hidden); resnet18 = ResNet-18 with the
// CIFAR stem on 3x32x32; gpt = GPT (6 layers, 6 heads, 384 wide, vocab 256) on
// 64 tokens. Latency is the median of the timed runs. Memory: the peak of
// tensor bytes one forward adds (max_memory_allocated), eager vs compiled.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/autograd/grad_mode.h"
#include "tessera/compile/compile.h"
#include "tessera/compile/model.h"
#include "tessera/compile/onnx.h"
#include "tessera/core/allocator.h"
#include "tessera/core/parallel.h"
#include "tessera/io/npy.h"
#include "tessera/nn/zoo/zoo.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;
namespace zoo = nn::zoo;

namespace {

struct Case {
  nn::ModulePtr model;
  Tensor input;
  std::vector<compile::DynamicDim> dynamic;
};

Case make_case(const std::string& name, int64_t batch) {
  manual_seed(0);
  Case c;
  if (name == "mlp") {
    c.model = std::make_shared<zoo::MLP>(zoo::MLPConfig{784, {256, 256}, 10, "relu", 0.0});
    c.input = ops::randn({batch, 1, 28, 28});
  } else if (name == "cnn") {
    c.model = std::make_shared<zoo::LeNet>(zoo::LeNetConfig{});
    c.input = ops::randn({batch, 1, 28, 28});
  } else if (name == "resnet18") {
    c.model = std::make_shared<zoo::ResNet>(zoo::ResNetConfig::resnet18());
    c.input = ops::randn({batch, 3, 32, 32});
  } else if (name == "gpt") {
    zoo::GPTConfig g;
    g.block_size = 64;
    c.model = std::make_shared<zoo::GPT>(g);
    c.input = ops::randint(0, 256, {batch, 64});
  } else {
    std::fprintf(stderr, "unknown case '%s' (mlp, cnn, resnet18, gpt)\n", name.c_str());
    std::exit(2);
  }
  c.model->eval();
  c.dynamic = {{0, 0, "N"}};
  return c;
}

template <typename F>
double median_ms(F&& f, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <typename F>
int64_t peak_bytes(F&& f) {
  int64_t before = memory_allocated();
  reset_peak_memory();
  f();
  return max_memory_allocated() - before;
}

const char* arg(int argc, char** argv, const char* name, const char* dflt) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return dflt;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = std::atoi(arg(argc, argv, "--threads", "1"));
  int iters = std::atoi(arg(argc, argv, "--iters", "20"));
  int warmup = std::atoi(arg(argc, argv, "--warmup", "3"));
  set_num_threads(threads);
  NoGradGuard no_grad;
  nlohmann::json out;
  out["threads"] = threads;

  if (const char* onnx = arg(argc, argv, "--onnx", nullptr)) {
    Model m = load(onnx);
    Tensor x = io::load_npy(arg(argc, argv, "--input", ""));
    out["onnx"] = onnx;
    out["batch"] = x.shape()[0];
    out["runtime_ms"] = median_ms([&] { m.run({x}); }, warmup, iters);
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }

  std::string name = arg(argc, argv, "--case", "mlp");
  int64_t batch = std::atoll(arg(argc, argv, "--batch", "1"));
  Case c = make_case(name, batch);
  nn::Module& m = *c.model;
  out["case"] = name;
  out["batch"] = batch;

  if (const char* dir = arg(argc, argv, "--export", nullptr)) {
    compile::CaptureOptions co;
    co.dynamic = c.dynamic;
    co.input_names = {name == "gpt" ? "ids" : "x"};
    compile::Graph g = compile::capture([&](const TensorList& in) { return TensorList{m(in[0])}; }, {c.input},
                                        m.named_parameters(), co);
    compile::optimize(g, {.disable = compile::tessera_only_passes()});
    std::string base = std::string(dir) + "/" + name;
    compile::export_onnx(g, base + ".onnx");
    io::save_npy(base + ".input.npy", c.input);
    io::save_npy(base + ".output.npy", m(c.input));
    out["exported"] = base + ".onnx";
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }

  compile::CompileOptions co{.dynamic = c.dynamic};
  // --disable a,b: passes to skip (compile/passes.h), to see what each is worth.
  for (std::string d = arg(argc, argv, "--disable", ""); !d.empty();) {
    size_t comma = d.find(',');
    co.passes.disable.push_back(d.substr(0, comma));
    d = comma == std::string::npos ? "" : d.substr(comma + 1);
  }
  auto f = compile::compile(c.model, co);
  Tensor want = m(c.input), got = f(c.input);
  out["max_abs_diff"] = ops::amax(ops::abs(ops::sub(got, want))).item<double>();
  // --only compiled|eager: time one side alone (for ONEDNN_VERBOSE or perf).
  std::string only = arg(argc, argv, "--only", "");
  if (only != "compiled") out["eager_ms"] = median_ms([&] { m(c.input); }, warmup, iters);
  if (only != "eager") out["compiled_ms"] = median_ms([&] { f(c.input); }, warmup, iters);
  if (!only.empty()) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  out["eager_peak_bytes"] = peak_bytes([&] { m(c.input); });
  auto exe = f.last();
  auto plan = exe->memory_plan(exe->bind_symbols({c.input}));
  // The executable keeps its arena between runs, so it is already counted in
  // `before`: a forward holds it plus what the run adds.
  out["compiled_peak_bytes"] = peak_bytes([&] { f(c.input); }) + plan->arena_bytes;
  out["arena_bytes"] = plan->arena_bytes;
  out["planned_values_bytes"] = plan->planned_bytes;
  out["nodes"] = exe->graph().num_nodes();
  out["planned_taken"] = exe->planned_taken();
  out["planned_unused"] = exe->planned_unused();
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
