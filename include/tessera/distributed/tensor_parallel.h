#pragma once
// Tensor (model) parallelism, Megatron-LM's: each layer's weights split
// across a group of ranks, with the communication ops of the op table
// (tessera/ops/communicator.h) at the two edges of every split region.
//
//   auto tp = distributed::world()->split(rank / T);   // T ranks per group
//   distributed::tensor_parallelize(*gpt, tp);         // GPT or Llama, in place
//   Tensor logits = (*gpt)(ids);                       // this rank's vocabulary block
//   Tensor loss = distributed::vocab_parallel_cross_entropy(logits, targets, tp);
//
// Every rank of the group sees the same input and computes the same loss;
// each holds its block of every split weight and one copy of the rest. A
// transformer layer communicates twice forward and twice backward
// (Note [Split regions]); with sequence parallelism the norms and dropouts
// between the regions run on a block of the sequence, with all-gathers and
// reduce-scatters in place of the all-reduces.
//
// Note [Split regions]
// A region is the stretch between a column-parallel layer (its output
// features split) and a row-parallel one (its input features split): the
// attention heads, the MLP's hidden units. At its entry a replicated x goes
// through copy_to_group (identity forward, all_reduce of the gradient
// backward); at its exit the partial sums meet in reduce_from_group
// (all_reduce forward, the gradient passes through). With sequence
// parallelism the activations outside the regions are split along the
// sequence (dim 1): the entry is all_gather and the exit reduce_scatter.
// A replicated parameter that meets only part of the data on a rank (a
// norm's weight on a sequence block, a key/value head several ranks share)
// is used through copy_to_group, so its gradient sums the ranks' parts.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/generator.h"
#include "tessera/distributed/process_group.h"
#include "tessera/nn/linear.h"
#include "tessera/nn/norm.h"

namespace tessera::distributed {

// Which part of a dense parameter a rank holds: the dense tensor's `ranges`
// along `dim`, joined in order (one range for most layers; the fused QKV
// projection's rows are three). No ranges: the whole tensor (replicated).
struct ShardSpec {
  int64_t dim = 0;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) along dim
  Shape dense_shape;
  bool replicated() const { return ranges.empty(); }
  // This rank's part of `dense`, in fresh memory.
  Tensor take(const Tensor& dense) const;
};

// The group a split layer works in, and how the activations around it are laid out.
struct SplitGroup {
  ProcessGroupPtr group;
  bool sequence_parallel = false;
  const std::string& name() const { return group->name(); }
  int rank() const { return group->rank(); }
  int size() const { return group->size(); }
  // Into a split region: copy_to_group, or all_gather along the sequence.
  Tensor enter(const Tensor& x) const;
  // Out of one: reduce_from_group, or reduce_scatter along the sequence.
  Tensor exit(const Tensor& y) const;
};

// y = x W^T + b with W's rows (output features) split: rank r holds the
// dense weight's rows `rows` (block r of out / T by default), and its output
// is its block of y's features. `entered`: the caller has taken x into the
// region (SplitGroup::enter) already, as a layer sharing one input with
// others does. A LoRA pair of the dense layer is split with it: A whole
// (its gradient summed over the group), B by rows.
struct ColumnParallelLinear : nn::Linear {
  ColumnParallelLinear(const nn::Linear& dense, SplitGroup split,
                       std::vector<std::pair<int64_t, int64_t>> rows = {}, bool entered = false);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  SplitGroup split;
  bool entered;
  ShardSpec weight_spec;
  // Ranks holding the same rows (key/value heads shared by several ranks'
  // query heads): their weight gradients are summed over this group.
  ProcessGroupPtr replicas;
};

// y = x W^T + b with W's columns (input features) split: x is the region's
// split activation, the partial products meet in SplitGroup::exit, and the
// bias (whole on every rank) is added after. A LoRA pair: A by columns, B whole.
struct RowParallelLinear : nn::Linear {
  RowParallelLinear(const nn::Linear& dense, SplitGroup split);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  SplitGroup split;
  ShardSpec weight_spec;
};

