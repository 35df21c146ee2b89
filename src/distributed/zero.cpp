// Note [ZeRO layout]
// The trainable parameters are laid out, in reverse registration order (the
// order backward meets them), in flat "segments" of about bucket_cap_mb (the
// first one first_bucket_mb), one dtype each. A segment of n elements is padded
// to N * c elements, c = ceil(n / N), and rank r owns elements [r c, (r+1) c):
// its chunk. The model's parameters become views of their segment, so the
// optimizer's shards -- for each parameter, its part inside this rank's chunk,
// a 1-D view -- update the model in place, and one all-gather per segment
// (every rank's chunk) completes the parameters after the step.
//
// Gradients follow the same layout. Stage 1 keeps a full gradient buffer per
// segment (the parameters' .grad are views of it) and all-reduces it once
// backward has filled it, as DDP's buckets; the optimizer reads the chunk.
// Stage 2 copies each gradient into a segment buffer that lives only while
// its segment's reduce-scatter runs, frees the parameter's .grad at once, and
// keeps only the averaged chunk, summed over the backwards of a step. Either
// way the communication starts from the post-accumulate hooks while backward
// goes on, in segment order on every rank, and the end-of-backward callback
// waits for it.

// Note [ZeRO-3 units]
// Stage 3 shards the parameters too: a segment is a unit of the model
// (Module::shard_units: each element of a ModuleList, a transformer block;
// the embeddings and head a model names; an embedding and the head tied to
// it are one unit used twice), plus one root segment for every other
// parameter (the final norm: parameters used outside any unit). Between uses
// each rank keeps only its chunk, and the model's parameters are meta tensors
// (shape without data). A unit's forward pre-hook all-gathers it (and starts
// the next unit's gather, the prefetch); its forward hook drops the data again
// and hooks the unit's output, whose gradient arrives just before the unit's
// backward: that hook gathers it once more (and prefetches the unit before
// it). Autograd saved the parameters themselves, so the gathered data is
// seen through them; a gather makes a fresh buffer, whose version counter
// (0) is the one saved in forward. When the unit's last gradient is in, it
// is dropped and its gradients reduce-scattered, as at stage 2. The root is
// gathered from the model's forward until the end of backward. All-gathers
// are issued from hooks, so every rank must run the same forward (and may
// not skip parameters: find_unused_parameters is refused at stage 3).
#include "tessera/distributed/zero.h"

#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "distributed/comm.h"
#include "distributed/zero_parts.h"
#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/generator.h"
#include "tessera/nn/container.h"
#include "tessera/nn/linear.h"

