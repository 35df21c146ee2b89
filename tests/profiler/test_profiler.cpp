// The profiler, the memory tools (limit, peak) and anomaly mode.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/autograd/anomaly.h"
#include "tessera/core/allocator.h"
#include "tessera/nn/loss.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"
#include "tessera/profiler/profiler.h"
#include "test_util.h"

using namespace tessera;
using namespace tessera::profiler;
using namespace tessera::ops;

namespace {

std::shared_ptr<nn::zoo::MLP> small_mlp() {
  manual_seed(0);
  nn::zoo::MLPConfig c;
  c.in_features = 16;
  c.hidden = {32};
  c.num_classes = 4;
  return std::make_shared<nn::zoo::MLP>(c);
}

const OpStat* find(const std::vector<OpStat>& rows, const std::string& name, Phase phase) {
  for (const OpStat& r : rows)
    if (r.name == name && r.phase == phase) return &r;
  return nullptr;
}

}  // namespace

TEST(Profiler, OpTableCountsCallsFlopsAndPhases) {
  auto model = small_mlp();
  Tensor x = randn({8, 16});
  Tensor y = randint(0, 4, {8});
  Profiler prof;
  Tensor loss = ops::cross_entropy((*model)(x), y);
  loss.backward();
  prof.stop();
  auto rows = prof.op_stats();
  const OpStat* lin = find(rows, "linear", Phase::kForward);
  ASSERT_NE(lin, nullptr) << prof.table();
  EXPECT_EQ(lin->calls, 2);
  // 2 flops per multiply-add: 8x16x32 and 8x32x4.
  EXPECT_EQ(lin->flops, 2 * (8 * 16 * 32 + 8 * 32 * 4));
  EXPECT_GT(lin->bytes, 0);
  const OpStat* lin_bw = find(rows, "linear_backward", Phase::kBackward);
  ASSERT_NE(lin_bw, nullptr) << prof.table();
  EXPECT_EQ(lin_bw->calls, 2);
  // The VJP's products run as ops inside the backward node: weight gradients
  // of both layers and the hidden activation's gradient (the input needs none).
  int64_t bw_flops = 0;
  for (const OpStat& r : rows)
    if (r.phase == Phase::kBackward) bw_flops += r.flops;
  EXPECT_EQ(bw_flops, 2 * (8 * 16 * 32 + 2 * 8 * 32 * 4)) << prof.table();
  EXPECT_NE(find(rows, "cross_entropy", Phase::kForward), nullptr);
  for (const OpStat& r : rows) {
    EXPECT_GE(r.total_ns, r.self_ns) << r.name;
    EXPECT_GT(r.calls, 0);
  }
  std::string table = prof.table();
  EXPECT_NE(table.find("linear"), std::string::npos);
  EXPECT_NE(table.find("self ms"), std::string::npos);
}

TEST(Profiler, GroupsByModulePathInForwardAndBackward) {
  auto model = small_mlp();
  Tensor x = randn({4, 16});
  Profiler prof;
  ops::sum((*model)(x)).backward();
  prof.stop();
  auto rows = prof.op_stats(GroupBy::kModule);
  // MLP.net is a Sequential: its layers are net.0 (Linear), net.1 (ReLU), net.2 (Linear).
  const OpStat* l0 = find(rows, "net.0", Phase::kForward);
  const OpStat* l2b = find(rows, "net.2", Phase::kBackward);
  ASSERT_NE(l0, nullptr) << prof.table(GroupBy::kModule);
  ASSERT_NE(l2b, nullptr) << prof.table(GroupBy::kModule);
  EXPECT_EQ(l0->flops, 2 * 4 * 16 * 32);
  EXPECT_NE(find(rows, "net.1", Phase::kForward), nullptr);
}

TEST(Profiler, OverloadsCountOnce) {
  Tensor a = randn({3});
  Profiler prof;
  ops::add(a, 1.0);  // add(Tensor, Scalar) calls add(Tensor, Tensor)
  prof.stop();
  auto rows = prof.op_stats();
  const OpStat* add = find(rows, "add", Phase::kForward);
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->calls, 1);
}

