#pragma once
// Sizing a model before allocating it: the model is built on the meta device
// (shapes and dtypes, no memory), one training step runs there, and the meta
// allocator's counts and the ops' FLOP counts say what the same step takes on
// the CPU (`tessera info CONFIG --meta`, docs/devices.md).
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tessera/nn/module.h"
#include "tessera/optim/optimizer.h"

namespace tessera::train {

// One batch of the model's input: f32 images or features (a classifier: the
// loss over [N, C] logits), or i64 token ids (a language model: [B, T, V]).
struct MetaInput {
  Shape shape;
  DType dtype = DType::F32;
};

struct MetaSizeRequest {
  std::function<nn::ModulePtr()> build;  // run inside a meta DeviceScope
  std::function<MetaInput(nn::Module&)> input;
  // Makes the optimizer whose state is counted; may be empty (no optimizer).
  std::function<optim::OptimizerPtr(nn::Module&)> make_optimizer;
};

struct ModuleSize {
  std::string path;  // "" for the whole model
  std::string type;
  int64_t params = 0;  // including its children's
  int64_t bytes = 0;
};

struct MetaSize {
  std::vector<ModuleSize> modules;  // the model, then modules down to depth 2
  int64_t params = 0, trainable = 0;
  std::map<std::string, int64_t> param_bytes_by_dtype;  // dtype name -> bytes of parameters
  int64_t param_bytes = 0;   // as the allocator counts them (rounded blocks), parameters and buffers
  int64_t grad_bytes = 0;    // gradients of trainable parameters
  int64_t optimizer_bytes = -1;  // -1: unknown (optimizer_note says why)
  std::string optimizer_note;
  int64_t forward_flops = 0;  // products (matmul, convolution, attention): 2 per multiply-add
  int64_t step_flops = 0;     // forward and backward
  int64_t activation_peak = 0;  // most bytes live during forward and backward, above the model's own
};

MetaSize size_on_meta(const MetaSizeRequest& r);

// Bytes per rank for data parallelism over `ranks` processes, each with the
// activations of one batch: DDP replicates parameters, gradients and
// optimizer state; ZeRO stage 1 shards the optimizer state, stage 2 also the
// gradients, stage 3 also the parameters (ZeRO, Rajbhandari et al. 2020).
struct RankMemory {
  int64_t ddp, zero1, zero2, zero3;
};
RankMemory per_rank_memory(const MetaSize& s, int64_t ranks);

}  // namespace tessera::train
