// Distributed benchmarks, run as N ranks by bench/dist_compare.py (mpirun):
//
//   tessera_dist_bench allreduce --sizes 4096,1048576 --iters 20
//       ProcessGroup::allreduce (asynchronous, then waited for) and its
//       blocking form (all_reduce_sum, which the communication ops call)
//       against a raw MPI_Allreduce on a duplicate of MPI_COMM_WORLD, in one
//       binary, alternating, per size. Rank 0 prints one
//       JSON line per size: median seconds of each and bus bandwidth
//       (2 (n-1)/n bytes / time, the bytes each link carries in a ring).
//   tessera_dist_bench gpt --batch 4 --layers 2 --steps 10 --warmup 2 --overlap 1 --zero 0
//       Training steps of the tiny GPT (bench/train_torch.py's) under DDP (or
//       ZeRO-1/2 with --zero) at the per-rank batch, or alone when started as
//       one process. Rank 0 prints the median step time and the time
//       backward's end waited for communication.
//   tessera_dist_bench memory --zero 0|1|2|3
//       Bytes per rank of the GPT's parameters, gradients and AdamW state, and
//       the peak with activations, against ZeRO's expected bytes.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "subcommand.h"

#include "tessera/core/allocator.h"
#include "tessera/distributed/ddp.h"
#include "tessera/distributed/zero.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/optimizer.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

using bench::arg;
using bench::median;
using bench::seconds_since;