namespace tessera::distributed {

ZeroRedundancy::ZeroRedundancy(nn::Module& model, optim::Optimizer& optimizer, ProcessGroupPtr group,
                               ZeroOptions options)
    : model_(model), optimizer_(optimizer), group_(std::move(group)), opt_(options) {
  TS_CHECK(group_, "ZeroRedundancy: no process group");
  TS_CHECK(opt_.stage >= 1 && opt_.stage <= 3, "ZeroRedundancy: stage must be 1, 2 or 3, got ", opt_.stage);
  TS_CHECK(opt_.stage < 3 || !opt_.find_unused_parameters, "ZeroRedundancy: find_unused_parameters is not supported "
           "at stage 3 (every rank must gather the same units in the same order); use stage 2");
  TS_CHECK(opt_.bucket_cap_mb > 0 && opt_.first_bucket_mb > 0, "ZeroRedundancy: segment sizes must be positive");
  NoGradGuard no_grad;
  auto named = model_.named_parameters();
  check_same_parameters(*group_, named, "ZeroRedundancy");
  bool on_meta = false;
  for (auto& [n, t] : named) on_meta = on_meta || t.device().is_meta();
  for (auto& [n, t] : model_.named_buffers()) on_meta = on_meta || t.device().is_meta();
  TS_CHECK(!on_meta || opt_.stage == 3, "ZeroRedundancy: the model is on the meta device; stage 3 materializes it "
           "shard by shard, stage ", opt_.stage, " needs it whole (Module::materialize first)");
  if (!on_meta) broadcast_unsharded(true);

  // The optimizer's parameters, by group, found among the model's by identity.
  std::map<const void*, std::string> name_of;
  for (auto& [n, t] : named) name_of.emplace(t.impl(), n);
  std::map<const void*, size_t> index_of;
  for (auto& g : optimizer_.param_groups()) {
    groups_.emplace_back();
    for (auto& p : g.params) {
      auto it = name_of.find(p.impl());
      TS_CHECK(it != name_of.end(), "ZeroRedundancy: the optimizer holds a parameter that is not the model's");
      TS_CHECK(p.requires_grad(), "ZeroRedundancy: the optimizer holds '", it->second, "', which does not require grad");
      index_of.emplace(p.impl(), params_.size());
      groups_.back().push_back(params_.size());
      params_.emplace_back();
      params_.back().name = it->second;
      params_.back().tensor = p;
    }
  }
  TS_CHECK(!params_.empty(), "ZeroRedundancy: the optimizer has no parameters");
  for (auto& [n, t] : named)
    TS_CHECK(!t.requires_grad() || index_of.count(t.impl()), "ZeroRedundancy: parameter '", n,
             "' requires grad but is not in the optimizer; freeze it (requires_grad false) or add it");
  if (on_meta) {
    // Note [Materializing shard by shard]: what is not sharded (buffers,
    // frozen parameters) gets its memory now and is initialized by every
    // pass of build_segments; the sharded parameters a segment at a time.
    init_generator_ = {default_generator().seed(), default_generator().offset()};
    std::set<const void*> sharded;
    for (auto& p : params_) sharded.insert(p.tensor.impl());
    auto give_memory = [&](Tensor t) {
      if (t.device().is_meta() && !sharded.count(t.impl())) t.set_data(empty(t.shape(), t.dtype()));
    };
    for (auto& [n, t] : named) give_memory(t);
    for (auto& [n, t] : model_.named_buffers()) give_memory(t);
  }
  build_segments();
  if (on_meta) broadcast_unsharded(false);

  std::vector<TensorList> pieces(groups_.size());
  std::vector<std::vector<std::string>> names(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i : groups_[g])
      if (params_[i].piece.defined()) {
        pieces[g].push_back(params_[i].piece);
        names[g].push_back(params_[i].name);
      }
  optimizer_.set_params(std::move(pieces), std::move(names));
  used_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].hook = params_[i].tensor.register_post_accumulate_grad_hook([this, i](const Tensor&) { on_grad_ready(i); });
  if (opt_.stage == 3) install_unit_hooks();
}

ZeroRedundancy::~ZeroRedundancy() {
  for (auto& s : segments_)
    for (WorkPtr* w : {&s.work, &s.gather})
      if (*w) try {
          (*w)->wait();
        } catch (...) {
        }
  for (auto& p : params_) p.tensor.remove_post_accumulate_grad_hook(p.hook);
  for (auto& [m, h] : module_hooks_) m->remove_hook(h);
}

int64_t ZeroRedundancy::chunk_begin(const Segment& s, int rank) const { return s.chunk * rank; }

// Every rank starts from rank 0's values: all parameters and buffers, or
// (after a model on meta was materialized segment by segment, each segment
// broadcast on its own) the buffers and the parameters that are not sharded.
void ZeroRedundancy::broadcast_unsharded(bool parameters_too) {
  std::set<const void*> sharded;
  if (!parameters_too)
    for (auto& p : params_) sharded.insert(p.tensor.impl());
  std::vector<WorkPtr> works;
  for (auto& [n, t] : model_.named_parameters())
    if (!sharded.count(t.impl())) works.push_back(group_->broadcast(t, 0));
  for (auto& [n, t] : model_.named_buffers()) works.push_back(group_->broadcast(t, 0));
  for (auto& w : works) w->wait();
}

// Note [Materializing shard by shard]
// A model built on the meta device (shapes, no data) is materialized at stage
// 3 without ever holding all of it: for each segment, its parameters get the
// segment's flat buffer, and every module's reset_parameters and
// reset_buffers run from the generator state the model was built from. The
// initializers draw into meta tensors too, which allocates nothing but moves
// the counter-based generator on exactly as a real draw does (nn/init.cpp), so
// each segment receives the very numbers a model built on the CPU from the
// same seed holds, whatever order the initializers run in and even when a
// parent re-initializes its children (GPT, Llama, ResNet do). Rank 0's
// segment is broadcast and each rank keeps its chunk; the peak is the largest
// segment plus what is not sharded. The generator ends where building the
// model on the CPU would have left it.
void ZeroRedundancy::initialize_segment(size_t k) {
  Segment& s = segments_[k];
  default_generator().set_state(init_generator_->first, init_generator_->second);
  model_.apply([](nn::Module& m) {
    m.reset_parameters();
    m.reset_buffers();
  });
  group_->broadcast(s.flat, 0)->wait();
}

