// The Trainer's parallel strategy over a process group (train/parallel.h).
#include "tessera/distributed/trainer_parallel.h"

#include <cstring>

#include "tessera/distributed/ddp.h"
#include "tessera/distributed/parallel3d.h"
#include "tessera/distributed/sync_batch_norm.h"
#include "tessera/distributed/zero.h"

namespace tessera::distributed {

namespace {

// What every strategy over a process group shares: the group's ranks, the
// Trainer's reductions and messages over it, its metrics.
class GroupRun : public train::Parallel {
 public:
  GroupRun(const train::ParallelSettings& s, ProcessGroupPtr g) : s_(s), g_(std::move(g)) {}
  int rank() const override { return g_->rank(); }
  int size() const override { return g_->size(); }
  int local_rank() const override { return distributed::local_rank(); }
  void set_step(int64_t step) override { distributed::set_step(step); }
  void sum(std::vector<double>& v) override { reduce(v, ReduceOp::kSum); }
  void max(std::vector<double>& v) override { reduce(v, ReduceOp::kMax); }
  void barrier() override { g_->barrier()->wait(); }
  std::vector<std::string> gather_text(const std::string& mine) override {
    const int n = g_->size(), r = g_->rank();
    Tensor len = full({1}, static_cast<int64_t>(mine.size()), DType::I64), lens = empty({n}, DType::I64);
    g_->allgather(lens, len)->wait();
    const std::vector<int64_t> sizes = lens.to_vector<int64_t>();
    auto bytes = [](int64_t size) { return empty({size}, DType::U8); };
    if (r != 0) {
      Tensor b = bytes(static_cast<int64_t>(mine.size()));
      if (!mine.empty()) std::memcpy(b.data_ptr<uint8_t>(), mine.data(), mine.size());
      g_->send(b, 0)->wait();
      return {};
    }
    std::vector<std::string> out{mine};
    for (int s = 1; s < n; ++s) {
      Tensor b = bytes(sizes[s]);
      g_->recv(b, s)->wait();
      out.emplace_back(reinterpret_cast<const char*>(b.data_ptr<uint8_t>()), static_cast<size_t>(sizes[s]));
    }
    return out;
  }
  void abort(int code) override { abort_job(code); }
  void publish_metrics(monitor::Registry& r) override {
    using monitor::MetricType;
    r.set("tessera_dist_world_size", "Ranks in the job.", g_->size());
    r.set("tessera_dist_rank", "This process's rank.", g_->rank());
    for (auto& st : collective_stats()) {
      const monitor::Labels op{{"op", st.op}};
      r.set("tessera_dist_collectives_total", "Collectives and sends this rank issued, by operation.",
            static_cast<double>(st.calls), op, MetricType::kCounter);
      r.set("tessera_dist_bytes_total", "Bytes this rank contributed to them, by operation.", st.bytes, op,
            MetricType::kCounter);
      r.set("tessera_dist_comm_seconds_total", "Seconds the communication thread spent in them, by operation.",
            st.seconds, op, MetricType::kCounter);
    }
    r.set("tessera_dist_backward_wait_seconds",
          "Time the end of the last backward waited for its gradients' communication (what overlap did not hide).",
          backward_wait_seconds());
  }

 protected:
  // Seconds the end of the last backward waited for communication (metrics).
  virtual double backward_wait_seconds() const { return 0.0; }
  void reduce(std::vector<double>& v, ReduceOp op) {
    if (v.empty()) return;
    Tensor t = from_buffer(v.data(), {static_cast<int64_t>(v.size())}, DType::F64);
    g_->allreduce(t, op)->wait();
    std::copy(t.data_ptr<double>(), t.data_ptr<double>() + v.size(), v.begin());
  }
  train::ParallelSettings s_;
  ProcessGroupPtr g_;
};

// Data parallelism: DDP, or ZeRO at stage 1 to 3.
class DataParallelRun : public GroupRun {
 public:
  using GroupRun::GroupRun;

