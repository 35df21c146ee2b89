// Tensor parallelism's layers, its cross-entropy and its random numbers
// (Note [Split regions] in tessera/distributed/tensor_parallel.h). How the
// zoo's models are split: tensor_parallel_zoo.cpp.
#include "tessera/distributed/tensor_parallel.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/ops/ops.h"

namespace tessera::distributed {

// ---- shards ------------------------------------------------------------------------------

Tensor ShardSpec::take(const Tensor& dense) const {
  NoGradGuard no_grad;
  if (replicated()) return dense.clone();
  TensorList parts;
  for (auto [begin, end] : ranges) parts.push_back(dense.narrow(dim, begin, end - begin));
  return parts.size() == 1 ? parts[0].clone() : ops::cat(parts, dim);
}

namespace {

int64_t total(const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  int64_t n = 0;
  for (auto [b, e] : ranges) n += e - b;
  return n;
}

// Block `rank` of n split `size` ways; n must divide.
std::pair<int64_t, int64_t> block(int64_t n, int rank, int size, const char* what) {
  TS_CHECK(n % size == 0, "tensor parallel: ", what, " = ", n, " must divide by the group's ", size, " ranks");
  return {rank * (n / size), (rank + 1) * (n / size)};
}

ShardSpec spec(int64_t dim, std::vector<std::pair<int64_t, int64_t>> ranges, const Tensor& dense) {
  ShardSpec s;
  s.dim = dim;
  s.ranges = std::move(ranges);
  s.dense_shape = Shape(dense.shape().begin(), dense.shape().end());
  return s;
}

// Gives `m`'s tensors the dense layer's dtype and device and copies `values`
// in (the tensor, its spec, the dense tensor), unless the dense layer is on
// meta (a model not yet materialized: its parts stay shapes).
void fill(nn::Module& m, const Tensor& like, const std::vector<std::tuple<Tensor, ShardSpec, Tensor>>& values) {
  m.to(like.dtype());
  if (like.device().is_meta()) return;
  m.to_empty(like.device());
  NoGradGuard no_grad;
  for (auto [mine, s, dense] : values) {  // Tensor handles: copies share the registered tensors
    mine.copy_(s.take(dense));
    mine.requires_grad_(dense.requires_grad());
  }
}

void check_plain(const nn::Linear& d, const char* layer) {
  TS_CHECK(!d.quantized, layer, ": a quantized Linear cannot be split; split the float model, then quantize");
}

// `t` as used by a rank holding one of several copies: its gradient summed over them.
Tensor shared(const Tensor& t, const ProcessGroupPtr& replicas) {
  return replicas && replicas->size() > 1 ? ops::copy_to_group(t, replicas->name()) : t;
}

}  // namespace

Tensor SplitGroup::enter(const Tensor& x) const {
  return sequence_parallel ? ops::all_gather(x, name(), 1) : ops::copy_to_group(x, name());
}

Tensor SplitGroup::exit(const Tensor& y) const {
  return sequence_parallel ? ops::reduce_scatter(y, name(), 1) : ops::reduce_from_group(y, name());
}

// ---- linear layers -----------------------------------------------------------------------

namespace {
std::vector<std::pair<int64_t, int64_t>> rows_or_block(const nn::Linear& d, const SplitGroup& s,
                                                       std::vector<std::pair<int64_t, int64_t>> rows) {
  if (!rows.empty()) return rows;
  return {block(d.out_features, s.rank(), s.size(), "a column-parallel layer's out_features")};
}
}  // namespace

ColumnParallelLinear::ColumnParallelLinear(const nn::Linear& d, SplitGroup s,
                                           std::vector<std::pair<int64_t, int64_t>> rows, bool entered_)
    : nn::Linear(d.in_features, total(rows_or_block(d, s, rows)), d.bias.defined()),
      split(std::move(s)),
      entered(entered_) {
  check_plain(d, "ColumnParallelLinear");
  weight_spec = spec(0, rows_or_block(d, split, std::move(rows)), d.weight);
  std::vector<std::tuple<Tensor, ShardSpec, Tensor>> values{{weight, weight_spec, d.weight}};
  if (bias.defined()) values.emplace_back(bias, spec(0, weight_spec.ranges, d.bias), d.bias);
  if (d.lora) {
    add_lora(d.lora->rank, d.lora->alpha);
    values.emplace_back(lora->A, spec(0, {}, d.lora->A), d.lora->A);
    values.emplace_back(lora->B, spec(0, weight_spec.ranges, d.lora->B), d.lora->B);
  }
  fill(*this, d.weight, values);
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  TS_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "ColumnParallelLinear(", in_features, " -> ", out_features,
           " of this rank): expected input with last dimension ", in_features, ", got shape ", shape_str(x.shape()));
  Tensor in = entered ? x : split.enter(x);
  Tensor y = ops::linear(in, shared(weight, replicas), bias.defined() ? shared(bias, replicas) : bias);
  // A is whole on every rank but meets only this rank's rows of B: its
  // gradient sums the group's (Note [Split regions]).
  if (lora)
    y = ops::add(y, ops::linear(ops::linear(in, ops::copy_to_group(lora->A, split.name())), shared(lora->B, replicas)),
                 lora->scale());
  return y;
}