TEST(Profiler, MemoryPeakEqualsAllocatorPeak) {
  auto model = small_mlp();
  Tensor x = randn({64, 16});
  reset_peak_memory();
  Profiler prof;
  for (int i = 0; i < 2; ++i) {
    model->zero_grad();
    ops::sum((*model)(x)).backward();
  }
  prof.stop();
  MemoryReport r = prof.memory_report();
  EXPECT_EQ(r.peak_bytes, memory_stats().peak_bytes);
  EXPECT_GT(r.allocations, 0);
  int64_t sum = 0;
  bool activation = false;
  for (const PeakBlock& b : r.at_peak) {
    sum += b.bytes;
    activation = activation || b.kind == MemoryKind::kActivation;
  }
  // Every live byte at the peak is attributed to some block.
  EXPECT_EQ(sum, r.peak_bytes);
  EXPECT_NE(prof.memory_table().find("by module"), std::string::npos);
  (void)activation;
}

TEST(Profiler, ClassifiesActivationsGradientsAndParameters) {
  auto model = small_mlp();
  Tensor x = randn({256, 16});
  Profiler prof;
  for (auto& [name, p] : model->named_parameters()) prof.label(p, MemoryKind::kParameter, name);
  Tensor out = (*model)(x);  // activations alive from here...
  ops::sum(out).backward();
  prof.stop();
  MemoryReport r = prof.memory_report();
  std::map<MemoryKind, int64_t> by_kind;
  for (const PeakBlock& b : r.at_peak) by_kind[b.kind] += b.bytes;
  EXPECT_GT(by_kind[MemoryKind::kParameter], 0) << prof.memory_table();
  EXPECT_GE(by_kind[MemoryKind::kActivation], 256 * 32 * 4) << prof.memory_table();
}

TEST(Profiler, ChromeTraceHasSlicesAndAMemoryTrack) {
  auto model = small_mlp();
  Tensor x = randn({4, 16});
  Profiler prof(ProfilerOptions{.record_memory = true, .record_shapes = true});
  ops::sum((*model)(x)).backward();
  prof.stop();
  auto path = std::filesystem::path(tessera::testing::scratch_dir("trace_test.json"));
  prof.export_chrome_trace(path.string());
  nlohmann::json doc = nlohmann::json::parse(std::ifstream(path));
  int slices = 0, counters = 0, modules = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") {
      slices++;
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      if (e["cat"] == "module") modules++;
    }
    if (e["ph"] == "C") counters++;
  }
  EXPECT_GT(slices, 10);
  EXPECT_GT(counters, 5);
  EXPECT_GE(modules, 4);  // net, net.0, net.1, net.2
  std::filesystem::remove(path);
  EXPECT_THROW(prof.export_chrome_trace("/nonexistent-dir/t.json"), Error);
}

TEST(Profiler, OneAtATime) {
  Profiler a;
  EXPECT_THROW({ Profiler b; }, Error);
  a.stop();
  Profiler c;  // fine once a stopped
  EXPECT_TRUE(c.recording());
}

