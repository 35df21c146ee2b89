// Quantization: speed of the weight-only quantized matrix products against
// f32, the accuracy and speed of a trained GPT with its Linear layers
// quantized, and of a trained CNN quantized to static int8 (PTQ). Driven by
// bench/quant_compare.py and bench/ptq_compare.py (which run PyTorch and ONNX
// Runtime beside it); usable alone:
//   tessera_quant_bench kernels [--threads N] [--rounds R]
//   tessera_quant_bench gpt RUN_OR_CHECKPOINT [--threads N] [--eval-batches B] [--rounds R]
//   tessera_quant_bench cnn RUN_OR_CHECKPOINT [--threads N] [--rounds R] [--calibration-batches B]
//                       [--observer KIND] [--export DIR]
//   tessera_quant_bench sparse [--threads N] [--rounds R]    (sparse_linear vs the dense GEMM by sparsity)
// Every figure is a median over R rounds that alternate the variants, so slow
// phases of a shared host land on all of them alike.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/compile/compile.h"
#include "tessera/compile/model.h"
#include "tessera/compile/onnx.h"
#include "tessera/compile/serialize.h"
#include "tessera/core/parallel.h"
#include "tessera/data/dataset.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/npy.h"
#include "tessera/nn/module.h"
#include "tessera/ops/ops.h"
#include "tessera/profiler/profiler.h"
#include "tessera/quant/ptq.h"
#include "tessera/quant/weights.h"
#include "tessera/train/recipe.h"
#include "tessera/train/trainer.h"

