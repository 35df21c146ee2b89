// LoRA (llm/lora.h, Note [LoRA]): the layer's gradients by finite
// differences in f64; fine-tuning lowers the loss with the base frozen; an
// adapter read back from its GGUF and its PEFT files, served by the engine,
// equals the merged-weight model; requests with different adapters in one
// batch equal their solo runs; bad adapter files are errors that say why.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "llm_fixture.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/io/safetensors.h"
#include "tessera/llm/gguf.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/llm/lora.h"
#include "tessera/llm/lora_adapter.h"
#include "tessera/llm/scheduler.h"
#include "tessera/nn/init.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/optimizer.h"
#include "test_util.h"

namespace tessera {
namespace {

// The largest difference between two f32 tensors of one shape.
double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const Tensor x = a.detach().contiguous(), y = b.detach().contiguous();
  double d = 0;
  for (int64_t i = 0; i < x.numel(); ++i)
    d = std::max(d, static_cast<double>(std::abs(x.data_ptr<float>()[i] - y.data_ptr<float>()[i])));
  return d;
}

TEST(Lora, LinearGradientsMatchFiniteDifferences) {
  manual_seed(3);
  nn::Linear lin(5, 4);
  lin.add_lora(2, 6.0);
  EXPECT_FALSE(lin.weight.requires_grad());
  EXPECT_FALSE(lin.bias.requires_grad());
  // B starts at zero: the layer computes what it did.
  const Tensor x = ops::randn({3, 5});
  {
    NoGradGuard g;
    EXPECT_EQ(max_diff(lin.forward(x), ops::linear(x, lin.weight, lin.bias)), 0);
  }
  const auto f64 = [](const Tensor& t) { return t.detach().to(DType::F64).requires_grad_(true); };
  const Tensor w = lin.weight.detach().to(DType::F64), b = lin.bias.detach().to(DType::F64);
  const testing::Fn fn = [&](const TensorList& in) {
    lin.weight = w;
    lin.bias = b;
    lin.lora->A = in[1];
    lin.lora->B = in[2];
    return lin.forward(in[0]);
  };
  EXPECT_TRUE(testing::gradcheck(fn, TensorList{f64(x), f64(ops::randn({2, 5})), f64(ops::randn({4, 2}))}));
}

// Sequences of the fixture's tokens for a model to learn.
Tensor batch_of(int64_t rows, int64_t len) {
  Tensor t = empty({rows, len}, TensorOptions(DType::I64));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < len; ++i) t.data_ptr<int64_t>()[r * len + i] = 3 + (r * 5 + i * 3) % 11;
  return t;
}

TEST(Lora, TrainingLowersTheLossAndKeepsTheBase) {
  nn::zoo::Llama* m = nullptr;
  testing::fixture(&m, 2, 64);
  const nn::StateDict before = m->state_dict();
  llm::add_lora(*m, {.rank = 4, .alpha = 8, .targets = {"q_proj", "v_proj", "up_proj", "down_proj"}});
  std::vector<Tensor> trainable;
  for (auto& p : m->parameters())
    if (p.requires_grad()) trainable.push_back(p);
  EXPECT_EQ(trainable.size(), 2u * 4 * 2);  // A and B, 4 projections, 2 layers
  auto opt = optim::make_optimizer("adam", {{trainable, {}}}, {{"lr", 0.01}});
  const Tensor ids = batch_of(4, 24);
  const Tensor inputs = ids.slice(1, 0, 23), targets = ids.slice(1, 1, 24).contiguous();
  auto loss_of = [&] {
    const Tensor logits = m->forward(inputs);
    return ops::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
  };
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    opt->zero_grad();
    Tensor loss = loss_of();
    loss.backward();
    opt->step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first - 1.0) << "from " << first << " to " << last;
  // Only the pairs moved.
  for (const auto& [name, t] : before.entries) {
    const nn::StateDict now = m->state_dict();
    ASSERT_NE(now.find(name), nullptr) << name;
    EXPECT_EQ(max_diff(*now.find(name), t), 0) << name << " changed";
  }
}

