#include "tessera/optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tessera::optim {

LRScheduler::LRScheduler(std::string name, Optimizer& opt) : opt_(opt), name_(std::move(name)) {
  for (auto& g : opt_.param_groups()) {
    g.options.emplace("initial_lr", g.options.at("lr"));
    base_lrs_.push_back(g.options.at("initial_lr"));
  }
}

void LRScheduler::initial_step() {
  last_epoch_ = -1;
  step();
}

void LRScheduler::step() {
  ++last_epoch_;
  auto& groups = opt_.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options["lr"] = lr_at(i, last_epoch_);
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (auto& g : opt_.param_groups()) out.push_back(g.options.at("lr"));
  return out;
}

nlohmann::json LRScheduler::state_dict() const {
  return {{"name", name_}, {"last_epoch", last_epoch_}, {"base_lrs", base_lrs_}};
}

void LRScheduler::load_state_dict(const nlohmann::json& s) {
  TS_CHECK(s.is_object() && s.value("name", "") == name_, "scheduler state is for '",
           s.is_object() ? s.value("name", "?") : "?", "', this scheduler is ", name_);
  TS_CHECK(s.contains("last_epoch") && s["last_epoch"].is_number_integer() && s.contains("base_lrs") &&
               s["base_lrs"].is_array() && s["base_lrs"].size() == base_lrs_.size(),
           name_, ": scheduler state needs last_epoch and ", base_lrs_.size(), " base_lrs");
  last_epoch_ = s["last_epoch"].get<int64_t>();
  base_lrs_ = s["base_lrs"].get<std::vector<double>>();
}

// ---- closed-form schedules ---------------------------------------------------------
StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler("StepLR", opt), step_size(step_size), gamma(gamma) {
  TS_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  initial_step();
}
double StepLR::lr_at(size_t g, int64_t t) const { return base_lrs_[g] * std::pow(gamma, t / step_size); }

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> m, double gamma)
    : LRScheduler("MultiStepLR", opt), milestones(std::move(m)), gamma(gamma) {
  std::sort(milestones.begin(), milestones.end());
  initial_step();
}
double MultiStepLR::lr_at(size_t g, int64_t t) const {
  auto passed = std::upper_bound(milestones.begin(), milestones.end(), t) - milestones.begin();
  return base_lrs_[g] * std::pow(gamma, static_cast<double>(passed));
}

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma) : LRScheduler("ExponentialLR", opt), gamma(gamma) {
  initial_step();
}
double ExponentialLR::lr_at(size_t g, int64_t t) const { return base_lrs_[g] * std::pow(gamma, t); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min)
    : LRScheduler("CosineAnnealingLR", opt), T_max(T_max), eta_min(eta_min) {
  TS_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  initial_step();
}
double CosineAnnealingLR::lr_at(size_t g, int64_t t) const {
  return eta_min + (base_lrs_[g] - eta_min) * (1 + std::cos(M_PI * t / T_max)) / 2;
}

LinearLR::LinearLR(Optimizer& opt, double start, double end, int64_t total)
    : LRScheduler("LinearLR", opt), start_factor(start), end_factor(end), total_iters(total) {
  TS_CHECK(start > 0 && start <= 1 && end >= 0 && end <= 1, "LinearLR: start_factor must be in (0, 1] and "
           "end_factor in [0, 1], got ", start, " and ", end);
  TS_CHECK(total > 0, "LinearLR: total_iters must be positive, got ", total);
  initial_step();
}
double LinearLR::lr_at(size_t g, int64_t t) const {
  double frac = static_cast<double>(std::min(t, total_iters)) / static_cast<double>(total_iters);
  return base_lrs_[g] * (start_factor + (end_factor - start_factor) * frac);
}

