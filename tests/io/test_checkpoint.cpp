// Checkpoints: round trip, keep-last-K, and the guarantees: a process killed in
// the middle of a save, or a disk that fills up, never loses the previous one.
// Sharded checkpoints: pieces from every rank assemble, a corrupt or missing
// shard is named and resuming falls back, a bad index is an error.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

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

// ---- sharded checkpoints: N ranks as N threads, a std::barrier between phases ----
namespace {

// Rank r of n holds elements [r c, (r+1) c) of the flattened "w" (c = ceil(numel / n)),
// its exp_avg alike and, on rank 0, the whole "b" and the scalar step.
CheckpointShard shard_of(int r, int n, const Tensor& w, const Tensor& m) {
  CheckpointShard s;
  const int64_t c = (w.numel() + n - 1) / n, a = std::min(w.numel(), r * c), b = std::min(w.numel(), a + c);
  if (b > a) {
    s.model.push_back({"w", w.reshape({-1}).narrow(0, a, b - a), w.shape(), a});
    s.optimizer.push_back({"state.w.exp_avg", m.reshape({-1}).narrow(0, a, b - a), m.shape(), a});
  }
  if (r == 0) {
    s.model.push_back({"b", arange(3), {3}, -1});
    s.optimizer.push_back({"state.w.step", full({}, 4.0, DType::F64), {}, -1});
  }
  s.optimizer_groups = nlohmann::json::array({{{"params", {0}}, {"options", {{"lr", 0.1}}}, {"param_names", {"w"}}}});
  return s;
}

// n ranks as threads save `pieces(r)` at `step`; returns each rank's error ("" when saved).
std::vector<std::string> save_ranks(const std::string& root, const std::string& name, int n, int64_t step,
                       const std::function<CheckpointShard(int)>& pieces) {
  std::barrier sync(n);
  std::vector<std::thread> ranks;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      Checkpoint c;
      c.state = {{"step", step}};
      try {
        save_sharded_checkpoint(root, name, r, n, pieces(r), c, 0, [&] { sync.arrive_and_wait(); });
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (r == 0) sync.arrive_and_wait();  // rank 0 failed before the last barrier, which the others wait at
      }
    });
  for (auto& t : ranks) t.join();
  return errors;
}

void save_sharded(const std::string& root, const std::string& name, int n, const Tensor& w, const Tensor& m) {
  for (auto& e : save_ranks(root, name, n, 4, [&](int r) { return shard_of(r, n, w, m); })) EXPECT_EQ(e, "");
}

}  // namespace

TEST(ShardedCheckpoint, PiecesOfEveryRankAssembleTheWholeTensors) {
  for (int n : {1, 3, 4}) {
    std::string root = fresh_dir("sharded" + std::to_string(n));
    Tensor w = ops::randn({5, 7}), m = ops::randn({5, 7});  // 35 elements: chunks of 12 or 9, the last shorter
    save_sharded(root, "step-000004", n, w, m);
    const std::string dir = resolve_checkpoint("latest", root);
    EXPECT_TRUE(fs::exists(dir + "/index.json"));
    EXPECT_TRUE(fs::exists(dir + "/model-rank00000.safetensors"));
    EXPECT_FALSE(fs::exists(dir + "/rank0.json"));  // the ranks' descriptions are merged into the index
    Checkpoint c = load_checkpoint(dir);
    EXPECT_EQ(c.state["sharded"]["world_size"], n);
    std::map<std::string, Tensor> model(c.model.begin(), c.model.end()), opt(c.optimizer.begin(), c.optimizer.end());
    ASSERT_TRUE(model.count("w") && model.count("b") && opt.count("state.w.exp_avg") && opt.count("state.w.step"));
    EXPECT_TRUE(ops::all(ops::eq(model["w"], w)).item<bool>()) << n << " ranks";
    EXPECT_TRUE(ops::all(ops::eq(model["b"], arange(3))).item<bool>());
    EXPECT_TRUE(ops::all(ops::eq(opt["state.w.exp_avg"], m)).item<bool>());
    EXPECT_EQ(opt["state.w.step"].item<double>(), 4.0);
    EXPECT_EQ(c.optimizer_groups[0]["param_names"][0], "w");
    fs::remove_all(root);
  }
}

