// Data x tensor x pipeline parallelism (tessera/distributed/parallel3d.h).
#include "tessera/distributed/parallel3d.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/generator.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/ops/ops.h"

namespace tessera::distributed {

std::string Layout::str() const {
  return std::to_string(data) + " x " + std::to_string(tensor) + " x " + std::to_string(pipeline) +
         " (data x tensor x pipeline)";
}

Mesh make_mesh(const ProcessGroupPtr& world, Layout l) {
  TS_CHECK(world, "make_mesh: the group is null");
  TS_CHECK(l.data >= 1 && l.tensor >= 1 && l.pipeline >= 1, "parallel: data, tensor and pipeline must be at least 1, "
           "got ", l.str());
  TS_CHECK(static_cast<int64_t>(l.data) * l.tensor * l.pipeline == world->size(), "parallel: ", l.str(), " makes ",
           static_cast<int64_t>(l.data) * l.tensor * l.pipeline, " ranks, but the job has ", world->size(),
           "; data * tensor * pipeline must equal the world's size");
  Mesh m;
  m.layout = l;
  const int r = world->rank(), T = l.tensor, D = l.data;
  m.tensor_rank = r % T;
  m.data_rank = (r / T) % D;
  m.pipeline_rank = r / (T * D);
  // Collective, in one order on every rank.
  m.tensor = world->split(r / T, m.tensor_rank);
  m.data = world->split(m.pipeline_rank * T + m.tensor_rank, m.data_rank);
  m.pipeline = world->split(m.data_rank * T + m.tensor_rank, m.pipeline_rank);
  return m;
}

namespace {

// `collective` on one buffer per dtype holding `tensors` end to end, then
// the buffer's values back into them (handles: copy_ writes the tensors).
void through_flat(const TensorList& tensors, const std::function<void(const Tensor&)>& collective) {
  std::map<DType, TensorList> by_dtype;
  for (const Tensor& t : tensors) by_dtype[t.dtype()].push_back(t);
  for (auto& [dtype, list] : by_dtype) {
    TensorList flat;
    for (const Tensor& t : list) flat.push_back(t.reshape({-1}));
    Tensor buffer = ops::cat(flat, 0);
    collective(buffer);
    int64_t at = 0;
    for (Tensor t : list) {
      t.copy_(buffer.narrow(0, at, t.numel()).view(t.shape()));
      at += t.numel();
    }
  }
}

bool on_meta(const nn::Module& m) {
  for (auto& [name, p] : m.named_parameters())
    if (p.device().is_meta()) return true;
  return false;
}

// The zoo's GPT or Llama of `m`'s configuration, built on meta (shapes only).
std::shared_ptr<nn::Module> same_model_on_meta(const nn::Module& m) {
  DeviceScope meta(Device::meta());
  if (auto* g = dynamic_cast<const nn::zoo::GPT*>(&m)) return std::make_shared<nn::zoo::GPT>(g->config);
  if (auto* l = dynamic_cast<const nn::zoo::Llama*>(&m)) return std::make_shared<nn::zoo::Llama>(l->config);
  TS_ERROR("Parallel3D: a model built on meta is materialized for the zoo's GPT and Llama, not a ", m.type_name());
}

}  // namespace

Parallel3D::Parallel3D(std::shared_ptr<nn::Module> model, const ProcessGroupPtr& world, Parallel3DOptions o)
    : mesh_(make_mesh(world, o.layout)), model_(std::move(model)) {
  // A model built on meta: its template, the whole model on meta again, made
  // before the split from the generator state the model was built from.
  std::shared_ptr<nn::Module> whole;
  const uint64_t seed = default_generator().seed(), offset = default_generator().offset();
  if (on_meta(*model_)) {
    TS_CHECK(o.pipeline.split != "time", "Parallel3D: a model built on meta has no weights to time its layers "
             "with; split its pipeline by layers or parameters");
    whole = same_model_on_meta(*model_);
  }
  if (o.layout.tensor > 1)
    region_rng_ = tensor_parallelize(*model_, mesh_.tensor, {.sequence_parallel = o.sequence_parallel});
  for (auto& [name, spec] : tensor_parallel_shards(*model_)) specs_[name] = spec;
  ProcessGroupPtr tp = mesh_.tensor;
  Pipeline::LossFn loss;
  if (o.layout.tensor > 1)
    loss = [tp](const Tensor& logits, const Tensor& t) { return vocab_parallel_cross_entropy(logits, t, tp); };
  else
    loss = [](const Tensor& logits, const Tensor& t) {
      return ops::cross_entropy(logits.reshape({-1, logits.size(-1)}), t.reshape({-1}));
    };
  pipeline_ = std::make_unique<Pipeline>(model_, mesh_.pipeline, o.pipeline, loss);
  if (whole) materialize_parts(*whole, seed, offset);
  TS_CHECK(o.zero == 0 || o.zero == 1, "Parallel3D: zero ", o.zero, " with tensor or pipeline parallelism is 0 or 1 "
           "(ZeRO-2 and -3 shard what a model-parallel rank holds already)");
  if (o.zero == 1 && o.layout.data > 1) {
    // Note [ZeRO-1 over the data group]: the data ranks of one model part hold
    // the same tensors, so they share them out alike: largest first, each to
    // the least loaded rank (as PyTorch's ZeroRedundancyOptimizer does).
    std::vector<std::pair<std::string, int64_t>> sizes;
    for (auto& [name, p] : parameters())
      if (p.requires_grad()) sizes.emplace_back(name, p.numel());
    std::stable_sort(sizes.begin(), sizes.end(), [](auto& a, auto& b) { return a.second > b.second; });
    std::vector<int64_t> load(static_cast<size_t>(o.layout.data), 0);
    for (auto& [name, n] : sizes) {
      const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      owner_[name] = r;
      load[static_cast<size_t>(r)] += n;
    }
  }
}

nn::NamedTensors Parallel3D::stepped_parameters() const {
  nn::NamedTensors out;
  for (auto& [name, p] : parameters())
    if (owner_.empty() || (owner_.count(name) && owner_.at(name) == mesh_.data_rank)) out.emplace_back(name, p);
  return out;
}

void Parallel3D::gather_parameters() {
  if (owner_.empty()) return;
  NoGradGuard no_grad;
  std::map<std::string, Tensor> mine;
  for (auto& [name, p] : parameters()) mine[name] = p;
  // Each data rank's parameters, in name order, from it to the others.
  for (int r = 0; r < mesh_.layout.data; ++r) {
    TensorList list;
    for (auto& [name, owner] : owner_)
      if (owner == r) list.push_back(mine.at(name));
    through_flat(list, [&](const Tensor& flat) { mesh_.data->broadcast(flat, r)->wait(); });
    if (r != mesh_.data_rank)
      for (Tensor p : list) p.set_grad(Tensor());
  }
}

// Note [Materializing a split model]
// A model too large for one process is built on the meta device, split, and
// only then given memory: this rank's tensors (its tensor block of its
// stages' parameters, and its buffers), a few at a time, from a template of
// the whole model on meta. For each batch of the template's tensors, those
// get memory and every module's reset_parameters and reset_buffers run from
// the generator state the model was built from: the initializers draw into
// the meta tensors too, which allocates nothing but moves the counter-based
// generator on as a real draw does (nn/init.cpp), so each tensor receives
// the numbers a model built on the CPU from that seed holds, even where a
// parent re-initializes its children (as GPT and Llama do). This rank keeps
// its part (ShardSpec::take) and the template's tensors go back to meta. The
// peak beyond this rank's part is one batch of whole tensors (kBatchBytes,
// or one tensor larger than that). ZeRO-3 materializes its segments the
// same way (Note [Materializing shard by shard] in zero.cpp). The generator
// ends where building the model on the CPU would have left it.
void Parallel3D::materialize_parts(nn::Module& whole, uint64_t seed, uint64_t offset) {
  constexpr int64_t kBatchBytes = int64_t{64} << 20;
  NoGradGuard no_grad;
  const uint64_t end = default_generator().offset();  // after the template's build, as after a CPU build
  // The template's tensors by name.
  std::map<std::string, Tensor> in_whole;
  for (auto& [name, t] : whole.named_parameters()) in_whole[name] = t;
  for (auto& [name, t] : whole.named_buffers()) in_whole[name] = t;
  // This rank's tensors still on meta.
  std::vector<std::pair<std::string, Tensor>> wanted;
  for (auto& [name, t] : parameters())
    if (t.device().is_meta()) wanted.emplace_back(name, t);
  for (auto& [name, t] : model_->named_buffers())
    if (t.device().is_meta()) wanted.emplace_back(name, t);
  for (size_t i = 0; i < wanted.size();) {
    struct Item {
      const std::string& name;
      Tensor whole, mine;  // the template's tensor, this rank's
    };
    std::vector<Item> batch;
    std::set<const void*> given;
    int64_t bytes = 0;
    for (; i < wanted.size() && (batch.empty() || bytes < kBatchBytes); ++i) {
      auto it = in_whole.find(wanted[i].first);
      TS_CHECK(it != in_whole.end(), "Parallel3D: '", wanted[i].first,
               "' of the split model is not a tensor of the whole ", whole.type_name());
      Tensor w = it->second;
      if (given.insert(w.impl()).second) {
        w.set_data(empty(w.shape(), w.dtype()));
        bytes += w.numel() * static_cast<int64_t>(w.itemsize());
      }
      batch.push_back({wanted[i].first, w, wanted[i].second});
    }
    default_generator().set_state(seed, offset);
    whole.apply([](nn::Module& m) {
      m.reset_parameters();
      m.reset_buffers();
    });
    for (Item& it : batch) {
      const ShardSpec* spec = spec_of(it.name);
      Tensor part = spec ? spec->take(it.whole) : it.whole.clone();
      it.mine.set_data(part.to(it.mine.dtype()).contiguous());
    }
    for (Item& it : batch)
      if (!it.whole.device().is_meta())
        it.whole.set_data(empty(it.whole.shape(), TensorOptions(it.whole.dtype(), Device::meta())));
  }
  default_generator().set_state(seed, end);
}

optim::ParamGroup Parallel3D::param_group() const {
  optim::ParamGroup g;
  for (auto& [name, p] : stepped_parameters())
    if (p.requires_grad()) {
      g.params.push_back(p);
      g.names.push_back(name);
    }
  return g;
}

Tensor Parallel3D::step(const Tensor& inputs, const Tensor& targets) {
  const int D = mesh_.layout.data;
  TS_CHECK(inputs.defined() && inputs.dim() >= 1 && inputs.size(0) % D == 0, "Parallel3D::step: the global batch's ",
           inputs.defined() && inputs.dim() >= 1 ? inputs.size(0) : 0, " rows must divide by the data-parallel size ",
           D, " (each data rank runs an equal share)");
  const int64_t rows = inputs.size(0) / D;
  return step_rows(inputs.narrow(0, mesh_.data_rank * rows, rows), targets.narrow(0, mesh_.data_rank * rows, rows));
}

Tensor Parallel3D::step_rows(const Tensor& inputs, const Tensor& targets, double scale, bool sync) {
  Tensor loss = pipeline_->step(inputs, targets, scale);
  if (mesh_.layout.data == 1) return loss;
  if (sync) {  // the data ranks' gradients averaged, one all-reduce per dtype
    NoGradGuard no_grad;
    TensorList grads;
    for (auto& [name, p] : parameters())
      if (p.grad().defined()) grads.push_back(p.grad());
    through_flat(grads, [&](const Tensor& flat) { mesh_.data->allreduce(flat, ReduceOp::kAvg)->wait(); });
  }
  Tensor mean = loss.reshape({1}).clone();
  mesh_.data->allreduce(mean, ReduceOp::kAvg)->wait();
  return mean.reshape({});
}

Tensor Parallel3D::evaluate_rows(const Tensor& inputs, const Tensor& targets) {
  return pipeline_->evaluate(inputs, targets);
}

void Parallel3D::reseed(uint64_t key) {
  if (!region_rng_) return;
  // splitmix64 of the key and the tensor rank: each rank's own stream.
  uint64_t z = key + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(mesh_.tensor_rank) + 2718);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  region_rng_->generator().set_state(z ^ (z >> 31), 0);
}

