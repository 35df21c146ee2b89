// Crafted model files (hostile_models.h) against every way in: the library's
// load + warm-up, `tessera run` and `tessera inspect` as separate processes
// (an exit code and a message, never a signal; small peak memory), and a
// server whose repository holds them beside a good model.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "compile/hostile_models.h"
#include "fuzz/targets.h"
#include "tessera/compile/model.h"
#include "tessera/core/allocator.h"
#include "tessera/serve/service.h"
#include "test_util.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // shadow memory inflates RSS
#else
constexpr bool kSanitized = false;
#endif

TEST(HostileModels, AtLeastFortyDistinctFiles) {
  auto models = hostile_models();
  EXPECT_GE(models.size(), 40u);
  std::set<std::string> names;
  for (const auto& m : models) EXPECT_TRUE(names.insert(m.name).second) << m.name;
  // Written as seeds of the "model" fuzz target when asked (scripts/fuzz.sh's corpus).
  if (const char* out = std::getenv("TESSERA_WRITE_FUZZ_SEEDS")) {
    for (const auto& m : models) std::ofstream(std::string(out) + "/hostile-" + m.name + ".bin", std::ios::binary) << fuzz_input(m);
    for (const auto& m : valid_models()) std::ofstream(std::string(out) + "/" + m.name + ".bin", std::ios::binary) << fuzz_input(m);
  }
}

// The files the hostile ones are one fault away from load and run.
TEST(HostileModels, TheirValidOriginalsRun) {
  for (const auto& m : valid_models()) {
    const std::string bytes = fuzz_input(m);
    EXPECT_EQ(error_of([&] { fuzz::load_and_run(bytes.data(), bytes.size()); }), "") << m.name;
  }
}

// What tessera serve does with a model: load (import, optimize, plan), then
// warm up on inputs of its signature. Each file is an Error naming its fault.
TEST(HostileModels, LoadAndWarmUpRaiseAClearError) {
  const std::string dir = scratch_dir("hostile_in_process");
  for (const auto& m : hostile_models()) {
    const std::string path = write_model(m, dir);
    std::string msg = error_of([&] {
      const std::string bytes = fuzz_input(m);  // the fuzz target's path: the same cap, two runs
      fuzz::load_and_run(bytes.data(), bytes.size());
    });
    EXPECT_NE(msg.find(m.expected), std::string::npos) << m.name << ": expected \"" << m.expected << "\", got \"" << msg << "\"";
    msg = error_of([&] {
      struct Cap {
        Cap() { set_max_allocation(fuzz::kModelMaxAllocation); }
        ~Cap() { set_max_allocation(0); }
      } cap;
      Model model = load(path);
      (void)model.run(model.example_inputs(1, true));
    });
    EXPECT_NE(msg.find(m.expected), std::string::npos) << m.name << " (from disk): got \"" << msg << "\"";
  }
  fs::remove_all(dir);
}

// As a user meets them: the CLI prints the error and exits 1.
TEST(HostileModels, CliRunAndInspectExitWithTheError) {
  const std::string dir = scratch_dir("hostile_cli");
  for (const auto& m : hostile_models()) {
    const std::string path = write_model(m, dir);
    for (const char* cmd : {"run", "inspect"}) {
      CliRun r = run_cli({cmd, path}, {"TESSERA_MAX_ALLOC=64M"});
      EXPECT_EQ(r.signal, 0) << "tessera " << cmd << " " << m.name << " died of signal " << r.signal << ":\n" << r.output;
      // inspect loads without running: a fault that only a run meets is not its to find.
      const bool must_fail = std::string(cmd) == "run";
      EXPECT_TRUE(r.exit_code == 1 || (!must_fail && r.exit_code == 0)) << "tessera " << cmd << " " << m.name << ":\n" << r.output;
      if (r.exit_code == 1) EXPECT_NE(r.output.find(m.expected), std::string::npos) << m.name << ":\n" << r.output;
      if (!kSanitized) EXPECT_LT(r.max_rss_kb, 256 * 1024) << "tessera " << cmd << " " << m.name;
    }
  }
  fs::remove_all(dir);
}

