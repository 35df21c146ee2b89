#pragma once
// Post-training static int8 quantization of a compiled graph.
//
//   compile::Graph g = ...;                        // an f32 inference graph (capture / tessera export)
//   auto r = quant::quantize_static(g, batches, {.observer = {.kind = "percentile"}});
//   tessera::Model int8(std::move(r.graph));       // or compile::save(r.graph, dir)
//   std::printf("%s", r.report.text().c_str());
//
// Steps: batch norm is folded into the convolutions and linear layers before
// it (the compiler's fold-batch-norm pass); every conv2d and linear layer with
// frozen f32 weights (and the ReLU that follows it, fused) is a candidate;
// the calibration batches run through the f32 graph while an observer per
// activation records its range; then each candidate becomes an int8_conv2d /
// int8_linear (per-channel symmetric s8 weights, per-tensor affine u8
// activations, bias and ReLU in the requantizing epilogue). Activations stay
// u8 between int8 layers, through max pooling and reshapes; a
// quantize_per_tensor / dequantize_per_tensor pair is placed only where the
// graph enters or leaves int8. Layers named in `skip`, and ops int8 has no
// kernel for, stay f32 and are listed in the report with the reason.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/compile/graph.h"
#include "tessera/quant/observer.h"

namespace tessera::quant {

struct PtqConfig {
  ObserverConfig observer;
  // Module scopes kept in float ("features.0" also keeps "features.0.x").
  std::vector<std::string> skip;
  // The largest u8 activation code (15 to 255); 0: 255. The int8 graph
  // computes the same on every CPU (Note [int8 without VNNI]).
  int activation_max = 0;
  // A value entering int8 from float (the model's input) whose range is
  // signed is quantized symmetric s8 instead of u8 with a zero point: oneDNN
  // runs s8 convolutions without the zero-point compensation, faster on
  // narrow first layers (measured in docs/benchmarks.md), at twice the step
  // for a range that is far from symmetric.
  bool signed_inputs = true;
  // Input parameters learned by quantization-aware training, by layer (module
  // path): used instead of observed ranges for those inputs, and for the
  // outputs that reach them through pooling and reshapes (convert_qat).
  std::map<std::string, QParams> fixed_inputs;
};

struct PtqLayer {
  std::string scope;          // the module ("features.0"), or the node's value name
  std::string op;             // "conv2d+relu", "linear"
  bool quantized = false;
  std::string reason;         // why it stayed float
  QParams input, output;      // quantized layers: their activations' parameters
  bool output_u8 = true;      // false: the layer dequantizes into f32 (its users are float)
};

struct PtqReport {
  std::vector<PtqLayer> layers;
  int64_t batches = 0;
  std::vector<std::string> float_ops;  // other compute left in f32: "softmax x1"
  int quantized() const;
  std::string text() const;  // a table for people
};

struct PtqResult {
  compile::Graph graph;
  PtqReport report;
};

// `calibration`: input lists for the graph (one per batch; at least one).
PtqResult quantize_static(const compile::Graph& graph, const std::vector<TensorList>& calibration,
                          const PtqConfig& config = {});

// A PtqConfig from parsed JSON/YAML: {observer: minmax|moving_average|
// percentile|entropy, percentile, averaging_constant, bins, skip: [...],
// activation_max}; an unknown key or a wrong type is an error naming it.
PtqConfig ptq_config_from_json(const nlohmann::json& j);

}  // namespace tessera::quant
