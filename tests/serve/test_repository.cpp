// The model repository: folders scanned and checked, configs validated, and
// infer requests matched to a model's signature with 400s that say what the
// model takes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/compile/compile.h"
#include "tessera/compile/serialize.h"
#include "tessera/nn/nn.h"
#include "tessera/serve/repository.h"
#include "serve_test_util.h"
#include "test_util.h"

using namespace tessera;
using namespace tessera::serve;
namespace fs = std::filesystem;

namespace {

void save_mlp(const std::string& dir) {
  auto net = tessera::testing::serve_mlp(4, 8, 3, 1);
  compile::save(tessera::testing::serve_graph(*net, 4), dir);
}

std::string rejected(const std::function<void()>& f) {
  try {
    f();
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.what();
  }
  ADD_FAILURE() << "no RequestError";
  return "";
}

}  // namespace

TEST(ServeRepository, ScansModelsVersionsAndConfigs) {
  std::string root = tessera::testing::scratch_dir("serve_repo");
  save_mlp(root + "/mlp/1/model.tsr");
  save_mlp(root + "/mlp/3/model.tsr");
  save_mlp(root + "/other/2/model.tsr");
  std::ofstream(root + "/mlp/config.yaml") << "max_batch_size: 32\npreferred_batch_sizes: [16, 8]\ninstances: 2\n";
  auto repo = scan_repository(root);
  ASSERT_EQ(repo.size(), 2u);
  EXPECT_EQ(repo[0].name, "mlp");
  ASSERT_EQ(repo[0].versions.size(), 2u);
  EXPECT_EQ(repo[0].versions[0].version, 1);
  EXPECT_EQ(repo[0].versions[1].version, 3);
  EXPECT_EQ(repo[0].config.max_batch_size, 32);
  EXPECT_EQ(repo[0].config.preferred_batch_sizes, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(repo[0].config.instances, 2);
  EXPECT_EQ(repo[1].config.max_batch_size, 64);  // the defaults

  auto err = [](const std::function<void()>& f) { return tessera::testing::error_of(f); };
  fs::create_directories(root + "/mlp/v2");
  EXPECT_NE(err([&] { scan_repository(root); }).find("is not a version folder"), std::string::npos);
  fs::remove_all(root + "/mlp/v2");
  fs::create_directories(root + "/mlp/4");
  EXPECT_NE(err([&] { scan_repository(root); }).find("holds neither model.tsr/"), std::string::npos);
  fs::remove_all(root + "/mlp/4");
  std::ofstream(root + "/mlp/config.yaml") << "max_batch: 32\n";
  EXPECT_NE(err([&] { scan_repository(root); }).find("unknown key 'max_batch'"), std::string::npos);
  std::ofstream(root + "/mlp/config.yaml") << "max_batch_size: 4\npreferred_batch_sizes: [8]\n";
  EXPECT_NE(err([&] { scan_repository(root); }).find("preferred batch size 8 exceeds max_batch_size 4"),
            std::string::npos);
  EXPECT_NE(err([&] { scan_repository(root + "/nope"); }).find("is not a directory"), std::string::npos);
  EXPECT_FALSE(valid_model_name(".."));
  EXPECT_FALSE(valid_model_name("a/b"));
  EXPECT_TRUE(valid_model_name("resnet-18_v2.int8"));
  fs::remove_all(root);
}

TEST(ServeRepository, RequestsMatchTheSignature) {
  std::string dir = tessera::testing::scratch_dir("serve_sig");
  save_mlp(dir + "/model.tsr");
  Model m = load(dir + "/model.tsr");
  auto req = [](const char* body) { return parse_infer_request(body, std::nullopt); };
  auto ok = req(R"({"inputs": [{"name": "x", "shape": [3, 4], "datatype": "FP32", "data": [1,2,3,4,5,6,7,8,9,10,11,12]}],
                    "outputs": [{"name": "output0"}]})");
  TensorList in = match_signature(m, "mlp", ok);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(m.run(in)[0].shape(), (Shape{3, 3}));
  EXPECT_NE(rejected([&] {
              match_signature(m, "mlp", req(R"({"inputs": [{"name": "x", "shape": [1, 5], "datatype": "FP32",
                                                 "data": [1,2,3,4,5]}]})"));
            }).find("model 'mlp': input 'x' must be FP32 [N, 4], got shape [1, 5]"),
            std::string::npos);
  EXPECT_NE(rejected([&] {
              match_signature(m, "mlp", req(R"({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP64",
                                                 "data": [1,2,3,4]}]})"));
            }).find("got datatype FP64"),
            std::string::npos);
  EXPECT_NE(rejected([&] {
              match_signature(m, "mlp", req(R"({"inputs": [{"name": "y", "shape": [1, 4], "datatype": "FP32",
                                                 "data": [1,2,3,4]}]})"));
            }).find("input 'x' is missing; the model takes x (FP32 [N, 4])"),
            std::string::npos);
  EXPECT_NE(rejected([&] {
              match_signature(m, "mlp", req(R"({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                                 "data": [1,2,3,4]}], "outputs": [{"name": "probs"}]})"));
            }).find("no output 'probs'; its outputs are output0"),
            std::string::npos);
  fs::remove_all(dir);
}
