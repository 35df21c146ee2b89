// Weight-only quantization of Linear layers: the op against the dequantized
// weight, gradients, state dicts, graph capture, and the layers that stay float.
#include <gtest/gtest.h>

#include <cstring>

#include "tessera/compile/compile.h"
#include "tessera/core/half.h"
#include "tessera/nn/nn.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/quant/weights.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::error_of;

struct Fmt {
  const char* format;
  int64_t group;
};
const Fmt kFormats[] = {{"q8_0", 0}, {"q4_0", 0}, {"int8", 0}, {"int4", 32}, {"int4", 64}};

std::shared_ptr<nn::Linear> quantized_linear(int64_t in, int64_t out, const Fmt& f, const char* act = "float") {
  manual_seed(3);
  auto l = std::make_shared<nn::Linear>(in, out);
  quant::quantize_weights(*l, {.format = f.format, .group = f.group, .activations = act});
  return l;
}

Tensor dequantized(const nn::Linear& l) {
  const auto& q = *l.quantized;
  return ops::dequantize_weight(q.qweight, q.scales, q.mins, q.format, q.group);
}

// With float activations the layer is exactly linear() with the dequantized weight.
TEST(QuantizeWeights, LinearMatchesItsDequantizedWeight) {
  for (const Fmt& f : kFormats) {
    SCOPED_TRACE(std::string(f.format) + " g" + std::to_string(f.group));
    auto l = quantized_linear(128, 40, f);
    ASSERT_TRUE(l->quantized);
    EXPECT_FALSE(l->weight.defined());
    for (int64_t batch : {1, 5, 33}) {  // register decoding (<= 16 rows) and the GEMM path
      Tensor x = ops::randn({batch, 128});
      Tensor want = ops::linear(x, dequantized(*l), l->bias);
      EXPECT_CLOSE((*l)(x), want, 1e-4, 1e-5);
    }
    Tensor x3 = ops::randn({2, 3, 128});  // leading dims
    EXPECT_CLOSE((*l)(x3), ops::linear(x3, dequantized(*l), l->bias), 1e-4, 1e-5);
  }
}

// int8 activations: a second rounding, bounded by the activation step.
TEST(QuantizeWeights, Int8ActivationsStayCloseToFloat) {
  for (const Fmt& f : kFormats) {
    SCOPED_TRACE(f.format);
    auto l = quantized_linear(256, 64, f, "int8");
    Tensor x = ops::randn({3, 256});
    Tensor want = ops::linear(x, dequantized(*l), l->bias);
    Tensor got = (*l)(x);
    double scale = want.abs().max().item<float>();
    double err = (got - want).abs().max().item<float>();
    EXPECT_LT(err, 0.02 * scale);
    EXPECT_GT(err, 0.0);  // it really took the integer path
  }
}

// dx = dy @ W (dequantized), checked in f64 against the same product; the bias gets dy summed.
TEST(QuantizeWeights, GradientsFlowToInputAndBias) {
  auto l = quantized_linear(64, 24, {"int4", 32});
  Tensor x = testing::rand_f64({4, 64}).requires_grad_();
  Tensor y = (*l)(x.to(DType::F32));
  Tensor gy = ops::randn({4, 24});
  autograd::backward({y}, {gy});
  Tensor w = dequantized(*l).to(DType::F64);
  EXPECT_CLOSE(x.grad(), ops::matmul(gy.to(DType::F64), w), 1e-5, 1e-6);
  EXPECT_CLOSE(l->bias.grad(), gy.sum({0}), 1e-5, 1e-6);
}

TEST(QuantizeWeights, StateDictRoundTripsAndToKeepsScales) {
  nn::zoo::GPTConfig c{.vocab_size = 40, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 64};
  manual_seed(1);
  auto a = std::make_shared<nn::zoo::GPT>(c);
  a->eval();
  quant::WeightQuantConfig qc{.format = "int4", .group = 32};
  auto rep = quant::quantize_weights(*a, qc);
  EXPECT_EQ(rep.quantized.size(), 8u);  // 4 Linear per block; the head is tied to wte
  EXPECT_LT(rep.bytes_after * 5, rep.bytes_before);
  auto sd = a->state_dict();
  ASSERT_NE(sd.find("transformer.h.0.mlp.c_fc.qweight"), nullptr);
  ASSERT_NE(sd.find("transformer.h.0.mlp.c_fc.weight_mins"), nullptr);
  EXPECT_EQ(sd.find("transformer.h.0.mlp.c_fc.weight"), nullptr);

  manual_seed(2);
  auto b = std::make_shared<nn::zoo::GPT>(c);
  b->eval();
  quant::quantize_weights(*b, qc);
  b->load_state_dict(sd);
  Tensor ids = ops::randint(0, 40, {2, 16}, DType::I64);
  EXPECT_CLOSE((*b)(ids), (*a)(ids), 0, 0);

  a->to(DType::BF16);  // floats convert; the format's f16 scales do not
  EXPECT_EQ(a->state_dict().find("transformer.h.0.mlp.c_fc.weight_scales")->dtype(), DType::F16);
  EXPECT_EQ((*a)(ids).dtype(), DType::BF16);
}

