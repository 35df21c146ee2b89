#pragma once
// What the communication ops (all_reduce, all_gather, reduce_scatter,
// copy_to_group, reduce_from_group; src/ops/collective.cpp) need from a group
// of processes, behind a seam as kernels are behind the backend's: the ops
// name their group by an attribute (a string a captured graph keeps), and the
// distributed layer's process groups, which are Communicators, register
// themselves under their names ("world", "world/0", "world/1.0", ...).
//
// Note [Collectives as ops]
// A collective in an op graph is an op like any other: one row of ops.def, a
// VJP that is itself made of ops (so double backward works and a captured
// training step records the backward's collectives as nodes), a shape rule
// that runs on the meta device without communicating. What sets it apart is
// the kCollective tag: every rank must run it in the same order, so the
// compiler never folds, merges or drops one (ops::has_side_effects).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops {

class Communicator {
 public:
  virtual ~Communicator() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  // Blocking collectives on contiguous tensors of one dtype; sums of bf16/f16
  // are taken in f32.
  // t = the sum over ranks of t.
  virtual void all_reduce_sum(const Tensor& t) = 0;
  // out (size() * in.numel() elements) = every rank's `in`, in rank order.
  virtual void all_gather_into(const Tensor& out, const Tensor& in) = 0;
  // out = block rank() of the sum over ranks of `in` (size() blocks of out.numel()).
  virtual void reduce_scatter_sum(const Tensor& out, const Tensor& in) = 0;

 protected:
  Communicator(int rank, int size, std::string name) : rank_(rank), size_(size), name_(std::move(name)) {}

 private:
  int rank_, size_;
  std::string name_;
};

// Makes `c` the group the ops find under c->name() (replacing an expired one
// of that name). Held weakly: the group's owner decides its lifetime.
void register_communicator(const std::shared_ptr<Communicator>& c);
// The group named `name`; an error naming `op` and the groups there are when
// none is alive. "world" is made on first use, as distributed::world() is.
std::shared_ptr<Communicator> find_communicator(std::string_view name, const char* op);
// The names of the live groups, sorted.
std::vector<std::string> communicator_names();

namespace detail {
// Set by the distributed layer: makes the world group (and registers it).
using WorldMaker = void (*)();
void set_world_maker(WorldMaker make);
}  // namespace detail

}  // namespace tessera::ops