// A repository holding a good model and hostile ones: the good one serves, each
// hostile one is not ready with its error; a hostile new version of a serving
// model leaves the old version serving.
TEST(HostileModels, ServerKeepsServingTheGoodModels) {
  const std::string root = scratch_dir("hostile_repo");
  const std::string good = std::string(TESSERA_GOLDEN_DIR) + "/onnx/cnn.onnx";
  fs::create_directories(root + "/cnn/1");
  fs::copy_file(good, root + "/cnn/1/model.onnx");
  std::vector<HostileModel> bad;
  for (const auto& m : hostile_models())
    if (bad.size() < 8 || m.name == "input_too_large" || m.name == "graph_full_too_large") bad.push_back(m);
  set_max_allocation(fuzz::kModelMaxAllocation);
  for (const auto& m : bad) {
    const std::string folder = root + "/" + m.name + "/1";
    fs::create_directories(folder);
    const std::string path = write_model(m, folder);
    fs::rename(path, folder + (m.onnx ? "/model.onnx" : "/model.tsr"));
  }
  serve::InferenceService s;
  serve::SyncReport report = s.load_repository(root);
  EXPECT_EQ(report.errors.size(), bad.size());
  auto call = [&](const std::string& method, const std::string& path, const std::string& body = "") {
    serve::HttpRequest r;
    r.method = method;
    r.path = path;
    r.body = body;
    return s.handle(r);
  };
  serve::HttpResponse meta = call("GET", "/v2/models/cnn");
  ASSERT_EQ(meta.status, 200) << meta.body;
  const nlohmann::json sig = nlohmann::json::parse(meta.body)["inputs"][0];
  int64_t n = 1;
  nlohmann::json shape = nlohmann::json::array();
  for (const auto& d : sig["shape"]) {
    shape.push_back(d.get<int64_t>() < 0 ? 1 : d.get<int64_t>());
    n *= shape.back().get<int64_t>();
  }
  nlohmann::json input = {{"name", sig["name"]}, {"datatype", "FP32"}, {"shape", shape}};
  input["data"] = std::vector<float>(static_cast<size_t>(n), 0.0f);
  nlohmann::json request;
  request["inputs"] = nlohmann::json::array({input});
  const std::string body = request.dump();
  EXPECT_EQ(call("POST", "/v2/models/cnn/infer", body).status, 200);
  for (const auto& m : bad) {
    serve::HttpResponse r = call("GET", "/v2/models/" + m.name);
    EXPECT_EQ(r.status, 503) << m.name << ": " << r.body;
    EXPECT_NE(r.body.find(m.expected), std::string::npos) << m.name << ": " << r.body;
    EXPECT_EQ(call("POST", "/v2/models/" + m.name + "/infer", body).status, 503) << m.name;
  }
  EXPECT_EQ(call("GET", "/v2/health/ready").status, 503);  // some models are not ready
  // A hostile version 2 beside the serving version 1, found by a later sync (as --poll-seconds does).
  fs::create_directories(root + "/cnn/2");
  fs::copy_file(root + "/" + bad[0].name + "/1/model" + (bad[0].onnx ? ".onnx" : ".tsr"),
                root + "/cnn/2/model" + (bad[0].onnx ? ".onnx" : ".tsr"), fs::copy_options::recursive);
  serve::SyncReport again = s.sync_repository("cnn");
  EXPECT_EQ(again.errors.size(), 1u);
  serve::HttpResponse r = call("POST", "/v2/models/cnn/infer", body);
  EXPECT_EQ(r.status, 200) << r.body;
  meta = call("GET", "/v2/models/cnn");
  EXPECT_EQ(meta.status, 200);
  EXPECT_NE(meta.body.find("load_error"), std::string::npos) << meta.body;
  set_max_allocation(0);
  s.drain();
  fs::remove_all(root);
}

}  // namespace
}  // namespace tessera::testing