std::string ColumnParallelLinear::extra_repr() const {
  return nn::Linear::extra_repr() + ", column parallel over " + split.name() +
         (split.sequence_parallel ? " (sequence parallel)" : "");
}

RowParallelLinear::RowParallelLinear(const nn::Linear& d, SplitGroup s)
    : nn::Linear(d.in_features / std::max(1, s.size()), d.out_features, d.bias.defined()), split(std::move(s)) {
  check_plain(d, "RowParallelLinear");
  weight_spec = spec(1, {block(d.in_features, split.rank(), split.size(), "a row-parallel layer's in_features")}, d.weight);
  std::vector<std::tuple<Tensor, ShardSpec, Tensor>> values{{weight, weight_spec, d.weight}};
  if (bias.defined()) values.emplace_back(bias, spec(0, {}, d.bias), d.bias);
  if (d.lora) {
    add_lora(d.lora->rank, d.lora->alpha);
    values.emplace_back(lora->A, spec(1, weight_spec.ranges, d.lora->A), d.lora->A);
    values.emplace_back(lora->B, spec(0, {}, d.lora->B), d.lora->B);
  }
  fill(*this, d.weight, values);
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  TS_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "RowParallelLinear(", in_features, " of this rank -> ",
           out_features, "): expected input with last dimension ", in_features, ", got shape ", shape_str(x.shape()));
  Tensor y = split.exit(ops::linear(x, weight));
  // After the exit the activation is whole (or a sequence block, whose
  // parameters' gradients then sum the group's blocks).
  auto after = [&](const Tensor& t) { return split.sequence_parallel ? ops::copy_to_group(t, split.name()) : t; };
  if (lora) y = ops::add(y, ops::linear(split.exit(ops::linear(x, lora->A)), after(lora->B)), lora->scale());
  if (bias.defined()) y = ops::add(y, after(bias));
  return y;
}

std::string RowParallelLinear::extra_repr() const {
  return nn::Linear::extra_repr() + ", row parallel over " + split.name() +
         (split.sequence_parallel ? " (sequence parallel)" : "");
}

// ---- vocabulary ----------------------------------------------------------------------------

VocabParallelEmbedding::VocabParallelEmbedding(const nn::Embedding& d, SplitGroup s)
    : nn::Embedding(d.num_embeddings / std::max(1, s.size()), d.embedding_dim), split(std::move(s)) {
  auto range = block(d.num_embeddings, split.rank(), split.size(), "the vocabulary (num_embeddings)");
  vocab_begin = range.first;
  if (d.padding_idx && *d.padding_idx >= range.first && *d.padding_idx < range.second)
    padding_idx = *d.padding_idx - range.first;
  fill(*this, d.weight, {{weight, spec(0, {range}, d.weight), d.weight}});
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  TS_CHECK(!is_floating(ids.dtype()), "VocabParallelEmbedding: ids must be integers, got ", dtype_name(ids.dtype()));
  Tensor local = ops::sub(ids, vocab_begin);
  Tensor mine = ops::logical_and(ops::ge(local, 0), ops::lt(local, num_embeddings));
  // Ids of other ranks' blocks look up row 0 and are zeroed: the sum over the
  // group then holds each id's row once.
  Tensor rows = ops::embedding(weight, ops::where(mine, local, 0), padding_idx);
  rows = ops::masked_fill(rows, ops::logical_not(mine).unsqueeze(-1), 0.0);
  return split.exit(rows);
}

std::string VocabParallelEmbedding::extra_repr() const {
  return nn::Embedding::extra_repr() + ", rows " + std::to_string(vocab_begin) + ".." +
         std::to_string(vocab_begin + num_embeddings - 1) + " of the vocabulary, over " + split.name();
}

VocabParallelTiedLinear::VocabParallelTiedLinear(std::shared_ptr<VocabParallelEmbedding> e, SplitGroup s)
    : nn::TiedLinear(std::move(e)), split(std::move(s)) {}

Tensor VocabParallelTiedLinear::forward(const Tensor& x) { return ops::linear(split.enter(x), embedding->weight); }

// ---- norms over a block of the sequence -----------------------------------------------------