TensorList Parallel3D::norm_parameters() const {
  TensorList out;
  if (mesh_.data_rank != 0) return out;
  for (auto& [name, p] : parameters())
    if (!pipeline_->is_tied_copy(p) && (spec_of(name) || mesh_.tensor_rank == 0)) out.push_back(p);
  return out;
}

// ---- checkpoints -----------------------------------------------------------------------------

const ShardSpec* Parallel3D::spec_of(const std::string& name) const {
  auto it = specs_.find(name);
  return it == specs_.end() ? nullptr : &it->second;
}

bool Parallel3D::writes(const std::string& name, const Tensor& t, int data_writer) const {
  if (mesh_.data_rank != data_writer || t.device().is_meta() || pipeline_->is_tied_copy(t)) return false;
  return spec_of(name) || mesh_.tensor_rank == 0;
}

namespace {

// `local`'s pieces of a whole tensor split as `spec` says, as checkpoint boxes.
void add_pieces(std::vector<io::CheckpointPiece>& out, const std::string& name, const Tensor& local,
                const ShardSpec* spec) {
  io::CheckpointPiece p;
  p.name = name;
  if (!spec || spec->replicated()) {
    p.data = local.detach().contiguous();
    p.shape = Shape(local.shape().begin(), local.shape().end());
    out.push_back(p);
    return;
  }
  p.shape = spec->dense_shape;
  int64_t at = 0;
  for (auto [begin, end] : spec->ranges) {
    p.data = local.detach().narrow(spec->dim, at, end - begin).contiguous();
    p.offset.assign(local.dim(), 0);
    p.offset[spec->dim] = begin;
    out.push_back(p);
    at += end - begin;
  }
}

// Reads `name`'s part as `spec` says (whole when null) and checks its shape against `like`.
Tensor read_part(const io::CheckpointReader& reader, io::CheckpointReader::Part part, const std::string& name,
                 const ShardSpec* spec, const Tensor& like) {
  TS_CHECK(reader.contains(part, name), "Parallel3D: the checkpoint in ", reader.dir(), " has no ",
           part == io::CheckpointReader::kModel ? "tensor" : "optimizer state", " '", name, "'");
  const Shape& whole = reader.shape(part, name);
  if (!spec || spec->replicated()) {
    TS_CHECK(whole == like.shape(), "Parallel3D: '", name, "' is ", shape_str(whole), " in the checkpoint but ",
             shape_str(like.shape()), " in the model");
    return reader.read(part, name);
  }
  TS_CHECK(whole == spec->dense_shape, "Parallel3D: '", name, "' is ", shape_str(whole), " in the checkpoint but ",
           shape_str(spec->dense_shape), " in the model");
  TensorList parts;
  for (auto [begin, end] : spec->ranges) {
    std::vector<int64_t> offset(whole.size(), 0), box(whole.begin(), whole.end());
    offset[spec->dim] = begin;
    box[spec->dim] = end - begin;
    parts.push_back(reader.read_box(part, name, offset, box));
  }
  return parts.size() == 1 ? parts[0] : ops::cat(parts, spec->dim);
}

// "state.<param>.<key>" of a state tensor, or "" when `name` is not one of `param`'s.
std::string state_key(const std::string& name, const std::string& param) {
  const std::string prefix = "state." + param + ".";
  if (name.rfind(prefix, 0) != 0) return "";
  std::string key = name.substr(prefix.size());
  return key.find('.') == std::string::npos ? key : "";
}

}  // namespace

