// The collectives against a serial computation: every op x dtype x size, on
// the world and on sub-groups, with strided tensors and asynchronous handles.
// Each rank's data is small multiples of 1/8 (integers for integer dtypes), so
// every sum over 4 ranks is exact in every dtype, bf16 included, and results
// are compared for equality.
#include <gtest/gtest.h>

#include <thread>

#include "tessera/distributed/process_group.h"
#include "tessera/ops/ops.h"
#include "test_util.h"

namespace tessera {
namespace {

using distributed::ProcessGroupPtr;
using distributed::ReduceOp;

double value(int world_rank, int64_t i, DType dt) {
  const int64_t k = ((world_rank + 1) * 37 + i * 13) % 101 - 50;
  return is_floating(dt) ? k / 8.0 : static_cast<double>(k);
}

Tensor rank_tensor(int world_rank, int64_t n, DType dt, int64_t first = 0) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = value(world_rank, first + i, dt);
  return from_buffer(v.data(), {n}, DType::F64).to(dt).contiguous();
}

// The reduction over `ranks` (world ranks) of each one's elements [first, first + n).
Tensor serial(const std::vector<int>& ranks, int64_t n, DType dt, ReduceOp op, int64_t first = 0) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) {
    double acc = value(ranks[0], first + i, dt);
    for (size_t j = 1; j < ranks.size(); ++j) {
      const double x = value(ranks[j], first + i, dt);
      acc = op == ReduceOp::kMax ? std::max(acc, x) : op == ReduceOp::kMin ? std::min(acc, x) : acc + x;
    }
    v[i] = op == ReduceOp::kAvg ? acc / ranks.size() : acc;
  }
  return from_buffer(v.data(), {n}, DType::F64).to(dt);
}

bool equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         ops::all(ops::eq(a.to(DType::F64), b.to(DType::F64))).item<bool>();
}

const std::vector<DType> kDtypes = {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I64};

std::vector<int64_t> sizes(DType dt) {
  return {0, 1, 7, (int64_t{4} << 20) / static_cast<int64_t>(dtype_size(dt))};  // 4 MB
}

// The world, its even/odd halves, and the world in reverse order.
std::vector<ProcessGroupPtr> groups() {
  auto w = distributed::world();
  std::vector<ProcessGroupPtr> out{w};
  if (auto half = w->split(w->rank() % 2, w->rank())) out.push_back(half);
  std::vector<int> reversed;
  for (int r = w->size() - 1; r >= 0; --r) reversed.push_back(r);
  if (auto rev = w->new_group(reversed)) out.push_back(rev);
  return out;
}

int me() { return distributed::world()->rank(); }

TEST(Collectives, WorldComesFromTheLauncher) {
  auto w = distributed::world();
  const char* np = std::getenv("OMPI_COMM_WORLD_SIZE");
  ASSERT_NE(np, nullptr);
  EXPECT_EQ(w->size(), std::atoi(np));
  EXPECT_EQ(w->rank(), std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  EXPECT_EQ(distributed::local_size(), w->size());  // one host
  EXPECT_EQ(distributed::local_rank(), w->rank());
  EXPECT_TRUE(distributed::is_distributed());
}

TEST(Collectives, SubgroupsNumberTheirRanks) {
  auto w = distributed::world();
  auto g = groups();
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[1]->size(), (w->size() + 1 - w->rank() % 2) / 2);
  EXPECT_EQ(g[1]->world_ranks()[g[1]->rank()], w->rank());
  EXPECT_EQ(g[2]->rank(), w->size() - 1 - w->rank());
  EXPECT_EQ(g[2]->world_ranks()[0], w->size() - 1);
  // A group of two: the others get none.
  auto pair = w->new_group({0, w->size() - 1});
  EXPECT_EQ(pair != nullptr, w->rank() == 0 || w->rank() == w->size() - 1);
  if (pair) {
    Tensor t = full({3}, static_cast<double>(w->rank()));
    pair->allreduce(t)->wait();
    EXPECT_TRUE(equal(t, full({3}, static_cast<double>(w->size() - 1))));
  }
  EXPECT_EQ(w->split(-1), nullptr);
}

