#pragma once
// How the engine's quantized weight types map onto the backend's quantized
// formats (backend/quant_format.h): one place for the loader, which repacks
// them, and the engine, which runs them.
#include <optional>

#include "backend/quant_format.h"
#include "tessera/llm/engine.h"

namespace tessera::llm::detail {

// The backend's format for a GGUF type it multiplies in int8; none for the
// float types (F32, F16, BF16).
inline std::optional<backend::QFormat> qformat_of(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: return backend::QFormat::Q8_0;
    case GgmlType::Q4_0: return backend::QFormat::Q4_0;
    case GgmlType::Q4_K: return backend::QFormat::Q4_K;
    case GgmlType::Q6_K: return backend::QFormat::Q6_K;
    default: return std::nullopt;
  }
}

// A quantized matrix as the kernels see it: the GGUF blocks where the file
// maps them. `w` must have a type qformat_of knows.
inline backend::QuantMatrix quant_view(const Model::Matrix& w) {
  backend::QuantMatrix qm;
  qm.format = *qformat_of(w.type);
  qm.rows = w.rows;
  qm.cols = w.cols;
  qm.data = static_cast<const uint8_t*>(w.data);
  return qm;
}

}  // namespace tessera::llm::detail
