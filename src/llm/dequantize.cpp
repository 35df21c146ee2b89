// GGUF tensors as f32 (dequantize_gguf_tensor, include/tessera/llm/gguf.h):
// the float types converted, the quantized ones through the backend's
// dequantize_weight, the same rows the engine's own products read.
#include "backend/backend.h"
#include "quant_view.h"
#include "tessera/core/error.h"
#include "tessera/llm/gguf.h"

namespace tessera::llm {

Tensor dequantize_gguf_tensor(const GgufFile& f, const GgufTensorInfo& t) {
  const int64_t cols = t.ne[0], rows = cols == 0 ? 0 : t.numel() / cols;
  switch (t.type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
      return f.tensor(t.name).to(DType::F32).reshape({rows, cols});
    case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::Q4_K: case GgmlType::Q6_K: {
      // The mapped blocks as a u8 tensor (no copy: the file outlives the call).
      const backend::QFormat format = *detail::qformat_of(t.type);
      const int64_t row_bytes = backend::qrow_bytes(format, cols);
      Tensor blocks = from_blob(const_cast<char*>(f.tensor_data(t)), {rows, row_bytes}, DType::U8);
      Tensor w = empty({rows, cols}, TensorOptions(DType::F32, Device::cpu()));
      if (rows > 0) backend::kernels(w).dequantize_weight({format, rows, cols, 0, blocks, {}, {}}, w);
      return w;
    }
    default: TS_ERROR(f.what(), ": tensor '", t.name, "' is ", ggml_type_name(t.type), ", which Tessera does not "
                      "dequantize yet (F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K it does)");
  }
}

}  // namespace tessera::llm
