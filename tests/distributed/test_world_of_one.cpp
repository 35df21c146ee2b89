// Without a launcher the world is one process and every collective is a local
// no-op (gathers and scatters copy), so code written for N ranks runs alone.
#include "tessera/distributed/process_group.h"
#include "test_util.h"

namespace tessera {
namespace {

using distributed::ReduceOp;

TEST(WorldOfOne, CollectivesAreLocal) {
  auto w = distributed::world();
  ASSERT_EQ(w->size(), 1);
  EXPECT_EQ(w->rank(), 0);
  EXPECT_FALSE(distributed::is_distributed());
  EXPECT_EQ(distributed::local_rank(), 0);
  Tensor t = tensor({1.0, 2.0});
  w->allreduce(t, ReduceOp::kAvg)->wait();
  w->broadcast(t, 0)->wait();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2}));
  Tensor out = zeros({2});
  auto work = w->allgather(out, t);
  EXPECT_TRUE(work->is_completed());
  work->wait();
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2}));
  Tensor strided = zeros({2, 2}).transpose(0, 1).narrow(0, 0, 1);  // not contiguous
  w->reduce_scatter(strided, tensor({5.0, 6.0}).reshape({1, 2}))->wait();
  EXPECT_EQ(strided.contiguous().to_vector<float>(), (std::vector<float>{5, 6}));
  EXPECT_NE(testing::error_of([&] { w->send(t, 0); }).find("another rank"), std::string::npos);
  auto sub = w->new_group({0});
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(w->split(-1), nullptr);
  EXPECT_EQ(w->last_issued().op, std::string("reduce_scatter"));
  EXPECT_EQ(w->last_issued().describe(), "reduce_scatter f32[2] #4");
}

}  // namespace
}  // namespace tessera