int bench_allreduce(int argc, char** argv) {
  auto world = distributed::world();
  const int iters = std::stoi(arg(argc, argv, "--iters", "20"));
  std::vector<int64_t> sizes;
  std::stringstream ss(arg(argc, argv, "--sizes", "4096,65536,1048576,16777216,67108864"));
  for (std::string s; std::getline(ss, s, ',');) sizes.push_back(std::stoll(s));
  // Raw MPI on a communicator of its own, called from this thread while the
  // communication thread is idle (MPI runs with MPI_THREAD_MULTIPLE).
  MPI_Comm raw;
  world->barrier()->wait();
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  const int n = world->size();
  for (int64_t bytes : sizes) {
    const int64_t count = bytes / 4;
    Tensor t = full({count}, 1.0);
    std::vector<float> buf(static_cast<size_t>(count), 1.0f);
    std::vector<double> ours, blocking, theirs;
    // Each way runs a stretch of calls of its own, as a training loop would
    // (alternating them call by call would leave the communication thread
    // asleep or awake for the next one by turns), in two rounds; each call
    // starts from the same raw barrier, so that every rank enters it at once.
    for (int round = 0; round < 2; ++round) {
      for (int way = 0; way < 3; ++way) {
        std::vector<double>& times = way == 0 ? ours : way == 1 ? blocking : theirs;
        for (int i = 0; i < iters / 2 + 2; ++i) {  // two warm-up calls
          MPI_Barrier(raw);
          const auto t0 = Clock::now();
          if (way == 0)
            world->allreduce(t)->wait();  // issued, then waited for (DDP's and ZeRO's path)
          else if (way == 1)
            world->all_reduce_sum(t);  // blocking (the communication ops' path)
          else
            MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, raw);
          const double s = seconds_since(t0);
          if (i >= 2) times.push_back(s);
        }
      }
    }
    // The slowest rank's time is the collective's time.
    double med[3] = {median(ours), median(theirs), median(blocking)}, slowest[3];
    MPI_Allreduce(med, slowest, 3, MPI_DOUBLE, MPI_MAX, raw);
    if (world->rank() == 0) {
      const double link = 2.0 * (n - 1) / n * static_cast<double>(bytes);
      nlohmann::json j = {{"bench", "allreduce"},
                          {"ranks", n},
                          {"bytes", bytes},
                          {"tessera_s", slowest[0]},
                          {"blocking_s", slowest[2]},
                          {"mpi_s", slowest[1]},
                          {"tessera_busbw_gbs", link / slowest[0] / 1e9},
                          {"blocking_busbw_gbs", link / slowest[2] / 1e9},
                          {"mpi_busbw_gbs", link / slowest[1] / 1e9},
                          {"iters", iters}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  }
  MPI_Comm_free(&raw);
  return 0;
}

// The tiny GPT, its AdamW, and this rank's batch; under DDP or ZeRO (--zero
// 1|2|3) when started as several ranks.
struct GptRun {
  std::shared_ptr<nn::zoo::GPT> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  std::unique_ptr<distributed::ZeroRedundancy> zero;
  Tensor x, y;

  GptRun(int argc, char** argv) {
    auto world = distributed::world();
    const int64_t batch = std::stoll(arg(argc, argv, "--batch", "4"));
    const int layers = std::stoi(arg(argc, argv, "--layers", "2"));
    const int zero_stage = std::stoi(arg(argc, argv, "--zero", "0"));
    manual_seed(0);
    nn::zoo::GPTConfig c;  // vocab 256, block 256, 6 heads, 384 wide, as bench/train_torch.py's
    c.n_layer = layers;
    model = std::make_shared<nn::zoo::GPT>(c);
    model->train();
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::Options{{"lr", 3e-4}, {"weight_decay", 0.1}});
    if (world->size() > 1 && zero_stage > 0) {
      distributed::ZeroOptions o;
      o.stage = zero_stage;
      o.overlap = arg(argc, argv, "--overlap", "1") == "1";
      zero = std::make_unique<distributed::ZeroRedundancy>(*model, *opt, world, o);
    } else if (world->size() > 1) {
      distributed::DdpOptions o;
      o.overlap = arg(argc, argv, "--overlap", "1") == "1";
      ddp = std::make_unique<distributed::DistributedDataParallel>(*model, world, o);
    }
    Generator g(1 + world->rank());
    Tensor tokens = ops::randint(0, 256, {batch, 257}, DType::I64, &g);
    x = tokens.slice(1, 0, 256).contiguous();
    y = tokens.slice(1, 1, 257).contiguous();
  }
  void backward() {
    Tensor out = (*model)(x);
    ops::cross_entropy(out.reshape({-1, out.size(-1)}), y.reshape({-1})).backward();
  }
  void step() {
    if (zero) {
      zero->step();
    } else {
      opt->step();
      opt->zero_grad();
    }
  }
  double wait_seconds() const { return ddp ? ddp->last_wait_seconds() : zero ? zero->last_wait_seconds() : 0.0; }
};

// The largest of every rank's values, element-wise.
std::vector<double> max_over_ranks(std::vector<double> v) {
  auto world = distributed::world();
  if (world->size() > 1) {
    Tensor m = from_buffer(v.data(), {static_cast<int64_t>(v.size())}, DType::F64);
    world->allreduce(m, distributed::ReduceOp::kMax)->wait();
  }
  return v;
}

