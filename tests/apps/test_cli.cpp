// The command line's conventions: --version is the library's version, usage
// errors exit 2 with the usage of the command, the top-level help lists
// every subcommand, and each --help shows the defaults.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/version.h"
#include "test_util.h"

namespace tessera {
namespace {

TEST(Cli, VersionHelpAndUsageErrors) {
  std::string out;
  ASSERT_EQ(testing::cli("--version", &out), 0) << out;
  EXPECT_EQ(out, std::string(tessera::version()) + "\n");
  EXPECT_STREQ(tessera::version(), TESSERA_VERSION);

  ASSERT_EQ(testing::cli("--help", &out), 0) << out;
  for (const char* sub : {"train", "eval", "info", "export", "run", "inspect", "quantize", "prune", "serve", "client", "gguf", "generate"})
    EXPECT_NE(out.find(std::string("\n  ") + sub + " "), std::string::npos) << sub << " missing from the help:\n" << out;

  // A usage error: the message and the command's usage, exit 2.
  EXPECT_EQ(testing::cli("run", &out), 2) << out;
  EXPECT_NE(out.find("error: model is required"), std::string::npos) << out;
  EXPECT_NE(out.find("Usage:"), std::string::npos) << out;
  EXPECT_NE(out.find(" run [OPTIONS] model"), std::string::npos) << out;
  EXPECT_EQ(testing::cli("quantize runs/x --method q7", &out), 2) << out;
  EXPECT_EQ(testing::cli("frobnicate", &out), 2) << out;
  EXPECT_EQ(testing::cli("NOSUCHCOMMAND --help", &out), 2) << out;  // not the main help with exit 0
  EXPECT_NE(out.find("error: 'NOSUCHCOMMAND' is not a tessera command"), std::string::npos) << out;
  EXPECT_EQ(testing::cli("", &out), 2) << out;
  // A runtime error (the file is missing): exit 1, not 2.
  EXPECT_EQ(testing::cli("inspect /nonexistent/model.onnx", &out), 1) << out;
  // A file that is not GGUF is called that, not a run without checkpoints.
  const std::string dir = testing::scratch_dir("cli_not_gguf"), not_gguf = dir + "/model.gguf";
  std::filesystem::create_directories(dir);
  std::ofstream(not_gguf) << "not a model";
  EXPECT_EQ(testing::cli("generate " + not_gguf + " -p x -n 1", &out), 1) << out;
  EXPECT_NE(out.find(not_gguf + " is not a GGUF file (it does not begin with 'GGUF')"), std::string::npos) << out;
  std::filesystem::remove_all(dir);

  // Defaults are shown.
  ASSERT_EQ(testing::cli("quantize --help", &out), 0);
  EXPECT_NE(out.find("--repeat INT:POSITIVE=50"), std::string::npos) << out;
  EXPECT_NE(out.find("--group INT=32"), std::string::npos) << out;
  ASSERT_EQ(testing::cli("serve --help", &out), 0);
  EXPECT_NE(out.find("--port INT=8000"), std::string::npos) << out;
}

// `tessera info CONFIG` sizes the model on meta: the MLP of the Fashion-MNIST
// config has 784*256 + 256 + 256*256 + 256 + 256*10 + 10 parameters, and Adam
// keeps two f32 states per parameter.
TEST(Cli, InfoSizesAConfigOnMeta) {
  std::string out;
  const std::string config = std::string(TESSERA_SOURCE_DIR) + "/examples/configs/fashion_mnist_mlp.yaml";
  ASSERT_EQ(testing::cli("info " + config + " --ranks 1 4", &out), 0) << out;
  const int64_t params = 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10;
  EXPECT_NE(out.find("parameters   " + std::to_string(params) + " (" + std::to_string(params) + " trainable)"),
            std::string::npos) << out;
  EXPECT_NE(out.find("sized on the meta device"), std::string::npos) << out;
  EXPECT_NE(out.find("ZeRO-3"), std::string::npos) << out;
  EXPECT_NE(out.find("FLOP forward"), std::string::npos) << out;
  EXPECT_EQ(testing::cli("info " + config + " --batch -3", &out), 1) << out;
  EXPECT_EQ(testing::cli("info /nonexistent/x.yaml", &out), 1) << out;
}

}  // namespace
}  // namespace tessera
