#pragma once
// Pipeline parallelism: a model cut into stages, one (or v, interleaved) per
// rank of a group, each batch run as micro-batches through a schedule
// (pipeline_schedule.h), with activations and their gradients sent between
// neighbouring stages by non-blocking send/receive.
//
//   auto pipe = distributed::Pipeline(gpt, world, {.schedule = "1f1b", .micro_batches = 8}, lm_loss);
//   auto opt = optim::make_optimizer("adamw", {{pipe.parameters()}}, ...);
//   Tensor loss = pipe.step(ids, targets);   // forward and backward of every micro-batch
//   opt->step();
//
// Every rank builds the whole model (on meta, for a model too large for one
// process) and keeps the parameters of its own stages only; the others go
// to the meta device. The loss is the batch's: the micro-batches' losses
// weighted by their rows, so the gradients are those of one process running
// the whole batch. A head tied to the first stage's embedding keeps a copy
// of the weight on the last stage; the two copies' gradients are summed
// after each step, so they stay equal.
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tessera/distributed/pipeline_schedule.h"
#include "tessera/distributed/process_group.h"
#include "tessera/nn/module.h"

namespace tessera::distributed {

// What a pipeline cuts between: the model's forward as a chain of pieces,
// each taking the previous one's output.
struct PipePiece {
  std::string name;                          // "embed", "transformer.h.3", "head"
  std::function<Tensor(const Tensor&)> run;  // through operator(), so hooks run
  std::vector<nn::Module*> modules;          // whose parameters it uses
  bool layer = true;                         // a repeated block (what splitting by layers counts)
};
// The chain of a GPT or a Llama of the zoo (embeddings, the blocks, the final
// norm and head) or of a Sequential (its children); an error for other models.
std::vector<PipePiece> pipeline_pieces(nn::Module& model);

struct PipelineOptions {
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved
  int micro_batches = 4;
  int virtual_stages = 1;         // stages per rank (interleaved)
  // How the pieces are cut into ranks * virtual_stages stages: "layers"
  // (equal numbers of blocks; the embeddings join the first stage, the head
  // the last), "parameters" (as equal parameter counts as contiguous stages
  // allow), "costs" (as equal sums of `costs`, one per piece), or "time":
  // each piece's forward timed on `sample` (a micro-batch's input; for the
  // GPT and the Llama, one row of zeros at the full context by default) on
  // the first rank of the group, whose costs every rank then cuts by.
  std::string split = "layers";
  std::vector<double> costs;
  Tensor sample;
  bool checkpoint = false;  // recompute each stage's activations in its backward
};

// Where each of `stages` stages starts in `pieces` (first entry 0), by the
// options' split. Errors name a model with fewer layers than stages.
std::vector<int> pipeline_boundaries(const std::vector<PipePiece>& pieces, int stages, const PipelineOptions& options);

class Pipeline {
 public:
  // The loss of one micro-batch's output against its targets (a mean over its rows).
  using LossFn = std::function<Tensor(const Tensor& output, const Tensor& targets)>;
  // Collective over `group`: every rank must pass the same options; the
  // schedule is made and checked, and the ranks' choices compared, before
  // any step.
  Pipeline(std::shared_ptr<nn::Module> model, ProcessGroupPtr group, PipelineOptions options, LossFn loss);

  // Forward and backward of every micro-batch of (inputs, targets), split
  // along dim 0. Gradients accumulate into this rank's parameters. Returns
  // the batch's loss on every rank.
  // `scale` multiplies the loss the backward starts from (loss scaling, an
  // average over accumulated batches); the loss returned is not scaled.
  Tensor step(const Tensor& inputs, const Tensor& targets, double scale = 1.0);
  // The batch's loss, forward only (evaluation), on every rank.
  Tensor evaluate(const Tensor& inputs, const Tensor& targets);

  // The parameters of this rank's stages (with a tied weight's copy), by the model's names.
  nn::NamedTensors parameters() const;
  const Schedule& schedule() const { return schedule_; }
  // Where each stage starts in pieces() (first entry 0).
  const std::vector<int>& boundaries() const { return boundaries_; }
  const std::vector<PipePiece>& pieces() const { return pieces_; }
  // This rank's stages.
  std::vector<int> local_stages() const;
  nn::Module& model() { return *model_; }
  // A weight of the first stage the last stage uses again (a tied head's),
  // or undefined; is_tied_copy: `t` (that weight, or a view of all of it)
  // is held by this rank only for the last stage.
  const Tensor& tied_weight() const { return tied_; }
  bool is_tied_copy(const Tensor& t) const;

 private:
  Tensor run_stage(int stage, const Tensor& input);
  struct MicroBatches;
  MicroBatches split_batch(const Tensor& inputs, const Tensor& targets, const char* what) const;
  std::shared_ptr<nn::Module> model_;
  ProcessGroupPtr group_, tied_group_;
  PipelineOptions options_;
  LossFn loss_;
  Schedule schedule_;
  std::vector<PipePiece> pieces_;
  std::vector<int> boundaries_;
  Tensor tied_;  // a weight used on the first and the last stage's ranks, or undefined
  std::set<const TensorImpl*> used_;  // the parameters this rank's stages use (on meta until materialized)
};

}  // namespace tessera::distributed
