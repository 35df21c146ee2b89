// The Trainer's parallel strategy over a process group (train/parallel.h).
#include "tessera/distributed/trainer_parallel.h"

#include <cstring>

#include "tessera/distributed/ddp.h"
#include "tessera/distributed/sync_batch_norm.h"
#include "tessera/distributed/zero.h"

namespace tessera::distributed {

namespace {

class DataParallelRun : public train::Parallel {
 public:
  DataParallelRun(const train::ParallelSettings& s, ProcessGroupPtr g) : s_(s), g_(std::move(g)) {}
  int rank() const override { return g_->rank(); }
  int size() const override { return g_->size(); }
  int local_rank() const override { return distributed::local_rank(); }

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
    distributed::set_step(step);
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
    const double wait = ddp_ ? ddp_->last_wait_seconds() : zero_ ? zero_->last_wait_seconds() : 0.0;
    r.set("tessera_dist_backward_wait_seconds",
          "Time the end of the last backward waited for its gradients' communication (what overlap did not hide).",
          wait);
  }
  std::string describe() const override {
    return (zero_ ? "ZeRO-" + std::to_string(s_.zero) + " data parallel" : std::string("data parallel")) + " over " +
           std::to_string(g_->size()) + " ranks" +
           (zero_ && zero_->materialized_from_meta() ? ", the model materialized shard by shard" : "");
  }

 private:
  void reduce(std::vector<double>& v, ReduceOp op) {
    if (v.empty()) return;
    Tensor t = from_buffer(v.data(), {static_cast<int64_t>(v.size())}, DType::F64);
    g_->allreduce(t, op)->wait();
    std::copy(t.data_ptr<double>(), t.data_ptr<double>() + v.size(), v.begin());
  }
  train::ParallelSettings s_;
  ProcessGroupPtr g_;
  std::unique_ptr<DistributedDataParallel> ddp_;  // one of the two
  std::unique_ptr<ZeroRedundancy> zero_;
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
  TS_CHECK(s.data == 0 || s.data == g->size(), "config: parallel.data is ", s.data, " but the launcher started ",
           g->size(), " ranks; set parallel.data to ", g->size(), " (or 0: as many as launched), or launch -n ", s.data);
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
