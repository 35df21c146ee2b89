#include "tessera/train/grad_scaler.h"

#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"

namespace tessera::train {

GradScaler::GradScaler(GradScalerOptions o) : options_(o), scale_(static_cast<float>(o.init_scale)) {
  TS_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale), "GradScaler: init_scale must be a positive finite number, got ",
           o.init_scale);
  TS_CHECK(o.growth_factor > 1.0, "GradScaler: growth_factor must be > 1, got ", o.growth_factor);
  TS_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1.0, "GradScaler: backoff_factor must be in (0, 1), got ",
           o.backoff_factor);
  TS_CHECK(o.growth_interval >= 1, "GradScaler: growth_interval must be >= 1, got ", o.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  TS_CHECK(loss.defined() && is_floating(loss.dtype()), "GradScaler.scale: expected a floating-point loss tensor");
  scaled_since_update_ = true;
  return ops::mul(loss, full({}, scale_, DType::F32));
}

void GradScaler::unscale_(optim::Optimizer& opt, const std::function<bool(bool)>& agree) {
  if (!options_.enabled) return;
  PerOptimizer& st = per_opt_[&opt];
  TS_CHECK(st.stage != Stage::kUnscaled,
           "GradScaler.unscale_: already called on this optimizer since the last update(); call it at most once "
           "per step");
  TS_CHECK(st.stage != Stage::kStepped, "GradScaler.unscale_: called after step(); call it before step()");
  // PyTorch: inv_scale = scale.double().reciprocal().float(), then grads *= inv_scale in f32.
  float inv = static_cast<float>(1.0 / static_cast<double>(scale_));
  NoGradGuard no_grad;
  bool found = false;
  for (auto& group : opt.param_groups())
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (!found && !ops::all(ops::isfinite(g)).item<bool>()) found = true;
      g.mul_(static_cast<double>(inv));
    }
  st.found_inf = agree ? agree(found) : found;
  st.stage = Stage::kUnscaled;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  TS_CHECK(scaled_since_update_,
           "GradScaler.step: no loss was scaled since the last update(); backward must run on scaler.scale(loss), "
           "else the gradients are not scaled and unscaling them would shrink them by the scale (",
           get_scale(), ")");
  PerOptimizer& st = per_opt_[&opt];
  TS_CHECK(st.stage != Stage::kStepped, "GradScaler.step: already called for this optimizer since the last update()");
  if (st.stage == Stage::kReady) unscale_(opt);
  st.stage = Stage::kStepped;
  if (st.found_inf) {
    skipped_++;
    return false;
  }
  opt.step();
  return true;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  if (new_scale) {
    TS_CHECK(*new_scale > 0 && std::isfinite(*new_scale), "GradScaler.update: new_scale must be positive and finite, got ",
             *new_scale);
    scale_ = static_cast<float>(*new_scale);
  } else {
    bool checked = false, found = false;
    for (auto& [opt, st] : per_opt_)
      if (st.stage != Stage::kReady) {
        checked = true;
        found = found || st.found_inf;
      }
    TS_CHECK(checked, "GradScaler.update: no inf checks were recorded since the last update(); call "
                      "scaler.step(optimizer) (or unscale_) first");
    // PyTorch's _amp_update_scale_, in f32.
    if (found) {
      scale_ = scale_ * static_cast<float>(options_.backoff_factor);
      growth_tracker_ = 0;
    } else if (growth_tracker_ + 1 == options_.growth_interval) {
      float grown = scale_ * static_cast<float>(options_.growth_factor);
      if (std::isfinite(grown)) scale_ = grown;
      growth_tracker_ = 0;
    } else {
      growth_tracker_++;
    }
  }
  per_opt_.clear();
  scaled_since_update_ = false;
}

nlohmann::json GradScaler::state_dict() const {
  if (!options_.enabled) return nlohmann::json::object();
  return {{"scale", static_cast<double>(scale_)},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", options_.growth_interval},
          {"_growth_tracker", growth_tracker_},
          {"skipped_steps", skipped_}};
}

void GradScaler::load_state_dict(const nlohmann::json& s) {
  if (!options_.enabled) return;
  TS_CHECK(s.is_object() && s.contains("scale") && s["scale"].is_number(),
           "GradScaler.load_state_dict: expected an object with a numeric 'scale' (from state_dict()), got ",
           s.dump().substr(0, 200));
  double sc = s["scale"].get<double>();
  TS_CHECK(sc > 0 && std::isfinite(sc), "GradScaler.load_state_dict: scale must be positive and finite, got ", sc);
  scale_ = static_cast<float>(sc);
  options_.growth_factor = s.value("growth_factor", options_.growth_factor);
  options_.backoff_factor = s.value("backoff_factor", options_.backoff_factor);
  options_.growth_interval = s.value("growth_interval", options_.growth_interval);
  growth_tracker_ = s.value("_growth_tracker", 0);
  skipped_ = s.value("skipped_steps", int64_t{0});
  per_opt_.clear();
  scaled_since_update_ = false;
}

}  // namespace tessera::train