WarmupCosineLR::WarmupCosineLR(Optimizer& opt, int64_t warmup, int64_t total, double min_lr)
    : LRScheduler("WarmupCosineLR", opt), warmup_steps(warmup), total_steps(total), min_lr(min_lr) {
  TS_CHECK(warmup >= 0 && total > warmup, "WarmupCosineLR: needs 0 <= warmup_steps < total_steps, got ", warmup,
           " and ", total);
  initial_step();
}
double WarmupCosineLR::lr_at(size_t g, int64_t t) const {
  const double base = base_lrs_[g];
  if (t < warmup_steps) return base * static_cast<double>(t + 1) / static_cast<double>(warmup_steps);
  double progress = static_cast<double>(t - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  return min_lr + (base - min_lr) * 0.5 * (1 + std::cos(M_PI * progress));
}

// ---- one cycle -----------------------------------------------------------------------
OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total, double pct, const std::string& anneal,
                       bool cycle_mom, double base_mom, double max_mom, double div, double final_div)
    : LRScheduler("OneCycleLR", opt), max_lr(max_lr), pct_start(pct), div_factor(div), final_div_factor(final_div),
      base_momentum(base_mom), max_momentum(max_mom), total_steps(total), anneal_strategy(anneal),
      cycle_momentum(cycle_mom) {
  TS_CHECK(total > 0, "OneCycleLR: total_steps must be positive, got ", total);
  TS_CHECK(pct > 0 && pct < 1, "OneCycleLR: pct_start must be in (0, 1), got ", pct);
  TS_CHECK(anneal == "cos" || anneal == "linear", "OneCycleLR: anneal_strategy must be 'cos' or 'linear', got '",
           anneal, "'");
  for (auto& g : opt_.param_groups()) {
    g.options["initial_lr"] = max_lr / div;
    g.options["max_lr"] = max_lr;
    g.options["min_lr"] = max_lr / div / final_div;
  }
  if (cycle_momentum) {
    const auto& d = opt_.defaults();
    momentum_key_ = d.count("momentum") ? "momentum" : d.count("beta1") ? "beta1" : "";
    TS_CHECK(!momentum_key_.empty(), "OneCycleLR: cycle_momentum needs an optimizer with momentum or beta1 (",
             opt_.name(), " has neither); pass cycle_momentum=false");
    for (auto& g : opt_.param_groups()) g.options[momentum_key_] = max_momentum;
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (anneal_strategy == "linear") return (end - start) * pct + start;
  return end + (start - end) / 2.0 * (std::cos(M_PI * pct) + 1);
}

// PyTorch's phase walk: phase 1 ends at pct_start * total - 1, phase 2 at total - 1.
template <typename F>
double OneCycleLR::phase_value(int64_t t, F&& ends) const {
  const double end1 = pct_start * static_cast<double>(total_steps) - 1, end2 = static_cast<double>(total_steps) - 1;
  const double step = static_cast<double>(t);
  if (step <= end1) return ends(0, step / end1);
  return ends(1, (step - end1) / (end2 - end1));
}

double OneCycleLR::lr_at(size_t g, int64_t t) const {
  TS_CHECK(t <= total_steps, "OneCycleLR: stepped ", t, " times, past total_steps=", total_steps);
  const double initial = max_lr / div_factor, min = initial / final_div_factor;
  return phase_value(t, [&](int phase, double pct) {
    return phase == 0 ? anneal(initial, max_lr, pct) : anneal(max_lr, min, pct);
  });
}

double OneCycleLR::momentum_at(int64_t t) const {
  return phase_value(t, [&](int phase, double pct) {
    return phase == 0 ? anneal(max_momentum, base_momentum, pct) : anneal(base_momentum, max_momentum, pct);
  });
}

void OneCycleLR::step() {
  LRScheduler::step();
  if (cycle_momentum)
    for (auto& g : opt_.param_groups()) g.options[momentum_key_] = momentum_at(last_epoch_);
}

// ---- plateau -------------------------------------------------------------------------
ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, const std::string& mode, double factor, int64_t patience,
                                     double threshold, const std::string& threshold_mode, int64_t cooldown,
                                     double min_lr, double eps)
    : LRScheduler("ReduceLROnPlateau", opt), mode(mode), threshold_mode(threshold_mode), factor(factor),
      threshold(threshold), min_lr(min_lr), eps(eps), patience(patience), cooldown(cooldown) {
  TS_CHECK(mode == "min" || mode == "max", "ReduceLROnPlateau: mode must be 'min' or 'max', got '", mode, "'");
  TS_CHECK(threshold_mode == "rel" || threshold_mode == "abs",
           "ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', got '", threshold_mode, "'");
  TS_CHECK(factor < 1 && factor > 0, "ReduceLROnPlateau: factor must be in (0, 1), got ", factor);
  best_ = mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  last_epoch_ = 0;
}

void ReduceLROnPlateau::step() { TS_ERROR("ReduceLROnPlateau: step() needs the metric: call step(metric)"); }

bool ReduceLROnPlateau::better(double a) const {
  if (mode == "min") return threshold_mode == "rel" ? a < best_ * (1 - threshold) : a < best_ - threshold;
  return threshold_mode == "rel" ? a > best_ * (1 + threshold) : a > best_ + threshold;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (better(metric)) {
    best_ = metric;
    num_bad_ = 0;
  } else {
    ++num_bad_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_ = 0;
  }
  if (num_bad_ > patience) {
    for (auto& g : opt_.param_groups()) {
      double old_lr = g.options.at("lr"), new_lr = std::max(old_lr * factor, min_lr);
      if (old_lr - new_lr > eps) g.options["lr"] = new_lr;
    }
    cooldown_counter_ = cooldown;
    num_bad_ = 0;
  }
}

double ReduceLROnPlateau::lr_at(size_t g, int64_t) const { return opt_.param_groups()[g].options.at("lr"); }

nlohmann::json ReduceLROnPlateau::state_dict() const {
  nlohmann::json s = LRScheduler::state_dict();
  s["best"] = best_;
  s["num_bad_epochs"] = num_bad_;
  s["cooldown_counter"] = cooldown_counter_;
  return s;
}

void ReduceLROnPlateau::load_state_dict(const nlohmann::json& s) {
  LRScheduler::load_state_dict(s);
  TS_CHECK(s.contains("best") && s.contains("num_bad_epochs") && s.contains("cooldown_counter"),
           "ReduceLROnPlateau: scheduler state needs best, num_bad_epochs and cooldown_counter");
  best_ = s["best"].is_null() ? best_ : s["best"].get<double>();
  num_bad_ = s["num_bad_epochs"].get<int64_t>();
  cooldown_counter_ = s["cooldown_counter"].get<int64_t>();
}

std::vector<std::string> scheduler_names() {
  return {"constant", "step", "multistep", "exponential", "cosine", "linear", "warmup_cosine", "onecycle", "plateau"};
}

}  // namespace tessera::optim