TEST(ShardedCheckpoint, CorruptOrMissingShardIsNamedAndResumeFallsBack) {
  std::string root = fresh_dir("sharded_bad");
  Tensor w = ops::randn({40}), m = ops::randn({40});
  save_sharded(root, "step-000004", 4, w, m);
  save_sharded(root, "step-000008", 4, ops::add(w, 1.0), m);
  const std::string newest = root + "/step-000008";
  // One flipped byte in rank 2's data.
  tessera::testing::damage_file(newest + "/model-rank00002.safetensors");
  std::string err = tessera::testing::error_of([&] { load_checkpoint(newest); });
  EXPECT_NE(err.find("shard model-rank00002.safetensors is corrupt (CRC32"), std::string::npos) << err;
  auto [dir, c] = load_newest_valid_checkpoint(root);  // falls back to step 4
  EXPECT_EQ(fs::path(dir).filename(), "step-000004");
  EXPECT_TRUE(ops::all(ops::eq(c.model[1].first == "w" ? c.model[1].second : c.model[0].second, w)).item<bool>());
  // A missing shard.
  fs::remove(root + "/step-000004/optimizer-rank00001.safetensors");
  err = tessera::testing::error_of([&] { load_checkpoint(root + "/step-000004"); });
  EXPECT_NE(err.find("shard optimizer-rank00001.safetensors is missing"), std::string::npos) << err;
  err = tessera::testing::error_of([&] { load_newest_valid_checkpoint(root); });
  EXPECT_NE(err.find("no checkpoint under"), std::string::npos) << err;
  fs::remove_all(root);
}

// A reader takes ranges of a tensor: inside one rank's piece it is a view of
// that shard's mapped file, across pieces it reads only the shards it needs,
// so a corrupt shard stops only a read that touches it.
TEST(ShardedCheckpoint, ReaderReadsOnlyTheShardsOfTheRangesAsked) {
  std::string root = fresh_dir("sharded_reader");
  Tensor w = ops::randn({5, 8}), m = ops::randn({5, 8});  // 40 elements: pieces of 10 at 4 ranks
  save_sharded(root, "step-000004", 4, w, m);
  const std::string dir = root + "/step-000004";
  // One flipped byte in rank 3's model shard.
  tessera::testing::damage_file(dir + "/model-rank00003.safetensors");
  CheckpointReader r(dir);
  EXPECT_EQ(r.state()["step"], 4);
  EXPECT_EQ(r.shape(CheckpointReader::kModel, "w"), (Shape{5, 8}));
  EXPECT_EQ(r.dtype(CheckpointReader::kModel, "w"), DType::F32);
  Tensor flat = w.reshape({-1});
  Tensor inside = r.read(CheckpointReader::kModel, "w", 12, 6);  // rank 1's piece
  EXPECT_TRUE(ops::all(ops::eq(inside, flat.narrow(0, 12, 6))).item<bool>());
  Tensor across = r.read(CheckpointReader::kModel, "w", 5, 22);  // ranks 0, 1 and 2
  EXPECT_TRUE(ops::all(ops::eq(across, flat.narrow(0, 5, 22))).item<bool>());
  Tensor state = r.read(CheckpointReader::kOptimizer, "state.w.exp_avg", 25, 15);  // the optimizer's shards 2 and 3
  EXPECT_TRUE(ops::all(ops::eq(state, m.reshape({-1}).narrow(0, 25, 15))).item<bool>());
  EXPECT_EQ(r.read(CheckpointReader::kOptimizer, "state.w.step").item<double>(), 4.0);
  // Rank 3's model shard is read only now, and its damage is named.
  std::string err = tessera::testing::error_of([&] { r.read(CheckpointReader::kModel, "w", 28, 4); });
  EXPECT_NE(err.find("shard model-rank00003.safetensors is corrupt (CRC32"), std::string::npos) << err;
  err = tessera::testing::error_of([&] { r.read(CheckpointReader::kModel, "w", 38, 3); });
  EXPECT_NE(err.find("elements [38, 41) of 'w' are outside its 40"), std::string::npos) << err;
  err = tessera::testing::error_of([&] { r.read(CheckpointReader::kModel, "v"); });
  EXPECT_NE(err.find("has no model tensor 'v'"), std::string::npos) << err;
  // A whole checkpoint reads the same way.
  const std::string whole = save_checkpoint(root, "whole", make(3, 10));
  CheckpointReader rw(whole);
  EXPECT_EQ(rw.read(CheckpointReader::kModel, "w", 2, 3).to_vector<float>(), (std::vector<float>{3, 3, 3}));
  fs::remove_all(root);
}