void ZeroRedundancy::build_segments() {
  const int n = group_->size(), r = group_->rank();
  for (auto& p : params_)
    TS_CHECK(p.tensor.is_contiguous() && (p.tensor.dtype() == DType::F32 || p.tensor.dtype() == DType::F64),
             "ZeroRedundancy: parameter '", p.name,
             "' must be a contiguous f32 or f64 tensor (keep f32 master weights; autocast computes in bf16)");
  std::vector<std::vector<size_t>> members;  // parameters per segment
  if (opt_.stage == 3) {
    build_units(members);
  } else {
    // Buckets, last layers first; a new one when the dtype changes or the cap is reached.
    int64_t bytes = 0;
    for (size_t k = params_.size(); k-- > 0;) {
      const Tensor& t = params_[k].tensor;
      const int64_t nbytes = t.numel() * static_cast<int64_t>(t.itemsize());
      const double cap = (segments_.size() <= 1 ? opt_.first_bucket_mb : opt_.bucket_cap_mb) * 1e6;
      if (segments_.empty() || segments_.back().dtype != t.dtype() ||
          (bytes > 0 && static_cast<double>(bytes + nbytes) > cap)) {
        segments_.emplace_back();
        segments_.back().dtype = t.dtype();
        members.emplace_back();
        bytes = 0;
      }
      members.back().push_back(k);
      bytes += nbytes;
    }
    for (size_t i = 0; i < segments_.size(); ++i) launch_order_.push_back(i);
  }
  for (size_t si = 0; si < segments_.size(); ++si) {
    Segment& s = segments_[si];
    for (size_t k : members[si]) {
      TS_CHECK(params_[k].tensor.dtype() == s.dtype, "ZeroRedundancy: the parameters of one unit must share a dtype; '",
               params_[k].name, "' is ", dtype_name(params_[k].tensor.dtype()));
      params_[k].segment = si;
      params_[k].offset = s.numel;
      s.params.push_back(k);
      s.numel += params_[k].tensor.numel();
    }
    s.chunk = std::max<int64_t>(1, (s.numel + n - 1) / n);
    s.flat = zeros({s.chunk * n}, s.dtype);
    if (opt_.stage == 1) s.grad = zeros({s.chunk * n}, s.dtype);
    const int64_t lo = chunk_begin(s, r), hi = lo + s.chunk;
    for (size_t k : s.params) {
      Param& p = params_[k];
      const int64_t numel = p.tensor.numel();
      Tensor view = s.flat.narrow(0, p.offset, numel).view(p.tensor.shape());
      if (!init_generator_) view.copy_(p.tensor);
      p.tensor.set_data(view);
    }
    if (init_generator_) initialize_segment(si);
    if (opt_.stage == 3) {
      s.shard = s.flat.narrow(0, lo, s.chunk).clone();
      s.resident = true;
    }
    for (size_t k : s.params) {
      Param& p = params_[k];
      const int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.tensor.numel());
      if (a < b) {
        p.piece = opt_.stage == 3 ? s.shard.narrow(0, a - lo, b - a) : s.flat.narrow(0, a, b - a);
        p.piece.requires_grad_(true);
        p.piece_begin = a - p.offset;
      }
    }
    if (opt_.stage == 3) release(si);  // from now on only the shard
  }
}

