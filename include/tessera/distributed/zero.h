#pragma once
// ZeRO (Rajbhandari et al., 2020): data parallelism without replicating what
// only the optimizer needs. Every rank runs the whole model on its share of
// each batch, as under DistributedDataParallel, but the optimizer state
// (stage 1), the gradients (stage 2) and the parameters (stage 3) are split
// into one shard per rank: each rank steps its shard. Adam's state (8 bytes
// per f32 parameter) shrinks to 8/N; at stage 2 the gradients (4 bytes) to
// 4/N; at stage 3 the parameters (4 bytes) too, gathered a unit at a time.
//
//   distributed::ZeroRedundancy zero(*model, *opt, world, {.stage = 2});
//   loss_fn((*model)(x_shard), y_shard).backward();  // reduce-scatters while backward runs
//   zero.step();                                     // opt.step() on this rank's shard, then all-gather
//
// The optimizer runs unchanged: it is handed 1-D views of its parameters'
// shards (Optimizer::set_params), which is exact for every optimizer of
// optim/ because their updates are element-wise. Its state is this rank's
// shard; consolidated_state() gathers it into the form one process saves, so
// checkpoints load at any world size and stage. Note [ZeRO layout] and Note
// [ZeRO-3 units] in zero.cpp.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/distributed/process_group.h"
#include "tessera/io/checkpoint.h"
#include "tessera/nn/module.h"
#include "tessera/optim/optimizer.h"

namespace tessera::distributed {

struct ZeroOptions {
  int stage = 1;                 // 1: optimizer state sharded; 2: gradients too; 3: parameters too
  double bucket_cap_mb = 25;     // the size of a segment (the unit of communication)
  double first_bucket_mb = 1;    // the first segment (the last layers) is small, to start early
  bool find_unused_parameters = false;  // else a parameter without a gradient is an error
  bool overlap = true;           // false: communicate after backward (for measuring)
};

class ZeroRedundancy {
 public:
  // Broadcasts rank 0's parameters and buffers, moves the parameters into the
  // flat segments (they become views of them) and hands `optimizer` this
  // rank's shards. The optimizer's state is dropped (load it afterwards with
  // load_consolidated_state). `model` and `optimizer` must outlive this. At
  // stage 3, call set_whole_parameters(true) before destroying it to keep a
  // whole model (else the parameters stay meta tensors).
  //
  // Stage 3 also takes a model built on the meta device (a model bigger than
  // one process): it is materialized a segment at a time from the default
  // generator's current state -- seed it as before building the model, as for
  // Module::materialize -- and equals the model built on the CPU from that
  // seed, bit for bit (Note [Materializing shard by shard] in zero.cpp).
  ZeroRedundancy(nn::Module& model, optim::Optimizer& optimizer, ProcessGroupPtr group, ZeroOptions options = {});
  ~ZeroRedundancy();
  ZeroRedundancy(const ZeroRedundancy&) = delete;
  ZeroRedundancy& operator=(const ZeroRedundancy&) = delete;

  // Stage 1: false makes the coming backwards accumulate into .grad without
  // communicating (gradient accumulation), as DDP's no_sync. Stage 2 reduces
  // every backward into the shard (the full gradients never accumulate), so
  // the switch changes nothing there.
  void require_sync(bool on) { sync_ = on; }
  void set_step(int64_t step) { step_ = step; }

  // optimizer.step() on this rank's shards, gather_parameters(), clear_gradients().
  void step();
  // The parts of step(), for a loop that unscales, clips or skips in between:
  // every rank's updated shard into the parameters (all ranks call it; stage
  // 3 gathers each unit when its forward needs it instead).
  void gather_parameters();
  // Drops this step's gradients (the parameters' and the shards').
  void clear_gradients();

  // The optimizer's state as one process holds it: full tensors keyed by
  // parameter name, the groups with their options. Every rank calls it and
  // gets the whole state.
  optim::OptimizerState consolidated_state();
  // This rank's pieces of the model and of the optimizer state, for a sharded
  // checkpoint (io::save_sharded_checkpoint): each parameter's and state's
  // element range in this rank's chunks; rank 0 adds the tensors that are
  // not sharded (buffers, frozen parameters) whole. No communication.
  io::CheckpointShard checkpoint_shard();
  // Its inverse: each rank keeps its shard of a state saved by one process,
  // by DDP or by ZeRO at any world size (keyed by name or, older, by index).
  void load_consolidated_state(const optim::OptimizerState& state);
  // A checkpoint of any world size and stage (whole or sharded) into this
  // rank's parts, reading only them: its shards of the optimizer state, and
  // its shards of the parameters at stage 3 (the whole parameters else) --
  // never the whole checkpoint. Every name and shape must fit, as
  // load_state_dict(strict). No communication.
  void load_checkpoint(const io::CheckpointReader& reader);

  // Stage 3: between steps the model's parameters hold no data (they are on
  // the meta device, keeping their shapes). While whole, they are complete on
  // every rank (to save, load or inspect them); leaving the state writes each
  // rank's chunk back into its shard (what was loaded is kept). Every rank
  // calls both. Other stages: no-ops.
  void set_whole_parameters(bool whole);

  int stage() const { return opt_.stage; }
  // Whether the model came on meta and was materialized shard by shard.
  bool materialized_from_meta() const { return init_generator_.has_value(); }
  const ProcessGroupPtr& group() const { return group_; }
  // Segment layout, for tests: parameter names per segment.
  std::vector<std::vector<std::string>> segments() const;
  // Elements of parameters this rank steps (its shards, without padding).
  int64_t shard_numel() const;
  // Seconds the end of backward spent waiting for communication in the last step.
  double last_wait_seconds() const { return last_wait_; }

 private:
  struct Param;
  struct Segment;
  void broadcast_unsharded(bool parameters_too);
  void build_segments();
  void initialize_segment(size_t segment);
  void load_state(const nlohmann::json& groups, const std::vector<std::pair<std::string, int64_t>>& keys,
                  const std::function<Tensor(const std::string&, int64_t, int64_t)>& read);
  void build_units(std::vector<std::vector<size_t>>& members);
  void on_grad_ready(size_t index);
  void begin_backward();
  void launch(Segment& s);
  void finish_backward();
  int64_t chunk_begin(const Segment& s, int rank) const;
  nlohmann::json whole_groups() const;
  // Stage 3: starts a segment's all-gather; makes its parameters whole (waits);
  // drops their data.
  void prefetch(size_t segment);
  void materialize(size_t segment);
  void release(size_t segment);
  void install_unit_hooks();

  nn::Module& model_;
  optim::Optimizer& optimizer_;
  ProcessGroupPtr group_;
  ZeroOptions opt_;
  std::vector<Param> params_;
  std::vector<Segment> segments_;
  std::optional<std::pair<uint64_t, uint64_t>> init_generator_;  // a model on meta: the generator's (seed, offset)
  std::vector<std::vector<size_t>> groups_;  // the optimizer's groups, as indices into params_
  std::vector<int32_t> used_;                // this step: whether some backward used each parameter
  std::vector<size_t> launch_order_;         // segments in the order backward completes them
  struct Use {
    nn::Module* module;
    size_t segment;
  };
  std::vector<Use> uses_;  // stage 3: the units' forwards in order, each with the segment it gathers
  std::vector<std::pair<nn::Module*, size_t>> module_hooks_;  // stage 3: (module, hook handle)
  size_t next_launch_ = 0;
  bool in_backward_ = false, sync_ = true;
  int64_t step_ = 0;
  double last_wait_ = 0;
};

}  // namespace tessera::distributed