// A fixture Llama with LoRA pairs on every projection, B random (as after training).
nn::zoo::Llama* adapted(uint64_t seed) {
  nn::zoo::Llama* m = nullptr;
  testing::fixture(&m, 2, 64);
  llm::add_lora(*m, {.rank = 4, .alpha = 8,
                     .targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}});
  manual_seed(seed);
  NoGradGuard g;
  for (auto& [name, p] : m->named_parameters())
    if (name.find("lora_B") != std::string::npos) nn::init::normal_(p, 0, 0.05);
  return m;
}

// Greedy tokens of `engine` from `prompt`, and every step's logits.
struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};
Greedy greedy(llm::Engine& e, const std::vector<int32_t>& prompt, const llm::Adapter* adapter, int n) {
  Greedy r;
  const int64_t seq = e.add_sequence();
  std::vector<int32_t> feed = prompt;
  for (int i = 0; i < n; ++i) {
    const llm::Chunk c{seq, feed, 1, adapter};
    const std::span<const float> l = e.step({&c, 1});
    r.logits.emplace_back(l.begin(), l.end());
    const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    r.tokens.push_back(next);
    feed = {next};
  }
  e.remove_sequence(seq);
  return r;
}

double log_softmax_at(const std::vector<float>& l, size_t i) {
  double mx = *std::max_element(l.begin(), l.end()), s = 0;
  for (float v : l) s += std::exp(v - mx);
  return l[i] - mx - std::log(s);
}

TEST(Lora, ServedAdapterEqualsMergedWeights) {
  nn::zoo::Llama* m = adapted(5);
  const std::string dir = testing::scratch_dir("lora_files");
  std::filesystem::create_directories(dir);
  llm::save_lora_gguf(*m, dir + "/adapter.gguf");
  llm::save_lora_peft(*m, dir + "/peft");
  const auto base = llm::model_from_llama(*m);  // the pairs are not the model's weights
  llm::merge_lora(*m);
  EXPECT_FALSE(llm::has_lora(*m));
  const auto merged = llm::model_from_llama(*m);
  const std::vector<int32_t> prompt = {1, 5, 9, 14, 3, 7, 7, 20};
  llm::Engine me(merged, {.max_sequences = 1});
  const Greedy want = greedy(me, prompt, nullptr, 16);
  for (const std::string file : {"/adapter.gguf", "/peft/adapter_model.safetensors"}) {
    SCOPED_TRACE(file);
    const auto adapter = llm::LoraAdapter::load(dir + file, base->spec());
    EXPECT_EQ(adapter->pairs(), 2 * 7);
    llm::Engine be(base, {.max_sequences = 1});
    const Greedy got = greedy(be, prompt, adapter.get(), 16);
    EXPECT_EQ(got.tokens, want.tokens);
    double worst = 0;
    for (size_t s = 0; s < got.logits.size(); ++s) {
      const size_t t = static_cast<size_t>(want.tokens[s]);
      worst = std::max(worst, std::abs(log_softmax_at(got.logits[s], t) - log_softmax_at(want.logits[s], t)));
    }
    EXPECT_LT(worst, 1e-4);
    // Without the adapter the base model answers otherwise.
    EXPECT_NE(greedy(be, prompt, nullptr, 16).tokens, want.tokens);
  }
  // PEFT's layout, as Hugging Face's tools read it.
  const io::SafetensorsFile peft = io::SafetensorsFile::open(dir + "/peft/adapter_model.safetensors");
  EXPECT_TRUE(peft.contains("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"));
  EXPECT_EQ(peft.get("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight").shape(), (Shape{64, 4}));
  std::filesystem::remove_all(dir);
}

std::map<int64_t, std::vector<int32_t>> drain(llm::Scheduler& s) {
  std::map<int64_t, std::vector<int32_t>> out;
  while (s.has_work())
    for (const llm::RequestEvent& ev : s.step())
      if (ev.has_token) out[ev.id].push_back(ev.token);
  return out;
}

