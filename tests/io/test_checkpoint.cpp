// Checkpoints: round trip, keep-last-K, and the guarantees: a process killed in
// the middle of a save, or a disk that fills up, never loses the previous one.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tessera/io/checkpoint.h"
#include "tessera/ops/ops.h"
#include "test_util.h"

using namespace tessera;
using namespace tessera::io;
namespace fs = std::filesystem;

namespace {
std::string fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("tessera_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d.string();
}

Checkpoint make(int64_t step, int64_t numel = 16) {
  Checkpoint c;
  c.model = {{"w", full({numel}, static_cast<double>(step))}, {"b", arange(3)}};
  c.optimizer = {{"state.0.exp_avg", full({numel}, 0.5)}};
  c.optimizer_groups = nlohmann::json::array({{{"params", {0}}, {"options", {{"lr", 0.1}}}}});
  c.state = {{"step", step}};
  return c;
}

std::string name_of(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step-%06lld", static_cast<long long>(step));
  return b;
}
}  // namespace

TEST(Checkpoint, RoundTripLatestAndKeepLast) {
  std::string root = fresh_dir("roundtrip");
  for (int64_t s = 1; s <= 5; ++s) save_checkpoint(root, name_of(s), make(s), 3);
  auto all = list_checkpoints(root);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(fs::path(all[0]).filename(), "step-000003");
  std::string latest = resolve_checkpoint("latest", root);
  EXPECT_EQ(fs::path(latest).filename(), "step-000005");
  Checkpoint c = load_checkpoint(latest);
  EXPECT_EQ(c.state["step"], 5);
  EXPECT_EQ(c.state["format_version"], kCheckpointFormatVersion);
  EXPECT_EQ(c.model[0].second.to_vector<float>()[0], 5.0f);
  EXPECT_EQ(c.optimizer_groups[0]["options"]["lr"], 0.1);
  fs::remove_all(root);
}

TEST(Checkpoint, DamagedCheckpointsAreClearErrors) {
  std::string root = fresh_dir("damaged");
  std::string dir = save_checkpoint(root, name_of(1), make(1));
  auto err = [&] {
    try {
      load_checkpoint(dir);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  fs::resize_file(fs::path(dir) / "model.safetensors", 40);  // truncated
  EXPECT_NE(err().find("model.safetensors"), std::string::npos) << err();
  save_checkpoint(root, name_of(1), make(1));
  { std::ofstream(fs::path(dir) / "state.json") << "{\"step\": "; }
  EXPECT_NE(err().find("state.json is not a valid JSON"), std::string::npos) << err();
  fs::remove(fs::path(dir) / "state.json");
  EXPECT_NE(err().find("state.json is missing"), std::string::npos) << err();
  EXPECT_THROW(resolve_checkpoint("latest", fresh_dir("empty")), Error);
  fs::remove_all(root);
}

// A child process saves big checkpoints in a loop and is killed with SIGKILL
// at varying moments; every time, the latest checkpoint must load completely.
TEST(Checkpoint, KillDuringSaveKeepsThePreviousCheckpoint) {
  std::string root = fresh_dir("kill");
  save_checkpoint(root, name_of(0), make(0, 1 << 20));
  for (int round = 0; round < 6; ++round) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int64_t s = 1;; ++s) save_checkpoint(root, name_of(round * 1000 + s), make(s, 1 << 20), 2);
    }
    usleep(20000 + 15000 * round);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    std::string latest = resolve_checkpoint("latest", root);
    Checkpoint c = load_checkpoint(latest);  // complete and readable
    int64_t step = c.state["step"];
    EXPECT_TRUE(ops::all(ops::eq(c.model[0].second, static_cast<double>(step))).item<bool>());
  }
  fs::remove_all(root);
}

// RLIMIT_FSIZE makes writes past a size fail with EFBIG, as a full disk would.
TEST(Checkpoint, FullDiskLeavesThePreviousCheckpointAndSaysSo) {
  std::string root = fresh_dir("full");
  save_checkpoint(root, name_of(1), make(1, 1024));
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{64 * 1024, 64 * 1024};
    setrlimit(RLIMIT_FSIZE, &lim);
    try {
      save_checkpoint(root, name_of(2), make(2, 1 << 20));
      _exit(3);  // should not succeed
    } catch (const Error& e) {
      std::string m = e.what();
      _exit(m.find("previous checkpoint is intact") != std::string::npos ? 0 : 4);
    }
  }
  int status;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(fs::path(resolve_checkpoint("latest", root)).filename(), name_of(1));
  EXPECT_EQ(load_checkpoint(resolve_checkpoint("latest", root)).state["step"], 1);
  EXPECT_EQ(list_checkpoints(root).size(), 1u);
  fs::remove_all(root);
}
