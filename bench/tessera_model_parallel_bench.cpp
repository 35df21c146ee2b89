// Model-parallel benchmarks, run as N ranks by bench/model_parallel_compare.py
// (mpirun). Rank 0 prints one JSON line per measurement.
//
//   tessera_model_parallel_bench bubble --schedule 1f1b --m 8 --v 1 --stage-ms 10
//       The pipeline's bubble with unit-cost stages: each of the world's
//       ranks * v stages sleeps stage-ms / v in its forward and again in its
//       backward (so the ranks' cost does not depend on how many cores they
//       share), run by distributed::Pipeline. Bubble = 1 - busy / (ranks x
//       step time), busy being the time the stages slept; against (p - 1) /
//       (v m + p - 1) and against the schedule's simulation.
//   tessera_model_parallel_bench activations --schedule gpipe --m 8
//       Each rank's peak of live bytes during a GPT pipeline step above its
//       live bytes before it (the activations held for backward, plus one
//       stage's gradients), per rank.
//   tessera_model_parallel_bench tensor --sp 0
//       One training step of the GPT split over the world (tensor
//       parallelism): the bytes each collective carried against the analytic
//       count, and the parameter bytes per rank against 1/T of the split
//       parameters plus the whole ones.
//   tessera_model_parallel_bench step --layout 2,2,2 --steps 5
//       Parallel3D step time of the GPT at a layout (1,1,1 started as one
//       process: the baseline), and the seconds spent in collectives.
//   tessera_model_parallel_bench bigmodel --layout 2,2,2 --limit-mb 160 --steps 20
//       A GPT (8 layers, 384 wide, vocabulary 4096: 15.8M parameters, 253 MB
//       of weights, gradients and AdamW state) trained for `steps` steps,
//       each rank under set_memory_limit(limit-mb) when it is given. At a
//       layout of several ranks the model is built on meta and each rank
//       materializes its part only (Note [Materializing a split model]); at
//       1,1,1 it is built on the CPU, and under the limit it fails. Rank 0
//       prints the losses, each rank's peak bytes and the error, if any.
//   tessera_model_parallel_bench serving --batch 1 --steps 64 --type q8_0 [--model PATH]
//       The LLM engine's decode step with the model split over the world's
//       ranks (tensor-parallel serving; one process: the whole model). The
//       model is a GGUF file, or by default the 15M fortunes model's shape
//       (examples/configs/fortunes_llama_15m.yaml) with random weights, which
//       the step's time does not depend on. `batch` sequences are prefilled
//       with 64 tokens each, then decoded together for `steps` steps: the
//       median step on rank 0, and rank 0's time in the group's sums and
//       broadcasts. Each rank runs OMP_NUM_THREADS threads.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "subcommand.h"

#include "tessera/core/allocator.h"
#include "tessera/core/parallel.h"
#include "tessera/distributed/llm_group.h"
#include "tessera/distributed/parallel3d.h"
#include "tessera/llm/engine.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/nn/nn.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

using bench::arg;
using bench::median;
using bench::seconds_since;

// The largest value over the ranks, on every rank.
double max_over(const distributed::ProcessGroupPtr& g, double v) {
  Tensor t = tensor(std::vector<double>{v}, {1});
  g->allreduce(t, distributed::ReduceOp::kMax)->wait();
  return t.item<double>();
}
double sum_over(const distributed::ProcessGroupPtr& g, double v) {
  Tensor t = tensor(std::vector<double>{v}, {1});
  g->allreduce(t)->wait();
  return t.item<double>();
}

// ---- bubble ------------------------------------------------------------------------------

std::atomic<int64_t> g_slept_us{0};

void sleep_for(double ms) {
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
  g_slept_us += static_cast<int64_t>(seconds_since(t0) * 1e6);
}

// A stage of unit cost: sleeps in forward, and in backward through a hook on its output.
struct SleepStage : nn::Module {
  double ms;
  Tensor w;
  explicit SleepStage(double ms) : nn::Module("SleepStage"), ms(ms) { w = register_parameter("w", ones({1})); }
  Tensor forward(const Tensor& x) override {
    sleep_for(ms);
    Tensor y = ops::mul(x, w);
    const double back = ms;
    y.register_hook([back](const Tensor& g) {
      sleep_for(back);
      return g;
    });
    return y;
  }
};