TEST(Lora, MixedAdapterBatchesEqualSoloRuns) {
  const std::string dir = testing::scratch_dir("lora_mixed");
  std::filesystem::create_directories(dir);
  llm::save_lora_gguf(*adapted(7), dir + "/a.gguf");
  nn::zoo::Llama* m = adapted(8);
  llm::save_lora_gguf(*m, dir + "/b.gguf");
  const auto model = llm::model_from_llama(*m);
  const testing::Fixture f = testing::fixture(nullptr, 2, 64);  // the fixture's tokenizer
  const auto a = llm::LoraAdapter::load(dir + "/a.gguf", model->spec());
  const auto b = llm::LoraAdapter::load(dir + "/b.gguf", model->spec());
  const llm::Adapter* which[] = {a.get(), b.get(), nullptr, a.get(), b.get()};
  auto options = [&](int i) {
    llm::RequestOptions o;
    o.adapter = which[i];
    o.max_tokens = 10 + i;
    o.ignore_eos = true;
    o.sampling.temperature = i == 3 ? 1.1f : 0.f;  // one seeded sampled request too
    o.sampling.seed = 40 + i;
    return o;
  };
  auto prompt = [](int i) {
    std::vector<int32_t> p = {1};
    for (int k = 0; k < 20; ++k) p.push_back(3 + (i * 17 + k * 5) % 200);  // shared 16-token blocks differ by adapter
    return p;
  };
  llm::Engine e(model, {.max_batch_tokens = 64, .max_sequences = 5, .prefix_caching = true});
  llm::Scheduler together(e, f.tok, {});
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(together.submit(prompt(i % 2), options(i)));  // prompts repeat
  const auto all = drain(together);
  for (int i = 0; i < 5; ++i) {
    llm::Engine se(model, {.max_batch_tokens = 64, .max_sequences = 1});
    llm::Scheduler solo(se, f.tok, {});
    const int64_t id = solo.submit(prompt(i % 2), options(i));
    EXPECT_EQ(all.at(ids[static_cast<size_t>(i)]), drain(solo).at(id)) << "request " << i;
  }
  // The same prompt under different adapters never shares cached blocks.
  EXPECT_NE(all.at(ids[0]), all.at(ids[2]));
  std::filesystem::remove_all(dir);
}

// Mean negative log-likelihood of `ids` under the engine (each next token).
double nll(const std::shared_ptr<const llm::Model>& model, const std::vector<int32_t>& ids, const llm::Adapter* a) {
  llm::Engine e(model, {.max_sequences = 1, .max_logit_rows = 64});
  const int64_t seq = e.add_sequence();
  const int64_t n = static_cast<int64_t>(ids.size());
  const llm::Chunk c{seq, ids, n, a};
  const std::span<const float> l = e.step({&c, 1});
  const int64_t V = model->spec().vocab;
  double sum = 0;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const std::vector<float> row(l.begin() + i * V, l.begin() + (i + 1) * V);
    sum -= log_softmax_at(row, static_cast<size_t>(ids[static_cast<size_t>(i + 1)]));
  }
  return sum / static_cast<double>(n - 1);
}

