#include "tessera/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "tessera/core/numbers.h"
#include "tessera/autograd/anomaly.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/allocator.h"
#include "tessera/core/parallel.h"
#include "tessera/io/checkpoint.h"
#include "tessera/monitor/metrics_server.h"
#include "tessera/ops/autocast.h"
#include "tessera/ops/ops.h"
#include "tessera/profiler/profiler.h"

namespace tessera::train {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {
std::atomic<bool> g_stop{false};

extern "C" void on_signal(int sig) {
  g_stop.store(true);
  std::signal(sig, SIG_DFL);  // a second Ctrl-C ends the process at once
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

bool is_plateau(const optim::LRScheduler* s) { return s && s->name() == "ReduceLROnPlateau"; }
}  // namespace

json EvalMetrics::to_json() const {
  json j = {{"loss", loss}, {"samples", samples}};
  if (perplexity > 0)
    j["perplexity"] = perplexity;
  else
    j["accuracy"] = accuracy;
  return j;
}

void Trainer::request_stop() { g_stop.store(true); }

// A stop request (Ctrl-C, SIGTERM) reaches some ranks, maybe not all: any one stops the job.
bool Trainer::stop_requested() {
  if (parallel_->size() == 1) return g_stop.load();
  std::vector<double> v{g_stop.load() ? 1.0 : 0.0};
  parallel_->max(v);
  if (v[0] > 0) g_stop.store(true);
  return v[0] > 0;
}

Trainer::Trainer(Recipe recipe, TrainerOptions options)
    : recipe_(std::move(recipe)), opt_(std::move(options)), scaler_(recipe_.train.grad_scaler) {
  TS_CHECK(recipe_.model && recipe_.train_data, "Trainer: the recipe needs a model and training data");
  const TrainSettings& s = recipe_.train;
  if (s.threads > 0) set_num_threads(s.threads);
  parallel_ = opt_.parallel ? opt_.parallel : std::make_shared<Parallel>();
  if (!main_rank()) opt_.quiet = true;  // rank 0 speaks for the job
  optimizer_ = recipe_.make_optimizer(*recipe_.model);
  // Asked before attach: a pipeline leaves the other stages' parameters on meta.
  bool on_meta = false;
  for (auto& [n, t] : recipe_.model->named_parameters()) on_meta = on_meta || t.device().is_meta();
  parallel_->attach(*recipe_.model, *optimizer_);
  // A model built on meta that the strategy did not materialize part by
  // part (one process, or another strategy): whole, from the seed (build_recipe).
  if (on_meta && !parallel_->materializes_parts()) recipe_.model->materialize(Device::cpu());
  parameters_ = recipe_.model->num_parameters();
  if (parallel_->runs_batches()) {  // each rank holds a part: count each element once over the job
    double mine = 0;
    for (const Tensor& t : parallel_->norm_parameters()) mine += static_cast<double>(t.numel());
    std::vector<double> v{mine};
    parallel_->sum(v);
    parameters_ = static_cast<int64_t>(v[0]);
  }
  data::DataLoaderOptions lo;
  lo.batch_size = s.batch_size;  // the global batch: each rank loads its rows of it
  lo.shuffle = true;
  lo.seed = s.seed;
  lo.num_workers = s.num_workers;
  lo.drop_last = s.drop_last;
  lo.shard_rank = parallel_->data_rank();  // the ranks of one model-parallel replica load the same rows
  lo.shard_count = parallel_->data_size();
  loader_ = std::make_unique<data::DataLoader>(recipe_.train_data, lo);
  const int64_t per_epoch = loader_->batches_per_epoch() / s.grad_accum;
  total_steps_ = s.steps > 0 ? s.steps : std::max<int64_t>(1, per_epoch) * s.epochs;
  scheduler_ = recipe_.make_scheduler(*optimizer_, total_steps_);
  bar_ = opt_.progress == 1 || (opt_.progress == -1 && ::isatty(STDOUT_FILENO));
  if (opt_.resume == "latest" || opt_.resume == "last") {
    resume_newest();
  } else if (!opt_.resume.empty()) {
    load_checkpoint(io::resolve_checkpoint(opt_.resume, checkpoint_root()));
  }
}

Trainer::~Trainer() {
  for (auto [m, h] : stat_hooks_) m->remove_hook(h);
}

int Trainer::monitor_port() const { return monitor_port_.load(); }

Tensor Trainer::loss_of(const Tensor& out, const Tensor& target) const {
  if (recipe_.task == Task::LanguageModel)
    return ops::cross_entropy(out.reshape({-1, out.size(-1)}), target.reshape({-1}));
  return ops::cross_entropy(out, target);
}

EvalMetrics Trainer::evaluate(int64_t max_batches) {
  EvalMetrics m;
  if (!recipe_.eval_data) return m;
  NoGradGuard no_grad;
  nn::Module& model = *recipe_.model;
  const bool was_training = model.is_training();
  model.eval();
  data::DataLoaderOptions lo;
  lo.batch_size = recipe_.train.eval_batch_size;
  lo.num_workers = std::min(recipe_.train.num_workers, 2);
  lo.shard_rank = parallel_->data_rank();  // each replica evaluates its rows; the sums are reduced
  lo.shard_count = parallel_->data_size();
  lo.pad_last_batch = false;
  data::DataLoader loader(recipe_.eval_data, lo);
  double loss_sum = 0;
  int64_t correct = 0, count = 0, batches = 0;
  while (auto batch = loader.next()) {
    if (batch->empty()) {  // this rank's share of the short last batch is empty
      if (max_batches > 0 && ++batches >= max_batches) break;
      continue;
    }
    const Tensor& y = (*batch)[1];
    const int64_t n = y.numel();
    if (parallel_->runs_batches()) {  // a split model: the strategy runs it (language models)
      loss_sum += parallel_->eval_batch((*batch)[0], y) * static_cast<double>(n);
    } else {
      Tensor out = model((*batch)[0]);
      loss_sum += loss_of(out, y).item<double>() * static_cast<double>(n);
      if (recipe_.task == Task::Classification)
        correct += ops::sum(ops::eq(ops::argmax(out, -1), y)).item<int64_t>();
    }
    count += n;
    m.samples += y.size(0);
    if (max_batches > 0 && ++batches >= max_batches) break;
  }
  model.train(was_training);
  if (parallel_->size() > 1) {  // true totals over every rank's rows
    std::vector<double> v{loss_sum, static_cast<double>(correct), static_cast<double>(count),
                          static_cast<double>(m.samples)};
    parallel_->sum(v);
    loss_sum = v[0];
    correct = static_cast<int64_t>(v[1]);
    count = static_cast<int64_t>(v[2]);
    m.samples = static_cast<int64_t>(v[3]);
    // The ranks of one replica evaluated the same rows: count them once.
    const int64_t copies = parallel_->size() / parallel_->data_size();
    m.samples /= copies;
    count /= copies;
    loss_sum /= static_cast<double>(copies);
    correct /= copies;
  }
  m.loss = count ? loss_sum / static_cast<double>(count) : 0;
  if (recipe_.task == Task::Classification)
    m.accuracy = count ? static_cast<double>(correct) / static_cast<double>(count) : 0;
  else
    m.perplexity = std::exp(m.loss);
  return m;
}

// Note [No NaN checkpoints]
// A diverged run must not overwrite good checkpoints with NaN weights: a
// checkpoint is written only if every parameter is finite.
void Trainer::check_finite_parameters(const io::CheckpointShard* shard) const {
  NoGradGuard no_grad;
  auto named = recipe_.model->named_parameters();
  std::vector<double> bad{-1};  // the first parameter holding NaN or Inf
  if (shard) {  // ZeRO: this rank's pieces; every rank names the first bad one any rank found
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < named.size(); ++i) index.emplace(named[i].first, i);
    for (auto& p : shard->model) {
      auto it = index.find(p.name);
      if (it != index.end() && !ops::all(ops::isfinite(p.data)).item<bool>()) {
        bad[0] = static_cast<double>(it->second);
        break;
      }
    }
    parallel_->max(bad);
  } else {
    for (size_t i = 0; i < named.size() && bad[0] < 0; ++i)
      if (!ops::all(ops::isfinite(named[i].second)).item<bool>()) bad[0] = static_cast<double>(i);
  }
  if (bad[0] >= 0)
    TS_ERROR("training diverged: parameter '", named[static_cast<size_t>(bad[0])].first, "' holds NaN or Inf at step ",
             step_, "; no checkpoint was written", last_checkpoint_.empty() ? "" : " (the last good one is ",
             last_checkpoint_, last_checkpoint_.empty() ? "" : ")",
             ". Lower the learning rate, enable clip_grad_norm, or use precision bf16/f32");
}

std::string Trainer::save_checkpoint() {
  io::Checkpoint c;
  io::CheckpointShard shard;
  const bool sharded = parallel_->checkpoint_shard(shard);  // ZeRO: each rank writes its pieces
  if (sharded) {
    check_finite_parameters(&shard);
  } else {
    check_finite_parameters();
    c.model = recipe_.model->state_dict().entries;
    optim::OptimizerState os = optimizer_->state_dict();
    c.optimizer = os.tensors;
    c.optimizer_groups = os.groups;
  }
  Generator& g = default_generator();
  c.state = {{"step", step_},
             {"epoch", loader_->epoch()},
             {"data", loader_->state()},
             {"rng", {{"seed", g.seed()}, {"offset", g.offset()}}},
             {"scheduler", scheduler_ ? scheduler_->state_dict() : json(nullptr)},
             {"config", recipe_.config},
             {"model", recipe_.model_name},
             {"parameters", parameters_},
             {"elapsed_seconds", elapsed_},
             {"metrics", {{"train_loss", smooth_loss_}, {"eval", last_eval_}}}};
  if (scaler_.enabled()) c.state["grad_scaler"] = scaler_.state_dict();
  if (!recipe_.vocab.empty()) c.state["vocab"] = recipe_.vocab;
  c.state["world_size"] = parallel_->size();
  char name[32];
  std::snprintf(name, sizeof name, "step-%09lld", static_cast<long long>(step_));
  last_checkpoint_step_ = step_;
  const int keep = static_cast<int>(recipe_.train.keep_checkpoints);
  if (sharded) {
    last_checkpoint_ = io::save_sharded_checkpoint(checkpoint_root(), name, parallel_->rank(), parallel_->size(), shard,
                                                   c, keep, [this] { parallel_->barrier(); });
  } else {
    // Replicas are equal: rank 0 writes, the others wait until it is complete.
    if (main_rank())
      last_checkpoint_ = io::save_checkpoint(checkpoint_root(), name, c, keep);
    else
      last_checkpoint_ = checkpoint_root() + "/" + name;
    parallel_->barrier();
  }
  return last_checkpoint_;
}

// The newest checkpoint that loads on every rank: one with a missing or
// corrupt shard (which only the ranks reading it see) is skipped by all of
// them for the one before it.
void Trainer::resume_newest() {
  const std::string root = checkpoint_root();
  std::string why;
  for (const std::string& dir : io::resume_candidates(root)) {
    std::string err;
    try {
      load_checkpoint(dir);
    } catch (const Error& e) {
      err = e.what();
    }
    std::vector<double> failed{err.empty() ? 0.0 : 1.0};
    parallel_->max(failed);
    if (failed[0] == 0) return;
    if (!err.empty())
      std::fprintf(stderr, "tessera: checkpoint %s does not load: %s; trying the one before it\n", dir.c_str(),
                   err.c_str());
    why += (why.empty() ? "" : "; ") + (err.empty() ? dir + " does not load on another rank" : err);
  }
  TS_ERROR("no checkpoint under ", root, " loads: ", why);
}

void Trainer::load_checkpoint(const std::string& dir) {
  io::CheckpointReader r(dir);
  // ZeRO reads only this rank's parts; otherwise every rank loads it whole.
  if (!parallel_->load_checkpoint(r)) {
    const std::string problems = recipe_.model->fit(r.shapes(io::CheckpointReader::Part::kModel)).problems();
    TS_CHECK(problems.empty(), "checkpoint ", dir, " does not fit this model:", problems);
    io::Checkpoint c = r.read_all();
    recipe_.model->load_state_dict(nn::StateDict{c.model}, true);
    optimizer_->load_state_dict({c.optimizer, c.optimizer_groups});
  }
  const json& s = r.state();
  try {
    step_ = s.at("step").get<int64_t>();
    loader_->load_state(s.at("data"));
    default_generator().set_state(s.at("rng").at("seed").get<uint64_t>(), s.at("rng").at("offset").get<uint64_t>());
    if (scheduler_ && !s.at("scheduler").is_null()) scheduler_->load_state_dict(s.at("scheduler"));
    elapsed_ = s.value("elapsed_seconds", 0.0);
    if (s.contains("grad_scaler") && scaler_.enabled()) scaler_.load_state_dict(s["grad_scaler"]);
    if (s.contains("metrics")) {
      smooth_loss_ = s["metrics"].value("train_loss", 0.0);
      last_eval_ = s["metrics"].value("eval", json());
    }
  } catch (const json::exception& e) {
    TS_ERROR(dir, "/state.json is missing a field or has a wrong type: ", e.what());
  }
  last_checkpoint_ = dir;
  last_checkpoint_step_ = step_;
}

void Trainer::finish_line() {
  if (bar_ && !opt_.quiet) std::printf("\n");
}

void Trainer::log_step(double loss, double seconds, int64_t samples) {
  if (std::isfinite(loss))  // an f16 step that overflowed is skipped, and so is its loss
    smooth_loss_ = step_ == 1 || smooth_loss_ == 0 ? loss : 0.95 * smooth_loss_ + 0.05 * loss;
  const double lr = optimizer_->param_groups()[0].lr();
  const double sps = seconds > 0 ? static_cast<double>(samples) / seconds : 0;
  if (metrics_.is_open()) {
    json line = {{"step", step_}, {"epoch", loader_->epoch()}, {"loss", loss}, {"lr", lr}, {"samples_per_s", sps}};
    if (std::isfinite(last_grad_norm_)) line["grad_norm"] = last_grad_norm_;
    if (scaler_.enabled()) {
      line["loss_scale"] = scaler_.get_scale();
      line["amp_skipped_steps"] = scaler_.skipped_steps();
    }
    metrics_ << line.dump() << "\n";
  }
  if (opt_.quiet) return;
  const double eta = sps > 0 ? static_cast<double>(total_steps_ - step_) * seconds /
                                   static_cast<double>(std::max<int64_t>(1, samples / recipe_.train.batch_size /
                                                                               recipe_.train.grad_accum))
                             : NAN;
  const int64_t per_epoch = std::max<int64_t>(1, loader_->batches_per_epoch() / recipe_.train.grad_accum);
  const int64_t epochs = recipe_.train.steps > 0 ? (total_steps_ + per_epoch - 1) / per_epoch : recipe_.train.epochs;
  if (bar_) {
    const int width = 24;
    const double frac = static_cast<double>(step_) / static_cast<double>(total_steps_);
    std::string bar(static_cast<size_t>(frac * width), '#');
    bar.resize(width, '.');
    std::printf("\r\033[Kepoch %lld/%lld [%s] %lld/%lld  loss %.4f  lr %.2e  %.0f samples/s  ETA %s",
                static_cast<long long>(loader_->epoch() + 1), static_cast<long long>(epochs), bar.c_str(),
                static_cast<long long>(step_), static_cast<long long>(total_steps_), smooth_loss_, lr, sps,
                format_duration(eta).c_str());
    std::fflush(stdout);
  } else if (step_ % recipe_.train.log_every == 0 || step_ == total_steps_) {
    std::printf("step %lld/%lld  epoch %lld  loss %.4f  lr %.2e  %.0f samples/s  ETA %s\n",
                static_cast<long long>(step_), static_cast<long long>(total_steps_),
                static_cast<long long>(loader_->epoch() + 1), smooth_loss_, lr, sps, format_duration(eta).c_str());
    std::fflush(stdout);
  }
}

void Trainer::optimizer_step() {
  const TrainSettings& s = recipe_.train;
  nn::Module& model = *recipe_.model;
  profiler::PhaseScope phase(profiler::Phase::kOptimizer);
  // Under ZeRO each rank holds its shards of the gradients (the optimizer's
  // parameters): the inf check and the norm join every rank's part.
  // A split model likewise: each rank holds its part of the model.
  const bool shards = parallel_->shards_optimizer(), split = parallel_->runs_batches();
  TensorList params = model.parameters();
  std::function<bool(bool)> any_rank;
  std::function<double(double)> norm_over_ranks;
  if (shards || split) {
    params.clear();
    for (auto& g : optimizer_->param_groups()) params.insert(params.end(), g.params.begin(), g.params.end());
    any_rank = [this](bool found) {
      std::vector<double> v{found ? 1.0 : 0.0};
      parallel_->max(v);
      return v[0] > 0;
    };
    norm_over_ranks = [this](double partial) {  // the sums of squares of the ranks' shards
      std::vector<double> v{partial};
      parallel_->sum(v);
      return v[0];
    };
  }
  // The L2 norm; max_norm inf measures it for the metrics without clipping.
  // A split model's norm is over the gradients each rank counts (every
  // element once across the job), and every gradient this rank holds is
  // scaled by it, so that copies held on several ranks stay equal.
  auto clip_norm = [&](double max_norm) {
    if (!split) return optim::clip_grad_norm_(params, max_norm, 2.0, false, norm_over_ranks);
    return optim::clip_grad_norm_(parallel_->norm_parameters(), max_norm, 2.0, false, norm_over_ranks, params);
  };
  scaler_.unscale_(*optimizer_, any_rank);  // true gradients from here on (no-op without scaling)
  if (stats_due_) collect_grad_stats();
  if (s.clip_grad_norm > 0) last_grad_norm_ = clip_norm(s.clip_grad_norm);
  else if (metrics_server_) last_grad_norm_ = clip_norm(INFINITY);
  if (s.clip_grad_value > 0) optim::clip_grad_value_(params, s.clip_grad_value);
  last_step_skipped_ = !scaler_.step(*optimizer_);
  scaler_.update();
  optimizer_->zero_grad();
  parallel_->after_step();
}

// Starts and stops the profiler at step boundaries: train.profile_steps steps
// after train.profile_warmup, then writes the reports to <output>/profile/.
void Trainer::profile_boundary() {
  if (profile_from_ < 0) return;
  if (!profiler_ && step_ == profile_from_) {
    profiler_ = std::make_unique<profiler::Profiler>();
    for (auto& [name, p] : recipe_.model->named_parameters())
      profiler_->label(p, profiler::MemoryKind::kParameter, name.substr(0, name.rfind('.')));
    for (auto& [name, t] : optimizer_->state_dict().tensors) profiler_->label(t, profiler::MemoryKind::kOptimizerState);
    return;
  }
  if (profiler_ && step_ >= profile_to_) {
    profiler_->stop();
    namespace fs = std::filesystem;
    // Several ranks: each writes its own reports, and rank 0 merges the traces (one process per rank).
    const std::string top = recipe_.output_dir + "/profile";
    const std::string dir = parallel_->size() > 1 ? top + "/rank" + std::to_string(parallel_->rank()) : top;
    fs::create_directories(dir);
    const std::string ops = profiler_->table(profiler::GroupBy::kOp, 60);
    const std::string modules = profiler_->table(profiler::GroupBy::kModule, 60);
    const std::string memory = profiler_->memory_table(40);
    std::ofstream(dir + "/ops.txt") << ops;
    std::ofstream(dir + "/modules.txt") << modules;
    std::ofstream(dir + "/memory.txt") << memory;
    profiler_->export_chrome_trace(dir + "/trace.json");
    if (parallel_->size() > 1) {  // rank 0 merges every rank's trace, sent over the process group
      std::vector<std::string> traces = parallel_->gather_text(profiler_->chrome_trace());
      if (main_rank()) profiler::merge_chrome_traces(traces, top + "/trace.json");
    }
    if (!opt_.quiet) {
      finish_line();
      std::printf("\n== profile of steps %lld-%lld ==\n%s\n%s\nwritten: %s/{ops,modules,memory}.txt and %s/trace.json "
                  "(open in https://ui.perfetto.dev)\n\n",
                  static_cast<long long>(profile_from_ + 1), static_cast<long long>(profile_to_),
                  profiler_->table(profiler::GroupBy::kOp, 15).c_str(), memory.c_str(), dir.c_str(), top.c_str());
    }
    profiler_.reset();
    profile_from_ = -1;
  }
}

namespace {
// mean, std, max |x| and the fraction of exact zeros, as the layer-statistics
// gauges report them.
void publish_stats(monitor::Registry& reg, const std::string& prefix, const std::string& what, const Tensor& t,
                   const monitor::Labels& labels) {
  NoGradGuard no_grad;
  Tensor x = t.detach().to(DType::F32);
  if (x.numel() == 0) return;
  reg.set(prefix + "_mean", "Mean of each layer's " + what + ".", ops::mean(x).item<double>(), labels);
  reg.set(prefix + "_std", "Standard deviation of each layer's " + what + ".",
          x.numel() > 1 ? ops::std(x).item<double>() : 0.0, labels);
  reg.set(prefix + "_max_abs", "Largest absolute value of each layer's " + what + ".",
          ops::amax(ops::abs(x)).item<double>(), labels);
  reg.set(prefix + "_zero_fraction", "Fraction of exact zeros in each layer's " + what + ".",
          ops::mean(ops::eq(x, 0.0).to(DType::F32)).item<double>(), labels);
}
}  // namespace

// Forward hooks on every leaf module: on a statistics step each records its
// output's statistics (labelled with the module path).
void Trainer::install_layer_stats() {
  for (auto& [name, m] : recipe_.model->named_modules()) {
    if (!m->named_children().empty()) continue;
    std::string layer = name.empty() ? recipe_.model_name : name;
    size_t h = m->register_forward_hook([this, layer](nn::Module&, const Tensor&, Tensor& out) {
      if (stats_due_ && out.defined() && is_floating(out.dtype()))
        publish_stats(registry_, "tessera_layer_activation", "output (activation)", out, {{"layer", layer}});
    });
    stat_hooks_.push_back({m, h});
  }
}

void Trainer::collect_grad_stats() {
  for (auto& [name, p] : recipe_.model->named_parameters()) {
    Tensor g = p.grad();
    if (g.defined()) publish_stats(registry_, "tessera_layer_grad", "parameter gradients", g, {{"param", name}});
  }
}

void Trainer::publish_metrics(double seconds, int64_t samples, double data_wait) {
  monitor::Registry& r = registry_;
  r.set("tessera_train_step", "Optimizer steps taken.", static_cast<double>(step_), {}, monitor::MetricType::kCounter);
  r.set("tessera_train_epoch", "Current epoch (0-based).", static_cast<double>(loader_->epoch()));
  r.set("tessera_train_loss", "Training loss of the last step.", last_loss_);
  r.set("tessera_train_loss_smoothed", "Exponential moving average of the training loss.", smooth_loss_);
  r.set("tessera_train_learning_rate", "Learning rate of the first parameter group.",
        optimizer_->param_groups()[0].lr());
  if (std::isfinite(last_grad_norm_))
    r.set("tessera_train_grad_norm", "Global L2 norm of the gradients before clipping.", last_grad_norm_);
  r.set("tessera_train_samples_per_second", "Training throughput over the last step.",
        seconds > 0 ? static_cast<double>(samples) / seconds : 0.0);
  r.set("tessera_train_step_seconds", "Wall time of the last optimizer step.", seconds);
  r.observe("tessera_train_step_duration_seconds", "Distribution of optimizer step times.",
            {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}, seconds);
  r.set("tessera_train_data_wait_seconds", "Time the last step waited for its batches.", data_wait);
  r.set("tessera_memory_allocated_bytes", "Bytes in live tensors.", static_cast<double>(memory_allocated()));
  r.set("tessera_memory_peak_bytes", "Most bytes in live tensors since start.",
        static_cast<double>(max_memory_allocated()));
  r.set("tessera_memory_reserved_bytes", "Bytes held by the caching allocator (live + cached).",
        static_cast<double>(memory_stats().reserved_bytes));
  r.set("tessera_amp_skipped_steps_total", "Optimizer steps skipped because gradients held inf/NaN.",
        static_cast<double>(scaler_.skipped_steps()), {}, monitor::MetricType::kCounter);
  r.set("tessera_amp_loss_scale", "Current dynamic loss scale (1 without loss scaling).", scaler_.get_scale());
  parallel_->publish_metrics(r);
}

json Trainer::fit() {
  ClassicLocale c_locale;  // printf below writes "0.5" whatever the process locale
  const TrainSettings& s = recipe_.train;
  namespace fs = std::filesystem;
  if (main_rank()) {
    fs::create_directories(recipe_.output_dir);
    // the config next to the results, for `tessera eval` and for people
    std::ofstream(recipe_.output_dir + "/config.json") << recipe_.config.dump(2) << "\n";
    metrics_.open(recipe_.output_dir + "/metrics.jsonl", std::ios::app);
  }
  g_stop.store(false);
  struct sigaction old_int {}, old_term {}, old_usr2 {};
  if (opt_.handle_signals) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGUSR2, &sa, &old_usr2);  // tessera launch's stop request, forwarded by mpirun
  }
  nn::Module& model = *recipe_.model;
  model.train();
  optimizer_->zero_grad();
  if (!opt_.quiet)
    std::printf("training %s (%.2fM parameters) on %lld samples, %lld steps, batch %lld x %lld, %d threads%s%s\n",
                recipe_.model_name.c_str(), static_cast<double>(parameters_) / 1e6,
                static_cast<long long>(recipe_.train_data->size()), static_cast<long long>(total_steps_),
                static_cast<long long>(s.batch_size), static_cast<long long>(s.grad_accum), get_num_threads(),
                parallel_->size() > 1 ? (" per rank, " + parallel_->describe()).c_str() : "",
                step_ > 0 ? (" (resumed at step " + std::to_string(step_) + ")").c_str() : "");

  const int64_t profile_steps = opt_.profile_steps >= 0 ? opt_.profile_steps : s.profile_steps;
  if (profile_steps > 0) {
    profile_from_ = step_ + s.profile_warmup;
    profile_to_ = profile_from_ + profile_steps;
  }
  if (recipe_.monitor.port >= 0) {
    // Each rank of a host serves its own metrics, on port + its local rank.
    const int port = recipe_.monitor.port > 0 ? recipe_.monitor.port + parallel_->local_rank() : recipe_.monitor.port;
    metrics_server_ = std::make_unique<monitor::MetricsServer>(registry_, recipe_.monitor.host, port);
    monitor_port_ = metrics_server_->port();
    if (recipe_.monitor.layer_stats) install_layer_stats();
    if (!opt_.quiet) std::printf("metrics for Prometheus at %s\n", metrics_server_->url().c_str());
  }
  if (s.precision != DType::F32 && !opt_.quiet)
    std::printf("mixed precision: %s autocast%s\n", dtype_name(s.precision),
                scaler_.enabled() ? ", dynamic loss scaling" : "");

  std::optional<autograd::DetectAnomalyGuard> anomaly;
  if (s.detect_anomaly) anomaly.emplace();

  int64_t micro = 0, window_samples = 0;
  auto window_start = Clock::now();
  bool checkpoint_due = false, eval_due = false;
  while (step_ < total_steps_) {
    if (micro == 0) {
      if (stop_requested()) break;  // stop only between optimizer steps
      parallel_->set_step(step_ + 1);
      if (parallel_->size() > 1) {
        // Each rank draws its own random numbers (dropout), from (seed, step, rank) alone, so that
        // a run resumed at another world size continues well defined.
        const uint64_t key = recipe_.train.seed * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(step_) * 0xBF58476D1CE4E5B9ull ^
                             static_cast<uint64_t>(parallel_->data_rank()) * 0x94D049BB133111EBull;
        default_generator().set_state(key, 0);
        parallel_->reseed(key);
      }
    }
    auto batch = loader_->next();
    if (parallel_->size() > 1 && loader_->batches_per_epoch() < 0) {
      // A stream ends at a different batch on each rank: the first to run out ends the epoch for all.
      std::vector<double> out{batch ? 0.0 : 1.0};
      parallel_->max(out);
      if (out[0] > 0) batch.reset();
    }
    if (!batch) {  // an epoch ended
      if (s.eval_every == 0) eval_due = true;
      if (s.checkpoint_every == 0) checkpoint_due = true;
      if (s.steps == 0 && loader_->epoch() >= s.epochs) break;
      if (micro == 0 && !eval_due && !checkpoint_due) continue;
    } else {
      if (micro == 0) {
        profile_boundary();
        const int64_t every = recipe_.monitor.layer_stats_every > 0 ? recipe_.monitor.layer_stats_every : s.log_every;
        stats_due_ = !stat_hooks_.empty() && (step_ + 1) % every == 0;
      }
      const bool amp = s.precision != DType::F32;
      if (parallel_->runs_batches()) {  // a split model: the strategy runs forward, loss and backward
        profiler::PhaseScope phase(profiler::Phase::kForward);
        autocast::Guard autocast(amp ? s.precision : DType::BF16, amp);
        last_loss_ = parallel_->train_batch((*batch)[0], (*batch)[1], scaler_.get_scale() / s.grad_accum,
                                            micro + 1 == s.grad_accum);
        TS_CHECK(std::isfinite(last_loss_) || scaler_.enabled(), "training diverged: the loss is ", last_loss_,
                 " at step ", step_ + 1, " (lower the learning rate or enable clip_grad_norm)");
      } else {
        Tensor loss;
        {
          profiler::PhaseScope phase(profiler::Phase::kForward);
          autocast::Guard autocast(amp ? s.precision : DType::BF16, amp);
          Tensor out = model((*batch)[0]);
          loss = loss_of(out, (*batch)[1]);
        }
        last_loss_ = loss.item<double>();
        std::string where;
        if (parallel_->size() > 1) {
          // The loss of the global batch (the mean of the ranks' means), and which rank diverged.
          const bool bad = !std::isfinite(last_loss_);
          std::vector<double> v{bad ? 0.0 : last_loss_ / parallel_->size(), bad ? 1.0 : 0.0,
                                bad ? parallel_->rank() : 0.0};
          const double mine = last_loss_;
          parallel_->sum(v);
          last_loss_ = v[1] > 0 ? (std::isfinite(mine) ? NAN : mine) : v[0];
          if (v[1] > 0) where = v[1] == 1 ? " on rank " + std::to_string(static_cast<int>(v[2])) : " on " + std::to_string(static_cast<int>(v[1])) + " ranks";
        }
        // With loss scaling a non-finite loss (f16 overflow) makes a skipped step.
        TS_CHECK(std::isfinite(last_loss_) || scaler_.enabled(), "training diverged: the loss is ", last_loss_, where,
                 " at step ", step_ + 1, " (lower the learning rate or enable clip_grad_norm)");
        profiler::PhaseScope phase(profiler::Phase::kBackward);
        parallel_->set_sync(micro + 1 == s.grad_accum);
        Tensor l = s.grad_accum > 1 ? ops::div(loss, static_cast<double>(s.grad_accum)) : loss;
        scaler_.scale(l).backward();
      }
      window_samples += (*batch)[0].size(0) * parallel_->data_size();  // the global batch
      if (++micro < s.grad_accum) continue;
      micro = 0;
      optimizer_step();
      if (scheduler_ && !is_plateau(scheduler_.get())) scheduler_->step();
      ++step_;
      const double secs = std::chrono::duration<double>(Clock::now() - window_start).count();
      elapsed_ += secs;
      log_step(last_loss_, secs, window_samples);
      const double wait = loader_->wait_seconds();
      loader_->reset_wait_seconds();
      if (metrics_server_) publish_metrics(secs, window_samples, wait);
      window_samples = 0;
      window_start = Clock::now();
      if (s.eval_every > 0 && step_ % s.eval_every == 0) eval_due = true;
      if (s.checkpoint_every > 0 && step_ % s.checkpoint_every == 0) checkpoint_due = true;
    }
    if (micro != 0) continue;  // evaluate and checkpoint only at step boundaries
    if (eval_due && recipe_.eval_data) {
      EvalMetrics m = evaluate(s.eval_batches);
      last_eval_ = m.to_json();
      last_eval_step_ = step_;
      if (is_plateau(scheduler_.get())) scheduler_->step(m.loss);
      if (metrics_.is_open()) metrics_ << json{{"step", step_}, {"eval", last_eval_}}.dump() << "\n";
      if (!opt_.quiet) {
        finish_line();
        if (recipe_.task == Task::Classification)
          std::printf("eval at step %lld: loss %.4f  accuracy %.2f%%\n", static_cast<long long>(step_), m.loss,
                      100 * m.accuracy);
        else
          std::printf("eval at step %lld: loss %.4f  perplexity %.2f\n", static_cast<long long>(step_), m.loss,
                      m.perplexity);
      }
    }
    eval_due = false;
    if (checkpoint_due) save_checkpoint();
    checkpoint_due = false;
  }
  if (profiler_) {  // training ended inside the profiled window
    profile_to_ = step_;
    profile_boundary();
  }
  monitor_port_ = -1;
  metrics_server_.reset();
  stopped_ = g_stop.load();
  if (opt_.handle_signals) {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGUSR2, &old_usr2, nullptr);
  }
  finish_line();
  if (stopped_) {
    if (!opt_.quiet) std::printf("stop requested: saving a checkpoint at step %lld\n", static_cast<long long>(step_));
  } else if (recipe_.eval_data && last_eval_step_ != step_) {
    last_eval_ = evaluate(s.eval_batches).to_json();
    last_eval_step_ = step_;
  }
  if (last_checkpoint_step_ != step_) save_checkpoint();
  // Epochs done, from the batches consumed (the loader's counter advances only
  // when it is asked for the batch after an epoch's last).
  const double epochs_done = static_cast<double>(step_ * s.grad_accum) /
                             static_cast<double>(std::max<int64_t>(1, loader_->batches_per_epoch()));
  json summary = {{"steps", step_},
                  {"epochs", epochs_done},
                  {"train_seconds", elapsed_},
                  {"train_loss", smooth_loss_},
                  {"eval", last_eval_},
                  {"checkpoint", last_checkpoint_},
                  {"stopped_early", stopped_}};
  if (s.precision != DType::F32 || scaler_.enabled()) {
    summary["precision"] = dtype_name(s.precision);
    summary["amp_skipped_steps"] = scaler_.skipped_steps();
  }
  if (metrics_.is_open()) metrics_ << json{{"summary", summary}}.dump() << "\n";
  metrics_.close();
  if (!opt_.quiet) {
    std::printf("\n== summary ==\n");
    std::printf("  steps          %lld (%.2f epochs)%s\n", static_cast<long long>(step_), epochs_done,
                stopped_ ? ", stopped early" : "");
    std::printf("  training time  %s\n", format_duration(elapsed_).c_str());
    std::printf("  train loss     %.4f\n", smooth_loss_);
    if (summary.contains("precision"))
      std::printf("  precision      %s, %lld steps skipped (inf/NaN gradients)\n", dtype_name(s.precision),
                  static_cast<long long>(scaler_.skipped_steps()));
    if (!last_eval_.is_null() && !last_eval_.empty()) {
      std::printf("  eval loss      %.4f\n", last_eval_.value("loss", 0.0));
      if (last_eval_.contains("accuracy"))
        std::printf("  eval accuracy  %.2f%%\n", 100 * last_eval_["accuracy"].get<double>());
      if (last_eval_.contains("perplexity"))
        std::printf("  perplexity     %.2f\n", last_eval_["perplexity"].get<double>());
    }
    std::printf("  checkpoint     %s\n", last_checkpoint_.c_str());
    std::printf("  metrics        %s/metrics.jsonl\n", recipe_.output_dir.c_str());
  }
  return summary;
}

}  // namespace tessera::train
