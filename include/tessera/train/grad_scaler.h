#pragma once
// Dynamic loss scaling for 16-bit training, step for step like PyTorch's
// GradScaler: the loss is multiplied by a scale before backward so small
// gradients survive f16's range; the gradients are divided by it again
// (unscale_) before clipping and the optimizer step; a step whose gradients
// hold an inf or NaN is skipped and the scale backs off; after growth_interval
// clean steps in a row the scale grows.
//
//   GradScaler scaler;
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                  // optional: before clip_grad_norm_
//   optim::clip_grad_norm_(params, 1.0);
//   scaler.step(opt);                      // skipped if a gradient is inf/NaN
//   scaler.update();
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "tessera/optim/optimizer.h"

namespace tessera::train {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // disabled: every call passes through
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (as f32).
  Tensor scale(const Tensor& loss);
  // Divides the optimizer's gradients by the scale, in place, and records
  // whether any is inf or NaN. At most once per optimizer between updates.
  // When the optimizer holds only this process's shards of the gradients
  // (ZeRO), `agree` joins its finding with the other processes' (any of them).
  void unscale_(optim::Optimizer& opt, const std::function<bool(bool)>& agree = {});
  // unscale_ (if not done) and, unless a gradient was inf/NaN, opt.step().
  // Returns whether the optimizer stepped.
  bool step(optim::Optimizer& opt);
  // Adjusts the scale from this step's inf checks (or sets it to new_scale).
  void update(std::optional<double> new_scale = {});

  double get_scale() const { return options_.enabled ? static_cast<double>(scale_) : 1.0; }
  int32_t growth_tracker() const { return growth_tracker_; }
  bool enabled() const { return options_.enabled; }
  // Steps skipped because of inf/NaN gradients since construction (or load).
  int64_t skipped_steps() const { return skipped_; }

  // PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval,
  // _growth_tracker; plus skipped_steps.
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    Stage stage = Stage::kReady;
    bool found_inf = false;
  };
  GradScalerOptions options_;
  float scale_;  // f32, as PyTorch keeps it
  int32_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
  bool scaled_since_update_ = false;
  std::map<const optim::Optimizer*, PerOptimizer> per_opt_;
};

}  // namespace tessera::train