// Note [ZeRO-3 units]: the model's shard_units (the elements of its
// ModuleLists, and the embeddings and head a model names), in forward order.
// Units that share a parameter (an embedding and the head tied to it, which
// lists the weight among its shared_parameters) are one segment, gathered
// around each of their uses; a parameter of no unit is the root's.
void ZeroRedundancy::build_units(std::vector<std::vector<size_t>>& members) {
  std::map<const void*, size_t> index_of;
  for (size_t i = 0; i < params_.size(); ++i) index_of.emplace(params_[i].tensor.impl(), i);
  std::vector<nn::Module*> units = model_.shard_units();
  // Each unit's trainable parameters: its own, and those it uses of another's.
  std::vector<std::vector<size_t>> used(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<Tensor> ts;
    for (auto& [n, t] : units[u]->named_parameters()) ts.push_back(t);
    for (const Tensor& t : units[u]->shared_parameters()) ts.push_back(t);
    for (const Tensor& t : ts)
      if (auto it = index_of.find(t.impl()); it != index_of.end()) used[u].push_back(it->second);  // else frozen
  }
  // Units joined through a shared parameter: each unit points at the first
  // unit of its group (union-find by the smaller index).
  std::vector<size_t> first(units.size());
  for (size_t u = 0; u < units.size(); ++u) first[u] = u;
  auto find = [&](size_t u) {
    while (first[u] != u) u = first[u] = first[first[u]];
    return u;
  };
  constexpr size_t kNone = SIZE_MAX;
  std::vector<size_t> unit_of(params_.size(), kNone);  // the first unit using each parameter
  for (size_t u = 0; u < units.size(); ++u)
    for (size_t i : used[u]) {
      if (unit_of[i] == kNone) {
        unit_of[i] = u;
        continue;
      }
      const size_t a = find(unit_of[i]), b = find(u);
      if (a != b) first[std::max(a, b)] = std::min(a, b);
    }
  // Segments in the order of their first use; uses in forward order.
  std::map<size_t, size_t> segment_of;  // a group's first unit -> its segment
  for (size_t u = 0; u < units.size(); ++u) {
    if (used[u].empty()) continue;
    const size_t g = find(u);
    auto [it, fresh] = segment_of.emplace(g, segments_.size());
    if (fresh) {
      std::vector<size_t> mine;
      for (size_t i = 0; i < params_.size(); ++i)
        if (unit_of[i] != kNone && find(unit_of[i]) == g) mine.push_back(i);
      segments_.emplace_back();
      segments_.back().unit = units[u];
      segments_.back().dtype = params_[mine[0]].tensor.dtype();
      members.push_back(std::move(mine));
    }
    ++segments_[it->second].uses;
    uses_.push_back({units[u], it->second});
  }
  // Backward completes a segment at its first use, so the segments last to
  // first; the root (the final norm, ...) last of all.
  for (size_t k = segments_.size(); k-- > 0;) launch_order_.push_back(k);
  std::vector<size_t> root;
  for (size_t i = 0; i < params_.size(); ++i)
    if (unit_of[i] == kNone) root.push_back(i);
  if (!root.empty()) {
    launch_order_.push_back(segments_.size());
    segments_.emplace_back();
    segments_.back().dtype = params_[root[0]].tensor.dtype();
    members.push_back(std::move(root));
  }
}

// Each use of a unit: its forward pre-hook gathers the unit (and starts the
// next use's gather); its forward hook drops it and hooks the output, whose
// gradient arriving means the use's backward is next: gather again (an
// Embedding's backward reads no weights: not for it) and start the previous
// use's gather. A segment used more than once is dropped again after each
// use's backward (a hook on the use's input), since the next use backward
// gathers it anew.
void ZeroRedundancy::install_unit_hooks() {
  NoGradGuard no_grad;
  constexpr size_t kNone = SIZE_MAX;
  size_t root = kNone;
  for (size_t k = 0; k < segments_.size(); ++k)
    if (!segments_[k].unit) root = k;
  for (size_t u = 0; u < uses_.size(); ++u) {
    nn::Module* m = uses_[u].module;
    const size_t k = uses_[u].segment;
    const size_t next = u + 1 < uses_.size() ? uses_[u + 1].segment : kNone;
    const size_t prev = u > 0 ? uses_[u - 1].segment : kNone;
    const bool shared = segments_[k].uses > 1;
    const bool backward_reads_weights = dynamic_cast<nn::Embedding*>(m) == nullptr;
    module_hooks_.emplace_back(m, m->register_forward_pre_hook([this, k, next, shared](nn::Module&, Tensor& in) {
      materialize(k);
      if (next != kNone && !in_backward_) prefetch(next);
      if (shared && GradMode::is_enabled() && in.defined() && in.requires_grad())
        in.register_hook([this, k](const Tensor&) {
          release(k);  // this use's backward is over
          return Tensor();
        });
    }));
    module_hooks_.emplace_back(m, m->register_forward_hook([this, k, prev, backward_reads_weights](
                                                                nn::Module&, const Tensor&, Tensor& out) {
      if (GradMode::is_enabled() && out.defined() && out.requires_grad() && !out.is_leaf())
        out.register_hook([this, k, prev, backward_reads_weights](const Tensor&) {
          begin_backward();
          if (backward_reads_weights) materialize(k);
          if (prev != kNone) prefetch(prev);
          return Tensor();
        });
      release(k);
    }));
  }
  const size_t first_use = uses_.empty() ? kNone : uses_[0].segment;
  module_hooks_.emplace_back(&model_, model_.register_forward_pre_hook([this, root, first_use](nn::Module&, Tensor&) {
    if (root != kNone) materialize(root);
    if (first_use != kNone) prefetch(first_use);
  }));
  module_hooks_.emplace_back(&model_, model_.register_forward_hook([this, root](nn::Module&, const Tensor&, Tensor& out) {
    // Without a backward to come, nothing needs the root until the next forward.
    if (root != kNone && !(GradMode::is_enabled() && out.defined() && out.requires_grad())) release(root);
  }));
}