TEST(MemoryLimit, RaisesWithWhatWasAskedAndWhereMemoryStands) {
  int64_t in_use = memory_allocated();
  set_memory_limit(in_use + (4 << 20));
  Tensor small = empty({1024});  // fits
  try {
    Tensor big = empty({16 << 20});  // 64 MiB
    set_memory_limit(0);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    set_memory_limit(0);
    std::string m = e.what();
    EXPECT_NE(m.find("tried to allocate 64.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("in use"), std::string::npos) << m;
    EXPECT_NE(m.find("peak"), std::string::npos) << m;
    EXPECT_NE(m.find("memory limit"), std::string::npos) << m;
  }
  EXPECT_EQ(memory_limit(), 0);
  Tensor big = empty({16 << 20});  // no limit: fine
  // A limit below what is in use is refused.
  EXPECT_THROW(set_memory_limit(1024), Error);
  EXPECT_THROW(set_memory_limit(-1), Error);
  EXPECT_EQ(memory_limit(), 0);
}

TEST(MemoryStats, PeakAndReset) {
  reset_peak_memory();
  int64_t base = max_memory_allocated();
  EXPECT_EQ(base, memory_allocated());
  { Tensor t = empty({1 << 20}); }
  EXPECT_GE(max_memory_allocated(), base + (4 << 20));
  EXPECT_EQ(memory_allocated(), base);
  reset_peak_memory();
  EXPECT_EQ(max_memory_allocated(), base);
  empty_cache();
  EXPECT_EQ(memory_stats().reserved_bytes, memory_allocated());
}

namespace {
// A module whose forward makes a NaN: sqrt of negative values.
struct BadSqrt : nn::Module {
  BadSqrt() : Module("BadSqrt") {}
  Tensor forward(const Tensor& x) override { return ops::sqrt(ops::sub(x, 100.0)); }
};
}  // namespace

TEST(Anomaly, NamesTheForwardOpAndModule) {
  manual_seed(1);
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Linear>(4, 4));
  seq->push_back(std::make_shared<BadSqrt>());
  Tensor x = randn({2, 4});
  autograd::DetectAnomalyGuard anomaly;
  EXPECT_TRUE(autograd::anomaly_mode_enabled());
  try {
    (*seq)(x);
    FAIL() << "expected an anomaly error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("the forward of 'sqrt'"), std::string::npos) << m;
    EXPECT_NE(m.find("module '1'"), std::string::npos) << m;
    EXPECT_NE(m.find("NaN"), std::string::npos) << m;
    EXPECT_NE(m.find("input 0: shape [2, 4]"), std::string::npos) << m;
  }
}

TEST(Anomaly, NamesTheBackwardOp) {
  Tensor x = zeros({3}).requires_grad_();
  Tensor y = ops::sum(ops::sqrt(x));  // finite forward, infinite gradient at 0
  autograd::DetectAnomalyGuard anomaly;
  try {
    y.backward();
    FAIL() << "expected an anomaly error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("the backward of 'sqrt'"), std::string::npos) << m;
    EXPECT_NE(m.find("Inf"), std::string::npos) << m;
  }
}

TEST(Anomaly, ReportsNaNsFromOutsideTheGraph) {
  Tensor w = ones({2}).requires_grad_();
  Tensor data = full({2}, NAN);
  autograd::DetectAnomalyGuard anomaly;
  try {
    ops::mul(w, data);
    FAIL() << "expected an anomaly error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("already in input 1 of 'mul'"), std::string::npos) << m;
  }
}

TEST(Anomaly, OffByDefaultAndQuietOnFiniteValues) {
  EXPECT_FALSE(autograd::anomaly_mode_enabled());
  Tensor x = zeros({3}).requires_grad_();
  ops::sum(ops::sqrt(x)).backward();  // no error without the guard
  autograd::DetectAnomalyGuard anomaly;
  Tensor w = randn({3}).requires_grad_();
  EXPECT_NO_THROW(ops::sum(ops::mul(w, w)).backward());
}

// Note [Listener lifetime]: a profiler may stop (and be destroyed) while other
// threads allocate; under ASan this would catch a callback into a dead listener.
TEST(Profiler, StopsSafelyWhileOtherThreadsAllocate) {
  std::atomic<bool> done{false};
  std::thread worker([&] {
    while (!done.load()) Tensor t = empty({256});
  });
  for (int i = 0; i < 50; ++i) {
    Profiler prof;
    Tensor t = empty({1024});
  }
  done.store(true);
  worker.join();
}

// Module paths are full state_dict-style paths even when blocks are called
// directly by their model or recomputed by a checkpoint in backward.
TEST(Profiler, ModulePathsThroughCheckpointedBlocks) {
  nn::zoo::GPTConfig c;
  c.vocab_size = 32;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.gradient_checkpointing = true;
  auto model = std::make_shared<nn::zoo::GPT>(c);
  Tensor ids = randint(0, 32, {2, 8});
  Profiler prof;
  ops::sum((*model)(ids)).backward();
  prof.stop();
  auto rows = prof.op_stats(GroupBy::kModule);
  EXPECT_NE(find(rows, "transformer.h.1.mlp.c_fc", Phase::kForward), nullptr) << prof.table(GroupBy::kModule);
  EXPECT_NE(find(rows, "transformer.h.1.mlp.c_fc", Phase::kBackward), nullptr) << prof.table(GroupBy::kModule);
  for (const OpStat& r : rows) EXPECT_NE(r.name.rfind("mlp", 0), 0u) << "a path without its parents: " << r.name;
}
