// GGUF tensors as f32 (dequantize_gguf_tensor, include/tessera/llm/gguf.h):
// the float types converted, the quantized ones through the LLM kernels'
// dequantizing rows, as the engine's own products read them.
#include <algorithm>

#include "backend/backend.h"
#include "backend/llm_kernels.h"
#include "quant_view.h"
#include "tessera/core/error.h"
#include "tessera/core/parallel.h"
#include "tessera/llm/gguf.h"

namespace tessera::llm {

Tensor dequantize_gguf_tensor(const GgufFile& f, const GgufTensorInfo& t) {
  const int64_t cols = t.ne[0], rows = cols == 0 ? 0 : t.numel() / cols;
  switch (t.type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
      return f.tensor(t.name).to(DType::F32).reshape({rows, cols});
    case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::Q4_K: case GgmlType::Q6_K: {
      backend::QuantMatrix m;
      m.format = *detail::qformat_of(t.type);
      m.rows = rows;
      m.cols = cols;
      m.data = reinterpret_cast<const uint8_t*>(f.tensor_data(t));
      Tensor w = empty({rows, cols}, TensorOptions(DType::F32, Device(DeviceType::CPU)));
      auto* out = static_cast<float*>(w.raw_data());
      const auto& kt = backend::llm_kernels(DeviceType::CPU);
      parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
        kt.qdequant_rows[static_cast<int>(m.format)](m, r0, r1, out + r0 * cols);
      });
      return w;
    }
    default: TS_ERROR(f.what(), ": tensor '", t.name, "' is ", ggml_type_name(t.type), ", which Tessera does not "
                      "dequantize yet (F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K it does)");
  }
}

}  // namespace tessera::llm