  void attach(nn::Module& model, optim::Optimizer& optimizer) override {
    if (s_.sync_batch_norm) convert_sync_batch_norm(model, g_);
    if (s_.zero > 0) {
      ZeroOptions o;
      o.stage = static_cast<int>(s_.zero);
      o.bucket_cap_mb = s_.bucket_mb;
      o.first_bucket_mb = s_.first_bucket_mb;
      o.find_unused_parameters = s_.find_unused_parameters;
      o.overlap = s_.overlap;
      zero_ = std::make_unique<ZeroRedundancy>(model, optimizer, g_, o);
      return;
    }
    DdpOptions o;
    o.bucket_cap_mb = s_.bucket_mb;
    o.first_bucket_mb = s_.first_bucket_mb;
    o.find_unused_parameters = s_.find_unused_parameters;
    o.overlap = s_.overlap;
    o.compression = s_.compression;
    o.powersgd_rank = static_cast<int>(s_.powersgd_rank);
    o.powersgd_start_step = s_.powersgd_start_step;
    ddp_ = std::make_unique<DistributedDataParallel>(model, g_, o);
  }
  void set_sync(bool sync) override {
    if (ddp_) ddp_->require_sync(sync);
    if (zero_) zero_->require_sync(sync);
  }
  void set_step(int64_t step) override {
    if (ddp_) ddp_->set_step(step);
    if (zero_) zero_->set_step(step);
    GroupRun::set_step(step);
  }
  bool shards_optimizer() const override { return zero_ != nullptr; }
  bool shards_parameters() const override { return zero_ && zero_->stage() == 3; }
  void after_step() override {
    if (!zero_) return;
    zero_->gather_parameters();
    zero_->clear_gradients();
  }
  bool checkpoint_shard(io::CheckpointShard& out) override {
    if (!zero_) return false;
    out = zero_->checkpoint_shard();
    return true;
  }
  bool load_checkpoint(const io::CheckpointReader& reader) override {
    if (!zero_) return false;
    zero_->load_checkpoint(reader);
    return true;
  }
  std::string describe() const override {
    return (zero_ ? "ZeRO-" + std::to_string(s_.zero) + " data parallel" : std::string("data parallel")) + " over " +
           std::to_string(g_->size()) + " ranks" +
           (zero_ && zero_->materialized_from_meta() ? ", the model materialized shard by shard" : "");
  }

 private:
  double backward_wait_seconds() const override {
    return ddp_ ? ddp_->last_wait_seconds() : zero_ ? zero_->last_wait_seconds() : 0.0;
  }
  std::unique_ptr<DistributedDataParallel> ddp_;  // one of the two
  std::unique_ptr<ZeroRedundancy> zero_;
};

// Data x tensor x pipeline (distributed/parallel3d.h): the model split across
// the ranks, each batch run through the pipeline by Parallel3D, the data
// ranks' gradients averaged, checkpoints sharded by the tensor split.
class ModelParallelRun : public GroupRun {
 public:
  ModelParallelRun(const train::ParallelSettings& s, ProcessGroupPtr g, Layout layout)
      : GroupRun(s, std::move(g)), layout_(layout) {}
  void attach(nn::Module& model, optim::Optimizer& optimizer) override {
    Parallel3DOptions o;
    o.layout = layout_;
    o.sequence_parallel = s_.sequence_parallel;
    o.pipeline.schedule = s_.schedule;
    o.pipeline.micro_batches = static_cast<int>(s_.micro_batches > 0 ? s_.micro_batches : 2 * s_.pipeline);
    o.pipeline.virtual_stages = static_cast<int>(s_.virtual_stages);
    o.pipeline.split = s_.pipeline_split;
    o.zero = static_cast<int>(s_.zero);
    // The whole model's groups, for the checkpoints' optimizer_groups: a run
    // resumed at another layout, or by one process, finds every name there.
    whole_groups_ = optimizer.state_dict().groups;
    job_ = std::make_unique<Parallel3D>(model.shared_from_this(), g_, o);
    optimizer_ = &optimizer;
    // The optimizer's groups keep their options; their parameters become
    // this rank's parts, found by name.
    std::map<std::string, Tensor> mine;  // what this rank's optimizer steps (its share, under ZeRO-1)
    for (auto& [name, p] : job_->stepped_parameters()) mine[name] = p;
    std::vector<TensorList> params;
    std::vector<std::vector<std::string>> names;
    for (const optim::ParamGroup& group : optimizer.param_groups()) {
      TS_CHECK(group.names.size() == group.params.size(), "parallel: the optimizer's parameters need names to be "
               "split across ranks");
      params.emplace_back();
      names.emplace_back();
      for (const std::string& n : group.names)
        if (auto it = mine.find(n); it != mine.end() && it->second.requires_grad()) {
          params.back().push_back(it->second);
          names.back().push_back(n);
        }
    }
    optimizer.set_params(std::move(params), std::move(names));
  }
  // Parallel3D gives a model built on meta memory for this rank's part only.
  bool materializes_parts() const override { return true; }
  // ZeRO-1: each data rank steps its share; the others receive it after the step.
  bool shards_optimizer() const override { return s_.zero == 1 && layout_.data > 1; }
  void after_step() override { job_->gather_parameters(); }
  // The split regions' generator follows the default one's per-step key.
  void reseed(uint64_t key) override { job_->reseed(key); }
  bool runs_batches() const override { return true; }
  double train_batch(const Tensor& inputs, const Tensor& targets, double scale, bool sync) override {
    return job_->step_rows(inputs, targets, scale, sync).item<double>();
  }
  double eval_batch(const Tensor& inputs, const Tensor& targets) override {
    return job_->evaluate_rows(inputs, targets).item<double>();
  }
  TensorList norm_parameters() override { return job_->norm_parameters(); }
  int data_rank() const override { return job_ ? job_->mesh().data_rank : 0; }
  int data_size() const override { return layout_.data; }
  bool checkpoint_shard(io::CheckpointShard& out) override {
    out = job_->checkpoint_shard(*optimizer_);
    // The whole model's groups with the options they have now (the scheduler's learning rate).
    nlohmann::json groups = whole_groups_;
    for (size_t g = 0; g < groups.size() && g < out.optimizer_groups.size(); ++g)
      groups[g]["options"] = out.optimizer_groups[g]["options"];
    out.optimizer_groups = groups;
    return true;
  }
  bool load_checkpoint(const io::CheckpointReader& reader) override {
    job_->load_checkpoint(reader, *optimizer_);
    return true;
  }
  std::string describe() const override {
    return "data x tensor x pipeline " + std::to_string(layout_.data) + " x " + std::to_string(layout_.tensor) + " x " +
           std::to_string(layout_.pipeline) + " (" + s_.schedule + ", " +
           std::to_string(s_.micro_batches > 0 ? s_.micro_batches : 2 * s_.pipeline) + " micro-batches" +
           (s_.sequence_parallel ? ", sequence parallel" : "") + (shards_optimizer() ? ", ZeRO-1 over the data ranks" : "") +
           ")";
  }