using namespace tessera;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Seconds per call of f: repeated for at least `budget` seconds.
double time_call(const std::function<void()>& f, double budget) {
  f();  // warm: primitives, caches
  int reps = 0;
  double t0 = now(), t;
  do {
    f();
    ++reps;
    t = now();
  } while (t - t0 < budget);
  return (t - t0) / reps;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Variant {
  std::string name;  // f32, or format[/int8]
  std::string format;
  int64_t group = 0;
  std::string activations = "float";
};

std::vector<Variant> variants() {
  return {{"f32", "", 0, ""},
          {"q8_0", "q8_0", 0, "float"},   {"q8_0/int8", "q8_0", 0, "int8"}, {"int8", "int8", 0, "float"},
          {"int8/int8", "int8", 0, "int8"}, {"q4_0", "q4_0", 0, "float"},   {"q4_0/int8", "q4_0", 0, "int8"},
          {"int4g32", "int4", 32, "float"}, {"int4g32/int8", "int4", 32, "int8"},
          {"int4g128/int8", "int4", 128, "int8"}};
}

// --only NAME: time f32 and that variant alone (for profiling one kernel).
std::string g_only;

int run_kernels(int rounds) {
  NoGradGuard ng;
  struct Shape2 {
    int64_t out, in;
    const char* what;
  };
  const Shape2 shapes[] = {{384, 128, "char GPT c_attn"}, {128, 512, "char GPT mlp c_proj"},
                           {4096, 4096, "LLM-size square"}, {11008, 4096, "LLM-size MLP up"}};
  std::printf("%-22s %-11s %4s %-14s %10s %8s\n", "shape", "out x in", "m", "variant", "us/call", "f32/this");
  for (const Shape2& s : shapes)
    for (int64_t m : {1, 16, 64}) {
      if (s.out * s.in > 16 * 1024 * 1024 && m == 64) continue;  // the GEMM path; covered by the smaller shapes
      manual_seed(1);
      Tensor w = ops::randn({s.out, s.in}, {}) * 0.02;
      Tensor x = ops::randn({m, s.in});
      std::vector<Variant> vs = variants();
      if (!g_only.empty())
        std::erase_if(vs, [](const Variant& v) { return v.name != "f32" && v.name != g_only; });
      std::vector<quant::QuantizedWeight> qs(vs.size());
      for (size_t i = 1; i < vs.size(); ++i) qs[i] = quant::quantize_weight(w, vs[i].format, vs[i].group);
      std::vector<std::vector<double>> t(vs.size());
      const double budget = s.out * s.in > 1e6 ? 0.3 : 0.1;
      // At one row, two more f32 ways to compute the same product, so that the
      // quantized paths can be held against Tessera's fastest f32 one:
      // x @ W^T with W^T stored contiguous ([in, out]), and W @ x^T (the
      // weight as the left operand: a matrix-vector product, [out, 1]).
      Tensor wt = w.t().contiguous(), xt = x.t().contiguous();
      std::vector<double> t_xwt, t_wx;
      for (int r = 0; r < rounds; ++r)
        for (size_t i = 0; i < vs.size(); ++i) {
          if (i == 0) {
            t[i].push_back(time_call([&] { ops::linear(x, w); }, budget));
            if (m == 1) {
              t_xwt.push_back(time_call([&] { ops::matmul(x, wt); }, budget));
              t_wx.push_back(time_call([&] { ops::matmul(w, xt); }, budget));
            }
          } else {
            t[i].push_back(time_call([&] {
              ops::quantized_linear(x, qs[i].qweight, qs[i].scales, qs[i].mins, Tensor(), vs[i].format, vs[i].group,
                                    vs[i].activations);
            }, budget));
          }
        }
      if (m == 1)
        for (auto [path, ts] : {std::pair<const char*, std::vector<double>*>{"linear(x,W)", &t[0]},
                                {"matmul(x,Wt)", &t_xwt}, {"matmul(W,xt)", &t_wx}})
          std::printf("RESULT kernel_f32 shape=%lldx%lld m=1 path=%s us=%.2f\n", static_cast<long long>(s.out),
                      static_cast<long long>(s.in), path, median(*ts) * 1e6);
      const double f32 = median(t[0]);
      for (size_t i = 0; i < vs.size(); ++i) {
        double us = median(t[i]) * 1e6;
        std::printf("%-22s %5lldx%-5lld %4lld %-14s %10.1f %8.2f\n", s.what, static_cast<long long>(s.out),
                    static_cast<long long>(s.in), static_cast<long long>(m), vs[i].name.c_str(), us, f32 * 1e6 / us);
        std::printf("RESULT kernel shape=%lldx%lld m=%lld variant=%s us=%.2f speedup=%.3f\n",
                    static_cast<long long>(s.out), static_cast<long long>(s.in), static_cast<long long>(m),
                    vs[i].name.c_str(), us, f32 * 1e6 / us);
      }
      std::fflush(stdout);
    }
  return 0;
}

// Perplexity over 16-token windows fed one at a time ([1, 16] forwards): every
// Linear sees 16 rows, the batch size at which the block formats' int8
// activation path runs (the full evaluation's large batches take the float
// GEMM path), so this column measures that path's accuracy.
double short_context_perplexity(nn::Module& m, const data::Dataset& d, int64_t samples) {
  NoGradGuard ng;
  double nll = 0;
  int64_t n = 0;
  for (int64_t i = 0; i < std::min<int64_t>(samples, d.size()); ++i) {
    data::Example e = d.get(i);
    const Tensor& x = e.at(0);
    const Tensor& y = e.at(1);
    for (int64_t t0 = 0; t0 + 16 <= x.size(0); t0 += 16) {
      Tensor logits = m(x.narrow(0, t0, 16).unsqueeze(0)).squeeze(0);
      Tensor loss = ops::cross_entropy(logits, y.narrow(0, t0, 16));
      nll += loss.item<double>() * 16;
      n += 16;
    }
  }
  return std::exp(nll / static_cast<double>(n));
}

std::string checkpoint_dir(const std::string& arg) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(arg) / "model.safetensors")) return arg;
  if (fs::is_directory(fs::path(arg) / "checkpoints")) return io::resolve_checkpoint("latest", arg + "/checkpoints");
  return io::resolve_checkpoint("latest", arg);
}

