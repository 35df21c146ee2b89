// Every layer, loss and zoo model against PyTorch 1.13: tests/golden/layers.safetensors
// (written by tests/golden/generate_train.py) holds, per case, the inputs, the
// state_dict, the output, the cotangent v and the gradients of sum(out * v).
// Each case's metadata (type, args, train, call) is mirrored by make_case below.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tessera/io/safetensors.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"
#include "test_util.h"

using namespace tessera;
using nlohmann::json;
namespace test = tessera::testing;

namespace {

struct Case {
  nn::ModulePtr module;
  std::function<Tensor(const TensorList&)> run;
};

template <typename T>
T arg(const json& a, const char* k, T fallback) {
  return a.contains(k) && !a[k].is_null() ? a[k].get<T>() : fallback;
}

nn::Int2 int2(const json& a, const char* k, nn::Int2 fallback) {
  if (!a.contains(k) || a[k].is_null()) return fallback;
  if (a[k].is_array()) return nn::Int2(a[k][0].get<int64_t>(), a[k][1].get<int64_t>());
  return nn::Int2(a[k].get<int64_t>());
}

std::vector<int64_t> ints(const json& v) {
  if (v.is_array()) return v.get<std::vector<int64_t>>();
  return {v.get<int64_t>()};
}

template <typename M>
Case single(std::shared_ptr<M> m) {
  return {m, [m](const TensorList& in) { return (*m)(in[0]); }};
}

template <typename M>
Case loss(std::shared_ptr<M> m) {
  return {m, [m](const TensorList& in) { return (*m)(in[0], in[1]); }};
}

Case make_case(const std::string& type, const json& a, const json& call) {
  using namespace nn;
  if (type == "Linear")
    return single(std::make_shared<Linear>(a["in_features"], a["out_features"], arg(a, "bias", true)));
  if (type == "Bilinear") {
    auto m = std::make_shared<Bilinear>(a["in1_features"], a["in2_features"], a["out_features"], arg(a, "bias", true));
    return {m, [m](const TensorList& in) { return m->forward(in[0], in[1]); }};
  }
  if (type == "Conv1d")
    return single(std::make_shared<Conv1d>(a["in_channels"], a["out_channels"], a["kernel_size"], arg<int64_t>(a, "stride", 1),
                                           Padding(arg<int64_t>(a, "padding", 0)), arg<int64_t>(a, "dilation", 1),
                                           arg<int64_t>(a, "groups", 1), arg(a, "bias", true)));
  if (type == "Conv2d") {
    Int2 p = int2(a, "padding", 0);
    return single(std::make_shared<Conv2d>(a["in_channels"], a["out_channels"], int2(a, "kernel_size", 1),
                                           int2(a, "stride", 1), Padding(p.h, p.w), int2(a, "dilation", 1),
                                           arg<int64_t>(a, "groups", 1), arg(a, "bias", true)));
  }
  if (type == "ConvTranspose2d")
    return single(std::make_shared<ConvTranspose2d>(
        a["in_channels"], a["out_channels"], int2(a, "kernel_size", 1), int2(a, "stride", 1), int2(a, "padding", 0),
        int2(a, "output_padding", 0), arg<int64_t>(a, "groups", 1), arg(a, "bias", true), int2(a, "dilation", 1)));
  if (type == "BatchNorm1d" || type == "BatchNorm2d") {
    std::optional<double> mom;
    if (!a.contains("momentum") || !a["momentum"].is_null()) mom = arg(a, "momentum", 0.1);
    if (type == "BatchNorm1d")
      return single(std::make_shared<BatchNorm1d>(a["num_features"], arg(a, "eps", 1e-5), mom, arg(a, "affine", true),
                                                  arg(a, "track_running_stats", true)));
    return single(std::make_shared<BatchNorm2d>(a["num_features"], arg(a, "eps", 1e-5), mom, arg(a, "affine", true),
                                                arg(a, "track_running_stats", true)));
  }
  if (type == "LayerNorm")
    return single(std::make_shared<LayerNorm>(ints(a["normalized_shape"]), arg(a, "eps", 1e-5),
                                              arg(a, "elementwise_affine", true)));
  if (type == "RMSNorm")
    return single(std::make_shared<RMSNorm>(ints(a["normalized_shape"]), arg(a, "eps", 1e-6)));
  if (type == "GroupNorm")
    return single(std::make_shared<GroupNorm>(a["num_groups"], a["num_channels"], arg(a, "eps", 1e-5),
                                              arg(a, "affine", true)));
  if (type == "Embedding") {
    std::optional<int64_t> pad;
    if (a.contains("padding_idx") && !a["padding_idx"].is_null()) pad = a["padding_idx"].get<int64_t>();
    return single(std::make_shared<Embedding>(a["num_embeddings"], a["embedding_dim"], pad));
  }
  if (type == "MaxPool2d")
    return single(std::make_shared<MaxPool2d>(int2(a, "kernel_size", 1), int2(a, "stride", 0), int2(a, "padding", 0),
                                              int2(a, "dilation", 1), arg(a, "ceil_mode", false)));
  if (type == "AvgPool2d")
    return single(std::make_shared<AvgPool2d>(int2(a, "kernel_size", 1), int2(a, "stride", 0), int2(a, "padding", 0),
                                              arg(a, "ceil_mode", false), arg(a, "count_include_pad", true)));
  if (type == "AdaptiveAvgPool2d") return single(std::make_shared<AdaptiveAvgPool2d>(int2(a, "output_size", 1)));
  if (type == "Flatten")
    return single(std::make_shared<Flatten>(arg<int64_t>(a, "start_dim", 1), arg<int64_t>(a, "end_dim", -1)));
  if (type == "Unflatten") return single(std::make_shared<Unflatten>(a["dim"], ints(a["unflattened_size"])));
  if (type == "ReLU") return single(std::make_shared<ReLU>());
  if (type == "GELU") return single(std::make_shared<GELU>(arg<std::string>(a, "approximate", "none")));
  if (type == "SiLU") return single(std::make_shared<SiLU>());
  if (type == "Tanh") return single(std::make_shared<Tanh>());
  if (type == "Sigmoid") return single(std::make_shared<Sigmoid>());
  if (type == "Mish") return single(std::make_shared<Mish>());
  if (type == "LeakyReLU") return single(std::make_shared<LeakyReLU>(arg(a, "negative_slope", 0.01)));
  if (type == "ELU") return single(std::make_shared<ELU>(arg(a, "alpha", 1.0)));
  if (type == "Softplus") return single(std::make_shared<Softplus>(arg(a, "beta", 1.0), arg(a, "threshold", 20.0)));
  if (type == "Hardtanh") return single(std::make_shared<Hardtanh>(arg(a, "min_val", -1.0), arg(a, "max_val", 1.0)));
  if (type == "Softmax") return single(std::make_shared<Softmax>(a["dim"]));
  if (type == "LogSoftmax") return single(std::make_shared<LogSoftmax>(a["dim"]));
  if (type == "MultiheadAttention") {
    auto m = std::make_shared<MultiheadAttention>(a["embed_dim"], a["num_heads"], arg(a, "dropout", 0.0),
                                                  arg(a, "bias", true), arg(a, "batch_first", false));
    const bool causal = arg(call, "causal", false);
    return {m, [m, causal](const TensorList& in) {
              return m->forward(in[0], in[1], in[2], in.size() > 3 ? in[3] : Tensor(), Tensor(), causal);
            }};
  }
  if (type == "TransformerEncoderLayer") {
    auto m = std::make_shared<TransformerEncoderLayer>(
        a["d_model"], a["nhead"], arg<int64_t>(a, "dim_feedforward", 2048), arg(a, "dropout", 0.1),
        arg<std::string>(a, "activation", "relu"), arg(a, "layer_norm_eps", 1e-5), arg(a, "batch_first", false),
        arg(a, "norm_first", false));
    const bool causal = arg(call, "causal", false);
    return {m, [m, causal](const TensorList& in) { return m->forward(in[0], Tensor(), Tensor(), causal); }};
  }
  if (type == "DecoderBlock")
    return single(std::make_shared<DecoderBlock>(a["d_model"], a["n_head"], arg(a, "bias", true)));
  if (type == "CrossEntropyLoss")
    return loss(std::make_shared<CrossEntropyLoss>(Tensor(), -100, arg<std::string>(a, "reduction", "mean"),
                                                   arg(a, "label_smoothing", 0.0)));
  if (type == "NLLLoss") return loss(std::make_shared<NLLLoss>(Tensor(), -100, arg<std::string>(a, "reduction", "mean")));
  if (type == "MSELoss") return loss(std::make_shared<MSELoss>(arg<std::string>(a, "reduction", "mean")));
  if (type == "L1Loss") return loss(std::make_shared<L1Loss>(arg<std::string>(a, "reduction", "mean")));
  if (type == "SmoothL1Loss")
    return loss(std::make_shared<SmoothL1Loss>(arg<std::string>(a, "reduction", "mean"), arg(a, "beta", 1.0)));
  if (type == "BCELoss") return loss(std::make_shared<BCELoss>(Tensor(), arg<std::string>(a, "reduction", "mean")));
  if (type == "BCEWithLogitsLoss")
    return loss(std::make_shared<BCEWithLogitsLoss>(Tensor(), arg<std::string>(a, "reduction", "mean")));
  if (type == "KLDivLoss")
    return loss(std::make_shared<KLDivLoss>(arg<std::string>(a, "reduction", "mean"), arg(a, "log_target", false)));
  if (type == "MLP") {
    zoo::MLPConfig c;
    c.in_features = a["in_features"];
    c.hidden = a["hidden"].get<std::vector<int64_t>>();
    c.num_classes = a["num_classes"];
    return single(std::make_shared<zoo::MLP>(c));
  }
  if (type == "LeNet") {
    zoo::LeNetConfig c;
    c.channels = a["channels"].get<std::vector<int64_t>>();
    c.hidden = a["hidden"];
    c.num_classes = a["num_classes"];
    c.dropout = 0;
    return single(std::make_shared<zoo::LeNet>(c));
  }
  if (type == "ResNet") {
    zoo::ResNetConfig c;
    c.block = a["block"];
    c.layers = a["layers"].get<std::vector<int64_t>>();
    c.widths = a["widths"].get<std::vector<int64_t>>();
    c.stem = a["stem"];
    c.num_classes = a["num_classes"];
    return single(std::make_shared<zoo::ResNet>(c));
  }
  if (type == "GPT") {
    zoo::GPTConfig c;
    c.vocab_size = a["vocab_size"];
    c.block_size = a["block_size"];
    c.n_layer = a["n_layer"];
    c.n_head = a["n_head"];
    c.n_embd = a["n_embd"];
    c.dropout = a["dropout"];
    c.bias = a["bias"];
    return single(std::make_shared<zoo::GPT>(c));
  }
  if (type == "Llama") {
    zoo::LlamaConfig c;
    c.vocab_size = a["vocab_size"];
    c.dim = a["dim"];
    c.n_layers = a["n_layers"];
    c.n_heads = a["n_heads"];
    c.n_kv_heads = a["n_kv_heads"];
    c.hidden_dim = a["hidden_dim"];
    c.norm_eps = a["norm_eps"];
    c.rope_theta = a["rope_theta"];
    c.max_seq_len = a["max_seq_len"];
    c.tie_embeddings = a["tie_embeddings"];
    return single(std::make_shared<zoo::Llama>(c));
  }
  return {};
}

}  // namespace

