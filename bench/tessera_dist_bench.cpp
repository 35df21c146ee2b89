// Distributed benchmarks, run as N ranks by bench/dist_compare.py (mpirun):
//
//   tessera_dist_bench allreduce --sizes 4096,1048576 --iters 20
//       ProcessGroup::allreduce against a raw MPI_Allreduce on a duplicate of
//       MPI_COMM_WORLD, in one binary, alternating, per size. Rank 0 prints one
//       JSON line per size: median seconds of each and bus bandwidth
//       (2 (n-1)/n bytes / time, the bytes each link carries in a ring).
//   tessera_dist_bench gpt --batch 4 --layers 2 --steps 10 --warmup 2 --overlap 1
//       Training steps of the tiny GPT (bench/train_torch.py's) under DDP at the
//       per-rank batch, or alone when started as one process. Rank 0 prints the
//       median step time and the time backward's end waited for communication.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/distributed/ddp.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/optimizer.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

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
    std::vector<double> ours, theirs;
    for (int i = 0; i < iters + 2; ++i) {  // two warm-up rounds
      world->barrier()->wait();
      auto t0 = Clock::now();
      world->allreduce(t)->wait();
      const double a = seconds_since(t0);
      MPI_Barrier(raw);
      t0 = Clock::now();
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, raw);
      const double b = seconds_since(t0);
      if (i >= 2) ours.push_back(a), theirs.push_back(b);
    }
    // The slowest rank's time is the collective's time.
    double med[2] = {median(ours), median(theirs)}, slowest[2];
    MPI_Allreduce(med, slowest, 2, MPI_DOUBLE, MPI_MAX, raw);
    if (world->rank() == 0) {
      const double link = 2.0 * (n - 1) / n * static_cast<double>(bytes);
      nlohmann::json j = {{"bench", "allreduce"}, {"ranks", n},           {"bytes", bytes},
                          {"tessera_s", slowest[0]}, {"mpi_s", slowest[1]}, {"tessera_busbw_gbs", link / slowest[0] / 1e9},
                          {"mpi_busbw_gbs", link / slowest[1] / 1e9}, {"iters", iters}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  }
  MPI_Comm_free(&raw);
  return 0;
}

int bench_gpt(int argc, char** argv) {
  auto world = distributed::world();
  const int64_t batch = std::stoll(arg(argc, argv, "--batch", "4"));
  const int layers = std::stoi(arg(argc, argv, "--layers", "2"));
  const int steps = std::stoi(arg(argc, argv, "--steps", "10"));
  const int warmup = std::stoi(arg(argc, argv, "--warmup", "2"));
  const bool overlap = arg(argc, argv, "--overlap", "1") == "1";
  manual_seed(0);
  nn::zoo::GPTConfig c;  // vocab 256, block 256, 6 heads, 384 wide, as bench/train_torch.py's
  c.n_layer = layers;
  auto model = std::make_shared<nn::zoo::GPT>(c);
  model->train();
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  if (world->size() > 1) {
    distributed::DdpOptions o;
    o.overlap = overlap;
    ddp = std::make_unique<distributed::DistributedDataParallel>(*model, world, o);
  }
  optim::AdamW opt(model->parameters(), {{"lr", 3e-4}, {"weight_decay", 0.1}});
  Generator g(1 + world->rank());
  Tensor tokens = ops::randint(0, 256, {batch, 257}, DType::I64, &g);
  Tensor x = tokens.slice(1, 0, 256).contiguous(), y = tokens.slice(1, 1, 257).contiguous();
  std::vector<double> times, waits;
  for (int s = 0; s < warmup + steps; ++s) {
    if (world->size() > 1) world->barrier()->wait();
    auto t0 = Clock::now();
    opt.zero_grad();
    Tensor out = (*model)(x);
    ops::cross_entropy(out.reshape({-1, out.size(-1)}), y.reshape({-1})).backward();
    opt.step();
    const double t = seconds_since(t0);
    if (s >= warmup) times.push_back(t), waits.push_back(ddp ? ddp->last_wait_seconds() : 0.0);
  }
  double med[2] = {median(times), median(waits)}, slowest[2] = {med[0], med[1]};
  if (world->size() > 1) {
    Tensor m = from_buffer(med, {2}, DType::F64);
    world->allreduce(m, distributed::ReduceOp::kMax)->wait();
    slowest[0] = m.data_ptr<double>()[0];
    slowest[1] = m.data_ptr<double>()[1];
  }
  if (world->rank() == 0) {
    nlohmann::json j = {{"bench", "gpt"}, {"ranks", world->size()}, {"batch_per_rank", batch}, {"layers", layers},
                        {"overlap", overlap}, {"step_s", slowest[0]}, {"exposed_comm_s", slowest[1]},
                        {"params", model->num_parameters()}, {"steps", steps}};
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera_dist_bench: %s\n", e.what());
    distributed::abort_job(1);
  }
  std::fprintf(stderr, "usage: tessera_dist_bench allreduce|gpt [options] (see the file's comment)\n");
  return 2;
}
