// `tessera quantize` end to end: a trained checkpoint becomes a quantized one
// that eval, info and the table agree on; layers the format cannot hold stay
// float and are listed; misuse is a clear error.
#include <filesystem>
#include <fstream>

#include "tessera/io/checkpoint.h"
#include "tessera/io/npy.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::cli;

TEST(CliQuantize, WritesAQuantizedCheckpointThatEvalReads) {
  std::string dir = testing::scratch_dir("cli_quantize"), out;
  std::string cfg = std::string(TESSERA_SOURCE_DIR) + "/examples/configs/fashion_mnist_mlp.yaml";
  ASSERT_EQ(cli("train " + cfg + " --output " + dir + "/run --set train.steps=20 --set train.eval_batches=2 --plain",
                &out), 0) << out;
  ASSERT_EQ(cli("quantize " + dir + "/run --method q4_0 --batches 4 --repeat 3", &out), 0) << out;
  // 784 inputs are 24.5 blocks of 32: the first layer stays float.
  EXPECT_NE(out.find("float: net.0"), std::string::npos) << out;
  EXPECT_NE(out.find("not a multiple of 32"), std::string::npos) << out;
  for (const char* row : {"model file", "accuracy", "loss", "batch 1 p50 (ms)", "batch 1 p90 (ms)", "batch 1 p99 (ms)"})
    EXPECT_NE(out.find(row), std::string::npos) << row << "\n" << out;
  const std::string q = dir + "/run/quantized/q4_0";
  ASSERT_TRUE(std::filesystem::exists(q + "/model.safetensors")) << out;
  EXPECT_LT(std::filesystem::file_size(q + "/model.safetensors"),
            std::filesystem::file_size(io::resolve_checkpoint("latest", dir + "/run/checkpoints") + "/model.safetensors"));
  ASSERT_EQ(cli("eval " + q + " --batches 4", &out), 0) << out;
  EXPECT_NE(out.find("accuracy"), std::string::npos) << out;
  ASSERT_EQ(cli("info " + q, &out), 0) << out;
  EXPECT_NE(out.find("\"format\":\"q4_0\""), std::string::npos) << out;
  EXPECT_NE(out.find("weight=q4_0"), std::string::npos) << out;  // the module tree shows the quantized layers

  // int4 groups with int8 activations, written where asked.
  ASSERT_EQ(cli("quantize " + dir + "/run --method weight-int4 --group 64 --activations int8 --batches 2 --repeat 2 "
                "--output " + dir + "/int4",
                &out), 0) << out;
  ASSERT_EQ(cli("eval " + dir + "/int4 --batches 2", &out), 0) << out;

  // Misuse.
  EXPECT_EQ(cli("quantize " + q + " --method q8_0", &out), 1);
  EXPECT_NE(out.find("already quantized"), std::string::npos) << out;

  // Static int8: an int8 graph that tessera run executes; a bad calibration file is an error naming the key.
  ASSERT_EQ(cli("quantize " + dir + "/run --method ptq-int8 --batches 4 --repeat 2", &out), 0) << out;
  EXPECT_NE(out.find("int8: 3 of 3 layers"), std::string::npos) << out;
  for (const char* row : {"model weights", "accuracy", "batch 64 p50 (ms)", "batch 64 p99 (ms)"})
    EXPECT_NE(out.find(row), std::string::npos) << row << "\n" << out;
  const std::string g = dir + "/run/quantized/ptq-int8.tsr";
  io::save_npy(dir + "/x.npy", zeros({3, 1, 28, 28}));
  ASSERT_EQ(cli("run " + g + " --input " + dir + "/x.npy --output " + dir + "/y.npy", &out), 0) << out;
  EXPECT_EQ(io::load_npy(dir + "/y.npy").shape(), (Shape{3, 10}));
  {
    std::ofstream f(dir + "/calib.yaml");
    f << "observer: percentile\npercentil: 99\n";
  }
  EXPECT_EQ(cli("quantize " + dir + "/run --method ptq-int8 --calibration " + dir + "/calib.yaml", &out), 1);
  EXPECT_NE(out.find("unknown key 'percentil'"), std::string::npos) << out;
  EXPECT_EQ(cli("quantize " + dir + "/run --method weight-int4 --group 48", &out), 1);
  EXPECT_NE(out.find("multiple of 32"), std::string::npos) << out;
  EXPECT_EQ(cli("quantize " + dir + "/run --method q8_0 --skip net.9", &out), 1);
  EXPECT_NE(out.find("'net.9'"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

// A language model end to end: its quantized checkpoint exports as a compiled
// graph (context dimension dynamic) that runs; ONNX names the op it cannot map.
TEST(CliQuantize, QuantizedGptExportsAndRuns) {
  std::string dir = testing::scratch_dir("cli_quantize_gpt"), out;
  std::string cfg = std::string(TESSERA_SOURCE_DIR) + "/examples/configs/char_gpt.yaml";
  ASSERT_EQ(cli("train " + cfg + " --output " + dir + "/run --set train.steps=2 --set scheduler.warmup_steps=1 --set train.eval_batches=1 --set "
                "model.n_layer=1 --set model.n_embd=64 --set model.n_head=2 --plain",
                &out), 0) << out;
  // `tessera generate` on the run: its GPT in the LLM engine, its character vocabulary.
  ASSERT_EQ(cli("generate " + dir + "/run -p 'The ' -n 16 --weights q8_0 --seed 1", &out), 0) << out;
  EXPECT_NE(out.find("(gpt2), 1 layers, width 64"), std::string::npos) << out;
  EXPECT_NE(out.find("decode: 16 tokens"), std::string::npos) << out;
  EXPECT_EQ(cli("generate " + dir + "/run -p '\xe2\x98\x83'", &out), 1) << out;  // a snowman: not in the fortunes
  EXPECT_NE(out.find("is not in the model's vocabulary"), std::string::npos) << out;
  // `tessera chat` on the run: the plain template, two turns from stdin.
  std::ofstream(dir + "/turns.txt") << "Who is it?\nWhy?\n";
  ASSERT_EQ(cli("chat " + dir + "/run -n 8 --seed 1 --ignore-eos < " + dir + "/turns.txt", &out), 0) << out;
  EXPECT_NE(out.find("chat template: the plain template"), std::string::npos) << out;
  EXPECT_NE(out.find("prefill: ", out.find("prefill: ") + 1), std::string::npos) << out;
  ASSERT_EQ(cli("quantize " + dir + "/run --method q8_0 --activations int8 --batches 2 --repeat 2", &out), 0) << out;
  EXPECT_NE(out.find("perplexity"), std::string::npos) << out;
  const std::string q = dir + "/run/quantized/q8_0";
  ASSERT_EQ(cli("export " + q + " --format tessera --output " + dir + "/q.tsr --dump", &out), 0) << out;
  EXPECT_NE(out.find("quantized_linear("), std::string::npos) << out;
  io::save_npy(dir + "/ids.npy", ops::randint(0, 20, {2, 40}, DType::I64));
  ASSERT_EQ(cli("run " + dir + "/q.tsr --input " + dir + "/ids.npy --output " + dir + "/y.npy", &out), 0) << out;
  EXPECT_EQ(io::load_npy(dir + "/y.npy").size(1), 40);
  EXPECT_EQ(cli("export " + q + " --format onnx --output " + dir + "/q.onnx", &out), 1);
  EXPECT_NE(out.find("'quantized_linear'"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

// `tessera prune`: rounds along the schedule, fine-tuning, and a pruned run
// whose checkpoints eval reads back with their masks.
TEST(CliPrune, PrunesFineTunesAndWritesARunEvalReads) {
  std::string dir = testing::scratch_dir("cli_prune"), out;
  std::string cfg = std::string(TESSERA_SOURCE_DIR) + "/examples/configs/fashion_mnist_mlp.yaml";
  ASSERT_EQ(cli("train " + cfg + " --output " + dir + "/run --set train.steps=20 --set train.eval_batches=2 --plain",
                &out), 0) << out;
  ASSERT_EQ(cli("prune " + dir + "/run --sparsity 0.8 --finetune-steps 10 --rounds 2 --global --batches 2 --repeat 2 "
                "--output " + dir + "/pruned",
                &out), 0) << out;
  EXPECT_NE(out.find("round 1/2: sparsity 0.7000"), std::string::npos) << out;  // 0.8 * (1 - 1/8)
  EXPECT_NE(out.find("round 2/2: sparsity 0.8000"), std::string::npos) << out;
  for (const char* row : {"nonzero weights", "accuracy", "batch 1 p50 (ms)", "compiled, batch 1 p99 (ms)"})
    EXPECT_NE(out.find(row), std::string::npos) << row << "\n" << out;
  ASSERT_EQ(cli("eval " + dir + "/pruned --batches 2", &out), 0) << out;
  ASSERT_EQ(cli("info " + dir + "/pruned", &out), 0) << out;
  // Structured pruning without fine-tuning writes a checkpoint directly.
  ASSERT_EQ(cli("prune " + dir + "/run --sparsity 0.5 --method structured --batches 2 --repeat 2 --output " + dir +
                "/structured", &out), 0) << out;
  ASSERT_EQ(cli("eval " + dir + "/structured --batches 2", &out), 0) << out;
  EXPECT_EQ(cli("prune " + dir + "/run --sparsity 1.5", &out), 1);
  EXPECT_NE(out.find("[0, 1)"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Quantization-aware training from the config, resumed, evaluated, and
// converted: the int8 graph scores what the fake-quantized model scored.
TEST(CliQuantize, QatRunTrainsResumesAndConverts) {
  std::string dir = testing::scratch_dir("cli_qat"), out;
  std::string cfg = std::string(TESSERA_SOURCE_DIR) + "/examples/configs/fashion_mnist_mlp.yaml";
  const std::string common = " --output " + dir + "/run --set train.eval_batches=2 --set qat.learn_scales=true --plain";
  ASSERT_EQ(cli("train " + cfg + common + " --set train.steps=10", &out), 0) << out;
  ASSERT_EQ(cli("train " + cfg + common + " --set train.steps=20 --resume latest", &out), 0) << out;
  ASSERT_EQ(cli("info " + dir + "/run", &out), 0) << out;
  EXPECT_NE(out.find("qat        {\"learn_scales\":true}"), std::string::npos) << out;
  ASSERT_EQ(cli("quantize " + dir + "/run --method ptq-int8 --batches 8 --repeat 2", &out), 0) << out;
  EXPECT_NE(out.find("quantization-aware run"), std::string::npos) << out;
  EXPECT_NE(out.find("before (QAT f32)"), std::string::npos) << out;
  // The accuracy row: QAT and int8 within a few images of 512.
  auto row = out.substr(out.find("accuracy"));
  double before = 0, after = 0;
  ASSERT_EQ(std::sscanf(row.c_str(), "accuracy %lf%% %lf%%", &before, &after), 2) << row;
  EXPECT_NEAR(after, before, 1.0) << out;
  EXPECT_EQ(cli("train " + cfg + " --output " + dir + "/bad --set train.steps=1 --set qat.observer=minmax --plain",
                &out), 1);
  EXPECT_NE(out.find("unknown key 'observer'"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