// `tessera train` with a lora: section: the base GGUF gives the model and
// the weights, the adapter's files come out beside the checkpoints, and the
// adapter lowers the loss on the text it was tuned on.
TEST(LoraCli, TrainWritesAnAdapterThatLowersTheLoss) {
  const std::string dir = testing::scratch_dir("lora_train");
  std::filesystem::create_directories(dir);
  nn::zoo::Llama* m = nullptr;
  const testing::Fixture f = testing::fixture(&m, 2, 64);
  llm::GgufExportOptions o;
  o.tokenizer = &f.tok;
  llm::save_llama_gguf(*m, dir + "/base.gguf", o);
  std::string text;
  for (int i = 0; i < 60; ++i) text += "abc cab bca ";
  {
    std::ofstream(dir + "/text.txt") << text;
    std::ofstream(dir + "/lora.yaml")
        << "lora: {base: " << dir << "/base.gguf, rank: 4, alpha: 8, targets: [q_proj, v_proj, down_proj]}\n"
        << "data: {dataset: text, path: " << dir << "/text.txt, tokenizer: " << dir << "/base.gguf, block_size: 32}\n"
        << "optimizer: {name: adam, lr: 0.01}\n"
        << "train: {steps: 120, batch_size: 8, eval_every: 120, eval_batches: 2, checkpoint_every: 120, log_every: 40, "
        << "num_workers: 0}\n"
        << "output: " << dir << "/run\n";
  }
  std::string out;
  ASSERT_EQ(testing::cli("train " + dir + "/lora.yaml", &out), 0) << out;
  EXPECT_NE(out.find("LoRA adapter"), std::string::npos) << out;
  for (const char* file : {"/run/adapter.gguf", "/run/adapter/adapter_model.safetensors", "/run/adapter/adapter_config.json"})
    EXPECT_TRUE(std::filesystem::exists(dir + file)) << file;
  const auto base = llm::Model::load(dir + "/base.gguf");
  const auto adapter = llm::LoraAdapter::load(dir + "/run/adapter.gguf", base->spec());
  EXPECT_EQ(adapter->pairs(), 2 * 3);
  const std::vector<int32_t> ids = f.tok.encode(text.substr(0, 60), true, false);
  const double before = nll(base, ids, nullptr), after = nll(base, ids, adapter.get());
  EXPECT_LT(after, before - 1.0) << "the adapter's loss " << after << ", the base's " << before;
  // The same adapter from the PEFT files.
  const auto peft = llm::LoraAdapter::load(dir + "/run/adapter/adapter_model.safetensors", base->spec());
  EXPECT_NEAR(nll(base, ids, peft.get()), after, 1e-4);
  // A model section that contradicts the base is refused by name.
  {
    std::ofstream(dir + "/bad.yaml") << "lora: {base: " << dir << "/base.gguf}\nmodel: {name: llama, dim: 128}\n"
                                     << "data: {dataset: text, path: " << dir << "/text.txt, tokenizer: " << dir
                                     << "/base.gguf, block_size: 32}\n";
  }
  EXPECT_NE(testing::cli("train " + dir + "/bad.yaml", &out), 0);
  EXPECT_NE(out.find("model.dim is 128 but the LoRA base"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST(Lora, BadAdapterFilesSayWhy) {
  nn::zoo::Llama* m = adapted(9);
  const auto model = llm::model_from_llama(*m);
  const std::string dir = testing::scratch_dir("lora_bad");
  std::filesystem::create_directories(dir);
  auto error = [&](const std::string& path) {
    return testing::error_of([&] { llm::LoraAdapter::load(path, model->spec()); });
  };
  // Not an adapter: the model file itself.
  llm::save_llama_gguf(*m, dir + "/model.gguf");
  EXPECT_NE(error(dir + "/model.gguf").find("not a LoRA adapter"), std::string::npos);
  // A pair whose shapes do not fit the model.
  auto adapter_file = [] {
    llm::GgufWriter w;
    w.set("general.architecture", llm::GgufValue::string("llama"));
    w.set("general.type", llm::GgufValue::string("adapter"));
    w.set("adapter.type", llm::GgufValue::string("lora"));
    return w;
  };
  llm::GgufWriter w = adapter_file();
  w.add_tensor("blk.0.attn_q.weight.lora_a", zeros({4, 32}));
  w.add_tensor("blk.0.attn_q.weight.lora_b", zeros({64, 4}));
  w.save(dir + "/shape.gguf");
  EXPECT_NE(error(dir + "/shape.gguf").find("do not fit the model's projection [64, 64]"), std::string::npos);
  // A layer the model does not have; a lone lora_a.
  llm::GgufWriter w2 = adapter_file();
  w2.add_tensor("blk.9.attn_v.weight.lora_a", zeros({4, 64}));
  w2.save(dir + "/layer.gguf");
  EXPECT_NE(error(dir + "/layer.gguf").find("names a layer the model does not have"), std::string::npos);
  llm::GgufWriter w3 = adapter_file();
  w3.add_tensor("blk.1.attn_v.weight.lora_a", zeros({4, 64}));
  w3.save(dir + "/lone.gguf");
  EXPECT_NE(error(dir + "/lone.gguf").find("has no lora_b beside it"), std::string::npos);
  // PEFT without its config.
  llm::save_lora_peft(*m, dir + "/peft");
  std::filesystem::remove(dir + "/peft/adapter_config.json");
  EXPECT_NE(error(dir + "/peft/adapter_model.safetensors").find("adapter_config.json"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
