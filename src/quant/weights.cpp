// Weight-only quantization of Linear layers.
#include "tessera/quant/weights.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "backend/quant_format.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/half.h"
#include "tessera/nn/linear.h"
#include "quant/layers.h"
#include "tessera/ops/ops.h"

namespace tessera::quant {
namespace {

Tensor bytes_to(const std::vector<uint8_t>& bytes, DType dt, Shape shape) {
  Tensor t = empty(shape, dt);
  TS_CHECK(static_cast<size_t>(t.numel()) * dtype_size(dt) == bytes.size(), "quantize: internal size mismatch");
  std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

}  // namespace

QuantizedWeight quantize_weight(const Tensor& weight, const std::string& format, int64_t group) {
  const backend::QFormat f = backend::qformat_from_name(format);
  TS_CHECK(weight.defined() && weight.dim() == 2 && is_floating(weight.dtype()), "quantize_weight: expected a 2-D "
           "float weight [out_features, in_features], got ",
           weight.defined() ? dtype_name(weight.dtype()) + (" " + shape_str(weight.shape())) : std::string("none"));
  NoGradGuard no_grad;
  Tensor w = weight.detach().to(DType::F32).contiguous();
  const int64_t rows = w.size(0), cols = w.size(1);
  const int64_t g = f == backend::QFormat::Int4 ? group : 0;
  backend::QuantizedWeights q = backend::quantize_ref(f, static_cast<const float*>(w.raw_data()), rows, cols, g);
  QuantizedWeight out;
  out.qweight = bytes_to(q.data, DType::U8, {rows, backend::qrow_bytes(f, cols)});
  if (f == backend::QFormat::Int8) out.scales = bytes_to(q.scales, DType::F32, {rows});
  if (f == backend::QFormat::Int4) {
    out.scales = bytes_to(q.scales, DType::F16, {rows, cols / g});
    out.mins = bytes_to(q.mins, DType::F16, {rows, cols / g});
  }
  return out;
}

WeightQuantReport quantize_weights(nn::Module& model, const WeightQuantConfig& cfg) {
  const backend::QFormat f = backend::qformat_from_name(cfg.format);
  TS_CHECK(cfg.activations == "float" || cfg.activations == "int8", "quantize_weights: activations must be 'float' "
           "or 'int8', got '", cfg.activations, "'");
  if (f == backend::QFormat::Int4)
    TS_CHECK(cfg.group >= 32 && cfg.group <= 256 && cfg.group % 32 == 0, "quantize_weights: int4 group must be a "
             "multiple of 32 from 32 to 256, got ", cfg.group);
  for (const auto& s : cfg.skip) {
    bool found = false;
    for (auto& [path, m] : model.named_modules()) found = found || path == s;
    TS_CHECK(found, "quantize_weights: skip entry '", s, "' names no module of the model");
  }
  WeightQuantReport rep;
  for (auto& [path, m] : model.named_modules()) {
    auto* lin = dynamic_cast<nn::Linear*>(m);
    if (!lin) continue;
    const std::string name = path.empty() ? "(root)" : path;
    if (lin->quantized) {
      rep.kept.emplace_back(name, "already quantized (" + lin->quantized->format + ")");
      continue;
    }
    const int64_t f32_bytes = lin->weight.numel() * 4;
    rep.bytes_before += f32_bytes;
    auto keep = [&](std::string why) {
      rep.kept.emplace_back(name, std::move(why));
      rep.bytes_after += f32_bytes;
    };
    if (detail::skipped(path, cfg.skip)) {
      keep("skipped by the config");
      continue;
    }
    bool pruned = false;
    for (const auto& [n, t] : lin->named_parameters(false)) pruned = pruned || n == "weight_orig";
    if (pruned) {
      keep("pruned: call make_pruning_permanent first");
      continue;
    }
    try {
      backend::check_qshape(f, lin->in_features, f == backend::QFormat::Int4 ? cfg.group : 0);
    } catch (const Error& e) {
      keep(e.what());
      continue;
    }
    QuantizedWeight q = quantize_weight(lin->weight, cfg.format, cfg.group);
    nn::Linear::Quantized lq;
    lq.format = cfg.format;
    lq.group = f == backend::QFormat::Int4 ? cfg.group : 0;
    lq.activations = cfg.activations;
    lq.qweight = q.qweight;
    lq.scales = q.scales;
    lq.mins = q.mins;
    for (const Tensor* t : {&q.qweight, &q.scales, &q.mins})
      if (t->defined()) rep.bytes_after += t->numel() * static_cast<int64_t>(dtype_size(t->dtype()));
    lin->set_quantized(std::move(lq));
    rep.quantized.push_back(name);
  }
  return rep;
}

void check_quantized_weights(nn::Module& model) {
  for (const auto& entry : model.named_modules()) {
    const std::string& path = entry.first;  // named, not a structured binding: the lambda below captures it
    auto* lin = dynamic_cast<nn::Linear*>(entry.second);
    if (!lin || !lin->quantized) continue;
    const auto& q = *lin->quantized;
    const backend::QFormat f = backend::qformat_from_name(q.format);
    auto fail = [&](const char* what, int64_t row, float v) {
      TS_ERROR("quantized weights of '", path, "' (", q.format, "): ", what, " of row ", row, " is ", v,
               "; scales must be finite (the file is damaged, or was not written by quantize_weights)");
    };
    TS_CHECK(q.qweight.defined() && q.qweight.dtype() == DType::U8 && q.qweight.dim() == 2 && q.qweight.is_contiguous(),
             "quantized weights of '", path, "': qweight must be a contiguous 2-D u8 tensor");
    const int64_t rows = q.qweight.size(0), rb = q.qweight.size(1);
    const auto* data = static_cast<const uint8_t*>(q.qweight.raw_data());
    if (backend::qformat_is_block(f)) {
      // Each block's f16 scales: d first (Q6_K: last), Q4_K's dmin after d.
      const int64_t bs = backend::qblock_bytes(f);
      std::vector<int64_t> at = {f == backend::QFormat::Q6_K ? bs - 2 : 0};
      if (f == backend::QFormat::Q4_K) at.push_back(2);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b + bs <= rb; b += bs)
          for (int64_t o : at) {
            uint16_t h;
            std::memcpy(&h, data + r * rb + b + o, 2);
            float d = Half::to_float(h);
            if (!std::isfinite(d)) fail("a block scale", r, d);
          }
    }
    for (const Tensor* t : {&q.scales, &q.mins}) {
      if (!t->defined()) continue;
      Tensor v = t->to(DType::F32).contiguous();
      const float* p = static_cast<const float*>(v.raw_data());
      const int64_t per_row = v.numel() / std::max<int64_t>(rows, 1);
      for (int64_t i = 0; i < v.numel(); ++i)
        if (!std::isfinite(p[i])) fail(t == &q.scales ? "a scale" : "a min", i / std::max<int64_t>(per_row, 1), p[i]);
    }
  }
}

nlohmann::json to_json(const WeightQuantConfig& c) {
  return {{"format", c.format}, {"group", c.group}, {"activations", c.activations}, {"skip", c.skip}};
}

WeightQuantConfig weight_quant_config_from_json(const nlohmann::json& j) {
  TS_CHECK(j.is_object(), "quantization: expected an object {format, group, activations, skip}, got ", j.dump());
  WeightQuantConfig c;
  for (const auto& [k, v] : j.items()) {
    if (k == "format") {
      TS_CHECK(v.is_string(), "quantization.format: expected a string (q8_0, q4_0, int8, int4), got ", v.dump());
      c.format = v.get<std::string>();
      backend::qformat_from_name(c.format);
    } else if (k == "group") {
      TS_CHECK(v.is_number_integer(), "quantization.group: expected an integer, got ", v.dump());
      c.group = v.get<int64_t>();
    } else if (k == "activations") {
      TS_CHECK(v.is_string() && (v == "float" || v == "int8"), "quantization.activations: expected 'float' or "
               "'int8', got ", v.dump());
      c.activations = v.get<std::string>();
    } else if (k == "skip") {
      TS_CHECK(v.is_array(), "quantization.skip: expected a list of module paths, got ", v.dump());
      for (const auto& e : v) {
        TS_CHECK(e.is_string(), "quantization.skip: expected module paths (strings), got ", e.dump());
        c.skip.push_back(e.get<std::string>());
      }
    } else {
      TS_ERROR("quantization: unknown key '", k, "' (expected format, group, activations, skip)");
    }
  }
  return c;
}

std::string WeightQuantReport::str() const {
  std::ostringstream os;
  os << "quantized " << quantized.size() << " Linear layers; kept " << kept.size() << " in float\n";
  for (const auto& [name, why] : kept) os << "  float: " << name << " (" << why << ")\n";
  os << "Linear weights: " << bytes_before << " bytes -> " << bytes_after << " bytes";
  if (bytes_before > 0) os << " (" << (100.0 * static_cast<double>(bytes_after) / static_cast<double>(bytes_before)) << "%)";
  os << "\n";
  return os.str();
}

}  // namespace tessera::quant
