#pragma once
// How a Trainer runs across processes. The Trainer calls this interface at
// fixed points of its loop; distributed/ implements it (data parallelism and
// ZeRO, docs/distributed.md) and `tessera train` picks it from the config's
// `parallel` section. Alone (the default) every call is the identity, so the
// loop has one shape for one process and for many.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/io/checkpoint.h"
#include "tessera/monitor/metrics.h"
#include "tessera/nn/module.h"
#include "tessera/optim/optimizer.h"

namespace tessera::train {

class Parallel {
 public:
  virtual ~Parallel() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  virtual int local_rank() const { return 0; }  // among the ranks on this host
  // Once the model and optimizer exist, before a checkpoint is loaded: wraps
  // the model (hooks, buckets) and makes every rank start from rank 0's weights.
  virtual void attach(nn::Module& model, optim::Optimizer& optimizer) {}
  // Whether the coming backward ends an optimizer step; false accumulates
  // without communicating (every micro-batch but the last).
  virtual void set_sync(bool sync) {}
  virtual void set_step(int64_t step) {}
  // The key the default generator was just reseeded from for this step (from
  // the seed, the step and the data rank): a strategy with generators of its
  // own (tensor parallelism's split regions) reseeds them from it too.
  virtual void reseed(uint64_t key) {}

  // ZeRO: the optimizer holds only this rank's shards of the parameters. The
  // gradient norm and the inf check then join every rank's part (sum, max),
  // and after the optimizer's step after_step() gathers the parameters and
  // drops the gradients. Data parallelism: every rank steps the whole replica.
  virtual bool shards_optimizer() const { return false; }
  // ZeRO-3: the parameters too (between steps each rank holds only its shards).
  virtual bool shards_parameters() const { return false; }
  // Whether attach() gave memory to this rank's part of a model built on
  // meta (ZeRO-3, model parallelism); else the Trainer materializes it whole.
  virtual bool materializes_parts() const { return shards_parameters(); }
  virtual void after_step() {}
  // ZeRO: this rank's pieces of the model and optimizer state, for a sharded
  // checkpoint that every rank writes at once (io::save_sharded_checkpoint).
  // False: the replicas are equal, and rank 0 writes the checkpoint whole.
  virtual bool checkpoint_shard(io::CheckpointShard& out) { return false; }
  // ZeRO: loads a checkpoint of any world size and stage into this rank's
  // parts, reading only them (the model's tensors and optimizer state a range
  // at a time). False: every rank loads it whole.
  virtual bool load_checkpoint(const io::CheckpointReader& reader) { return false; }

  // Model parallelism (tensor and pipeline): the model is split across
  // ranks, so the strategy runs a batch's forward, loss and backward itself.
  // train_batch returns the global batch's loss, the gradients (of the loss
  // times `scale`: loss scaling, an average over accumulated batches)
  // accumulating into this rank's parameters, averaged over the data-parallel
  // replicas when `sync`; eval_batch returns a batch's loss, forward only.
  virtual bool runs_batches() const { return false; }
  virtual double train_batch(const Tensor& inputs, const Tensor& targets, double scale, bool sync) { return 0; }
  virtual double eval_batch(const Tensor& inputs, const Tensor& targets) { return 0; }
  // The gradients this rank counts in the global gradient norm (each element
  // on one rank only); the norm sums every rank's part.
  virtual TensorList norm_parameters() { return {}; }
  // How the data is split: this rank's replica among data_size() (tensor and
  // pipeline ranks of one replica load the same rows).
  virtual int data_rank() const { return rank(); }
  virtual int data_size() const { return size(); }

  // The decisions every rank must share, reduced across ranks: element-wise
  // sums (losses, eval counts) and maxima (flags: a stop request, a
  // non-finite loss, the end of a stream).
  virtual void sum(std::vector<double>& values) {}
  virtual void max(std::vector<double>& values) {}
  // Waits until every rank reaches this point (around checkpoint writes).
  virtual void barrier() {}
  // Every rank's text on rank 0, in rank order (empty on the others): the
  // profiler's traces, which need no shared file system so.
  virtual std::vector<std::string> gather_text(const std::string& mine) { return {mine}; }
  // Ends the whole job after an error on this rank, so that the others do not
  // wait for it until their deadline. Alone: returns and the error goes on.
  virtual void abort(int code) {}
  // Adds the strategy's metrics (tessera_dist_*: collectives, bytes, time in
  // communication, the wait at the end of backward) to the rank's registry.
  virtual void publish_metrics(monitor::Registry& registry) {}
  // What the run is, for the start line ("data parallel over 4 ranks").
  virtual std::string describe() const { return ""; }
};

}  // namespace tessera::train