 private:
  Layout layout_;
  std::unique_ptr<Parallel3D> job_;
  optim::Optimizer* optimizer_ = nullptr;
  nlohmann::json whole_groups_;
};

// The first key path where two JSON values differ ("" when equal).
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& path) {
  if (a.is_number() && b.is_number()) return a == b ? "" : path;  // 3 read from YAML or JSON is the same
  if (a.type() != b.type()) return path.empty() ? "(the whole config)" : path;
  if (a.is_object()) {
    for (auto& [k, v] : a.items()) {
      const std::string p = path.empty() ? k : path + "." + k;
      if (!b.contains(k)) return p;
      if (auto d = first_difference(v, b[k], p); !d.empty()) return d;
    }
    for (auto& [k, v] : b.items())
      if (!a.contains(k)) return path.empty() ? k : path + "." + k;
    return "";
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return path;
    for (size_t i = 0; i < a.size(); ++i)
      if (auto d = first_difference(a[i], b[i], path + "[" + std::to_string(i) + "]"); !d.empty()) return d;
    return "";
  }
  return a == b ? "" : path;
}

}  // namespace

std::shared_ptr<train::Parallel> trainer_parallel(const train::ParallelSettings& s, ProcessGroupPtr g) {
  TS_CHECK(g, "trainer_parallel: no process group");
  if (s.data > 1 && g->size() == 1)
    TS_ERROR("config: parallel.data is ", s.data, " but this is one process; start it with `tessera launch -n ",
             s.data, " -- tessera train ...`");
  TS_CHECK(s.data == 0 || s.data == g->size() || s.splits_model(), "config: parallel.data is ", s.data, " but the launcher started ",
           g->size(), " ranks; set parallel.data to ", g->size(), " (or 0: as many as launched), or launch -n ", s.data);
  if (s.splits_model()) {
    const int64_t mp = s.tensor * s.pipeline;
    TS_CHECK(g->size() % mp == 0, "config: parallel.tensor x parallel.pipeline = ", s.tensor, " x ", s.pipeline, " = ",
             mp, " does not divide the ", g->size(), " ranks launched; launch a multiple of ", mp, " ranks");
    const int64_t data = s.data > 0 ? s.data : g->size() / mp;
    TS_CHECK(data * mp == g->size(), "config: parallel data x tensor x pipeline = ", data, " x ", s.tensor, " x ",
             s.pipeline, " = ", data * mp, " ranks, but the launcher started ", g->size());
    return std::make_shared<ModelParallelRun>(
        s, std::move(g), Layout{static_cast<int>(data), static_cast<int>(s.tensor), static_cast<int>(s.pipeline)});
  }
  return std::make_shared<DataParallelRun>(s, std::move(g));
}

void check_same_config(ProcessGroup& g, const nlohmann::json& config) {
  std::string text = config.dump();
  Tensor len = full({1}, static_cast<int64_t>(text.size()), DType::I64);
  g.broadcast(len, 0)->wait();
  Tensor bytes = zeros({len.item<int64_t>()}, DType::U8);
  if (g.rank() == 0) std::memcpy(bytes.raw_data(), text.data(), text.size());
  g.broadcast(bytes, 0)->wait();
  const std::string root_text(static_cast<const char*>(bytes.raw_data()), static_cast<size_t>(bytes.numel()));
  const nlohmann::json root = nlohmann::json::parse(root_text);
  const std::string diff = first_difference(config, root, "");
  Tensor bad = full({1}, diff.empty() ? 0.0 : 1.0 + g.rank(), DType::F64);
  g.allreduce(bad, ReduceOp::kMax)->wait();
  TS_CHECK(diff.empty(), "config: '", diff, "' differs between rank ", g.rank(), " and rank 0; every rank must run the same config");
  TS_CHECK(bad.item<double>() == 0, "config: rank ", static_cast<int>(bad.item<double>()) - 1,
           "'s config differs from rank 0's (it names the key)");
}

}  // namespace tessera::distributed
