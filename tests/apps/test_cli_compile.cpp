// The compiler's command line, end to end: train a few steps, export the
// checkpoint as ONNX and as a compiled graph, inspect both, run both on the
// same .npy input and compare.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tessera/io/npy.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::cli;

TEST(CliCompile, ExportInspectRun) {
  std::string dir = testing::scratch_dir("cli_compile"), out;
  std::string cfg = std::string(TESSERA_SOURCE_DIR) + "/examples/configs/fashion_mnist_mlp.yaml";
  ASSERT_EQ(cli("train " + cfg + " --output " + dir + "/run --set train.steps=2 --set train.eval_batches=1 --plain", &out), 0) << out;
  ASSERT_EQ(cli("export " + dir + "/run --format onnx --output " + dir + "/m.onnx", &out), 0) << out;
  EXPECT_NE(out.find("x: f32[N, 1, 28, 28]"), std::string::npos) << out;
  ASSERT_EQ(cli("export " + dir + "/run --format tessera --output " + dir + "/m.tsr --dump", &out), 0) << out;
  EXPECT_NE(out.find("linear("), std::string::npos) << out;  // fused_linear once optimized
  ASSERT_EQ(cli("inspect " + dir + "/m.onnx", &out), 0) << out;
  EXPECT_NE(out.find("parameters"), std::string::npos) << out;
  EXPECT_NE(out.find("FLOPs"), std::string::npos) << out;
  EXPECT_NE(out.find("linear"), std::string::npos) << out;
  io::save_npy(dir + "/x.npy", ops::randn({3, 1, 28, 28}));
  ASSERT_EQ(cli("run " + dir + "/m.onnx --input " + dir + "/x.npy --output " + dir + "/y1.npy", &out), 0) << out;
  ASSERT_EQ(cli("run " + dir + "/m.tsr --input " + dir + "/x.npy --output " + dir + "/y2.npy", &out), 0) << out;
  Tensor y1 = io::load_npy(dir + "/y1.npy"), y2 = io::load_npy(dir + "/y2.npy");
  EXPECT_EQ(y1.shape()[0], 3);
  EXPECT_CLOSE(y1, y2, 1e-5, 1e-6);
  // A wrong input is an error that names the input and the expected type.
  EXPECT_EQ(cli("run " + dir + "/m.tsr --input " + dir + "/y1.npy", &out), 1);
  EXPECT_NE(out.find("expected f32[N, 1, 28, 28]"), std::string::npos) << out;
  EXPECT_EQ(cli("run " + dir + "/nothing.onnx --input " + dir + "/x.npy", &out), 1);
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
