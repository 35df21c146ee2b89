// ZeroRedundancy's optimizer state in the form one process holds it
// (consolidated_state, load_consolidated_state) and its pieces for a sharded
// checkpoint (checkpoint_shard). Note [ZeRO layout] in zero.cpp.
#include <functional>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "distributed/zero_parts.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/io/safetensors.h"

namespace tessera::distributed {

namespace {

// "state.<name>.<key>" -> {name, key}; names hold dots, keys do not.
std::pair<std::string, std::string> split_key(const std::string& key) {
  const size_t dot = key.rfind('.');
  TS_CHECK(key.rfind("state.", 0) == 0 && dot != std::string::npos && dot > 6 && dot + 1 < key.size(),
           "ZeroRedundancy: malformed optimizer state key '", key, "' (expected state.<parameter>.<key>)");
  return {key.substr(6, dot - 6), key.substr(dot + 1)};
}

}  // namespace

// The whole optimizer's groups, as one process's Optimizer::state_dict() gives them.
nlohmann::json ZeroRedundancy::whole_groups() const {
  nlohmann::json out = nlohmann::json::array();
  size_t idx = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    nlohmann::json jg;
    jg["options"] = optimizer_.param_groups()[g].options;
    std::vector<size_t> ids;
    std::vector<std::string> names;
    for (size_t i : groups_[g]) {
      ids.push_back(idx++);
      names.push_back(params_[i].name);
    }
    jg["params"] = ids;
    jg["param_names"] = names;
    out.push_back(std::move(jg));
  }
  return out;
}

io::CheckpointShard ZeroRedundancy::checkpoint_shard() {
  NoGradGuard no_grad;
  io::CheckpointShard out;
  const int r = group_->rank();
  std::map<std::string, const Param*> sharded;
  for (auto& p : params_) {
    sharded.emplace(p.name, &p);
    if (p.piece.defined()) out.model.push_back({p.name, p.piece, p.tensor.shape(), p.piece_begin});
  }
  if (r == 0)  // buffers and frozen parameters are whole on every rank
    for (auto& [name, t] : model_.state_dict().entries)
      if (!sharded.count(name)) out.model.push_back({name, t, t.shape(), -1});
  for (auto& [key, t] : optimizer_.state_dict().tensors) {
    auto [name, k] = split_key(key);
    const Param& p = *sharded.at(name);
    if (t.dim() == 0) {
      // A per-parameter scalar (Adam's step): written once, by the rank holding the parameter's first element.
      const Segment& s = segments_[p.segment];
      if (p.offset / s.chunk == r) out.optimizer.push_back({key, t, t.shape(), -1});
    } else {
      out.optimizer.push_back({key, t, p.tensor.shape(), p.piece_begin});
    }
  }
  out.optimizer_groups = whole_groups();
  return out;
}

optim::OptimizerState ZeroRedundancy::consolidated_state() {
  NoGradGuard no_grad;
  const optim::OptimizerState local = optimizer_.state_dict();
  // Every rank's pieces to every rank, as safetensors bytes.
  const std::string packed = io::safetensors_bytes(local.tensors);
  Tensor mine = from_buffer(const_cast<char*>(packed.data()), {static_cast<int64_t>(packed.size())}, DType::U8).clone();
  Tensor sizes = zeros({group_->size()}, DType::I64);
  group_->allgather(sizes, full({1}, mine.numel(), DType::I64))->wait();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index.emplace(params_[i].name, i);
  std::map<std::string, Tensor> whole;  // "state.<name>.<key>" -> the full tensor
  for (int q = 0; q < group_->size(); ++q) {
    Tensor bytes = q == group_->rank() ? mine : zeros({sizes.data_ptr<int64_t>()[q]}, DType::U8);
    group_->broadcast(bytes, q)->wait();
    const io::SafetensorsFile received = io::SafetensorsFile::parse(static_cast<const char*>(bytes.raw_data()),
                                                                     static_cast<size_t>(bytes.numel()),
                                                                     "rank " + std::to_string(q) + "'s optimizer state");
    for (auto& [key, t] : received.all()) {
      auto [name, k] = split_key(key);
      auto it = index.find(name);
      TS_CHECK(it != index.end(), "ZeroRedundancy: rank ", q, " holds optimizer state for '", name,
               "', which is not a parameter of the optimizer");
      const Param& p = params_[it->second];
      if (t.dim() == 0) {  // a per-parameter scalar (Adam's step): the same on every piece
        whole.emplace(key, t.clone());
        continue;
      }
      const Segment& s = segments_[p.segment];
      const int64_t a = std::max(chunk_begin(s, q), p.offset);
      const int64_t b = std::min(chunk_begin(s, q) + s.chunk, p.offset + p.tensor.numel());
      TS_CHECK(t.numel() == b - a, "ZeroRedundancy: optimizer state '", key, "' of rank ", q, " has ", t.numel(),
               " elements, its shard of the parameter ", b - a,
               "; ZeRO shards only element-wise optimizers (sgd, adam, adamw, rmsprop, adagrad, lion)");
      auto [w, fresh] = whole.emplace(key, Tensor());
      if (fresh) w->second = zeros(p.tensor.shape(), t.dtype());
      w->second.reshape({-1}).narrow(0, a - p.offset, b - a).copy_(t);
    }
  }
  optim::OptimizerState out;
  out.groups = whole_groups();
  for (auto& g : groups_)
    for (size_t i : g)
      for (auto& [key, t] : whole)
        if (split_key(key).first == params_[i].name) out.tensors.emplace_back(key, t);
  return out;
}