int run_gpt(const std::string& arg, int64_t eval_batches, int rounds) {
  const std::string dir = checkpoint_dir(arg);
  io::Checkpoint ck = io::load_checkpoint(dir);
  std::printf("checkpoint %s\n", dir.c_str());
  struct Row {
    Variant v;
    double ppl = 0, loss = 0, ppl16 = 0;
    int64_t bytes = 0;
    std::vector<double> t1, t128;
  };
  std::vector<Row> rows;
  for (const Variant& v : variants()) rows.push_back({v});
  std::vector<std::shared_ptr<nn::Module>> models;
  data::DatasetPtr eval_data;
  for (Row& r : rows) {
    train::Recipe rec = train::build_recipe(ck.state["config"], dir + "/state.json (config)");
    rec.model->load_state_dict(nn::StateDict{ck.model}, true);
    rec.model->eval();
    if (!r.v.format.empty()) {
      auto rep = quant::quantize_weights(*rec.model, {.format = r.v.format, .group = r.v.group ? r.v.group : 32,
                                                      .activations = r.v.activations});
      r.bytes = rep.bytes_after;
      rows[0].bytes = rep.bytes_before;
    }
    models.push_back(rec.model);
    eval_data = rec.eval_data;
    train::TrainerOptions o;
    o.quiet = true;
    o.handle_signals = false;
    train::Trainer tr(std::move(rec), o);
    train::EvalMetrics m = tr.evaluate(eval_batches);
    r.ppl = m.perplexity;
    r.loss = m.loss;
    r.ppl16 = short_context_perplexity(*models.back(), *eval_data, 64);
    std::fprintf(stderr, "%s: perplexity %.4f\n", r.v.name.c_str(), r.ppl);
  }
  // Latency: one new token (a [1, 1] forward: every Linear a matrix-vector
  // product) and a 128-token prompt ([1, 128]).
  NoGradGuard ng;
  Tensor one = ops::randint(0, 60, {1, 1}, DType::I64), prompt = ops::randint(0, 60, {1, 128}, DType::I64);
  for (int round = 0; round < rounds; ++round)
    for (size_t i = 0; i < rows.size(); ++i) {
      nn::Module& m = *models[i];
      rows[i].t1.push_back(time_call([&] { m(one); }, 0.2));
      rows[i].t128.push_back(time_call([&] { m(prompt); }, 0.3));
    }
  const Row& base = rows[0];
  std::printf("%-14s %10s %10s %9s %10s %9s %12s %9s %12s %9s\n", "variant", "Linear KiB", "perplexity", "increase",
              "ppl (16)", "increase", "[1,1] us", "f32/this", "[1,128] us", "f32/this");
  for (const Row& r : rows) {
    double t1 = median(r.t1) * 1e6, t128 = median(r.t128) * 1e6;
    double b1 = median(base.t1) * 1e6, b128 = median(base.t128) * 1e6;
    std::printf("%-14s %10.1f %10.4f %8.2f%% %10.4f %8.2f%% %12.1f %9.2f %12.1f %9.2f\n", r.v.name.c_str(),
                r.bytes / 1024.0, r.ppl, 100.0 * (r.ppl / base.ppl - 1.0), r.ppl16, 100.0 * (r.ppl16 / base.ppl16 - 1.0),
                t1, b1 / t1, t128, b128 / t128);
    std::printf("RESULT gpt variant=%s perplexity=%.5f increase_pct=%.3f ppl16=%.5f increase16_pct=%.3f us_1=%.2f "
                "us_128=%.2f\n", r.v.name.c_str(), r.ppl, 100.0 * (r.ppl / base.ppl - 1.0), r.ppl16,
                100.0 * (r.ppl16 / base.ppl16 - 1.0), t1, t128);
  }
  return 0;
}