io::CheckpointShard Parallel3D::checkpoint_shard(const optim::Optimizer& optimizer) const {
  io::CheckpointShard shard;
  for (auto& [name, t] : model_->state_dict().entries)
    if (writes(name, t)) add_pieces(shard.model, name, t, spec_of(name));
  // The optimizer's state of the parameters whose pieces this rank writes
  // (under ZeRO-1, the data rank that stepped them writes them instead of
  // data rank 0). A state tensor shaped as its parameter splits as it does;
  // others (a step count) are written whole by the parameter's writer.
  std::map<std::string, Tensor> mine;
  for (auto& [name, p] : stepped_parameters())
    if (writes(name, p, owner_.empty() ? 0 : owner_.at(name))) mine[name] = p;
  optim::OptimizerState state = optimizer.state_dict();
  for (auto& [sname, t] : state.tensors)
    for (auto& [pname, p] : mine) {
      if (state_key(sname, pname).empty()) continue;
      const ShardSpec* spec = spec_of(pname);
      const bool split = spec && t.shape() == p.shape();
      if (split)
        add_pieces(shard.optimizer, sname, t, spec);
      else if (mesh_.tensor_rank == 0)
        add_pieces(shard.optimizer, sname, t, nullptr);
    }
  shard.optimizer_groups = state.groups;
  return shard;
}

