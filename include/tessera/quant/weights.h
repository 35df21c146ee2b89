#pragma once
// Weight-only quantization: the Linear layers of a model keep their weights
// in q8_0, q4_0, int8 (per row) or int4 (per group) and compute with
// ops::quantized_linear. Activations stay float, or are quantized to int8 on
// the fly (`activations: int8`, the dynamic-quantization path). See
// docs/quantization.md for the formats, their accuracy and speed.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/tensor.h"
#include "tessera/nn/module.h"

namespace tessera::quant {

struct WeightQuantConfig {
  std::string format = "int8";        // q8_0 | q4_0 | int8 | int4
  int64_t group = 32;                 // int4: weights per scale/min (a multiple of 32 up to 256)
  std::string activations = "float";  // float | int8
  // Module paths kept in float ("lm_head", "transformer.h.0.attn.c_attn"); a
  // path also covers everything below it.
  std::vector<std::string> skip;
};

// {"format", "group", "activations", "skip"}: how a quantized checkpoint
// records it (state.json "quantization"), so loading rebuilds the same layers.
nlohmann::json to_json(const WeightQuantConfig& c);
// Validates every field; errors name the field and what it accepts.
WeightQuantConfig weight_quant_config_from_json(const nlohmann::json& j);

// What quantize_weights did, layer by layer.
struct WeightQuantReport {
  std::vector<std::string> quantized;                        // module paths
  std::vector<std::pair<std::string, std::string>> kept;     // path, why it stayed float
  int64_t bytes_before = 0, bytes_after = 0;                 // of the Linear weights considered
  std::string str() const;                                   // a table for people
};

// The packed tensors of one f32 weight [out, in]; see ops::quantized_linear.
struct QuantizedWeight {
  Tensor qweight, scales, mins;
};
QuantizedWeight quantize_weight(const Tensor& weight, const std::string& format, int64_t group = 32);

// Quantizes every Linear of `model` in place (except those in cfg.skip, and
// those whose shape the format cannot hold, which are listed in the report).
// The model should be in eval mode for inference; the biases stay trainable.
WeightQuantReport quantize_weights(nn::Module& model, const WeightQuantConfig& cfg);

// Checks every quantized Linear's scales (and mins, and the scales inside
// q8_0/q4_0 blocks) are finite: a file with a NaN or infinite scale would
// otherwise give NaN outputs silently. The error names the layer and the row.
// `tessera eval/info/export` run it after loading a quantized checkpoint.
void check_quantized_weights(nn::Module& model);

}  // namespace tessera::quant
