// Pipeline schedules checked as data: each generator's lists pass the checks
// for every shape, their simulated bubble with unit costs is
// (p - 1) / (m + p - 1) (less with interleaving), 1F1B holds at most p
// micro-batches per rank, and broken schedules are errors naming the action.
#include <gtest/gtest.h>

#include "tessera/core/error.h"
#include "tessera/distributed/pipeline_schedule.h"

namespace tessera::distributed {
namespace {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineSchedule, EveryGeneratorPassesItsChecksAtEveryShape) {
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {1, 2, 4, 8, 12}) {
      SCOPED_TRACE("p " + std::to_string(p) + ", m " + std::to_string(m));
      EXPECT_NO_THROW(check_schedule(gpipe(p, m)));
      if (m >= p) EXPECT_NO_THROW(check_schedule(one_f_one_b(p, m)));
      for (int v : {2, 3})
        if (m % p == 0) EXPECT_NO_THROW(check_schedule(interleaved_1f1b(p, m, v)));
    }
}

TEST(PipelineSchedule, TheBubbleIsTheTextbookOneWithUnitCosts) {
  for (int p : {2, 4})
    for (int m : {4, 8}) {
      SCOPED_TRACE("p " + std::to_string(p) + ", m " + std::to_string(m));
      const double ideal = ideal_bubble(p, m);
      EXPECT_DOUBLE_EQ(ideal, (p - 1.0) / (m + p - 1.0));
      EXPECT_NEAR(simulate(gpipe(p, m)).bubble, ideal, 1e-12);
      EXPECT_NEAR(simulate(one_f_one_b(p, m)).bubble, ideal, 1e-12);
      // A backward twice the forward leaves the fraction as it is.
      EXPECT_NEAR(simulate(one_f_one_b(p, m), 1, 2).bubble, ideal, 1e-12);
      // Interleaving: each rank's layers in v stages of 1/v the cost.
      for (int v : {2, 4}) {
        const double b = simulate(interleaved_1f1b(p, m, v), 1.0 / v, 1.0 / v).bubble;
        EXPECT_NEAR(b, ideal_bubble(p, m, v), 1e-12) << "v " << v;
        EXPECT_LT(b, ideal);
      }
    }
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostPMicroBatchesAndGPipeHoldsAll) {
  for (int p : {2, 4})
    for (int m : {4, 8}) {
      const Simulation g = simulate(gpipe(p, m)), f = simulate(one_f_one_b(p, m));
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(g.peak_in_flight[r], m);
        EXPECT_EQ(f.peak_in_flight[r], p - r) << "rank " << r;
      }
    }
}

TEST(PipelineSchedule, BrokenSchedulesAreErrorsNamingTheAction) {
  // A backward before its forward.
  Schedule s = one_f_one_b(2, 4);
  auto& r1 = s.actions[1];
  std::swap(r1[1], r1[2]);  // rank 1: recv-act0, F0, B0 ... -> B0 before F0
  EXPECT_NE(error_of([&] { check_schedule(s); }).find("before"), std::string::npos);

  // Ranks that wait on each other: rank 0 waits for a gradient before it
  // sends the activation rank 1 needs.
  s = gpipe(2, 1);
  s.actions[0] = {{PipeOp::kForward, 0, 0}, {PipeOp::kRecvGrad, 0, 0}, {PipeOp::kSendActivation, 0, 0},
                  {PipeOp::kBackward, 0, 0}};
  std::string e = error_of([&] { check_schedule(s); });
  EXPECT_NE(e.find("never finishes: the ranks wait on each other (rank 0 at recv-grad0@s0, rank 1 at recv-act0@s1)"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { simulate(s); }).find("never finishes"), std::string::npos);

  // Another rank's list (a mismatched schedule across ranks).
  s = one_f_one_b(2, 4);
  s.actions[1] = gpipe(2, 2).actions[1];
  e = error_of([&] { check_schedule(s); });
  EXPECT_NE(e.find("rank 1 never sends send-grad2@s1, which rank 0 receives"), std::string::npos) << e;

  // Receives in another order than the sends.
  s = gpipe(2, 2);
  std::swap(s.actions[1][0], s.actions[1][2]);  // recv-act1 first
  std::swap(s.actions[1][1], s.actions[1][3]);
  EXPECT_NE(error_of([&] { check_schedule(s); }), "");
}

TEST(PipelineSchedule, ShapesThatCannotWorkAreErrorsNamingTheValue) {
  EXPECT_NE(error_of([] { one_f_one_b(4, 2); }).find("2 micro-batches cannot fill a pipeline of 4"), std::string::npos);
  EXPECT_NE(error_of([] { interleaved_1f1b(4, 6, 2); }).find("micro_batches = 6"), std::string::npos);
  EXPECT_NE(error_of([] { make_schedule("zigzag", 2, 4); }).find("gpipe, 1f1b or interleaved"), std::string::npos);
  EXPECT_NE(error_of([] { make_schedule("1f1b", 2, 4, 2); }).find("interleaved"), std::string::npos);
  EXPECT_NE(error_of([] { gpipe(0, 4); }).find("ranks"), std::string::npos);
}

}  // namespace
}  // namespace tessera::distributed
