// Saving compiled graphs and loading them without the model code (tessera::load).
#include <filesystem>
#include <fstream>
#include <regex>

#include "tessera/compile/compile.h"
#include "tessera/compile/model.h"
#include "tessera/compile/serialize.h"
#include "tessera/nn/zoo/zoo.h"
#include "test_util.h"

namespace tessera {
namespace {

using namespace compile;
namespace zoo = nn::zoo;

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void spit(const std::string& p, const std::string& s) { std::ofstream(p) << s; }

TEST(Serialize, GptRoundTripWithoutTheModelCode) {
  manual_seed(7);
  zoo::GPTConfig c;
  c.vocab_size = 16, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 8;
  auto gpt = std::make_shared<zoo::GPT>(c);
  gpt->eval();
  CaptureOptions o;
  o.dynamic = {{0, 0, "B"}, {0, 1, "T"}};
  o.input_names = {"ids"};
  Graph g = capture([&](const TensorList& in) { return TensorList{(*gpt)(in[0])}; }, {ops::randint(0, 16, {2, 5})},
                    gpt->named_parameters(), o);
  optimize(g);
  std::string dir = testing::scratch_dir("serialize") + "/gpt.tsr";
  save(g, dir);
  Model m = load(dir);
  EXPECT_EQ(dump(m.graph()), dump(g));
  ASSERT_EQ(m.inputs().size(), 1u);
  EXPECT_EQ(m.inputs()[0].name, "ids");
  EXPECT_EQ(m.inputs()[0].dtype, DType::I64);
  EXPECT_EQ(m.inputs()[0].shape, (std::vector<std::string>{"B", "T"}));
  EXPECT_EQ(m.outputs()[0].shape, (std::vector<std::string>{"B", "T", "16"}));
  for (auto [b, t] : {std::pair{2, 5}, {3, 9}}) {
    Tensor ids = ops::randint(0, 16, {b, t});
    EXPECT_CLOSE(m.run({ids})[0], (*gpt)(ids), 1e-6, 1e-6);
  }
  std::string e = testing::error_of([&] { m.run({ops::randn({2, 5})}); });
  EXPECT_NE(e.find("input 'ids' is f32[2, 5]; expected i64[B, T]"), std::string::npos) << e;
  std::filesystem::remove_all(testing::scratch_dir("serialize"));
}

TEST(Serialize, BadFilesGetClearErrors) {
  Graph g = capture([](const TensorList& in) { return TensorList{ops::add(ops::exp(in[0]), 0.5)}; },
                    {ops::randn({3})});
  std::string dir = testing::scratch_dir("serialize_bad") + "/m.tsr";
  save(g, dir);
  std::string good = slurp(dir + "/graph.json");
  auto with = [&](const std::string& text) {
    spit(dir + "/graph.json", text);
    return testing::error_of([&] { load(dir); });
  };
  EXPECT_NE(with(good.substr(0, good.size() / 2)).find("not valid JSON"), std::string::npos);
  std::string e = with(std::regex_replace(good, std::regex("\"exp\""), "\"system\""));
  EXPECT_NE(e.find("unknown op 'system'"), std::string::npos) << e;
  e = with(std::regex_replace(good, std::regex("\"version\": 1"), "\"version\": 7"));
  EXPECT_NE(e.find("format version 7 is not supported"), std::string::npos) << e;
  e = with(std::regex_replace(good, std::regex("\"f32\""), "\"f33\""));
  EXPECT_NE(e.find("unknown dtype \"f33\""), std::string::npos) << e;
  e = with("{\"format\": \"tessera-graph\", \"version\": 1, \"symbols\": [], \"inputs\": [], \"parameters\": [], "
           "\"constants\": [], \"nodes\": [{\"op\": \"exp\", \"inputs\": [5], \"outputs\": [], \"attrs\": []}], "
           "\"outputs\": []}");
  EXPECT_NE(e.find("node 0 (exp): input 5 is not defined before the node"), std::string::npos) << e;
  spit(dir + "/graph.json", good);
  std::filesystem::remove(dir + "/weights.safetensors");
  EXPECT_NE(testing::error_of([&] { load(dir); }).find("weights.safetensors"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { load(dir + "/nope"); }).find("does not exist"), std::string::npos);
  std::filesystem::remove_all(testing::scratch_dir("serialize_bad"));
}

}  // namespace
}  // namespace tessera