// Tensor-parallel pieces are N-d boxes: rows of one matrix, columns of
// another. They assemble, and a box that crosses pieces reads only those.
TEST(ShardedCheckpoint, BoxesOfRowsAndColumnsAssembleAndReadInPart) {
  std::string root = fresh_dir("sharded_boxes");
  Tensor w = ops::randn({4, 6}), v = ops::randn({4, 6});
  auto save = [&](std::vector<int64_t> v_offset_rank1) {
    return save_ranks(root, "step-000002", 2, 2, [&](int r) {
      CheckpointShard s;
      s.model.push_back({"w", w.narrow(0, 2 * r, 2), {4, 6}, -1, {2 * r, 0}});  // row-parallel
      s.model.push_back({"v", v.narrow(1, 3 * r, 3), {4, 6}, -1, r == 0 ? std::vector<int64_t>{0, 0} : v_offset_rank1});
      s.optimizer_groups = nlohmann::json::array();
      return s;
    })[0];
  };
  ASSERT_EQ(save({0, 3}), "");  // column-parallel
  const std::string dir = root + "/step-000002";
  Checkpoint c = load_checkpoint(dir);
  std::map<std::string, Tensor> model(c.model.begin(), c.model.end());
  EXPECT_TRUE(ops::all(ops::eq(model["w"], w)).item<bool>());
  EXPECT_TRUE(ops::all(ops::eq(model["v"], v)).item<bool>());
  CheckpointReader r(dir);
  Tensor mid = r.read_box(CheckpointReader::kModel, "v", {1, 2}, {2, 3});  // columns 2-4: both ranks' boxes
  EXPECT_TRUE(ops::all(ops::eq(mid, v.narrow(0, 1, 2).narrow(1, 2, 3))).item<bool>());
  Tensor rows = r.read(CheckpointReader::kModel, "w", 10, 6);  // a range of a tensor kept in boxes
  EXPECT_TRUE(ops::all(ops::eq(rows, w.reshape({-1}).narrow(0, 10, 6))).item<bool>());
  std::string err = tessera::testing::error_of([&] { r.read_box(CheckpointReader::kModel, "v", {3, 0}, {2, 6}); });
  EXPECT_NE(err.find("is not inside 'v'"), std::string::npos) << err;
  // Rank 1's columns start at 2: they overlap rank 0's.
  fs::remove_all(root);
  err = save({0, 2});
  EXPECT_NE(err.find("the pieces of model tensor 'v' overlap (boxes 0 and 1)"), std::string::npos) << err;
  fs::remove_all(root);
  // Rank 1's columns 4-6 of a 6-column matrix: refused when saving, not only when loading.
  err = save({0, 4});
  EXPECT_NE(err.find("the pieces of model tensor 'v' have a box outside the tensor (box 1)"), std::string::npos) << err;
  fs::remove_all(root);
}

