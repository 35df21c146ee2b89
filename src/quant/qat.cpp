// Quantization-aware training (quant/qat.h, Note [QAT layers]).
#include "tessera/quant/qat.h"

#include <cmath>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "tessera/autograd/grad_mode.h"
#include "tessera/compile/compile.h"
#include "tessera/core/error.h"
#include "tessera/nn/conv.h"
#include "tessera/nn/linear.h"
#include "quant/layers.h"
#include "tessera/ops/ops.h"

namespace tessera::quant {
namespace {

using detail::own;
using detail::skipped;

// The layers QAT prepares: those with an int8 kernel (Linear, Conv2d).
Tensor* weight_member(nn::Module& m) {
  return dynamic_cast<nn::Conv1d*>(&m) ? nullptr : detail::weight_member(m);
}

// The pre-hook of each prepared layer, to remove it in convert_qat.
std::mutex g_mu;
std::unordered_map<const nn::Module*, size_t> g_hooks;

// A prepared layer's state: its buffers (and learnable scale), shared with its hook.
struct Layer {
  Tensor scale, zero_point, lo, hi, seen;  // seen: batches observed (a [1] f32 buffer)
  Tensor log_scale;                        // learn_scales: the trained parameter, scale = exp(log_scale)
  bool learn = false, s8_allowed = true;
  double c = 0.01;
  int qmax = 255;
};

// Sets scale / zero_point from the observed range: u8 affine, or symmetric
// s8 when the range is signed and s8 inputs are allowed (what
// quantize_static does with a model input).
void update_params(Layer& l) {
  const double lo = l.lo.to_vector<float>()[0], hi = l.hi.to_vector<float>()[0];
  const bool s8 = l.s8_allowed && lo < 0;
  QParams p = s8 ? symmetric_qparams(lo, hi) : affine_qparams(lo, hi, l.qmax);
  l.scale.fill_(p.scale);
  if (l.learn) l.log_scale.detach().fill_(std::log(p.scale));
  l.zero_point.fill_(static_cast<double>(p.zero_point));
}

// Observes a batch: the moving average of its min and max (the first batch sets them).
void observe(Layer& l, const Tensor& x) {
  NoGradGuard ng;
  const double bmin = ops::amin(x).to(DType::F64).to_vector<double>()[0];
  const double bmax = ops::amax(x).to(DType::F64).to_vector<double>()[0];
  TS_CHECK(std::isfinite(bmin) && std::isfinite(bmax), "QAT: a layer's input has NaN or infinite values");
  const double seen = l.seen.to_vector<float>()[0];
  const double lo = seen ? l.lo.to_vector<float>()[0] + l.c * (bmin - l.lo.to_vector<float>()[0]) : bmin;
  const double hi = seen ? l.hi.to_vector<float>()[0] + l.c * (bmax - l.hi.to_vector<float>()[0]) : bmax;
  l.lo.fill_(lo);
  l.hi.fill_(hi);
  l.seen.fill_(seen + 1);
  update_params(l);
}

// The codes' range of the input's fake quantization.
std::pair<int64_t, int64_t> input_range(const Layer& l) {
  const bool s8 = l.s8_allowed && l.lo.to_vector<float>()[0] < 0;
  return s8 ? std::pair<int64_t, int64_t>{-128, 127} : std::pair<int64_t, int64_t>{0, l.qmax};
}

// The weight's per-output-channel symmetric fake quantization (scales from
// its current values, as quantize_static will compute them).
Tensor fake_quantize_weight(const Tensor& w) {
  Tensor s;
  {
    NoGradGuard ng;
    Tensor amax = ops::amax(ops::abs(w.detach()).reshape({w.size(0), -1}), {1}).to(DType::F32);
    s = ops::where(ops::gt(amax, 0.0), ops::div(amax, 127.0), 1.0).contiguous();
  }
  return ops::fake_quantize(w, s, zeros({w.size(0)}, DType::F32), 0, -127, 127);
}

std::vector<std::pair<std::string, nn::Module*>> layers_of(nn::Module& model) {
  std::vector<std::pair<std::string, nn::Module*>> out;
  for (auto& [path, m] : model.named_modules())
    if (weight_member(*m)) out.push_back({path, m});
  return out;
}

}  // namespace

nlohmann::json to_json(const QatConfig& c) {
  return {{"skip", c.skip}, {"learn_scales", c.learn_scales}, {"averaging_constant", c.averaging_constant},
          {"activation_max", c.activation_max}, {"signed_inputs", c.signed_inputs}};
}

QatConfig qat_config_from_json(const nlohmann::json& j) {
  TS_CHECK(j.is_object(), "qat: expected an object {skip, learn_scales, averaging_constant, activation_max, "
           "signed_inputs}, got ", j.dump());
  QatConfig c;
  for (const auto& [k, v] : j.items()) {
    if (k == "skip") {
      TS_CHECK(v.is_array(), "qat.skip: expected a list of module paths, got ", v.dump());
      for (const auto& e : v) {
        TS_CHECK(e.is_string(), "qat.skip: expected module paths (strings), got ", e.dump());
        c.skip.push_back(e.get<std::string>());
      }
    } else if (k == "learn_scales" || k == "signed_inputs") {
      TS_CHECK(v.is_boolean(), "qat.", k, ": expected true or false, got ", v.dump());
      (k == "learn_scales" ? c.learn_scales : c.signed_inputs) = v.get<bool>();
    } else if (k == "averaging_constant") {
      TS_CHECK(v.is_number() && v.get<double>() > 0 && v.get<double>() <= 1,
               "qat.averaging_constant: expected a number in (0, 1], got ", v.dump());
      c.averaging_constant = v.get<double>();
    } else if (k == "activation_max") {
      TS_CHECK(v.is_number_integer() && (v.get<int64_t>() == 0 || (v.get<int64_t>() >= 15 && v.get<int64_t>() <= 255)),
               "qat.activation_max: expected 0 (the CPU's) or an integer in [15, 255], got ", v.dump());
      c.activation_max = v.get<int>();
    } else {
      TS_ERROR("qat: unknown key '", k, "' (expected skip, learn_scales, averaging_constant, activation_max, "
               "signed_inputs)");
    }
  }
  return c;
}

std::string QatReport::str() const {
  std::ostringstream os;
  os << "QAT: " << layers.size() << " layers fake-quantized";
  if (!skipped.empty()) {
    os << "; kept float:";
    for (const auto& s : skipped) os << " " << s;
  }
  os << "\n";
  return os.str();
}

// A prepared layer carries the buffer input_zero_point (the hook registry is
// keyed by address, which a later module may reuse, so it does not say).
bool prepared(nn::Module& m) { return own(m.named_buffers(false), "input_zero_point").defined(); }

bool is_qat_prepared(const nn::Module& model) {
  for (auto& [path, m] : const_cast<nn::Module&>(model).named_modules())
    if (weight_member(*m) && prepared(*m)) return true;
  return false;
}

QatReport prepare_qat(nn::Module& model, const QatConfig& c) {
  TS_CHECK(!is_qat_prepared(model), "prepare_qat: the model is already prepared for QAT");
  QatReport r;
  std::vector<std::string> unknown = c.skip;
  for (const auto& layer : layers_of(model))
    std::erase_if(unknown, [&](const std::string& s) { return skipped(layer.first, {s}); });
  TS_CHECK(unknown.empty(), "prepare_qat: skip names '", unknown.empty() ? "" : unknown[0],
           "', which is not a Conv2d or Linear layer of the model (nor contains one)");
  for (auto& [path, m] : layers_of(model)) {
    if (skipped(path, c.skip)) {
      r.skipped.push_back(path);
      continue;
    }
    auto l = std::make_shared<Layer>();
    l->learn = c.learn_scales;
    l->c = c.averaging_constant;
    l->qmax = c.activation_max ? c.activation_max : 255;
    l->s8_allowed = c.signed_inputs;
    // A learned scale is trained as its logarithm: always positive, and an
    // optimizer step changes it by a ratio, whatever its size.
    if (c.learn_scales) l->log_scale = m->register_parameter("input_log_scale", zeros({1}, DType::F32));
    l->scale = m->register_buffer("input_scale", ones({1}, DType::F32), true, true);
    l->zero_point = m->register_buffer("input_zero_point", zeros({1}, DType::F32), true, true);
    l->lo = m->register_buffer("input_min", zeros({1}, DType::F32), true, true);
    l->hi = m->register_buffer("input_max", zeros({1}, DType::F32), true, true);
    l->seen = m->register_buffer("input_batches", zeros({1}, DType::F32), true, true);
    // The weight as the optimizer sees it: the parameter, or (pruned) what
    // the pruning hook, registered before this one, left in the member.
    Tensor param = own(m->named_parameters(false), "weight");
    size_t h = m->register_forward_pre_hook([l, param](nn::Module& mod, Tensor& x) {
      if (mod.is_training() && !(l->learn && l->seen.to_vector<float>()[0] > 0)) observe(*l, x);
      else if (l->seen.to_vector<float>()[0] == 0) observe(*l, x);  // never observed: this batch sets the range
      auto [qmin, qmax] = input_range(*l);
      Tensor scale = l->scale;
      if (l->learn) {
        scale = ops::exp(l->log_scale);
        NoGradGuard ng;
        l->scale.copy_(scale.detach());  // what convert_qat and state_dict readers see
      }
      x = ops::fake_quantize(x, scale, l->zero_point, -1, qmin, qmax);
      Tensor* w = weight_member(mod);
      *w = fake_quantize_weight(param.defined() ? param : *w);
    });
    std::lock_guard<std::mutex> lock(g_mu);
    g_hooks[m] = h;
    r.layers.push_back(path);
  }
  return r;
}

PtqResult convert_qat(nn::Module& model, const Tensor& example, const std::vector<TensorList>& calibration,
                      PtqConfig config) {
  TS_CHECK(is_qat_prepared(model), "convert_qat: the model was not prepared with prepare_qat");
  {
    NoGradGuard ng;
    for (auto& [path, m] : layers_of(model)) {
      if (!prepared(*m)) continue;
      size_t h;
      {
        std::lock_guard<std::mutex> lock(g_mu);
        auto it = g_hooks.find(m);
        TS_CHECK(it != g_hooks.end(), "convert_qat: layer '", path, "' has QAT buffers but no QAT hook (was it "
                 "prepared by prepare_qat, or loaded into a model that was not?)");
        h = it->second;
        g_hooks.erase(it);
      }
      m->remove_hook(h);
      // The weight on its grid, as training saw it; the member the parameter
      // again. A pruned layer's weight_orig takes the rounded masked weight
      // (its pruned entries round to 0 and stay masked).
      const nn::NamedTensors own_params = m->named_parameters(false);
      Tensor param = own(own_params, "weight");
      if (param.defined()) {
        param.copy_(fake_quantize_weight(param));
        *weight_member(*m) = param;
      } else if (Tensor orig = own(own_params, "weight_orig"); orig.defined()) {
        orig.copy_(fake_quantize_weight(ops::mul(orig, own(m->named_buffers(false), "weight_mask"))));
      }
      const nn::NamedTensors ps = m->named_parameters(false), bs = m->named_buffers(false);
      Tensor log_scale = own(ps, "input_log_scale");
      const double scale = log_scale.defined() ? std::exp(static_cast<double>(log_scale.to_vector<float>()[0]))
                                               : own(bs, "input_scale").to_vector<float>()[0];
      const double lo = own(bs, "input_min").to_vector<float>()[0];
      QParams p{scale, static_cast<int64_t>(own(bs, "input_zero_point").to_vector<float>()[0])};
      p.s8 = config.signed_inputs && lo < 0;
      config.fixed_inputs[path] = p;
      // A float model again: the QAT state leaves the layer.
      for (const char* n : {"input_scale", "input_zero_point", "input_min", "input_max", "input_batches"}) m->unregister(n);
      if (log_scale.defined()) m->unregister("input_log_scale");
    }
  }
  compile::CaptureOptions co;
  co.dynamic.push_back({0, 0, "N"});
  co.input_names = {"x"};
  const bool was_training = model.is_training();
  model.eval();
  compile::Graph g = compile::capture_module(model, example, co);
  if (was_training) model.train();
  return quantize_static(g, calibration, config);
}

}  // namespace tessera::quant
