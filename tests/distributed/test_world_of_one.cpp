// Without a launcher the world is one process and every collective is a local
// no-op (gathers and scatters copy), so code written for N ranks runs alone.
#include "ops/op_utils.h"
#include "tessera/compile/capture.h"
#include "tessera/compile/passes.h"
#include "tessera/distributed/process_group.h"
#include "tessera/ops/ops.h"
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

// The communication ops find their group by name; a name no group has is an
// error naming it and the groups there are; their shape rules run on meta;
// the compiler never drops one whose result is unused.
TEST(WorldOfOne, CommunicationOpsByGroupName) {
  auto w = distributed::world();
  auto sub = w->split(0);
  EXPECT_EQ(ops::find_communicator(sub->name(), "test").get(), sub.get());
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}).reshape({2, 2});
  EXPECT_TRUE(testing::all_close(ops::all_reduce(x, sub->name()), x, 0, 0));
  const std::string err = testing::error_of([&] { ops::all_gather(x, "world/none"); });
  EXPECT_NE(err.find("all_gather: no process group named 'world/none'"), std::string::npos) << err;
  EXPECT_NE(err.find(sub->name()), std::string::npos) << err;
  EXPECT_NE(testing::error_of([&] { ops::all_gather(tensor({1.0}).reshape({}), "world"); }).find("scalar"),
            std::string::npos);
  Tensor m = ops::all_gather(x.to(Device::meta()), "world", 1);
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.shape(), (Shape{2, 2}));
  compile::Graph g = compile::capture(
      [](const TensorList& in) {
        ops::all_reduce(in[0]);
        return TensorList{ops::mul(in[0], 2.0)};
      },
      {x});
  compile::optimize(g);
  int collectives = 0;
  for (const compile::Node* n : g.nodes()) collectives += n->op == ops::OpId::all_reduce;
  EXPECT_EQ(collectives, 1) << compile::dump(g);
}

}  // namespace
}  // namespace tessera
