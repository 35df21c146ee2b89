#pragma once
// Quantization-aware training: the model trains with the rounding int8 will
// apply, so it learns weights that survive it; convert_qat then builds the
// real int8 graph from what it learned.
//
//   quant::prepare_qat(*model, {});          // or a `qat:` section in a tessera train config
//   ... train as usual ...
//   auto r = quant::convert_qat(*model, example, calibration);   // an int8 graph (quant/ptq.h)
//
// Note [QAT layers]
// prepare_qat gives every Conv2d and Linear (but those in `skip`) a forward
// pre-hook that fake-quantizes (ops::fake_quantize) what the int8 layer will
// see: its input per tensor as u8 codes (or s8 for a signed model input),
// and its weight per output channel as symmetric s8. The input's range is
// observed while training (a moving average of each batch's min and max, the
// buffers input_min / input_max) and turned into the buffers input_scale /
// input_zero_point; with learn_scales the scale is trained instead, as the
// parameter input_log_scale (scale = exp of it: positive, and an optimizer
// step changes it by a ratio) through fake_quantize's LSQ gradient, after the
// first batch set it. The weight's scales follow the
// weight (amax / 127 of the current values). In eval mode the observed
// parameters are used as they are, so evaluating a QAT model measures the
// int8 model's accuracy. The buffers are in state_dict, so checkpoints
// resume; loading one: prepare the fresh model first (a recipe's `qat`
// section does it), then load_state_dict. Pruned layers (quant/prune.h) stay
// pruned: prune first, then prepare.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/nn/module.h"
#include "tessera/quant/ptq.h"

namespace tessera::quant {

struct QatConfig {
  std::vector<std::string> skip;     // module paths kept float (and everything below them)
  bool learn_scales = false;         // activation scales trained (LSQ) instead of observed
  double averaging_constant = 0.01;  // weight of each batch in the moving-average range
  int activation_max = 0;            // as PtqConfig::activation_max (0: 255)
  bool signed_inputs = true;         // as PtqConfig::signed_inputs
};
nlohmann::json to_json(const QatConfig& c);
// Unknown keys and wrong types are errors naming them.
QatConfig qat_config_from_json(const nlohmann::json& j);

struct QatReport {
  std::vector<std::string> layers;  // prepared (module paths)
  std::vector<std::string> skipped;
  std::string str() const;
};

// Prepares every Conv2d and Linear of `model` (Note [QAT layers]). Preparing
// twice is an error; a layer with quantized weights (quantize_weights) stays as it is.
QatReport prepare_qat(nn::Module& model, const QatConfig& c = {});
bool is_qat_prepared(const nn::Module& model);

// The int8 graph of a trained QAT model: each prepared layer's weight is
// rounded to its grid (the values training saw), the hooks are removed (the
// model is a float model again), the model is traced on `example` (batch
// dimension dynamic) and quantize_static builds the int8 graph with each
// layer's learned input parameters in place of observed ones. `calibration`
// is only used for ranges no layer learned (none in a model whose layers are
// all prepared), and may be empty then.
PtqResult convert_qat(nn::Module& model, const Tensor& example, const std::vector<TensorList>& calibration = {},
                      PtqConfig config = {});

}  // namespace tessera::quant