// A classifier checkpoint (the Fashion-MNIST CNN): PTQ int8 with calibration
// on training batches, accuracy on the whole evaluation split, and batch-1 /
// batch-64 latency of the compiled f32 graph and the int8 graph.
int run_cnn(const std::string& arg, int64_t calib_batches, const std::string& observer, const std::string& export_dir,
            int rounds) {
  const std::string dir = checkpoint_dir(arg);
  io::Checkpoint ck = io::load_checkpoint(dir);
  std::printf("checkpoint %s\n", dir.c_str());
  train::Recipe rec = train::build_recipe(ck.state["config"], dir + "/state.json (config)");
  rec.model->load_state_dict(nn::StateDict{ck.model}, true);
  rec.model->eval();
  NoGradGuard ng;
  auto batch = [](const data::DatasetPtr& d, int64_t start, int64_t n) {
    std::vector<int64_t> idx(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = (start + i) % d->size();
    return d->get_batch(idx);
  };
  compile::CaptureOptions co;
  co.dynamic.push_back({0, 0, "N"});
  co.input_names = {"x"};
  compile::Graph g = compile::capture_module(*rec.model, batch(rec.eval_data, 0, 64).at(0), co);
  std::vector<TensorList> calib;
  for (int64_t b = 0; b < calib_batches; ++b) calib.push_back({batch(rec.train_data, b * 64, 64).at(0)});
  quant::PtqConfig cfg;
  cfg.observer.kind = observer;
  double t0 = now();
  quant::PtqResult q = quant::quantize_static(g, calib, cfg);
  std::printf("quantized in %.2f s\n%s", now() - t0, q.report.text().c_str());
  if (!export_dir.empty()) {
    // For bench/ptq_compare.py: the int8 graph (Tessera's format and QDQ
    // ONNX), the f32 graph as ONNX, the inputs timed, the evaluation split
    // and its labels, and Tessera's int8 logits of the batch-64 input.
    std::filesystem::create_directories(export_dir);
    compile::save(q.graph, export_dir + "/int8.tsr");
    compile::export_onnx(q.graph, export_dir + "/int8.onnx");
    compile::export_onnx(g, export_dir + "/f32.onnx");
    const int64_t n = rec.eval_data->size();
    TensorList all = batch(rec.eval_data, 0, n);
    io::save_npy(export_dir + "/eval_x.npy", all.at(0));
    io::save_npy(export_dir + "/eval_y.npy", all.at(1).to(DType::I64));
    std::vector<Tensor> cx;
    for (const TensorList& b : calib) cx.push_back(b[0]);
    io::save_npy(export_dir + "/calib_x.npy", ops::cat(cx, 0));
    io::save_npy(export_dir + "/x1.npy", batch(rec.eval_data, 0, 1).at(0));
    io::save_npy(export_dir + "/x64.npy", batch(rec.eval_data, 0, 64).at(0));
    io::save_npy(export_dir + "/y64_int8.npy", Model(q.graph.clone())(batch(rec.eval_data, 0, 64).at(0)));
    std::printf("wrote %s/{int8.tsr, int8.onnx, f32.onnx, eval_x.npy, eval_y.npy, calib_x.npy, x1.npy, x64.npy, y64_int8.npy}\n",
                export_dir.c_str());
  }
  Model f32(g.clone()), i8(q.graph.clone());
  auto accuracy = [&](const Model& m) {
    int64_t right = 0, n = rec.eval_data->size();
    for (int64_t s = 0; s < n; s += 500) {
      TensorList b = batch(rec.eval_data, s, std::min<int64_t>(500, n - s));
      auto want = b.at(1).to(DType::I64).to_vector<int64_t>();
      auto got = ops::argmax(m(b[0]), 1).to_vector<int64_t>();
      for (size_t i = 0; i < want.size(); ++i) right += got[i] == want[i];
    }
    return 100.0 * static_cast<double>(right) / static_cast<double>(n);
  };
  const double acc_f = accuracy(f32), acc_q = accuracy(i8);
  Tensor x1 = batch(rec.eval_data, 0, 1).at(0), x64 = batch(rec.eval_data, 0, 64).at(0);
  std::vector<double> f1, q1, f64, q64;
  for (int r = 0; r < rounds; ++r) {
    f1.push_back(time_call([&] { f32(x1); }, 0.3));
    q1.push_back(time_call([&] { i8(x1); }, 0.3));
    f64.push_back(time_call([&] { f32(x64); }, 0.5));
    q64.push_back(time_call([&] { i8(x64); }, 0.5));
  }
  if (std::getenv("TESSERA_BENCH_PROFILE")) {
    for (const Model* m : {&i8, &f32}) {  // where the time of 20 batch-64 calls goes
      profiler::Profiler prof;
      for (int i = 0; i < 20; ++i) (*m)(x64);
      prof.stop();
      std::printf("%s\n", prof.table().c_str());
    }
  }
  const double a = median(f1) * 1e6, b = median(q1) * 1e6, c = median(f64) * 1e6, d = median(q64) * 1e6;
  std::printf("%-6s %9s %12s %12s\n", "", "accuracy", "batch 1 us", "batch 64 us");
  std::printf("%-6s %8.2f%% %12.1f %12.1f\n", "f32", acc_f, a, c);
  std::printf("%-6s %8.2f%% %12.1f %12.1f\n", "int8", acc_q, b, d);
  std::printf("int8/f32 latency: batch 1 %.3f, batch 64 %.3f; accuracy drop %.2f pt\n", b / a, d / c, acc_f - acc_q);
  std::printf("RESULT cnn observer=%s acc_f32=%.2f acc_int8=%.2f us1_f32=%.1f us1_int8=%.1f us64_f32=%.1f "
              "us64_int8=%.1f\n", observer.c_str(), acc_f, acc_q, a, b, c, d);
  return 0;
}

// Unstructured sparsity: ops::sparse_linear (CSR) against ops::linear (oneDNN
// f32 GEMM) on the same randomly pruned weights, by sparsity: where the
// sparse kernel starts to win.
int run_sparse(int rounds) {
  NoGradGuard ng;
  const std::vector<std::pair<int64_t, int64_t>> shapes{{256, 784}, {1024, 1024}, {4096, 4096}};
  const std::vector<double> sparsities{0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99};
  std::printf("%-12s %5s %9s %12s %12s %10s\n", "shape", "m", "sparsity", "dense us", "sparse us", "dense/sp");
  for (auto [n, k] : shapes)
    for (int64_t m : {int64_t{1}, int64_t{64}}) {
      Tensor x = ops::randn({m, k});
      for (double sp : sparsities) {
        Tensor w = ops::randn({n, k});
        w = ops::mul(w, ops::gt(ops::rand({n, k}), sp).to(DType::F32)).contiguous();
        std::vector<float> values;
        std::vector<int32_t> col_idx;
        std::vector<int64_t> row_ptr{0};
        const float* wp = w.data_ptr<float>();
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t j = 0; j < k; ++j)
            if (wp[r * k + j] != 0.0f) {
              values.push_back(wp[r * k + j]);
              col_idx.push_back(static_cast<int32_t>(j));
            }
          row_ptr.push_back(static_cast<int64_t>(values.size()));
        }
        Tensor vals = tensor(values), cols = tensor(col_idx), rows = tensor(row_ptr);
        std::vector<double> td, ts;
        for (int r = 0; r < rounds; ++r) {
          td.push_back(time_call([&] { ops::linear(x, w); }, 0.2));
          ts.push_back(time_call([&] { ops::sparse_linear(x, vals, cols, rows, Tensor(), k); }, 0.2));
        }
        const double d = median(td) * 1e6, sp_us = median(ts) * 1e6;
        std::printf("%5lldx%-6lld %5lld %8.0f%% %12.1f %12.1f %9.2fx\n", static_cast<long long>(n),
                    static_cast<long long>(k), static_cast<long long>(m), 100 * sp, d, sp_us, d / sp_us);
        std::printf("RESULT sparse n=%lld k=%lld m=%lld sparsity=%.2f dense_us=%.2f sparse_us=%.2f\n",
                    static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(m), sp, d, sp_us);
      }
    }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s kernels|gpt|cnn|sparse [RUN] [--threads N] [--rounds R] [--eval-batches B] [--calibration-batches B] [--observer KIND] [--export DIR]\n", argv[0]);
    return 2;
  }
  std::string mode = argv[1], run, observer = "minmax", export_dir;
  int64_t calib_batches = 16;
  int threads = 1, rounds = 3;
  int64_t eval_batches = 50;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value after %s\n", a.c_str());
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--rounds") rounds = std::max(1, std::atoi(next().c_str()));
    else if (a == "--eval-batches") eval_batches = std::atoll(next().c_str());
    else if (a == "--only") g_only = next();
    else if (a == "--calibration-batches") calib_batches = std::atoll(next().c_str());
    else if (a == "--observer") observer = next();
    else if (a == "--export") export_dir = next();
    else run = a;
  }
  set_num_threads(threads);
  std::printf("threads %d, rounds %d\n", threads, rounds);
  try {
    if (mode == "kernels") return run_kernels(rounds);
    if (mode == "gpt") return run_gpt(run, eval_batches, rounds);
    if (mode == "sparse") return run_sparse(rounds);
    if (mode == "cnn") return run_cnn(run, calib_batches, observer, export_dir, rounds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "unknown mode '%s': expected kernels, gpt, cnn or sparse\n", mode.c_str());
  return 2;
}