int bench_gpt(int argc, char** argv) {
  auto world = distributed::world();
  const int steps = std::stoi(arg(argc, argv, "--steps", "10"));
  const int warmup = std::stoi(arg(argc, argv, "--warmup", "2"));
  GptRun run(argc, argv);
  std::vector<double> times, waits;
  for (int s = 0; s < warmup + steps; ++s) {
    if (world->size() > 1) world->barrier()->wait();
    auto t0 = Clock::now();
    run.backward();
    run.step();
    const double t = seconds_since(t0);
    if (s >= warmup) times.push_back(t), waits.push_back(run.wait_seconds());
  }
  auto slowest = max_over_ranks({median(times), median(waits)});
  if (world->rank() == 0) {
    nlohmann::json j = {{"bench", "gpt"},
                        {"ranks", world->size()},
                        {"batch_per_rank", run.x.size(0)},
                        {"layers", arg(argc, argv, "--layers", "2")},
                        {"overlap", arg(argc, argv, "--overlap", "1") == "1"},
                        {"zero", std::stoi(arg(argc, argv, "--zero", "0"))},
                        {"step_s", slowest[0]},
                        {"exposed_comm_s", slowest[1]},
                        {"params", run.model->num_parameters()},
                        {"steps", steps}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

// Memory per rank: after backward, once the optimizer has state (step 3),
// the bytes of the parameters, gradients and optimizer state, against what
// ZeRO's paper expects for Ψ f32 parameters under Adam (DDP 16Ψ, ZeRO-1 4Ψ +
// 4Ψ + 8Ψ/N, ZeRO-2 4Ψ + 12Ψ/N, ZeRO-3 16Ψ/N); beside them the allocator's live bytes then
// (the same, in its size classes, without the batch) and the step's peak,
// which adds the activations.
// Bytes of the distinct storages behind `tensors` (views of one buffer count
// once), as requested: the allocator's size classes add up to 25% on top.
double storage_bytes(const TensorList& tensors) {
  std::set<const void*> seen;
  double bytes = 0;
  for (auto& t : tensors)
    if (t.defined() && !t.is_meta() && seen.insert(t.impl()->storage.get()).second)
      bytes += static_cast<double>(t.impl()->storage->nbytes());
  return bytes;
}

int bench_memory(int argc, char** argv) {
  auto world = distributed::world();
  GptRun run(argc, argv);
  const int n = world->size(), stage = run.zero ? run.zero->stage() : 0;
  double live = 0, params = 0, grads = 0, state = 0, peak = 0;
  for (int s = 0; s < 3; ++s) {
    reset_peak_memory();
    run.backward();
    if (s == 2) {
      // After backward of the third step: the optimizer has state, and stage 2
      // holds this step's gradient shards (from the end of backward to the step).
      live = static_cast<double>(memory_allocated() - static_cast<int64_t>(allocation_size(run.x.nbytes()) +
                                                                           allocation_size(run.y.nbytes())));
      TensorList ps = run.model->parameters(), gs, st;
      for (auto& p : ps) gs.push_back(p.grad());
      for (auto& g : run.opt->param_groups())  // ZeRO's shards (stage 3: the only copy)
        for (auto& p : g.params) ps.push_back(p), gs.push_back(p.grad());
      params = storage_bytes(ps);
      grads = storage_bytes(gs);
      for (auto& [k, t] : run.opt->state_dict().tensors) st.push_back(t);
      state = storage_bytes(st);
    }
    run.step();
    peak = static_cast<double>(max_memory_allocated());
  }
  const double psi = static_cast<double>(run.model->num_parameters());
  const double expected = stage == 0   ? 16 * psi
                          : stage == 1 ? 8 * psi + 8 * psi / n
                          : stage == 2 ? 4 * psi + 12 * psi / n
                                       : 16 * psi / n;
  auto worst = max_over_ranks({params + grads + state, peak, params, grads, state, live});
  if (world->rank() == 0) {
    nlohmann::json j = {{"bench", "memory"}, {"ranks", n}, {"zero", stage}, {"params", psi},
                        {"model_states_bytes", worst[0]}, {"expected_bytes", expected},
                        {"param_bytes", worst[2]}, {"grad_bytes", worst[3]}, {"optimizer_bytes", worst[4]},
                        {"live_bytes", worst[5]}, {"peak_bytes", worst[1]}, {"activations_bytes", worst[1] - worst[5]}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "allreduce") return bench_allreduce(argc, argv);
    if (mode == "gpt") return bench_gpt(argc, argv);
    if (mode == "memory") return bench_memory(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera_dist_bench: %s\n", e.what());
    distributed::abort_job(1);
  }
  std::fprintf(stderr, "usage: tessera_dist_bench allreduce|gpt|memory [options] (see the file's comment)\n");
  return 2;
}
