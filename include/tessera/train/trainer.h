#pragma once
// The training loop, for the CLI (`tessera train`) and for C++ programs:
//
//   train::Recipe r = train::load_recipe("examples/configs/fashion_mnist_cnn.yaml");
//   train::Trainer t(std::move(r));
//   t.fit();                       // trains, evaluates, checkpoints
//   auto m = t.evaluate();         // {loss, accuracy} or {loss, perplexity}
//
// Each optimizer step runs grad_accum micro-batches (the loss of each divided
// by grad_accum), clips, steps the optimizer and the scheduler. Checkpoints are
// taken at step boundaries and hold everything needed to continue bit-exactly:
// model, optimizer, scheduler, data-loader position, RNG state and counters.
#include <atomic>
#include <cmath>
#include <fstream>
#include <memory>

#include "tessera/monitor/metrics.h"
#include "tessera/train/grad_scaler.h"
#include "tessera/train/parallel.h"
#include "tessera/train/recipe.h"

namespace tessera::profiler {
class Profiler;
}
namespace tessera::monitor {
class MetricsServer;
}

namespace tessera::train {

struct EvalMetrics {
  double loss = 0;
  double accuracy = 0;    // classification
  double perplexity = 0;  // language modelling
  int64_t samples = 0;
  nlohmann::json to_json() const;
};

struct TrainerOptions {
  std::string resume;      // "" (fresh), "latest", or a checkpoint directory
  int64_t profile_steps = -1;  // >= 0 overrides train.profile_steps (`--profile N`)
  int progress = -1;       // -1: a live bar when stdout is a terminal; 0: plain lines; 1: bar
  bool handle_signals = true;  // Ctrl-C / SIGTERM: checkpoint, then stop
  bool quiet = false;      // no output at all (tests)
  // Across processes (distributed::trainer_parallel); null: this process alone.
  // Rank 0 prints, writes metrics.jsonl and checkpoints; the others are quiet.
  std::shared_ptr<Parallel> parallel;
};

class Trainer {
 public:
  explicit Trainer(Recipe recipe, TrainerOptions options = {});
  ~Trainer();

  // Trains until the configured epochs/steps are done or a stop is requested.
  // Returns the summary (also printed): steps, time, final metrics, checkpoint.
  nlohmann::json fit();
  EvalMetrics evaluate(int64_t max_batches = 0);
  std::string save_checkpoint();
  void load_checkpoint(const std::string& dir);

  int64_t step() const { return step_; }
  int64_t epoch() const { return loader_->epoch(); }
  nn::Module& model() { return *recipe_.model; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  const Recipe& recipe() const { return recipe_; }
  // Asks the loop to checkpoint and stop after the current step (signal-safe).
  static void request_stop();
  bool stopped_early() const { return stopped_; }
  GradScaler& grad_scaler() { return scaler_; }
  // The live metrics (served on monitor.port while fit() runs).
  const monitor::Registry& metrics() const { return registry_; }
  int monitor_port() const;  // the bound port while fit() runs, else -1
  std::string checkpoint_root() const { return recipe_.output_dir + "/checkpoints"; }

 private:
  void resume_newest();
  Tensor loss_of(const Tensor& output, const Tensor& target) const;
  void log_step(double loss, double seconds, int64_t samples);
  void finish_line();
  void optimizer_step();
  void profile_boundary();
  void publish_metrics(double seconds, int64_t samples, double data_wait);
  void install_layer_stats();
  void collect_grad_stats();
  // Under ZeRO (shard given) each rank checks its pieces and the ranks agree.
  void check_finite_parameters(const io::CheckpointShard* shard = nullptr) const;
  bool main_rank() const { return parallel_->rank() == 0; }
  bool stop_requested();

  Recipe recipe_;
  TrainerOptions opt_;
  std::shared_ptr<Parallel> parallel_;
  optim::OptimizerPtr optimizer_;
  optim::SchedulerPtr scheduler_;
  std::unique_ptr<data::DataLoader> loader_;
  int64_t step_ = 0, total_steps_ = 0;
  int64_t parameters_ = 0;  // the whole model's, also when it is split across ranks
  double elapsed_ = 0;           // training seconds, across resumes
  double last_loss_ = 0, smooth_loss_ = 0;
  nlohmann::json last_eval_;
  std::ofstream metrics_;
  bool bar_ = false, stopped_ = false;
  std::string last_checkpoint_;
  int64_t last_checkpoint_step_ = -1, last_eval_step_ = -1;
  GradScaler scaler_;
  double last_grad_norm_ = NAN;
  bool last_step_skipped_ = false;
  // profiling and monitoring
  std::unique_ptr<profiler::Profiler> profiler_;
  int64_t profile_from_ = -1, profile_to_ = -1;
  monitor::Registry registry_;
  std::unique_ptr<monitor::MetricsServer> metrics_server_;
  std::atomic<int> monitor_port_{-1};  // read by other threads while fit() runs
  bool stats_due_ = false;
  std::vector<std::pair<nn::Module*, size_t>> stat_hooks_;
};

}  // namespace tessera::train