// A quantized model close to its float self, and its compiled graph equal to eager.
TEST(QuantizeWeights, QuantizedGptTracksFloatAndCompiles) {
  nn::zoo::GPTConfig c{.vocab_size = 40, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 64};
  manual_seed(1);
  auto m = std::make_shared<nn::zoo::GPT>(c);
  m->eval();
  NoGradGuard ng;
  Tensor ids = ops::randint(0, 40, {2, 16}, DType::I64);
  Tensor ref = (*m)(ids);
  quant::quantize_weights(*m, {.format = "q8_0"});
  Tensor q = (*m)(ids);
  double err = (q - ref).abs().max().item<float>(), scale = ref.abs().max().item<float>();
  EXPECT_LT(err, 0.02 * scale);
  auto f = compile::compile(m);
  EXPECT_CLOSE(f(ids), q, 1e-5, 1e-5);
}

TEST(QuantizeWeights, UnfitLayersStayFloatAndAreListed) {
  nn::Sequential s;
  s.push_back(std::make_shared<nn::Linear>(96, 8));
  s.push_back(std::make_shared<nn::Linear>(8, 8));    // 8 is not a multiple of 32
  s.push_back(std::make_shared<nn::Linear>(96, 96));  // skipped by name below
  auto rep = quant::quantize_weights(s, {.format = "q4_0", .skip = {"2"}});
  ASSERT_EQ(rep.quantized, std::vector<std::string>{"0"});
  ASSERT_EQ(rep.kept.size(), 2u);
  EXPECT_EQ(rep.kept[0].first, "1");
  EXPECT_NE(rep.kept[0].second.find("not a multiple of 32"), std::string::npos) << rep.kept[0].second;
  EXPECT_EQ(rep.kept[1].second, "skipped by the config");
  EXPECT_NE(rep.str().find("float: 1"), std::string::npos) << rep.str();
}

TEST(QuantizeWeights, BadConfigsAreClearErrors) {
  nn::Linear l(96, 8);
  EXPECT_NE(error_of([&] { quant::quantize_weights(l, {.format = "q5_k"}); }).find("expected one of"), std::string::npos);
  EXPECT_NE(error_of([&] { quant::quantize_weights(l, {.format = "int4", .group = 48}); }).find("multiple of 32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { quant::quantize_weights(l, {.format = "int8", .skip = {"nope"}}); }).find("'nope'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { quant::quantize_weights(l, {.activations = "int4"}); }).find("'float' or 'int8'"),
            std::string::npos);
  EXPECT_FALSE(l.quantized);  // nothing changed
  // The op checks its tensors against the format.
  auto q = quant::quantize_weight(l.weight, "int4", 32);
  EXPECT_NE(error_of([&] { ops::quantized_linear(ops::randn({1, 96}), q.qweight, q.scales, Tensor(), Tensor(), "int4", 32); })
                .find("'mins'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ops::quantized_linear(ops::randn({1, 64}), q.qweight, q.scales, q.mins, Tensor(), "int4", 32); })
                .find("in_features 96"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ops::quantized_linear(ops::randn({1, 96}), q.qweight, q.scales, q.mins, Tensor(), "int4", 64); })
                .find("does not divide the input dimension 96"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(QuantizeWeights, ConfigRoundTripsThroughJsonAndRejectsBadFields) {
  quant::WeightQuantConfig c{.format = "int4", .group = 64, .activations = "int8", .skip = {"lm_head"}};
  quant::WeightQuantConfig d = quant::weight_quant_config_from_json(quant::to_json(c));
  EXPECT_EQ(d.format, "int4");
  EXPECT_EQ(d.group, 64);
  EXPECT_EQ(d.activations, "int8");
  EXPECT_EQ(d.skip, std::vector<std::string>{"lm_head"});
  using nlohmann::json;
  EXPECT_NE(error_of([] { quant::weight_quant_config_from_json(json{{"format", "q3"}}); }).find("q3"), std::string::npos);
  EXPECT_NE(error_of([] { quant::weight_quant_config_from_json(json{{"bits", 4}}); }).find("unknown key 'bits'"),
            std::string::npos);
  EXPECT_NE(error_of([] { quant::weight_quant_config_from_json(json{{"group", "32"}}); }).find("quantization.group"),
            std::string::npos);
  EXPECT_NE(error_of([] { quant::weight_quant_config_from_json(json::array()); }).find("expected an object"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// A damaged file: a NaN scale is an error naming the layer, not NaN logits.
TEST(QuantizeWeights, NonFiniteScalesAreFoundAfterLoading) {
  for (const char* format : {"q8_0", "int8", "int4"}) {
    SCOPED_TRACE(format);
    nn::Sequential s;
    s.push_back(std::make_shared<nn::Linear>(64, 8));
    quant::quantize_weights(s, {.format = format});
    quant::check_quantized_weights(s);  // fresh weights pass
    auto& q = *dynamic_cast<nn::Linear&>(s.submodule("0")).quantized;
    if (q.scales.defined()) {
      Tensor bad = q.scales.to(DType::F32);
      bad.data_ptr<float>()[3] = NAN;
      q.scales.copy_(bad);
    } else {
      uint16_t nan_h = Half::from_float(NAN);
      std::memcpy(static_cast<uint8_t*>(q.qweight.raw_data()) + 2 * q.qweight.size(1), &nan_h, 2);  // row 2, block 0
    }
    std::string e = error_of([&] { quant::check_quantized_weights(s); });
    EXPECT_NE(e.find("quantized weights of '0'"), std::string::npos) << e;
    EXPECT_NE(e.find("must be finite"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace tessera