void ZeroRedundancy::prefetch(size_t k) {
  Segment& s = segments_[k];
  if (s.resident || s.gather) return;
  s.gathering = empty({s.chunk * group_->size()}, s.dtype);  // a fresh buffer: see Note [ZeRO-3 units]
  s.gather = group_->allgather(s.gathering, s.shard);
}

void ZeroRedundancy::materialize(size_t k) {
  Segment& s = segments_[k];
  if (s.resident) return;
  prefetch(k);
  s.gather->wait();
  s.gather = nullptr;
  s.flat = std::move(s.gathering);
  s.gathering = Tensor();
  for (size_t i : s.params) {
    Param& p = params_[i];
    p.tensor.set_data(s.flat.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape()));
  }
  s.resident = true;
}

void ZeroRedundancy::release(size_t k) {
  Segment& s = segments_[k];
  if (s.gather) {  // a prefetch nobody used
    s.gather->wait();
    s.gather = nullptr;
    s.gathering = Tensor();
  }
  if (!s.resident) return;
  for (size_t i : s.params) {
    Param& p = params_[i];
    p.tensor.set_data(empty(p.tensor.shape(), TensorOptions(p.tensor.dtype(), Device::meta())));
  }
  s.flat = Tensor();
  s.resident = false;
}

void ZeroRedundancy::set_whole_parameters(bool whole) {
  if (opt_.stage != 3) return;
  NoGradGuard no_grad;
  if (whole) {
    for (size_t k = 0; k < segments_.size(); ++k) prefetch(k);
    for (size_t k = 0; k < segments_.size(); ++k) materialize(k);
    return;
  }
  for (size_t k = 0; k < segments_.size(); ++k) {
    Segment& s = segments_[k];
    if (s.resident) s.shard.copy_(s.flat.narrow(0, chunk_begin(s, group_->rank()), s.chunk));
    release(k);
  }
}

std::vector<std::vector<std::string>> ZeroRedundancy::segments() const {
  std::vector<std::vector<std::string>> out;
  for (auto& s : segments_) {
    out.emplace_back();
    for (size_t i : s.params) out.back().push_back(params_[i].name);
  }
  return out;
}

int64_t ZeroRedundancy::shard_numel() const {
  int64_t n = 0;
  for (auto& p : params_)
    if (p.piece.defined()) n += p.piece.numel();
  return n;
}

void ZeroRedundancy::begin_backward() {
  if (in_backward_) return;
  in_backward_ = true;
  next_launch_ = 0;
  for (auto& p : params_) p.ready = false;
  for (auto& s : segments_) {
    s.pending = s.params.size();
    s.work = nullptr;
  }
  autograd::queue_callback([this] { finish_backward(); });
}

void ZeroRedundancy::on_grad_ready(size_t index) {
  if (opt_.stage == 1 && !sync_) return;
  begin_backward();
  Param& p = params_[index];
  TS_CHECK(!p.ready, "ZeroRedundancy: parameter '", p.name, "' received its gradient twice in one backward (rank ",
           group_->rank(), ", step ", step_, "); run one backward per micro-batch");
  p.ready = true;
  Segment& s = segments_[p.segment];
  NoGradGuard no_grad;
  Tensor g = p.tensor.grad();
  if (opt_.stage == 1) {
    Tensor view = s.grad.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape());
    if (g.raw_data() != view.raw_data()) {
      view.copy_(g);
      p.tensor.set_grad(view);
    }
  } else {
    if (!s.grad.defined()) s.grad = zeros({s.chunk * group_->size()}, s.dtype);
    s.grad.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape()).copy_(g);
    p.tensor.set_grad(Tensor());  // the full gradient is not kept
  }
  if (--s.pending > 0) return;
  if (opt_.stage == 3 && s.unit) release(p.segment);  // its backward is over
  if (opt_.overlap)
    while (next_launch_ < launch_order_.size() && segments_[launch_order_[next_launch_]].pending == 0)
      launch(segments_[launch_order_[next_launch_++]]);
}