void ZeroRedundancy::load_consolidated_state(const optim::OptimizerState& state) {
  std::map<std::string, Tensor> by_key(state.tensors.begin(), state.tensors.end());
  std::vector<std::pair<std::string, int64_t>> keys;
  for (auto& [key, t] : state.tensors) keys.emplace_back(key, t.dim() == 0 ? -1 : t.numel());
  load_state(state.groups, keys, [&](const std::string& key, int64_t begin, int64_t count) {
    const Tensor& t = by_key.at(key);
    return count < 0 ? t : t.contiguous().reshape({-1}).narrow(0, begin, count).clone();
  });
}

// Note [Reading only this rank's ranges]: the model's tensors and the
// optimizer's state are read from the checkpoint a range at a time (mapped
// files), each rank only what it holds: at stage 3 its shards of the
// parameters, otherwise the whole parameters (every rank holds them); always
// only its shards of the optimizer state. No communication.
void ZeroRedundancy::load_checkpoint(const io::CheckpointReader& r) {
  NoGradGuard no_grad;
  using Part = io::CheckpointReader::Part;
  std::map<std::string, const Param*> sharded;
  for (auto& p : params_) sharded.emplace(p.name, &p);
  const std::string problems = model_.fit(r.shapes(Part::kModel)).problems();
  TS_CHECK(problems.empty(), "checkpoint ", r.dir(), " does not fit this model:", problems);
  for (auto& [name, t] : model_.state_dict().entries) {
    auto it = sharded.find(name);
    if (it != sharded.end() && opt_.stage == 3) {  // this rank's shard only
      const Param& p = *it->second;
      Tensor piece = p.piece;  // a view of the shard
      if (piece.defined()) piece.copy_(r.read(Part::kModel, name, p.piece_begin, piece.numel()));
    } else {
      Tensor dst = t;  // a view of the parameter or buffer
      dst.copy_(r.read(Part::kModel, name));
    }
  }
  std::vector<std::pair<std::string, int64_t>> keys;
  for (const std::string& key : r.names(Part::kOptimizer)) {
    const Shape& shape = r.shape(Part::kOptimizer, key);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    keys.emplace_back(key, shape.empty() ? -1 : numel);
  }
  load_state(r.optimizer_groups(), keys, [&](const std::string& key, int64_t begin, int64_t count) {
    return count < 0 ? r.read(Part::kOptimizer, key) : r.read(Part::kOptimizer, key, begin, count).clone();
  });
}

// The optimizer state one process saved (keys "state.<name or index>.<key>",
// each with its element count, -1 for a scalar), of which this rank loads its
// shards: read(key, begin, count) gives elements of the flattened tensor, or
// with count -1 the whole scalar.
void ZeroRedundancy::load_state(const nlohmann::json& groups, const std::vector<std::pair<std::string, int64_t>>& keys,
                                const std::function<Tensor(const std::string&, int64_t, int64_t)>& read) {
  NoGradGuard no_grad;
  TS_CHECK(groups.is_array() && groups.size() == groups_.size(), "ZeroRedundancy: the saved optimizer has ",
           groups.is_array() ? groups.size() : 0, " parameter groups, this one has ", groups_.size());
  std::vector<std::string> by_index;  // an older checkpoint keys its state by index in group order
  std::map<std::string, size_t> index;
  for (auto& g : groups_)
    for (size_t i : g) {
      by_index.push_back(params_[i].name);
      index.emplace(params_[i].name, i);
    }
  optim::OptimizerState local;
  for (auto& [key, numel] : keys) {
    auto [id, k] = split_key(key);
    if (!index.count(id)) {
      const bool numeric = !id.empty() && id.find_first_not_of("0123456789") == std::string::npos && id.size() < 10;
      TS_CHECK(numeric && std::stoul(id) < by_index.size(), "ZeroRedundancy: the saved optimizer state is for '", id,
               "', which this optimizer does not have");
      id = by_index[std::stoul(id)];
    }
    const Param& p = params_[index.at(id)];
    if (!p.piece.defined()) continue;  // another rank's
    if (numel < 0) {
      local.tensors.emplace_back("state." + id + "." + k, read(key, 0, -1));
      continue;
    }
    TS_CHECK(numel == p.tensor.numel(), "ZeroRedundancy: saved optimizer state '", key, "' has ", numel,
             " elements, the parameter '", id, "' has ", p.tensor.numel());
    local.tensors.emplace_back("state." + id + "." + k, read(key, p.piece_begin, p.piece.numel()));
  }
  local.groups = nlohmann::json::array();
  const auto& mine = optimizer_.param_groups();
  for (size_t g = 0; g < groups_.size(); ++g) {
    nlohmann::json jg = groups[g];
    TS_CHECK(jg.is_object() && jg.contains("options"), "ZeroRedundancy: saved group ", g, " has no options");
    std::vector<size_t> ids(mine[g].params.size());
    jg["params"] = ids;
    jg["param_names"] = mine[g].names;
    local.groups.push_back(std::move(jg));
  }
  optimizer_.load_state_dict(local);
}

}  // namespace tessera::distributed