// Note [Checking a tiling of boxes]: grids of many boxes check in time
// proportional to the boxes, gaps and overlaps are named, and an index whose
// boxes would cut the tensor into too many cells is refused, not worked
// through pair by pair.
TEST(ShardedCheckpoint, TilingsOfManyBoxesAreCheckedWithoutComparingEveryPair) {
  using Piece = CheckpointReader::Piece;
  auto box = [](int64_t r, int64_t c, int64_t h, int64_t w) { return Piece{"f", 0, 0, {r, c}, {h, w}}; };
  std::vector<Piece> grid;
  for (int64_t r = 0; r < 300; ++r)
    for (int64_t c = 0; c < 300; ++c) grid.push_back(box(r, c, 1, 1));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(CheckpointReader::tiling_error(grid, {300, 300}), "");
  // 90,000 boxes: pairwise, 4e9 comparisons; here, well under a second even under sanitizers.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  grid.push_back(box(299, 299, 1, 1));
  EXPECT_EQ(CheckpointReader::tiling_error(grid, {300, 300}), "overlap (boxes 89999 and 90000)");
  EXPECT_EQ(CheckpointReader::tiling_error({box(0, 0, 2, 4), box(3, 0, 1, 4)}, {4, 4}), "leave a gap at [2, 0]");
  std::vector<Piece> diagonal;  // 5000 boxes whose edges cut 25 million cells
  for (int64_t i = 0; i < 5000; ++i) diagonal.push_back(box(i, i, 1, 1));
  EXPECT_NE(CheckpointReader::tiling_error(diagonal, {5000, 5000}).find("too irregular"), std::string::npos);
}

TEST(ShardedCheckpoint, PiecesThatDoNotCoverATensorAreRefused) {
  std::string root = fresh_dir("sharded_gap");
  std::vector<std::string> errors = save_ranks(root, "step-000001", 2, 1, [](int r) {
    CheckpointShard s;
    // Rank 1's piece starts at 6: elements 4 and 5 are nobody's.
    s.model.push_back({"w", full({4}, 1.0), {10}, r == 0 ? 0 : 6});
    s.optimizer_groups = nlohmann::json::array();
    return s;
  });
  EXPECT_NE(errors[0].find("the pieces of model tensor 'w' leave a gap at element 4"), std::string::npos) << errors[0];
  EXPECT_TRUE(list_checkpoints(root).empty());  // nothing half-written is taken for a checkpoint
  fs::remove_all(root);
}

TEST(ShardedCheckpoint, BadIndexIsAClearError) {
  std::string root = fresh_dir("sharded_index");
  save_sharded(root, "step-000004", 2, ops::randn({6}), ops::randn({6}));
  const std::string dir = root + "/step-000004";
  auto rewrite = [&](const std::function<void(nlohmann::json&)>& edit) {
    std::ifstream in(dir + "/index.json");
    nlohmann::json j = nlohmann::json::parse(in);
    edit(j);
    std::ofstream(dir + "/index.json") << j.dump();
  };
  rewrite([](nlohmann::json& j) { j["model"]["w"]["pieces"][1]["begin"] = 1; });  // [0, 3) and [1, 6)
  std::string overlap = tessera::testing::error_of([&] { load_checkpoint(dir); });
  EXPECT_NE(overlap.find("index.json's pieces of 'w' overlap at element 3"), std::string::npos) << overlap;
  rewrite([](nlohmann::json& j) { j["model"]["w"]["pieces"][0]["end"] = 1000; });
  std::string err = tessera::testing::error_of([&] { load_checkpoint(dir); });
  EXPECT_NE(err.find("gives 'w' a piece outside it"), std::string::npos) << err;
  rewrite([](nlohmann::json& j) { j["files"]["../../etc/passwd"] = {{"bytes", 1}, {"crc32", 1}}; });
  err = tessera::testing::error_of([&] { load_checkpoint(dir); });
  EXPECT_NE(err.find("names a file outside it"), std::string::npos) << err;
  std::ofstream(dir + "/index.json") << "{not json";
  err = tessera::testing::error_of([&] { load_checkpoint(dir); });
  EXPECT_NE(err.find("index.json is not a JSON object"), std::string::npos) << err;
  fs::remove_all(root);
}
