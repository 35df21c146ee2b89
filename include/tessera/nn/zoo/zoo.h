#pragma once
// The model zoo: ready-made architectures with PyTorch-compatible parameter
// names (torchvision's ResNet, nanoGPT's GPT, Hugging Face's Llama), so their
// state dicts load from and save to those ecosystems' safetensors files.
// Each model takes a plain config struct; train/model_registry.h builds them
// from a YAML config by name.
#include <vector>

#include "tessera/nn/nn.h"

namespace tessera::nn::zoo {

// ---- MLP: Linear -> act [-> Dropout] -> ... -> Linear, as `net` (a Sequential).
struct MLPConfig {
  int64_t in_features = 784;
  std::vector<int64_t> hidden = {256, 256};
  int64_t num_classes = 10;
  std::string activation = "relu";
  double dropout = 0.0;
};
struct MLP : Module {
  MLPConfig config;
  std::shared_ptr<Sequential> net;
  explicit MLP(MLPConfig c);
  Tensor forward(const Tensor& x) override;  // [N, ...] is flattened to [N, in_features]
};

// ---- LeNet-style CNN: two conv(3x3, pad 1) -> ReLU -> 2x2 max-pool stages,
// then Linear -> ReLU [-> Dropout] -> Linear. The default Fashion-MNIST model.
struct LeNetConfig {
  int64_t in_channels = 1;
  int64_t image_size = 28;  // square, divisible by 4
  std::vector<int64_t> channels = {32, 64};
  int64_t hidden = 128;
  int64_t num_classes = 10;
  double dropout = 0.25;
};
struct LeNet : Module {
  LeNetConfig config;
  std::shared_ptr<Sequential> features, classifier;
  explicit LeNet(LeNetConfig c);
  Tensor forward(const Tensor& x) override;
};

// ---- ResNet (torchvision layout). stem "cifar": 3x3 stride-1 conv, no max-pool;
// "imagenet": 7x7 stride-2 conv and a 3x3 max-pool.
struct ResNetConfig {
  std::string block = "basic";  // "basic" (ResNet-18/34) or "bottleneck" (ResNet-50)
  std::vector<int64_t> layers = {2, 2, 2, 2};
  std::vector<int64_t> widths = {64, 128, 256, 512};
  std::string stem = "cifar";
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  static ResNetConfig resnet18() { return {}; }
  static ResNetConfig resnet34() { return {"basic", {3, 4, 6, 3}}; }
  static ResNetConfig resnet50() { return {"bottleneck", {3, 4, 6, 3}}; }
};
struct ResNet : Module {
  ResNetConfig config;
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<MaxPool2d> maxpool;  // imagenet stem only
  std::vector<std::shared_ptr<Sequential>> stages;  // layer1..layer4
  std::shared_ptr<Linear> fc;
  explicit ResNet(ResNetConfig c);
  void reset_parameters() override;
  Tensor forward(const Tensor& x) override;
};

// ---- GPT (nanoGPT): token + position embeddings, pre-LN decoder blocks, tied head.
struct GPTConfig {
  int64_t vocab_size = 256;
  int64_t block_size = 256;  // the context length
  int64_t n_layer = 6, n_head = 6, n_embd = 384;
  double dropout = 0.0;
  bool bias = true;
  bool weight_tying = true;
  // Recompute each block's activations in backward instead of keeping them
  // (nn/checkpoint.h); checkpoint_segments 0: every block on its own.
  bool gradient_checkpointing = false;
  int64_t checkpoint_segments = 0;
};
struct GPT : Module {
  GPTConfig config;
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleList> h;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> lm_head;        // null when the head is tied to wte
  std::shared_ptr<TiedLinear> tied_head;  // the head tied to wte (registered as lm_head), else null
  explicit GPT(GPTConfig c);
  std::vector<Module*> shard_units() override;  // wte, wpe, the blocks, the head
  void reset_parameters() override;
  Tensor forward(const Tensor& ids) override;  // [B, T] int64 -> logits [B, T, vocab]
};

// ---- Llama-style decoder (Hugging Face names): RMSNorm, RoPE, SwiGLU MLP,
// grouped-query attention.
struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t dim = 4096;
  int64_t n_layers = 32, n_heads = 32, n_kv_heads = 32;
  int64_t hidden_dim = 11008;
  double norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_seq_len = 2048;
  bool tie_embeddings = false;
  bool gradient_checkpointing = false;  // as in GPTConfig
  int64_t checkpoint_segments = 0;
};
// Rotary position embedding in the "rotate half" convention: x * cos + rot(x) * sin
// for positions start..start+T-1. x [B, H, T, head_dim].
Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t start = 0);
struct LlamaAttention : Module {
  int64_t n_heads, n_kv_heads, head_dim;
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;
  LlamaAttention(const LlamaConfig& c);
  // Virtual: tensor parallelism's attention (distributed/tensor_parallel.h) splits the heads.
  virtual Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin);
};
struct LlamaMLP : Module {
  std::shared_ptr<Linear> gate_proj, up_proj, down_proj;
  LlamaMLP(int64_t dim, int64_t hidden);
  Tensor forward(const Tensor& x) override;  // down(silu(gate(x)) * up(x))
};
struct LlamaLayer : Module {
  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMLP> mlp;
  // The model's rotary tables (handles to Llama's buffers, not registered
  // here), so the layer runs through operator() with one input, and its
  // hooks run (ZeRO-3 gathers a layer from them).
  Tensor rope_cos, rope_sin;
  LlamaLayer(const LlamaConfig& c);
  Tensor forward(const Tensor& x) override { return forward(x, rope_cos, rope_sin); }
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin);
};
struct LlamaModel : Module {  // the "model." prefix of the Hugging Face layout
  std::shared_ptr<Embedding> embed_tokens;
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<RMSNorm> norm;
  LlamaModel(const LlamaConfig& c);
};
struct Llama : Module {
  void reset_buffers() override;
  LlamaConfig config;
  std::shared_ptr<LlamaModel> model;
  std::shared_ptr<Linear> lm_head;        // null when tied to embed_tokens
  std::shared_ptr<TiedLinear> tied_head;  // the head tied to embed_tokens (registered as lm_head), else null
  Tensor rope_cos, rope_sin;              // [max_seq_len, head_dim], not saved
  explicit Llama(LlamaConfig c);
  std::vector<Module*> shard_units() override;  // embed_tokens, the layers, the head
  void reset_parameters() override;
  Tensor forward(const Tensor& ids) override;  // [B, T] int64 -> logits [B, T, vocab]
};

}  // namespace tessera::nn::zoo
