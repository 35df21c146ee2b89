// The CPU's LLM kernels (backend/llm_kernels.h): the entries of the chosen
// instruction set's kernel table, and the packed layouts of qgemm.h.
#include "backend/cpu/backend.h"
#include "backend/cpu/kernel_table.h"

namespace tessera::cpu {
namespace {

void layer_norm_row(const float* x, const float* w, const float* b, float* y, int64_t n, float eps) {
  kernels().layer_norm_fwd[idx(DType::F32)](x, w, b, y, nullptr, nullptr, 1, n, eps, false);
}
void gelu_row(float* x, int64_t n, bool erf) {
  char* data[2] = {reinterpret_cast<char*>(x), reinterpret_cast<char*>(x)};
  const int64_t strides[2] = {4, 4};
  kernels().unary[static_cast<int>(erf ? UnaryKernel::Gelu : UnaryKernel::GeluTanh)][idx(DType::F32)](data, strides,
                                                                                                     n, nullptr);
}
void to_f32_row(DType from, const void* x, int64_t n, float* out) {
  char* data[2] = {reinterpret_cast<char*>(out), const_cast<char*>(static_cast<const char*>(x))};
  const int64_t strides[2] = {4, static_cast<int64_t>(dtype_size(from))};
  kernels().cast[idx(from)][idx(DType::F32)](data, strides, n, nullptr);
}
void log_softmax_row(const float* x, float* y, int64_t n) {
  kernels().softmax_fwd[idx(DType::F32)](x, y, 1, n, /*log=*/true);
}
int64_t act_bytes(int64_t cols) { return packed_act_bytes(cols); }
int64_t matrix_bytes(QFormat f, int64_t rows, int64_t cols) { return packed_matrix_bytes(f, rows, cols); }
int64_t scratch(int64_t n_keys) { return attention_scratch(n_keys); }

backend::LlmKernels build() {
  const KernelTable& kt = kernels();
  backend::LlmKernels l;
  for (int d = 0; d < kNumDTypes; ++d) {
    l.skinny_rows[d] = kt.skinny_rows[d];
    l.skinny_rows_packed[d] = kt.skinny_rows_packed[d];
    l.skinny_pack[d] = kt.skinny_pack[d];
  }
  l.skinny_rows_bf16 = kt.skinny_rows_bf16;
  for (int f = 0; f < kNumQFormats; ++f) {
    l.qdot_rows[f] = kt.qdot_rows[f];
    l.qdequant_rows[f] = kt.qdequant_rows[f];
    l.qgemm_rows[f] = kt.qgemm_rows[f];
  }
  l.quantize_act = kt.quantize_act;
  l.qpack_act = kt.qpack_act;
  l.pack_rows = kPackRows;
  static_assert(kPackRows % 4 == 0, "the skinny kernels' row groups (2 or 4) divide the packed groups");
  l.packed_act_bytes = act_bytes;
  l.packed_matrix_bytes = matrix_bytes;
  l.qpack_weights = qpack_weights;
  l.rms_norm_row = kt.rms_norm_row;
  l.layer_norm_row = layer_norm_row;
  l.rope_row = kt.rope_row;
  l.swiglu_row = kt.swiglu_row;
  l.gelu_row = gelu_row;
  l.to_f32_row = to_f32_row;
  l.log_softmax_row = log_softmax_row;
  l.kv_store_k = kv_store_k;
  l.kv_store_v = kv_store_v;
  l.paged_attention_set = kt.paged_attention_set;
  l.attention_scratch = scratch;
  return l;
}

}  // namespace

const backend::LlmKernels* llm_kernels() {
  static const backend::LlmKernels table = build();
  return &table;
}

}  // namespace tessera::cpu