// An embedding whose vocabulary is split: rank r holds rows [r V/T, (r+1) V/T)
// and looks up the ids in its range (zeros for the others); the ranks' rows
// then meet in SplitGroup::exit.
struct VocabParallelEmbedding : nn::Embedding {
  VocabParallelEmbedding(const nn::Embedding& dense, SplitGroup split);
  Tensor forward(const Tensor& ids) override;
  std::string extra_repr() const override;

  SplitGroup split;
  int64_t vocab_begin;
};

// An output layer tied to a VocabParallelEmbedding: logits for this rank's
// block of the vocabulary, y = x W_r^T with W_r the embedding's rows.
struct VocabParallelTiedLinear : nn::TiedLinear {
  VocabParallelTiedLinear(std::shared_ptr<VocabParallelEmbedding> embedding, SplitGroup split);
  Tensor forward(const Tensor& x) override;

  SplitGroup split;
};

// Norms whose input is a block of the sequence (sequence parallelism): the
// same computation, with the weight (and bias) used through copy_to_group so
// that their gradients sum the ranks' blocks.
struct SequenceParallelLayerNorm : nn::LayerNorm {
  SequenceParallelLayerNorm(const nn::LayerNorm& dense, SplitGroup split);
  Tensor forward(const Tensor& x) override;
  SplitGroup split;
};
struct SequenceParallelRMSNorm : nn::RMSNorm {
  SequenceParallelRMSNorm(const nn::RMSNorm& dense, SplitGroup split);
  Tensor forward(const Tensor& x) override;
  SplitGroup split;
};

// The mean cross-entropy of logits split along their last dim (vocabulary
// block `rank` of the group, as a VocabParallel head makes them) against
// whole-vocabulary targets, without ever joining the logits: the maximum,
// the sum of exponentials and each target's logit are reduced across the
// group. Targets equal to ignore_index count for nothing. Equal on every rank.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const ProcessGroupPtr& group,
                                    int64_t ignore_index = -100);

// Random numbers inside split regions. Replicated activations must see the
// same dropout mask on every rank of the group (the default generator, kept
// in step because every rank draws alike); split ones a different mask per
// rank. A RegionRng is a second generator, seeded by rank; fork() makes it
// the default generator until the guard ends (Megatron's RNG tracker).
class RegionRng {
 public:
  RegionRng(uint64_t seed, int rank);
  class Fork {
   public:
    explicit Fork(RegionRng& rng);
    ~Fork();
    Fork(const Fork&) = delete;
    Fork& operator=(const Fork&) = delete;

   private:
    RegionRng& rng_;
    uint64_t seed_, offset_;
  };
  Fork fork() { return Fork(*this); }
  Generator& generator() { return generator_; }

 private:
  Generator generator_;
};

struct TensorParallelOptions {
  bool sequence_parallel = false;
};

// Splits a GPT or a Llama of the zoo (tessera/nn/zoo/zoo.h) across `group`
// in place: attention heads, MLP hidden units and the vocabulary (embedding
// and head). Parameter names stay the dense model's; each rank keeps its
// part of the current values (dense values in, split values out: every rank
// must hold the same dense model). Errors, before anything changes, name a
// size the group does not divide: heads, hidden units, vocabulary, or key/
// value heads that neither divide by the group nor divide it.
// Returns the generator the split regions draw their dropout from (seeded
// from the default generator's seed and the rank); a training loop that
// reseeds the default generator every step reseeds this one too
// (Parallel3D::reseed), so that a resumed run draws what an uninterrupted one did.
std::shared_ptr<RegionRng> tensor_parallelize(nn::Module& model, const ProcessGroupPtr& group,
                                              TensorParallelOptions options = {});

// Each split parameter's part of the dense one, by state-dict name (a model
// after tensor_parallelize; names absent are whole on every rank).
std::vector<std::pair<std::string, ShardSpec>> tensor_parallel_shards(nn::Module& model);

}  // namespace tessera::distributed