void Parallel3D::load_checkpoint(const io::CheckpointReader& reader, optim::Optimizer& optimizer) {
  NoGradGuard no_grad;
  // The names first, the same on every rank (each rank's shapes are checked as it reads its part).
  std::set<std::string> in_model, in_file;
  for (auto& [name, t] : model_->state_dict().entries) in_model.insert(name);
  for (const std::string& n : reader.names(io::CheckpointReader::kModel)) in_file.insert(n);
  std::vector<std::string> missing, unexpected;
  std::set_difference(in_model.begin(), in_model.end(), in_file.begin(), in_file.end(), std::back_inserter(missing));
  std::set_difference(in_file.begin(), in_file.end(), in_model.begin(), in_model.end(), std::back_inserter(unexpected));
  auto list = [](const std::vector<std::string>& v) {
    std::string out;
    for (size_t i = 0; i < v.size() && i < 5; ++i) out += (i ? ", " : "") + v[i];
    return v.size() > 5 ? out + " and " + std::to_string(v.size() - 5) + " more" : out;
  };
  TS_CHECK(missing.empty() && unexpected.empty(), "checkpoint ", reader.dir(), " does not fit this model:",
           missing.empty() ? "" : " missing " + list(missing) + ";",
           unexpected.empty() ? "" : " not in the model " + list(unexpected));
  for (auto& [name, t] : model_->state_dict().entries) {
    if (t.device().is_meta()) continue;
    t.copy_(read_part(reader, io::CheckpointReader::kModel, name, spec_of(name), t));
  }
  // This rank's optimizer state: its parameters' entries, each read as the
  // parameter is split (or whole, for a step count).
  optim::OptimizerState state = optimizer.state_dict();
  state.tensors.clear();
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : stepped_parameters()) params[name] = p;
  for (const std::string& sname : reader.names(io::CheckpointReader::kOptimizer)) {
    if (sname.rfind("state.", 0) != 0) continue;
    for (auto& [pname, p] : params) {
      if (state_key(sname, pname).empty()) continue;
      const ShardSpec* spec = spec_of(pname);
      const bool split = spec && reader.shape(io::CheckpointReader::kOptimizer, sname) == spec->dense_shape;
      Tensor like = split ? p : empty(reader.shape(io::CheckpointReader::kOptimizer, sname), p.dtype());
      Tensor v = read_part(reader, io::CheckpointReader::kOptimizer, sname, split ? spec : nullptr, like);
      state.tensors.emplace_back(sname, v);
    }
  }
  // The options (learning rate, betas) as saved, for groups this rank has too.
  const nlohmann::json& saved = reader.optimizer_groups();
  if (saved.is_array() && state.groups.is_array())
    for (size_t g = 0; g < state.groups.size() && g < saved.size(); ++g)
      if (saved[g].contains("options")) state.groups[g]["options"] = saved[g]["options"];
  optimizer.load_state_dict(state);
}

}  // namespace tessera::distributed