TEST(NNGolden, EveryLayerAndModelMatchesPyTorch) {
  auto file = io::SafetensorsFile::open(std::string(TESSERA_GOLDEN_DIR) + "/layers.safetensors");
  int passed = 0;
  std::vector<std::string> unsupported;
  for (auto& [name, meta_text] : file.metadata()) {
    SCOPED_TRACE(name);
    json meta = json::parse(meta_text);
    Case c = make_case(meta["type"], meta["args"], meta["call"]);
    if (!c.module) {
      unsupported.push_back(name);
      continue;
    }
    const bool f32 = meta.value("dtype", "f64") == "f32";
    const double tol = f32 ? 2e-4 : 1e-9;
    c.module->to(f32 ? DType::F32 : DType::F64);
    c.module->train(meta["train"].get<bool>());
    nn::StateDict sd;
    const std::string pp = name + "/param/";
    for (auto& n : file.names())
      if (n.rfind(pp, 0) == 0) sd.entries.emplace_back(n.substr(pp.size()), file.get(n).clone());
    auto r = c.module->load_state_dict(sd, false);
    // PyTorch keeps no rope tables; everything else must match name for name.
    EXPECT_TRUE(r.unexpected.empty()) << r.unexpected.front();
    for (auto& m : r.missing) EXPECT_TRUE(m.find("rope_") != std::string::npos) << "missing " << m;

    TensorList inputs;
    for (int i = 0;; ++i) {
      std::string k = name + "/in" + std::to_string(i);
      if (!file.contains(k)) break;
      Tensor t = file.get(k).clone();
      if (t.is_floating_point() && file.contains(name + "/grad/in" + std::to_string(i))) t.requires_grad_();
      inputs.push_back(t);
    }
    Tensor out = c.run(inputs);
    Tensor expect = file.get(name + "/out");
    ASSERT_EQ(shape_str(out.shape()), shape_str(expect.shape()));
    EXPECT_TRUE(test::all_close(out, expect, tol, tol)) << "output differs";
    ops::sum(ops::mul(out, file.get(name + "/v"))).backward();
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::string k = name + "/grad/in" + std::to_string(i);
      if (!file.contains(k)) continue;
      ASSERT_TRUE(inputs[i].grad().defined()) << k;
      EXPECT_TRUE(test::all_close(inputs[i].grad(), file.get(k), tol, tol)) << k;
    }
    for (auto& [pname, p] : c.module->named_parameters()) {
      std::string k = name + "/grad/param/" + pname;
      if (!file.contains(k)) continue;
      ASSERT_TRUE(p.grad().defined()) << k;
      EXPECT_TRUE(test::all_close(p.grad(), file.get(k), tol, tol)) << k;
    }
    for (auto& [bname, b] : c.module->named_buffers()) {
      std::string k = name + "/after/" + bname;
      if (file.contains(k)) EXPECT_TRUE(test::all_close(b, file.get(k).to(b.dtype()), tol, tol)) << k;
    }
    ++passed;
  }
  EXPECT_TRUE(unsupported.empty()) << "no C++ twin for " << unsupported.size() << " cases, e.g. " << unsupported[0];
  EXPECT_GE(passed, 100);
  std::printf("[NNGolden] %d cases match PyTorch\n", passed);
}