TEST(Collectives, AllreduceEveryOpDtypeAndSize) {
  int checked = 0;
  for (auto& g : groups())
    for (DType dt : kDtypes)
      for (int64_t n : sizes(dt))
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
          if (op == ReduceOp::kAvg && !is_floating(dt)) continue;
          Tensor t = rank_tensor(me(), n, dt);
          g->allreduce(t, op)->wait();
          ASSERT_TRUE(equal(t, serial(g->world_ranks(), n, dt, op)))
              << g->name() << " " << dtype_name(dt) << "[" << n << "] " << distributed::reduce_op_name(op);
          ++checked;
        }
  EXPECT_GT(checked, 100);
}

TEST(Collectives, BroadcastAndReduceFromEveryRoot) {
  for (auto& g : groups())
    for (DType dt : kDtypes)
      for (int64_t n : sizes(dt))
        for (int root = 0; root < g->size(); ++root) {
          Tensor b = rank_tensor(me(), n, dt);
          g->broadcast(b, root)->wait();
          ASSERT_TRUE(equal(b, rank_tensor(g->world_ranks()[root], n, dt))) << g->name() << " root " << root;
          Tensor r = rank_tensor(me(), n, dt);
          g->reduce(r, root, ReduceOp::kSum)->wait();
          ASSERT_TRUE(equal(r, g->rank() == root ? serial(g->world_ranks(), n, dt, ReduceOp::kSum) : rank_tensor(me(), n, dt)))
              << g->name() << " reduce to root " << root << " " << dtype_name(dt) << "[" << n << "]";
        }
}

TEST(Collectives, AllgatherReduceScatterAllToAll) {
  for (auto& g : groups())
    for (DType dt : kDtypes)
      for (int64_t n : sizes(dt)) {
        const int64_t blk = n / g->size() + 1;  // per-rank block; odd sizes included
        const int s = g->size();
        // allgather: block j is member j's data.
        Tensor out = zeros({s * blk}, dt);
        g->allgather(out, rank_tensor(me(), blk, dt))->wait();
        for (int j = 0; j < s; ++j)
          ASSERT_TRUE(equal(out.narrow(0, j * blk, blk), rank_tensor(g->world_ranks()[j], blk, dt))) << g->name();
        // reduce_scatter: this rank gets the sum of block rank().
        Tensor mine = zeros({blk}, dt);
        g->reduce_scatter(mine, rank_tensor(me(), s * blk, dt), ReduceOp::kSum)->wait();
        ASSERT_TRUE(equal(mine, serial(g->world_ranks(), blk, dt, ReduceOp::kSum, g->rank() * blk)))
            << g->name() << " reduce_scatter " << dtype_name(dt) << "[" << blk << "]";
        // all_to_all: block i of the output is block rank() of member i's input.
        Tensor recv = zeros({s * blk}, dt);
        g->all_to_all(recv, rank_tensor(me(), s * blk, dt))->wait();
        for (int i = 0; i < s; ++i)
          ASSERT_TRUE(equal(recv.narrow(0, i * blk, blk), rank_tensor(g->world_ranks()[i], blk, dt, g->rank() * blk)))
              << g->name() << " all_to_all from " << i;
      }
}

TEST(Collectives, StridedTensorsAreStagedAndWrittenBack) {
  auto w = distributed::world();
  Tensor base = rank_tensor(me(), 6 * 5, DType::F32).reshape({6, 5});
  Tensor t = base.transpose(0, 1);  // not contiguous: results must land in `base`
  ASSERT_FALSE(t.is_contiguous());
  Tensor expect = serial(w->world_ranks(), 30, DType::F32, ReduceOp::kSum).reshape({6, 5});
  w->allreduce(t)->wait();
  EXPECT_TRUE(equal(base.reshape({30}), expect.reshape({30})));
  // Gather row 0 of every rank's t (now equal) into a strided [size, 6] output.
  Tensor out = zeros({6, w->size()}).transpose(0, 1);
  ASSERT_FALSE(out.is_contiguous());
  w->allgather(out, t.narrow(0, 0, 1))->wait();
  for (int r = 0; r < w->size(); ++r)
    EXPECT_TRUE(equal(out.narrow(0, r, 1).reshape({6}), expect.transpose(0, 1).narrow(0, 0, 1).reshape({6}))) << r;
}