SequenceParallelLayerNorm::SequenceParallelLayerNorm(const nn::LayerNorm& d, SplitGroup s)
    : nn::LayerNorm(d.normalized_shape, d.eps, d.elementwise_affine, d.bias.defined()), split(std::move(s)) {
  std::vector<std::tuple<Tensor, ShardSpec, Tensor>> values;
  if (weight.defined()) values.emplace_back(weight, spec(0, {}, d.weight), d.weight);
  if (bias.defined()) values.emplace_back(bias, spec(0, {}, d.bias), d.bias);
  if (!values.empty()) fill(*this, d.weight, values);
}

Tensor SequenceParallelLayerNorm::forward(const Tensor& x) {
  auto summed = [&](const Tensor& t) { return t.defined() ? ops::copy_to_group(t, split.name()) : t; };
  return ops::layer_norm(x, normalized_shape, summed(weight), summed(bias), eps);
}

SequenceParallelRMSNorm::SequenceParallelRMSNorm(const nn::RMSNorm& d, SplitGroup s)
    : nn::RMSNorm(d.normalized_shape, d.eps, d.elementwise_affine), split(std::move(s)) {
  if (weight.defined()) fill(*this, d.weight, {{weight, spec(0, {}, d.weight), d.weight}});
}

Tensor SequenceParallelRMSNorm::forward(const Tensor& x) {
  return ops::rms_norm(x, normalized_shape, weight.defined() ? ops::copy_to_group(weight, split.name()) : weight, eps);
}

// ---- the loss ----------------------------------------------------------------------------

// Note [A cross-entropy over a split vocabulary]
// loss_i = log sum_v exp(z_iv - m_i) - (z_i,t_i - m_i), with m_i the row's
// maximum over every rank's block (taken without a gradient: it cancels).
// The sum of exponentials and the target's logit are partial sums over the
// blocks, joined with reduce_from_group: every rank computes the same loss,
// and its gradient reaches this rank's block as softmax - one_hot, never
// more than [N, V / T] at a time.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const ProcessGroupPtr& group,
                                    int64_t ignore_index) {
  TS_CHECK(logits.defined() && targets.defined(), "vocab_parallel_cross_entropy: logits and targets must be defined");
  TS_CHECK(is_floating(logits.dtype()) && logits.dim() >= 2, "vocab_parallel_cross_entropy: logits must be floating "
           "[..., vocabulary block], got ", dtype_name(logits.dtype()), " ", shape_str(logits.shape()));
  TS_CHECK(!is_floating(targets.dtype()) && targets.numel() * logits.size(-1) == logits.numel(),
           "vocab_parallel_cross_entropy: targets must be integers with one per row of logits ",
           shape_str(logits.shape()), ", got ", dtype_name(targets.dtype()), " ", shape_str(targets.shape()));
  const int64_t V = logits.size(-1);
  Tensor z = logits.reshape({-1, V});
  Tensor t = targets.reshape({-1});
  Tensor m;
  {
    NoGradGuard no_grad;
    m = ops::amax(z, {1}, true).contiguous();
    group->allreduce(m, ReduceOp::kMax)->wait();
  }
  Tensor shifted = ops::sub(z, m);
  Tensor sum_exp = ops::reduce_from_group(ops::sum(ops::exp(shifted), {1}), group->name());
  Tensor local = ops::sub(t, static_cast<int64_t>(group->rank()) * V);
  Tensor mine = ops::logical_and(ops::ge(local, 0), ops::lt(local, V));
  Tensor picked = ops::gather(shifted, 1, ops::where(mine, local, 0).unsqueeze(1)).squeeze(1);
  picked = ops::reduce_from_group(ops::masked_fill(picked, ops::logical_not(mine), 0.0), group->name());
  Tensor per_row = ops::sub(ops::log(sum_exp), picked);
  Tensor counted = ops::ne(t, ignore_index);
  Tensor n = ops::sum(counted.to(per_row.dtype()));
  return ops::div(ops::sum(ops::masked_fill(per_row, ops::logical_not(counted), 0.0)), n);
}

// ---- random numbers ----------------------------------------------------------------------

// Megatron's offset: far from the default stream's seed, different per rank.
RegionRng::RegionRng(uint64_t seed, int rank) : generator_(seed + 2718 + static_cast<uint64_t>(rank)) {}

RegionRng::Fork::Fork(RegionRng& rng) : rng_(rng) {
  Generator& g = default_generator();
  seed_ = g.seed();
  offset_ = g.offset();
  g.set_state(rng_.generator_.seed(), rng_.generator_.offset());
}

RegionRng::Fork::~Fork() {
  Generator& g = default_generator();
  rng_.generator_.set_state(g.seed(), g.offset());
  g.set_state(seed_, offset_);
}

}  // namespace tessera::distributed