int bench_bubble(int argc, char** argv) {
  auto world = distributed::world();
  const std::string schedule = arg(argc, argv, "--schedule", "1f1b");
  const int m = std::stoi(arg(argc, argv, "--m", "8")), v = std::stoi(arg(argc, argv, "--v", "1"));
  const double stage_ms = std::stod(arg(argc, argv, "--stage-ms", "10"));
  const int steps = std::stoi(arg(argc, argv, "--steps", "3"));
  const int p = world->size();
  auto seq = std::make_shared<nn::Sequential>();
  for (int s = 0; s < p * v; ++s) seq->push_back(std::make_shared<SleepStage>(stage_ms / v));
  distributed::Pipeline pipe(seq, world, {.schedule = schedule, .micro_batches = m, .virtual_stages = v},
                             [](const Tensor& y, const Tensor&) { return ops::mean(y); });
  Tensor x = ones({m, 4}), t = zeros({m});
  pipe.step(x, t);  // warm-up
  std::vector<double> bubbles, times;
  for (int i = 0; i < steps; ++i) {
    world->barrier()->wait();
    g_slept_us = 0;
    const auto t0 = Clock::now();
    pipe.step(x, t);
    const double mine = seconds_since(t0);
    const double step = max_over(world, mine);
    const double busy = sum_over(world, static_cast<double>(g_slept_us.load()) * 1e-6);
    times.push_back(step);
    bubbles.push_back(1 - busy / (p * step));
  }
  const distributed::Simulation sim = distributed::simulate(pipe.schedule(), 1.0 / v, 1.0 / v);
  if (world->rank() == 0) {
    nlohmann::json j = {{"bench", "bubble"}, {"schedule", schedule}, {"ranks", p}, {"m", m}, {"v", v},
                        {"stage_ms", stage_ms}, {"step_s", median(times)}, {"bubble", median(bubbles)},
                        {"ideal", distributed::ideal_bubble(p, m, v)}, {"simulated", sim.bubble}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

// ---- activations ---------------------------------------------------------------------------

nn::zoo::GPTConfig bench_gpt(int layers) {
  nn::zoo::GPTConfig c;
  c.vocab_size = 256;
  c.block_size = 128;
  c.n_layer = layers;
  c.n_head = 4;
  c.n_embd = 128;
  return c;
}

Tensor lm_loss(const Tensor& logits, const Tensor& t) {
  return ops::cross_entropy(logits.reshape({-1, logits.size(-1)}), t.reshape({-1}));
}

int bench_activations(int argc, char** argv) {
  auto world = distributed::world();
  const std::string schedule = arg(argc, argv, "--schedule", "1f1b");
  const int m = std::stoi(arg(argc, argv, "--m", "8"));
  manual_seed(1);
  auto gpt = std::make_shared<nn::zoo::GPT>(bench_gpt(2 * world->size()));
  distributed::Pipeline pipe(gpt, world, {.schedule = schedule, .micro_batches = m}, lm_loss);
  Generator gen(2);
  Tensor x = ops::randint(0, 256, {2 * m, 128}, DType::I64, &gen), y = ops::randint(0, 256, {2 * m, 128}, DType::I64, &gen);
  pipe.step(x, y);  // the gradients exist from here on
  const int64_t before = memory_allocated();
  reset_peak_memory();
  pipe.step(x, y);
  const double held = static_cast<double>(max_memory_allocated() - before);
  Tensor all = empty({world->size()}, DType::F64);
  world->allgather(all, tensor(std::vector<double>{held}, {1}))->wait();
  if (world->rank() == 0) {
    std::vector<double> per;
    for (int r = 0; r < world->size(); ++r) per.push_back(all[r].item<double>());
    nlohmann::json j = {{"bench", "activations"}, {"schedule", schedule}, {"ranks", world->size()}, {"m", m},
                        {"peak_above_bytes", per}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

// ---- tensor parallelism ----------------------------------------------------------------------

std::map<std::string, distributed::CollectiveStats> stats_now() {
  std::map<std::string, distributed::CollectiveStats> out;
  for (auto& s : distributed::collective_stats()) out[s.op] = s;
  return out;
}

// One training step's collectives of the GPT with `layers` layers split
// over the world: calls and bytes this rank contributed, by operation.
struct Traffic {
  std::map<std::string, std::pair<double, double>> ops;  // op -> (calls, bytes)
  double param_bytes = 0, expected_param_bytes = 0, dense_param_bytes = 0, step_s = 0;
};

Traffic measure_tensor(int layers, bool sp) {
  auto world = distributed::world();
  const int T = world->size();
  manual_seed(1);
  auto gpt = std::make_shared<nn::zoo::GPT>(bench_gpt(layers));
  Traffic out;
  for (auto& [n, p] : gpt->named_parameters()) out.dense_param_bytes += static_cast<double>(p.nbytes());
  distributed::tensor_parallelize(*gpt, world, {.sequence_parallel = sp});
  // Expected: the split parameters' dense bytes / T plus the whole ones.
  std::map<std::string, distributed::ShardSpec> specs;
  for (auto& [n, s] : distributed::tensor_parallel_shards(*gpt)) specs[n] = s;
  for (auto& [n, p] : gpt->named_parameters()) {
    out.param_bytes += static_cast<double>(p.nbytes());
    auto it = specs.find(n);
    double dense = static_cast<double>(p.nbytes());
    if (it != specs.end()) {
      dense = static_cast<double>(dtype_size(p.dtype()));
      for (int64_t s : it->second.dense_shape) dense *= static_cast<double>(s);
      dense /= T;
    }
    out.expected_param_bytes += dense;
  }
  Generator gen(2);
  Tensor x = ops::randint(0, 256, {4, 128}, DType::I64, &gen), y = ops::randint(0, 256, {4, 128}, DType::I64, &gen);
  auto step = [&] {
    distributed::vocab_parallel_cross_entropy((*gpt)(x), y, world).backward();
    gpt->zero_grad();
  };
  step();  // warm-up
  auto s0 = stats_now();
  const auto t0 = Clock::now();
  step();
  out.step_s = seconds_since(t0);
  for (auto& [op, st] : stats_now()) {
    const double calls = st.calls - s0[op].calls, bytes = st.bytes - s0[op].bytes;
    if (calls > 0) out.ops[op] = {calls, bytes};
  }
  return out;
}

// Per layer: the traffic of 8 layers less that of 4, over 4 (the rest of
// the model, its embedding, head and loss, cancels), against the analytic
// count: without sequence parallelism 2 all-reduces of the activation
// [B, L, C] forward and 2 backward; with it, 4 all-gathers (each rank
// contributing its 1/T block) and 4 reduce-scatters (each the whole
// activation), and one all-reduce of [C] per norm weight and bias and per
// row-parallel bias (their gradients, 6 a layer).
int bench_tensor(int argc, char** argv) {
  auto world = distributed::world();
  const bool sp = arg(argc, argv, "--sp", "0") == "1";
  const int T = world->size();
  const Traffic small = measure_tensor(4, sp), big = measure_tensor(8, sp);
  nlohmann::json per_layer = nlohmann::json::object();
  for (auto& [op, cb] : big.ops) {
    auto it = small.ops.find(op);
    const double calls = (cb.first - (it == small.ops.end() ? 0 : it->second.first)) / 4;
    const double bytes = (cb.second - (it == small.ops.end() ? 0 : it->second.second)) / 4;
    if (calls > 0) per_layer[op] = {{"calls", calls}, {"bytes", bytes}};
  }
  const nn::zoo::GPTConfig c = bench_gpt(8);
  const double act = 4.0 * 128 * static_cast<double>(c.n_embd) * 4;
  nlohmann::json analytic =
      sp ? nlohmann::json{{"allgather", {{"calls", 4}, {"bytes", 4 * act / T}}},
                          {"reduce_scatter", {{"calls", 4}, {"bytes", 4 * act}}},
                          {"allreduce", {{"calls", 6}, {"bytes", 6.0 * static_cast<double>(c.n_embd) * 4}}}}
         : nlohmann::json{{"allreduce", {{"calls", 4}, {"bytes", 4 * act}}}};
  if (world->rank() == 0) {
    nlohmann::json j = {{"bench", "tensor"}, {"ranks", T}, {"sp", sp}, {"per_layer", per_layer},
                        {"analytic_per_layer", analytic}, {"activation_bytes", act}, {"step_s", big.step_s},
                        {"param_bytes", big.param_bytes}, {"expected_param_bytes", big.expected_param_bytes},
                        {"dense_param_bytes", big.dense_param_bytes}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

// ---- 3D step time ------------------------------------------------------------------------------

int bench_step(int argc, char** argv) {
  auto world = distributed::world();
  const std::string layout = arg(argc, argv, "--layout", "1,1,1");
  const int steps = std::stoi(arg(argc, argv, "--steps", "5"));
  distributed::Layout l;
  std::sscanf(layout.c_str(), "%d,%d,%d", &l.data, &l.tensor, &l.pipeline);
  manual_seed(1);
  distributed::Parallel3D job(std::make_shared<nn::zoo::GPT>(bench_gpt(4)), world,
                              {.layout = l, .pipeline = {.schedule = "1f1b", .micro_batches = std::max(2, l.pipeline)}});
  auto opt = optim::make_optimizer("adamw", {job.param_group()}, {{"lr", 1e-3}});
  Generator gen(2);
  Tensor x = ops::randint(0, 256, {8, 128}, DType::I64, &gen), y = ops::randint(0, 256, {8, 128}, DType::I64, &gen);
  auto one = [&] {
    opt->zero_grad();
    job.step(x, y);
    opt->step();
  };
  one();
  std::vector<double> times, comm;
  for (int i = 0; i < steps; ++i) {
    world->barrier()->wait();
    double c0 = 0;
    for (auto& s : distributed::collective_stats()) c0 += s.seconds;
    const auto t0 = Clock::now();
    one();
    const double mine = seconds_since(t0);
    double c1 = 0;
    for (auto& s : distributed::collective_stats()) c1 += s.seconds;
    times.push_back(max_over(world, mine));
    comm.push_back(max_over(world, c1 - c0));
  }
  if (world->rank() == 0) {
    nlohmann::json j = {{"bench", "step"}, {"layout", {l.data, l.tensor, l.pipeline}}, {"ranks", world->size()},
                        {"step_s", median(times)}, {"comm_s", median(comm)}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

// ---- bigmodel ----------------------------------------------------------------------------

int bench_bigmodel(int argc, char** argv) {
  auto world = distributed::world();
  distributed::Layout l;
  std::sscanf(arg(argc, argv, "--layout", "1,1,1").c_str(), "%d,%d,%d", &l.data, &l.tensor, &l.pipeline);
  const int steps = std::stoi(arg(argc, argv, "--steps", "20"));
  const int64_t limit = std::stoll(arg(argc, argv, "--limit-mb", "0")) << 20;
  nn::zoo::GPTConfig c;
  c.vocab_size = 4096, c.block_size = 64, c.n_layer = 8, c.n_head = 8, c.n_embd = 384;
  if (limit > 0) set_memory_limit(limit);
  reset_peak_memory();
  std::vector<double> losses;
  std::string error;
  int64_t params = 0;
  try {
    manual_seed(7);
    std::shared_ptr<nn::zoo::GPT> gpt;
    if (world->size() > 1) {
      DeviceScope on_meta(Device::meta());
      gpt = std::make_shared<nn::zoo::GPT>(c);
      manual_seed(7);  // as before building it: the parts are drawn from here
    } else {
      gpt = std::make_shared<nn::zoo::GPT>(c);
    }
    for (auto& [n, p] : gpt->named_parameters()) params += p.numel();
    std::unique_ptr<distributed::Parallel3D> job;
    optim::OptimizerPtr opt;
    if (world->size() > 1) {
      job = std::make_unique<distributed::Parallel3D>(
          gpt, world, distributed::Parallel3DOptions{.layout = l, .pipeline = {.schedule = "1f1b", .micro_batches = 2 * l.pipeline}});
      opt = optim::make_optimizer("adamw", {job->param_group()}, {{"lr", 1e-3}});
    } else {
      optim::ParamGroup g;
      for (auto& [n, p] : gpt->named_parameters()) g.params.push_back(p), g.names.push_back(n);
      opt = optim::make_optimizer("adamw", {g}, {{"lr", 1e-3}});
    }
    for (int step = 0; step < steps; ++step) {
      Generator gen(100 + step);
      Tensor x = ops::randint(0, c.vocab_size, {8, c.block_size}, DType::I64, &gen);
      Tensor y = ops::randint(0, c.vocab_size, {8, c.block_size}, DType::I64, &gen);
      opt->zero_grad();
      Tensor loss;
      if (job) {
        loss = job->step(x, y);
      } else {
        loss = ops::cross_entropy((*gpt)(x).reshape({-1, c.vocab_size}), y.reshape({-1}));
        loss.backward();
      }
      opt->step();
      losses.push_back(loss.item<double>());
    }
  } catch (const OutOfMemoryError& e) {
    error = e.what();
  }
  // Each rank's peak, gathered on rank 0.
  Tensor peaks = zeros({world->size()}, DType::F64);
  {
    Tensor mine = tensor({static_cast<double>(memory_stats().peak_bytes)}, {1}, DType::F64);
    world->allgather(peaks, mine)->wait();
  }
  if (world->rank() == 0) {
    nlohmann::json j = {{"bench", "bigmodel"}, {"layout", {l.data, l.tensor, l.pipeline}}, {"ranks", world->size()},
                        {"limit_bytes", limit}, {"parameters", params}, {"losses", losses},
                        {"peak_bytes", peaks.to_vector<double>()}, {"error", error}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

// Round trips of a small tensor between ranks 0 and 1 (send, then recv_now),
// the latency a pipeline's transfer adds to its critical path.
int bench_pingpong(int argc, char** argv) {
  auto world = distributed::world();
  const int iters = std::stoi(arg(argc, argv, "--iters", "200"));
  const int64_t n = std::stoll(arg(argc, argv, "--elements", "8"));
  Tensor a = ones({n}), b = empty({n});
  std::vector<double> rtt;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    if (world->rank() == 0) {
      auto w = world->send(a, 1, 7);
      world->recv_now(b, 1, 7);
      w->wait();
    } else if (world->rank() == 1) {
      world->recv_now(b, 0, 7);
      world->send(b, 0, 7)->wait();
    }
    rtt.push_back(seconds_since(t0));
  }
  if (world->rank() == 0) {
    nlohmann::json j = {{"bench", "pingpong"}, {"elements", n}, {"rtt_s", median(rtt)}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace

// ---- serving ------------------------------------------------------------------------------

// The engine's communicator, timed: seconds in its calls.
class TimedComm final : public llm::Communicator {
 public:
  explicit TimedComm(std::shared_ptr<llm::Communicator> c) : c_(std::move(c)) {}
  int rank() const override { return c_->rank(); }
  int size() const override { return c_->size(); }
  void all_reduce_sum(float* d, int64_t n) override {
    const auto t0 = Clock::now();
    c_->all_reduce_sum(d, n);
    seconds += seconds_since(t0);
    ++sums;
  }
  void broadcast(int64_t* d, int64_t n, int root) override {
    const auto t0 = Clock::now();
    c_->broadcast(d, n, root);
    seconds += seconds_since(t0);
  }
  double seconds = 0;
  int64_t sums = 0;

 private:
  std::shared_ptr<llm::Communicator> c_;
};

int bench_serving(int argc, char** argv) {
  auto world = distributed::world();
  const int64_t batch = std::stoll(arg(argc, argv, "--batch", "1")), steps = std::stoll(arg(argc, argv, "--steps", "64"));
  const std::string type = arg(argc, argv, "--type", "q8_0"), path = arg(argc, argv, "--model", "");
  const std::optional<llm::GgmlType> gt = llm::ggml_type_from_name(type);
  TS_CHECK(gt, "--type ", type, " is not a GGUF type");
  std::shared_ptr<llm::Model> whole;
  std::string what = path;
  if (!path.empty()) {
    whole = llm::Model::load(path);
  } else {
    nn::zoo::LlamaConfig c;  // examples/configs/fortunes_llama_15m.yaml
    c.vocab_size = 8000, c.dim = 384, c.n_layers = 7, c.n_heads = 6, c.n_kv_heads = 6, c.hidden_dim = 1024;
    c.max_seq_len = 256, c.tie_embeddings = true;
    manual_seed(15);
    nn::zoo::Llama m(c);
    whole = llm::model_from_llama(m, *gt);
    what = "the 15M fortunes shape, random weights";
  }
  const int T = world->size();
  std::shared_ptr<llm::Model> model = T == 1 ? whole : llm::Model::from_gguf(whole->file(), {world->rank(), T});
  whole.reset();
  auto comm = T == 1 ? nullptr : std::make_shared<TimedComm>(distributed::llm_communicator(world));
  llm::Engine engine(model, {.max_batch_tokens = std::max<int64_t>(64, batch), .max_sequences = batch,
                             .context = 256, .group = comm});
  if (world->rank() != 0) {
    engine.follow();
    return 0;
  }
  const int64_t vocab = model->spec().vocab;
  std::vector<int64_t> seqs;
  std::vector<std::vector<int32_t>> toks;
  for (int64_t b = 0; b < batch; ++b) {
    seqs.push_back(engine.add_sequence());
    std::vector<int32_t> p(64);
    for (int64_t i = 0; i < 64; ++i) p[i] = static_cast<int32_t>((b * 131 + i * 17) % vocab);
    const llm::Chunk c{seqs.back(), p, 1};
    engine.step({&c, 1});
    toks.push_back({p.back()});
  }
  std::vector<double> times;
  std::vector<llm::Chunk> chunks(static_cast<size_t>(batch));
  double comm_s = 0;
  for (int64_t s = 0; s < std::min<int64_t>(steps, 256 - 65); ++s) {
    for (int64_t b = 0; b < batch; ++b) chunks[b] = {seqs[b], toks[b], 1};
    const double before = comm ? comm->seconds : 0;
    const auto t0 = Clock::now();
    std::span<const float> logits = engine.step(chunks);
    times.push_back(seconds_since(t0));
    if (comm) comm_s += comm->seconds - before;
    for (int64_t b = 0; b < batch; ++b) {  // greedy
      const float* row = logits.data() + b * vocab;
      toks[b] = {static_cast<int32_t>(std::max_element(row, row + vocab) - row)};
    }
  }
  nlohmann::json j = {{"bench", "serving"}, {"ranks", T}, {"batch", batch}, {"type", type}, {"model", what},
                      {"threads", get_num_threads()}, {"steps", times.size()}, {"step_ms", 1e3 * median(times)},
                      {"comm_fraction", comm_s / std::max(1e-12, std::accumulate(times.begin(), times.end(), 0.0))},
                      {"sums_per_step", comm ? static_cast<double>(comm->sums) / static_cast<double>(times.size() + batch) : 0},
                      {"weight_bytes", model->bytes_per_token_read()}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "bubble") return bench_bubble(argc, argv);
    if (mode == "activations") return bench_activations(argc, argv);
    if (mode == "tensor") return bench_tensor(argc, argv);
    if (mode == "step") return bench_step(argc, argv);
    if (mode == "pingpong") return bench_pingpong(argc, argv);
    if (mode == "serving") return bench_serving(argc, argv);
    if (mode == "bigmodel") return bench_bigmodel(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera_model_parallel_bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: tessera_model_parallel_bench bubble|activations|tensor|step|pingpong|serving|bigmodel [options] (see the file's comment)\n");
  return 2;
}
