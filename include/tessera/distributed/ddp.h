#pragma once
// Data parallelism: every rank holds the whole model and trains it on its own
// share of each batch; gradients are averaged across ranks during backward, so
// every replica takes the same step as one process on the whole batch.
//
//   auto world = distributed::world();
//   distributed::DistributedDataParallel ddp(*model, world);   // broadcasts rank 0's weights
//   loss_fn((*model)(x_shard), y_shard).backward();             // all-reduces while backward runs
//   opt.step();
//
// Gradients live in flat buckets (Note [Gradient buckets] in ddp.cpp): each
// bucket is all-reduced on the communication thread as soon as backward has
// produced all of its gradients, while backward goes on with the layers below;
// the end of backward waits for the buckets and leaves the averages in .grad.
#include <memory>
#include <string>
#include <vector>

#include "tessera/distributed/process_group.h"
#include "tessera/nn/module.h"

namespace tessera::distributed {

struct DdpOptions {
  double bucket_cap_mb = 25;      // the size of a bucket
  double first_bucket_mb = 1;     // the first bucket (the last layers) is small, to start early
  bool find_unused_parameters = false;  // else a parameter without a gradient is an error
  bool broadcast_buffers = true;  // rank 0's buffers (batch-norm statistics) at the start
  bool overlap = true;            // false: all-reduce every bucket at the end of backward (for measuring)
  // Gradient compression (Note [Gradient compression] in ddp.cpp), with error
  // feedback: "none"; "bf16" (f32 buckets sent as bf16, half the bytes);
  // "powersgd" (Vogels et al. 2019: each matrix gradient sent as two rank-r
  // factors, from powersgd_start_step on; plain all-reduce before, as PyTorch's
  // start_powerSGD_iter).
  std::string compression = "none";
  int powersgd_rank = 1;
  int64_t powersgd_start_step = 1000;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(nn::Module& model, ProcessGroupPtr group, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // While the guard lives, backward accumulates into .grad without communicating
  // (the first micro-batches of gradient accumulation); the next backward outside
  // it all-reduces the sum.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d) : d_(d), prev_(d.sync_) { d.sync_ = false; }
    ~NoSync() { d_.sync_ = prev_; }

   private:
    DistributedDataParallel& d_;
    bool prev_;
  };
  NoSync no_sync() { return NoSync(*this); }
  // The same as a switch: false until set back, for loops that know ahead.
  void require_sync(bool on) { sync_ = on; }

  // The training step, for error messages ("... at step 12").
  void set_step(int64_t step) { step_ = step; }
  const ProcessGroupPtr& group() const { return group_; }
  nn::Module& module() { return model_; }
  // Bucket layout, for tests and the profiler: parameter names per bucket.
  std::vector<std::vector<std::string>> buckets() const;
  // Seconds the end of backward spent waiting for communication in the last step.
  double last_wait_seconds() const { return last_wait_; }

 private:
  struct Param;
  struct Bucket;
  void build_buckets(const std::vector<size_t>& order);
  void on_grad_ready(size_t index);
  void launch_ready_buckets();
  void launch(Bucket& b);
  void finish_backward();
  void powersgd(Bucket& b);

  nn::Module& model_;
  ProcessGroupPtr group_;
  DdpOptions opt_;
  enum class Compression { kNone, kBf16, kPowerSgd } compression_ = Compression::kNone;  // opt_.compression, parsed
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  bool in_backward_ = false, sync_ = true, rebuilt_ = false;
  std::vector<size_t> ready_order_;  // the first synchronized backward's order, for the rebuild
  int64_t step_ = 0;
  int64_t synced_ = 0;  // synchronized backwards so far (PowerSGD's start)
  double last_wait_ = 0;
};

}  // namespace tessera::distributed
