#pragma once
// 3D parallelism: data x tensor x pipeline, as Megatron-LM composes them.
//
//   distributed::Parallel3D job(gpt, distributed::world(), {.layout = {.data = 2, .tensor = 2, .pipeline = 2}});
//   auto opt = optim::make_optimizer("adamw", {job.param_group()}, {{"lr", 3e-4}});
//   for (...) {
//     Tensor loss = job.step(ids, targets);  // the global batch, on every rank
//     opt->step();
//     opt->zero_grad();
//   }
//
// The world's ranks form a D x T x P grid, tensor fastest (rank = (p D + d) T
// + t, Megatron's order): the T ranks of a tensor group are neighbours, each
// pipeline's P stages hold the same tensor block, and the D ranks of a data
// group hold the same part of the model. The model is split across the
// tensor group (tensor_parallel.h), cut into stages along the pipeline group
// (pipeline.h), and each data rank runs its rows of the global batch, the
// gradients then averaged over the data group.
//
// Checkpoints are sharded (io/checkpoint.h): every tensor's pieces are the
// boxes its tensor-parallel split gives it (rows or columns; the fused QKV
// projection's three row ranges), written once each (by data rank 0, and a
// tensor held whole on every tensor rank by tensor rank 0), so a checkpoint
// saved at one (D, T, P) resumes at any other, each rank reading only its
// boxes.
#include <memory>

#include "tessera/distributed/pipeline.h"
#include "tessera/distributed/tensor_parallel.h"
#include "tessera/io/checkpoint.h"
#include "tessera/optim/optimizer.h"

namespace tessera::distributed {

struct Layout {
  int data = 1, tensor = 1, pipeline = 1;
  std::string str() const;  // "2 x 2 x 2 (data x tensor x pipeline)"
};

struct Mesh {
  Layout layout;
  int data_rank = 0, tensor_rank = 0, pipeline_rank = 0;
  ProcessGroupPtr data, tensor, pipeline;
};
// Collective over `world`: the three groups of this rank. An error on every
// rank unless data * tensor * pipeline equals the world's size.
Mesh make_mesh(const ProcessGroupPtr& world, Layout layout);

struct Parallel3DOptions {
  Layout layout;
  PipelineOptions pipeline;        // schedule, micro-batches, split, checkpointing
  bool sequence_parallel = false;  // tensor parallelism's option
  // 1: ZeRO-1 over the data group: each data rank's optimizer steps (and
  // holds the state of) its share of the parameters, whole tensors shared
  // out by size; gather_parameters() then sends each one from its owner to
  // the others. 0: every data rank steps all of its part.
  int zero = 0;
};

class Parallel3D {
 public:
  // Collective over `world`. `model` is the zoo's GPT or Llama, the same on
  // every rank (built from one seed); each rank keeps its part. The loss is
  // the language-model cross-entropy of the logits against the targets.
  // A model built on the meta device (one too large for a process) is given
  // memory for this rank's part only, drawn from the default generator's
  // current state: seed it as before building the model, as for
  // Module::materialize; each part then equals its part of the model built
  // on the CPU from that seed (Note [Materializing a split model]).
  Parallel3D(std::shared_ptr<nn::Module> model, const ProcessGroupPtr& world, Parallel3DOptions options);

  // Forward and backward of the global batch (every rank passes all of it;
  // each data rank takes its rows, which must divide by the data size), then
  // the gradients averaged over the data group. Returns the batch's loss.
  Tensor step(const Tensor& inputs, const Tensor& targets);
  // The same on this data rank's rows only (a loader that already gave each
  // data rank its share). `scale` multiplies the loss backward starts from;
  // without `sync` the gradients accumulate without the data group's
  // average (every batch but the last of an accumulated step).
  Tensor step_rows(const Tensor& inputs, const Tensor& targets, double scale = 1.0, bool sync = true);
  // The loss of this data rank's rows, forward only, on every rank of its pipeline.
  Tensor evaluate_rows(const Tensor& inputs, const Tensor& targets);
  // The parameters whose gradients this rank counts in the model's gradient
  // norm, so that the sum over every rank counts each element once: its
  // tensor blocks and, on tensor rank 0, the whole ones; nothing on data
  // ranks but 0 (their gradients are the same) or for a tied head's copy.
  TensorList norm_parameters() const;
  // Reseeds the generator of the split regions' dropout from `key` and this
  // rank's place in its tensor group (a training loop reseeding the default
  // generator each step from the seed, the step and the data rank passes the same key).
  void reseed(uint64_t key);

  // This rank's parameters (its tensor block of its stages).
  nn::NamedTensors parameters() const { return pipeline_->parameters(); }
  // The ones its optimizer steps: all of them, or under ZeRO-1 this data
  // rank's share. param_group() holds them.
  nn::NamedTensors stepped_parameters() const;
  optim::ParamGroup param_group() const;
  // After the optimizer's step, under ZeRO-1: every parameter from the data
  // rank that stepped it to the others (one broadcast per data rank), and
  // the gradients of the parameters this rank did not step dropped (its
  // optimizer's zero_grad does not reach them). Collective over the data
  // group; nothing without ZeRO.
  void gather_parameters();
  const Mesh& mesh() const { return mesh_; }
  Pipeline& pipeline() { return *pipeline_; }

  // Collective: this rank's pieces of the model and of `optimizer`'s state
  // for io::save_sharded_checkpoint (each piece written by one rank only).
  io::CheckpointShard checkpoint_shard(const optim::Optimizer& optimizer) const;
  // Loads a checkpoint saved at any layout (or by one process) into this
  // rank's parameters and `optimizer`'s state, reading only its boxes.
  void load_checkpoint(const io::CheckpointReader& reader, optim::Optimizer& optimizer);

 private:
  void materialize_parts(nn::Module& whole, uint64_t seed, uint64_t offset);
  // How this rank's part of `name` sits in the whole tensor; replicated when absent.
  const ShardSpec* spec_of(const std::string& name) const;
  // Whether this rank writes `name` (one writer per piece): data rank
  // `data_writer` of the tensor ranks that hold a piece of it.
  bool writes(const std::string& name, const Tensor& t, int data_writer = 0) const;
  Mesh mesh_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<Pipeline> pipeline_;
  std::map<std::string, ShardSpec> specs_;
  std::shared_ptr<RegionRng> region_rng_;  // null without tensor parallelism
  // ZeRO-1: the data rank that steps each parameter (empty without).
  std::map<std::string, int> owner_;
};

}  // namespace tessera::distributed