TEST(Collectives, AsynchronousHandlesCompleteInIssueOrder) {
  auto w = distributed::world();
  std::vector<Tensor> ts;
  std::vector<distributed::WorkPtr> works;
  for (int i = 0; i < 8; ++i) {
    ts.push_back(full({1000 + i}, static_cast<double>(me() + i)));
    works.push_back(w->allreduce(ts.back(), i % 2 ? ReduceOp::kMax : ReduceOp::kSum));
  }
  for (int i = 7; i >= 0; --i) works[i]->wait();  // any order of waiting
  for (int i = 0; i < 8; ++i) {
    const int s = w->size();
    const double expect = i % 2 ? s - 1 + i : s * (s - 1) / 2.0 + s * i;
    EXPECT_TRUE(works[i]->is_completed());
    EXPECT_EQ(works[i]->error(), "");
    EXPECT_TRUE(equal(ts[i], full({1000 + i}, expect))) << i;
  }
  EXPECT_EQ(w->last_issued().op, std::string("allreduce"));
  w->barrier()->wait();
}

TEST(Collectives, SendAndReceiveAroundARing) {
  auto w = distributed::world();
  const int s = w->size(), next = (me() + 1) % s, prev = (me() + s - 1) % s;
  for (int64_t n : {int64_t{1}, int64_t{1} << 20}) {  // small and large (rendezvous) messages
    Tensor out = rank_tensor(me(), n, DType::F32);
    Tensor in = zeros({n});
    auto a = w->send(out, next, 3);  // every rank sends first: must not deadlock
    auto b = w->recv(in, prev, 3);
    a->wait();
    b->wait();
    EXPECT_TRUE(equal(in, rank_tensor(prev, n, DType::F32))) << n;
  }
  // A receive of the wrong size names both sizes.
  if (s >= 2 && me() < 2) {
    if (me() == 0) w->send(zeros({5}), 1, 9)->wait();
    else {
      std::string err = testing::error_of([&] { w->recv(zeros({4}), 0, 9)->wait(); });
      EXPECT_NE(err.find("expected 4"), std::string::npos) << err;
    }
  }
  w->barrier()->wait();
}

TEST(Collectives, BadArgumentsAreNamedBeforeAnyCommunication) {
  auto w = distributed::world();
  auto err = [](const std::function<void()>& f) { return testing::error_of(f); };
  EXPECT_NE(err([&] { w->allgather(zeros({3}), zeros({2})); }).find("must hold size x input"), std::string::npos);
  EXPECT_NE(err([&] { w->reduce_scatter(zeros({3}), zeros({3 * w->size() + 1})); }).find("must hold size x output"),
            std::string::npos);
  EXPECT_NE(err([&] { w->allreduce(zeros({3}, DType::I64), ReduceOp::kAvg); }).find("avg needs a floating"),
            std::string::npos);
  EXPECT_NE(err([&] { w->broadcast(zeros({3}), w->size()); }).find("is not a rank of this group"), std::string::npos);
  EXPECT_NE(err([&] { w->send(zeros({3}), me()); }).find("another rank"), std::string::npos);
  EXPECT_NE(err([&] { w->allreduce(zeros({3}, DType::Bool)); }).find("bool"), std::string::npos);
  EXPECT_NE(err([&] { w->new_group({0, 0}); }).find("listed twice"), std::string::npos);
  Tensor meta = zeros({3}, TensorOptions(DType::F32, Device::meta()));
  EXPECT_NE(err([&] { w->allreduce(meta); }).find("on meta"), std::string::npos);
  w->barrier()->wait();
}

// ---- cases that end the job on purpose (tests/distributed_mpi/faults.sh) -----------------

TEST(DistDebug, MismatchedCollectivesAreNamedOnEveryRank) {
  auto w = distributed::world();
  std::string err = testing::error_of([&] {
    if (me() == 0) w->allreduce(zeros({1024}))->wait();
    else w->broadcast(zeros({1}, DType::I64), 0)->wait();
  });
  std::fprintf(stderr, "[rank %d] %s\n", me(), err.c_str());
  EXPECT_NE(err.find("rank 0 runs allreduce f32[1024] #1 sum"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 1 runs broadcast i64[1] #1 (root 0)"), std::string::npos) << err;
}

TEST(DistFault, HungRankIsNamedAndTheJobEnds) {
  auto w = distributed::world();
  distributed::set_step(10);
  if (me() == 1) std::this_thread::sleep_for(std::chrono::seconds(600));  // never arrives
  w->allreduce(zeros({1024}))->wait();
}

TEST(DistFault, ErrorOnOneRankEndsTheJob) {
  if (me() == 1) distributed::abort_job(7);
  distributed::world()->barrier()->wait();
}

}  // namespace
}  // namespace tessera