void ZeroRedundancy::launch(Segment& s) {
  if (opt_.stage == 1) {
    s.work = group_->allreduce(s.grad, ReduceOp::kAvg);
  } else {
    if (!s.grad.defined()) s.grad = zeros({s.chunk * group_->size()}, s.dtype);  // nothing used here
    s.received = empty({s.chunk}, s.dtype);
    s.work = group_->reduce_scatter(s.received, s.grad, ReduceOp::kAvg);
  }
}

void ZeroRedundancy::finish_backward() {
  in_backward_ = false;
  NoGradGuard no_grad;
  std::vector<size_t> unused;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].ready) unused.push_back(i);
    else used_[i] = 1;
  if (!unused.empty() && !opt_.find_unused_parameters) {
    std::vector<std::string> names;
    for (size_t i : unused) names.push_back(params_[i].name);
    unused_parameters_error("ZeroRedundancy", names, step_, group_->rank());
  }
  for (size_t i : unused) {  // zeros: the other ranks' gradients still average in
    Param& p = params_[i];
    Segment& s = segments_[p.segment];
    if (s.grad.defined()) s.grad.narrow(0, p.offset, p.tensor.numel()).zero_();
    --s.pending;
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (next_launch_ < launch_order_.size()) launch(segments_[launch_order_[next_launch_++]]);
  for (auto& s : segments_) s.work->wait();
  last_wait_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int r = group_->rank();
  for (auto& s : segments_) {
    s.work = nullptr;
    if (opt_.stage >= 2) {
      if (s.shard_grad.defined())
        s.shard_grad.add_(s.received);
      else
        s.shard_grad = s.received;
      s.received = Tensor();
      s.grad = Tensor();  // the full gradients are freed
    }
    for (size_t k : s.params) {
      Param& p = params_[k];
      if (opt_.stage == 1) p.tensor.set_grad(s.grad.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape()));
      if (!p.piece.defined()) continue;
      const int64_t at = p.offset + p.piece_begin;  // the piece's place in the segment
      p.piece.set_grad(opt_.stage == 1 ? s.grad.narrow(0, at, p.piece.numel())
                                       : s.shard_grad.narrow(0, at - chunk_begin(s, r), p.piece.numel()));
    }
  }
  if (opt_.stage == 3)
    for (size_t k = 0; k < segments_.size(); ++k) release(k);  // the root, and units a backward skipped
  if (opt_.find_unused_parameters) {
    // A parameter no rank used in any backward of this step has no gradient,
    // as in one process (the optimizer skips it).
    Tensor used = from_buffer(used_.data(), {static_cast<int64_t>(used_.size())}, DType::I32).clone();
    group_->allreduce(used, ReduceOp::kMax)->wait();
    for (size_t i = 0; i < params_.size(); ++i)
      if (used.data_ptr<int32_t>()[i] == 0) {
        params_[i].tensor.set_grad(Tensor());
        if (params_[i].piece.defined()) params_[i].piece.set_grad(Tensor());
      }
  }
}

void ZeroRedundancy::step() {
  optimizer_.step();
  gather_parameters();
  clear_gradients();
}

void ZeroRedundancy::gather_parameters() {
  if (opt_.stage == 3) return;  // each unit is gathered by its forward
  NoGradGuard no_grad;
  std::vector<Tensor> mine;
  std::vector<WorkPtr> works;
  for (auto& s : segments_) {
    mine.push_back(s.flat.narrow(0, chunk_begin(s, group_->rank()), s.chunk).clone());
    works.push_back(group_->allgather(s.flat, mine.back()));
  }
  for (auto& w : works) w->wait();
}

void ZeroRedundancy::clear_gradients() {
  for (auto& p : params_) {
    p.tensor.set_grad(Tensor());
    if (p.piece.defined()) p.piece.set_grad(Tensor());
  }
  for (auto& s : segments_) s.shard_grad = Tensor();
  std::fill(used_.begin(), used_.end(), 0);
}

}  // namespace tessera::distributed
