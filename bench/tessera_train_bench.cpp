// Training-step benchmarks, the Tessera side of bench/train_compare.py (the
// PyTorch side is bench/train_torch.py; the models, batches and optimizers are
// the same). Prints one JSON line.
//
//   tessera_train_bench --case mlp|cnn|gpt|resnet18|cnn_loader --steps N --warmup W --threads T
//                       [--precision f32|bf16|f16] [--layers N] [--checkpoint S]
//   tessera_train_bench --case fma_peak --threads T
//
// fma_peak measures the f32 FMA peak of T threads (GFLOP/s): independent
// fused multiply-adds in registers at the widest vectors Tessera's kernels use
// here (AVX-512, or AVX2 under TESSERA_CPU_CAPABILITY=avx2), the denominator
// of bench/train_compare.py's "% of peak".
//
// --precision runs the forward under autocast (f16 with a GradScaler); for gpt,
// --layers sets the depth and --checkpoint S checkpoints every block (0) or
// S segments (nn::checkpoint_sequential). "step_rss_mib" is the resident
// memory the steps added on top of the built model, measured like PyTorch's.
//
// cnn_loader trains the default CNN on real Fashion-MNIST through the
// DataLoader (2 workers) and reports the share of the step spent waiting for data.
#include <immintrin.h>
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/compile/compile.h"
#include "tessera/core/allocator.h"
#include "tessera/core/parallel.h"
#include "tessera/ops/autocast.h"
#include "tessera/train/grad_scaler.h"
#include "tessera/data/dataloader.h"
#include "tessera/data/datasets.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/optimizer.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

// n rounds of independent FMA chains (more than the 8 that fill two FMA
// pipes of latency 4); returns a value that depends on every chain, so none
// is dropped.
__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t n) {
  __m512 acc[16], m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < n; ++i)
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, a);
  __m512 s = acc[0];
  for (int j = 1; j < 16; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}
// 12 chains: AVX2 has 16 vector registers, and two hold the operands.
__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t n) {
  __m256 acc[12], m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  for (int64_t i = 0; i < n; ++i)
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, a);
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

