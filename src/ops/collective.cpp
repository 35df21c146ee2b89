// Communication ops (Note [Collectives as ops] in tessera/ops/communicator.h)
// and the registry of the groups they run on.
//
//   op                  forward                           gradient
//   all_reduce          y = sum over ranks of x           dx = all_reduce(dy)
//   all_gather          y = ranks' x joined along dim     dx = reduce_scatter(dy)
//   reduce_scatter      y = block `rank` of the sum       dx = all_gather(dy)
//   copy_to_group       y = x                             dx = all_reduce(dy)
//   reduce_from_group   y = sum over ranks of x           dx = dy
//   gather_from_group   y = ranks' x joined along dim     dx = block `rank` of dy
//   scatter_to_group    y = block `rank` of x along dim   dx = ranks' dy joined
//
// The first four are exact adjoints: the gradient a rank gets is that of the
// sum of every rank's loss, which is what data parallelism averages
// (SyncBatchNorm's statistics). reduce_from_group is copy_to_group's partner
// for a result every rank then uses alike (Megatron's "g"): the loss after it
// is one loss computed on every rank, so each rank's gradient is dy itself.
// gather_from_group and scatter_to_group are the same pair for a result, or
// an input, split along a dim (a vocabulary-split head's logits, a
// sequence-split activation): each is the other's gradient.
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "ops/op_utils.h"
#include "tessera/ops/communicator.h"

