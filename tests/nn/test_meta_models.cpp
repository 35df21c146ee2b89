// Zoo models on the meta device: built there, they report the bytes the CPU
// allocates for them exactly, and a training step on meta peaks where the
// same step on the CPU does; materialized by to_empty and their
// initializers, they equal a CPU build bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "tessera/core/allocator.h"
#include "tessera/core/generator.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"

namespace tessera {
namespace {

using nn::ModulePtr;
namespace zoo = nn::zoo;

struct Case {
  const char* name;
  std::function<ModulePtr()> build;
  std::function<Tensor()> input;   // made on the current device
  std::function<Tensor(const Tensor&)> loss;  // of the model's output
};

Tensor class_loss(const Tensor& y) { return ops::cross_entropy(y, zeros({y.shape()[0]}, DType::I64)); }
Tensor lm_loss(const Tensor& y) {
  return ops::cross_entropy(y.reshape({-1, y.shape().back()}), zeros({y.numel() / y.shape().back()}, DType::I64));
}

std::vector<Case> cases() {
  return {
      {"mlp", [] { return std::make_shared<zoo::MLP>(zoo::MLPConfig{}); }, [] { return ops::randn({32, 784}); },
       class_loss},
      {"lenet", [] { return std::make_shared<zoo::LeNet>(zoo::LeNetConfig{}); },
       [] { return ops::randn({16, 1, 28, 28}); }, class_loss},
      {"resnet18", [] { return std::make_shared<zoo::ResNet>(zoo::ResNetConfig::resnet18()); },
       [] { return ops::randn({4, 3, 32, 32}); }, class_loss},
      {"gpt",
       [] {
         zoo::GPTConfig c;
         c.n_layer = 2, c.n_head = 4, c.n_embd = 128, c.block_size = 64;
         return std::make_shared<zoo::GPT>(c);
       },
       [] { return zeros({4, 64}, DType::I64); }, lm_loss},
      {"llama",
       [] {
         zoo::LlamaConfig c;
         c.vocab_size = 512, c.dim = 128, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.hidden_dim = 256;
         c.max_seq_len = 64;
         return std::make_shared<zoo::Llama>(c);
       },
       [] { return zeros({4, 64}, DType::I64); }, lm_loss},
  };
}

ModulePtr build_on_meta(const Case& c) {
  DeviceScope on_meta(Device::meta());
  return c.build();
}

// Both models give the same loss on one input (the same dropout masks: the same seed).
void expect_same_loss(const Case& c, nn::Module& a, nn::Module& b) {
  Tensor x = c.input();
  manual_seed(7);
  float want = c.loss(a.forward(x)).item<float>();
  manual_seed(7);
  EXPECT_EQ(c.loss(b.forward(x)).item<float>(), want) << c.name;
}

TEST(MetaModels, ParameterBytesEqualTheCpuAllocators) {
  for (const Case& c : cases()) {
    int64_t cpu0 = memory_allocated();
    ModulePtr on_cpu = c.build();
    int64_t cpu_bytes = memory_allocated() - cpu0;
    int64_t meta0 = memory_stats(Device::meta()).current_bytes;
    ModulePtr on_meta = build_on_meta(c);
    int64_t meta_bytes = memory_stats(Device::meta()).current_bytes - meta0;
    EXPECT_EQ(meta_bytes, cpu_bytes) << c.name;
    EXPECT_GT(meta_bytes, 0) << c.name;
    for (auto& [n, p] : on_meta->named_parameters()) EXPECT_TRUE(p.is_meta()) << c.name << " " << n;
  }
}

TEST(MetaModels, MaterializedEqualsBuiltBitForBit) {
  for (const Case& c : cases()) {
    manual_seed(42);
    ModulePtr built = c.build();
    manual_seed(42);
    ModulePtr meta = build_on_meta(c);
    manual_seed(42);
    meta->materialize(Device::cpu());
    nn::StateDict a = built->state_dict(), b = meta->state_dict();
    ASSERT_EQ(a.entries.size(), b.entries.size()) << c.name;
    for (size_t i = 0; i < a.entries.size(); ++i) {
      const auto& [name, x] = a.entries[i];
      const auto& [name_b, y] = b.entries[i];
      ASSERT_EQ(name, name_b) << c.name;
      ASSERT_TRUE(y.device().is_cpu()) << c.name << " " << name;
      ASSERT_EQ(x.nbytes(), y.nbytes()) << c.name << " " << name;
      EXPECT_EQ(std::memcmp(x.contiguous().raw_data(), y.contiguous().raw_data(), x.nbytes()), 0)
          << c.name << ": " << name << " differs";
    }
    expect_same_loss(c, *built, *meta);  // and it runs as the built one
  }
}

// A model built on meta loads a checkpoint's tensors onto their device (the
// CPU), without initializing anything first, and then runs as the original.
TEST(MetaModels, LoadingAStateDictMaterializes) {
  for (const Case& c : cases()) {
    manual_seed(3);
    ModulePtr built = c.build();
    ModulePtr meta = build_on_meta(c);
    meta->load_state_dict(built->state_dict());
    for (auto& [name, p] : meta->named_parameters()) EXPECT_TRUE(p.device().is_cpu()) << c.name << " " << name;
    expect_same_loss(c, *built, *meta);
  }
}

// The peak of live bytes over one forward and backward, above what was live
// before it, on `device`.
int64_t step_peak(const Case& c, Device device) {
  DeviceScope on(device);
  manual_seed(1);
  ModulePtr m = c.build();
  Tensor x = c.input();
  reset_peak_memory(device);
  int64_t base = memory_stats(device).current_bytes;
  {
    Tensor loss = c.loss(m->forward(x));
    loss.backward();
  }
  return memory_stats(device).peak_bytes - base;
}

TEST(MetaModels, TrainingStepPeakIsTheCpus) {
  for (const Case& c : cases()) {
    int64_t cpu = step_peak(c, Device::cpu()), meta = step_peak(c, Device::meta());
    std::printf("%-9s step peak: cpu %lld bytes, meta %lld bytes (%+.2f%%)\n", c.name, static_cast<long long>(cpu),
                static_cast<long long>(meta), 100.0 * static_cast<double>(meta - cpu) / static_cast<double>(cpu));
    EXPECT_NEAR(static_cast<double>(meta), static_cast<double>(cpu), 0.05 * static_cast<double>(cpu))
        << c.name << ": meta " << meta << " bytes, cpu " << cpu;
  }
}

}  // namespace
}  // namespace tessera
