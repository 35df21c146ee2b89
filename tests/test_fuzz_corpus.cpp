// Every fuzz target's committed corpus (tests/fuzz/<target>/: seeds, and the
// inputs scripts/fuzz.sh found and kept) replayed through the same function
// the fuzzer runs: each input is accepted or rejected with an Error.
#include <gtest/gtest.h>

#include <filesystem>

#include "fuzz/targets.h"
#include "tessera/io/file.h"

namespace {

class FuzzCorpus : public ::testing::TestWithParam<const char*> {};

TEST_P(FuzzCorpus, EveryInputIsAcceptedOrRejectedCleanly) {
  const std::string target = GetParam();
  const auto dir = std::filesystem::path(TESSERA_SOURCE_DIR) / "tests/fuzz" / target;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << "no corpus for fuzz target " << target << " in " << dir;
  int inputs = 0, rejected = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::vector<char> b = tessera::io::read_file(e.path().string());
    try {
      tessera::fuzz::run_target(target, b.data(), b.size());
    } catch (const tessera::Error&) {
      ++rejected;
    } catch (const tessera::serve::RequestError&) {
      ++rejected;
    } catch (const tessera::serve::openai::ApiError&) {
      ++rejected;
    } catch (const std::exception& ex) {
      ADD_FAILURE() << e.path() << " threw something other than tessera::Error: " << ex.what();
    }
    ++inputs;
  }
  EXPECT_GE(inputs, 1) << target;
  std::printf("%s: %d inputs, %d rejected\n", target.c_str(), inputs, rejected);
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus, ::testing::ValuesIn(tessera::fuzz::kTargets),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
