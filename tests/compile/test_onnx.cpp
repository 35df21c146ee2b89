// ONNX: importing PyTorch 1.13's exports (tests/golden/make_onnx_fixtures.py),
// exporting every zoo model (the ONNX checker runs on each file), round trips,
// and clear errors for what cannot be read or written.
#include <fstream>

#include "tessera/compile/compile.h"
#include "tessera/compile/model.h"
#include "tessera/compile/onnx.h"
#include "tessera/io/npy.h"
#include "tessera/nn/zoo/zoo.h"
#include "test_util.h"

namespace tessera {
namespace {

using namespace compile;
namespace zoo = nn::zoo;

std::string fixture(const std::string& name) { return std::string(TESSERA_SOURCE_DIR) + "/tests/golden/onnx/" + name; }

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class TorchExport : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchExport, MatchesPyTorch) {
  const std::string& name = GetParam();
  Model m = load(fixture(name + ".onnx"));
  for (const char* pair : {"", "2"}) {
    Tensor x = io::load_npy(fixture(name + ".input" + pair + ".npy"));
    Tensor want = io::load_npy(fixture(name + ".output" + pair + ".npy"));
    EXPECT_CLOSE(m.run({x})[0], want, 1e-4, 1e-4) << name << " input" << pair;
  }
}
INSTANTIATE_TEST_SUITE_P(Onnx, TorchExport, ::testing::Values("mlp", "cnn", "resnet18", "encoder"));

TEST(OnnxImport, DynamicAxesBecomeDynamicDimensions) {
  Model m = load(fixture("encoder.onnx"));
  ASSERT_EQ(m.inputs().size(), 1u);
  EXPECT_EQ(m.inputs()[0].shape, (std::vector<std::string>{"N", "S", "32"}));
}

// Exports `module` (traced at `example`, dynamic dims as given), checks the
// file with ONNX's checker, imports it and compares with eager at two sizes.
void round_trip(const std::shared_ptr<nn::Module>& module, const Tensor& example, const Tensor& other,
                std::vector<DynamicDim> dynamic) {
  module->eval();
  CaptureOptions co;
  co.dynamic = std::move(dynamic);
  Graph g = capture([&](const TensorList& in) { return TensorList{(*module)(in[0])}; }, {example},
                    module->named_parameters(), co);
  optimize(g, {.disable = tessera_only_passes()});
  std::string bytes = onnx_bytes(g);  // runs onnx::checker
  Model m(import_onnx_bytes(bytes));
  // A batch of one runs too (the file's batch dimension is dynamic).
  Tensor one = ops::slice(other, 0, 0, 1).contiguous();
  for (const Tensor& x : {example, other, one}) EXPECT_CLOSE(m.run({x})[0], (*module)(x), 1e-4, 1e-5);
}

TEST(OnnxExport, ZooModelsRoundTrip) {
  manual_seed(11);
  round_trip(std::make_shared<zoo::MLP>(zoo::MLPConfig{20, {16, 16}, 4, "gelu", 0.1}), ops::randn({3, 20}),
             ops::randn({5, 20}), {{0, 0, "N"}});
  zoo::LeNetConfig lc;
  lc.image_size = 12;
  lc.channels = {4, 8};
  lc.hidden = 16;
  round_trip(std::make_shared<zoo::LeNet>(lc), ops::randn({2, 1, 12, 12}), ops::randn({4, 1, 12, 12}), {{0, 0, "N"}});
  zoo::ResNetConfig r18;
  r18.widths = {4, 8, 8, 16};
  auto resnet = std::make_shared<zoo::ResNet>(r18);
  round_trip(resnet, ops::randn({2, 3, 16, 16}), ops::randn({3, 3, 16, 16}), {{0, 0, "N"}});
  zoo::ResNetConfig r50 = zoo::ResNetConfig::resnet50();
  r50.layers = {1, 1, 1, 1};
  r50.widths = {4, 8, 8, 16};
  round_trip(std::make_shared<zoo::ResNet>(r50), ops::randn({2, 3, 16, 16}), ops::randn({3, 3, 16, 16}), {{0, 0, "N"}});
  zoo::GPTConfig gc;
  gc.vocab_size = 16, gc.block_size = 16, gc.n_layer = 2, gc.n_head = 2, gc.n_embd = 8;
  round_trip(std::make_shared<zoo::GPT>(gc), ops::randint(0, 16, {2, 5}), ops::randint(0, 16, {3, 9}),
             {{0, 0, "B"}, {0, 1, "T"}});
  zoo::LlamaConfig llc;
  llc.vocab_size = 16, llc.dim = 16, llc.n_layers = 2, llc.n_heads = 4, llc.n_kv_heads = 2, llc.hidden_dim = 24;
  llc.max_seq_len = 16;
  round_trip(std::make_shared<zoo::Llama>(llc), ops::randint(0, 16, {2, 5}), ops::randint(0, 16, {3, 9}),
             {{0, 0, "B"}, {0, 1, "T"}});
}

TEST(OnnxExport, UnsupportedOpNamesTheOpAndOpset) {
  Graph g = capture([](const TensorList& in) { return TensorList{ops::cumprod(in[0], 0)}; }, {ops::randn({4})});
  std::string e = testing::error_of([&] { onnx_bytes(g); });
  EXPECT_NE(e.find("op 'cumprod'"), std::string::npos) << e;
  EXPECT_NE(e.find("opset 17"), std::string::npos) << e;
}

TEST(OnnxImport, BadFilesGetClearErrors) {
  std::string good = slurp(fixture("mlp.onnx"));
  EXPECT_NE(testing::error_of([&] { import_onnx_bytes(good.substr(0, good.size() / 3)); }).find("not a valid ONNX file"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { import_onnx_bytes("hello"); }).find("not a valid ONNX file"), std::string::npos);
  std::string bad = good;
  size_t at = bad.find("\x22\x04Relu");  // NodeProto.op_type (field 4, length 4)
  ASSERT_NE(at, std::string::npos);
  bad.replace(at + 2, 4, "Relx");
  std::string e = testing::error_of([&] { import_onnx_bytes(bad, "mlp.onnx"); });
  EXPECT_NE(e.find("(Relx, opset 17): this operator is not supported"), std::string::npos) << e;
  EXPECT_NE(testing::error_of([&] { load("/nonexistent.onnx"); }).find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace tessera
