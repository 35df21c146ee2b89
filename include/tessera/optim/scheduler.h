#pragma once
// Learning-rate schedulers with PyTorch's formulas. Construction sets each
// group's lr to the schedule's value at step 0 and remembers the group's
// starting lr as "initial_lr"; step() advances one step (call it after
// optimizer.step()). ReduceLROnPlateau steps with a metric instead.
#include <optional>
#include <string>
#include <vector>

#include "tessera/optim/optimizer.h"

namespace tessera::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  virtual void step();
  virtual void step(double metric) { step(); }  // only ReduceLROnPlateau uses the metric
  int64_t last_epoch() const { return last_epoch_; }
  std::vector<double> get_last_lr() const;
  const std::string& name() const { return name_; }
  virtual nlohmann::json state_dict() const;
  virtual void load_state_dict(const nlohmann::json& s);

 protected:
  LRScheduler(std::string name, Optimizer& opt);
  void initial_step();  // called at the end of each constructor
  // The lr of group i at step t (closed form).
  virtual double lr_at(size_t group, int64_t t) const = 0;
  Optimizer& opt_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;

 private:
  std::string name_;
};
using SchedulerPtr = std::unique_ptr<LRScheduler>;

struct StepLR : LRScheduler {
  int64_t step_size;
  double gamma;
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_at(size_t g, int64_t t) const override;
};

struct MultiStepLR : LRScheduler {
  std::vector<int64_t> milestones;
  double gamma;
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(size_t g, int64_t t) const override;
};

struct ExponentialLR : LRScheduler {
  double gamma;
  ExponentialLR(Optimizer& opt, double gamma);
  double lr_at(size_t g, int64_t t) const override;
};

// eta_min + (base - eta_min) * (1 + cos(pi * t / T_max)) / 2 (periodic past T_max, as PyTorch).
struct CosineAnnealingLR : LRScheduler {
  int64_t T_max;
  double eta_min;
  CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min = 0.0);
  double lr_at(size_t g, int64_t t) const override;
};

// base * (start + (end - start) * min(t, total_iters) / total_iters).
struct LinearLR : LRScheduler {
  double start_factor, end_factor;
  int64_t total_iters;
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  double lr_at(size_t g, int64_t t) const override;
};

// Linear warmup from base/warmup to base over warmup_steps, then cosine decay to
// min_lr at total_steps: lr(t) = base * (t + 1) / warmup for t < warmup, else
// min_lr + (base - min_lr) * (1 + cos(pi * (t - warmup) / (total - warmup))) / 2.
struct WarmupCosineLR : LRScheduler {
  int64_t warmup_steps, total_steps;
  double min_lr;
  WarmupCosineLR(Optimizer& opt, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);
  double lr_at(size_t g, int64_t t) const override;
};

// The 1cycle policy (Smith & Topin), PyTorch's two-phase version: lr rises from
// max_lr / div_factor to max_lr over pct_start of the steps, then anneals to
// initial / final_div_factor; momentum (SGD's momentum or Adam's beta1) cycles
// inversely between max_momentum and base_momentum when cycle_momentum.
struct OneCycleLR : LRScheduler {
  double max_lr, pct_start, div_factor, final_div_factor, base_momentum, max_momentum;
  int64_t total_steps;
  std::string anneal_strategy;
  bool cycle_momentum;
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start = 0.3,
             const std::string& anneal_strategy = "cos", bool cycle_momentum = true, double base_momentum = 0.85,
             double max_momentum = 0.95, double div_factor = 25.0, double final_div_factor = 1e4);
  void step() override;
  double lr_at(size_t g, int64_t t) const override;
  double momentum_at(int64_t t) const;

 private:
  double anneal(double start, double end, double pct) const;
  std::string momentum_key_;
  template <typename F>
  double phase_value(int64_t t, F&& ends) const;
};

// Multiplies lr by factor when the metric has not improved for `patience` steps.
struct ReduceLROnPlateau : LRScheduler {
  std::string mode, threshold_mode;
  double factor, threshold, min_lr, eps;
  int64_t patience, cooldown;
  ReduceLROnPlateau(Optimizer& opt, const std::string& mode = "min", double factor = 0.1, int64_t patience = 10,
                    double threshold = 1e-4, const std::string& threshold_mode = "rel", int64_t cooldown = 0,
                    double min_lr = 0.0, double eps = 1e-8);
  void step() override;
  void step(double metric) override;
  double lr_at(size_t g, int64_t t) const override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& s) override;

 private:
  bool better(double a) const;
  double best_;
  int64_t num_bad_ = 0, cooldown_counter_ = 0;
};

std::vector<std::string> scheduler_names();

}  // namespace tessera::optim