// The f32 FMA peak of `threads` threads, GFLOP/s: the best of 5 timed runs.
nlohmann::json fma_peak(int threads) {
  const char* cap = std::getenv("TESSERA_CPU_CAPABILITY");
  const bool wide = __builtin_cpu_supports("avx512f") && !(cap && std::string(cap).rfind("avx512", 0) != 0);
  if (!wide && !__builtin_cpu_supports("fma")) return {{"case", "fma_peak"}, {"error", "no FMA on this CPU"}};
  const int lanes = wide ? 16 : 8, chains = wide ? 16 : 12;
  const int64_t n = 20'000'000;
  double best = 0;
  float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += wide ? fma_chains_avx512(n) : fma_chains_avx2(n);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, 2.0 * chains * lanes * n * threads / s / 1e9);
  }
  return {{"case", "fma_peak"}, {"threads", threads}, {"isa", wide ? "avx512" : "avx2"}, {"gflops", best},
          {"sink", sink}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string kase, precision = "f32";
  int steps = 20, warmup = 3, threads = 1, layers = 6, checkpoint = -1;
  bool compiled = false;  // --compiled 1: compile::compile_train_step (f32 only)
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--case") kase = argv[i + 1];
    else if (k == "--steps") steps = std::atoi(argv[i + 1]);
    else if (k == "--warmup") warmup = std::atoi(argv[i + 1]);
    else if (k == "--threads") threads = std::atoi(argv[i + 1]);
    else if (k == "--precision") precision = argv[i + 1];
    else if (k == "--layers") layers = std::atoi(argv[i + 1]);
    else if (k == "--checkpoint") checkpoint = std::atoi(argv[i + 1]);
    else if (k == "--compiled") compiled = std::atoi(argv[i + 1]) != 0;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (kase == "fma_peak") {
    std::printf("%s\n", fma_peak(threads).dump().c_str());
    return 0;
  }
  set_num_threads(threads);
  manual_seed(0);
  nn::ModulePtr model;
  optim::OptimizerPtr opt;
  Tensor x, y;
  int64_t batch = 0;
  bool lm = false;
  nlohmann::json extra = nlohmann::json::object();
  std::unique_ptr<data::DataLoader> loader;
  if (kase == "mlp") {
    batch = 128;
    model = std::make_shared<nn::zoo::MLP>(nn::zoo::MLPConfig{784, {256, 256}, 10});
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::Options{{"lr", 1e-3}});
    x = ops::randn({batch, 784});
  } else if (kase == "cnn" || kase == "cnn_loader") {
    batch = 64;
    model = std::make_shared<nn::zoo::LeNet>(nn::zoo::LeNetConfig{});
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::Options{{"lr", 1e-3}});
    x = ops::randn({batch, 1, 28, 28});
    if (kase == "cnn_loader") {
      auto ds = std::make_shared<data::FashionMNIST>(data::kFashionMNISTRoot, "train");
      loader = std::make_unique<data::DataLoader>(
          ds, data::DataLoaderOptions{.batch_size = batch, .shuffle = true, .seed = 0, .num_workers = 2});
    }
  } else if (kase == "gpt") {
    batch = 8;
    lm = true;
    nn::zoo::GPTConfig c;  // vocab 256, block 256, 6 layers, 6 heads, 384, bias, tied
    c.n_layer = layers;
    c.gradient_checkpointing = checkpoint >= 0;
    c.checkpoint_segments = std::max(checkpoint, 0);
    extra["layers"] = layers;
    extra["checkpoint"] = checkpoint;
    model = std::make_shared<nn::zoo::GPT>(c);
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::Options{{"lr", 3e-4}, {"weight_decay", 0.1}});
    Tensor tokens = ops::randint(0, 256, {batch, 257});
    x = tokens.slice(1, 0, 256).contiguous();
    y = tokens.slice(1, 1, 257).contiguous();
    extra["seq_len"] = 256;
    extra["params"] = model->num_parameters();
  } else if (kase == "resnet18") {
    batch = 32;
    model = std::make_shared<nn::zoo::ResNet>(nn::zoo::ResNetConfig::resnet18());
    opt = std::make_unique<optim::SGD>(model->parameters(),
                                       optim::Options{{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 5e-4}});
    x = ops::randn({batch, 3, 32, 32});
  } else {
    std::fprintf(stderr, "--case must be mlp, cnn, gpt, resnet18 or cnn_loader\n");
    return 2;
  }
  if (!lm) y = ops::randint(0, 10, {batch});
  model->train();
  if (precision != "f32" && precision != "bf16" && precision != "f16") {
    std::fprintf(stderr, "--precision must be f32, bf16 or f16\n");
    return 2;
  }
  const bool amp = precision != "f32";
  const DType low = precision == "f16" ? DType::F16 : DType::BF16;
  train::GradScaler scaler({.enabled = precision == "f16"});
  auto rss_mib = [] {
    long pages = 0, resident = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
      std::fclose(f);
    }
    return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
  };
  const double rss_before = rss_mib();
  double wait = 0;
  if (compiled && (precision != "f32" || loader || checkpoint >= 0)) {
    std::fprintf(stderr, "--compiled 1 runs f32 steps without the data loader or checkpointing\n");
    return 2;
  }
  nn::Module* mp = model.get();
  auto loss_of = [mp, lm](const TensorList& b) {
    Tensor out = (*mp)(b[0]);
    return lm ? ops::cross_entropy(out.reshape({-1, out.size(-1)}), b[1].reshape({-1})) : ops::cross_entropy(out, b[1]);
  };
  std::optional<compile::TrainStep> compiled_step;
  if (compiled) compiled_step = compile::compile_train_step(model, loss_of, opt.get());
  auto step = [&] {
    if (compiled_step) return (*compiled_step)({x, y}).item<double>();
    Tensor in = x, target = y;
    if (loader) {
      auto t0 = Clock::now();
      auto b = loader->next();
      if (!b) b = loader->next();  // next epoch
      wait += std::chrono::duration<double>(Clock::now() - t0).count();
      in = (*b)[0], target = (*b)[1];
    }
    opt->zero_grad();
    Tensor loss;
    {
      autocast::Guard guard(low, amp);
      Tensor out = (*model)(in);
      loss = lm ? ops::cross_entropy(out.reshape({-1, out.size(-1)}), target.reshape({-1}))
                : ops::cross_entropy(out, target);
    }
    scaler.scale(loss).backward();
    scaler.step(*opt);
    scaler.update();
    return loss.item<double>();
  };
  for (int i = 0; i < warmup; ++i) step();
  wait = 0;
  reset_peak_memory();
  std::vector<double> ms;
  double loss = 0;
  auto all0 = Clock::now();
  for (int i = 0; i < steps; ++i) {
    auto t0 = Clock::now();
    loss = step();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  double total = std::chrono::duration<double>(Clock::now() - all0).count();
  std::vector<double> s = ms;
  std::sort(s.begin(), s.end());
  auto pct = [&](double p) { return s[std::min<size_t>(s.size() - 1, static_cast<size_t>(p * (s.size() - 1) + 0.5))]; };
  const double median = pct(0.5);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  nlohmann::json r = {{"case", kase},
                      {"impl", "tessera"},
                      {"threads", threads},
                      {"ms_per_step", median},
                      {"ms_p10", pct(0.1)},
                      {"ms_p90", pct(0.9)},
                      {"steps", steps},
                      {"warmup", warmup},
                      {"batch", batch},
                      {"peak_rss_mib", ru.ru_maxrss / 1024.0},
                      {"step_rss_mib", std::max(0.0, ru.ru_maxrss / 1024.0 - rss_before)},
                      {"rss_after_mib", rss_mib()},  // resident now, after the timed steps
                      {"peak_tensor_mib", max_memory_allocated() / double(1 << 20)},
                      {"reserved_mib", memory_stats().reserved_bytes / double(1 << 20)},  // live + cached blocks
                      {"precision", precision},
                      {"compiled", compiled},
                      {"samples_per_s", batch * 1e3 / median},
                      {"final_loss", loss}};
  if (kase == "mlp") r["s_per_epoch"] = median * std::ceil(60000.0 / 128) / 1e3;
  if (kase == "gpt") r["tokens_per_s"] = batch * 256 * 1e3 / median;
  if (loader) r["data_wait_fraction"] = wait / total;
  r.update(extra);
  std::printf("%s\n", r.dump().c_str());
  return 0;
}
