// The distributed tests' main: every rank runs the same tests, in the same
// order, so their collectives meet. Ranks other than 0 print only failures.
#include <gtest/gtest.h>

#include "tessera/distributed/process_group.h"

namespace {
// Prints a failed test on any rank, with the rank, and nothing else.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.summary());
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto world = tessera::distributed::world();
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(world->rank()));
  }
  return RUN_ALL_TESTS();
}