namespace tessera::ops {

// ---- the registry ------------------------------------------------------------------------

namespace {

std::mutex g_groups_mu;
std::map<std::string, std::weak_ptr<Communicator>, std::less<>>& groups() {
  static auto* m = new std::map<std::string, std::weak_ptr<Communicator>, std::less<>>();  // used at exit
  return *m;
}
std::atomic<detail::WorldMaker> g_world_maker{nullptr};

std::shared_ptr<Communicator> lookup(std::string_view name) {
  std::lock_guard<std::mutex> lock(g_groups_mu);
  auto it = groups().find(name);
  return it == groups().end() ? nullptr : it->second.lock();
}

}  // namespace

void register_communicator(const std::shared_ptr<Communicator>& c) {
  std::lock_guard<std::mutex> lock(g_groups_mu);
  std::weak_ptr<Communicator>& slot = groups()[c->name()];
  std::shared_ptr<Communicator> old = slot.lock();
  TS_CHECK(!old || old == c, "a process group named '", c->name(), "' is alive already; group names are unique");
  slot = c;
}

std::vector<std::string> communicator_names() {
  std::lock_guard<std::mutex> lock(g_groups_mu);
  std::vector<std::string> names;
  for (const auto& [name, c] : groups())
    if (!c.expired()) names.push_back(name);
  return names;  // std::map: sorted
}

std::shared_ptr<Communicator> find_communicator(std::string_view name, const char* op) {
  std::shared_ptr<Communicator> c = lookup(name);
  if (!c && name == "world") {
    if (detail::WorldMaker make = g_world_maker.load()) {
      make();  // outside the lock: making the world registers it
      c = lookup(name);
    }
  }
  if (c) return c;
  std::string known;
  for (const std::string& n : communicator_names()) known += (known.empty() ? "" : ", ") + n;
  TS_ERROR(op, ": no process group named '", name, "' lives in this process (groups: ", known.empty() ? "none" : known,
           "); a graph with communication ops runs where its groups were made");
}

void detail::set_world_maker(WorldMaker make) { g_world_maker.store(make); }

// ---- the ops ----------------------------------------------------------------------------

namespace {

// x in fresh contiguous memory (the buffer a collective works in).
Tensor fresh_copy(const Tensor& x) {
  Tensor y = empty(x.shape(), x.dtype());
  copy_into(y, x);
  return y;
}

// The dim a gather joins or a scatter splits.
int64_t block_dim(const Tensor& x, int64_t dim, const char* op) {
  check_defined(x, op, "x");
  TS_CHECK(x.dim() >= 1, op, ": the tensor needs a dimension to ", std::string_view(op).find("gather") != std::string_view::npos ? "join" : "split",
           " along, got a scalar");
  return wrap_dim(dim, x.dim(), op);
}

// Records `out` as made from `x`, with `vjp` as its backward (when x needs one).
void record_if_needed(const char* op, const Tensor& x, Tensor& out, autograd::VjpFn vjp) {
  if (!autograd::any_requires_grad({&x})) return;
  TensorList outs{out};
  autograd::record(op, {x}, outs, std::move(vjp));
  out = outs[0];
}


// The sum over the group's ranks, in fresh memory (all_reduce and
// reduce_from_group differ only in their gradient).
Tensor summed(const Tensor& x, const std::string& group, const char* op) {
  check_defined(x, op, "x");
  std::shared_ptr<Communicator> comm = find_communicator(group, op);
  Tensor y = fresh_copy(x);
  if (has_values(y)) comm->all_reduce_sum(y);
  return y;
}

// The ranks' x joined along dim d, in fresh memory (all_gather and
// gather_from_group differ only in their gradient).
Tensor gathered(const Tensor& x, const std::string& group, int64_t d, const char* op) {
  std::shared_ptr<Communicator> comm = find_communicator(group, op);
  const int64_t n = comm->size();
  // The ranks' tensors stacked on a new leading dim, which then moves next to
  // `d` and merges with it.
  Shape stacked{n};
  for (int64_t s : x.shape()) stacked.push_back(s);
  Shape joined(x.shape().begin(), x.shape().end());
  joined[d] *= n;
  NoGradGuard no_grad;
  Tensor blocks = empty(stacked, x.dtype());
  if (has_values(blocks)) comm->all_gather_into(blocks, x.contiguous());
  if (d == 0) return blocks.reshape(joined);
  std::vector<int64_t> order;
  for (int64_t k = 1; k <= d; ++k) order.push_back(k);
  order.push_back(0);
  for (int64_t k = d + 1; k <= x.dim(); ++k) order.push_back(k);
  return blocks.permute(order).contiguous().reshape(joined);
}
}  // namespace

Tensor all_reduce(const Tensor& x, const std::string& group) {
  TS_OP_SCOPE(all_reduce, &x);
  TS_OP_ATTRS({"group", group});
  Tensor y = summed(x, group, "all_reduce");
  record_if_needed("all_reduce", x, y, [group](const VjpArgs& a) -> TensorList { return {all_reduce(a.grads[0], group)}; });
  TS_RETURN(y);
}

Tensor reduce_from_group(const Tensor& x, const std::string& group) {
  TS_OP_SCOPE(reduce_from_group, &x);
  TS_OP_ATTRS({"group", group});
  Tensor y = summed(x, group, "reduce_from_group");
  record_if_needed("reduce_from_group", x, y, [](const VjpArgs& a) -> TensorList { return {a.grads[0]}; });
  TS_RETURN(y);
}

Tensor copy_to_group(const Tensor& x, const std::string& group) {
  TS_OP_SCOPE(copy_to_group, &x);
  TS_OP_ATTRS({"group", group});
  check_defined(x, "copy_to_group", "x");
  find_communicator(group, "copy_to_group");  // the group must exist for the backward
  // Nothing to do forward; a tensor of its own only to carry the node.
  if (!autograd::any_requires_grad({&x})) TS_RETURN(x);
  Tensor y = fresh_copy(x);
  record_if_needed("copy_to_group", x, y, [group](const VjpArgs& a) -> TensorList { return {all_reduce(a.grads[0], group)}; });
  TS_RETURN(y);
}

Tensor all_gather(const Tensor& x, const std::string& group, int64_t dim) {
  TS_OP_SCOPE(all_gather, &x);
  TS_OP_ATTRS({"group", group}, {"dim", dim});
  const int64_t d = block_dim(x, dim, "all_gather");
  Tensor y = gathered(x, group, d, "all_gather");
  record_if_needed("all_gather", x, y, [group, d](const VjpArgs& a) -> TensorList { return {reduce_scatter(a.grads[0], group, d)}; });
  TS_RETURN(y);
}

Tensor gather_from_group(const Tensor& x, const std::string& group, int64_t dim) {
  TS_OP_SCOPE(gather_from_group, &x);
  TS_OP_ATTRS({"group", group}, {"dim", dim});
  const int64_t d = block_dim(x, dim, "gather_from_group");
  Tensor y = gathered(x, group, d, "gather_from_group");
  record_if_needed("gather_from_group", x, y, [group, d](const VjpArgs& a) -> TensorList { return {scatter_to_group(a.grads[0], group, d)}; });
  TS_RETURN(y);
}

Tensor scatter_to_group(const Tensor& x, const std::string& group, int64_t dim) {
  TS_OP_SCOPE(scatter_to_group, &x);
  TS_OP_ATTRS({"group", group}, {"dim", dim});
  const int64_t d = block_dim(x, dim, "scatter_to_group");
  std::shared_ptr<Communicator> comm = find_communicator(group, "scatter_to_group");
  const int64_t n = comm->size();
  TS_CHECK(x.size(d) % n == 0, "scatter_to_group: dim ", d, " of size ", x.size(d), " must split into ", n,
           " equal blocks, one per rank of group '", group, "'");
  const int64_t part = x.size(d) / n;
  Tensor y;
  {
    NoGradGuard no_grad;
    y = fresh_copy(x.narrow(d, comm->rank() * part, part));
  }
  record_if_needed("scatter_to_group", x, y, [group, d](const VjpArgs& a) -> TensorList { return {gather_from_group(a.grads[0], group, d)}; });
  TS_RETURN(y);
}

Tensor reduce_scatter(const Tensor& x, const std::string& group, int64_t dim) {
  TS_OP_SCOPE(reduce_scatter, &x);
  TS_OP_ATTRS({"group", group}, {"dim", dim});
  check_defined(x, "reduce_scatter", "x");
  const int64_t d = block_dim(x, dim, "reduce_scatter");
  std::shared_ptr<Communicator> comm = find_communicator(group, "reduce_scatter");
  const int64_t n = comm->size();
  TS_CHECK(x.size(d) % n == 0, "reduce_scatter: dim ", d, " of size ", x.size(d), " must split into ", n,
           " equal blocks, one per rank of group '", group, "'");
  Shape part(x.shape().begin(), x.shape().end());
  part[d] /= n;
  Tensor y;
  {
    NoGradGuard no_grad;
    // Block r of `d` becomes the r-th slab of a contiguous buffer.
    Tensor blocks;
    if (d == 0) {
      blocks = x.contiguous();
    } else {
      Shape split(x.shape().begin(), x.shape().begin() + d);
      split.push_back(n);
      for (int64_t k = d; k < x.dim(); ++k) split.push_back(part[k]);
      std::vector<int64_t> order{d};
      for (int64_t k = 0; k <= x.dim(); ++k)
        if (k != d) order.push_back(k);
      blocks = x.reshape(split).permute(order).contiguous();
    }
    y = empty(part, x.dtype());
    if (has_values(y)) comm->reduce_scatter_sum(y, blocks);
  }
  record_if_needed("reduce_scatter", x, y, [group, d](const VjpArgs& a) -> TensorList { return {all_gather(a.grads[0], group, d)}; });
  TS_RETURN(y);
}

TS_OP_INVOKER(all_reduce) { return {all_reduce(in[0], a.s("group"))}; }
TS_OP_INVOKER(reduce_from_group) { return {reduce_from_group(in[0], a.s("group"))}; }
TS_OP_INVOKER(copy_to_group) { return {copy_to_group(in[0], a.s("group"))}; }
TS_OP_INVOKER(all_gather) { return {all_gather(in[0], a.s("group"), a.i("dim"))}; }
TS_OP_INVOKER(reduce_scatter) { return {reduce_scatter(in[0], a.s("group"), a.i("dim"))}; }
TS_OP_INVOKER(gather_from_group) { return {gather_from_group(in[0], a.s("group"), a.i("dim"))}; }
TS_OP_INVOKER(scatter_to_group) { return {scatter_to_group(in[0], a.s("group"), a.i("dim"))}; }

}  // namespace tessera::ops
